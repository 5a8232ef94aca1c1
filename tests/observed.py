"""Evidence for the unit tests of the checks, built as ``harness.run.execution.collect``
builds it: rows and approval records written with the reference loop's own types
(``shopops.checkpoint.CheckpointRow``, ``shopops.approvals.ApprovalRequest``/``Ticket``,
the easiest way to write a realistic story) turned into the harness's neutral ones, and
the history observed from the rows by the checkpoint store's observer — unless a test
gives its own ``history`` (a target's, say)."""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.judge.observers import store
from harness.model import ApprovalRecord, Evidence, StoredRow, TicketRecord


def stored(row: Any) -> StoredRow:
    """A ``StoredRow`` of a row of any type with the same column fields."""
    if isinstance(row, StoredRow):
        return row
    return StoredRow(row.seq, row.case_id, row.run_id, row.schema_version, row.state_json,
                     row.created_at, row.lease_owner, row.fence, row.writer_pid)


def _record(cls: type[Any], rec: Any) -> Any:
    if isinstance(rec, cls):
        return rec
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in dataclasses.asdict(rec).items() if k in names})


def observed(**fields: Any) -> Evidence:
    """``Evidence(**fields)`` with ``checkpoints``/``injected`` as ``StoredRow``, the
    approval records as the harness's, and ``history`` observed from ``checkpoints``."""
    fields["checkpoints"] = tuple(stored(r) for r in fields.get("checkpoints", ()))
    fields["injected"] = tuple(stored(r) for r in fields.get("injected", ()))
    fields["approval_requests"] = tuple(_record(ApprovalRecord, r)
                                        for r in fields.get("approval_requests", ()))
    fields["tickets"] = tuple(_record(TicketRecord, t) for t in fields.get("tickets", ()))
    fields.setdefault("history", store.history_of(fields["checkpoints"]))
    return Evidence(**fields)
