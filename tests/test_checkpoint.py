"""CheckpointStore: round trip, fail-closed loads (Chapter 8 exercise 1), the explicit v1→v2
migration (exercise 2), leases with fencing (exercise 4) and the append-only history.

Subprocess kill tests live in ``test_checkpoint_kill.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shopops.checkpoint import (
    CheckpointRow,
    CheckpointStore,
    Lease,
    read_history,
    read_latest,
)
from shopops.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    FencedOff,
    LeaseHeld,
    NotACheckpointDatabase,
    StateInvalid,
    UnsupportedSchemaVersion,
)
from shopops.state import NOTE_FIELDS, Draft, State

CASE, RUN = "case-O-1001", "run-1"
EPOCH_2026_07_19 = 1_784_419_200.0
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
V1_FIXTURE = FIXTURES / "v1_parked.db"
HOLD_S = 0.3


class FakeClock:
    """A settable clock in epoch seconds."""

    def __init__(self, now: float = EPOCH_2026_07_19) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def parked(step: int = 4) -> State:
    return State(
        case_id=CASE, order_id="O-1001", phase="awaiting_approval", step=step, done=True,
        customer={"name": "Jordan Lee"}, order={"order_id": "O-1001"},
        draft=Draft("jordan.lee@example.com", "Update on your order O-1001", "Hi Jordan"),
        approval_request_id="areq-1",
    )


def raw_rows(db: Path) -> list[tuple[Any, ...]]:
    """Every checkpoint row exactly as stored (state_json as bytes, plus its SQL type)."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT seq, case_id, run_id, schema_version, typeof(state_json),"
            " CAST(state_json AS BLOB), created_at, lease_owner, fence FROM checkpoints"
            " ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()


def insert_raw(db: Path, version: int | None, blob: bytes | None, case_id: str = CASE) -> int:
    """Append a row behind the store's back; ``blob`` is stored as TEXT, bytes unchecked."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        cur = conn.execute(
            "INSERT INTO checkpoints(case_id, run_id, schema_version, state_json, created_at)"
            " VALUES (?, ?, ?, CAST(? AS TEXT), '2026-07-19T01:00:00Z')",
            (case_id, RUN, version, blob),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "shopops.db"


@pytest.fixture
def store(db: Path) -> Any:
    with CheckpointStore(db) as s:
        yield s


# --- basics ---------------------------------------------------------------------------


def test_seed_usage_round_trip(store: CheckpointStore) -> None:
    state = parked()
    seq = store.save(state, run_id=RUN, created_at="2026-07-19T00:00:00Z")
    assert seq == 1
    assert store.load(CASE, RUN) == state
    assert store.history(CASE)[0].created_at == "2026-07-19T00:00:00Z"


def test_latest_wins_and_runs_do_not_mix(store: CheckpointStore) -> None:
    seqs = [store.save(parked(step), RUN) for step in (1, 2, 3)]
    other = store.save(parked(9), "run-2")
    assert seqs == [1, 2, 3] and other == 4
    assert store.load(CASE, RUN).step == 3
    assert store.load(CASE, "run-2").step == 9
    assert [r.seq for r in store.history(CASE, RUN)] == [1, 2, 3]
    assert [(r.seq, r.run_id) for r in store.history(CASE)][-1] == (4, "run-2")
    assert [r.state().step for r in store.history(CASE)] == [1, 2, 3, 9]


def test_created_at_defaults_to_clock_in_utc(db: Path) -> None:
    with CheckpointStore(db, clock=FakeClock(EPOCH_2026_07_19 + 1.5)) as store:
        store.save(parked(), RUN)
        assert store.history(CASE)[0].created_at == "2026-07-19T00:00:01.500Z"


def test_not_found_and_find_none(store: CheckpointStore, db: Path) -> None:
    store.save(parked(), RUN)
    assert store.find(CASE, "run-9") is None
    with pytest.raises(CheckpointNotFound) as info:
        store.load(CASE, "run-9")
    assert str(db) in str(info.value) and "run-9" in str(info.value)
    assert info.value.fields["run_id"] == "run-9"


def test_save_refuses_a_state_that_would_not_load_back(store: CheckpointStore) -> None:
    bad = parked()
    bad.phase = "bogus"
    with pytest.raises(StateInvalid, match="phase"):
        store.save(bad, RUN)
    assert store.history(CASE) == []


def test_wal_mode_and_closed_store(db: Path) -> None:
    store = CheckpointStore(db)
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        store.save(parked(), RUN)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


def test_read_history_is_read_only(store: CheckpointStore, db: Path, tmp_path: Path) -> None:
    store.save(parked(), RUN)
    rows = read_history(db, CASE, RUN)
    assert rows == store.history(CASE, RUN) and rows[0].db_path == str(db)
    missing = tmp_path / "nope.db"
    with pytest.raises(FileNotFoundError):
        read_history(missing, CASE)
    assert not missing.exists()


def test_read_latest_is_the_last_row_of_the_history_read_only(
        store: CheckpointStore, db: Path, tmp_path: Path) -> None:
    """``read_latest`` is ``read_history``'s last row (every run of the case), skipping the
    seqs asked, without writing or leaving a file; a file that is not ours is refused
    unread, as ``read_history`` refuses it."""
    assert read_latest(db, CASE) is None  # the store's file, no row yet
    for step in (1, 2):
        store.save(parked(step), RUN)
    store.save(parked(7), "run-2")
    other = insert_raw(db, 2, b"{}", case_id="case-O-9999")  # another case's row is later
    before = db.read_bytes()
    history = read_history(db, CASE)
    latest = read_latest(db, CASE)
    assert latest == history[-1] and latest.seq == 3 and latest.run_id == "run-2"
    assert latest.db_path == str(db) and latest.state().step == 7
    assert read_latest(db, CASE, {3}) == history[1]
    assert read_latest(db, CASE, {3, 2, 1}) is None
    assert read_latest(db, "case-O-9999").seq == other
    assert read_latest(db, "case-O-0000") is None
    assert db.read_bytes() == before
    missing = tmp_path / "nope.db"
    with pytest.raises(FileNotFoundError):
        read_latest(missing, CASE)
    assert not missing.exists()
    foreign = tmp_path / "foreign.db"
    with contextlib.closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE checkpoints (seq INTEGER, case_id TEXT)")
        conn.execute("INSERT INTO checkpoints VALUES (1, ?)", (CASE,))
        conn.commit()
    body = foreign.read_bytes()
    with pytest.raises(NotACheckpointDatabase):
        read_latest(foreign, CASE)
    assert foreign.read_bytes() == body
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("foreign")) == [
        "foreign.db"]


# --- busy timeout: concurrent writers wait -------------------------------------------------


def _hold_lock(db: Path, locked: threading.Event, until: threading.Event | None,
               times: dict[str, float]) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        times["locked"] = time.monotonic()
        locked.set()
        if until is None:
            time.sleep(HOLD_S)  # the hold itself, not a synchronisation
        else:
            until.wait(10)
        times["released"] = time.monotonic()
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_save_waits_for_a_locked_database(db: Path) -> None:
    with CheckpointStore(db, busy_timeout_s=5.0) as store:
        locked, times = threading.Event(), dict[str, float]()
        holder = threading.Thread(target=_hold_lock, args=(db, locked, None, times))
        holder.start()
        try:
            assert locked.wait(10)
            seq = store.save(parked(), RUN)
            done = time.monotonic()
        finally:
            holder.join(10)
        assert seq == 1 and store.load(CASE, RUN) == parked()
        assert done >= times["released"] and done - times["locked"] >= HOLD_S


def test_short_busy_timeout_raises_locked(db: Path) -> None:
    with CheckpointStore(db, busy_timeout_s=0.05) as store:
        locked, release, times = threading.Event(), threading.Event(), dict[str, float]()
        holder = threading.Thread(target=_hold_lock, args=(db, locked, release, times))
        holder.start()
        try:
            assert locked.wait(10)
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                store.save(parked(), RUN)
        finally:
            release.set()
            holder.join(10)
        assert store.history(CASE) == []
        assert store.save(parked(), RUN) == 1  # no transaction left dangling


# --- exercise 1: corrupt rows fail closed ----------------------------------------------


def _blob(**changes: Any) -> bytes:
    data = parked().to_dict()
    for key, value in changes.items():
        if value is KeyError:
            del data[key]
        else:
            data[key] = value
    return json.dumps(data).encode()


def _v1_blob() -> bytes:
    data = parked().to_dict()
    del data["preferred_channel"]
    data["schema_version"] = 1
    return json.dumps(data).encode()


GOOD = parked().to_json().encode()
CORRUPTIONS = [
    pytest.param(2, GOOD[:-20], CheckpointCorrupt, {"field": "state_json"}, "not valid JSON",
                 id="truncated-json"),
    pytest.param(2, b'{"case_id": "case-O-1001", "x": "\xff\xfe"}', CheckpointCorrupt,
                 {"reason": "invalid utf-8"}, "not valid UTF-8", id="invalid-utf8"),
    pytest.param(2, b"[]", CheckpointCorrupt, {"reason": "not an object"}, "JSON object",
                 id="not-an-object"),
    pytest.param(2, b"42", CheckpointCorrupt, {"field": "state_json"}, "got int",
                 id="json-number"),
    pytest.param(2, _blob(draft=KeyError), CheckpointCorrupt, {"field": "draft"},
                 "missing state field(s): draft", id="missing-field"),
    pytest.param(2, _blob(step="4"), CheckpointCorrupt, {"field": "step"}, "'step' must be int",
                 id="mistyped-field"),
    pytest.param(2, None, CheckpointCorrupt, {"field": "state_json"}, "state_json is NULL",
                 id="null-state-json"),
    pytest.param(None, GOOD, UnsupportedSchemaVersion, {"version": None},
                 "schema_version None", id="null-schema-version"),
    pytest.param(7, GOOD, UnsupportedSchemaVersion, {"version": 7}, "schema_version 7",
                 id="version-7"),
    pytest.param(2, _blob(case_id="case-O-9999"), CheckpointCorrupt,
                 {"field": "case_id", "reason": "mismatch"}, "'case-O-9999' disagrees",
                 id="case-id-mismatch"),
    pytest.param(2, _v1_blob(), CheckpointCorrupt, {"field": "schema_version"},
                 "schema_version 1 disagrees", id="version-mismatch"),
    pytest.param(1, _v1_blob(), UnsupportedSchemaVersion, {"version": 1}, "shopops migrate",
                 id="v1-needs-migration"),
]


@pytest.mark.parametrize(("version", "blob", "error", "fields", "text"), CORRUPTIONS)
def test_corrupt_latest_row_raises_and_is_left_untouched(
    store: CheckpointStore, db: Path, version: int | None, blob: bytes | None,
    error: type[Exception], fields: dict[str, Any], text: str,
) -> None:
    store.save(parked(), RUN)  # a good older row must not be used as a fallback
    seq = insert_raw(db, version, blob)
    before = raw_rows(db)
    for attempt in (store.load, store.find, lambda c, r: store.history(c, r)[-1].state()):
        with pytest.raises(error) as info:
            attempt(CASE, RUN)
        message = str(info.value)
        assert text in message
        assert all(part in message for part in (str(db), repr(CASE), repr(RUN), f"seq={seq}"))
        got = info.value.fields  # type: ignore[attr-defined]
        assert got["seq"] == seq and got["path"] == str(db)
        for key, value in fields.items():
            assert got[key] == value
    assert raw_rows(db) == before  # byte for byte, SQL type included
    assert [r.seq for r in read_history(db, CASE, RUN)] == [1, seq]
    assert read_history(db, CASE, RUN)[-1].state_json == blob


def test_v1_message_names_the_command_with_the_db_path(store: CheckpointStore, db: Path) -> None:
    insert_raw(db, 1, _v1_blob())
    with pytest.raises(UnsupportedSchemaVersion, match=f"shopops migrate {db}"):
        store.load(CASE, RUN)


# --- append-only -----------------------------------------------------------------------


def test_triggers_refuse_update_and_delete(store: CheckpointStore, db: Path) -> None:
    store.save(parked(), RUN)
    before = raw_rows(db)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only: UPDATE refused"):
            conn.execute("UPDATE checkpoints SET state_json = '{}'")
        with pytest.raises(sqlite3.IntegrityError, match="append-only: DELETE refused"):
            conn.execute("DELETE FROM checkpoints")
    finally:
        conn.close()
    assert raw_rows(db) == before


# --- exercise 2: explicit v1 -> v2 migration -------------------------------------------


@pytest.fixture
def v1_db(tmp_path: Path) -> Path:
    copy = tmp_path / "v1_parked.db"
    shutil.copyfile(V1_FIXTURE, copy)
    return copy


def _v1_dicts(db: Path) -> list[dict[str, Any]]:
    return [json.loads(row[5]) for row in raw_rows(db)]


def test_fixture_is_v1_and_parked(v1_db: Path) -> None:
    rows = raw_rows(v1_db)
    assert len(rows) == 3 and {(r[1], r[2], r[3]) for r in rows} == {(CASE, RUN, 1)}
    last = _v1_dicts(v1_db)[-1]
    assert last["phase"] == "awaiting_approval" and last["draft"]["body"]
    assert all("preferred_channel" not in d and d["schema_version"] == 1
               for d in _v1_dicts(v1_db))


def test_fixture_generator_is_deterministic(tmp_path: Path) -> None:
    build = runpy.run_path(str(FIXTURES / "make_v1_fixture.py"))["build"]
    first, second = build(tmp_path / "a.db"), build(tmp_path / "b.db")
    dumps = []
    for path in (first, second, V1_FIXTURE):
        conn = sqlite3.connect(path)
        try:
            dumps.append(list(conn.iterdump()))
        finally:
            conn.close()
    assert first.read_bytes() == second.read_bytes()
    assert dumps[0] == dumps[2], "fixtures/v1_parked.db is stale: rerun make_v1_fixture.py"


def test_load_never_migrates_implicitly(v1_db: Path) -> None:
    before = raw_rows(v1_db)
    with CheckpointStore(v1_db) as store:
        with pytest.raises(UnsupportedSchemaVersion, match="v1->v2 migration") as info:
            store.load(CASE, RUN)
        assert info.value.fields["version"] == 1 and info.value.fields["seq"] == 3
    assert raw_rows(v1_db) == before


def test_migrate_v1_to_v2(v1_db: Path) -> None:
    v1 = _v1_dicts(v1_db)
    with CheckpointStore(v1_db, clock=FakeClock()) as store:
        assert store.migrate_v1_to_v2() == 3
        state = store.load(CASE, RUN)
        assert state.preferred_channel == "email" and state.schema_version == 2
        assert state.draft == Draft(**v1[-1]["draft"])
        assert (state.phase, state.step) == ("awaiting_approval", 4)
        assert store.migrate_v1_to_v2() == 0
    rows = raw_rows(v1_db)
    assert [r[3] for r in rows] == [2, 2, 2]
    for old, new in zip(v1, _v1_dicts(v1_db), strict=True):
        assert new == {**old, "preferred_channel": "email", "schema_version": 2,
                       "recovery_attempts": 0, "dead_letter_reason": None,
                       "draft_revision": 0, "review_feedback": [], **NOTE_FIELDS}
    conn = sqlite3.connect(v1_db)
    try:
        record = conn.execute('SELECT name, applied_at, "rows" FROM schema_migrations').fetchall()
        assert record == [("v1_to_v2_preferred_channel", "2026-07-19T00:00:00.000Z", 3)]
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE checkpoints SET schema_version = 1")
    finally:
        conn.close()


def test_corrupt_v1_row_stops_the_migration(v1_db: Path) -> None:
    seq = insert_raw(v1_db, 1, _v1_blob()[:-5])
    before = raw_rows(v1_db)
    with CheckpointStore(v1_db) as store:
        with pytest.raises(CheckpointCorrupt, match=f"seq={seq}") as info:
            store.migrate_v1_to_v2()
        assert info.value.fields["seq"] == seq
    assert raw_rows(v1_db) == before
    conn = sqlite3.connect(v1_db)
    try:
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone() == (0,)
    finally:
        conn.close()


# --- exercise 4: leases and fencing ------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def leased(db: Path, clock: FakeClock) -> Any:
    with CheckpointStore(db, clock=clock) as s:
        yield s


def test_other_owner_refused_while_live(leased: CheckpointStore, clock: FakeClock) -> None:
    a = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    assert a == Lease(CASE, "worker-a", 1, clock.now + 30)
    clock.now += 29.999
    with pytest.raises(LeaseHeld) as info:
        leased.acquire_lease(CASE, "worker-b", ttl_s=30)
    err = info.value
    assert err.fields | {"path": None} == {
        "path": None, "case_id": CASE, "owner": "worker-b", "holder": "worker-a",
        "expires_at": a.expires_at}
    assert "worker-a" in str(err) and CASE in str(err)
    assert leased.current_lease(CASE) == a


def test_same_owner_extends_with_same_fence(leased: CheckpointStore, clock: FakeClock) -> None:
    leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    clock.now += 10
    again = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    assert (again.fence, again.expires_at) == (1, clock.now + 30)


def test_the_same_owner_after_expiry_gets_a_new_fence(leased: CheckpointStore,
                                                      clock: FakeClock) -> None:
    stale = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    leased.save(parked(1), RUN, lease=stale)
    clock.now = stale.expires_at  # expired: a restarted worker-a takes the case again
    fresh = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    assert (fresh.owner, fresh.fence) == ("worker-a", 2)
    with pytest.raises(FencedOff) as info:  # the old process of that name is fenced off
        leased.save(parked(2), RUN, lease=stale)
    assert (info.value.fields["fence"], info.value.fields["current_fence"]) == (1, 2)
    leased.save(parked(3), RUN, lease=fresh)
    assert [(r.lease_owner, r.fence) for r in leased.history(CASE)] == [
        ("worker-a", 1), ("worker-a", 2)]


def test_the_same_owner_after_release_gets_a_new_fence(leased: CheckpointStore) -> None:
    a = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    leased.release_lease(a)
    assert leased.acquire_lease(CASE, "worker-a", ttl_s=30).fence == 2


def test_each_row_records_the_pid_that_wrote_it(leased: CheckpointStore) -> None:
    leased.save(parked(1), RUN)
    assert [r.writer_pid for r in leased.history(CASE)] == [os.getpid()]


def test_a_database_without_the_writer_column_is_read_and_upgraded(db: Path) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE checkpoints(seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                     " case_id TEXT NOT NULL, run_id TEXT NOT NULL, schema_version INTEGER,"
                     " state_json TEXT, created_at TEXT NOT NULL, lease_owner TEXT,"
                     " fence INTEGER)")
        conn.execute("INSERT INTO checkpoints(case_id, run_id, schema_version, state_json,"
                     " created_at) VALUES (?, ?, 2, ?, 't')", (CASE, RUN, parked(1).to_json()))
    assert [r.writer_pid for r in read_history(db, CASE)] == [None]
    with CheckpointStore(db) as store:
        store.save(parked(2), RUN)
        assert [r.writer_pid for r in store.history(CASE)] == [None, os.getpid()]


def test_takeover_after_expiry_bumps_fence(leased: CheckpointStore, clock: FakeClock) -> None:
    a = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    clock.now = a.expires_at  # expires_at > now is live; at expires_at it is over
    assert leased.current_lease(CASE) is None
    assert leased.current_lease(CASE, include_expired=True) == a
    b = leased.acquire_lease(CASE, "worker-b", ttl_s=30)
    assert b.fence == 2 and leased.current_lease(CASE) == b


def test_save_with_taken_over_lease_is_fenced_off(
    leased: CheckpointStore, clock: FakeClock, db: Path
) -> None:
    a = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    leased.save(parked(1), RUN, lease=a)
    clock.now += 60
    b = leased.acquire_lease(CASE, "worker-b", ttl_s=30)
    before = raw_rows(db)
    with pytest.raises(FencedOff) as info:
        leased.save(parked(2), RUN, lease=a)
    got = info.value.fields
    assert (got["owner"], got["fence"], got["current_fence"]) == ("worker-a", 1, 2)
    assert str(db) in str(info.value) and "worker-b" in str(info.value)
    assert raw_rows(db) == before
    leased.save(parked(3), RUN, lease=b)
    assert [(r.lease_owner, r.fence) for r in leased.history(CASE)] == [
        ("worker-a", 1), ("worker-b", 2)]
    assert leased.load(CASE, RUN).step == 3


def test_renew_own_lease_but_not_a_taken_over_one(
    leased: CheckpointStore, clock: FakeClock
) -> None:
    a = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    clock.now += 20
    a2 = leased.renew_lease(a, ttl_s=30)
    assert (a2.fence, a2.expires_at) == (1, clock.now + 30)
    clock.now += 31
    leased.acquire_lease(CASE, "worker-b", ttl_s=30)
    with pytest.raises(FencedOff):
        leased.renew_lease(a2, ttl_s=30)


def test_release_lets_the_next_owner_in_with_a_higher_fence(leased: CheckpointStore) -> None:
    a = leased.acquire_lease(CASE, "worker-a", ttl_s=30)
    assert leased.release_lease(a) is True
    assert leased.current_lease(CASE) is None
    b = leased.acquire_lease(CASE, "worker-b", ttl_s=30)
    assert b.fence == 2
    assert leased.release_lease(a) is False
    assert leased.current_lease(CASE) == b


def test_checkpoint_row_is_frozen() -> None:
    row = CheckpointRow(1, CASE, RUN, 2, GOOD, "t", None, None)
    with pytest.raises(AttributeError):
        row.seq = 2  # type: ignore[misc]
    assert row.state() == parked()


def test_a_migrator_waits_for_another_writer_of_a_v1_database(v1_db: Path) -> None:
    """Two migrators of a v1 (rollback-journal) database together: SQLite refuses the
    switch to WAL at once, without the busy handler, while the other holds its write lock.
    The second migrator must wait (up to its busy timeout), not fail "database is locked"
    (``migrators-together[no-kill]`` came out unknown so, in a busy run)."""
    other = sqlite3.connect(v1_db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # the first migrator, inside its write
    waiting = threading.Event()
    released = threading.Event()

    def release() -> None:
        waiting.wait(60)
        time.sleep(0.2)  # let the migrator meet the lock at least once
        other.execute("COMMIT")
        released.set()

    helper = threading.Thread(target=release)
    helper.start()
    try:
        store = CheckpointStore(v1_db, busy_timeout_s=60)
        waiting.set()
        assert store.migrate_v1_to_v2() == 3
        assert released.is_set()
        store.close()
    finally:
        waiting.set()
        helper.join(60)
        other.close()
