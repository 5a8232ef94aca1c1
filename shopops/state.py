"""The case ``State``: what a checkpoint holds, and its exact JSON form.

Chapter 8, "What belongs in the snapshot": phase, drafts, tickets, counters, flags, plus
snapshot metadata (policy version, tool schema hash, model route id). Never secrets, raw
HTTP bodies or full CRM dumps: the Intake facts are the few fields the draft needs.

Schema versions: v1 is the chapter's teaching schema (``V1_FIELDS``); v2 adds
``preferred_channel`` (exercise 2, default ``"email"``) and the fields of the production
loop: ``recovery_attempts``, ``dead_letter_reason``, ``draft_revision``,
``review_feedback``. ``State.from_dict`` reads only the current version; older rows go
through the explicit migration in ``shopops.checkpoint``, which sets every v2 field.

The order note (issue 9: the second gated action, ``NOTE_FIELDS``) came to v2 later: a v2
row written before it has none of those fields, and reads as a case without a note (every
note field at its "no note" value). That is the only absence ``from_dict`` accepts; a row
with some note fields and not others is refused like any other missing field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from shopops.errors import StateInvalid
from shopops.phases import Phase, check_transition
from shopops_contract.digests import draft_digest

SCHEMA_VERSION = 2
DEFAULT_MAX_STEPS = 8
#: The fields of a schema v1 state (Chapter 8's teaching schema); v2 adds the others.
V1_FIELDS: tuple[str, ...] = (
    "case_id", "order_id", "phase", "step", "max_steps", "done", "customer", "order", "draft",
    "approval_request_id", "approval_ticket", "send_idempotency_key", "email_sent",
    "delivery_id", "schema_version", "policy_version", "tool_schema_hash", "model_route_id")
#: The order note's fields and their "no note" values; a v2 row from before them lacks all.
NOTE_FIELDS: dict[str, object] = {
    "order_note": False, "note_text": None, "note_request_id": None, "note_ticket": None,
    "note_idempotency_key": None, "note_sent": False, "note_delivery_id": None}


@dataclass(frozen=True)
class Draft:
    """An email draft: recipient address, subject line, body text (all ``str``)."""

    to: str
    subject: str
    body: str

    def digest(self) -> str:
        """SHA-256 hex digest of the draft's canonical JSON; approvals bind to it
        (``shopops_contract.digests.draft_digest``)."""
        return draft_digest(self.to, self.subject, self.body)


@dataclass
class State:
    """One case's durable state (schema v2).

    Fields:
        case_id, order_id: identity of the case (``"case-O-1001"``, ``"O-1001"``).
        phase: a ``Phase`` value (``str``).
        step: tool calls made so far in this run; continues across resume (checklist 4).
        max_steps: ``run_loop`` stops when ``step >= max_steps``.
        done: true when the loop stopped by design (parked, completed, rejected).
        customer, order: the Intake facts, small ``dict[str, Any]`` records or ``None``.
        draft: the ``Draft`` or ``None``.
        approval_request_id: the queue's request id once the send was proposed.
        approval_ticket: a ticket id granted by ``grant_approval``; never trusted by itself.
        send_idempotency_key: the key of the one logical send, durable before it leaves.
        email_sent: true only once the gateway confirmed the delivery.
        delivery_id: the gateway's delivery id.
        preferred_channel: v2 field (exercise 2), ``"email"``.
        recovery_attempts: how many times a worker picked the case up from a checkpoint
            that a previous worker left in flight (it stopped without parking or ending:
            killed); never goes down. Past the maximum the case is dead-lettered.
        dead_letter_reason: why the case was dead-lettered (``None`` otherwise).
        draft_revision: 0 for the first draft, +1 at every redraft after a rejection.
        review_feedback: the reviewers' feedback, one ``str`` per rejection, in order; the
            redraft answers it.
        order_note: the case has the second gated action, an order note saying the customer
            was emailed (``shopops run --order-note``); the case completes only once both
            the email and the note are done.
        note_text: the note's body, written with the draft (it names the draft's digest, so
            a redraft voids a note approval too); ``None`` until then or without a note.
        note_request_id, note_ticket: the note's approval request and granted ticket (gate
            ``add_order_note``), like ``approval_request_id``/``approval_ticket``.
        note_idempotency_key: the note's own key, durable before its first attempt.
        note_sent, note_delivery_id: the order service confirmed the note, and its id.
        schema_version, policy_version, tool_schema_hash, model_route_id: snapshot metadata.
    """

    case_id: str
    order_id: str
    phase: str = Phase.INTAKE.value
    step: int = 0
    max_steps: int = DEFAULT_MAX_STEPS
    done: bool = False
    customer: dict[str, Any] | None = None
    order: dict[str, Any] | None = None
    draft: Draft | None = None
    approval_request_id: str | None = None
    approval_ticket: str | None = None
    send_idempotency_key: str | None = None
    email_sent: bool = False
    delivery_id: str | None = None
    preferred_channel: str = "email"
    recovery_attempts: int = 0
    dead_letter_reason: str | None = None
    draft_revision: int = 0
    review_feedback: list[str] = field(default_factory=list)
    order_note: bool = False
    note_text: str | None = None
    note_request_id: str | None = None
    note_ticket: str | None = None
    note_idempotency_key: str | None = None
    note_sent: bool = False
    note_delivery_id: str | None = None
    schema_version: int = SCHEMA_VERSION
    policy_version: str = ""
    tool_schema_hash: str = ""
    model_route_id: str = ""

    def transition(self, target: Phase | str) -> None:
        """Move to ``target`` after checking the FSM.

        Raises:
            IllegalTransition: the edge is not in ``shopops.phases.ALLOWED``.
        """
        self.phase = check_transition(self.phase, str(target)).value

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict (``draft`` nested as a dict). Inverse of ``from_dict``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = (asdict(value) if isinstance(value, Draft)
                           else list(value) if isinstance(value, list) else value)
        return out

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys): ``State.from_json(s.to_json()) == s``."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any) -> State:
        """Build a ``State`` from a decoded JSON object, checking every field strictly.

        Missing required fields, unknown fields, wrong types and unknown phases are errors:
        nothing is filled with a default (Chapter 8: never "best effort" defaults).

        Raises:
            StateInvalid: with ``field`` and ``reason`` naming the problem.
        """
        if not isinstance(data, dict):
            raise StateInvalid(
                f"state must be a JSON object, got {type(data).__name__}",
                field="<root>",
                reason="not an object",
            )
        known = {f.name for f in fields(cls)}
        if not any(name in data for name in NOTE_FIELDS):  # a v2 row from before the note
            data = {**data, **NOTE_FIELDS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise StateInvalid(
                f"unknown state field(s): {', '.join(unknown)}", field=unknown[0], reason="unknown"
            )
        missing = sorted(known - set(data))
        if missing:
            raise StateInvalid(
                f"missing state field(s): {', '.join(missing)}", field=missing[0], reason="missing"
            )
        for name, expected in _FIELD_TYPES.items():
            value = data[name]
            if not _type_ok(value, expected):
                raise StateInvalid(
                    f"state field {name!r} must be {_type_name(expected)}, got "
                    f"{type(value).__name__} {value!r:.60}",
                    field=name,
                    reason="wrong type",
                )
        if data["phase"] not in {p.value for p in Phase}:
            raise StateInvalid(
                f"state field 'phase' is {data['phase']!r}; allowed: "
                f"{', '.join(p.value for p in Phase)}",
                field="phase",
                reason="unknown phase",
            )
        if data["schema_version"] != SCHEMA_VERSION:
            raise StateInvalid(
                f"state schema_version is {data['schema_version']!r}; this code reads "
                f"{SCHEMA_VERSION}",
                field="schema_version",
                reason="unsupported version",
            )
        if not all(isinstance(x, str) for x in data["review_feedback"]):
            raise StateInvalid("state field 'review_feedback' must be a list of strings",
                               field="review_feedback", reason="wrong type")
        _check_invariants(data)
        draft = data["draft"]
        if draft is not None:
            if set(draft) != {"to", "subject", "body"} or not all(
                isinstance(v, str) for v in draft.values()
            ):
                raise StateInvalid(
                    "state field 'draft' must be null or an object with string fields "
                    "to, subject, body",
                    field="draft",
                    reason="wrong shape",
                )
            draft = Draft(**draft)
        kwargs = dict(data)
        kwargs["draft"] = draft
        kwargs["review_feedback"] = list(data["review_feedback"])
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> State:
        """Parse canonical JSON text.

        Raises:
            StateInvalid: invalid JSON or an invalid state (see ``from_dict``).
        """
        try:
            data = json.loads(text)
        except RecursionError as exc:
            raise StateInvalid(
                "state_json nests too deeply to parse", field="<root>", reason="too deep"
            ) from exc
        except json.JSONDecodeError as exc:
            raise StateInvalid(
                f"state_json is not valid JSON: {exc}", field="<root>", reason="invalid json"
            ) from exc
        return cls.from_dict(data)


_OPT_STR = (str, type(None))
_OPT_DICT = (dict, type(None))
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "case_id": (str,),
    "order_id": (str,),
    "phase": (str,),
    "step": (int,),
    "max_steps": (int,),
    "done": (bool,),
    "customer": _OPT_DICT,
    "order": _OPT_DICT,
    "draft": _OPT_DICT,
    "approval_request_id": _OPT_STR,
    "approval_ticket": _OPT_STR,
    "send_idempotency_key": _OPT_STR,
    "email_sent": (bool,),
    "delivery_id": _OPT_STR,
    "preferred_channel": (str,),
    "recovery_attempts": (int,),
    "dead_letter_reason": _OPT_STR,
    "draft_revision": (int,),
    "review_feedback": (list,),
    "order_note": (bool,),
    "note_text": _OPT_STR,
    "note_request_id": _OPT_STR,
    "note_ticket": _OPT_STR,
    "note_idempotency_key": _OPT_STR,
    "note_sent": (bool,),
    "note_delivery_id": _OPT_STR,
    "schema_version": (int,),
    "policy_version": (str,),
    "tool_schema_hash": (str,),
    "model_route_id": (str,),
}


_NEEDS_DRAFT = {"awaiting_approval", "approved", "sending", "completed"}
_NEEDS_TICKET = {"approved", "sending", "completed"}


def _check_invariants(data: dict[str, Any]) -> None:
    """Facts a state in each phase must have, so that a consistent-looking but impossible
    checkpoint (``completed`` with nothing sent, ``approved`` without a ticket) fails closed
    instead of being resumed as if it were true.

    Raises:
        StateInvalid: naming the field the phase requires.
    """
    phase = data["phase"]
    required = [("draft", phase in _NEEDS_DRAFT and data["draft"] is None),
                ("approval_ticket", phase in _NEEDS_TICKET and data["approval_ticket"] is None),
                ("email_sent", phase == Phase.COMPLETED and not data["email_sent"]),
                ("note_sent", data["order_note"] and phase == Phase.COMPLETED
                 and not data["note_sent"]),
                ("note_ticket", data["order_note"] and phase in _NEEDS_TICKET
                 and data["note_ticket"] is None),
                ("order_note", not data["order_note"] and any(
                    data[n] != v for n, v in NOTE_FIELDS.items())),
                ("step", data["step"] < 0 or data["max_steps"] < 0),
                ("recovery_attempts", data["recovery_attempts"] < 0),
                ("draft_revision", data["draft_revision"] < 0
                 or data["draft_revision"] > len(data["review_feedback"])),
                ("dead_letter_reason", (phase == Phase.DEAD_LETTERED)
                 != (data["dead_letter_reason"] is not None))]
    for name, broken in required:
        if broken:
            raise StateInvalid(
                f"state field {name!r} contradicts phase {phase!r} (a state needs a draft "
                "from awaiting_approval on, a ticket from approved on, email_sent when "
                "completed, a reason exactly when dead_lettered, non-negative steps and "
                "attempts, no more redrafts than feedback, and with order_note a note ticket "
                "from approved on and note_sent when completed; without it no note field)",
                field=name,
                reason="inconsistent with phase",
            )


def _type_ok(value: Any, expected: tuple[type, ...]) -> bool:
    # bool is an int subclass: an int field must not accept True/False.
    if isinstance(value, bool) and bool not in expected:
        return False
    return isinstance(value, expected)


def _type_name(expected: tuple[type, ...]) -> str:
    names = ["null" if t is type(None) else t.__name__ for t in expected]
    return " or ".join(names)
