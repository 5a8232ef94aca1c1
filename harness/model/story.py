"""A scenario's story as data: an ordered list of steps the story engine interprets
(``harness.story.engine``), and the frozen record the engine hands back (``docs/design.md``,
"The story engine"; ``scenarios/README.md`` documents each step kind with an example).

Today's tables (``[human]``, ``[concurrency]``, ``[storage]``) are shorthands that expand
into these steps (``harness.plan.story_plan.expand``); a ``[[story]]`` array of tables writes
them out. Kill schedules apply across the whole story.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from harness.model.evidence import HistoryMark, HistoryRead, PowerCut, WorkerRun
from harness.model.kinds import HumanAction, StorageFault, TicketKind, WorkerRole
from harness.model.observations import History, StoredRow
from harness.model.points import KillPoint
from shopops_contract.approvals import DEFAULT_GATE, NOTE_GATE

__all__ = ["DEFAULT_GATE", "DEFAULT_OWNER", "NOTE_GATE", "NO_RECOVERY", "PAST_LEASE", "ClockStep",
           "HoldStep", "HumanStep", "ReleaseStep", "Step", "StepKind", "StorageStep",
           "StoryRecord", "Wait", "When", "WorkersStep"]


class StepKind(StrEnum):
    """The kinds of story step (``step = "..."`` in a ``[[story]]`` table)."""

    WORKERS = "workers"  # start workers of a role
    HUMAN = "human"  # a human decision on a named gate
    HOLD = "hold"  # hold (or slow) the worker that reaches a labelled point
    RELEASE = "release"  # let a held worker go on, and wait for it
    CLOCK = "clock"  # advance the simulated clock
    STORAGE = "storage"  # inject a storage fault


class When(StrEnum):
    """When a step runs: ``always``, or only if a worker of the latest ``workers`` step was
    SIGKILLed by the harness (``killed``: the recovery of a kill)."""

    ALWAYS = "always"
    KILLED = "killed"


class Wait(StrEnum):
    """What a ``workers`` step waits for: every worker to ``exit``, or (``held``) only until
    one of them is held at a ``hold`` point (it goes on in the background until ``release``)."""

    EXIT = "exit"
    HELD = "held"


#: A recovery role meaning: no worker follows a killed one.
NO_RECOVERY = "none"
#: The default lease owner id of a worker: ``worker-<launch index>``.
DEFAULT_OWNER = "worker-{index}"
#: ``ClockStep.advance_s``'s value for "just past one lease": the scenario's TTL + 1 s.
PAST_LEASE = "lease"


@dataclass(frozen=True)
class WorkersStep:
    """Start ``count`` workers of ``role``.

    Attributes:
        role: ``start``, ``recheck`` (a resume before any approval; never started once the
            human approved), ``resume``, ``takeover`` (a resume that takes over an expired
            lease) or ``migrate`` (the explicit v1->v2 migration).
        count: how many workers.
        together: start them at once; the first to load the checkpoint is held there until
            every other one has stopped, so they truly overlap (migrators: the first inside
            its migration, ``ckpt.migration_before_commit``, is held there until every
            other one reached ``ckpt.migration_started``, about to wait for its lock).
            Otherwise one after another.
        recover: the role of the worker that follows one the harness SIGKILLed (again
            after each kill, within the execution's worker budget; with leases the killed
            holder's lease expires first on the simulated clock), or ``None`` (``"none"``).
        owner: the lease owner id, ``{index}`` replaced by the worker's launch index; a
            fixed id reuses one identity across restarts. Only with leases.
        wait: ``exit`` or ``held`` (see ``Wait``).
        when: see ``When``.
        from_seq: resume from the checkpoint with this ``seq`` instead of the latest (the
            contract's ``resume --from-seq N``; a LangGraph target: that checkpoint's
            ``checkpoint_id``), or ``None``.
        from_phase: resume from the newest checkpoint of the loop in this phase when the
            worker starts (resolved by the harness to its ``seq``), or ``None``.
    """

    role: WorkerRole = WorkerRole.RESUME
    count: int = 1
    together: bool = False
    recover: WorkerRole | None = None
    owner: str = DEFAULT_OWNER
    wait: Wait = Wait.EXIT
    when: When = When.ALWAYS
    kind: StepKind = StepKind.WORKERS
    from_seq: int | None = None
    from_phase: str | None = None


@dataclass(frozen=True)
class HumanStep:
    """The human decides on gate ``gate`` of the case.

    Attributes:
        action: ``approve`` or ``reject``.
        gate: the gated action (``send_email``).
        twice: approve, then approve again (the queue must refuse the second).
        feedback: the reviewer's feedback carried by a rejection (the loop redrafts).
        ticket: ``issued`` (the queue's ticket), or a bad ticket offered to the next
            workers instead (``TicketKind``).
        delay_hours: the decision lands this many hours after the park (simulated clock:
            the queue's and the later workers' clocks run ahead).
        at: decide when a worker reaches this point (mid-story) instead of now.
        when: see ``When``.
    """

    action: HumanAction = HumanAction.APPROVE
    gate: str = DEFAULT_GATE
    twice: bool = False
    feedback: str | None = None
    ticket: TicketKind = TicketKind.ISSUED
    delay_hours: float = 0.0
    at: KillPoint | None = None
    when: When = When.ALWAYS
    kind: StepKind = StepKind.HUMAN


@dataclass(frozen=True)
class HoldStep:
    """Hold the worker that reaches ``at`` (counted from the start of the execution):
    until a ``release`` step, or (``ms`` > 0) for ``ms`` milliseconds — a slow step."""

    at: KillPoint
    ms: int = 0
    when: When = When.ALWAYS
    kind: StepKind = StepKind.HOLD


@dataclass(frozen=True)
class ReleaseStep:
    """Let the worker held at ``at`` go on, and wait for every worker still running; or,
    with ``on``, let it go on only when a worker reaches ``on`` (counted from the start of
    the execution), in the middle of a later step, and wait for nothing: the held worker is
    reaped at the end of the step that released it. A held migrator released when a second
    one reaches ``ckpt.migration_started#2`` commits while the second waits for its lock."""

    at: KillPoint
    when: When = When.ALWAYS
    kind: StepKind = StepKind.RELEASE
    on: KillPoint | None = None


@dataclass(frozen=True)
class ClockStep:
    """Advance the simulated clock of later workers and of the queue by ``advance_s``
    seconds, or by ``"lease"``: the scenario's lease TTL plus one second."""

    advance_s: float | str = PAST_LEASE
    when: When = When.ALWAYS
    kind: StepKind = StepKind.CLOCK


@dataclass(frozen=True)
class StorageStep:
    """Inject ``fault`` into the checkpoint database: a bad row (``corrupt_json``,
    ``truncated_json``, ``invalid_utf8``, ``unknown_version``) now; a v1 history
    (``v1_checkpoint``, before any worker); or (``lock``) an exclusive SQLite lock held for
    ``ms`` milliseconds from the moment a worker reaches ``at``."""

    fault: StorageFault
    at: KillPoint | None = None
    ms: int = 300
    when: When = When.ALWAYS
    kind: StepKind = StepKind.STORAGE


Step = WorkersStep | HumanStep | HoldStep | ReleaseStep | ClockStep | StorageStep


@dataclass(frozen=True)
class StoryRecord:
    """What the story engine did and saw, handed to evidence collection.

    Attributes:
        steps: the steps it interpreted (expanded from the shorthands if need be).
        workers: every worker run, in launch order.
        errors: problems that cut the story short (a deadline, a refused human act, a hold
            no worker reached, a harness error).
        approval_event: the trace ``seq`` of the (first) approval, or ``None``.
        checkpoint_seq_at_approval: the highest checkpoint ``seq`` when the human approved.
        history_at_approval: the checkpoint history's file and rows as the harness read
            them at that approval (``HistoryMark``), or ``None``.
        injected: checkpoint rows the harness appended (storage faults, a forged ticket).
        v1_rows: v1 rows installed from the fixture (0 if none).
        checkpoints_db, approvals_db, gateway_db: the execution's files.
        workdir: the execution's folder.
        target_history: a target's durable writes, read after the story through its own
            API (``harness.targets.drive``); ``None`` for a loop with a checkpoint store.
        target_error: why a target's state could not be read, or ``None``.
        history_reads: a target's history as read after each worker (``HistoryRead``).
        power_cuts: the power cuts after kills, in order (``PowerCut``).
        crash_state: the fingerprint of the durable state the first kill left
            (``harness.story.crash_state``), or ``None``: no kill, or a state no fingerprint
            can stand for.
    """

    steps: tuple[Step, ...]
    workers: tuple[WorkerRun, ...]
    errors: tuple[str, ...]
    approval_event: int | None
    checkpoint_seq_at_approval: int | None
    injected: tuple[StoredRow, ...]
    v1_rows: int
    checkpoints_db: Path
    approvals_db: Path
    gateway_db: Path
    workdir: Path
    target_history: History | None = None
    target_error: str | None = None
    history_at_approval: HistoryMark | None = None
    power_cuts: tuple[PowerCut, ...] = ()
    crash_state: str | None = None
    history_reads: tuple[HistoryRead, ...] = ()
