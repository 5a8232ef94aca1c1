"""The approval records as the contract states them (``docs/contract.md``, "The approval
protocol"): a request (``ApprovalRequest``) and a ticket (``Ticket``) with the fields of
their JSON form on the approval service's socket, the gates a request is about and the
statuses it goes through. The records themselves are the harness's; a loop reaches them
through the approval service named by ``SHOPOPS_APPROVALS_SOCKET`` (``ENV_SOCKET``). The
reference loop's queue and the harness's judge both use these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["DEFAULT_GATE", "ENV_SOCKET", "GATES", "NOTE_GATE", "ApprovalRequest", "RequestStatus",
           "Ticket"]

#: The environment variable naming the harness's approval service (a socket path).
ENV_SOCKET = "SHOPOPS_APPROVALS_SOCKET"
#: The gate of the O-1001 email; what a request or ticket without a gate is about.
DEFAULT_GATE = "send_email"
#: The order note on O-1001 saying the customer was emailed (the second gated action).
NOTE_GATE = "add_order_note"
#: Every gate the queue accepts.
GATES: tuple[str, ...] = (DEFAULT_GATE, NOTE_GATE)


class RequestStatus(StrEnum):
    """A request's status: a human has not decided yet, approved it (a ticket exists) or
    rejected it; the string is what the records store."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


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
