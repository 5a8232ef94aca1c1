"""The observer of the contract's SQLite checkpoint store (``docs/contract.md``, "The
checkpoint database"): the case's stored rows, read-only and bounded, and each row read as
a ``DurableWrite`` through ``state.schema.json``.

What it reads is what the contract names and nothing else: the ``checkpoints`` table's
required columns (``seq``, ``case_id``, ``run_id``, ``schema_version``, ``state_json``,
``created_at``) and, where the table has them, the lease columns; from each row's
``state_json`` the fields of the schema. Any other table, column, index, trigger or
``state_json`` field is allowed and ignored. It can observe everything a check needs
(``Observable``), the lease only where the table records it.

A file an implementation wrote is untrusted: only a plain table is read (no view, no
virtual table, no generated column: each runs SQL of the file's choosing on read), with
``trusted_schema`` off, through a connection that cannot write and leaves no ``-wal`` or
``-shm`` behind, and never more than ``MAX_HISTORY_ROWS`` rows of a case.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Collection, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes

from harness.model.observations import (
    Draft,
    DurableWrite,
    GateState,
    History,
    HistorySource,
    LeaseSeen,
    Observable,
    StoredRow,
)
from shopops_contract.approvals import DEFAULT_GATE, NOTE_GATE
from shopops_contract.digests import note_digest
from shopops_contract.limits import MAX_HISTORY_ROWS
from shopops_contract.phases import Phase
from shopops_contract.schema import (
    CURRENT_VERSION,
    optional_columns,
    required_columns,
    state_problems,
)

__all__ = ["HistoryTooLong", "NotAContractStore", "history_of", "latest_row", "lease_of",
           "migrations",
           "open_readonly", "read_rows", "write_of"]

TABLE = "checkpoints"
_REQUIRED = required_columns(TABLE)
_OPTIONAL = optional_columns(TABLE)
_CONTRACT = 'docs/contract.md, "The checkpoint database"'


class NotAContractStore(ValueError):
    """The file is SQLite but holds no ``checkpoints`` table the contract can read (missing,
    missing a required column, a view or virtual table, a generated column): a named
    contract failure, not tampering."""


class NoTables(NotAContractStore):
    """The file is an SQLite database with no table, view or index at all: a loop killed
    after it created the file and before it committed its schema (a crash may land there,
    an unlabelled one too). Nothing was written yet: an empty history, as no file is."""


class HistoryTooLong(ValueError):
    """The case has more rows than ``MAX_HISTORY_ROWS``: nothing of it was decoded."""


def open_readonly(path: str | os.PathLike[str], timeout_s: float = 30.0) -> sqlite3.Connection:
    """A connection that cannot write ``path`` and leaves no file behind: ``mode=ro`` when
    a ``-wal`` exists (its committed pages must be read), else ``immutable=1`` (no
    ``-shm`` is created). ``trusted_schema`` is off, so nothing the file declares runs
    functions with side effects (SQLite, "PRAGMA trusted_schema").

    Raises:
        sqlite3.Error: SQLite cannot open it.
    """
    db = os.path.abspath(path)  # strings, not Path.resolve: ~0.3 ms a read (issue 27)
    if os.path.islink(db):  # SQLite follows it: its -wal is beside the file it names
        db = os.path.realpath(db)
    query = "mode=ro" if os.path.exists(f"{db}-wal") else "immutable=1"
    uri = f"file://{quote_from_bytes(os.fsencode(db))}?{query}"  # as Path.as_uri quotes
    conn = sqlite3.connect(uri, uri=True, timeout=timeout_s)
    conn.execute("PRAGMA trusted_schema = OFF")
    return conn


def _columns(conn: sqlite3.Connection, db: Path) -> set[str]:
    """The readable columns of the ``checkpoints`` table.

    Raises:
        NotAContractStore: no plain table with the required columns.
    """
    found = conn.execute("SELECT type, sql FROM sqlite_master WHERE name = ?",
                         (TABLE,)).fetchone()
    if found is None and conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0:
        raise NoTables(f"checkpoint database {db.name} has no schema yet")
    if found is None or found[0] != "table":
        raise NotAContractStore(
            f"checkpoint database {db.name} has no table {TABLE}"
            + (f" (it is a {found[0]})" if found else "") + f" ({_CONTRACT})")
    if str(found[1] or "").upper().lstrip().startswith("CREATE VIRTUAL"):
        raise NotAContractStore(f"checkpoint database {db.name}: {TABLE} is a virtual table, "
                                f"not a table ({_CONTRACT})")
    info = conn.execute(f"PRAGMA table_xinfo({TABLE})").fetchall()
    generated = {r[1] for r in info if r[6] in (2, 3)}
    have = {r[1] for r in info} - generated
    missing = [c for c in _REQUIRED if c not in have]
    if missing:
        raise NotAContractStore(
            f"checkpoint database {db.name}: table {TABLE} has no column(s) "
            f"{', '.join(missing)}" + (" (generated columns are not read)" if generated
                                       & set(missing) else "") + f" ({_CONTRACT})")
    return have


def _select(conn: sqlite3.Connection, have: set[str]) -> str:
    """The row query: the required columns, each optional one or NULL."""
    cols = [*_REQUIRED[:4], "CAST(state_json AS BLOB)", "created_at"]
    cols += [c if c in have else f"NULL AS {c}" for c in _OPTIONAL]
    return f"SELECT {', '.join(cols)} FROM {TABLE}"


def _row(r: tuple[Any, ...]) -> StoredRow:
    def text(v: Any) -> str:
        return v if isinstance(v, str) else "" if v is None else str(v)

    def num(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    state = r[4] if isinstance(r[4], bytes) or r[4] is None else str(r[4]).encode()
    return StoredRow(num(r[0]) or 0, text(r[1]), text(r[2]), num(r[3]), state, text(r[5]),
                     r[6] if isinstance(r[6], str) else None, num(r[7]), num(r[8]))


@contextlib.contextmanager
def _reading(db: Path) -> Iterator[tuple[sqlite3.Connection, set[str]]]:
    conn = open_readonly(db)
    try:
        yield conn, _columns(conn, db)
    finally:
        conn.close()


def read_rows(db: str | os.PathLike[str], case_id: str, *,
              max_rows: int = MAX_HISTORY_ROWS) -> tuple[StoredRow, ...]:
    """The case's stored rows, in ``seq`` order.

    Raises:
        FileNotFoundError: no file at ``db``.
        NotAContractStore: not a checkpoint database the contract can read.
        HistoryTooLong: more than ``max_rows`` rows for the case (counted first).
        sqlite3.Error: SQLite cannot read it (not SQLite, damaged).
    """
    path = Path(db)
    if not os.path.lexists(path):
        raise FileNotFoundError(f"checkpoint database {path} does not exist")
    with _reading(path) as (conn, have):
        (count,) = conn.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE case_id = ?",
                                (case_id,)).fetchone()
        if count > max_rows:
            raise HistoryTooLong(f"checkpoint database {path}: {count} rows for case {case_id}, "
                                 f"more than the {max_rows} the harness reads")
        rows = conn.execute(f"{_select(conn, have)} WHERE case_id = ? ORDER BY seq",
                            (case_id,)).fetchall()
    return tuple(_row(r) for r in rows)


def latest_row(db: str | os.PathLike[str], case_id: str,
               skip: Collection[int] = ()) -> StoredRow | None:
    """The case's newest stored row whose ``seq`` is not in ``skip`` (rows the harness
    injected), or ``None`` when it has none; one row is read.

    Raises:
        as ``read_rows`` (but never ``HistoryTooLong``).
    """
    path = Path(db)
    if not os.path.lexists(path):
        raise FileNotFoundError(f"checkpoint database {path} does not exist")
    marks = ", ".join("?" * len(skip))
    where = f"case_id = ?{f' AND seq NOT IN ({marks})' if skip else ''}"
    with _reading(path) as (conn, have):
        row = conn.execute(f"{_select(conn, have)} WHERE {where} ORDER BY seq DESC LIMIT 1",
                           (case_id, *skip)).fetchone()
    return None if row is None else _row(row)


#: The reference's lease record (``shopops/checkpoint_schema.py``): one row per case, replaced
#: by each grant; ``expires_at`` on the loop's clock, ``0`` once released.
LEASES_TABLE = "leases"


def lease_of(db: str | os.PathLike[str], case_id: str, read_at: float) -> LeaseSeen | None:
    """The case's lease record now (``LeaseSeen``, stamped ``read_at``: the story's simulated
    clock), read from a plain table ``leases(case_id, owner, fence, expires_at)``; ``None``
    when there is no file, no such table, no row for the case, a row of other types, or the
    file cannot be read now (the lease part of ``lease_exclusive`` is then not judged).
    Never raises ``sqlite3.Error``: a worker may be writing the file meanwhile."""
    path = Path(db)
    if not path.exists():
        return None
    try:
        with contextlib.closing(open_readonly(path)) as conn:
            kind = conn.execute("SELECT type FROM sqlite_master WHERE name = ?",
                                (LEASES_TABLE,)).fetchone()
            if kind is None or kind[0] != "table":
                return None
            row = conn.execute(f"SELECT owner, fence, expires_at FROM {LEASES_TABLE} "
                               "WHERE case_id = ?", (case_id,)).fetchone()
    except sqlite3.Error:
        return None
    if row is None:
        return None
    owner, fence, expires = row
    if (not isinstance(owner, str) or not isinstance(fence, int) or isinstance(fence, bool)
            or not isinstance(expires, int | float) or isinstance(expires, bool)):
        return None
    return LeaseSeen(owner, fence, float(expires), read_at)


def migrations(db: str | os.PathLike[str]) -> tuple[tuple[str, int], ...]:
    """The ``schema_migrations`` records ``(name, rows)`` (``()``: no such table, or the
    file cannot be read now). Read after the history: a file spoiled in between must not
    end the run with a ``sqlite3.DatabaseError``."""
    path = Path(db)
    if not path.exists():
        return ()
    try:
        with contextlib.closing(open_readonly(path)) as conn:
            kind = conn.execute("SELECT type FROM sqlite_master WHERE name = "
                                "'schema_migrations'").fetchone()
            if kind is None or kind[0] != "table":
                return ()
            return tuple((str(n), int(r)) for n, r in conn.execute(
                'SELECT name, "rows" FROM schema_migrations ORDER BY name')
                if isinstance(r, int) and not isinstance(r, bool))
    except sqlite3.Error:
        return ()


def _gates(state: dict[str, Any]) -> tuple[GateState, ...]:
    email = GateState(DEFAULT_GATE, state.get("approval_request_id"), state["approval_ticket"],
                      state["send_idempotency_key"], state["email_sent"], state["delivery_id"])
    if state.get("order_note") is not True:
        return (email,)
    text = state["note_text"]
    order = state.get("order_id")
    digest = (note_digest(order, text) if isinstance(text, str) and isinstance(order, str)
              else None)
    note = GateState(NOTE_GATE, state["note_request_id"], state["note_ticket"],
                     state["note_idempotency_key"], state["note_sent"],
                     state["note_delivery_id"], digest)
    return (email, note)


def write_of(row: StoredRow) -> DurableWrite:
    """``row`` read as the contract says: version 2, ``state_json`` a UTF-8 JSON object
    that ``state.schema.json`` accepts; otherwise a write whose ``problem`` says why."""
    def unreadable(why: str) -> DurableWrite:
        return DurableWrite(row.seq, lease_owner=row.lease_owner, fence=row.fence,
                            writer_pid=row.writer_pid, created_at=row.created_at,
                            problem=f"checkpoint seq {row.seq}: {why}")

    if row.schema_version != CURRENT_VERSION:
        return unreadable(f"schema_version {row.schema_version!r}; the contract reads version "
                          f"{CURRENT_VERSION} (a v1 row must be migrated first)")
    if row.state_json is None:
        return unreadable("state_json is NULL")
    try:
        state = json.loads(row.state_json.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return unreadable(f"state_json is not UTF-8 ({exc.reason} at byte {exc.start})")
    except RecursionError:
        return unreadable("state_json nests too deeply to read")
    except ValueError as exc:
        return unreadable(f"state_json is not valid JSON ({exc})")
    problems = _problems_of(row.state_json, state)
    if problems:
        return unreadable("; ".join(problems))
    draft = state["draft"]
    attempts, revision = state.get("recovery_attempts"), state.get("draft_revision")
    return DurableWrite(
        row.seq, Phase(state["phase"]), state["step"],
        Draft(draft["to"], draft["subject"], draft["body"]) if draft is not None else None,
        _gates(state), attempts if isinstance(attempts, int) else None, row.lease_owner,
        row.fence, row.writer_pid, row.created_at,
        revision=revision if isinstance(revision, int) else None)


#: ``state_json`` texts up to this many bytes have their schema problems remembered.
_CACHED_TEXT_MAX = 64 * 1024


def _problems_of(text: bytes, state: object) -> tuple[str, ...]:
    """``state_problems(state)``, ``state`` being ``text`` decoded: remembered by the text
    for a short one (a pure function of it; the same rows come back after every worker and
    in every execution of a scenario, and validating against the contract's JSON schema was
    a fifth of the harness's CPU per execution)."""
    if len(text) > _CACHED_TEXT_MAX:
        return state_problems(state)
    return _cached_problems(text)


@lru_cache(maxsize=512)
def _cached_problems(text: bytes) -> tuple[str, ...]:
    return state_problems(json.loads(text.decode("utf-8")))


def history_of(rows: tuple[StoredRow, ...]) -> History:
    """The case's ``History`` from its stored rows."""
    return History(HistorySource.CHECKPOINT_STORE, tuple(write_of(r) for r in rows),
                   frozenset(Observable),
                   "the lease only where the table has lease_owner and fence")
