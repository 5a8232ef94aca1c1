"""The per-action check: each gated side effect happens exactly as a human decided it
(issue 9, part C: "per gated action: at most one delivery, exactly one when approved, none
when rejected; the body sent is the body approved").

A gated action is a side effect a human approves through the approval queue before it may
happen. ``ACTIONS`` lists them as data: the gate's name, and how to read from the evidence
the deliveries the harness-owned mock service made for it and the digest each delivery's
content has (the digest approvals bind to). The reference loop has two: ``send_email`` (the
O-1001 email, delivered by the mock gateway) and, with ``sut.order_note``,
``add_order_note`` (an order note saying the customer was emailed, added by the harness's
mock order service, read from that service's own ledger). The approval records of each
action are those of its gate (``Ticket.gate``, ``ApprovalRequest.gate``): an approval of
one action never makes content of the other approved.

The rules, per action, from the evidence the harness gathered itself (the gateway's ledger,
the approval queue's records, the checkpoint rows it read):

- at most one delivery for the case (exactly-once, Chapter 8's idempotency keys);
- every delivery carries content a human approved: its digest is the digest of a draft the
  queue issued a ticket for (``docs/design.md``, "Approvals"; Chapter 29: an approval binds
  to the exact content approved);
- no delivery of content a human rejected, and none at all for a case that ended
  ``rejected``;
- exactly one delivery when the case completed, for every action the case has
  (``Evidence.gates``: an approved action that the final checkpoint calls done was really
  done once); an action the case does not have is never approved, so any delivery of it
  fails the rule above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.judge.checks.support import draft_digest, writes
from harness.model import (
    DEFAULT_GATE,
    NOTE_GATE,
    CheckId,
    CheckResult,
    Delivery,
    DurableWrite,
    Evidence,
    NoteDelivery,
    key_text,
)
from shopops_contract.approvals import RequestStatus
from shopops_contract.digests import note_digest
from shopops_contract.phases import Phase

__all__ = ["ACTIONS", "CHECK_ID", "GatedAction", "per_action"]

CHECK_ID = CheckId.PER_ACTION


@dataclass(frozen=True)
class GatedAction:
    """One gated side effect, as the checks read it.

    Attributes:
        gate: the approval gate's name (``"send_email"``, ``"add_order_note"``).
        deliveries: the evidence's deliveries of this action for the case, from the
            action's own ledger, in ledger order.
        digest: the SHA-256 hex digest of a delivery's content, computed the way the
            approval queue's ``draft_digest`` is (so sent and approved content compare).
        gate's writes: its ``GateState`` in a durable write says the action was done
            (``sent``: the service confirmed it): then a missing delivery is a proven loss,
            the loop will not do it again.
    """

    gate: str
    deliveries: Callable[[Evidence], tuple[Any, ...]]
    digest: Callable[[Any], str]



def _emails(ev: Evidence) -> tuple[Delivery, ...]:
    return tuple(ev.gateway.deliveries_for(ev.case_id))


def _notes(ev: Evidence) -> tuple[NoteDelivery, ...]:
    return tuple(ev.gateway.notes_for(ev.case_id))


#: The gated actions of the O-1001 story. ``send_email`` is the default gate.
ACTIONS: tuple[GatedAction, ...] = (
    GatedAction(DEFAULT_GATE, _emails, lambda d: draft_digest(d.to, d.subject, d.body)),
    GatedAction(NOTE_GATE, _notes, lambda n: note_digest(n.order_id, n.body)),
)


def _judge_action(ev: Evidence, action: GatedAction, done: Sequence[DurableWrite]
                  ) -> tuple[list[str], list[str]]:
    """``(lines, problems)`` for one action, over the loop's readable durable writes."""
    final_phase = done[-1].phase if done else None
    approved = {t.draft_digest for t in ev.tickets if t.gate == action.gate}
    rejected = {r.draft_digest for r in ev.approval_requests
                if r.status == RequestStatus.REJECTED and r.gate == action.gate}
    sent = action.deliveries(ev)
    lines = [f"{action.gate}: {len(sent)} delivery(ies); {len(approved)} approved and "
             f"{len(rejected)} rejected digest(s); final phase {final_phase or 'none'}"]
    problems: list[str] = []
    if len(sent) > 1:
        problems.append(f"{action.gate}: {len(sent)} deliveries "
                        f"({', '.join(d.delivery_id for d in sent)}); at most one is allowed")
    for d in sent:
        digest = action.digest(d)
        lines.append(f"{action.gate}: delivery {d.delivery_id} key {key_text(d.idempotency_key)} "
                     f"digest {digest[:12]}")
        if digest in rejected:
            problems.append(f"{action.gate}: delivery {d.delivery_id} sent content a human "
                            f"rejected (digest {digest[:12]})")
        elif digest not in approved:
            problems.append(f"{action.gate}: delivery {d.delivery_id} sent content no human "
                            f"approved (digest {digest[:12]}; approved: "
                            f"{', '.join(sorted(a[:12] for a in approved)) or 'none'})")
    if final_phase == Phase.REJECTED and sent:
        problems.append(f"{action.gate}: the case ended rejected but "
                        f"{len(sent)} delivery(ies) were made")
    if final_phase == Phase.COMPLETED and not sent and action.gate in ev.gates:
        problems.append(f"{action.gate}: the case completed with no delivery")
    claims = [w.seq for w in done if w.gate(action.gate).sent]
    if claims and not sent:
        problems.append(f"{action.gate}: checkpoint seq {claims[0]} says it was done, but "
                        "its ledger at the gateway holds no delivery (a proven loss: the "
                        "loop will not do it again)")
    return lines, problems


def per_action(ev: Evidence) -> CheckResult:
    """Per gated action (``ACTIONS``): at most one delivery, exactly one when the case
    completed (for each action the case has, ``Evidence.gates``), none of rejected content
    nor for a rejected case, and the content sent is content a human approved on that
    action's gate (by digest).

    Args:
        ev: the execution's evidence (reads the checkpoints, approval records, gateway).

    Returns:
        ``CheckResult(CheckId.PER_ACTION, ...)``; the evidence lines name each action's
        deliveries and digests. An unreadable loop checkpoint is a failure (the final phase
        cannot be trusted), never a pass.
    """
    done, unreadable = writes(ev)
    lines: list[str] = []
    problems: list[str] = []
    for action in ACTIONS:
        if action.gate not in ev.gates and not action.deliveries(ev):
            continue  # an action the case does not have, and that did not happen
        got_lines, got_problems = _judge_action(ev, action, done)
        lines += got_lines
        problems += got_problems
    if unreadable:
        return CheckResult(CHECK_ID, False, unreadable[0], tuple(lines + unreadable))
    if problems:
        return CheckResult(CHECK_ID, False, problems[0], tuple(lines + problems))
    return CheckResult(CHECK_ID, True,
                       f"{len(ev.gates)} gated action(s), each delivered as approved",
                       tuple(lines))

