"""``checkpoint_file.inspect`` accepts a database whose ``sqlite_master`` is exactly what our
code creates without comparing its layout pragma by pragma; anything else still gets the
full comparison. The databases the loop, the approval service and the gateway create take
the fast path, and a file one object away from ours is still refused."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from harness.services.approvals import SERVICE_QUEUE, ApprovalService
from harness.services.gateway import GATEWAY_LOG, MockGateway
from shopops import checkpoint_file as cf
from shopops.approval_store import APPROVAL_QUEUE, SqliteStore
from shopops.checkpoint import CHECKPOINT_DB, CheckpointStore
from shopops.errors import CheckpointNotFound, NotOurDatabase

MAKERS = {
    "checkpoints": (CHECKPOINT_DB, lambda p: CheckpointStore(p).close()),
    "queue": (APPROVAL_QUEUE, lambda p: SqliteStore(p).close()),
    "service": (SERVICE_QUEUE, lambda p: ApprovalService(p).close()),
    "gateway": (GATEWAY_LOG, lambda p: MockGateway(p)),
}


def _master(path: Path) -> tuple[tuple[object, ...], ...]:
    with contextlib.closing(cf.open_readonly(path)) as conn:
        return tuple(conn.execute(cf._MASTER_SQL))


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_a_database_our_code_creates_takes_the_fast_path(name: str, tmp_path: Path,
                                                          monkeypatch) -> None:
    ours, make = MAKERS[name]
    db = tmp_path / "x.db"
    make(db)
    assert _master(db) == cf._master_of(ours.schema)
    monkeypatch.setattr(cf, "_read_layout", lambda conn: pytest.fail("layout compared"))
    assert cf.inspect(db, ours, create=False) is cf.FileState.OURS


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_one_object_more_than_ours_is_compared_in_full_and_refused(name: str,
                                                                  tmp_path: Path) -> None:
    ours, make = MAKERS[name]
    db = tmp_path / "x.db"
    make(db)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE extra (x)")
        conn.commit()
    with pytest.raises(NotOurDatabase, match="tables that are not ours: extra"):
        cf.inspect(db, ours, create=False)


def test_a_primed_process_inspects_without_running_the_schema_again(tmp_path: Path) -> None:
    """``prime`` (what the fork server does before any fork) leaves nothing for a child's
    first ``inspect`` to build: neither the fast path's ``sqlite_master`` nor the full
    comparison's layout is computed again, and the verdicts are unchanged."""
    cf.prime(CHECKPOINT_DB, APPROVAL_QUEUE)
    ours, foreign = tmp_path / "c.db", tmp_path / "f.db"
    CheckpointStore(ours).close()
    with contextlib.closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE checkpoints (seq INTEGER)")
    before = (cf._master_of.cache_info().misses, cf._layout_of.cache_info().misses)
    assert cf.inspect(ours, CHECKPOINT_DB, create=False) is cf.FileState.OURS
    with pytest.raises(NotOurDatabase):
        cf.inspect(foreign, CHECKPOINT_DB, create=False)  # compared in full: the layout
    assert (cf._master_of.cache_info().misses, cf._layout_of.cache_info().misses) == before


def test_inspected_reads_through_the_connection_it_judged(tmp_path: Path) -> None:
    """``inspected`` refuses what ``inspect`` refuses (nothing read, nothing left), and
    otherwise hands over the read-only connection it inspected, closed on exit."""
    db, foreign = tmp_path / "c.db", tmp_path / "f.db"
    CheckpointStore(db).close()
    before = sorted(p.name for p in tmp_path.iterdir())
    with cf.inspected(db, CHECKPOINT_DB) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone() == (0,)
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("INSERT INTO checkpoints (case_id) VALUES ('x')")
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")  # closed
    with contextlib.closing(sqlite3.connect(foreign)) as other:
        other.execute("CREATE TABLE checkpoints (seq INTEGER)")
    body = foreign.read_bytes()
    for path, error in ((foreign, NotOurDatabase), (tmp_path, NotOurDatabase),
                        (tmp_path / "missing.db", CheckpointNotFound)):
        with pytest.raises(error):
            with cf.inspected(path, CHECKPOINT_DB):
                raise AssertionError("read a file that is not ours")
    assert foreign.read_bytes() == body
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["f.db"])
