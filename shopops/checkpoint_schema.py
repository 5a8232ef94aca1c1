"""The checkpoint database's layout: the tables, index and append-only triggers a store
creates (``SCHEMA``), the same layout as the file inspector accepts it (``CHECKPOINT_DB``:
fail closed on the file, issue 14), and the one write transaction (``Transaction``,
``BEGIN IMMEDIATE``). ``shopops.checkpoint`` (the store) uses them.
"""

from __future__ import annotations

import sqlite3

from shopops.checkpoint_file import OurSchema
from shopops.checkpoint_rows import _ADDED_COLUMNS
from shopops.errors import CheckpointNotFound, NotACheckpointDatabase

NO_UPDATE = (
    "CREATE TRIGGER IF NOT EXISTS checkpoints_no_update BEFORE UPDATE ON checkpoints "
    "BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only: UPDATE refused'); END"
)
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS checkpoints(seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " case_id TEXT NOT NULL, run_id TEXT NOT NULL, schema_version INTEGER, state_json TEXT,"
    " created_at TEXT NOT NULL, lease_owner TEXT, fence INTEGER, writer_pid INTEGER)",
    "CREATE INDEX IF NOT EXISTS checkpoints_case_run ON checkpoints(case_id, run_id, seq)",
    NO_UPDATE,
    "CREATE TRIGGER IF NOT EXISTS checkpoints_no_delete BEFORE DELETE ON checkpoints "
    "BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only: DELETE refused'); END",
    "CREATE TABLE IF NOT EXISTS leases(case_id TEXT PRIMARY KEY, owner TEXT, fence INTEGER,"
    " expires_at REAL)",
    "CREATE TABLE IF NOT EXISTS schema_migrations(name TEXT PRIMARY KEY, applied_at TEXT,"
    ' "rows" INTEGER)',
    "CREATE TABLE IF NOT EXISTS dead_letters(seq INTEGER PRIMARY KEY REFERENCES"
    " checkpoints(seq), case_id TEXT NOT NULL, run_id TEXT NOT NULL, attempts INTEGER NOT NULL,"
    " last_phase TEXT NOT NULL, reason TEXT NOT NULL, created_at TEXT NOT NULL)",
)
#: The checkpoint database as ``checkpoint_file.inspect`` accepts it (fail closed on the file).
CHECKPOINT_DB = OurSchema(
    "checkpoint database", SCHEMA, "checkpoints",
    frozenset(name for name, _ in _ADDED_COLUMNS), NotACheckpointDatabase, CheckpointNotFound)


class Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or ``ROLLBACK`` on any exception."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            try:
                self._conn.execute("COMMIT")
                return
            except BaseException:
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
