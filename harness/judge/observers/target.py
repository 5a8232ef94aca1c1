"""The observer of a target's ``history`` (``docs/contract.md``, "A target's history"): the
JSON list a target's ``history(ctx)`` returns, one object per durable write, oldest first,
each holding any of the ``state_json`` fields of the contract (``state.schema.json``) and
the lease fields ``lease_owner``, ``fence``, ``writer_pid``; a ``null`` is a field not
reported in that write.

A target shows what its own storage keeps: a field it never reports is not observed
(``History.observes`` leaves it out) and the checks that need it are not applicable for
it. A field it reports with the wrong type makes that write unreadable, named, like a bad
checkpoint row. It cannot show the stored rows byte for byte (``Observable.ROWS``): the
checks over injected storage faults are the checkpoint store's; a replaced or rewritten
history is judged on its objects instead, as read after each worker (``item_digests``,
``history_not_replaced``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from harness.model.observations import (
    Draft,
    DurableWrite,
    GateState,
    History,
    HistorySource,
    Observable,
)
from shopops_contract.approvals import DEFAULT_GATE, NOTE_GATE
from shopops_contract.digests import note_digest
from shopops_contract.phases import Phase
from shopops_contract.schema import partial_state_problems

__all__ = ["FIELDS", "history_of", "item_digests"]

#: Each field a target's history may report, and what it lets the judge observe.
FIELDS: dict[str, Observable] = {
    "phase": Observable.PHASE, "step": Observable.STEP, "draft": Observable.DRAFT,
    "approval_ticket": Observable.TICKET, "note_ticket": Observable.TICKET,
    "send_idempotency_key": Observable.KEY, "note_idempotency_key": Observable.KEY,
    "email_sent": Observable.SENT, "note_sent": Observable.SENT,
    "recovery_attempts": Observable.ATTEMPTS, "fence": Observable.LEASE,
}
_LEASE: dict[str, type] = {"lease_owner": str, "fence": int, "writer_pid": int}


def _problem(i: int, item: object) -> str | None:
    if not isinstance(item, dict):
        return f"history[{i}]: expected an object, got {type(item).__name__}"
    # a null is "not reported in this write": the types are checked on what is reported
    found = list(partial_state_problems({k: v for k, v in item.items() if v is not None}))
    for name, kind in _LEASE.items():
        value = item.get(name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            found.append(f"field {name!r}: {value!r:.40} is not a {kind.__name__}")
    return f"history[{i}]: " + "; ".join(found) if found else None


def _write(i: int, item: dict[str, Any]) -> DurableWrite:
    draft = item.get("draft")
    gates = [GateState(DEFAULT_GATE, item.get("approval_request_id"),
                       item.get("approval_ticket"), item.get("send_idempotency_key"),
                       item.get("email_sent"), item.get("delivery_id"))]
    if item.get("order_note") is True:
        text, order = item.get("note_text"), item.get("order_id")
        gates.append(GateState(NOTE_GATE, item.get("note_request_id"), item.get("note_ticket"),
                               item.get("note_idempotency_key"), item.get("note_sent"),
                               item.get("note_delivery_id"),
                               note_digest(order, text) if isinstance(text, str)
                               and isinstance(order, str) else None))
    phase = item.get("phase")
    return DurableWrite(
        i + 1, Phase(phase) if phase is not None else None, item.get("step"),
        Draft(draft["to"], draft["subject"], draft["body"]) if isinstance(draft, dict)
        else None, tuple(gates), item.get("recovery_attempts"), item.get("lease_owner"),
        item.get("fence"), item.get("writer_pid"), revision=item.get("draft_revision"))


def history_of(items: tuple[object, ...]) -> History:
    """The target's ``History`` from the objects its ``history`` returned."""
    writes, seen = [], set()
    for i, item in enumerate(items):
        if isinstance(item, dict):  # reported, even with a wrong type: then judged unreadable
            seen |= {FIELDS[k] for k in item if k in FIELDS and item[k] is not None}
        problem = _problem(i, item)
        if problem is not None:
            writes.append(DurableWrite(i + 1, problem=problem))
            continue
        assert isinstance(item, dict)
        writes.append(_write(i, item))
    missing = sorted(set(Observable) - seen - {Observable.ROWS})
    return History(HistorySource.TARGET_HISTORY, tuple(writes), frozenset(seen),
                   "its history reports no " + ", ".join(missing) if missing
                   else "the stored rows byte for byte (its own storage)")


def item_digests(items: tuple[object, ...]) -> tuple[str, ...]:
    """The SHA-256 (hex) of each object a target's ``history`` returned, as its canonical
    JSON (sorted keys, no spaces, non-ASCII escaped; ``HistoryRead.items``): two reads hold
    the same item only if it holds the same JSON. The objects came from JSON, so each
    dumps."""
    return tuple(hashlib.sha256(json.dumps(item, sort_keys=True, separators=(",", ":"))
                                .encode("ascii")).hexdigest() for item in items)
