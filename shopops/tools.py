"""The loop's tools. Each takes the ``State`` and the ``Services`` and updates the state.

Intake reads (``get_customer``, ``get_order``) and ``draft_email`` only change memory;
``propose_send`` writes an approval request (a side effect on the queue) and parks the
case; ``send_email`` is the consequential side effect, guarded by the ticket re-check and
an idempotency key that is durable before the request leaves (Chapter 6 + Chapter 8).
A case with the order note (``state.order_note``) has a second gated side effect,
``add_order_note``, with its own approval, ticket and key, done after the email.
"""

from __future__ import annotations

from collections.abc import Callable

from shopops.approvals import NOTE_GATE
from shopops.errors import ApprovalRefused, IllegalTransition
from shopops.failpoints import failpoint
from shopops.phases import Phase
from shopops.runtime import Services
from shopops.state import Draft, State
from shopops_contract.digests import note_digest


def get_customer(state: State, svc: Services) -> None:
    """Intake: read the customer who placed ``state.order_id`` into ``state.customer``."""
    state.customer = svc.records.customer_for_order(state.order_id)
    failpoint("t1.get_customer")


def get_order(state: State, svc: Services) -> None:
    """Intake: read the order into ``state.order``."""
    state.order = svc.records.order(state.order_id)
    failpoint("t1.get_order")


def draft_email(state: State, svc: Services) -> None:
    """Ask the policy for the draft. Never called once a draft exists (the loop's policy
    only picks it in ``drafting`` without a draft).

    Raises:
        IllegalTransition: a draft already exists (re-drafting would void the approval).
    """
    if state.draft is not None:
        raise IllegalTransition(
            f"{state.case_id} already has a draft; re-drafting is not allowed",
            source=state.phase, target=state.phase,
        )
    assert state.customer is not None and state.order is not None
    state.draft = svc.policy.draft(state.customer, state.order, state.review_feedback)
    if state.order_note:
        state.note_text = note_for(state.order_id, state.draft)
    failpoint("t1.draft_email")


def note_for(order_id: str, draft: Draft) -> str:
    """The order note of a case whose customer gets ``draft``: it names the email's subject
    and digest, so a new draft needs a new note approval."""
    return (f"Customer emailed about order {order_id}: {draft.subject!r} "
            f"(draft {draft.digest()[:12]}).")


def propose_send(state: State, svc: Services) -> None:
    """Ask a human to approve the send of the current draft; park (→ awaiting_approval)."""
    draft = _require_draft(state)
    state.approval_request_id = svc.approvals.request(state.case_id, draft.digest())
    if state.order_note:
        state.note_request_id = svc.approvals.request(
            state.case_id, note_digest(state.order_id, _require_note(state)), gate=NOTE_GATE)
    state.transition(Phase.AWAITING_APPROVAL)
    failpoint("t2.send_proposed")


def send_key(state: State) -> str:
    """The idempotency key of the case's one logical send, derived from durable facts (the
    case and the approved draft's digest) so it is the same before and after any crash."""
    return f"{state.case_id}:send_email:{_require_draft(state).digest()[:16]}"


def note_key(state: State) -> str:
    """The order note's own idempotency key, from durable facts (case and note digest)."""
    digest = note_digest(state.order_id, _require_note(state))
    return f"{state.case_id}:{NOTE_GATE}:{digest[:16]}"


def add_order_note(state: State, svc: Services,
                   guard: Callable[[], None] | None = None) -> None:
    """Add the approved order note through the harness's order service, once: the note's
    ticket is re-checked and bound to the note's key (gate ``add_order_note``), then sent;
    a retry or resumed worker reuses the key.

    Raises:
        ApprovalRefused: no note ticket or key, or the queue refuses the ticket.
        shopops.errors.GatewayError, shopops.errors.FencedOff: as ``send_email``.
    """
    body = _require_note(state)
    if state.note_ticket is None or state.note_idempotency_key is None:
        raise ApprovalRefused(
            f"{state.case_id}: refusing to add the order note without a ticket and a key",
            ticket_id=state.note_ticket, case_id=state.case_id, reason="no_ticket",
        )
    svc.approvals.consume(state.note_ticket, state.case_id, note_digest(state.order_id, body),
                          state.note_idempotency_key, gate=NOTE_GATE)
    result = svc.require_gateway().add_note(
        case_id=state.case_id, order_id=state.order_id, body=body,
        idempotency_key=state.note_idempotency_key, before_attempt=guard)
    state.note_sent = True
    state.note_delivery_id = result.delivery_id


def send_email(state: State, svc: Services,
               guard: Callable[[], None] | None = None) -> None:
    """Send the approved draft through the gateway, once.

    Requires phase ``sending`` with the idempotency key and the ticket already in the
    (checkpointed) state. Re-checks the ticket with the queue and binds it to the key, then
    sends; a retry or a resumed worker reuses the same key, so the gateway dedupes.

    Args:
        guard: called before every attempt leaves (the loop's lease check); raises to stop.

    Raises:
        ApprovalRefused: no ticket, or the queue refuses it.
        shopops.errors.GatewayError: the gateway refused or stayed unreachable.
        shopops.errors.FencedOff: from ``guard``: the lease was taken over.
    """
    draft = _require_draft(state)
    if state.approval_ticket is None or state.send_idempotency_key is None:
        raise ApprovalRefused(
            f"{state.case_id}: refusing to send without a ticket and a durable key",
            ticket_id=state.approval_ticket, case_id=state.case_id, reason="no_ticket",
        )
    svc.approvals.consume(
        state.approval_ticket, state.case_id, draft.digest(), state.send_idempotency_key
    )
    result = svc.require_gateway().send(
        case_id=state.case_id, to=draft.to, subject=draft.subject, body=draft.body,
        idempotency_key=state.send_idempotency_key, before_attempt=guard,
    )
    state.email_sent = True
    state.delivery_id = result.delivery_id


def _require_draft(state: State) -> Draft:
    if state.draft is None:
        raise IllegalTransition(
            f"{state.case_id} has no draft", source=state.phase, target=state.phase
        )
    return state.draft



def _require_note(state: State) -> str:
    if state.note_text is None:
        raise IllegalTransition(
            f"{state.case_id} has no order note", source=state.phase, target=state.phase
        )
    return state.note_text
