"""From checks to a verdict: ``pass``, ``fail`` or ``unknown``.

``unknown`` is never a pass. It means the execution did not test what it claimed: a
scheduled kill point was never reached, a worker died of anything other than the harness's
own SIGKILL (the exit status must be exactly ``-SIGKILL``) or exited non-zero, a deadline
passed, or the harness could not read its evidence.

``fail`` means the evidence is complete and a check failed that the scenario did not
expect to fail — or a check it expected to fail (a teaching demo) passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.checks import CheckResult
from harness.evidence import Evidence, WorkerRun

if TYPE_CHECKING:
    from harness.execution import ExecutionPlan

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
#: Exit status of ``shopops-chaos run`` for each overall verdict.
EXIT_STATUS = {PASS: 0, FAIL: 1, UNKNOWN: 2}


def judge(ev: Evidence, checks: tuple[CheckResult, ...], plan: ExecutionPlan
          ) -> tuple[str, tuple[str, ...]]:
    """The verdict of one execution and the reasons for it.

    Args:
        ev: the evidence.
        checks: ``harness.checks.run_checks(ev)``.
        plan: supplies the schedule and the scenario's expected failing checks (they apply
            to executions with at least one kill; the no-kill baseline must be clean).

    Returns:
        ``(verdict, reasons)``.
    """
    unknown = [f"kill point {k} was never reached" for k in ev.unreached]
    wanted = plan.scenario.expect_worker_error
    stopped = [w for w in ev.workers if wanted and _stopped_with(w, wanted)]
    for w in ev.workers:
        if not w.expected_exit and w not in stopped:
            how = ("was SIGKILLed but not by the harness" if w.returncode == -9
                   and not w.killed_by_harness else f"exited with status {w.returncode}")
            if w.timed_out:
                how = "passed its deadline"
            unknown.append(f"worker {w.index} ({w.role}) {how}; stderr: "
                           f"{w.stderr_tail.splitlines()[-1] if w.stderr_tail else '(empty)'}")
    unknown += list(ev.errors)
    if unknown:
        return UNKNOWN, tuple(unknown)
    expected = plan.scenario.expect_failing if plan.schedule.kills else frozenset()
    failing = {c.check_id for c in checks if not c.passed}
    reasons = [f"{c.check_id}: {c.detail}" for c in checks
               if not c.passed and c.check_id not in expected]
    reasons += [f"{c}: expected to fail, but passed" for c in sorted(expected - failing)]
    if wanted and not stopped:
        reasons.append(f"expected a worker to stop with {wanted}; none did")
    if reasons:
        return FAIL, tuple(reasons)
    notes = [f"{c}: failed as the scenario expects" for c in sorted(expected)]
    notes += [f"worker {w.index} stopped with {wanted}, as the scenario expects"
              for w in stopped]
    return PASS, tuple(notes)


def _stopped_with(w: WorkerRun, error: str) -> bool:
    """The worker exited 1 on its own, its last stderr line naming ``error``."""
    last = w.stderr_tail.strip().splitlines()[-1:] if w.stderr_tail else []
    return (w.returncode == 1 and not w.killed_by_harness and not w.timed_out
            and bool(last) and f"{error}:" in last[0])
