"""Is this file a checkpoint database? Decided read-only, before anything writes to it.

Chapter 8: "Corrupt / unsupported schema versions raise — do not silently guess." That holds
for the file as much as for a row (issue 14): a store never adopts a file that is not ours
(another application's tables, our table with other columns, a folder, a symlink loop, a
file that is not SQLite, a damaged SQLite file). It raises ``NotACheckpointDatabase`` naming
the file and what was found, and the file is left byte for byte as it was — no schema
created, no column added, no WAL or shared-memory file left behind.

Reading without leaving anything behind (SQLite docs, "URI filenames": ``mode=ro``,
``immutable=1``; "Write-Ahead Logging"): a read-only connection to a WAL database creates
``-wal`` and ``-shm`` files it cannot remove. When no ``-wal`` file exists the main file
holds every committed page, so it is opened ``immutable=1`` (no locks, no side files); when
one exists (a writer is or was active) ``mode=ro`` reads it and adds nothing new.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
from collections.abc import Collection, Iterable
from enum import Enum
from functools import lru_cache
from pathlib import Path

from shopops.errors import CheckpointNotFound, NotACheckpointDatabase

SQLITE_HEADER = b"SQLite format 3\x00"


class FileState(Enum):
    """What ``inspect`` found: ``NEW`` (missing, empty, or a SQLite file with no tables: a
    store creates its schema) or ``CHECKPOINTS`` (a checkpoint database of ours)."""

    NEW = "new"
    CHECKPOINTS = "checkpoints"


def open_readonly(path: str | os.PathLike[str], timeout_s: float = 30.0) -> sqlite3.Connection:
    """A connection that cannot write ``path`` and leaves no file behind (module docstring).

    Raises:
        sqlite3.Error: SQLite cannot open it.
    """
    db = Path(path).resolve()
    wal = Path(f"{db}-wal")
    query = "mode=ro" if wal.exists() else "immutable=1"
    return sqlite3.connect(f"{db.as_uri()}?{query}", uri=True, timeout=timeout_s)


@lru_cache(maxsize=8)
def _layout_of(schema: tuple[str, ...]) -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    """Tables → columns, and every schema object's name, that ``schema`` creates."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        for statement in schema:
            conn.execute(statement)
        return _read_layout(conn)


def _read_layout(conn: sqlite3.Connection
                 ) -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    names = frozenset(n for (n,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
    tables = [n for (n,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return ({t: tuple(r[1] for r in conn.execute(f'PRAGMA table_info("{t}")'))
             for t in tables}, names)


def _refuse(path: str, found: str) -> NotACheckpointDatabase:
    return NotACheckpointDatabase(
        f"{path} is not a checkpoint database: {found}; refused, the file was not modified "
        "(fail closed, Chapter 8)", path=path, found=found)


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise _refuse(path, f"a symlink to nothing ({os.readlink(path)!r})") from None
        return None
    except OSError as exc:
        found = {errno.ELOOP: "a symlink loop",
                 errno.ENOTDIR: "a path through a file, not a folder",
                 errno.ENAMETOOLONG: "a name too long for the file system"}.get(
            exc.errno or 0, f"a file that cannot be examined ({exc.strerror})")
        raise _refuse(path, found) from None


def _names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items)) or "none"


def inspect(path: str | os.PathLike[str], schema: Iterable[str], *, create: bool,
            optional_columns: Collection[str] = ()) -> FileState:
    """Decide, read-only, whether ``path`` is a checkpoint database created by ``schema``.

    Args:
        path: the database file.
        schema: the ``CREATE ... IF NOT EXISTS`` statements of a checkpoint database; its
            tables, their columns and its other objects are what is accepted.
        create: the command creates a database by design (``shopops run``): a missing or
            empty file is ``NEW``. Otherwise (``resume``, ``migrate``, ``history``) it is
            refused.
        optional_columns: trailing columns added in later versions that an older database
            of ours may still lack (added at its first write).

    Returns:
        ``FileState.NEW`` or ``FileState.CHECKPOINTS``; missing tables of the schema other
        than ``checkpoints`` are allowed (created at the first write).

    Raises:
        CheckpointNotFound: no file and not ``create``.
        NotACheckpointDatabase: naming the file and what was found: a folder, a symlink
            loop or dangling symlink, a device/FIFO/socket, an empty file (not ``create``),
            not SQLite (its first bytes), a damaged or unreadable SQLite file, another
            application's tables or objects, ``checkpoints`` (or another table of ours) with
            other columns.
    """
    where = os.fspath(path)
    st = _stat(where)
    if st is None:
        if create:
            return FileState.NEW
        raise CheckpointNotFound(f"no checkpoint database {where}", path=where, case_id=None,
                                 run_id=None, seq=None)
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(where, "a folder")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(where, "not a regular file (a device, FIFO or socket)")
    wal = Path(f"{where}-wal")
    if st.st_size == 0 and not (wal.exists() and wal.stat().st_size > 0):
        if create:
            return FileState.NEW
        raise _refuse(where, "an empty file (no schema)")
    if st.st_size > 0:
        with open(where, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
        if head != SQLITE_HEADER:
            raise _refuse(where, f"not a SQLite file (it begins {head!r})")
    try:
        with contextlib.closing(open_readonly(where)) as conn:
            check = conn.execute("PRAGMA quick_check(1)").fetchone()
            tables, names = _read_layout(conn)
    except sqlite3.Error as exc:
        raise _refuse(where, f"an unreadable SQLite file ({exc})") from None
    if check is None or check[0] != "ok":
        raise _refuse(where, f"a damaged SQLite file (quick_check: {check})")
    if not tables:
        if create and not names:
            return FileState.NEW
        raise _refuse(where, "a SQLite file without tables")
    expected, expected_names = _layout_of(tuple(schema))
    foreign = set(tables) - set(expected)
    if "checkpoints" not in tables:
        raise _refuse(where, f"no checkpoints table; tables of another application: "
                             f"{_names(tables)}")
    if foreign:
        raise _refuse(where, f"tables that are not ours: {_names(foreign)}")
    others = names - set(tables) - expected_names
    if others:
        raise _refuse(where, f"indexes, triggers or views that are not ours: {_names(others)}")
    for table, columns in tables.items():
        want = expected[table]
        legacy = tuple(c for c in want if c not in optional_columns)
        if columns not in (want, legacy):
            raise _refuse(where, f"table {table} has columns ({', '.join(columns)}); a "
                                 f"checkpoint database has ({', '.join(want)})")
    return FileState.CHECKPOINTS
