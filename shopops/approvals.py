"""The human approval queue: tickets are server-side facts (Chapter 8, Chapter 29).

The queue, not the worker, creates tickets. A worker proposes a send (``request``); a human
approves it (``approve``), which issues a ticket bound to the case and to the SHA-256 digest
of the exact draft approved; ``shopops.grant.grant_approval`` accepts only such a ticket; the send
consumes it under the send's idempotency key, so a resumed worker re-sending the same
logical email passes the re-check and any other use of the ticket is refused. The chapter's
failure mode "Forged approval on resume: model writes approval_ticket into state" is what
this module exists to refuse.

Gates: every request and ticket names the gated action it is about (``gate``): the email
``send_email`` (the default, so callers that know one gate keep working) or the order note
``add_order_note`` (``GATES``). A human decides each gate on its own; a ticket of one gate
never grants another (``verify`` and ``consume`` take the gate).

Records live in their own SQLite file (WAL, synchronous=FULL), separate from checkpoints:
the worker can read and consume tickets but the harness reads them as evidence. A database
from before gates existed gains the ``gate`` columns (``ALTER TABLE``, every old row
``send_email``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from shopops.errors import ApprovalRefused

#: The gate of the O-1001 email; what a request or ticket without a gate is about.
DEFAULT_GATE = "send_email"
#: The order note on O-1001 saying the customer was emailed (the second gated action).
NOTE_GATE = "add_order_note"
#: Every gate the queue accepts.
GATES: tuple[str, ...] = (DEFAULT_GATE, NOTE_GATE)

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


@dataclass(frozen=True)
class ApprovalRequest:
    """A proposed send awaiting a human: ``request_id``, ``case_id``, ``draft_digest`` (hex
    SHA-256 of the draft), ``requested_at`` (ISO-8601 UTC), ``status`` (pending / approved /
    rejected), the reviewer's ``feedback`` on a rejection (``None``: a plain rejection,
    the case ends; a text: the loop drafts again answering it) and the ``gate`` (``GATES``)
    the request is about; for ``add_order_note`` ``draft_digest`` is the note's digest."""

    request_id: str
    case_id: str
    draft_digest: str
    requested_at: str
    status: str
    feedback: str | None = None
    gate: str = DEFAULT_GATE


@dataclass(frozen=True)
class Ticket:
    """A server-issued approval: ``ticket_id`` (``"apr-desk-9"``), the ``request_id``,
    ``case_id`` and ``draft_digest`` it is bound to, ``approver``, ``issued_at`` (ISO-8601
    UTC) and ``issued_at_epoch`` (seconds), ``consumed_by_key`` (the idempotency key of
    the send that used it, or ``None``), ``consumed_at`` and the ``gate`` it grants."""

    ticket_id: str
    request_id: str
    case_id: str
    draft_digest: str
    approver: str
    issued_at: str
    issued_at_epoch: float
    consumed_by_key: str | None
    consumed_at: str | None
    gate: str = DEFAULT_GATE


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ApprovalQueue:
    """The approval queue on SQLite.

    Args:
        path: the queue database file (created if missing).
        busy_timeout_s: seconds a writer waits for a lock before failing.
        clock: epoch seconds, injectable for late-approval scenarios.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = os.fspath(path)
        self.clock = clock
        self._conn = sqlite3.connect(self.path, isolation_level=None, timeout=busy_timeout_s)
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

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> ApprovalQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the worker's side ------------------------------------------------------------
    def request(self, case_id: str, draft_digest: str, gate: str = DEFAULT_GATE) -> str:
        """Propose a gated action for approval; idempotent for the same case, gate and
        content.

        Args:
            gate: one of ``GATES``.

        Returns:
            the request id, ``"req-<case_id>-<digest[:12]>"`` (``send_email``) or
            ``"req-<case_id>-<gate>-<digest[:12]>"``.

        Raises:
            ApprovalRefused: reason ``unknown_gate``.
        """
        _check_gate(gate, case_id)
        infix = "" if gate == DEFAULT_GATE else f"{gate}-"
        request_id = f"req-{case_id}-{infix}{draft_digest[:12]}"
        self._conn.execute(
            "INSERT OR IGNORE INTO approval_requests(request_id, case_id, draft_digest,"
            " requested_at, status, gate) VALUES (?, ?, ?, ?, 'pending', ?)",
            (request_id, case_id, draft_digest, _iso(self.clock()), gate),
        )
        return request_id

    def ticket_for(self, case_id: str, draft_digest: str | None = None,
                   gate: str = DEFAULT_GATE) -> Ticket | None:
        """The newest ticket of ``gate`` issued for ``case_id`` (and, if given, for the
        content with ``draft_digest``: a ticket for an earlier draft is void) and not
        consumed, or ``None``."""
        sql = "SELECT * FROM tickets WHERE case_id = ? AND gate = ? AND consumed_by_key IS NULL"
        args = [case_id, gate]
        if draft_digest is not None:
            sql, args = sql + " AND draft_digest = ?", [*args, draft_digest]
        row = self._conn.execute(
            sql + " ORDER BY issued_at_epoch DESC, ticket_id DESC LIMIT 1", args).fetchone()
        return Ticket(*row) if row else None

    def latest_request(self, case_id: str, gate: str = DEFAULT_GATE) -> ApprovalRequest | None:
        """The case's newest request on ``gate`` (insertion order), or ``None``."""
        row = self._conn.execute(
            "SELECT * FROM approval_requests WHERE case_id = ? AND gate = ? "
            "ORDER BY rowid DESC LIMIT 1", (case_id, gate)).fetchone()
        return ApprovalRequest(*row) if row else None

    def is_rejected(self, case_id: str, gate: str = DEFAULT_GATE) -> bool:
        """True if the case's newest request on ``gate`` was rejected by a human."""
        row = self._conn.execute(
            "SELECT status FROM approval_requests WHERE case_id = ? AND gate = ? "
            "ORDER BY requested_at DESC, rowid DESC LIMIT 1",
            (case_id, gate),
        ).fetchone()
        return bool(row and row[0] == "rejected")

    def verify(self, ticket_id: str, case_id: str, draft_digest: str,
               gate: str = DEFAULT_GATE) -> Ticket:
        """Check that ``ticket_id`` was issued by this queue for this case, this gate and
        this content, and is not consumed.

        Raises:
            ApprovalRefused: reason ``unknown_ticket``, ``wrong_case``, ``wrong_gate``,
                ``stale_draft`` or ``consumed``.
        """
        ticket = self._get(ticket_id, case_id)
        self._check_binding(ticket, case_id, draft_digest, gate)
        if ticket.consumed_by_key is not None:
            raise ApprovalRefused(
                f"ticket {ticket_id} was already consumed by the send with key "
                f"{ticket.consumed_by_key}",
                ticket_id=ticket_id, case_id=case_id, reason="consumed",
            )
        return ticket

    def check_held(self, ticket_id: str | None, case_id: str, draft_digest: str,
                   key: str | None, gate: str = DEFAULT_GATE) -> Ticket:
        """Re-check, on resume, the ticket a checkpoint past approval claims: issued by this
        queue for this case and draft, and unconsumed or consumed by this send's ``key``.

        Raises:
            ApprovalRefused: ``no_ticket``, or as ``verify`` (``consumed`` when another send
                used it).
        """
        if ticket_id is None:
            raise ApprovalRefused(
                f"{case_id} is past approval but holds no ticket", ticket_id=None,
                case_id=case_id, reason="no_ticket",
            )
        ticket = self._get(ticket_id, case_id)
        self._check_binding(ticket, case_id, draft_digest, gate)
        if ticket.consumed_by_key not in (None, key):
            raise ApprovalRefused(
                f"ticket {ticket_id} was consumed by another send (key "
                f"{ticket.consumed_by_key})", ticket_id=ticket_id, case_id=case_id,
                reason="consumed",
            )
        return ticket

    def consume(self, ticket_id: str, case_id: str, draft_digest: str, key: str,
                gate: str = DEFAULT_GATE) -> Ticket:
        """Bind the ticket to the send with idempotency key ``key`` (the send's re-check).

        Re-consuming with the same key succeeds (a resumed worker repeating the same logical
        send); any other key is refused.

        Raises:
            ApprovalRefused: as ``verify``; ``consumed`` when another key used it.
        """
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            ticket = self._get(ticket_id, case_id)
            self._check_binding(ticket, case_id, draft_digest, gate)
            if ticket.consumed_by_key not in (None, key):
                raise ApprovalRefused(
                    f"ticket {ticket_id} was consumed by another send (key "
                    f"{ticket.consumed_by_key}); refusing key {key}",
                    ticket_id=ticket_id, case_id=case_id, reason="consumed",
                )
            if ticket.consumed_by_key is None:
                self._conn.execute(
                    "UPDATE tickets SET consumed_by_key = ?, consumed_at = ? WHERE ticket_id = ?",
                    (key, _iso(self.clock()), ticket_id),
                )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return self._get(ticket_id, case_id)

    # -- the human's side -------------------------------------------------------------
    def approve(self, case_id: str, *, approver: str, ticket_id: str | None = None,
                gate: str = DEFAULT_GATE) -> Ticket:
        """A human approves the case's pending request on ``gate``: the queue issues the
        ticket (t5).

        Args:
            case_id: the case.
            approver: who approved (``"maya"``).
            ticket_id: an explicit id (``"apr-desk-9"``); default ``apr-desk-<n>``.
            gate: the gated action approved (``GATES``).

        Raises:
            ApprovalRefused: reason ``unknown_gate``, ``no_request`` (nothing pending for
                the case on that gate) or ``duplicate_ticket`` (the id is taken).
        """
        _check_gate(gate, case_id)
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            req = self._pending(case_id, gate)
            now = self.clock()
            if ticket_id is None:
                ticket_id = self._next_ticket_id()
            try:
                self._conn.execute(
                    "INSERT INTO tickets(ticket_id, request_id, case_id, draft_digest, "
                    "approver, issued_at, issued_at_epoch, gate) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (ticket_id, req.request_id, case_id, req.draft_digest, approver,
                     _iso(now), now, gate),
                )
            except sqlite3.IntegrityError:
                raise ApprovalRefused(
                    f"ticket id {ticket_id} already exists", ticket_id=ticket_id,
                    case_id=case_id, reason="duplicate_ticket",
                ) from None
            self._conn.execute(
                "UPDATE approval_requests SET status = 'approved' WHERE request_id = ?",
                (req.request_id,),
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return self._get(ticket_id, case_id)

    def reject(self, case_id: str, *, approver: str, feedback: str | None = None,
               gate: str = DEFAULT_GATE) -> ApprovalRequest:
        """A human rejects the case's pending request on ``gate``: that content must never
        be sent.

        Args:
            gate: the gated action rejected (``GATES``); the reference loop ends a case
                whose order note was rejected (feedback or not) ``rejected``.
            feedback: what the reviewer wants changed. With it the loop drafts again
                (answering it) and asks for a new approval; without it the case ends
                ``rejected``.

        Raises:
            ApprovalRefused: reason ``unknown_gate``, ``no_request``; reason
                ``bad_feedback`` for feedback that is empty or longer than 2000 characters.
        """
        _check_gate(gate, case_id)
        if feedback is not None and not (0 < len(feedback.strip()) and len(feedback) <= 2000):
            raise ApprovalRefused(
                f"feedback for {case_id} must be 1-2000 characters, got {len(feedback)}",
                case_id=case_id, ticket_id=None, reason="bad_feedback")
        req = self._pending(case_id, gate)
        self._conn.execute(
            "UPDATE approval_requests SET status = 'rejected', feedback = ? WHERE request_id = ?",
            (feedback, req.request_id),
        )
        return ApprovalRequest(req.request_id, req.case_id, req.draft_digest,
                               req.requested_at, "rejected", feedback, req.gate)

    # -- evidence ---------------------------------------------------------------------
    def requests(self, case_id: str | None = None) -> list[ApprovalRequest]:
        """All requests (of one case), oldest first."""
        where, args = (" WHERE case_id = ?", [case_id]) if case_id is not None else ("", [])
        rows = self._conn.execute(f"SELECT * FROM approval_requests{where} ORDER BY rowid", args)
        return [ApprovalRequest(*r) for r in rows]

    def tickets(self, case_id: str | None = None) -> list[Ticket]:
        """All tickets (of one case), in issue order."""
        where, args = (" WHERE case_id = ?", [case_id]) if case_id is not None else ("", [])
        rows = self._conn.execute(f"SELECT * FROM tickets{where} ORDER BY rowid", args)
        return [Ticket(*r) for r in rows]

    def _next_ticket_id(self) -> str:
        (n,) = self._conn.execute("SELECT COUNT(*) FROM tickets").fetchone()
        while self._conn.execute("SELECT 1 FROM tickets WHERE ticket_id = ?",
                                 (f"apr-desk-{n + 1}",)).fetchone():
            n += 1  # an explicitly chosen id took this number
        return f"apr-desk-{n + 1}"

    def _pending(self, case_id: str, gate: str = DEFAULT_GATE) -> ApprovalRequest:
        row = self._conn.execute(
            "SELECT * FROM approval_requests WHERE case_id = ? AND gate = ? AND "
            "status = 'pending' ORDER BY rowid DESC LIMIT 1",
            (case_id, gate),
        ).fetchone()
        if row is None:
            on = "" if gate == DEFAULT_GATE else f" on gate {gate}"
            raise ApprovalRefused(
                f"no pending approval request for {case_id}{on} in {self.path}",
                case_id=case_id, ticket_id=None, reason="no_request",
            )
        return ApprovalRequest(*row)

    def _get(self, ticket_id: str, case_id: str) -> Ticket:
        row = self._conn.execute("SELECT * FROM tickets WHERE ticket_id = ?", (ticket_id,))
        found = row.fetchone()
        if found is None:
            raise ApprovalRefused(
                f"ticket {ticket_id!r} was not issued by the approval queue ({self.path}); "
                "tickets are server-side facts and one written into the state is refused",
                ticket_id=ticket_id, case_id=case_id, reason="unknown_ticket",
            )
        return Ticket(*found)

    @staticmethod
    def _check_binding(ticket: Ticket, case_id: str, draft_digest: str,
                       gate: str = DEFAULT_GATE) -> None:
        if ticket.case_id != case_id:
            raise ApprovalRefused(
                f"ticket {ticket.ticket_id} was issued for {ticket.case_id}, not {case_id}",
                ticket_id=ticket.ticket_id, case_id=case_id, reason="wrong_case",
            )
        if ticket.gate != gate:
            raise ApprovalRefused(
                f"ticket {ticket.ticket_id} grants {ticket.gate}, not {gate}",
                ticket_id=ticket.ticket_id, case_id=case_id, reason="wrong_gate",
            )
        if ticket.draft_digest != draft_digest:
            raise ApprovalRefused(
                f"ticket {ticket.ticket_id} approved draft {ticket.draft_digest[:12]}, but "
                f"the draft is now {draft_digest[:12]}: a stale approval",
                ticket_id=ticket.ticket_id, case_id=case_id, reason="stale_draft",
            )


def _check_gate(gate: str, case_id: str) -> None:
    if gate not in GATES:
        raise ApprovalRefused(f"unknown gate {gate!r}; allowed: {', '.join(GATES)}",
                              ticket_id=None, case_id=case_id, reason="unknown_gate")
