"""The harness reads a bounded checkpoint history (``shopops_contract.limits.MAX_HISTORY_ROWS``): an
implementation that writes tens of thousands of rows makes the history a gap, not a
grade that runs for minutes at gigabytes."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from harness.judge import evidence
from harness.judge.observers import store
from harness.model import EvidenceSource
from shopops.checkpoint import CheckpointStore, read_history
from shopops.errors import HistoryTooLong
from shopops.state import State

pytestmark = pytest.mark.io


def history(tmp_path: Path, extra: int) -> Path:
    """A checkpoint file with one real row for ``case-1`` and ``extra`` copies of it."""
    db = tmp_path / "checkpoints.db"
    store = CheckpointStore(db)
    store.save(State(case_id="case-1", order_id="O-1001"), run_id="r1")
    store.close()
    with closing(sqlite3.connect(db)) as conn:
        conn.executemany("INSERT INTO checkpoints(case_id, run_id, schema_version, "
                         "state_json, created_at) SELECT case_id, run_id, schema_version, "
                         "state_json, created_at FROM checkpoints WHERE seq = 1",
                         [()] * extra)
        conn.commit()
    return db


def test_a_history_over_the_bound_is_a_gap_and_nothing_is_decoded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "MAX_HISTORY_ROWS", 5)
    db = history(tmp_path, 5)
    rows, gap, unfit = evidence.read_checkpoints(db, "case-1")
    assert rows == () and unfit is None
    assert gap is not None and gap.source is EvidenceSource.CHECKPOINTS
    assert "6 rows for case case-1, more than the 5" in gap.reason
    with pytest.raises(HistoryTooLong):
        read_history(db, "case-1", max_rows=5)  # the reference's own reader bounds it too
    with pytest.raises(store.HistoryTooLong):
        store.read_rows(db, "case-1", max_rows=5)


def test_a_history_within_the_bound_is_read_whole(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "MAX_HISTORY_ROWS", 5)
    rows, gap, _ = evidence.read_checkpoints(history(tmp_path, 4), "case-1")
    assert gap is None and len(rows) == 5


def test_the_lease_record_is_read_from_the_leases_table_only_as_the_contract_says(
        tmp_path: Path) -> None:
    """``store.lease_of``: the reference's ``leases`` row, stamped with the read time; no
    file, no table, no row, or a row of other types is no record (not judged), never an
    error — a worker may be writing the file meanwhile."""
    db = tmp_path / "checkpoints.db"
    assert store.lease_of(db, "c", 5.0) is None  # no file
    with closing(sqlite3.connect(db)) as c:
        c.execute("CREATE TABLE case_leases(case_id TEXT, holder TEXT)")  # a table of its own
        c.commit()
    assert store.lease_of(db, "c", 5.0) is None
    with closing(sqlite3.connect(db)) as c:
        c.execute("CREATE TABLE leases(case_id TEXT PRIMARY KEY, owner TEXT, fence INTEGER, "
                  "expires_at REAL)")
        c.execute("INSERT INTO leases VALUES ('c', 'worker-1', 2, 30.0)")
        c.execute("INSERT INTO leases VALUES ('d', 'worker-1', 'two', 30.0)")
        c.commit()
    seen = store.lease_of(db, "c", 5.0)
    assert seen is not None and (seen.owner, seen.fence, seen.live) == ("worker-1", 2, True)
    assert seen.line() == "owner worker-1 fence 2, live for 25.0 s"
    assert store.lease_of(db, "c", 31.0).live is False  # type: ignore[union-attr]
    assert store.lease_of(db, "d", 5.0) is None  # a fence that is not an integer
    assert store.lease_of(db, "e", 5.0) is None  # no row for the case


@pytest.mark.parametrize("folder", ["a b#c?d%e", "é-ü", "plain"])
def test_a_history_is_read_from_a_folder_of_any_name_and_through_a_symlinked_folder(
        tmp_path: Path, folder: str) -> None:
    """``store.open_readonly`` builds its SQLite URI from the path's bytes, quoted as
    ``Path.as_uri`` quotes them (a ``#``, ``?`` or ``%`` in a folder's name is not the
    URI's), and reads a WAL database's committed rows through a symlinked folder."""
    home = tmp_path / folder
    home.mkdir()
    db = history(home, 2)
    assert len(store.read_rows(db, "case-1")) == 3
    with closing(sqlite3.connect(db)) as conn:  # an open writer in WAL mode: rows in -wal
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("INSERT INTO checkpoints(case_id, run_id, schema_version, state_json, "
                     "created_at) SELECT case_id, run_id, schema_version, state_json, "
                     "created_at FROM checkpoints WHERE seq = 1")
        conn.commit()
        assert Path(f"{db}-wal").exists()
        link = tmp_path / "link"
        link.symlink_to(home, target_is_directory=True)
        assert len(store.read_rows(link / db.name, "case-1")) == 4
        row = store.latest_row(link / db.name, "case-1")
        assert row is not None and row.seq == 4
