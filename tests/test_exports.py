"""The harness's public face (trio's ``test_exports.py``): ``harness.__all__`` is short and
locked, every name resolves to the object its home defines, and importing ``harness`` (or a
sub-package a worker process needs) imports nothing else of the harness."""

from __future__ import annotations

import subprocess
import sys

import pytest

import harness

PUBLIC = {
    "CheckId", "CheckResult", "CheckStatus", "CrashSchedule", "Evidence", "ExecutionPlan",
    "ExecutionResult", "Grade", "KillPoint", "RunResult", "Scenario", "ScenarioError", "Sut",
    "Verdict", "execute", "grade", "load_scenario", "load_scenarios", "run_scenarios",
    "write_reports",
}


@pytest.mark.pure
def test_the_public_names_are_locked() -> None:
    assert set(harness.__all__) == PUBLIC == set(harness._HOMES)


@pytest.mark.pure
def test_every_public_name_is_its_homes_object() -> None:
    from harness.grading.grade import grade
    from harness.model import ExecutionPlan, Verdict
    from harness.run.runner import run

    assert harness.run_scenarios is run
    assert harness.grade is grade
    assert harness.ExecutionPlan is ExecutionPlan and harness.Verdict is Verdict
    for name in harness.__all__:
        assert getattr(harness, name) is not None
    assert set(harness.__all__) <= set(dir(harness))


@pytest.mark.pure
def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        harness.nothing_here  # noqa: B018


@pytest.mark.io
@pytest.mark.parametrize("module", ["harness", "harness.model", "harness.sandbox.boot",
                                    "harness.targets.worker"])
def test_importing_a_part_imports_no_other_part(module: str) -> None:
    # the public names are imported on first use: a sealed worker's boot or a target
    # worker that imports one module of the harness does not import the run and the story
    code = (f"import sys, {module}; "
            "print(sorted(m for m in sys.modules if m.startswith('harness.run')"
            " or m.startswith('harness.story') or m.startswith('harness.grading')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "[]"
