"""Storage faults the harness injects into a case's checkpoint database.

They are the chapter's failure modes "Checkpoint too naive" (torn or corrupt rows) and
"Version drift", plus a writer that holds the database. Rows are appended with plain
``sqlite3`` (the store itself refuses to write an unreadable state) and remembered, so the
checks can tell the harness's own rows from the loop's and prove they were left untouched.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import threading
from pathlib import Path

from harness.judge.observers import store
from harness.judge.observers.store import migrations
from harness.model.observations import StoredRow
from shopops.errors import CheckpointNotFound
from shopops.records import DEFAULT_FIXTURES
from shopops_contract.phases import Phase

__all__ = ["V1_FIXTURE", "LockHolder", "corrupt_bytes", "forge_ticket", "inject_row",
           "install_v1_fixture", "migrations"]

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


def _append(db: Path, like: StoredRow, version: int | None, blob: bytes) -> StoredRow:
    """Append a row to ``checkpoints`` through the contract's required columns only (a
    loop's table may have more; their defaults apply) and return it as written."""
    with contextlib.closing(sqlite3.connect(db, isolation_level=None, timeout=30)) as conn:
        cur = conn.execute(
            "INSERT INTO checkpoints (case_id, run_id, schema_version, state_json, created_at)"
            " VALUES (?, ?, ?, ?, ?)", (like.case_id, like.run_id, version, blob, like.created_at))
        seq = cur.lastrowid
    assert seq is not None
    return StoredRow(seq, like.case_id, like.run_id, version, blob, like.created_at)


def _latest(db: Path, case_id: str) -> StoredRow | None:
    try:
        return store.latest_row(db, case_id) if db.exists() else None
    except (store.NotAContractStore, sqlite3.Error):
        return None


def inject_row(db: Path, case_id: str, run_id: str, kind: str) -> StoredRow | None:
    """Append a corrupt row of ``kind`` after the case's latest row (same case and run);
    return it as written. ``None`` when the case has no checkpoint to corrupt (the fault
    cannot apply). ``run_id`` is the run the harness started the case with."""
    latest = _latest(db, case_id)
    if latest is None or latest.state_json is None:
        return None
    version, blob = corrupt_bytes(kind, latest.state_json)
    return _append(db, latest, version, blob)


def forge_ticket(db: Path, case_id: str, ticket: str, *, advance: bool = True) -> StoredRow:
    """Append the case's latest state with ``approval_ticket`` set to ``ticket`` (one the
    queue never issued) and ``phase`` ``approved``, as the model writing a ticket into the
    state would (Chapter 8, "Forged approval on resume"); every other field as the loop
    wrote it (``done`` false where the state has it). With ``advance`` false the phase and
    ``done`` stay as the loop wrote them (a ticket in a checkpoint that is still parked at
    ``awaiting_approval``: issue 26). Returns the row as written.

    Raises:
        CheckpointNotFound: no readable latest checkpoint of the case to forge from.
    """
    latest = _latest(db, case_id)
    write = store.write_of(latest) if latest is not None else None
    if latest is None or write is None or write.problem is not None:
        raise CheckpointNotFound(f"no readable checkpoint of {case_id} to forge a ticket into"
                                 + (f" ({write.problem})" if write and write.problem else ""),
                                 case_id=case_id)
    assert latest.state_json is not None
    state = json.loads(latest.state_json.decode("utf-8"))
    state.update(approval_ticket=ticket)
    if advance:
        state.update(phase=Phase.APPROVED.value)
        if "done" in state:
            state["done"] = False
    blob = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    return _append(db, latest, latest.schema_version, blob)


def install_v1_fixture(db: Path) -> int:
    """Copy the committed v1 checkpoint database to ``db``; return its number of v1 rows."""
    shutil.copyfile(V1_FIXTURE, db)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        (n,) = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE schema_version = 1"
                            ).fetchone()
    return int(n)


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
