"""Two runs in one harness process (two grades at once, as a grading server or
``tests/test_sealed_targets.py`` runs them): the end of one run reaps its own workers, never
the other's. It once reaped every live worker of the process: a grade that finished first
SIGKILLed the other grade's target ``history`` read (exit -9, no output), which lost its
evidence and its score."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.launch.processes import REGISTRY, spawn

ROOT = Path(__file__).resolve().parent.parent
_SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _sleeper(tmp_path: Path, name: str):  # type: ignore[no-untyped-def]
    return spawn(_SLEEPER, env={}, cwd=str(tmp_path), stdout=str(tmp_path / f"{name}.out"),
                 stderr=str(tmp_path / f"{name}.err"), index=0)


@pytest.mark.processes
def test_reaping_a_run_reaps_its_own_workers_only(tmp_path: Path) -> None:
    mine, theirs = object(), object()
    a = REGISTRY.within(mine, _sleeper, tmp_path, "a")
    b = REGISTRY.within(theirs, _sleeper, tmp_path, "b")
    outside = _sleeper(tmp_path, "c")
    try:
        assert REGISTRY.reap_all(mine) == 1
        assert a.wait(10).sigkilled
        assert not b.exited() and not outside.exited()
        assert REGISTRY.live(theirs) == [b]
    finally:
        for worker in (a, b, outside):
            worker.kill()
            worker.wait(10)


@pytest.mark.processes
def test_the_end_of_a_run_leaves_another_runs_worker_running(tmp_path: Path) -> None:
    """A worker of another run, alive while a whole run starts, executes and ends in this
    process, is still running after it (before the fix: SIGKILLed by the run's end)."""
    from harness.model import CrashSchedule
    from harness.plan.scenario import load_scenario
    from harness.run.runner import run

    other = REGISTRY.within(object(), _sleeper, tmp_path, "other")
    try:
        result = run([load_scenario(ROOT / "scenarios" / "late-approval.toml")],
                     tmp_path / "r", jobs=1, schedule=CrashSchedule.parse("t4.parked"))
        assert result.verdict == "pass" and len(result.results) == 1
        assert not other.exited(), "the run's end killed another run's worker"
    finally:
        other.kill()
        assert other.wait(10).returncode == -9
