"""The approval queue's records: a request awaiting a human and a server-issued ticket.

The records are the contract's (``shopops_contract.approvals.ApprovalRequest``,
``Ticket``), shared by the queue's logic (``shopops.approvals``), its SQLite store
(``shopops.approval_store``) and its client of a harness-owned approval service
(``shopops.approval_client``); ``to_wire``/``from_wire`` are their JSON form on that
service's socket (field name → value, the dataclass's own field names).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any, TypeVar

from shopops_contract.approvals import ApprovalRequest, RequestStatus, Ticket

__all__ = ["STATUSES", "ApprovalRequest", "Ticket", "from_wire", "iso", "to_wire"]

STATUSES: tuple[str, ...] = tuple(RequestStatus)


R = TypeVar("R", ApprovalRequest, Ticket)


def iso(epoch: float) -> str:
    """``epoch`` seconds as ISO-8601 UTC with microseconds (``2026-12-01T10:00:00.000000Z``)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def to_wire(record: ApprovalRequest | Ticket) -> dict[str, Any]:
    """The record as a JSON object (its fields by name). The records' fields are flat
    (strings, numbers, ``RequestStatus``), so no deep copy (``dataclasses.asdict``) is
    needed: it was a fifth of the approval service's CPU."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def from_wire(cls: type[R], data: object) -> R:
    """A record from its JSON object.

    Raises:
        ValueError: not an object, a field missing or unknown, or a value of the wrong
            type (text fields must be strings; ``issued_at_epoch`` a finite number).
    """
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
    for name, field in fields.items():
        if name not in data:
            if field.default is dataclasses.MISSING:
                raise ValueError(f"{cls.__name__}: field {name} missing")
            continue
        value = data[name]
        if name == "issued_at_epoch":
            ok = isinstance(value, int | float) and not isinstance(value, bool) \
                and value == value and abs(value) < 1e11
        else:
            ok = isinstance(value, str) or (value is None and "None" in str(field.type))
        if not ok:
            raise ValueError(f"{cls.__name__}: field {name} has a bad value {value!r}")
    return cls(**data)
