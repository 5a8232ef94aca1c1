"""Where the approval queue keeps its records: one SQLite file (WAL, ``synchronous=FULL``).

``SqliteStore`` is the storage half of ``shopops.approvals.ApprovalQueue``: the queue's
rules (binding, re-checks, consumption by one send) are the queue's; the store only keeps
rows. The worker's side needs five operations (``add_request``, ``requests``, ``tickets``,
``ticket``, ``mark_consumed``), which is also all the harness's approval service offers a
worker (``shopops.approval_client``); ``approve`` and ``reject`` are the human's and exist
only here.
"""

from __future__ import annotations

import os
import sqlite3

from shopops import checkpoint_file
from shopops.approval_records import ApprovalRequest, Ticket
from shopops.errors import ApprovalRefused
from shopops_contract.approvals import DEFAULT_GATE

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approval_requests (
    request_id TEXT PRIMARY KEY,
    case_id TEXT NOT NULL,
    draft_digest TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
    feedback TEXT,
    gate TEXT NOT NULL DEFAULT 'send_email'
);
CREATE TABLE IF NOT EXISTS tickets (
    ticket_id TEXT PRIMARY KEY,
    request_id TEXT NOT NULL REFERENCES approval_requests(request_id),
    case_id TEXT NOT NULL,
    draft_digest TEXT NOT NULL,
    approver TEXT NOT NULL,
    issued_at TEXT NOT NULL,
    issued_at_epoch REAL NOT NULL,
    consumed_by_key TEXT,
    consumed_at TEXT,
    gate TEXT NOT NULL DEFAULT 'send_email'
);
"""

#: Columns added after a queue's first version (``ALTER TABLE ... ADD COLUMN`` on open):
#: an older queue of ours may lack them. Add a new column here as well as to ``_SCHEMA``.
_ADDED_COLUMNS = frozenset({"feedback", "gate"})
#: The approval queue as ``checkpoint_file.inspect`` accepts it (fail closed on the file).
APPROVAL_QUEUE = checkpoint_file.OurSchema("approval queue", _SCHEMA, "approval_requests",
                                           _ADDED_COLUMNS)

_REQUEST_COLUMNS = "request_id, case_id, draft_digest, requested_at, status, feedback, gate"
_TICKET_COLUMNS = ("ticket_id, request_id, case_id, draft_digest, approver, issued_at, "
                   "issued_at_epoch, consumed_by_key, consumed_at, gate")


class SqliteStore:
    """The queue's rows in the SQLite file ``path`` (created if missing; a database from
    before ``feedback`` or gates existed gains the columns, every old row ``send_email``).

    Args:
        path: the database file.
        busy_timeout_s: seconds a writer waits for a lock before failing.
        create: a missing or empty file becomes a new queue; without it, it is refused.
        kind: the file's schema as accepted (default ``APPROVAL_QUEUE``; the harness's
            approval service adds its call log: ``harness.services.approvals.SERVICE_QUEUE``).
        threads: the connection may be used from any thread (``check_same_thread=False``,
            Python's ``sqlite3`` docs); the caller then serializes the calls itself.
        connection: an open connection (autocommit, ``isolation_level=None``) whose
            database becomes the queue (its tables created if missing): the harness's
            approval service keeps an execution's records in memory
            (``harness.services.approvals``). ``path`` then only names it in messages; no
            file is inspected or opened. ``close`` closes it.

    Raises:
        NotOurDatabase: ``path`` is not an approval queue of ours; decided read-only
            (``checkpoint_file.inspect``) before any connection that can write.
        DatabaseNotFound: no file and not ``create``.
    """

    def __init__(self, path: str | os.PathLike[str], busy_timeout_s: float = 5.0, *,
                 create: bool = True, kind: checkpoint_file.OurSchema = APPROVAL_QUEUE,
                 threads: bool = False, connection: sqlite3.Connection | None = None) -> None:
        self.path = os.fspath(path)
        if connection is not None:  # the caller's database (one in memory): adopted as is
            self._conn = connection
        else:
            checkpoint_file.inspect(self.path, kind, create=create)
            self._conn = sqlite3.connect(self.path, isolation_level=None,
                                         timeout=busy_timeout_s, check_same_thread=not threads)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(_SCHEMA)
        columns = {r[1] for r in self._conn.execute("PRAGMA table_info(approval_requests)")}
        if "feedback" not in columns:  # a queue database from before feedback existed
            self._conn.execute("ALTER TABLE approval_requests ADD COLUMN feedback TEXT")
        for table in ("approval_requests", "tickets"):  # ... or from before gates existed
            if "gate" not in {r[1] for r in self._conn.execute(f"PRAGMA table_info({table})")}:
                self._conn.execute(f"ALTER TABLE {table} ADD COLUMN gate TEXT NOT NULL "
                                   f"DEFAULT '{DEFAULT_GATE}'")

    def where(self) -> str:
        """Where the records are, for messages."""
        return self.path

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    # -- the worker's side ------------------------------------------------------------
    def add_request(self, request: ApprovalRequest) -> None:
        """Record a new pending request; nothing happens if ``request_id`` exists."""
        self._conn.execute(
            "INSERT OR IGNORE INTO approval_requests(request_id, case_id, draft_digest,"
            " requested_at, status, gate) VALUES (?, ?, ?, ?, 'pending', ?)",
            (request.request_id, request.case_id, request.draft_digest, request.requested_at,
             request.gate))

    def requests(self, case_id: str | None = None) -> list[ApprovalRequest]:
        """All requests (of one case), oldest first (insertion order)."""
        where, args = (" WHERE case_id = ?", [case_id]) if case_id is not None else ("", [])
        rows = self._conn.execute(
            f"SELECT {_REQUEST_COLUMNS} FROM approval_requests{where} ORDER BY rowid", args)
        return [ApprovalRequest(*r) for r in rows]

    def tickets(self, case_id: str | None = None) -> list[Ticket]:
        """All tickets (of one case), in issue order."""
        where, args = (" WHERE case_id = ?", [case_id]) if case_id is not None else ("", [])
        rows = self._conn.execute(
            f"SELECT {_TICKET_COLUMNS} FROM tickets{where} ORDER BY rowid", args)
        return [Ticket(*r) for r in rows]

    def ticket(self, ticket_id: str) -> Ticket | None:
        """The ticket ``ticket_id``, or ``None`` if this store never issued it."""
        row = self._conn.execute(f"SELECT {_TICKET_COLUMNS} FROM tickets WHERE ticket_id = ?",
                                 (ticket_id,)).fetchone()
        return Ticket(*row) if row else None

    def mark_consumed(self, ticket_id: str, key: str, at: str) -> None:
        """Bind an unconsumed ticket to the send with idempotency key ``key`` (at ``at``,
        ISO-8601); a consumed ticket keeps its first key (the caller reads it back)."""
        self._conn.execute(
            "UPDATE tickets SET consumed_by_key = ?, consumed_at = ? "
            "WHERE ticket_id = ? AND consumed_by_key IS NULL", (key, at, ticket_id))

    # -- the human's side -------------------------------------------------------------
    def approve(self, case_id: str, approver: str, ticket_id: str | None, epoch: float,
                at: str, gate: str = DEFAULT_GATE) -> Ticket:
        """Issue a ticket for the case's newest pending request on ``gate`` (one
        transaction).

        Raises:
            ApprovalRefused: ``no_request`` or ``duplicate_ticket``.
        """
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            req = self._pending(case_id, gate)
            if ticket_id is None:
                ticket_id = self._next_ticket_id()
            try:
                self._conn.execute(
                    "INSERT INTO tickets(ticket_id, request_id, case_id, draft_digest, "
                    "approver, issued_at, issued_at_epoch, gate) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (ticket_id, req.request_id, case_id, req.draft_digest, approver, at, epoch,
                     gate))
            except sqlite3.IntegrityError:
                raise ApprovalRefused(
                    f"ticket id {ticket_id} already exists", ticket_id=ticket_id,
                    case_id=case_id, reason="duplicate_ticket",
                ) from None
            self._conn.execute(
                "UPDATE approval_requests SET status = 'approved' WHERE request_id = ?",
                (req.request_id,))
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        found = self.ticket(ticket_id)
        assert found is not None
        return found

    def reject(self, case_id: str, feedback: str | None,
               gate: str = DEFAULT_GATE) -> ApprovalRequest:
        """Mark the case's newest pending request on ``gate`` rejected (with ``feedback``).

        Raises:
            ApprovalRefused: ``no_request``.
        """
        req = self._pending(case_id, gate)
        self._conn.execute(
            "UPDATE approval_requests SET status = 'rejected', feedback = ? WHERE request_id = ?",
            (feedback, req.request_id))
        return ApprovalRequest(req.request_id, req.case_id, req.draft_digest,
                               req.requested_at, "rejected", feedback, req.gate)

    def _next_ticket_id(self) -> str:
        (n,) = self._conn.execute("SELECT COUNT(*) FROM tickets").fetchone()
        while self._conn.execute("SELECT 1 FROM tickets WHERE ticket_id = ?",
                                 (f"apr-desk-{n + 1}",)).fetchone():
            n += 1  # an explicitly chosen id took this number
        return f"apr-desk-{n + 1}"

    def _pending(self, case_id: str, gate: str) -> ApprovalRequest:
        row = self._conn.execute(
            f"SELECT {_REQUEST_COLUMNS} FROM approval_requests WHERE case_id = ? AND gate = ?"
            " AND status = 'pending' ORDER BY rowid DESC LIMIT 1", (case_id, gate)).fetchone()
        if row is None:
            on = "" if gate == DEFAULT_GATE else f" on gate {gate}"
            raise ApprovalRefused(
                f"no pending approval request for {case_id}{on} in {self.path}",
                case_id=case_id, ticket_id=None, reason="no_request",
            )
        return ApprovalRequest(*row)
