"""``grant_approval``: a parked case takes a server-issued ticket (Chapter 8, t6).

It lives above both the approval queue (``shopops.approvals``) and the process-wide wiring
(``shopops.runtime``), which builds the queue: so neither of those imports the other back.
"""

from __future__ import annotations

from shopops.approvals import NOTE_GATE, ApprovalQueue
from shopops.errors import ApprovalRefused
from shopops.failpoints import failpoint
from shopops.phases import Phase
from shopops.runtime import default_services
from shopops.state import State
from shopops_contract.digests import note_digest


def grant_approval(state: State, ticket_id: str, *, queue: ApprovalQueue | None = None) -> None:
    """Grant a server-issued ticket to a parked case: ``awaiting_approval → approved``.

    Args:
        state: the case, in ``awaiting_approval`` with a draft.
        ticket_id: the ticket the human's approval produced (``"apr-desk-9"``).
        queue: the approval queue; default the one configured by ``shopops.runtime``.

    Raises:
        ApprovalRefused: wrong phase, no draft, or any ``ApprovalQueue.verify`` refusal —
            a ticket merely written into the state, for another case, for a stale draft, or
            consumed.
    """
    if queue is None:
        queue = default_services().approvals
    if state.phase != Phase.AWAITING_APPROVAL:
        raise ApprovalRefused(
            f"grant_approval needs phase awaiting_approval, {state.case_id} is {state.phase}",
            ticket_id=ticket_id, case_id=state.case_id, reason="wrong_phase",
        )
    if state.draft is None:
        raise ApprovalRefused(
            f"{state.case_id} has no draft to approve", ticket_id=ticket_id,
            case_id=state.case_id, reason="no_draft",
        )
    queue.verify(ticket_id, state.case_id, state.draft.digest())
    state.approval_ticket = ticket_id
    state.transition(Phase.APPROVED)
    failpoint("t6.approval_granted")


def grant_note(state: State, ticket_id: str, *, queue: ApprovalQueue) -> None:
    """Take the server-issued ticket of the order note (gate ``add_order_note``) into a
    parked case that has the note; no phase change (``grant_approval`` of the email moves
    the case to ``approved``, and must come after this).

    Raises:
        ApprovalRefused: the case has no note, or any ``ApprovalQueue.verify`` refusal for
            the note's gate and digest.
    """
    if not state.order_note or state.note_text is None:
        raise ApprovalRefused(
            f"{state.case_id} has no order note to approve", ticket_id=ticket_id,
            case_id=state.case_id, reason="no_draft",
        )
    queue.verify(ticket_id, state.case_id, note_digest(state.order_id, state.note_text),
                 gate=NOTE_GATE)
    state.note_ticket = ticket_id
