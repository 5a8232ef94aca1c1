"""Gathering evidence: the harness's own trace (``EventLog``) and read-only readers of the
execution's files; the types are in ``harness.model.evidence``.

The harness never takes the loop's word: the event trace is recorded by the harness (hits
arrive over its channel, kills and approvals are its own acts, deliveries are reported by
its own gateway), checkpoint history is read from the SQLite file by the harness, approval
records from the queue's file, deliveries from the gateway's own log.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from harness.judge.observers import approvals, store
from harness.judge.observers.store import HistoryTooLong, NoTables, NotAContractStore
from harness.model.evidence import (
    Event,
    Evidence,
    Gap,
    GatewayLog,
    HistoryMark,
    WorkerRun,
)
from harness.model.kinds import EventKind, EvidenceSource
from harness.model.observations import ApprovalRecord, StoredRow, TicketRecord, rows_digest
from harness.services.ledger import read_log
from shopops_contract import labels
from shopops_contract.limits import MAX_HISTORY_ROWS

__all__ = ["Event", "EventLog", "Evidence", "Gap", "WorkerRun", "committed_hit", "file_id",
           "history_at", "latest_checkpoint", "not_a_file", "read_approvals",
           "read_checkpoints", "read_gateway"]


class EventLog:
    """A thread-safe, append-only list of ``Event``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._t0 = time.monotonic()

    def add(self, kind: EventKind | str, label: str | None = None, pid: int | None = None,
            worker: int | None = None, detail: str = "", ref: str | None = None) -> Event:
        """Append an event and return it.

        Raises:
            ValueError: ``kind`` is not an ``EventKind``.
        """
        if type(kind) is not EventKind:  # the conversion costs ~3 us, on every hit
            kind = EventKind(kind)
        with self._lock:
            event = Event(len(self._events), round((time.monotonic() - self._t0) * 1000, 3),
                          kind, label, pid, worker, detail, ref)
            self._events.append(event)
            return event

    def snapshot(self) -> tuple[Event, ...]:
        """The events so far, in order."""
        with self._lock:
            return tuple(self._events)


def not_a_file(db: Path) -> str | None:
    """Why ``db`` is not read as evidence, or ``None`` for a regular file. Every file the
    harness reads back is one it (or the loop through SQLite) created as a regular file, so
    anything else was put there by a worker and is refused without following or opening
    it: a symlink (even to a real database: the evidence is this execution's own file; a
    loop would raise on resolving), a folder, a FIFO (opening it would block the harness
    until a writer came) or a device. The one rule for all three readers."""
    try:
        mode = os.lstat(db).st_mode
    except OSError as exc:
        return f"cannot be examined: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    kind = ("is a symlink" if stat.S_ISLNK(mode) else "is a folder" if stat.S_ISDIR(mode)
            else "is a FIFO" if stat.S_ISFIFO(mode) else "is not a regular file")
    return f"{kind}, not a database file (a worker put it there; not read)"


def read_checkpoints(db: Path, case_id: str
                     ) -> tuple[tuple[StoredRow, ...], Gap | None, str | None]:
    """The case's stored checkpoint rows (``harness.judge.observers.store``), a ``Gap`` if
    the file is unreadable or longer than ``MAX_HISTORY_ROWS`` (a missing file is no gap:
    nothing was written; nor is a database with no schema at all, ``store.NoTables``), and
    why the file does not meet the contract (an SQLite file without a readable
    ``checkpoints`` table: a named failure of every check over the history, not a gap),
    each ``None`` when not so."""
    if not os.path.lexists(db):
        return (), None, None
    if (why := not_a_file(db)) is not None:
        return (), Gap(EvidenceSource.CHECKPOINTS, f"checkpoint database {db} {why}"), None
    try:
        return store.read_rows(db, case_id, max_rows=MAX_HISTORY_ROWS), None, None
    except HistoryTooLong as exc:
        return (), Gap(EvidenceSource.CHECKPOINTS, str(exc)), None
    except NoTables:  # created, then killed before its schema was committed
        return (), None, None
    except NotAContractStore as exc:
        return (), None, str(exc)
    except sqlite3.Error as exc:
        return (), Gap(EvidenceSource.CHECKPOINTS,
                       f"checkpoint database {db} unreadable: {exc}"), None


def file_id(db: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``db`` by ``lstat`` when it is a regular file (``None``
    otherwise): which file the harness reads, so that a file deleted and created again, or
    another file moved into its place, is not taken for the same history."""
    try:
        st = os.lstat(db)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def history_at(db: Path, case_id: str, events: Sequence[Event] = ()
               ) -> tuple[HistoryMark, tuple[StoredRow, ...]]:
    """The mark and the rows it was taken from (``()`` when unreadable). What identifies
    the case's checkpoint history now (``HistoryMark``: the file, the
    highest ``seq``, how many rows and their ``rows_digest``), read-only like
    ``read_checkpoints``. A missing file is an empty history (``seq`` 0) unless ``events``
    (the harness's trace so far) show a worker past a committed checkpoint
    (``committed_hit``); that, and a history that cannot be read (not a regular file, not
    ours, longer than ``MAX_HISTORY_ROWS``), is a mark with ``unreadable`` set."""
    if not os.path.lexists(db):
        hit = committed_hit(events)
        return HistoryMark(None, 0, 0, rows_digest(()), None if hit is None else (
            f"no checkpoint file {db.name} although a worker had reached {hit} (a committed "
            "checkpoint, in the harness's trace)")), ()
    identity = file_id(db)
    rows, gap, unfit = read_checkpoints(db, case_id)
    if identity is None:
        return HistoryMark(None, 0, 0, rows_digest(()), f"{db.name} is not a regular file"), ()
    if gap is not None or unfit is not None:
        return HistoryMark(identity, 0, 0, rows_digest(()),
                           gap.reason if gap is not None else unfit), ()
    return (HistoryMark(identity, rows[-1].seq if rows else 0, len(rows), rows_digest(rows)),
            rows)


def committed_hit(events: Sequence[Event]) -> str | None:
    """The first label in ``events`` that a worker reaches only past a committed checkpoint
    (``labels.AFTER_A_CHECKPOINT``), or ``None``: from then on a checkpoint file exists,
    unless someone removed it."""
    return next((e.label for e in events if e.kind is EventKind.HIT
                 and e.label in labels.AFTER_A_CHECKPOINT), None)


def latest_checkpoint(db: Path, case_id: str, skip: Collection[int] = ()) -> StoredRow | None:
    """The case's newest stored checkpoint row whose ``seq`` is not in ``skip`` (rows the
    harness injected), read-only like ``read_checkpoints``; ``None`` when there is none or
    the file cannot be read (``read_checkpoints`` says why when the evidence is
    collected)."""
    if not os.path.lexists(db) or not_a_file(db) is not None:
        return None
    try:
        return store.latest_row(db, case_id, skip)
    except (sqlite3.Error, NotAContractStore, FileNotFoundError):
        return None


def read_approvals(db: Path, case_id: str) -> tuple[tuple[ApprovalRecord, ...],
                                                    tuple[TicketRecord, ...], Gap | None]:
    """The harness's approval records for the case (``observers.approvals``), read-only."""
    if not os.path.lexists(db):
        return (), (), None
    if (why := not_a_file(db)) is not None:
        return (), (), Gap(EvidenceSource.APPROVALS, f"approval database {db} {why}")
    try:
        requests, tickets = approvals.read_records(db, case_id)
        return requests, tickets, None
    except sqlite3.Error as exc:
        return (), (), Gap(EvidenceSource.APPROVALS, f"approval database {db} unreadable: {exc}")


def read_gateway(db: Path) -> tuple[GatewayLog, Gap | None]:
    """The gateway's log, or an empty log and the ``Gap`` (a missing file is one: the
    gateway creates its log before the first worker starts)."""
    if (why := not_a_file(db)) is not None:
        return GatewayLog((), ()), Gap(EvidenceSource.GATEWAY, f"gateway log {db} {why}")
    try:
        return read_log(db), None
    except sqlite3.Error as exc:
        return GatewayLog((), ()), Gap(EvidenceSource.GATEWAY,
                                       f"gateway log {db} unreadable: {exc}")
