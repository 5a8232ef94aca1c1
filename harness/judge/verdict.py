"""From checks to a verdict: ``pass``, ``fail`` or ``unknown`` (``docs/design.md``,
"Verdict precedence").

1. **fail** — a check failed on evidence the harness gathered itself (its gateway's log,
   the checkpoint history it read, the approval records, its own trace), whatever the
   workers' exits: two deliveries stay two deliveries when the worker then exits with a
   typed refusal. A check the scenario expects to fail (a teaching demo) that passed is a
   failure too.
2. **unknown** — no check failed, but some check could not be decided because the evidence
   it needs is missing: a scheduled kill point was never reached, a file could not be read,
   the story was cut short (a deadline, a harness error), or a worker ended in a way nobody
   declared (exited non-zero, or SIGKILLed by someone other than the harness). Each such
   check carries the reason (``CheckResult.undecided``). ``unknown`` is never a pass.
3. **pass** — every check decided and held.

A check a ``[target]`` cannot feed is **not applicable** (``CheckResult.applicable``): it
is neither decided nor undecided, and counts for no verdict.

A worker error the scenario declares (``expect.worker_error``) is an outcome, not a gap.
"""

from __future__ import annotations

import signal
from dataclasses import replace

from harness.judge.checks.registry import needs as needs_of
from harness.model import (
    CheckResult,
    CheckStatus,
    Evidence,
    EvidenceSource,
    ExecutionPlan,
    Gap,
    Verdict,
    WorkerRun,
)

__all__ = ["EXIT_STATUS", "decide", "gaps", "judge", "stopped_with"]

PASS, FAIL, UNKNOWN = Verdict.PASS, Verdict.FAIL, Verdict.UNKNOWN
#: Exit status of ``shopops-chaos run`` for each overall verdict.
EXIT_STATUS = {v: v.exit_status for v in Verdict}


def gaps(ev: Evidence, plan: ExecutionPlan) -> tuple[Gap, ...]:
    """Every piece of missing evidence, causes before what they cause: the story cut
    short (a harness error, a deadline), undeclared worker exits, kill points never
    reached, files the harness could not read. (A user saw "kill point ... was never
    reached" first, and the harness error that explained it second: stop 36.)"""
    out = [Gap(EvidenceSource.STORY, e) for e in ev.errors]
    wanted = plan.scenario.expect_worker_error
    for w in ev.workers:
        if w.expected_exit or (wanted and stopped_with(w, wanted)):
            continue
        how = ("was SIGKILLed but not by the harness" if w.returncode == -signal.SIGKILL
               and not w.killed_by_harness else f"exited with status {w.returncode}")
        if w.timed_out:
            how = "passed its deadline"
        out.append(Gap(EvidenceSource.WORKERS, f"worker {w.index} ({w.role}) {how}; stderr: "
                       f"{w.stderr_tail.splitlines()[-1] if w.stderr_tail else '(empty)'}"))
    out += [Gap(EvidenceSource.SCHEDULE, f"kill point {k} was never reached")
            for k in ev.unreached]
    out += list(ev.gaps)
    return tuple(out)


def decide(ev: Evidence, checks: tuple[CheckResult, ...], plan: ExecutionPlan
           ) -> tuple[CheckResult, ...]:
    """Each check decided or marked undecided, by the one rule of this module.

    A check is undecided (``undecided`` set to the first gap's reason) when a gap concerns
    it — a universal one (schedule, story, workers) or one in a file it reads
    (``harness.judge.checks.registry.Check.needs``) — and it passed, or it failed but reads the file
    that could not be read (its failure may be an artefact of the missing file). A failure on
    evidence that was read stays a failure. A check that decided itself undecided stays so.
    """
    found = gaps(ev, plan)
    out = []
    for c in checks:
        if c.undecided is not None or not c.applicable:  # not applicable stays so
            out.append(c)
            continue
        needs = needs_of(c.check_id)
        mine = [g for g in found if g.source.universal or g.source in needs]
        unread = [g for g in mine if not g.source.universal]
        blocking = unread if not c.passed else mine
        out.append(replace(c, passed=False, undecided=blocking[0].reason) if blocking else c)
    return tuple(out)


def judge(ev: Evidence, checks: tuple[CheckResult, ...], plan: ExecutionPlan
          ) -> tuple[Verdict, tuple[str, ...]]:
    """The verdict of one execution and the reasons for it.

    Args:
        ev: the evidence.
        checks: ``harness.judge.checks.registry.run_checks(ev)``, decided or not
            (``decide`` is applied).
        plan: supplies the schedule and the scenario's expected failing checks (they apply
            to executions with at least one kill; the no-kill baseline must be clean) and
            its declared worker error.

    Returns:
        ``(verdict, reasons)``: for ``fail`` the failing checks (and any expected failure
        that did not happen); for ``unknown`` every gap, then which checks it left
        undecided; for ``pass`` the expected outcomes that happened.
    """
    decided = decide(ev, checks, plan)
    found = gaps(ev, plan)
    wanted = plan.scenario.expect_worker_error
    stopped = [w for w in ev.workers if wanted and stopped_with(w, wanted)]
    expected = plan.expected_failing
    status = {c.check_id: c.status for c in decided}
    failures = [f"{c.check_id}: {c.detail}" for c in decided
                if c.status is CheckStatus.FAIL and c.check_id not in expected]
    failures += [f"{c}: expected to fail, but passed" for c in sorted(expected)
                 if status.get(c) is CheckStatus.PASS]
    if wanted and not stopped and (failures or not found):  # with gaps alone: unknown;
        # beside other failures it is said too, so that a grade item that has no check of
        # its own (it asks only for the refusal) sees it (found by an attack: a leftover
        # process's failure hid that no worker was refused, and the item scored full marks)
        failures.append(f"expected a worker to stop with {wanted}; none did")
    if failures:
        return FAIL, tuple(failures)
    undecided = [c.check_id for c in decided if c.status is CheckStatus.UNDECIDED]
    if found or undecided:
        reasons = [g.reason for g in found]
        if undecided:
            which = ("every check" if len(undecided) == len(decided) > 1
                     else ", ".join(undecided))
            reasons.append(f"undecided: {which}")
        return UNKNOWN, tuple(reasons)
    notes = [f"{c}: failed as the scenario expects" for c in sorted(expected)]
    notes += [f"worker {w.index} stopped with {wanted}, as the scenario expects"
              for w in stopped]
    return PASS, tuple(notes)


def stopped_with(w: WorkerRun, error: str) -> bool:
    """The worker exited 1 on its own, its last stderr line naming ``error``."""
    last = w.stderr_tail.strip().splitlines()[-1:] if w.stderr_tail else []
    return (w.returncode == 1 and not w.killed_by_harness and not w.timed_out
            and bool(last) and f"{error}:" in last[0])
