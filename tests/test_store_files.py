"""The checkpoint store fails closed on the FILE (issue 14, Chapter 8): corrupt and foreign
databases, table-driven, compared byte for byte (and file by file: no ``-wal``/``-shm`` left
behind) before and after ``shopops run``, ``resume``, ``migrate`` and ``history``."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from input_helpers import assert_refused, call, tree

from shopops.checkpoint import CheckpointStore
from shopops.errors import CheckpointCorrupt, NotACheckpointDatabase
from shopops.state import State

V1_FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "v1_parked.db"
CASE, RUN = "case-O-1001", "run-1"


def sql(db: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        for s in statements:
            conn.execute(s)


def ours(db: Path) -> None:
    """A checkpoint database with one good parked-like row (WAL mode, closed cleanly)."""
    with CheckpointStore(db) as store:
        store.save(State(case_id=CASE, order_id="O-1001"), RUN)


def latest_row(blob: bytes, version: int = 2) -> Callable[[Path], None]:
    def build(db: Path) -> None:
        ours(db)
        with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
            conn.execute("INSERT INTO checkpoints (case_id, run_id, schema_version, state_json,"
                         " created_at) VALUES (?, ?, ?, ?, ?)",
                         (CASE, RUN, version, blob, "2026-07-19T00:00:00.000Z"))
    return build


def v1_with_corrupt_latest(db: Path) -> None:
    """The committed v1 database (rollback journal, no WAL) plus a torn latest row."""
    shutil.copyfile(V1_FIXTURE, db)
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        (case, run) = conn.execute("SELECT case_id, run_id FROM checkpoints").fetchone()
        conn.execute("INSERT INTO checkpoints (case_id, run_id, schema_version, state_json,"
                     " created_at) VALUES (?, ?, 2, ?, ?)", (case, run, b'{"case_id": "ca',
                                                             "2026-07-19T00:00:00.000Z"))


def damaged(db: Path) -> None:
    ours(db)
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # page 1's b-tree, after the 100-byte header
    db.write_bytes(bytes(data))


FOREIGN = "NotACheckpointDatabase"
CORRUPT = "CheckpointCorrupt"
UNSUPPORTED = "UnsupportedSchemaVersion"
ALL = ("run", "resume", "migrate", "history")

# (id, build the file, {command: error name (exit 1) or None (exit 0)}, words in the error)
CASES: list[tuple[str, Callable[[Path], None], dict[str, str | None], tuple[str, ...]]] = [
    ("another-application", lambda db: sql(db, "CREATE TABLE users(id, email)",
                                           "INSERT INTO users VALUES (1, 'a@b')"),
     dict.fromkeys(ALL, FOREIGN), ("no checkpoints table", "users")),
    ("checkpoints-wrong-columns", lambda db: sql(
        db, "CREATE TABLE checkpoints(id INTEGER PRIMARY KEY, blob TEXT)",
        "INSERT INTO checkpoints VALUES (1, 'x')"),
     dict.fromkeys(ALL, FOREIGN), ("table checkpoints has columns (id, blob)",)),
    ("ours-plus-a-foreign-table", lambda db: (ours(db), sql(db, "CREATE TABLE extra(x)")),
     dict.fromkeys(ALL, FOREIGN), ("tables that are not ours: extra",)),
    ("ours-plus-a-foreign-trigger", lambda db: (ours(db), sql(
        db, "CREATE TRIGGER wipe AFTER INSERT ON checkpoints BEGIN SELECT 1; END")),
     dict.fromkeys(ALL, FOREIGN), ("not ours: wipe",)),
    ("not-sqlite", lambda db: db.write_text("seq,case_id\n1,case-O-1001\n"),
     dict.fromkeys(ALL, FOREIGN), ("not a SQLite file",)),
    ("sqlite-header-then-garbage", lambda db: db.write_bytes(
        b"SQLite format 3\x00" + b"\x00\x10" + b"\xff" * 4000),
     dict.fromkeys(ALL, FOREIGN), ("SQLite file",)),
    ("damaged-pages", damaged, dict.fromkeys(ALL, FOREIGN), ("SQLite file",)),
    ("truncated-file", lambda db: (ours(db), db.write_bytes(db.read_bytes()[:1000])),
     dict.fromkeys(ALL, FOREIGN), ("SQLite file",)),
    ("empty-file", lambda db: db.write_bytes(b""),
     {"resume": FOREIGN, "migrate": FOREIGN, "history": FOREIGN}, ("an empty file",)),
    ("sqlite-without-tables", lambda db: sql(db, "PRAGMA user_version = 7"),
     {"resume": FOREIGN, "migrate": FOREIGN, "history": FOREIGN}, ("without tables",)),
    ("latest-row-corrupt-json", latest_row(b'{"case_id": "case-O-1001", "schema_version": 2}'),
     {"run": CORRUPT, "resume": CORRUPT, "migrate": CORRUPT, "history": None}, ("seq=2",)),
    ("latest-row-truncated", latest_row(b'{"case_id": "case-O-1001", "ph'),
     {"run": CORRUPT, "resume": CORRUPT, "migrate": CORRUPT, "history": None}, ("seq=2",)),
    ("latest-row-invalid-utf8", latest_row(b'{"case_id": "\xff\xfe"}'),
     {"run": CORRUPT, "resume": CORRUPT, "migrate": CORRUPT, "history": None}, ("UTF-8",)),
    ("latest-row-unknown-version", latest_row(b'{"schema_version": 99}', version=99),
     {"run": UNSUPPORTED, "resume": UNSUPPORTED, "migrate": UNSUPPORTED, "history": None},
     ("schema_version 99",)),
    ("v1-database-with-a-torn-latest-row", v1_with_corrupt_latest,
     {"run": CORRUPT, "resume": CORRUPT, "migrate": CORRUPT, "history": None}, ("seq=",)),
]


@pytest.mark.parametrize(("build", "expect", "words"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", ALL)
def test_a_bad_database_is_refused_and_left_as_it_was(
        tmp_path: Path, command: str, build: Callable[[Path], None],
        expect: dict[str, str | None], words: tuple[str, ...]) -> None:
    db = tmp_path / "shopops.db"
    build(db)
    before = tree(tmp_path)
    argv = {"run": ("run", "--db", "shopops.db"), "resume": ("resume", "--db", "shopops.db"),
            "migrate": ("migrate", "shopops.db"),
            "history": ("history", "--db", "shopops.db")}[command]
    o = call("shopops", argv, tmp_path)
    if command not in expect:  # e.g. `run` on an empty file: a new database by design
        assert o.code == 0, o.err
        return
    error = expect[command]
    if error is None:  # `history` lists raw rows, corrupt ones included, and writes nothing
        assert o.code == 0, o.err
        assert not o.changed, o.changed
        return
    assert_refused(o, 1, f"{error}: ", "shopops.db", *(words if error == FOREIGN or
                                                        command != "history" else ()))
    assert tree(tmp_path) == before  # the same files, the same bytes: no -wal, no -shm


def test_run_on_an_empty_file_creates_a_new_database(tmp_path: Path) -> None:
    """An empty file is a new database only where the command creates one by design."""
    (tmp_path / "shopops.db").write_bytes(b"")
    o = call("shopops", ("run", "--db", "shopops.db"), tmp_path)
    assert o.code == 0, o.err
    assert (tmp_path / "shopops.db").stat().st_size > 0


def test_the_store_itself_refuses_a_foreign_file(tmp_path: Path) -> None:
    """Not only the CLI: ``CheckpointStore`` (the library) fails closed on the file."""
    db = tmp_path / "other.db"
    sql(db, "CREATE TABLE users(id)")
    before = db.read_bytes()
    with pytest.raises(NotACheckpointDatabase) as info:
        CheckpointStore(db)
    assert info.value.path == str(db) and "users" in info.value.found
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "other.db"]


def test_a_corrupt_latest_row_is_not_written_even_on_open(tmp_path: Path) -> None:
    db = tmp_path / "shopops.db"
    latest_row(b"{")(db)
    before = tree(tmp_path)
    with CheckpointStore(db) as store, pytest.raises(CheckpointCorrupt):
        store.load(CASE, RUN)
    assert tree(tmp_path) == before


def test_an_older_database_of_ours_is_still_accepted(tmp_path: Path) -> None:
    """The committed v1 database lacks later columns (``writer_pid``): it is ours, migrates,
    and only then is written (the added column, WAL mode)."""
    db = tmp_path / "v1.db"
    shutil.copyfile(V1_FIXTURE, db)
    o = call("shopops", ("migrate", "v1.db"), tmp_path)
    assert o.code == 0 and '"migrated_rows": ' in o.out, o.err
