"""An implementation that does nothing and exits 0 (found by the new-user attack of stop 18):
its fault is said to be its own, and the story does not wait out deadlines for points that
no live worker can reach any more."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.grading.retry import outside_cause
from harness.launch.fork import ForkLauncher
from harness.model import CrashSchedule, ExecutionPlan
from harness.model.plan import Sut
from harness.plan.scenario import load_scenario
from harness.run.execution import ExecutionResult, execute

ROOT = Path(__file__).resolve().parent.parent
#: Far longer than these executions take: waiting it out is what must not happen.
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def noop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    code = tmp_path_factory.mktemp("noop")
    shutil.copytree(ROOT / "shopops", code / "shopops",
                    ignore=shutil.ignore_patterns("__pycache__"))
    main = code / "shopops" / "__main__.py"
    main.write_text('import sys\nif "--db" in sys.argv:\n    sys.exit(0)\n' + main.read_text())
    return code


def _execute(code: Path, scenario: str, out: Path) -> ExecutionResult:
    plan = ExecutionPlan(load_scenario(ROOT / "scenarios" / f"{scenario}.toml"),
                         CrashSchedule(), Sut(path=code, trusted=True))
    with ForkLauncher(code_path=str(code.resolve()), fallback=None) as launcher:
        return execute(plan, out, launcher=launcher, worker_timeout_s=DEADLINE_S)


def test_a_story_stopped_by_what_the_implementation_left_is_not_a_harness_error(
        noop: Path, tmp_path: Path) -> None:
    """The story's forged ticket needs a checkpoint to write into: ``CheckpointNotFound``
    was reported as "harness error during the story", and the grade ran the execution
    again as if the machine were to blame. It is the implementation's doing: said so, and
    not retried."""
    result = _execute(noop, "forged-ticket-in-state", tmp_path / "exe")
    assert result.verdict != "pass", result.reasons
    errors = result.evidence.errors
    assert any(e.startswith("the story could not go on: CheckpointNotFound") for e in errors), \
        errors
    assert not any(e.startswith("harness error") for e in errors), errors
    assert outside_cause(result) is None


@pytest.mark.parametrize(("scenario", "error"), [
    ("two-resumers", "no concurrent worker reached t6.checkpoint_loaded"),
    ("takeover-steps", "to be held"),
])
def test_a_hold_no_live_worker_can_reach_does_not_wait_out_the_deadline(
        noop: Path, tmp_path: Path, scenario: str, error: str) -> None:
    """Resumers started together, or a worker started to be held: every worker exited at
    once, so the story says the point was never reached instead of waiting ``DEADLINE_S``
    (it waited 30 s, the default deadline, in each such scenario of a grade)."""
    result = _execute(noop, scenario, tmp_path / "exe")
    assert result.verdict != "pass", result.reasons
    assert any(error in e for e in result.evidence.errors), result.evidence.errors
    assert not any(w.timed_out for w in result.evidence.workers)
    assert result.elapsed_s < DEADLINE_S / 2, result.elapsed_s
