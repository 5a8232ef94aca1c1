"""The fingerprint of the durable state a crash leaves (issue 27, "crash states counted
once"; ``docs/design.md``, "Crash states counted once").

After an execution's first kill, once the killed worker is reaped and before anything else
happens, the story engine calls ``fingerprint``: a SHA-256 of everything the next worker and
the rest of the story can see or depend on —

- every file of the workers' data folder (their cwd) and the harness's own files beside it
  (checkpoint rows, leases, migrations and dead letters; the approval requests and tickets),
  and the gateway's request log and deliveries, which the harness holds in memory; an
  SQLite database by its rows, any other file by its bytes. Left out: what differs between
  two runs of the same state without changing what follows — wall-clock timestamps,
  process ids, ports and uids, and the approval service's own call log, which no worker
  reads; an absolute deadline (a lease's expiry, a
  ticket's issue time) is kept as minutes from the story's simulated now, which is what a
  worker compares it with;
- the story's position: the step, the worker within it, how many workers ran, whether the
  human has approved yet, the ticket offered to the next worker, the rows the harness
  injected, the simulated clock's offset, the hooks and holds still pending (counted from
  now), the gateway faults still pending.

The remaining kills of the schedule are not in it: two executions are equivalent when their
fingerprints are equal *and* their remaining kills are (``harness.run.equivalence``).
``None`` when the state is not one a fingerprint can stand for: another worker still runs or
is held, the story already recorded an error, a target's storage (read only through its API).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

__all__ = ["DROPPED_COLUMNS", "RELATIVE_COLUMNS", "SKIPPED_TABLES", "after_first_kill",
           "database_digest", "durable_digest", "fingerprint", "simulated_now"]

#: Columns that hold a wall-clock time, a pid, a port or a uid: they differ between two
#: runs of the same state and no worker decides on them (checked against the schemas of
#: ``shopops.checkpoint_schema``, ``shopops.approval_store``, ``harness.services.ledger``).
DROPPED_COLUMNS = frozenset({
    "created_at", "writer_pid", "applied_at", "requested_at", "issued_at", "consumed_at",
    "received_at", "received_epoch", "worker_pid", "remote_port", "claimed_pid",
    "worker_uid", "delivered_at", "at"})
#: Epoch-second columns a worker compares with its clock: kept as whole minutes from the
#: story's simulated now (a lease's expiry, a ticket's issue time for its time-to-live).
RELATIVE_COLUMNS = frozenset({"expires_at", "issued_at_epoch"})
#: Tables no worker reads: the approval service's log of calls (pids and times).
SKIPPED_TABLES = frozenset({"service_calls", "sqlite_sequence"})
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: The harness's own output files in the execution folder (never read by a worker).
_OUTPUT_PREFIX = "worker-"


def after_first_kill(engine: Any, run: Any, step: Any, nth: int) -> str | None:
    """The fingerprint of the state the story engine (``harness.story.engine._Engine``) is in
    just after reaping ``run``, the execution's first killed worker, the ``nth`` of the
    sequential workers ``step``; ``None`` when another worker is alive or held, the story
    already recorded an error, or the loop is a target."""
    if (engine.background or engine.w.errors or engine.w.target is not None
            or any(h.worker is not None and not h.release.is_set()
                   for h in engine.holds.values())
            or engine.w.started != len(engine.w.runs)):
        return None
    totals = engine.controller.totals
    story = {
        "step": engine.step_index, "role": str(run.role), "nth": nth,
        "recover": str(step.recover) if step.recover else None,
        "workers": len(engine.w.runs), "unrecovered": engine.unrecovered,
        "approved": engine.approval_event is not None,
        "seq_at_approval": engine.checkpoint_seq_at_approval,
        "mark_unreadable": (engine.history_at_approval is not None
                            and engine.history_at_approval.unreadable is not None),
        "offered_ticket": engine.w.offered_ticket,
        "offered_note_ticket": engine.w.offered_note_ticket,
        "migrated_asked": engine._migrated_asked,  # noqa: SLF001 (the engine's own state)
        "clock_offset_s": round(engine.w.clock_offset_s, 3),
        "injected": [r.seq for r in engine.w.injected], "v1_rows": engine.storage.v1_rows,
        "hooks": sorted(f"{p.label}+{p.occurrence - totals.seen(p.label)}"
                        for p in engine.controller.hooks),
        "holds": sorted(f"{p.label}+{p.occurrence - totals.seen(p.label)}"
                        f"/{h.held.is_set()}/{h.release.is_set()}"
                        for p, h in engine.holds.items()),
        "faults": [repr(f) for f in engine.pending_faults()],
        "lock": engine.storage.lock_holder is not None,
    }
    now_s = simulated_now(engine.w.clock_offset_s)
    return fingerprint(story, (engine.w.data_dir, engine.w.workdir), now_s,
                       {name: digest(now_s) for name, digest in engine.held_databases.items()})


def fingerprint(story: Mapping[str, object], folders: Iterable[Path],
                now_s: float, held: Mapping[str, str] | None = None) -> str:
    """The SHA-256 (hex) of ``story`` (JSON-able facts of the story's position) and of the
    durable files under ``folders``.

    Args:
        story: the story's position, from the engine (``harness.story.engine``).
        folders: the workers' data folder and the execution folder (the same for an
            execution that is not sealed; each file counted once).
        now_s: the story's simulated now, in epoch seconds (``RELATIVE_COLUMNS``).
        held: the digests (``database_digest``) of the databases the harness holds in
            memory, by name (the gateway's ledger: no file while workers run).
    """
    h = hashlib.sha256()
    h.update(json.dumps(story, sort_keys=True, default=str).encode())
    h.update(durable_digest(folders, now_s).encode())
    for name, digest in sorted((held or {}).items()):
        h.update(f"\0held {name} {digest}\0".encode())
    return h.hexdigest()


def durable_digest(folders: Iterable[Path], now_s: float) -> str:
    """The SHA-256 (hex) of every file under ``folders`` (names relative to their folder,
    sorted): an SQLite database by its tables' rows (``DROPPED_COLUMNS`` left out,
    ``RELATIVE_COLUMNS`` relative to ``now_s``), its ``-wal``/``-shm`` companions through
    it, a non-empty rollback journal (which may be hot) by its bytes, a worker's output file
    not at all, any other file by its bytes.
    A file that cannot be read counts by its error, so it never equals a readable one."""
    h = hashlib.sha256()
    seen: set[Path] = set()
    for folder in folders:
        folder = folder.resolve()
        if folder in seen:
            continue
        seen.add(folder)
        for path in sorted(_files(folder)):
            rel = path.relative_to(folder).as_posix()
            if rel.startswith(_OUTPUT_PREFIX) or rel.endswith(("-wal", "-shm")):
                continue  # a WAL's committed frames are read through its database
            if rel.endswith("-journal"):  # a rollback journal left behind may be hot: the
                if path.is_file() and path.stat().st_size:  # next opener rolls it back
                    h.update(f"\0journal {rel}\0".encode())
                    h.update(_raw_digest(path).encode())
                continue
            h.update(f"\0file {rel}\0".encode())
            h.update(_file_digest(path, now_s).encode())
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    out: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        out += [Path(root) / f for f in files]
    return out


def _file_digest(path: Path, now_s: float) -> str:
    try:
        if path.is_symlink() or not path.is_file():
            return f"not a regular file: {os.readlink(path) if path.is_symlink() else ''}"
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
        if head == _SQLITE_MAGIC:
            try:
                return _sqlite_digest(path, now_s)
            except sqlite3.Error:  # a hot journal a read-only reader will not roll back, …
                return "raw " + _raw_digest(path)  # equal only if every byte is
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}: {exc}"


def _raw_digest(path: Path) -> str:
    """The bytes of a database and of its companions (``-journal``, ``-wal``): an
    uncommitted transaction the next opener rolls back or replays is in them."""
    h = hashlib.sha256()
    for part in (path, *(path.with_name(path.name + s) for s in ("-journal", "-wal"))):
        if part.is_file():
            h.update(f"\0{part.name}\0".encode())
            h.update(part.read_bytes())
    return h.hexdigest()


def _sqlite_digest(path: Path, now_s: float) -> str:
    """The rows of every table, read only (the WAL's content included)."""
    with closing(sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)) as db:
        return database_digest(db, now_s)


def database_digest(db: sqlite3.Connection, now_s: float) -> str:
    """The SHA-256 (hex) of an open SQLite database: its schema and the rows of every
    table but ``SKIPPED_TABLES``, ``DROPPED_COLUMNS`` left out, ``RELATIVE_COLUMNS``
    relative to ``now_s`` (epoch seconds). Also what a database the harness holds in memory
    counts as (the gateway's ledger, ``harness.services.gateway.MockGateway.read_ledger``).

    Raises:
        sqlite3.Error: it cannot be read.
    """
    h = hashlib.sha256()
    tables = [r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    schema = db.execute("SELECT type, name, sql FROM sqlite_master "
                        "ORDER BY type, name").fetchall()
    h.update(repr(schema).encode())
    for table in tables:
        if table in SKIPPED_TABLES:
            continue
        quoted = '"' + table.replace('"', '""') + '"'
        cur = db.execute(f"SELECT * FROM {quoted} ORDER BY rowid")  # noqa: S608
        names = [d[0] for d in cur.description]
        h.update(f"\0table {table} {names}\0".encode())
        for row in cur:
            kept = [_relative(v, now_s) if n in RELATIVE_COLUMNS else v
                    for n, v in zip(names, row, strict=True) if n not in DROPPED_COLUMNS]
            h.update(repr(kept).encode())
    return h.hexdigest()


def _relative(value: object, now_s: float) -> object:
    """An epoch-seconds value as whole minutes from ``now_s`` (other values as they are)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round((value - now_s) / 60)
    return value


def simulated_now(clock_offset_s: float) -> float:
    """The workers' now: the wall clock plus the story's offset (``SHOPOPS_CLOCK_OFFSET_S``)."""
    return time.time() + clock_offset_s
