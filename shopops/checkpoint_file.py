"""Is this file a database of ours, of the kind expected? Decided read-only, before anything
writes to it: checkpoint databases, approval queues and gateway logs alike (``OurSchema``).

Chapter 8: "Corrupt / unsupported schema versions raise — do not silently guess." That holds
for the file as much as for a row (issue 14): a store never adopts a file that is not ours
(another application's tables, another of our databases, our table with other columns, a
folder, a symlink loop, a file that is not SQLite, a damaged SQLite file). It raises the
kind's ``NotOurDatabase`` (``NotACheckpointDatabase`` for the checkpoint store) naming the
file and what was found, and the file is left byte for byte as it was — no schema
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
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from shopops.errors import DatabaseNotFound, NotOurDatabase, ShopOpsError

SQLITE_HEADER = b"SQLite format 3\x00"


class FileState(Enum):
    """What ``inspect`` found: ``NEW`` (missing, empty, or a SQLite file with no tables: a
    store creates its schema) or ``OURS`` (a database of the expected kind;
    ``CHECKPOINTS`` is the same member, its older name)."""

    NEW = "new"
    OURS = "ours"
    CHECKPOINTS = "ours"


@dataclass(frozen=True)
class OurSchema:
    """One kind of SQLite database of ours, as ``inspect`` accepts it.

    Attributes:
        kind: what it is called in messages (``"checkpoint database"``, ``"approval
            queue"``, ``"gateway log"``).
        schema: its ``CREATE ... IF NOT EXISTS`` statements (a tuple of statements or one
            script); the tables, their columns and the other objects they create are what
            is accepted (derived by running them in ``:memory:``, so a table or column
            added there is accepted at once).
        anchor: the table that makes a file this kind (``checkpoints``); the schema's other
            tables may be missing (created at the first write).
        optional_columns: columns added in later versions (``ALTER TABLE ... ADD COLUMN``
            at the first write) that an older database of ours may still lack.
        error: raised for a file that is not this kind (a ``NotOurDatabase``).
        missing: raised for a missing file where the command needs an existing one.
    """

    kind: str
    schema: tuple[str, ...] | str
    anchor: str
    optional_columns: frozenset[str] = frozenset()
    error: type[NotOurDatabase] = NotOurDatabase
    missing: type[ShopOpsError] = DatabaseNotFound


def open_readonly(path: str | os.PathLike[str], timeout_s: float = 30.0) -> sqlite3.Connection:
    """A connection that cannot write ``path`` and leaves no file behind (module docstring).

    Raises:
        sqlite3.Error: SQLite cannot open it.
    """
    db = Path(path).resolve()
    wal = Path(f"{db}-wal")
    query = "mode=ro" if wal.exists() else "immutable=1"
    return sqlite3.connect(f"{db.as_uri()}?{query}", uri=True, timeout=timeout_s)


class Column(NamedTuple):
    """One column as SQLite reports it (``PRAGMA table_info``): its ``name`` and its
    declaration — type, NOT NULL, default, primary-key position."""

    name: str
    declared: tuple[str, int, str | None, int]


#: A table's columns, and its unique constraints (``PRAGMA index_list``: unique, origin —
#: ``pk``/``u``/``c`` — and the indexed columns), as a layout compares them.
Table = tuple[tuple[Column, ...], frozenset[tuple[int, str, tuple[str, ...]]]]


@lru_cache(maxsize=8)
def _layout_of(schema: tuple[str, ...] | str) -> tuple[dict[str, Table], frozenset[str]]:
    """Tables → their layout, and every schema object's name, that ``schema`` creates."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        for statement in (schema,) if isinstance(schema, str) else schema:
            conn.executescript(statement)
        return _read_layout(conn)


#: Every schema object as ``sqlite_master`` stores it (its SQL text included).
_MASTER_SQL = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"


@lru_cache(maxsize=8)
def _master_of(schema: tuple[str, ...] | str) -> tuple[tuple[Any, ...], ...]:
    """``sqlite_master`` exactly as ``schema`` leaves it in a new database. A file whose
    ``sqlite_master`` is the same has the same layout: SQLite derives every table, column and
    constraint from that SQL text (``https://sqlite.org/schematab.html``), so ``inspect``
    may skip comparing the layout pragma by pragma."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        for statement in (schema,) if isinstance(schema, str) else schema:
            conn.executescript(statement)
        return tuple(conn.execute(_MASTER_SQL))


def prime(*kinds: OurSchema) -> None:
    """Fill ``inspect``'s caches for ``kinds`` (each schema run once in ``:memory:``):
    a process that forks workers (the harness's fork server) does it once, before the
    fork, instead of every child doing it at its first ``inspect`` of each kind."""
    for ours in kinds:
        _master_of(ours.schema)
        _layout_of(ours.schema)


def _read_layout(conn: sqlite3.Connection) -> tuple[dict[str, Table], frozenset[str]]:
    names = frozenset(n for (n,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
    tables = [n for (n,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return {t: _table(conn, t) for t in tables}, names


def _table(conn: sqlite3.Connection, name: str) -> Table:
    columns = tuple(Column(r[1], (str(r[2]).upper(), int(r[3]), r[4], int(r[5])))
                    for r in conn.execute(f'PRAGMA table_info("{name}")'))
    unique = frozenset(
        (int(r[2]), str(r[3]), tuple(str(c[2]) for c in conn.execute(
            f'PRAGMA index_info("{r[1]}")')))
        for r in conn.execute(f'PRAGMA index_list("{name}")') if r[2])
    return columns, unique


def _a(kind: str) -> str:
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _refuse(path: str, ours: OurSchema, found: str) -> NotOurDatabase:
    return ours.error(
        f"{path} is not {_a(ours.kind)}: {found}; refused, the file was not modified "
        "(fail closed, Chapter 8)", path=path, kind=ours.kind, found=found)


def _stat(path: str, ours: OurSchema) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise _refuse(path, ours, f"a symlink to nothing ({os.readlink(path)!r})"
                          ) from None
        return None
    except OSError as exc:
        found = {errno.ELOOP: "a symlink loop",
                 errno.ENOTDIR: "a path through a file, not a folder",
                 errno.ENAMETOOLONG: "a name too long for the file system"}.get(
            exc.errno or 0, f"a file that cannot be examined ({exc.strerror})")
        raise _refuse(path, ours, found) from None


def _names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items)) or "none"


def _misfit(have: Table, want: Table, optional: Collection[str]) -> str | None:
    """Why the table ``have`` is not ``want`` (``None``: it fits): ``want``'s columns in
    order, less some ``optional`` ones, each declared the same, and the same unique
    constraints (they carry the idempotency keys' and the primary keys' guarantees)."""
    names = [c.name for c in have[0]]
    keep = tuple(c for c in want[0] if c.name in names)
    if names != [c.name for c in keep] or {c.name for c in want[0]} - set(names) - set(
            optional):
        return (f"has columns ({', '.join(names)}); OURS has "
                f"({', '.join(c.name for c in want[0])})")
    for got, expected in zip(have[0], keep, strict=True):
        if got.declared != expected.declared:
            return (f"declares column {got.name} as {_decl(got)}; OURS declares it "
                    f"{_decl(expected)}")
    if have[1] != want[1]:
        return "has other primary-key or UNIQUE constraints than OURS"
    return None


def _decl(column: Column) -> str:
    kind, notnull, default, pk = column.declared
    return " ".join(filter(None, [kind or "(no type)", "NOT NULL" if notnull else "",
                                  f"DEFAULT {default}" if default is not None else "",
                                  "PRIMARY KEY" if pk else ""]))


def inspect(path: str | os.PathLike[str], ours: OurSchema, *, create: bool) -> FileState:
    """Decide, read-only, whether ``path`` is a database of the kind ``ours`` describes.

    The one inspector of every database file of ours (issue 14): the checkpoint store
    (``shopops.checkpoint``), the approval queue (``shopops.approvals``) and the harness's
    gateway log (``harness.services.gateway``) each call it before opening a connection that can
    write.

    Args:
        path: the database file.
        ours: the kind of database expected (its schema, anchor table, optional columns).
        create: the command creates a database by design (``shopops run``, the worker's
            approval queue, ``gateway serve``): a missing or empty file is ``NEW``.
            Otherwise (``resume``, ``migrate``, ``history``, ``approve``, ``reject``) it is
            refused.

    Returns:
        ``FileState.NEW`` or ``FileState.OURS``.

    Raises:
        ours.missing (``CheckpointNotFound``, ``DatabaseNotFound``): no file and not
            ``create``.
        ours.error (a ``NotOurDatabase``, e.g. ``NotACheckpointDatabase``): naming the file,
            the kind expected and what was found: a folder, a symlink loop or dangling
            symlink, a device/FIFO/socket, an empty file (not ``create``), not SQLite (its
            first bytes), a damaged or unreadable SQLite file, no ``anchor`` table (another
            application's or another of our databases), tables or objects not in the
            schema, a table of ours with other columns, a column declared otherwise (type,
            NOT NULL, default, primary key) or other UNIQUE constraints.
    """
    where = os.fspath(path)
    found = _examine(where, ours, create)
    if found is not None:
        return found
    with contextlib.closing(_open_checked(where, ours)) as conn:
        return _judge(conn, where, ours, create)


@contextlib.contextmanager
def inspected(path: str | os.PathLike[str], ours: OurSchema) -> Iterator[sqlite3.Connection]:
    """``inspect(path, ours, create=False)``, then the read-only connection that was
    inspected, to read through (closed on exit): what is read is the file that was
    judged ours, with one connection instead of two (``open_readonly``: nothing is
    written and no side file is left).

    Raises:
        as ``inspect`` with ``create=False``; ``ours.error`` also for a missing or empty
        file's ``NEW`` (there is nothing of ours to read).
    """
    where = os.fspath(path)
    if _examine(where, ours, False) is not None:  # pragma: no cover - create=False raises
        raise _refuse(where, ours, "an empty file (no schema)")
    conn = _open_checked(where, ours)
    try:
        if _judge(conn, where, ours, False) is not FileState.OURS:  # pragma: no cover
            raise _refuse(where, ours, "a SQLite file without tables")
        yield conn
    finally:
        conn.close()


def _examine(where: str, ours: OurSchema, create: bool) -> FileState | None:
    """What ``inspect`` decides before opening the file (``None``: open and judge it)."""
    st = _stat(where, ours)
    if st is None:
        if create:
            return FileState.NEW
        raise ours.missing(f"no {ours.kind} {where}", path=where, kind=ours.kind)
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(where, ours, "a folder")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(where, ours, "not a regular file (a device, FIFO or socket)")
    wal = Path(f"{where}-wal")
    if st.st_size == 0 and not (wal.exists() and wal.stat().st_size > 0):
        if create:
            return FileState.NEW
        raise _refuse(where, ours, "an empty file (no schema)")
    if st.st_size > 0:
        with open(where, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
        if head != SQLITE_HEADER:
            raise _refuse(where, ours, f"not a SQLite file (it begins {head!r})")
    return None


def _open_checked(where: str, ours: OurSchema) -> sqlite3.Connection:
    try:
        return open_readonly(where)
    except sqlite3.Error as exc:
        raise _refuse(where, ours, f"an unreadable SQLite file ({exc})") from None


def _judge(conn: sqlite3.Connection, where: str, ours: OurSchema, create: bool) -> FileState:
    """``inspect``'s verdict on the opened file."""
    try:
        check = conn.execute("PRAGMA quick_check(1)").fetchone()
        exact = tuple(conn.execute(_MASTER_SQL)) == _master_of(ours.schema)
        tables, names = ({}, frozenset()) if exact else _read_layout(conn)
    except sqlite3.Error as exc:
        raise _refuse(where, ours, f"an unreadable SQLite file ({exc})") from None
    if check is None or check[0] != "ok":
        raise _refuse(where, ours, f"a damaged SQLite file (quick_check: {check})")
    if exact:  # the schema text as ours creates it: the layout is ours
        return FileState.OURS
    if not tables:
        if create and not names:
            return FileState.NEW
        raise _refuse(where, ours, "a SQLite file without tables")
    expected, expected_names = _layout_of(ours.schema)
    foreign = set(tables) - set(expected)
    if ours.anchor not in tables:
        raise _refuse(where, ours, f"no {ours.anchor} table; tables of another application "
                                   f"or another of our databases: {_names(tables)}")
    if foreign:
        raise _refuse(where, ours, f"tables that are not ours: {_names(foreign)}")
    others = names - set(tables) - expected_names
    if others:
        raise _refuse(where, ours,
                      f"indexes, triggers or views that are not ours: {_names(others)}")
    for table, layout in tables.items():
        why = _misfit(layout, expected[table], ours.optional_columns)
        if why:
            raise _refuse(where, ours, f"table {table} " + why.replace("OURS", _a(ours.kind)))
    return FileState.OURS
