"""Crash states counted once (issue 27; ``docs/design.md``, "Crash states counted once").

Two executions of one scenario whose first kills left the same durable state
(``harness.story.crash_state``: equal fingerprints) and whose remaining kills are equal have
the same continuation: the same workers start from the same files with the same story ahead
of them. The double-crash matrix is where that pays: a single-kill execution ``p`` and every
double ``p > q`` share their first crash, so when ``p``'s state equals that of an earlier
single ``r`` (the class's representative), ``p > q`` is the continuation of ``r > q``. It is
reported as equivalent to it (``ExecutionResult.equivalent_to``), not run — except a seeded
sample, which runs and must come out with the same verdict; a different verdict, or a
different set of second kill points, is a harness error (``Equivalence.mismatches``).

Only for trusted code: the reference loop, with a deterministic policy, not a target (an
untrusted implementation could tell two runs apart; ``Sut.untrusted``). Two singles join a
class only when their own verdicts are equal too: the part of an execution before its first
kill is judged with it, and a prefix that failed must not be hidden behind one that passed.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from harness.model import (
    CrashMode,
    CrashSchedule,
    Equivalence,
    ExecutionPlan,
    ExecutionResult,
    KillPoint,
)

__all__ = ["DEFAULT_SAMPLE", "Classes", "Equivalence", "applies", "equivalent_result",
           "twin_plan"]

#: The share of equivalent executions that run all the same, to check the claim.
DEFAULT_SAMPLE = 0.05
#: The policy whose drafts are a function of the state (``shopops.policy``).
_DETERMINISTIC = "deterministic"


def applies(plan: ExecutionPlan) -> bool:
    """Equivalence may stand for runs of ``plan``'s scenario: trusted code (the reference,
    no ``--sut``), not a target, a deterministic policy, a double-crash matrix, plain
    SIGKILLs (a power cut rolls the state back after the fingerprint's moment)."""
    s = plan.scenario
    return (not plan.sut.untrusted and s.target is None and s.policy == _DETERMINISTIC
            and s.double and s.crash_mode is CrashMode.KILL)


class Classes:
    """The classes of equal first-crash states met so far in one repeat of a run (used by
    one thread: the runner's loop).

    Args:
        seed: the sample's seed (the same seed samples the same executions).
        sample: the share of equivalent executions to run anyway (0 to 1).
    """

    def __init__(self, seed: int = 0, sample: float = DEFAULT_SAMPLE) -> None:
        if not 0.0 <= sample <= 1.0:
            raise ValueError(f"sample: {sample!r} must be between 0 and 1")
        self.seed = seed
        self.sample = sample
        self._reps: dict[tuple[str, str, str], tuple[ExecutionPlan, tuple[KillPoint, ...]]] = {}
        self.mismatches: list[str] = []

    def twin_of(self, single: ExecutionPlan, result: ExecutionResult,
                seconds: list[ExecutionPlan]) -> ExecutionPlan | None:
        """The representative single whose doubles ``seconds`` (the doubles of ``single``,
        its result ``result``) are equivalent to, or ``None``: run them (the first of its
        class becomes the representative). Second kill points that differ from the
        representative's are a mismatch (recorded) and run."""
        state = result.evidence.crash_state
        if state is None or not applies(single) or len(single.schedule.kills) != 1:
            return None
        key = (single.scenario.name, state, str(result.verdict))
        mine = tuple(p.schedule.kills[1] for p in seconds)
        known = self._reps.get(key)
        if known is None:
            self._reps[key] = (single, mine)
            return None
        rep, theirs = known
        if theirs != mine:
            self.mismatches.append(
                f"{single.id}: its first crash left the state of {rep.id} but its recovery "
                f"reached other points ({len(mine)} against {len(theirs)}): both run")
            return None
        return rep

    def sampled(self, plan: ExecutionPlan) -> bool:
        """``plan`` is in the seeded sample of equivalent executions that run anyway."""
        digest = hashlib.sha256(f"{self.seed}\0{plan.id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") < self.sample * 2 ** 64

    def compare(self, ran: ExecutionResult, twin: ExecutionResult) -> None:
        """A sampled execution ``ran`` against the ``twin`` it is equivalent to: a different
        verdict is a mismatch (recorded)."""
        if ran.verdict != twin.verdict:
            self.mismatches.append(
                f"{ran.plan.id}: ran as a sample of the executions equivalent to {twin.plan.id} "
                f"and came out {ran.verdict}, not {twin.verdict}")


def twin_plan(plan: ExecutionPlan, rep: ExecutionPlan) -> ExecutionPlan:
    """The double of ``rep`` with ``plan``'s second kill (what ``plan`` is equivalent to)."""
    return replace(plan, schedule=CrashSchedule((rep.schedule.kills[0],
                                                 plan.schedule.kills[1])))


def equivalent_result(plan: ExecutionPlan, twin: ExecutionResult) -> ExecutionResult:
    """``plan``'s result as the one of its ``twin`` (not run): its verdict, checks and
    evidence (whose folder is the twin's: the link), ``elapsed_s`` 0."""
    return replace(twin, plan=plan, evidence=replace(twin.evidence, execution_id=plan.id),
                   elapsed_s=0.0, equivalent_to=twin.plan.id)
