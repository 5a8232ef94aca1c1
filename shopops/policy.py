"""Policies: the deterministic stand-in for the model that picks the next tool and writes
the draft. Pluggable through the ``Policy`` protocol.

``DeterministicPolicy`` writes the same draft every time. ``VaryingDraftPolicy`` writes a
different draft on every call (as a sampled model would), which proves that a checkpointed
draft is never re-drafted: if resume asked the policy again, the approved digest and the
sent body would disagree.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any, Protocol

from shopops.phases import Phase
from shopops.state import Draft, State


class Policy(Protocol):
    """What the loop asks the model: which tool next, and the draft text."""

    version: str
    model_route_id: str

    def next_tool(self, state: State) -> str | None:
        """The next tool's name, or ``None`` to stop (parked, or terminal)."""
        ...

    def draft(self, customer: dict[str, Any], order: dict[str, Any],
              feedback: Sequence[str] = ()) -> Draft:
        """Write the email for this customer and order, answering the reviewers'
        ``feedback`` (oldest first; empty for the first draft)."""
        ...


class DeterministicPolicy:
    """Same state in, same tool and same draft out."""

    version = "policy-deterministic-1"
    model_route_id = "route-none-deterministic"

    def next_tool(self, state: State) -> str | None:
        """Intake reads, then draft, propose, and (once approved) send."""
        phase = Phase(state.phase)
        if phase is Phase.INTAKE:
            return "get_customer" if state.customer is None else "get_order"
        if phase is Phase.DRAFTING:
            return "draft_email" if state.draft is None else "propose_send"
        if phase in (Phase.APPROVED, Phase.SENDING):
            return "send_email"
        return None  # awaiting_approval parks; completed/rejected are terminal

    def draft(self, customer: dict[str, Any], order: dict[str, Any],
              feedback: Sequence[str] = ()) -> Draft:
        """A fixed template over the customer's name and the order's facts; after a
        rejection, the newest feedback is answered in a line of its own."""
        first = str(customer.get("name", "there")).split()[0]
        eta = order.get("carrier_eta") or "soon"
        body = (
            f"Hi {first},\n\n"
            f"Thanks for your patience with order {order['order_id']} ({order.get('item')}). "
            f"It is currently {str(order.get('status', 'in progress')).replace('_', ' ')}; "
            f"the carrier now expects it by {eta}. We're sorry for the wait.\n\n"
            + (f"(Revised after review: {feedback[-1]})\n\n" if feedback else "")
            + "— ShopOps support"
        )
        return Draft(
            to=str(customer["email"]),
            subject=f"Update on your order {order['order_id']}",
            body=body,
        )


class VaryingDraftPolicy(DeterministicPolicy):
    """Like ``DeterministicPolicy`` but every draft carries a fresh random reference."""

    version = "policy-varying-1"
    model_route_id = "route-none-varying"

    def draft(self, customer: dict[str, Any], order: dict[str, Any],
              feedback: Sequence[str] = ()) -> Draft:
        """The deterministic draft plus a random 64-bit reference line."""
        base = super().draft(customer, order, feedback)
        return Draft(base.to, base.subject, base.body + f"\n\nRef: {secrets.token_hex(8)}")


POLICIES: dict[str, type[DeterministicPolicy]] = {
    "deterministic": DeterministicPolicy,
    "varying": VaryingDraftPolicy,
}


def make_policy(name: str) -> Policy:
    """Build a policy by name.

    Raises:
        ValueError: unknown name; the message lists ``POLICIES``.
    """
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(POLICIES)}") from None
