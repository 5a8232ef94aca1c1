"""What the harness observed in one execution — plain frozen data (``docs/design.md``,
"Evidence"). The harness never takes the loop's word: the trace is its own, checkpoint rows
and approval records are read from the files by the harness, deliveries come from its own
gateway's log.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from harness.model.kinds import EventKind, EvidenceSource, WorkerRole
from harness.model.observations import (
    ApprovalRecord,
    DurableWrite,
    History,
    HistorySource,
    LeaseSeen,
    StoredRow,
    TicketRecord,
    rows_digest,
)
from harness.model.points import KillPoint

__all__ = ["NO_KEY", "OWN_FAULT_SIGNALS", "Delivery", "Event", "Evidence", "Gap", "GatewayLog",
           "HistoryMark", "HistoryRead", "NoteDelivery", "PowerCut", "RequestRecord", "WorkerRun",
           "key_text", "rows_digest"]

#: How a request or delivery without an idempotency key is written, in check evidence and
#: in every report (one spelling: ``key_text``).
NO_KEY = "(no key)"


def key_text(key: str | None) -> str:
    """``key``, or ``NO_KEY`` when there is none (a keys-off client)."""
    return NO_KEY if key is None else key


@dataclass(frozen=True)
class RequestRecord:
    """One ``POST /v1/messages`` (or, in the note ledger, ``POST /v1/order-notes``) as the
    gateway saw it. ``status`` is the status decided (with
    ``drop_after_accept`` no reply reached the client); ``received_epoch`` is seconds since
    the epoch; ``delivery_id``/``duplicate`` say which delivery the answer named;
    ``worker_pid``/``worker_uid`` the connection's owner as the kernel says (``None``: not
    found), ``claimed_pid`` what the ``X-ShopOps-Worker-Pid`` header said."""

    seq: int
    received_at: str
    received_epoch: float
    idempotency_key: str | None
    body_sha256: str
    case_id: str | None
    status: int
    fault: str | None
    worker_pid: int | None
    remote_port: int | None
    delivery_id: str | None
    duplicate: bool
    claimed_pid: int | None = None
    worker_uid: int | None = None

    @property
    def forged(self) -> bool:
        """The header named another process than the connection's owner."""
        return (self.claimed_pid is not None and self.worker_pid is not None
                and self.claimed_pid != self.worker_pid)


@dataclass(frozen=True)
class Delivery:
    """One email the gateway delivered (committed before any reply was written)."""

    delivery_id: str
    request_seq: int
    idempotency_key: str | None
    body_sha256: str
    case_id: str
    to: str
    subject: str
    body: str
    delivered_at: str


@dataclass(frozen=True)
class NoteDelivery:
    """One order note the harness's mock order service added (``POST /v1/order-notes``),
    committed before any reply: ``delivery_id`` is the note's id (``"nte-000001"``)."""

    delivery_id: str
    request_seq: int
    idempotency_key: str | None
    body_sha256: str
    case_id: str
    order_id: str
    body: str
    delivered_at: str


@dataclass(frozen=True)
class GatewayLog:
    """The durable log: every request and every delivery, in order — the email gateway's
    (``requests``, ``deliveries``) and, in a ledger of its own, the order service's
    (``note_requests``, ``notes``: empty when no note was ever sent). A check about the
    email reads only the first two, so an order note is never taken for an email."""

    requests: tuple[RequestRecord, ...]
    deliveries: tuple[Delivery, ...]
    note_requests: tuple[RequestRecord, ...] = ()
    notes: tuple[NoteDelivery, ...] = ()
    #: requests the gateway refused (403) because another uid than the execution's sent
    #: them (another execution's process, a sealed execution only): logged, never
    #: delivered, and kept out of ``requests``/``note_requests`` so that no check of the
    #: execution counts what someone else did to it
    foreign: tuple[RequestRecord, ...] = ()

    def deliveries_for(self, case_id: str) -> tuple[Delivery, ...]:
        """The email deliveries made for ``case_id``."""
        return tuple(d for d in self.deliveries if d.case_id == case_id)

    def notes_for(self, case_id: str) -> tuple[NoteDelivery, ...]:
        """The order notes added for ``case_id``."""
        return tuple(n for n in self.notes if n.case_id == case_id)


@dataclass(frozen=True)
class Gap:
    """Evidence a check may need that is missing: ``source`` (an ``EvidenceSource``) and
    ``reason`` (one line: what is missing and why, e.g. the SQLite error)."""

    source: EvidenceSource
    reason: str


@dataclass(frozen=True)
class PowerCut:
    """A power cut after the kill at ``point`` (of worker ``worker``): the state folder went
    back to its last sync (``harness.launch.power``). ``committed``: the case's checkpoint
    ``seq`` numbers readable just before the cut (what the loop had committed); ``lost``:
    those the cut took away or changed (committed but never made durable; all of them when
    the store cannot be read after the cut); ``files_lost``: the folder's files removed or
    rolled back; ``unread``: why the rows could not be read before the cut (``None``: they
    were; a target's own storage is not read)."""

    point: KillPoint
    worker: int
    committed: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    files_lost: tuple[str, ...] = ()
    unread: str | None = None


@dataclass(frozen=True)
class HistoryMark:
    """What identified the case's checkpoint history when the harness read it at the
    human's approval, so that the history at the end can be shown to still begin with it.

    Attributes:
        file_id: ``(st_dev, st_ino)`` of the checkpoint file by ``lstat``, as the harness
            saw it (``None``: no regular file there yet).
        seq: the highest ``seq`` of the case then (``Evidence.checkpoint_seq_at_approval``;
            0: none).
        rows: how many rows of the case it read, all with ``seq`` up to ``seq``.
        digest: ``rows_digest`` of those rows.
        unreadable: why the harness could not read the history at the approval (not a
            checkpoint file of ours, too long, gone although its trace shows a committed
            checkpoint), or ``None``: read. A loop's history is readable whenever the
            human acts; one that is not, then readable at the end, was hidden, replaced
            or repaired in between, and nothing read at the end can be set against the
            approval.
    """

    file_id: tuple[int, int] | None
    seq: int
    rows: int
    digest: str
    unreadable: str | None = None


@dataclass(frozen=True)
class HistoryRead:
    """One read of a target's history through its own ``history`` function during the
    story (``harness.story.workers``): after a worker was reaped while no other worker ran,
    or once more after the story (``worker`` ``None``) when nothing was read after its
    last worker. ``history_not_replaced`` judges that each read begins with the one before
    (``harness.judge.checks.support.history_replaced``).

    Attributes:
        worker: the index of the worker reaped just before the read, or ``None``: after
            the story.
        role: that worker's role (``None`` after the story).
        killed: that worker was killed by the harness.
        items: the SHA-256 (hex) of each object the target's ``history`` returned, as its
            canonical JSON (sorted keys, no spaces, UTF-8), oldest first
            (``harness.judge.observers.target.item_digests``).
        unreadable: why the history could not be read then (a non-zero exit, a deadline,
            malformed JSON), or ``None``: read; then ``items`` is empty.
    """

    worker: int | None
    role: WorkerRole | None = None
    killed: bool = False
    items: tuple[str, ...] = ()
    unreadable: str | None = None

    def after(self) -> str:
        """``after worker 1 (resume, killed)`` / ``after the story``: for evidence lines."""
        if self.worker is None:
            return "after the story"
        return (f"after worker {self.worker} ({self.role}"
                + (", killed)" if self.killed else ")"))


@dataclass(frozen=True)
class Event:
    """One entry of the ordered trace: ``seq`` (0-based), ``t_ms`` (milliseconds since the
    execution started), ``kind`` (an ``EventKind``), ``label``, ``pid``, ``worker`` (index),
    ``ref`` (what the event names: the kill point ``t6.request_leaving#2`` of a kill, the delivery
    id of a delivery, the ticket id of an approval) and a free-text ``detail``."""

    seq: int
    t_ms: float
    kind: EventKind
    label: str | None = None
    pid: int | None = None
    worker: int | None = None
    detail: str = ""
    ref: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, EventKind):
            object.__setattr__(self, "kind", EventKind(self.kind))


#: Signals a process gets by its own doing (its code crashed, a system call its sandbox
#: forbids, a limit or a timer it set: ``signal(7)``), not from outside: a worker that dies
#: of one was not stopped by the environment.
OWN_FAULT_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE,
                               signal.SIGABRT, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSYS,
                               signal.SIGTRAP, signal.SIGALRM, signal.SIGVTALRM,
                               signal.SIGPROF})


@dataclass(frozen=True)
class WorkerRun:
    """One worker process of the execution.

    Attributes:
        index: 0-based, in launch order.
        role: why it was started (``WorkerRole``: ``start``, ``recheck`` — a resume before
            the approval, which must park again —, ``resume``, …; its string is taken too).
        pid, returncode: as reaped (``-9`` = SIGKILL).
        killed_by_harness, timed_out: see ``harness.launch.processes.ExitInfo``.
        leftovers: pids of its process group found alive after it exited.
        stdout_tail, stderr_tail: the last lines it printed.
        elapsed_s: seconds from launch to reap.
        phase_after, phase_before: the phase of the latest checkpoint once it was gone /
            before it started, read by the harness from SQLite (``None``: no checkpoint, or
            unreadable).
        draft_before: the digest of the draft that checkpoint held (``None``: none).
        owner: the lease owner id it was given (``--owner``; ``None``: no leases).
        lease_before, lease_after: the case's lease record when it started / once it was
            gone, read by the harness (``LeaseSeen``; ``None``: leases off, a target, or no
            readable lease record — see ``docs/contract.md``, "Leases").
    """

    index: int
    role: WorkerRole
    pid: int
    returncode: int
    killed_by_harness: bool
    timed_out: bool
    leftovers: tuple[int, ...]
    stdout_tail: str
    stderr_tail: str
    elapsed_s: float
    phase_after: str | None = None
    phase_before: str | None = None
    draft_before: str | None = None
    owner: str | None = None
    lease_before: LeaseSeen | None = None
    lease_after: LeaseSeen | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.role, WorkerRole):
            object.__setattr__(self, "role", WorkerRole(self.role))

    @property
    def expected_exit(self) -> bool:
        """Exited 0 on its own, or died of exactly the harness's SIGKILL."""
        if self.timed_out:
            return False
        if self.killed_by_harness:
            return self.returncode == -signal.SIGKILL
        return self.returncode == 0

    @property
    def stopped_from_outside(self) -> str | None:
        """How this worker was stopped by something other than its own code and the
        harness's schedule, or ``None``: it passed its deadline, or it died of a signal the
        harness did not send that is not one of its own faults (``OWN_FAULT_SIGNALS``: an
        OOM kill, a person's ``kill -9``, a CI runner's SIGTERM). The kernel does not say
        who sent a signal, so a loop that signals itself counts too: what it did not do
        afterwards is then not known, never a pass."""
        if self.timed_out:
            return f"worker {self.index} ({self.role}) passed its deadline"
        if self.returncode < 0 and not self.killed_by_harness \
                and -self.returncode not in OWN_FAULT_SIGNALS:
            return (f"worker {self.index} ({self.role}) died of signal {-self.returncode} "
                    "that the harness did not send")
        return None


@dataclass(frozen=True)
class Evidence:
    """Everything about one execution.

    Attributes:
        execution_id: ``scenario[schedule]``.
        case_id: the case.
        events: the ordered trace.
        workers: every worker run.
        checkpoints: the case's checkpoint rows as stored, read raw from SQLite (empty for a
            target, which keeps its own storage).
        history: the case's durable writes as an observer read them (the checkpoint store,
            or a target's ``history``), with what that source can observe.
        approval_requests, tickets: the harness's approval records for the case.
        gateway: the gateway's own log (all cases).
        approval_event: the trace ``seq`` of the human's approval, or ``None``.
        checkpoint_seq_at_approval: the highest checkpoint ``seq`` when the human approved.
        history_at_approval: what identified the checkpoint history then (its file and its
            rows up to that ``seq``, ``HistoryMark``; ``unreadable`` set when it could
            not be read then), or ``None`` (no approval, or a target).
        checkpoints_file: ``(st_dev, st_ino)`` of the checkpoint file the harness read
            ``checkpoints`` from at the end (``None``: no regular file there).
        unreached: scheduled kills that never fired.
        errors: harness-side problems while the story ran (a deadline passed, the human
            could not act, a harness error): the story was cut short.
        gaps: evidence the harness could not read (``Gap``: which source, why).
        workdir: where the execution's files are.
        expected_deliveries: what the case must end with (the scenario's expectation).
        injected: checkpoint rows the harness itself appended (storage faults, a forged
            ticket), as it wrote them.
        v1_rows: v1 rows installed from the fixture (0 if none).
        migrations: ``schema_migrations`` records ``(name, rows)`` read afterwards.
        max_attempts: the recovery attempts the scenario allows the SUT before it must
            dead-letter the case (``None``: not set, the SUT's own default).
        gates: the gated actions the case has (the scenario says: ``send_email``, and
            ``add_order_note`` with ``sut.order_note``); an action not listed must not
            happen at all, one listed must happen once when the case completes.
        target: the loop under test: ``reference`` (the reference or a package run as
            ``python -m MODULE``) or a target's name (``python``, ``langgraph``, ``dbos``).
        power_cuts: the power cuts after kills, in order (``PowerCut``): what was
            committed before each and what it lost.
        crash_state: the fingerprint of the durable state the first kill left
            (``StoryRecord.crash_state``); never read by a check.
        history_reads: a target's history as the harness read it during the story, in
            order (``HistoryRead``: after each worker, the last one the history judged);
            empty for a loop with a checkpoint store.
    """

    execution_id: str
    case_id: str
    events: tuple[Event, ...]
    workers: tuple[WorkerRun, ...]
    checkpoints: tuple[StoredRow, ...]
    approval_requests: tuple[ApprovalRecord, ...]
    tickets: tuple[TicketRecord, ...]
    gateway: GatewayLog
    approval_event: int | None
    checkpoint_seq_at_approval: int | None
    unreached: tuple[KillPoint, ...]
    errors: tuple[str, ...] = ()
    gaps: tuple[Gap, ...] = ()
    workdir: str = ""
    expected_deliveries: int = 1
    injected: tuple[StoredRow, ...] = ()
    v1_rows: int = 0
    migrations: tuple[tuple[str, int], ...] = ()
    max_attempts: int | None = None
    gates: tuple[str, ...] = ("send_email",)
    target: str = "reference"
    history_at_approval: HistoryMark | None = None
    checkpoints_file: tuple[int, int] | None = None
    history: History = History(HistorySource.CHECKPOINT_STORE)
    power_cuts: tuple[PowerCut, ...] = ()
    crash_state: str | None = None
    history_reads: tuple[HistoryRead, ...] = ()

    @property
    def cut_short(self) -> bool:
        """The story did not run to its end (``cut_short_by``): what did not happen may
        simply not have had the chance to."""
        return self.cut_short_by is not None

    @property
    def cut_short_by(self) -> str | None:
        """Why the story did not run to its end, or ``None``: its first error (a deadline,
        a harness error, the human unable to act), else a last worker stopped from outside
        (``WorkerRun.stopped_from_outside``): no worker was started after it, so what it
        did not do had no other chance. A worker stopped from outside that others followed
        did not end the story: what they did not do is theirs."""
        if self.errors:
            return self.errors[0]
        if not self.workers:
            return None
        return max(self.workers, key=lambda w: w.index).stopped_from_outside

    @property
    def kills(self) -> tuple[Event, ...]:
        """The kill events of the trace, in order."""
        return tuple(e for e in self.events if e.kind == EventKind.KILL)

    @property
    def loop_checkpoints(self) -> tuple[StoredRow, ...]:
        """The checkpoint rows the loop wrote (without the harness's injected ones)."""
        injected = {r.seq for r in self.injected}
        return tuple(r for r in self.checkpoints if r.seq not in injected)

    @property
    def loop_writes(self) -> tuple[DurableWrite, ...]:
        """The durable writes the loop made (without the rows the harness injected)."""
        injected = {r.seq for r in self.injected}
        return tuple(w for w in self.history.writes if w.seq not in injected)

    @property
    def deliveries(self) -> int:
        """How many emails the gateway delivered for the case."""
        return len(self.gateway.deliveries_for(self.case_id))
