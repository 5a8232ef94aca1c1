"""The case phases and their FSM, as the contract states them (``docs/contract.md``,
"Phases"). A checkpoint's ``state_json`` carries one of these in ``phase``.

Chapter 8's crash timeline for O-1001::

    intake ──> drafting ──> awaiting_approval ──> approved ──> sending ──> completed
                  ^                  ├──────────> rejected
                  └──────────────────┘  (rejected with feedback: draft again)

    any phase that is not terminal ──> dead_lettered  (too many recovery attempts)

``intake``: reading the customer and the order. ``drafting``: the draft is being written.
``awaiting_approval``: the send is proposed and the case is parked until a human approves.
``approved``: a server-issued ticket was granted. ``sending``: the idempotency key is
durable and the send may have left. ``completed``, ``rejected`` and ``dead_lettered`` (the
case was picked up after a crash more often than the maximum; a human must look at it —
Chapter 8's dead-letter queues) are terminal.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ALLOWED", "PRE_APPROVAL", "TERMINAL", "Phase"]


class Phase(StrEnum):
    """A case phase; the string value is what checkpoints store."""

    INTAKE = "intake"
    DRAFTING = "drafting"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    SENDING = "sending"
    COMPLETED = "completed"
    REJECTED = "rejected"
    DEAD_LETTERED = "dead_lettered"


_DL = Phase.DEAD_LETTERED
#: Each phase and the phases it may move to (a self-transition is not an edge).
ALLOWED: dict[Phase, frozenset[Phase]] = {
    Phase.INTAKE: frozenset({Phase.DRAFTING, _DL}),
    Phase.DRAFTING: frozenset({Phase.AWAITING_APPROVAL, _DL}),
    Phase.AWAITING_APPROVAL: frozenset({Phase.APPROVED, Phase.REJECTED, Phase.DRAFTING, _DL}),
    Phase.APPROVED: frozenset({Phase.SENDING, _DL}),
    Phase.SENDING: frozenset({Phase.COMPLETED, _DL}),
    Phase.COMPLETED: frozenset(),
    Phase.REJECTED: frozenset(),
    Phase.DEAD_LETTERED: frozenset(),
}

#: Phases in which nothing may have been sent and no ticket may be held.
PRE_APPROVAL: frozenset[Phase] = frozenset(
    {Phase.INTAKE, Phase.DRAFTING, Phase.AWAITING_APPROVAL, Phase.REJECTED}
)
TERMINAL: frozenset[Phase] = frozenset({Phase.COMPLETED, Phase.REJECTED, Phase.DEAD_LETTERED})
