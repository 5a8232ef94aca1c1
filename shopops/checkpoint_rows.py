"""Checkpoint rows as stored: ``CheckpointRow`` (raw, parsed only on demand, so a corrupt
row can still be listed), the dead-letter record, the v1 row upgrade, and the read-only
history reader the harness judges from (Chapter 8: "Corrupt / unsupported schema versions
raise — do not silently guess"). ``shopops.checkpoint`` writes them.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from shopops.checkpoint_file import open_readonly
from shopops.errors import CheckpointCorrupt, StateInvalid, UnsupportedSchemaVersion
from shopops.state import NOTE_FIELDS, SCHEMA_VERSION, State

# state_json is read as bytes (CAST) and decoded strictly: sqlite3's own text decoding
# would fail with an OperationalError on invalid UTF-8 instead of a typed error.
_ROW_SQL = (
    "SELECT seq, case_id, run_id, schema_version, CAST(state_json AS BLOB), created_at,"
    " lease_owner, fence, writer_pid FROM checkpoints"
)
#: Columns added after the first release; a database written before them gets them (NULL in
#: old rows) when a store opens it, and is read with NULL until then.
_ADDED_COLUMNS = (("writer_pid", "INTEGER"),)


@dataclass(frozen=True)
class DeadLetter:
    """A case taken out of the fleet's hands (Chapter 8, fleet scale: dead-letter queues):
    ``seq`` of its ``dead_lettered`` checkpoint, ``case_id``, ``run_id``, ``attempts`` (the
    recovery attempts counted), ``last_phase`` (where it kept failing), ``reason`` (one
    line), ``created_at`` (ISO-8601 UTC)."""

    seq: int
    case_id: str
    run_id: str
    attempts: int
    last_phase: str
    reason: str
    created_at: str


@dataclass(frozen=True)
class CheckpointRow:
    """One raw ``checkpoints`` row, not parsed, so a corrupt row can still be listed.

    ``state_json`` holds the stored bytes (``None`` for SQL NULL). ``writer_pid`` is the
    pid of the process that saved it, as that process reported it (``None`` in rows of
    older databases and rows the harness injected): the harness ties rows to the workers it
    started. ``db_path`` (not part of equality) names the database in error messages.
    """

    seq: int
    case_id: str
    run_id: str
    schema_version: int | None
    state_json: bytes | None
    created_at: str
    lease_owner: str | None
    fence: int | None
    writer_pid: int | None = None
    db_path: str = field(default="", compare=False, repr=False)

    @classmethod
    def _from_sql(cls, r: tuple[Any, ...], db_path: str) -> CheckpointRow:
        return cls(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], db_path)

    def state(self) -> State:
        """Parse the row with the checks of ``CheckpointStore.load`` (Chapter 8 exercise 1).

        Raises:
            UnsupportedSchemaVersion: ``schema_version`` is NULL or not the current version
                (version 1 rows need ``shopops migrate DB``).
            CheckpointCorrupt: ``state_json`` is NULL, not UTF-8, not JSON, not an object,
                an invalid ``State``, or disagrees with the row's identity columns.
        """
        version = self.schema_version
        if version != SCHEMA_VERSION:
            if version == 1:
                hint = (
                    "version 1 rows need the explicit v1->v2 migration (Chapter 8 exercise 2):"
                    f" run `shopops migrate {self.db_path}`"
                )
            else:
                hint = "the row is left untouched; restore it from a backup or start a new run"
            raise UnsupportedSchemaVersion(
                f"{self._where()}: schema_version {version!r} is not supported; this code "
                f"reads version {SCHEMA_VERSION} only; {hint}",
                version=version,
                reason="unsupported version",
                **self._ids(),
            )
        data = self._decode()
        for key, expected in (("case_id", self.case_id), ("schema_version", version)):
            if key in data and data[key] != expected:
                self._corrupt(
                    f"state_json {key} {data[key]!r} disagrees with the row's {expected!r}",
                    key,
                    "mismatch",
                )
        try:
            return State.from_dict(data)
        except StateInvalid as exc:
            self._corrupt(exc.message, exc.fields.get("field", "<root>"), exc.fields["reason"])

    def _ids(self) -> dict[str, Any]:
        return {"path": self.db_path, "case_id": self.case_id, "run_id": self.run_id,
                "seq": self.seq}

    def _where(self) -> str:
        return (f"checkpoint {self.db_path} case_id={self.case_id!r} run_id={self.run_id!r} "
                f"seq={self.seq}")

    def _corrupt(self, what: str, field_name: str, reason: str) -> NoReturn:
        raise CheckpointCorrupt(
            f"{self._where()}: {what}; the row is left untouched (fail closed, Chapter 8)",
            field=field_name,
            reason=reason,
            **self._ids(),
        )

    def _decode(self) -> dict[str, Any]:
        if self.state_json is None:
            self._corrupt("state_json is NULL", "state_json", "null")
        try:
            data = json.loads(self.state_json.decode("utf-8", errors="strict"))
        except UnicodeDecodeError as exc:
            self._corrupt(f"state_json is not valid UTF-8 ({exc})", "state_json", "invalid utf-8")
        except json.JSONDecodeError as exc:
            self._corrupt(f"state_json is not valid JSON ({exc})", "state_json", "invalid json")
        except RecursionError:
            self._corrupt("state_json nests too deeply to parse", "state_json", "too deep")
        if not isinstance(data, dict):
            self._corrupt(
                f"state_json must be a JSON object, got {type(data).__name__}",
                "state_json",
                "not an object",
            )
        return data


def _upgrade_v1_state(row: CheckpointRow) -> str:
    """The v2 ``state_json`` for a v1 row: adds ``preferred_channel="email"`` (exercise 2)
    and the v2 loop fields at their starting values (no recovery attempt counted yet, the
    first draft, no feedback, no order note): every field is set explicitly, none left to a
    default."""
    data = row._decode()
    if data.get("schema_version") != 1 or data.get("case_id") != row.case_id:
        row._corrupt("state_json identity disagrees with a v1 row", "schema_version", "mismatch")
    added = {"preferred_channel": "email", "recovery_attempts": 0, "dead_letter_reason": None,
             "draft_revision": 0, "review_feedback": [], **NOTE_FIELDS}
    for name in added:
        if name in data:
            row._corrupt(f"a v1 state must not carry {name}", name, "unexpected")
    data.update(added, schema_version=SCHEMA_VERSION)
    try:
        return State.from_dict(data).to_json()
    except StateInvalid as exc:
        row._corrupt(exc.message, exc.fields.get("field", "<root>"), "invalid v1 state")


def _utc_iso(epoch_s: float) -> str:
    stamp = datetime.fromtimestamp(epoch_s, tz=UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _row_sql(conn: sqlite3.Connection) -> str:
    """``_ROW_SQL``, with NULL for a column an older database does not have yet."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(checkpoints)")}
    sql = _ROW_SQL
    for name, _ in _ADDED_COLUMNS:
        if name not in have:
            sql = sql.replace(f" {name} FROM", f" NULL AS {name} FROM")
    return sql


def _select_rows(conn: sqlite3.Connection, path: str, case_id: str,
                 run_id: str | None) -> list[CheckpointRow]:
    sql, args = f"{_row_sql(conn)} WHERE case_id = ?", [case_id]
    if run_id is not None:
        sql, args = sql + " AND run_id = ?", [case_id, run_id]
    return [CheckpointRow._from_sql(r, path) for r in conn.execute(sql + " ORDER BY seq", args)]


def read_history(path: str | os.PathLike[str], case_id: str,
                 run_id: str | None = None) -> list[CheckpointRow]:
    """Raw rows of a case, in ``seq`` order, through a read-only connection (URI ``mode=ro``).

    The harness judges a run from this without any risk of writing (``docs/design.md``, Grading).

    Raises:
        FileNotFoundError: no database at ``path`` (none is created).
    """
    db = Path(path)
    if not db.exists():
        raise FileNotFoundError(f"checkpoint database {db} does not exist")
    conn = open_readonly(db)  # leaves no -wal/-shm behind (shopops.checkpoint_file)
    try:
        return _select_rows(conn, os.fspath(path), case_id, run_id)
    finally:
        conn.close()


def _select_latest(conn: sqlite3.Connection, path: str, case_id: str,
                   skip: Collection[int] = ()) -> CheckpointRow | None:
    """The case's newest raw row (highest ``seq``) whose ``seq`` is not in ``skip``, or
    ``None``, through an open connection (``path`` names the file in rows): one row is read
    and built instead of the whole history (``shopops.checkpoint.read_latest``)."""
    seqs = sorted({int(seq) for seq in skip})
    sql = f"{_row_sql(conn)} WHERE case_id = ?"
    if seqs:
        sql += f" AND seq NOT IN ({', '.join('?' * len(seqs))})"
    r = conn.execute(sql + " ORDER BY seq DESC LIMIT 1", [case_id, *seqs]).fetchone()
    return None if r is None else CheckpointRow._from_sql(r, path)
