"""Storage faults the harness injects into a case's checkpoint database.

They are the chapter's failure modes "Checkpoint too naive" (torn or corrupt rows) and
"Version drift", plus a writer that holds the database. Rows are appended with plain
``sqlite3`` (the store itself refuses to write an unreadable state) and remembered, so the
checks can tell the harness's own rows from the loop's and prove they were left untouched.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import threading
from pathlib import Path

from shopops.bounds import MAX_HISTORY_ROWS
from shopops.checkpoint import CheckpointRow, read_history
from shopops.checkpoint_file import open_readonly
from shopops.records import DEFAULT_FIXTURES

__all__ = ["V1_FIXTURE", "LockHolder", "corrupt_bytes", "inject_row", "install_v1_fixture",
           "migrations"]

V1_FIXTURE = DEFAULT_FIXTURES / "v1_parked.db"


def corrupt_bytes(kind: str, latest: bytes) -> tuple[int | None, bytes]:
    """The ``(schema_version, state_json)`` of an injected row of ``kind``.

    Args:
        kind: ``corrupt_json`` (a JSON object missing most state fields),
            ``truncated_json`` (the latest state cut in half, as a torn write leaves it),
            ``invalid_utf8``, ``unknown_version`` (schema 99).
        latest: the latest good row's ``state_json``.

    Raises:
        ValueError: an unknown kind.
    """
    if kind == "corrupt_json":  # a loop that fills gaps with defaults would start over
        return 2, b'{"case_id":"case-O-1001","order_id":"O-1001","schema_version":2}'
    if kind == "truncated_json":
        return 2, latest[: len(latest) // 2]
    if kind == "invalid_utf8":
        return 2, latest[:20] + b"\xff\xfe\xfd" + latest[20:]
    if kind == "unknown_version":
        return 99, latest.replace(b'"schema_version":2', b'"schema_version":99')
    raise ValueError(f"unknown storage fault {kind!r}")


def inject_row(db: Path, case_id: str, run_id: str, kind: str) -> CheckpointRow | None:
    """Append a corrupt row of ``kind`` after the case's latest row; return it as written.

    Returns ``None`` when the case has no checkpoint to corrupt (the fault cannot apply).
    """
    rows = read_history(db, case_id, run_id, max_rows=MAX_HISTORY_ROWS) if db.exists() else []
    if not rows or rows[-1].state_json is None:
        return None
    version, blob = corrupt_bytes(kind, rows[-1].state_json)
    with contextlib.closing(sqlite3.connect(db, isolation_level=None, timeout=30)) as conn:
        cur = conn.execute(
            "INSERT INTO checkpoints (case_id, run_id, schema_version, state_json, created_at)"
            " VALUES (?, ?, ?, ?, ?)", (case_id, run_id, version, blob, rows[-1].created_at))
        seq = cur.lastrowid
    assert seq is not None
    return CheckpointRow(seq, case_id, run_id, version, blob, rows[-1].created_at, None, None,
                         db_path=str(db))


def install_v1_fixture(db: Path) -> int:
    """Copy the committed v1 checkpoint database to ``db``; return its number of v1 rows."""
    shutil.copyfile(V1_FIXTURE, db)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (n,) = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE schema_version = 1"
                            ).fetchone()
    return int(n)


def migrations(db: Path) -> tuple[tuple[str, int], ...]:
    """The ``schema_migrations`` records ``(name, rows)`` of a checkpoint database; ``()``
    when it has none or cannot be read now. ``collect`` reads it after the history: a file
    spoiled in between (by a process outside the execution: its workers are gone) leaves
    the history already read as the evidence, and must not end the whole run with a
    ``sqlite3.DatabaseError`` (found by a new-user trial writing garbage over the file)."""
    if not db.exists():
        return ()
    try:
        with contextlib.closing(open_readonly(db)) as conn:
            return tuple(conn.execute('SELECT name, "rows" FROM schema_migrations ORDER BY name'))
    except sqlite3.Error:
        return ()


class LockHolder:
    """Hold an exclusive write lock on ``db`` for ``hold_ms`` milliseconds.

    ``take()`` returns once the lock is held (so the worker's next write must wait);
    a timer thread commits it after ``hold_ms``. ``close()`` releases it at once.
    """

    def __init__(self, db: Path, hold_ms: int) -> None:
        self.db = db
        self.hold_ms = hold_ms
        self._conn: sqlite3.Connection | None = None
        self._timer: threading.Timer | None = None

    def take(self) -> None:
        """Begin an exclusive transaction now; schedule its end."""
        self._conn = sqlite3.connect(self.db, isolation_level=None, timeout=30,
                                     check_same_thread=False)
        self._conn.execute("BEGIN EXCLUSIVE")
        self._timer = threading.Timer(self.hold_ms / 1000.0, self.close)
        self._timer.daemon = True
        self._timer.start()

    def close(self) -> None:
        """Release the lock (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")
            conn.close()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
