"""A grade that survives a noisy machine: an ``unknown`` caused from outside the
implementation is run again (bounded) and the report says so; an implementation that is
itself the cause is scored as before."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from harness.grading.grade import DEFAULT_RUBRIC, grade
from harness.grading.retry import outside_cause, retry_unknowns
from harness.judge.evidence import Evidence, WorkerRun
from harness.model import CrashSchedule
from harness.model.plan import Sut
from harness.plan.scenario import load_scenarios
from harness.run.execution import ExecutionPlan, ExecutionResult
from harness.services.gateway import GatewayLog

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = load_scenarios([ROOT / "scenarios" / "o1001.toml"])[0]


def result(returncode: int, *, killed: bool = False, timed_out: bool = False,
           verdict: str = "unknown") -> ExecutionResult:
    worker = WorkerRun(0, "start", 100, returncode, killed, timed_out, (), "", "", 0.1,
                       None, None)
    ev = Evidence(execution_id="x", case_id=SCENARIO.case_id, events=(), workers=(worker,),
                  checkpoints=(), approval_requests=(), tickets=(),
                  gateway=GatewayLog((), ()), approval_event=None,
                  checkpoint_seq_at_approval=None, unreached=())
    return ExecutionResult(ExecutionPlan(SCENARIO, CrashSchedule()), ev, (), verdict, (), 0.1)


@pytest.mark.parametrize(("returncode", "killed", "timed_out", "outside"), [
    (-signal.SIGKILL, False, False, True),   # a SIGKILL the harness did not send
    (-signal.SIGTERM, False, False, True),
    (0, False, True, True),                   # a deadline (busy machine, or a hang)
    (-signal.SIGSEGV, False, False, False),   # its own crash
    (-signal.SIGXCPU, False, False, False),   # its own CPU limit
    (1, False, False, False),                 # it exited 1
    (-signal.SIGKILL, True, False, False),    # our own kill is not a cause
])
def test_which_unknowns_have_a_cause_outside_the_implementation(
        returncode: int, killed: bool, timed_out: bool, outside: bool) -> None:
    assert (outside_cause(result(returncode, killed=killed, timed_out=timed_out))
            is not None) is outside


def test_retries_are_bounded_and_noted() -> None:
    calls: list[int] = []

    def again(r: ExecutionResult, attempt: int) -> ExecutionResult:
        calls.append(attempt)
        return result(0, timed_out=True)  # it hangs every time

    stray = result(-signal.SIGTERM)
    out, notes = retry_unknowns([stray, stray, result(0, verdict="pass")], again,
                                attempts=2, budget=1)
    assert calls == [1, 2]  # two more attempts, for one execution only (the budget)
    assert out[0].verdict == "unknown" and "run 3 times" in out[0].reasons[-1]
    assert out[1] is stray and len(notes) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="the flag folder is shared with a sandbox user")
def test_a_stray_signal_does_not_cost_the_item(tmp_path: Path) -> None:
    flags = Path(tempfile.mkdtemp(prefix="shopops-test-flags-"))  # a sandbox user reaches it
    os.chmod(flags, 0o777)
    (flags / "once").write_text("")
    try:
        _stray_signal(tmp_path, flags)
    finally:
        shutil.rmtree(flags)


def _stray_signal(tmp_path: Path, flags: Path) -> None:
    folder = tmp_path / "sut"
    shutil.copytree(ROOT / "shopops", folder / "shopops",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cli = folder / "shopops" / "cli.py"
    cli.write_text(cli.read_text() + (
        "\n_real_main = main\n"
        "def main(argv=None):  # noqa: F811 - the noisy machine: one stray SIGTERM\n"
        "    import signal\n"
        f"    flag = {str(flags / 'once')!r}\n"
        "    if os.path.exists(flag) and 'run' in (argv or sys.argv):\n"
        "        os.remove(flag)\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return _real_main(argv)\n"))
    rubric = [replace(DEFAULT_RUBRIC[3], scenarios=("o1001",))]
    lines: list[str] = []
    graded = grade(Sut(path=folder), tmp_path / "out", rubric=rubric,
                   schedule=CrashSchedule.parse("t4.parked"), say=lines.append)
    assert not (flags / "once").exists()  # the stray signal really happened
    assert graded.score == 10, graded.tests[0].output
    assert "Run again" in graded.output and "signal 15" in graded.output
    assert any(line.startswith("retrying o1001[t4.parked]") for line in lines)
