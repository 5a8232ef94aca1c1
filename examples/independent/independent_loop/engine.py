"""One worker's pass over a case: load or start, then step the phase machine until the
case parks or ends.

    intake -> drafting -> awaiting_approval -> approved -> sending -> completed
                 ^               |--> rejected
                 '---------------'   (rejected with feedback: draft again)
    any non-terminal phase -> dead_lettered (recoveries past --max-attempts)
"""

import json
import os
from dataclasses import dataclass

from . import clock, compose
from .approvals import QueueError
from .compose import GATE_EMAIL, GATE_NOTE
from .errors import ApprovalRefused, BadInput
from .gateway import Gateway

TERMINAL = ("completed", "rejected", "dead_lettered")
PARKED = ("awaiting_approval",)
POLICY_VERSION = "independent-policy-3"
TOOL_SCHEMA = "tools-2024-indep"


@dataclass
class Options:
    db: str
    case_id: str
    order_id: str
    run_id: str
    gateway_url: str
    keys_on: bool
    policy: str
    owner: str | None
    lease_ttl: float
    offered_ticket: str | None
    read_timeout: float
    max_attempts: int
    order_note: bool


class Park(Exception):
    """The case waits for a human: exit 0."""


class Finished(Exception):
    """The case reached a terminal phase (now or before): exit 0."""


def _load_fixture(name: str) -> dict:
    folder = os.environ.get("SHOPOPS_FIXTURES") or "fixtures"
    with open(os.path.join(folder, name), encoding="utf-8") as handle:
        return json.load(handle)


class Worker:
    def __init__(self, opts: Options, ledger, queue, mark):
        self.o = opts
        self.ledger = ledger
        self.queue = queue
        self.mark = mark
        self.gateway = Gateway(opts.gateway_url, opts.read_timeout, opts.keys_on)
        self.state: dict = {}
        self.verified: set[str] = set()

    # ---- the run ----------------------------------------------------------------------
    def run(self) -> str:
        if self.o.owner:
            self.ledger.acquire(self.o.owner, self.o.lease_ttl)
        loaded = self.ledger.latest()
        try:
            if loaded is None:
                self.state = self._fresh()
                self.mark("t0.case_started")
                self._save()
            else:
                self.state = loaded
                phase = loaded["phase"]
                if phase in TERMINAL:
                    self.mark("t6.checkpoint_loaded")
                    return f"case already {phase}"
                if phase in ("approved", "sending"):
                    # a ticket held in a checkpoint is not proof: ask the queue again
                    self._verify_held_tickets()
                if phase not in PARKED:
                    # durable before the first labelled point: a worker killed there was
                    # still a recovery (contract, "Recovery attempts and dead letters")
                    self._count_recovery()
                self.mark("t6.checkpoint_loaded")
            while True:
                step = getattr(self, "_on_" + self.state["phase"])
                step()
        except Park:
            self.mark("t4.parked")
            return "parked awaiting approval"
        except Finished:
            return f"case {self.state['phase']}"

    def _fresh(self) -> dict:
        state = {
            "case_id": self.o.case_id, "order_id": self.o.order_id,
            "phase": "intake", "step": 0, "draft": None,
            "approval_request_id": None, "approval_ticket": None,
            "send_idempotency_key": None, "email_sent": False, "delivery_id": None,
            "recovery_attempts": 0, "draft_revision": 0, "review_feedback": [],
            "dead_letter_reason": None, "preferred_channel": "email",
            "intake": None,
            "snapshot_meta": {"policy_version": POLICY_VERSION, "policy": self.o.policy,
                              "tool_schema_hash": TOOL_SCHEMA,
                              "model_route_id": f"route-template-{self.o.policy}"},
            "redrafts": [],
        }
        if self.o.order_note:
            state.update({"order_note": True, "note_text": None, "note_request_id": None,
                          "note_ticket": None, "note_idempotency_key": None,
                          "note_sent": False, "note_delivery_id": None})
        return state

    def _save(self) -> None:
        self.ledger.append(self.state)

    def _has_note(self) -> bool:
        return self.state.get("order_note") is True

    def _count_recovery(self) -> None:
        attempts = int(self.state.get("recovery_attempts") or 0) + 1
        if attempts > self.o.max_attempts:
            self.state["phase"] = "dead_lettered"
            self.state["dead_letter_reason"] = (
                f"picked up in flight {attempts} times (limit {self.o.max_attempts}); "
                f"last phase was in flight")
            self.state["recovery_attempts"] = attempts
            self._save()
            raise_finished()
        self.state["recovery_attempts"] = attempts
        self._save()

    # ---- phases -------------------------------------------------------------------------
    def _on_intake(self) -> None:
        customers = _load_fixture("customers.json")
        orders = _load_fixture("orders.json")
        order = orders.get(self.o.order_id)
        if order is None:
            raise BadInput(f"order {self.o.order_id} is not in the fixtures")
        customer = customers.get(order["customer_id"])
        if customer is None:
            raise BadInput(f"customer {order['customer_id']} is not in the fixtures")
        self.state["step"] += 1
        self.mark("t1.get_customer")
        self.state["step"] += 1
        self.mark("t1.get_order")
        self.state["intake"] = {"customer": customer, "order": order}
        self.state["phase"] = "drafting"
        self._save()

    def _intake(self) -> tuple[dict, dict]:
        facts = self.state.get("intake")
        if isinstance(facts, dict) and facts.get("customer") and facts.get("order"):
            return facts["customer"], facts["order"]
        # a migrated v1 state keeps the chapter's field names
        if isinstance(self.state.get("customer"), dict) and isinstance(self.state.get("order"),
                                                                       dict):
            return self.state["customer"], self.state["order"]
        raise BadInput("the checkpoint holds no intake facts to draft from")

    def _propose(self) -> None:
        self.state["phase"] = "awaiting_approval"
        self.state["step"] += 1
        self._ask(GATE_EMAIL)
        if self._has_note():
            self._ask(GATE_NOTE)
        self.mark("t2.send_proposed")
        self._save()
        self.mark("t3.checkpoint_saved")

    # the digest and derived ids of a gate's content
    def _digest(self, gate: str) -> str:
        if gate == GATE_EMAIL:
            return compose.draft_digest(self.state["draft"])
        return compose.note_digest(self.state["note_text"], self.o.order_id)

    def _request_field(self, gate: str) -> str:
        return "approval_request_id" if gate == GATE_EMAIL else "note_request_id"

    def _ticket_field(self, gate: str) -> str:
        return "approval_ticket" if gate == GATE_EMAIL else "note_ticket"

    def _key_field(self, gate: str) -> str:
        return "send_idempotency_key" if gate == GATE_EMAIL else "note_idempotency_key"

    def _key(self, gate: str) -> str:
        return compose.idempotency_key(self.o.case_id, gate, self._digest(gate))

    def _q(self, op: str, **arguments):
        try:
            return self.queue.call(op, **arguments)
        except QueueError as exc:
            raise ApprovalRefused(f"the approval service refused {op}: {exc}") from None

    def _find_request(self, gate: str) -> dict | None:
        digest = self._digest(gate)
        matches = [r for r in self._q("requests", case_id=self.o.case_id) or []
                   if r.get("gate", GATE_EMAIL) == gate and r.get("draft_digest") == digest]
        if not matches:
            return None
        held = self.state.get(self._request_field(gate))
        for r in matches:
            if r.get("request_id") == held:
                return r
        return matches[-1]

    def _ask(self, gate: str) -> dict:
        """Ask the human once per decision: find the request for this content, or add it."""
        found = self._find_request(gate)
        if found is None:
            found = {"request_id": compose.request_id(self.o.case_id, gate, self._digest(gate)),
                     "case_id": self.o.case_id, "draft_digest": self._digest(gate),
                     "requested_at": clock.iso(), "gate": gate}
            self._q("add_request", request=found)
            found = dict(found, status="pending", feedback=None)
        self.state[self._request_field(gate)] = found["request_id"]
        return found

    def _on_awaiting_approval(self) -> None:
        email_req = self._ask(GATE_EMAIL)
        if email_req.get("status") == "rejected":
            feedback = email_req.get("feedback")
            if isinstance(feedback, str) and feedback.strip():
                self._redraft(feedback)
                return
            self._end_rejected("the reviewer rejected the email")
        if self._has_note():
            note_req = self._ask(GATE_NOTE)
            if note_req.get("status") == "rejected":
                self._end_rejected("the reviewer rejected the order note")

        tickets = {GATE_EMAIL: self._pick_ticket(GATE_EMAIL, self.o.offered_ticket)}
        if self._has_note():
            tickets[GATE_NOTE] = self._pick_ticket(GATE_NOTE, None)
        if any(t is None for t in tickets.values()):
            raise Park()
        for gate, ticket_id in tickets.items():
            self._verify_ticket(gate, ticket_id)
        self.mark("t6.approval_granted")
        for gate, ticket_id in tickets.items():
            self.state[self._ticket_field(gate)] = ticket_id
        self.state["phase"] = "approved"
        self._save()

    def _pick_ticket(self, gate: str, offered: str | None) -> str | None:
        if offered:
            # an offered ticket is checked like any other: a bad one is refused, never
            # swapped for a good one from the queue
            self._verify_ticket(gate, offered)
            return offered
        digest, key = self._digest(gate), self._key(gate)
        usable = [t for t in self._q("tickets", case_id=self.o.case_id) or []
                  if t.get("gate", GATE_EMAIL) == gate and t.get("draft_digest") == digest
                  and t.get("case_id") == self.o.case_id
                  and t.get("consumed_by_key") in (None, key)]
        return usable[-1]["ticket_id"] if usable else None

    def _verify_ticket(self, gate: str, ticket_id: str) -> None:
        if ticket_id in self.verified:
            return
        ticket = self._q("ticket", ticket_id=ticket_id)
        if not isinstance(ticket, dict):
            raise ApprovalRefused(f"ticket {ticket_id} was never issued by the approval queue")
        if ticket.get("case_id") != self.o.case_id:
            raise ApprovalRefused(f"ticket {ticket_id} was issued for case "
                                  f"{ticket.get('case_id')}, not {self.o.case_id}")
        if ticket.get("gate", GATE_EMAIL) != gate:
            raise ApprovalRefused(f"ticket {ticket_id} is for gate {ticket.get('gate')}, "
                                  f"not {gate}")
        if ticket.get("draft_digest") != self._digest(gate):
            raise ApprovalRefused(f"ticket {ticket_id} approved other content "
                                  f"({str(ticket.get('draft_digest'))[:12]}), not the "
                                  f"current {self._digest(gate)[:12]}")
        consumed = ticket.get("consumed_by_key")
        if consumed not in (None, self._key(gate)):
            raise ApprovalRefused(f"ticket {ticket_id} was already consumed by another send")
        self.verified.add(ticket_id)

    def _verify_held_tickets(self) -> None:
        self._verify_ticket(GATE_EMAIL, self.state["approval_ticket"])
        if self._has_note():
            if not self.state.get("note_ticket"):
                raise ApprovalRefused("a checkpoint past approval holds no note ticket")
            self._verify_ticket(GATE_NOTE, self.state["note_ticket"])
        if self.o.offered_ticket and self.o.offered_ticket != self.state["approval_ticket"]:
            self._verify_ticket(GATE_EMAIL, self.o.offered_ticket)

    def _redraft(self, feedback: str) -> None:
        """The reviewer asked for changes: record the rejection durably (phase drafting,
        no current draft), then write the new draft answering the feedback."""
        notes = list(self.state.get("review_feedback") or [])
        notes.append(feedback)
        old = self.state["draft"]
        self.state["redrafts"] = list(self.state.get("redrafts") or []) + [
            {"revision": self.state.get("draft_revision", 0),
             "digest": compose.draft_digest(old), "request_id":
             self.state.get("approval_request_id"), "rejected_at": clock.iso()}]
        self.state["review_feedback"] = notes
        self.state["draft_revision"] = int(self.state.get("draft_revision") or 0) + 1
        self.state["draft"] = None
        self.state["approval_request_id"] = None
        self.state["phase"] = "drafting"
        self._save()

    def _on_drafting(self) -> None:
        if self.state["draft"] is None:
            customer, order = self._intake()
            feedback = list(self.state.get("review_feedback") or [])
            # a redraft answers the newest feedback
            self.state["draft"] = compose.write_draft(customer, order, feedback[-1:],
                                                      self.o.policy)
            if self._has_note() and self.state.get("note_text") is None:
                self.state["note_text"] = compose.write_note(customer, order)
            self.state["step"] += 1
            self.mark("t1.draft_email")
            self._save()
        self._propose()

    def _end_rejected(self, why: str) -> None:
        self.state["phase"] = "rejected"
        self.state["rejection"] = why
        self._save()
        raise_finished()

    def _on_approved(self) -> None:
        self.state["send_idempotency_key"] = self._key(GATE_EMAIL)
        if self._has_note():
            self.state["note_idempotency_key"] = self._key(GATE_NOTE)
        self.state["phase"] = "sending"
        self._save()
        self.mark("t6.send_key_persisted")

    def _bind(self, gate: str) -> None:
        self.ledger.guard()
        self._q("mark_consumed", ticket_id=self.state[self._ticket_field(gate)],
                key=self.state[self._key_field(gate)], at=clock.iso())

    def _on_sending(self) -> None:
        if self.state["send_idempotency_key"] != self._key(GATE_EMAIL):
            raise ApprovalRefused("the checkpointed key is not the key of the approved draft")
        self._bind(GATE_EMAIL)
        if self._has_note():
            self._bind(GATE_NOTE)
        if not self.state["email_sent"]:
            draft = self.state["draft"]

            def before_email():
                self.mark("t6.request_leaving")
                self.ledger.guard()

            reply = self.gateway.post(
                "/v1/messages",
                {"case_id": self.o.case_id, "to": draft["to"], "subject": draft["subject"],
                 "body": draft["body"]},
                self.state["send_idempotency_key"], before_email)
            self.mark("t6.reply_received")
            self.state["email_sent"] = True
            self.state["delivery_id"] = reply.get("delivery_id")
            self.state["step"] += 1
            if not self._has_note():
                self._complete()
            self._save()  # the email acknowledged before the note leaves
            self.mark("t6.email_sent_saved")
        if self._has_note() and not self.state.get("note_sent"):

            def before_note():
                self.mark("t6.note_request_leaving")
                self.ledger.guard()

            reply = self.gateway.post(
                "/v1/order-notes",
                {"case_id": self.o.case_id, "order_id": self.o.order_id,
                 "body": self.state["note_text"]},
                self.state["note_idempotency_key"], before_note)
            self.mark("t6.note_reply_received")
            self.state["note_sent"] = True
            self.state["note_delivery_id"] = (reply.get("delivery_id") or reply.get("note_id")
                                              or reply.get("id"))
            self.state["step"] += 1
        self._complete()

    def _complete(self) -> None:
        self.state["phase"] = "completed"
        self._save()
        self.mark("t7.completed_saved")
        raise_finished()


def raise_finished():
    raise Finished()
