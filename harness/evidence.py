"""Evidence: everything the verdict is computed from, gathered by the harness itself.

The harness never takes the loop's word: the event trace is recorded by the harness (hits
arrive over its channel, kills and approvals are its own acts, deliveries are reported by
its own gateway), checkpoint history is read from the SQLite file by the harness, approval
records from the queue's file, deliveries from the gateway's own log.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.mock_gateway import GatewayLog, read_log
from harness.schedule import KillPoint
from shopops.approvals import ApprovalRequest, Ticket
from shopops.checkpoint import CheckpointRow, read_history


@dataclass(frozen=True)
class Event:
    """One entry of the ordered trace: ``seq`` (0-based), ``t_ms`` (milliseconds since the
    execution started), ``kind`` (``worker_start``, ``hit``, ``kill``, ``worker_exit``,
    ``approve``, ``delivery``, ``error``), ``label``, ``pid``, ``worker`` (index), ``ref``
    (what the event names: the kill point ``t6.request_leaving#2`` of a kill, the delivery
    id of a delivery, the ticket id of an approval) and a free-text ``detail``."""

    seq: int
    t_ms: float
    kind: str
    label: str | None = None
    pid: int | None = None
    worker: int | None = None
    detail: str = ""
    ref: str | None = None


class EventLog:
    """A thread-safe, append-only list of ``Event``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._t0 = time.monotonic()

    def add(self, kind: str, label: str | None = None, pid: int | None = None,
            worker: int | None = None, detail: str = "", ref: str | None = None) -> Event:
        """Append an event and return it."""
        with self._lock:
            event = Event(len(self._events), round((time.monotonic() - self._t0) * 1000, 3),
                          kind, label, pid, worker, detail, ref)
            self._events.append(event)
            return event

    def snapshot(self) -> tuple[Event, ...]:
        """The events so far, in order."""
        with self._lock:
            return tuple(self._events)


@dataclass(frozen=True)
class WorkerRun:
    """One worker process of the execution.

    Attributes:
        index: 0-based, in launch order.
        role: ``start`` (first run), ``recheck`` (resume before approval; must park again),
            ``resume`` (resume after approval).
        pid, returncode: as reaped (``-9`` = SIGKILL).
        killed_by_harness, timed_out: see ``harness.processes.ExitInfo``.
        leftovers: pids of its process group found alive after it exited.
        stdout_tail, stderr_tail: the last lines it printed.
        elapsed_s: seconds from launch to reap.
        phase_after, phase_before: the phase of the latest checkpoint once it was gone /
            before it started, read by the harness from SQLite (``None``: no checkpoint, or
            unreadable).
    """

    index: int
    role: str
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

    @property
    def expected_exit(self) -> bool:
        """Exited 0 on its own, or died of exactly the harness's SIGKILL."""
        if self.timed_out:
            return False
        if self.killed_by_harness:
            return self.returncode == -9
        return self.returncode == 0


@dataclass(frozen=True)
class Evidence:
    """Everything about one execution.

    Attributes:
        execution_id: ``scenario[schedule]``.
        case_id: the case.
        events: the ordered trace.
        workers: every worker run.
        checkpoints: the case's checkpoint rows, read raw from SQLite.
        approval_requests, tickets: the approval queue's records for the case.
        gateway: the gateway's own log (all cases).
        approval_event: the trace ``seq`` of the human's approval, or ``None``.
        checkpoint_seq_at_approval: the highest checkpoint ``seq`` when the human approved.
        unreached: scheduled kills that never fired.
        errors: harness-side problems (deadline passed, approval refused, unreadable file).
        workdir: where the execution's files are.
        expected_deliveries: what the case must end with (the scenario's expectation).
        injected: checkpoint rows the harness itself appended (storage faults, a forged
            ticket), as it wrote them.
        v1_rows: v1 rows installed from the fixture (0 if none).
        migrations: ``schema_migrations`` records ``(name, rows)`` read afterwards.
    """

    execution_id: str
    case_id: str
    events: tuple[Event, ...]
    workers: tuple[WorkerRun, ...]
    checkpoints: tuple[CheckpointRow, ...]
    approval_requests: tuple[ApprovalRequest, ...]
    tickets: tuple[Ticket, ...]
    gateway: GatewayLog
    approval_event: int | None
    checkpoint_seq_at_approval: int | None
    unreached: tuple[KillPoint, ...]
    errors: tuple[str, ...] = ()
    workdir: str = ""
    expected_deliveries: int = 1
    injected: tuple[CheckpointRow, ...] = ()
    v1_rows: int = 0
    migrations: tuple[tuple[str, int], ...] = ()

    @property
    def kills(self) -> tuple[Event, ...]:
        """The kill events of the trace, in order."""
        return tuple(e for e in self.events if e.kind == "kill")

    @property
    def loop_checkpoints(self) -> tuple[CheckpointRow, ...]:
        """The checkpoint rows the loop wrote (without the harness's injected ones)."""
        injected = {r.seq for r in self.injected}
        return tuple(r for r in self.checkpoints if r.seq not in injected)

    @property
    def deliveries(self) -> int:
        """How many emails the gateway delivered for the case."""
        return len(self.gateway.deliveries_for(self.case_id))


def read_checkpoints(db: Path, case_id: str) -> tuple[tuple[CheckpointRow, ...], str | None]:
    """The case's raw checkpoint rows, or ``()`` and an error text if unreadable/missing."""
    if not db.exists():
        return (), None
    try:
        return tuple(read_history(db, case_id)), None
    except sqlite3.Error as exc:
        return (), f"checkpoint database {db} unreadable: {exc}"


def read_approvals(db: Path, case_id: str) -> tuple[tuple[ApprovalRequest, ...],
                                                    tuple[Ticket, ...], str | None]:
    """The queue's requests and tickets for the case, read-only."""
    if not db.exists():
        return (), (), None
    try:
        uri = db.resolve().as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
            reqs = conn.execute("SELECT * FROM approval_requests WHERE case_id = ? "
                                "ORDER BY rowid", (case_id,)).fetchall()
            tix = conn.execute("SELECT * FROM tickets WHERE case_id = ? ORDER BY rowid",
                               (case_id,)).fetchall()
        return (tuple(ApprovalRequest(*r) for r in reqs), tuple(Ticket(*t) for t in tix), None)
    except sqlite3.Error as exc:
        return (), (), f"approval database {db} unreadable: {exc}"


def read_gateway(db: Path) -> tuple[GatewayLog, str | None]:
    """The gateway's log, or an empty log and an error text."""
    try:
        return read_log(db), None
    except sqlite3.Error as exc:
        return GatewayLog((), ()), f"gateway log {db} unreadable: {exc}"
