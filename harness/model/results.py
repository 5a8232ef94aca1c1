"""What came out: one check's result, one execution's result, a whole run's result, and
the roll-up of verdicts — plain frozen data (``docs/design.md``, "The pipeline").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.model.evidence import Evidence
from harness.model.kinds import CheckId, CheckStatus, Verdict
from harness.model.plan import ExecutionPlan
from harness.model.shard import Shard, ShardPlan

__all__ = ["CheckResult", "Counts", "Equivalence", "ExecutionResult", "MatrixGap", "RunResult",
           "roll_up"]


@dataclass(frozen=True)
class CheckResult:
    """One check over one execution's evidence.

    Attributes:
        check_id: the check (a ``CheckId``; its string is taken too and turned into one,
            and a string that names no check raises ``ValueError``).
        passed: the check held. ``False`` when it failed *or* could not be decided.
        detail: one line.
        evidence: the lines a human needs to see why.
        undecided: why the check could not be decided (the evidence it needs is missing),
            or ``None`` when it was decided (``harness.judge.verdict.decide``).
        applicable: ``False`` when the target under test does not expose the state the
            check needs (``harness.judge.checks.targets``): then ``passed`` is ``False`` too, the
            status is ``not_applicable`` and the verdict ignores it — never a pass, never
            an unknown.
    """

    check_id: CheckId
    passed: bool
    detail: str
    evidence: tuple[str, ...] = ()
    undecided: str | None = None
    applicable: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.check_id, CheckId):
            object.__setattr__(self, "check_id", CheckId(self.check_id))

    @property
    def status(self) -> CheckStatus:
        """``pass``, ``fail``, ``undecided`` or ``not_applicable``."""
        if not self.applicable:
            return CheckStatus.NOT_APPLICABLE
        if self.undecided is not None:
            return CheckStatus.UNDECIDED
        return CheckStatus.PASS if self.passed else CheckStatus.FAIL


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one execution: its ``evidence``, the decided ``checks``, the
    ``verdict``, the ``reasons`` behind it and ``elapsed_s`` (seconds). ``equivalent_to``:
    the id of the execution this one was proven equivalent to and not run (its first crash
    left the same state, ``harness.run.equivalence``): then the evidence, checks and
    verdict are that one's, and ``elapsed_s`` is 0."""

    plan: ExecutionPlan
    evidence: Evidence
    checks: tuple[CheckResult, ...]
    verdict: Verdict
    reasons: tuple[str, ...]
    elapsed_s: float
    equivalent_to: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.verdict, Verdict):
            object.__setattr__(self, "verdict", Verdict(self.verdict))

    @property
    def undecided(self) -> tuple[CheckResult, ...]:
        """The checks that could not be decided (each says why in ``undecided``)."""
        return tuple(c for c in self.checks if c.status is CheckStatus.UNDECIDED)


@dataclass(frozen=True)
class ItemScore:
    """A grade's rubric item as every grade report shows it (the console, ``report.md``,
    ``report.html``): ``score`` of ``max_score`` points. ``max_score`` 0 is an item not
    applicable to what was graded (``harness.grading.grade``: a target without that part),
    shown ``n/a``, never a full ``0 / 0`` (found by a new user: it read as a pass)."""

    score: float
    max_score: float

    @property
    def applicable(self) -> bool:
        """Whether the item scores anything here."""
        return self.max_score > 0

    @property
    def shown(self) -> str:
        """``"3 / 5"``, or ``"n/a"``."""
        return f"{self.score:g} / {self.max_score:g}" if self.applicable else "n/a"

    @property
    def mark(self) -> str:
        """``"pass"`` (full marks), ``"fail"`` or ``"na"``: the item's badge and colour."""
        if not self.applicable:
            return "na"
        return "pass" if self.score >= self.max_score else "fail"


@dataclass(frozen=True)
class Counts:
    """How many executions ended ``pass``, ``fail`` and ``unknown``."""

    passed: int = 0
    failed: int = 0
    unknown: int = 0

    @classmethod
    def of(cls, verdicts: Iterable[str]) -> Counts:
        """Count ``verdicts`` (``Verdict`` values or their strings)."""
        vs = [Verdict(v) for v in verdicts]
        return cls(vs.count(Verdict.PASS), vs.count(Verdict.FAIL), vs.count(Verdict.UNKNOWN))

    @property
    def total(self) -> int:
        """All executions counted."""
        return self.passed + self.failed + self.unknown

    def line(self) -> str:
        """``pass N  fail N  unknown N``: how the console says them."""
        return f"pass {self.passed}  fail {self.failed}  unknown {self.unknown}"

    def sentence(self) -> str:
        """``N fail, N unknown, N pass``: how the written reports say them."""
        return f"{self.failed} fail, {self.unknown} unknown, {self.passed} pass"

    def as_dict(self) -> dict[str, int]:
        """``{"pass": n, "fail": n, "unknown": n}`` (the reports' spelling)."""
        return {Verdict.PASS: self.passed, Verdict.FAIL: self.failed,
                Verdict.UNKNOWN: self.unknown}


def roll_up(verdicts: Iterable[str], *, complete: bool = True) -> Verdict:
    """The verdict of many executions — the one roll-up rule: ``fail`` if any failed, else
    ``unknown`` if any is unknown, there were none, or the set is not ``complete`` (an
    interrupted run), else ``pass``."""
    counts = Counts.of(verdicts)
    if counts.failed:
        return Verdict.FAIL
    if counts.unknown or not counts.total or not complete:
        return Verdict.UNKNOWN
    return Verdict.PASS


@dataclass(frozen=True)
class Equivalence:
    """What equivalence did in a run (``harness.run.equivalence``).

    Attributes:
        enabled: equivalence was on (a trusted implementation, ``--exhaustive`` not given).
        run: executions run.
        equivalent: executions reported as equivalent to one run (not run themselves).
        sampled: equivalent executions run all the same to check the claim (counted in
            ``run``).
        mismatches: harness errors: a sampled execution whose verdict differs from its
            twin's, or a state whose second kill points differ from its class's.
    """

    enabled: bool = False
    run: int = 0
    equivalent: int = 0
    sampled: int = 0
    mismatches: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The ``summary.json`` object."""
        return {"enabled": self.enabled, "run": self.run, "equivalent": self.equivalent,
                "sampled": self.sampled, "mismatches": list(self.mismatches)}


@dataclass(frozen=True)
class MatrixGap:
    """Part of a kill matrix that was never planned: the execution its kill points are
    learned from (a scenario's trace run; for a double-crash scenario, a single kill whose
    recovery gives the second kills) was cut short (``Evidence.cut_short_by``: typically a
    worker past its ``--timeout`` deadline), so the points after the last one it reached
    were never planned nor run. How many is not known: only a trace that runs to its end
    says.

    Attributes:
        scenario: the scenario's name.
        learned_from: the id of the execution cut short (``o1001[no-kill]``).
        why: what cut it short (its first error, or the worker stopped from outside).
        reached: the kill points it did reach (each planned and run as usual).
        deadline: a worker of it passed its deadline (``--timeout``): a longer one may let
            it finish.
    """

    scenario: str
    learned_from: str
    why: str
    reached: int
    deadline: bool = False

    def sentence(self) -> str:
        """One line for the console and the reports."""
        hint = "; a longer --timeout lets it finish" if self.deadline else ""
        return (f"{self.scenario}: kill matrix incomplete: {self.learned_from} was cut short "
                f"({self.why}) after {self.reached} kill point(s); any kill point after those "
                f"was never planned nor run (how many, if any, is unknown{hint})")

    def as_dict(self) -> dict[str, object]:
        """The ``summary.json`` object."""
        return {"scenario": self.scenario, "learned_from": self.learned_from,
                "why": self.why, "reached": self.reached, "deadline": self.deadline}


@dataclass(frozen=True)
class RunResult:
    """All executions of one ``shopops-chaos run``.

    Attributes:
        run_id: ``YYYYmmddTHHMMSSZ-<pid>``; the report folder's name.
        out_dir: ``reports/<run_id>``.
        results: executions in plan order (scenario, then kill point order).
        started_at: ISO-8601 UTC.
        elapsed_s: wall seconds.
        interrupted: the run was stopped by SIGINT/SIGTERM before it finished.
        launcher: the launcher's name.
        repeats: for each of ``results``, the repeat (1-based) it belongs to (soak runs,
            ``repeat`` > 1: the same ids come back once per repeat).
        stopped_early: ``fail_fast`` stopped the run at its first failing execution.
        shard: the part of the matrix this run is (``run(shard=...)``), else ``None``.
        shard_plan: how the matrix was cut (every shard's units, ``harness.plan.shard``), which
            ``merge`` compares across shards; ``None`` when not sharded.
        skipped: ``(scenario, why)`` of the scenarios a ``--schedule`` was not run on
            because it is not in their kill matrix (``run(where_planned=True)``).
        equivalence: executions run and proven equivalent (``harness.run.equivalence``);
            a mismatch in it is a harness error: the run's verdict is then never a pass.
        gaps: the kill matrices learned from an execution that was cut short (``MatrixGap``):
            the run's verdict is then never a pass.
        not_run: executions planned but never run (an interrupted run, ``fail_fast``);
            with ``gaps``, more that were never planned.
        unlearned: the scenarios whose kill matrix was never learned, their trace run cut
            off (an interrupted run): none of their kill executions was even planned, so
            ``not_run`` does not count them.
    """

    run_id: str
    out_dir: Path
    results: tuple[ExecutionResult, ...] = ()
    started_at: str = ""
    elapsed_s: float = 0.0
    interrupted: bool = False
    launcher: str = "spawn"
    repeats: tuple[int, ...] = ()
    stopped_early: bool = False
    shard: Shard | None = None
    shard_plan: ShardPlan | None = None
    skipped: tuple[tuple[str, str], ...] = ()
    equivalence: Equivalence = Equivalence()
    gaps: tuple[MatrixGap, ...] = ()
    not_run: int = 0
    unlearned: tuple[str, ...] = ()

    @property
    def incomplete(self) -> bool:
        """The run did not run all of its matrix: interrupted, or a matrix with a gap."""
        return self.interrupted or bool(self.gaps)

    def shortfall(self) -> tuple[str, ...]:
        """What of the matrix did not run, one sentence each (the console and every report
        say them): each ``gaps`` entry, ``unlearned``, then ``not_run``. Empty for a full
        run."""
        out = [gap.sentence() for gap in self.gaps]
        if self.unlearned:
            out.append(f"kill matrix never learned for {', '.join(self.unlearned)} (the trace "
                       "run was cut off): none of its kill executions was planned")
        if self.not_run:
            why = ("the run was interrupted" if self.interrupted
                   else "stopped at the first failure (fail_fast)" if self.stopped_early
                   else "their runs never started")
            out.append(f"{self.not_run} planned execution(s) not run: {why}")
        return tuple(out)

    @property
    def counts(self) -> Counts:
        """The executions' verdicts, counted."""
        return Counts.of(r.verdict for r in self.results)

    @property
    def verdict(self) -> Verdict:
        """``roll_up`` of the executions; an interrupted run, one whose kill matrix has a
        gap (``gaps``: a trace run cut short by its deadline) or one whose equivalence
        claims did not hold (``Equivalence.mismatches``) is never a pass."""
        return roll_up((r.verdict for r in self.results),
                       complete=not self.incomplete and not self.equivalence.mismatches)

    @property
    def exit_status(self) -> int:
        """0 pass, 1 fail, 2 unknown (``Verdict.exit_status``)."""
        return self.verdict.exit_status
