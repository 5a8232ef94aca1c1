"""The approval queue and the gateway log fail closed on the FILE too (issue 14, Chapter 8):
one inspector (``shopops.checkpoint_file.inspect``) for every database of ours, used where
each is opened — ``shopops run/resume --approvals`` (and ``$SHOPOPS_APPROVALS_DB``),
``shopops approve/reject``, ``shopops-chaos gateway serve --db``. Table-driven: each bad
file is compared byte for byte (and file by file: no ``-wal``/``-shm``) before and after.
Also: a command that needs an existing queue creates none, and ``run`` of an unknown order
creates nothing."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from input_helpers import assert_refused, call, tree

from harness.services.gateway import GATEWAY_LOG, MockGateway
from shopops.approval_store import APPROVAL_QUEUE
from shopops.approvals import ApprovalQueue
from shopops.checkpoint import CHECKPOINT_DB, CheckpointStore
from shopops.checkpoint_file import FileState, OurSchema, inspect
from shopops.errors import DatabaseNotFound, NotACheckpointDatabase, NotOurDatabase
from shopops.state import State


def sql(db: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        for s in statements:
            conn.execute(s)


def checkpoints(db: Path) -> None:
    with CheckpointStore(db) as store:
        store.save(State(case_id="case-O-1001", order_id="O-1001"), "run-1")


def queue(db: Path) -> None:
    with ApprovalQueue(db) as q:
        q.request("case-O-1001", "ab" * 32)


def gateway_log(db: Path) -> None:
    MockGateway(db)  # creates its schema; never started


ANCHOR = {"approval queue": "approval_requests", "gateway log": "requests"}
OURS = {"approval queue": queue, "gateway log": gateway_log}


def damaged(db: Path, kind: str) -> None:
    OURS[kind](db)
    data = bytearray(db.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # page 1's b-tree, after the 100-byte header
    db.write_bytes(bytes(data))


# (id, build(file, kind), words in the error, {anchor} = the kind's anchor table)
BAD: list[tuple[str, Callable[[Path, str], None], tuple[str, ...]]] = [
    ("another-application", lambda db, _: sql(db, "CREATE TABLE users(id, email)",
                                              "INSERT INTO users VALUES (1, 'a@b')"),
     ("no {anchor} table", "users")),
    ("not-sqlite", lambda db, _: db.write_text("request_id,case_id\n"),
     ("not a SQLite file",)),
    ("damaged-pages", damaged, ("SQLite file",)),
    ("anchor-wrong-columns", lambda db, kind: sql(db, f"CREATE TABLE {ANCHOR[kind]}(a, b)"),
     ("table {anchor} has columns (a, b)",)),
    ("ours-plus-a-foreign-table", lambda db, kind: (OURS[kind](db),
                                                    sql(db, "CREATE TABLE extra(x)")),
     ("tables that are not ours: extra",)),
]

# (entry point, argv with {db}, environment with {db}, the kind it expects, exit status)
ENTRIES: list[tuple[str, str, tuple[str, ...], dict[str, str], str, int]] = [
    ("run --approvals", "shopops", ("run", "--approvals", "{db}", "--db", "ck.db"), {},
     "approval queue", 1),
    ("resume --approvals", "shopops", ("resume", "--approvals", "{db}", "--db", "ck.db"), {},
     "approval queue", 1),
    ("run $SHOPOPS_APPROVALS_DB", "shopops", ("run", "--db", "ck.db"),
     {"SHOPOPS_APPROVALS_DB": "{db}"}, "approval queue", 1),
    ("approve", "shopops", ("approve", "--approvals", "{db}"), {}, "approval queue", 1),
    ("reject", "shopops", ("reject", "--approvals", "{db}"), {}, "approval queue", 1),
    ("gateway serve", "shopops-chaos", ("gateway", "serve", "--db", "{db}"), {},
     "gateway log", 2),
]


@pytest.mark.parametrize(("build", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize(("entry", "argv", "env", "kind", "code"), [e[1:] for e in ENTRIES],
                         ids=[e[0] for e in ENTRIES])
def test_a_file_that_is_not_the_kind_expected_is_refused_and_left_as_it_was(
        tmp_path: Path, entry: str, argv: tuple[str, ...], env: dict[str, str], kind: str,
        code: int, build: Callable[[Path, str], None], words: tuple[str, ...]) -> None:
    build(tmp_path / "bad.db", kind)
    if argv[0] == "resume":
        checkpoints(tmp_path / "ck.db")
    before = tree(tmp_path)
    o = call(entry, [a.format(db="bad.db") for a in argv], tmp_path,
             {k: v.format(db="bad.db") for k, v in env.items()})
    article = "an" if kind[0] == "a" else "a"
    assert_refused(o, code, f"bad.db is not {article} {kind}",
                   *(w.format(anchor=ANCHOR[kind]) for w in words))
    assert tree(tmp_path) == before  # the same files, the same bytes: no -wal, no -shm


@pytest.mark.parametrize(("build", "entry", "argv", "kind"), [
    (checkpoints, "shopops", ("approve", "--approvals", "other.db"), "approval queue"),
    (gateway_log, "shopops", ("run", "--db", "ck.db", "--approvals", "other.db"),
     "approval queue"),
    (checkpoints, "shopops-chaos", ("gateway", "serve", "--db", "other.db"), "gateway log"),
    (queue, "shopops-chaos", ("gateway", "serve", "--db", "other.db"), "gateway log"),
    (queue, "shopops", ("history", "--db", "other.db"), "checkpoint database"),
    (gateway_log, "shopops", ("run", "--db", "other.db"), "checkpoint database"),
], ids=["queue<-checkpoints", "queue<-gateway", "gateway<-checkpoints", "gateway<-queue",
        "checkpoints<-queue", "checkpoints<-gateway"])
def test_another_of_our_databases_is_not_adopted(
        tmp_path: Path, build: Callable[[Path], None], entry: str, argv: tuple[str, ...],
        kind: str) -> None:
    """Our own files are not interchangeable: a checkpoint database given as the queue (or
    as the gateway's log) is refused, not given the other schema's tables."""
    build(tmp_path / "other.db")
    before = tree(tmp_path)
    o = call(entry, argv, tmp_path)
    assert_refused(o, 2 if entry == "shopops-chaos" else 1, "other.db is not a", kind)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", ["approve", "reject"])
@pytest.mark.parametrize("queue_arg", [("--approvals", "q.db"), ()], ids=["given", "default"])
def test_approve_and_reject_create_no_queue(tmp_path: Path, command: str,
                                            queue_arg: tuple[str, ...]) -> None:
    """Nothing to decide without a request: a missing queue file is refused, not created."""
    o = call("shopops", (command, *queue_arg), tmp_path)
    assert_refused(o, 1, "DatabaseNotFound", "no approval queue",
                   queue_arg[1] if queue_arg else "shopops-approvals.db")
    assert tree(tmp_path) == {}


@pytest.mark.parametrize(("argv", "names"), [
    (("--order", "O-9999"), ("argument --order", "'O-9999'", "O-1001")),
    (("--case", "case-O-9999"), ("argument --case", "'case-O-9999'", "O-1001")),
])
def test_run_of_an_unknown_order_creates_nothing(tmp_path: Path, argv: tuple[str, ...],
                                                 names: tuple[str, ...]) -> None:
    """The order is checked before the checkpoint database or the queue is created."""
    o = call("shopops", ("run", "--db", "ck.db", "--approvals", "q.db", *argv), tmp_path)
    assert_refused(o, 2, *names)
    assert tree(tmp_path) == {}


def test_a_case_with_a_checkpoint_is_not_refused_for_its_case_id(tmp_path: Path) -> None:
    """The order is read only for a new case: a checkpointed case whose id names no order
    (its order is in its state) continues."""
    with CheckpointStore(tmp_path / "ck.db") as store:
        store.save(State(case_id="case-zzz", order_id="O-1001"), "run-1")
    o = call("shopops", ("run", "--db", "ck.db", "--approvals", "q.db", "--case", "case-zzz"),
             tmp_path)
    assert o.code == 0, o.err
    assert '"stopped": "parked"' in o.out


def test_a_new_queue_and_gateway_log_are_created_where_by_design(tmp_path: Path) -> None:
    """The worker's queue and ``gateway serve``'s log are created when missing or empty."""
    (tmp_path / "q.db").write_bytes(b"")
    queue(tmp_path / "q.db")
    assert inspect(tmp_path / "q.db", APPROVAL_QUEUE, create=False) is FileState.OURS
    gateway_log(tmp_path / "g.db")
    assert inspect(tmp_path / "g.db", GATEWAY_LOG, create=False) is FileState.OURS
    assert inspect(tmp_path / "none.db", GATEWAY_LOG, create=True) is FileState.NEW
    with pytest.raises(DatabaseNotFound):
        inspect(tmp_path / "none.db", APPROVAL_QUEUE, create=False)


def test_an_older_queue_without_feedback_or_gate_is_still_ours(tmp_path: Path) -> None:
    """A queue from before ``feedback`` and ``gate`` is accepted (they are added on open);
    the same table missing a column that is not optional is refused."""
    old = tmp_path / "old.db"
    sql(old, "CREATE TABLE approval_requests (request_id TEXT PRIMARY KEY, case_id TEXT NOT "
             "NULL, draft_digest TEXT NOT NULL, requested_at TEXT NOT NULL, status TEXT NOT "
             "NULL)")
    assert inspect(old, APPROVAL_QUEUE, create=False) is FileState.OURS
    with ApprovalQueue(old) as q:
        q.request("case-O-1001", "cd" * 32)
        assert q.latest_request("case-O-1001") is not None
    bad = tmp_path / "bad.db"
    sql(bad, "CREATE TABLE approval_requests (request_id TEXT PRIMARY KEY, case_id TEXT)")
    with pytest.raises(NotOurDatabase) as info:
        ApprovalQueue(bad)
    assert info.value.kind == "approval queue" and "columns (request_id, case_id)" in str(
        info.value)


def test_the_typed_errors_name_file_kind_and_finding(tmp_path: Path) -> None:
    """``NotACheckpointDatabase`` stays a ``NotOurDatabase``; every kind names itself."""
    db = tmp_path / "x.db"
    sql(db, "CREATE TABLE users(id)")
    for ours, error in ((CHECKPOINT_DB, NotACheckpointDatabase),
                        (APPROVAL_QUEUE, NotOurDatabase), (GATEWAY_LOG, NotOurDatabase)):
        with pytest.raises(error) as info:
            inspect(db, ours, create=True)
        assert isinstance(info.value, NotOurDatabase)
        assert (info.value.path, info.value.kind) == (str(db), ours.kind)
        assert "users" in info.value.found


@pytest.mark.parametrize(("ours", "statements", "words"), [
    (APPROVAL_QUEUE, ['CREATE TABLE approval_requests (request_id, case_id, draft_digest, '
                      'requested_at, status, feedback TEXT NOT NULL, gate)'],
     "declares column request_id as (no type)"),
    (GATEWAY_LOG, ["CREATE TABLE requests (seq INTEGER PRIMARY KEY AUTOINCREMENT, received_at "
                   "TEXT NOT NULL, received_epoch REAL NOT NULL, idempotency_key TEXT, "
                   "body_sha256 TEXT NOT NULL, case_id TEXT, status INTEGER NOT NULL, fault "
                   "TEXT, worker_pid INTEGER, remote_port INTEGER, delivery_id TEXT, duplicate "
                   "INTEGER NOT NULL DEFAULT 0, claimed_pid INTEGER, worker_uid INTEGER)",
                   # the idempotency key without its UNIQUE: duplicates would be delivered
                   "CREATE TABLE deliveries (n INTEGER PRIMARY KEY, delivery_id TEXT NOT NULL "
                   "UNIQUE, request_seq INTEGER NOT NULL, idempotency_key TEXT, body_sha256 "
                   'TEXT NOT NULL, case_id TEXT NOT NULL, "to" TEXT NOT NULL, subject TEXT NOT '
                   "NULL, body TEXT NOT NULL, delivered_at TEXT NOT NULL)"],
     "table deliveries has other primary-key or UNIQUE constraints"),
    (CHECKPOINT_DB, ["CREATE TABLE checkpoints (seq INTEGER, case_id TEXT NOT NULL, run_id "
                     "TEXT NOT NULL, schema_version INTEGER, state_json TEXT, created_at TEXT "
                     "NOT NULL, lease_owner TEXT, fence INTEGER, writer_pid INTEGER)"],
     "declares column seq as INTEGER; a checkpoint database declares it INTEGER PRIMARY KEY"),
], ids=["queue-untyped", "gateway-key-not-unique", "checkpoints-seq-not-key"])
def test_our_column_names_declared_otherwise_are_refused(
        tmp_path: Path, ours: OurSchema, statements: list[str], words: str) -> None:
    """The right names are not enough (found by ``test_file_fuzz.py``: a queue table with
    our columns but no primary key was accepted, and its requests then vanished)."""
    db = tmp_path / "x.db"
    sql(db, *statements)
    before = db.read_bytes()
    with pytest.raises(NotOurDatabase) as info:
        inspect(db, ours, create=True)
    assert words in str(info.value), str(info.value)
    assert db.read_bytes() == before
