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

The rules live here; the rows in a store, separate from checkpoints: by default their own
SQLite file (``shopops.approval_store``, WAL, synchronous=FULL); under the harness its
approval service (``shopops.approval_client``, ``SHOPOPS_APPROVALS_SOCKET``), so that the
records the harness reads as evidence are the harness's, which a worker can add to but
never delete or change back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from shopops.approval_client import RemoteStore
from shopops.approval_records import ApprovalRequest, Ticket, iso
from shopops.approval_store import APPROVAL_QUEUE, SqliteStore
from shopops.checkpoint_file import OurSchema
from shopops.errors import ApprovalRefused
from shopops_contract.approvals import DEFAULT_GATE, ENV_SOCKET, GATES, NOTE_GATE, RequestStatus

__all__ = ["DEFAULT_GATE", "ENV_SOCKET", "GATES", "NOTE_GATE", "ApprovalQueue",
           "ApprovalRequest", "Ticket"]

_iso = iso


class ApprovalQueue:
    """The approval queue, its records in a SQLite file or at the harness's service.

    Args:
        path: the queue database file (created if missing); unused with ``service``.
        busy_timeout_s: seconds a writer waits for a lock before failing.
        clock: epoch seconds, injectable for late-approval scenarios.
        service: the address of a harness-owned approval service (``@name`` or a socket
            path; ``SHOPOPS_APPROVALS_SOCKET`` under the harness): the records live there
            and ``approve``/``reject`` are refused (the human's acts are the harness's).
        create: a missing or empty file becomes a new queue (the worker's side); without it
            (``shopops approve``/``reject``: nothing to decide without a request) such a
            file is refused and nothing is created.
        kind: the file's schema as accepted (``approval_store.SqliteStore``).
        store: an open store to act on instead (the harness's approval service lends its
            own, ``harness.services.approvals.ApprovalService.queue``); ``close`` leaves it
            open.

    Raises:
        NotOurDatabase: ``path`` is not an approval queue (another application's tables, a
            checkpoint database, a folder, not SQLite ...): refused read-only before any
            connection that can write (``SqliteStore``), the file unchanged.
        DatabaseNotFound: no file and not ``create``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        service: str | None = None,
        create: bool = True,
        kind: OurSchema = APPROVAL_QUEUE,
        store: SqliteStore | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.clock = clock
        self._owned = store is None
        self._store: SqliteStore | RemoteStore = (
            store if store is not None else RemoteStore(service) if service
            else SqliteStore(self.path, busy_timeout_s, create=create, kind=kind))

    def close(self) -> None:
        """Close the store's connection (not a ``store`` the caller gave: it stays the
        caller's)."""
        if self._owned:
            self._store.close()

    def __enter__(self) -> ApprovalQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the worker's side ------------------------------------------------------------
    def record(self, request: ApprovalRequest) -> None:
        """Record ``request`` as given, its id included (nothing if that id exists): the
        harness restoring a request a migrated checkpoint names
        (``harness.story.queue_acts.request_migrated``). A loop asks with ``request``."""
        self._store.add_request(request)

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
        self._store.add_request(ApprovalRequest(request_id, case_id, draft_digest,
                                                _iso(self.clock()), "pending", gate=gate))
        return request_id

    def ticket_for(self, case_id: str, draft_digest: str | None = None,
                   gate: str = DEFAULT_GATE) -> Ticket | None:
        """The newest ticket of ``gate`` issued for ``case_id`` (and, if given, for the
        content with ``draft_digest``: a ticket for an earlier draft is void) and not
        consumed, or ``None``."""
        usable = [t for t in self._store.tickets(case_id) if t.consumed_by_key is None
                  and t.gate == gate and draft_digest in (None, t.draft_digest)]
        return max(usable, key=lambda t: (t.issued_at_epoch, t.ticket_id), default=None)

    def latest_request(self, case_id: str, gate: str = DEFAULT_GATE) -> ApprovalRequest | None:
        """The case's newest request on ``gate`` (insertion order), or ``None``."""
        requests = [r for r in self._store.requests(case_id) if r.gate == gate]
        return requests[-1] if requests else None

    def is_rejected(self, case_id: str, gate: str = DEFAULT_GATE) -> bool:
        """True if the case's newest request on ``gate`` was rejected by a human."""
        requests = [(i, r) for i, r in enumerate(self._store.requests(case_id))
                    if r.gate == gate]
        newest = max(requests, key=lambda ir: (ir[1].requested_at, ir[0]), default=None)
        return newest is not None and newest[1].status == RequestStatus.REJECTED

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
        ticket = self._get(ticket_id, case_id)
        self._check_binding(ticket, case_id, draft_digest, gate)
        self._refuse_other_key(ticket, key)
        if ticket.consumed_by_key is None:  # the store binds it only if still unconsumed
            self._store.mark_consumed(ticket_id, key, _iso(self.clock()))
        ticket = self._get(ticket_id, case_id)
        self._refuse_other_key(ticket, key)  # another send consumed it in between
        return ticket

    @staticmethod
    def _refuse_other_key(ticket: Ticket, key: str) -> None:
        if ticket.consumed_by_key not in (None, key):
            raise ApprovalRefused(
                f"ticket {ticket.ticket_id} was consumed by another send (key "
                f"{ticket.consumed_by_key}); refusing key {key}",
                ticket_id=ticket.ticket_id, case_id=ticket.case_id, reason="consumed",
            )

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
                the case on that gate), ``duplicate_ticket`` (the id is taken) or
                ``not_a_worker_operation`` (a queue on the harness's service).
        """
        _check_gate(gate, case_id)
        now = self.clock()
        return self._store.approve(case_id, approver, ticket_id, now, _iso(now), gate)

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
                ``bad_feedback`` for feedback that is empty or longer than 2000 characters;
                ``not_a_worker_operation`` (a queue on the harness's service).
        """
        _check_gate(gate, case_id)
        if feedback is not None and not (0 < len(feedback.strip()) and len(feedback) <= 2000):
            raise ApprovalRefused(
                f"feedback for {case_id} must be 1-2000 characters, got {len(feedback)}",
                case_id=case_id, ticket_id=None, reason="bad_feedback")
        return self._store.reject(case_id, feedback, gate)

    # -- evidence ---------------------------------------------------------------------
    def requests(self, case_id: str | None = None) -> list[ApprovalRequest]:
        """All requests (of one case), oldest first."""
        return self._store.requests(case_id)

    def tickets(self, case_id: str | None = None) -> list[Ticket]:
        """All tickets (of one case), in issue order."""
        return self._store.tickets(case_id)

    def _get(self, ticket_id: str, case_id: str) -> Ticket:
        found = self._store.ticket(ticket_id)
        if found is None:
            raise ApprovalRefused(
                f"ticket {ticket_id!r} was not issued by the approval queue "
                f"({self._store.where()}); "
                "tickets are server-side facts and one written into the state is refused",
                ticket_id=ticket_id, case_id=case_id, reason="unknown_ticket",
            )
        return found

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
