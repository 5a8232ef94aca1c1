"""The ShopOps crash harness: kill the loop at every labelled point, resume, check, report.

The public face — what someone scripting the harness or writing a plugin imports::

    import harness

    scenario = harness.load_scenario("scenarios/o1001.toml")
    plan = harness.ExecutionPlan(scenario, harness.CrashSchedule.parse("t6.gateway_accepted"))
    result = harness.execute(plan, workdir)          # one execution: an ExecutionResult
    assert result.verdict is harness.Verdict.PASS

    run = harness.run_scenarios([scenario], out_dir)  # a kill matrix: a RunResult
    harness.write_reports(run, out_dir)
    harness.grade(harness.Sut(path=folder), out_dir)  # a student's folder: a Grade

Everything else is internal: the sub-packages (``docs/design.md``, "Layout") may change
between versions. The names are imported on first use (PEP 562), so a worker process
that imports one sub-package of the harness does not import all of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.grading.grade import Grade, grade
    from harness.model import (
        CheckId,
        CheckResult,
        CheckStatus,
        CrashSchedule,
        Evidence,
        ExecutionPlan,
        ExecutionResult,
        KillPoint,
        RunResult,
        Scenario,
        Sut,
        Verdict,
    )
    from harness.plan.scenario import ScenarioError, load_scenario, load_scenarios
    from harness.reports.write import write_reports
    from harness.run.execution import execute
    from harness.run.runner import run as run_scenarios

#: Each public name and the module that defines it (``(module, name there)`` where the
#: names differ: ``harness.run`` is the sub-package, so the runner's ``run`` is
#: ``run_scenarios`` here).
_HOMES: dict[str, str | tuple[str, str]] = {
    "CheckId": "harness.model", "CheckResult": "harness.model",
    "CheckStatus": "harness.model", "CrashSchedule": "harness.model",
    "Evidence": "harness.model", "ExecutionPlan": "harness.model",
    "ExecutionResult": "harness.model", "KillPoint": "harness.model",
    "RunResult": "harness.model", "Scenario": "harness.model", "Sut": "harness.model",
    "Verdict": "harness.model",
    "ScenarioError": "harness.plan.scenario", "load_scenario": "harness.plan.scenario",
    "load_scenarios": "harness.plan.scenario",
    "execute": "harness.run.execution", "run_scenarios": ("harness.run.runner", "run"),
    "write_reports": "harness.reports.write",
    "Grade": "harness.grading.grade", "grade": "harness.grading.grade",
}

__all__ = [
    "CheckId", "CheckResult", "CheckStatus", "CrashSchedule", "Evidence", "ExecutionPlan",
    "ExecutionResult", "Grade", "KillPoint", "RunResult", "Scenario", "ScenarioError", "Sut",
    "Verdict", "execute", "grade", "load_scenario", "load_scenarios", "run_scenarios",
    "write_reports",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its home on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not one of ``__all__``.
    """
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    module, attr = home if isinstance(home, tuple) else (home, name)
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
