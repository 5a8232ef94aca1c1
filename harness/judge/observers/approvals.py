"""The observer of the approval records the harness holds (its approval service's file,
``harness.services.approvals``): every request and ticket of the case, read-only, as the
harness's own ``ApprovalRecord``/``TicketRecord`` (the wire fields of ``docs/contract.md``,
"The approval protocol"). These records are the harness's, so they show every ask and
every decision whatever the loop is built on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
from pathlib import Path
from typing import Any

from harness.judge.observers.store import open_readonly
from harness.model.observations import ApprovalRecord, TicketRecord

__all__ = ["read_records", "records_of"]


def _select(conn: sqlite3.Connection, table: str, cls: type[Any],
            case_id: str) -> list[Any]:
    have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    names = [f.name for f in dataclasses.fields(cls)]
    cols = ", ".join(f'"{n}"' if n in have else f"NULL AS {n}" for n in names)
    rows = conn.execute(f"SELECT {cols} FROM {table} WHERE case_id = ? ORDER BY rowid",
                        (case_id,)).fetchall()
    defaults = {f.name: f.default for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING}
    return [cls(**{n: (defaults[n] if v is None and n in defaults and n != "feedback" else v)
                   for n, v in zip(names, row, strict=True)}) for row in rows]


def read_records(db: str | os.PathLike[str], case_id: str
                 ) -> tuple[tuple[ApprovalRecord, ...], tuple[TicketRecord, ...]]:
    """The case's requests and tickets in the order they were written (``((), ())`` when
    the file does not exist: nobody asked yet).

    Raises:
        sqlite3.Error: the file cannot be read.
    """
    path = Path(db)
    if not os.path.lexists(path):
        return (), ()
    with contextlib.closing(open_readonly(path)) as conn:
        return records_of(conn, case_id)


def records_of(conn: sqlite3.Connection, case_id: str
               ) -> tuple[tuple[ApprovalRecord, ...], tuple[TicketRecord, ...]]:
    """``read_records`` through an open connection (the approval service's, whose records
    are in memory: ``harness.services.approvals.ApprovalService.read``).

    Raises:
        sqlite3.Error: the records cannot be read.
    """
    return (tuple(_select(conn, "approval_requests", ApprovalRecord, case_id)),
            tuple(_select(conn, "tickets", TicketRecord, case_id)))
