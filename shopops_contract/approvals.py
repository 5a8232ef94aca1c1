"""The approval records' closed sets (``docs/contract.md``, "The approval protocol"): the
gates a request is about and the statuses a request goes through. The records themselves
are the harness's; a loop reaches them through the approval service named by
``SHOPOPS_APPROVALS_SOCKET`` (``ENV_SOCKET``).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DEFAULT_GATE", "ENV_SOCKET", "GATES", "NOTE_GATE", "RequestStatus"]

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
