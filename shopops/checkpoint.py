"""``CheckpointStore``: the case's durable, append-only checkpoint history on SQLite.

Chapter 8: "case_id + run_id + schema_version are identity and safety" and "Corrupt /
unsupported schema versions raise — do not silently guess." Every ``save`` appends one row
(``seq`` grows); ``load`` returns the latest row's ``State`` or raises a typed error, and
never modifies, deletes or skips a bad row. Triggers refuse UPDATE and DELETE; the only
exception is the explicit v1→v2 migration (exercise 2), inside its own transaction.
Leases with fencing tokens (exercise 4, Chapter 32) keep a taken-over worker from writing.

Durability (SQLite docs, "Write-Ahead Logging" and "PRAGMA synchronous"): WAL journal,
``synchronous=FULL``, and a busy timeout so concurrent writers wait instead of failing.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from shopops import checkpoint_file
from shopops.checkpoint_file import FileState
from shopops.checkpoint_rows import (
    _ADDED_COLUMNS,
    _ROW_SQL,
    CheckpointRow,
    DeadLetter,
    _row_sql,
    _select_latest,
    _select_rows,
    _upgrade_v1_state,
    _utc_iso,
)
from shopops.checkpoint_schema import CHECKPOINT_DB as CHECKPOINT_DB
from shopops.checkpoint_schema import NO_UPDATE, SCHEMA, Transaction
from shopops.errors import CheckpointNotFound, FencedOff, HistoryTooLong, LeaseHeld
from shopops.failpoints import failpoint
from shopops.state import SCHEMA_VERSION, State

__all__ = ["CheckpointRow", "CheckpointStore", "DeadLetter", "Lease", "read_history",
           "read_latest"]

MIGRATION_V1_V2 = "v1_to_v2_preferred_channel"


@dataclass(frozen=True)
class Lease:
    """A worker's claim on a case (Chapter 8 exercise 4, Chapter 32).

    ``fence`` is the fencing token, +1 at every change of owner; ``expires_at`` is in
    epoch seconds (the store's clock).
    """

    case_id: str
    owner: str
    fence: int
    expires_at: float


def read_history(path: str | os.PathLike[str], case_id: str,
                 run_id: str | None = None, *, max_rows: int | None = None
                 ) -> list[CheckpointRow]:
    """Raw rows of a case, in ``seq`` order, read-only and leaving nothing behind
    (``checkpoint_rows.read_history``), once the file is known to be ours.

    Args:
        max_rows: read nothing when the case has more rows than this (a reader that must
            stay bounded: the harness, over a file an implementation wrote).

    Raises:
        FileNotFoundError: no database at ``path`` (none is created).
        NotACheckpointDatabase: the file is not a checkpoint database
            (``checkpoint_file.inspect``): nothing is read from it.
        HistoryTooLong: more than ``max_rows`` rows for the case.
    """
    if os.path.lexists(path):
        with checkpoint_file.inspected(path, CHECKPOINT_DB) as conn:  # read what was judged
            if max_rows is not None:
                (rows,) = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE case_id = ?",
                                       (case_id,)).fetchone()
                if rows > max_rows:
                    raise HistoryTooLong(
                        f"checkpoint database {path}: {rows} rows for case {case_id}, more "
                        f"than the {max_rows} the harness reads", path=os.fspath(path),
                        case_id=case_id, rows=rows, limit=max_rows)
            return _select_rows(conn, os.fspath(path), case_id, run_id)
    raise FileNotFoundError(f"checkpoint database {path} does not exist")


def read_latest(path: str | os.PathLike[str], case_id: str,
                skip: Collection[int] = ()) -> CheckpointRow | None:
    """The case's newest raw row whose ``seq`` is not in ``skip`` (``None``: no such row),
    read-only, once the file is known to be ours — ``read_history``'s last row without
    reading the rest.

    Raises:
        FileNotFoundError: no database at ``path`` (none is created).
        NotACheckpointDatabase: the file is not a checkpoint database
            (``checkpoint_file.inspect``): nothing is read from it.
    """
    if os.path.lexists(path):
        with checkpoint_file.inspected(path, CHECKPOINT_DB) as conn:
            return _select_latest(conn, os.fspath(path), case_id, skip)
    raise FileNotFoundError(f"checkpoint database {path} does not exist")


class CheckpointStore:
    """Append-only checkpoint history of cases on one SQLite file (Chapter 8).

    Args:
        path: the database file; created with its schema if missing.
        busy_timeout_s: seconds a write waits for another writer's lock before
            ``sqlite3.OperationalError("database is locked")``.
        clock: epoch seconds, for ``created_at`` defaults and lease expiry.
        create: a missing or empty file becomes a new database (``shopops run``); without
            it (``resume``, ``migrate``) such a file is refused.

    The file fails closed (issue 14): before any connection that can write is opened it is
    inspected read-only (``checkpoint_file.inspect``) and refused unless it is a checkpoint
    database of ours, or missing/empty where ``create`` allows a new one. An existing
    database is not written on open: WAL mode, missing schema objects and added columns are
    applied at its first write, so a store whose latest row cannot be read (``load``
    raises) leaves the file byte for byte as it was.

    Raises:
        NotACheckpointDatabase: the file is not a checkpoint database (a folder, a symlink
            loop, not SQLite, damaged, another application's tables, wrong columns).
        CheckpointNotFound: no file and not ``create``.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.time, create: bool = True) -> None:
        self.path = os.fspath(path)
        self._clock = clock
        found = checkpoint_file.inspect(self.path, CHECKPOINT_DB, create=create)
        self._ready = False
        self._busy_timeout_s = busy_timeout_s
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            self._conn.execute("PRAGMA synchronous = FULL")
            if found is FileState.NEW:
                self._prepare()
        except BaseException:
            self._conn.close()
            raise

    def _wal(self) -> None:
        """``PRAGMA journal_mode = WAL``, waiting up to the busy timeout for another writer.

        SQLite answers the switch from a rollback journal with ``SQLITE_BUSY`` at once,
        without calling the busy handler, while another connection holds a write lock (its
        deadlock avoidance): two migrators of a v1 database together failed with "database
        is locked" after 0.1 s (``migrators-together``, issue 26). So the switch is tried
        again every 10 ms until the busy timeout has passed.

        Raises:
            sqlite3.OperationalError: still locked after the busy timeout, or another error.
        """
        deadline = time.monotonic() + self._busy_timeout_s
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.01)  # a lock held by another process: no event to wait on

    def _prepare(self) -> None:
        """WAL mode, the schema's missing objects and added columns: at creation, or at the
        first write to an existing database (never on open: fail closed)."""
        self._wal()
        with Transaction(self._conn):
            for statement in SCHEMA:
                self._conn.execute(statement)
            have = {r[1] for r in self._conn.execute("PRAGMA table_info(checkpoints)")}
            for name, sql_type in _ADDED_COLUMNS:
                if name not in have:
                    self._conn.execute(f"ALTER TABLE checkpoints ADD COLUMN {name} {sql_type}")
        self._ready = True

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._conn.close()

    def _write(self) -> Transaction:
        if not self._ready:
            self._prepare()
        return Transaction(self._conn)

    def save(self, state: State, run_id: str, created_at: str | None = None, *,
             lease: Lease | None = None) -> int:
        """Append ``state`` as the newest checkpoint of ``(state.case_id, run_id)``.

        One ``BEGIN IMMEDIATE`` transaction: a crash (the ``ckpt.before_commit`` failpoint
        sits after the INSERT) leaves the previous checkpoint as the latest (Chapter 8,
        "Checkpoint too naive ... torn reads").

        Args:
            created_at: ISO-8601 UTC text; defaults to the clock, e.g.
                ``"2026-07-19T00:00:00.000Z"``.
            lease: if given, the case's lease row must still have this owner and fence
                (fencing token, Chapter 8 exercise 4), checked in the same transaction.

        Returns:
            The new row's ``seq``.

        Raises:
            StateInvalid: ``state`` would not load back (nothing unreadable is written).
            FencedOff: the case's lease now has another owner or fence (taken over);
                nothing is written. An expired lease nobody took over may still write.
            sqlite3.OperationalError: the database stayed locked past ``busy_timeout_s``.
        """
        return self._append(state, run_id, created_at, lease, None)

    def save_dead_letter(self, state: State, run_id: str, *, last_phase: str,
                         lease: Lease | None = None) -> DeadLetter:
        """Append ``state`` (phase ``dead_lettered``, with its ``dead_letter_reason``) and its
        ``dead_letters`` record in ONE transaction: the case is out of the fleet's hands
        exactly when the queue says so.

        Raises:
            StateInvalid: ``state`` is not a valid dead-lettered state.
            FencedOff, sqlite3.OperationalError: as ``save``.
        """
        seq = self._append(state, run_id, None, lease, last_phase)
        return next(d for d in self.dead_letters(state.case_id) if d.seq == seq)

    def dead_letters(self, case_id: str | None = None) -> list[DeadLetter]:
        """The dead-letter queue (of one case), oldest first."""
        where, args = (" WHERE case_id = ?", [case_id]) if case_id is not None else ("", [])
        rows = self._conn.execute(f"SELECT * FROM dead_letters{where} ORDER BY seq", args)
        return [DeadLetter(*r) for r in rows]

    def _append(self, state: State, run_id: str, created_at: str | None, lease: Lease | None,
                dead_letter_from: str | None) -> int:
        text = state.to_json()
        State.from_json(text)
        stamp = created_at if created_at is not None else _utc_iso(self._clock())
        with self._write():
            if lease is not None:
                self._check_lease(lease, state.case_id, run_id)
            cur = self._conn.execute(
                "INSERT INTO checkpoints(case_id, run_id, schema_version, state_json, created_at,"
                " lease_owner, fence, writer_pid) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (state.case_id, run_id, state.schema_version, text, stamp,
                 lease.owner if lease else None, lease.fence if lease else None, os.getpid()),
            )
            if dead_letter_from is not None:
                self._conn.execute(
                    "INSERT INTO dead_letters VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (cur.lastrowid, state.case_id, run_id, state.recovery_attempts,
                     dead_letter_from, state.dead_letter_reason or "", stamp))
            failpoint("ckpt.before_commit")
        assert cur.lastrowid is not None
        return cur.lastrowid

    def find(self, case_id: str, run_id: str) -> State | None:
        """The latest checkpoint's ``State``, or ``None`` only if the run has no row at all.

        Raises:
            UnsupportedSchemaVersion, CheckpointCorrupt: as ``load`` — a bad row is never
                "no checkpoint yet" (Chapter 8: fail closed).
        """
        row = self._conn.execute(
            f"{_row_sql(self._conn)} WHERE case_id = ? AND run_id = ? ORDER BY seq DESC LIMIT 1",
            (case_id, run_id),
        ).fetchone()
        return None if row is None else CheckpointRow._from_sql(row, self.path).state()

    def load(self, case_id: str, run_id: str) -> State:
        """The latest (highest ``seq``) checkpoint's ``State``; the row is never modified.

        Raises:
            CheckpointNotFound: no row at all for ``(case_id, run_id)``.
            UnsupportedSchemaVersion: NULL or unknown ``schema_version`` (v1: run the
                migration, Chapter 8 exercise 2).
            CheckpointCorrupt: see ``CheckpointRow.state`` (Chapter 8 exercise 1).
        """
        state = self.find(case_id, run_id)
        if state is None:
            raise CheckpointNotFound(
                f"checkpoint {self.path}: no row for case_id={case_id!r} run_id={run_id!r}",
                path=self.path, case_id=case_id, run_id=run_id, seq=None,
            )
        return state

    def history(self, case_id: str, run_id: str | None = None) -> list[CheckpointRow]:
        """Raw rows of a case (one run, or all runs if ``run_id`` is None), in ``seq`` order."""
        return _select_rows(self._conn, self.path, case_id, run_id)

    def migrate_v1_to_v2(self) -> int:
        """Migrate every v1 row to v2 (Chapter 8 exercise 2): ``preferred_channel="email"``.

        Explicit, never done by ``load``. One ``BEGIN IMMEDIATE`` transaction: a kill leaves
        all rows v1 or all v2. Recorded in ``schema_migrations``; running it again migrates 0.

        Returns:
            The number of rows migrated.

        Raises:
            CheckpointCorrupt, UnsupportedSchemaVersion: a v1 row cannot be upgraded, or the
                latest row of a run cannot be read; it is named and nothing is written —
                checked read-only before the write transaction (issue 14).
        """
        self._check_migratable()
        failpoint("ckpt.migration_started")
        with self._write():
            rows = [CheckpointRow._from_sql(r, self.path) for r in self._conn.execute(
                f"{_ROW_SQL} WHERE schema_version = 1 ORDER BY seq")]
            if rows:
                self._conn.execute("DROP TRIGGER checkpoints_no_update")
            for row in rows:
                self._conn.execute(
                    "UPDATE checkpoints SET schema_version = ?, state_json = ? WHERE seq = ?",
                    (SCHEMA_VERSION, _upgrade_v1_state(row), row.seq),
                )
            self._conn.execute(NO_UPDATE)
            self._conn.execute(
                'INSERT INTO schema_migrations(name, applied_at, "rows") VALUES (?, ?, ?) ON '
                'CONFLICT(name) DO UPDATE SET "rows" = "rows" + excluded."rows" '
                'WHERE excluded."rows" > 0',
                (MIGRATION_V1_V2, _utc_iso(self._clock()), len(rows)),
            )
            if rows:
                failpoint("ckpt.migration_before_commit")
        return len(rows)

    def _check_migratable(self) -> None:
        """Read every row once, without writing: each v1 row must upgrade, and the latest
        row of every run must load (after its upgrade, for a v1 row)."""
        latest: dict[tuple[str, str], CheckpointRow] = {}
        for r in self._conn.execute(f"{_row_sql(self._conn)} ORDER BY seq"):
            row = CheckpointRow._from_sql(r, self.path)
            if row.schema_version == 1:
                _upgrade_v1_state(row)
            latest[(row.case_id, row.run_id)] = row
        for row in latest.values():
            if row.schema_version != 1:
                row.state()

    def current_lease(self, case_id: str, *, include_expired: bool = False) -> Lease | None:
        """The case's live lease (or the last one, if ``include_expired``), else ``None``."""
        row = self._conn.execute(
            "SELECT case_id, owner, fence, expires_at FROM leases WHERE case_id = ?", (case_id,)
        ).fetchone()
        if row is None or (not include_expired and row[3] <= self._clock()):
            return None
        return Lease(*row)

    def acquire_lease(self, case_id: str, owner: str, ttl_s: float) -> Lease:
        """Take or extend the case's lease for ``ttl_s`` seconds (Chapter 8 ex. 4, Ch 32).

        The owner of a live lease extends it (same fence). Anyone else, and the same owner
        name once the lease expired or was released (a restarted worker reusing its id),
        gets fence + 1 (1 first): a stale process holding the old lease under that name is
        then fenced off (Kleppmann, "How to do distributed locking": a token per grant).

        Raises:
            LeaseHeld: another owner's lease is live (``expires_at > clock()``).
        """
        with self._write():
            now, old = self._clock(), self.current_lease(case_id, include_expired=True)
            if old is not None and old.owner != owner and old.expires_at > now:
                raise LeaseHeld(
                    f"checkpoint {self.path}: case_id={case_id!r} is leased by {old.owner!r} "
                    f"(fence {old.fence}) until {old.expires_at:.3f}; {owner!r} may take it "
                    "after expiry or release",
                    path=self.path, case_id=case_id, owner=owner, holder=old.owner,
                    expires_at=old.expires_at,
                )
            if old is not None and old.owner == owner and old.expires_at > now:
                fence = old.fence  # a live lease extended by its holder
            else:  # a new owner, or any owner after expiry or release: a new fence, so a
                # stale process with the same owner name is fenced off too
                fence = (old.fence if old is not None else 0) + 1
            lease = Lease(case_id, owner, fence, now + ttl_s)
            self._conn.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?)",
                               (case_id, owner, fence, lease.expires_at))
        return lease

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease:
        """Extend ``lease`` to ``clock() + ttl_s`` seconds.

        Raises:
            FencedOff: the lease was taken over by another owner (or released and retaken).
        """
        with self._write():
            self._check_lease(lease, lease.case_id, None)
            renewed = Lease(lease.case_id, lease.owner, lease.fence, self._clock() + ttl_s)
            self._conn.execute("UPDATE leases SET expires_at = ? WHERE case_id = ?",
                               (renewed.expires_at, lease.case_id))
        return renewed

    def release_lease(self, lease: Lease) -> bool:
        """Expire ``lease`` now, keeping its fence so the next owner gets fence + 1.

        Returns:
            False if the lease was no longer held (nothing changed), else True.
        """
        with self._write():
            cur = self._conn.execute(
                "UPDATE leases SET expires_at = 0 WHERE case_id = ? AND owner = ? AND fence = ?",
                (lease.case_id, lease.owner, lease.fence))
        return cur.rowcount == 1

    def check_lease(self, lease: Lease, run_id: str | None = None) -> None:
        """Raise ``FencedOff`` unless ``lease`` is still the case's lease (same owner and
        fence; an expired lease nobody took over still counts). Writes nothing.

        The loop calls it before every send attempt, so a worker whose lease was taken
        over stops before a side effect, not only at its next checkpoint."""
        with self._write():
            self._check_lease(lease, lease.case_id, run_id)

    def _check_lease(self, lease: Lease, case_id: str, run_id: str | None) -> None:
        current = self.current_lease(case_id, include_expired=True)
        if current is None or lease.case_id != case_id or (current.owner, current.fence) != (
                lease.owner, lease.fence):
            held = f"owner {current.owner!r} fence {current.fence}" if current else "no lease"
            raise FencedOff(
                f"checkpoint {self.path} case_id={case_id!r} run_id={run_id!r} seq=None: lease "
                f"of {lease.owner!r} (case {lease.case_id!r}, fence {lease.fence}) is fenced "
                f"off; the current lease is {held}; nothing was written",
                path=self.path, case_id=case_id, run_id=run_id, seq=None, owner=lease.owner,
                fence=lease.fence, current_fence=current.fence if current else None,
            )
