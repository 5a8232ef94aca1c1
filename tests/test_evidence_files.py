"""The evidence readers fail closed on whatever a worker can put in place of a database
(issue 14's rule for the harness's own reading): each is a ``Gap`` with its reason, never a
harness error, never a hang, never "nothing was written"."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from harness.judge.evidence import read_approvals, read_checkpoints, read_gateway
from harness.model.kinds import EvidenceSource


def _garbage(p: Path) -> None:
    p.write_bytes(b"not SQLite at all " * 300)


def _folder(p: Path) -> None:
    p.mkdir()


def _loop(p: Path) -> None:
    os.symlink(p.name, p)


def _to_a_file(p: Path) -> None:
    os.symlink("/etc/passwd", p)


def _fifo(p: Path) -> None:
    os.mkfifo(p)


PLANTED: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbage": (_garbage, ""), "folder": (_folder, "is a folder"),
    "symlink-loop": (_loop, "is a symlink"), "symlink": (_to_a_file, "is a symlink"),
    "fifo": (_fifo, "is a FIFO"),
}
READERS = {
    "checkpoints.db": (lambda p: read_checkpoints(p, "case-O-1001")[1],
                       EvidenceSource.CHECKPOINTS),
    "approvals.db": (lambda p: read_approvals(p, "case-O-1001")[-1], EvidenceSource.APPROVALS),
    "gateway.db": (lambda p: read_gateway(p)[-1], EvidenceSource.GATEWAY),
}


@pytest.mark.parametrize("planted", list(PLANTED))
@pytest.mark.parametrize("name", list(READERS))
def test_a_planted_file_is_a_gap_with_its_reason(name: str, planted: str,
                                                 tmp_path: Path) -> None:
    make, reason = PLANTED[planted]
    read, source = READERS[name]
    db = tmp_path / name
    make(db)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(read(db)), daemon=True)
    reader.start()
    reader.join(timeout=30)  # a FIFO opened for reading would block until a writer came
    assert not reader.is_alive(), f"reading a planted {planted} {name} hangs the harness"
    (gap,) = got
    assert gap is not None, f"a planted {planted} {name} read as nothing written"
    assert gap.source is source and str(db) in gap.reason and reason in gap.reason, gap


def _collect(tmp_path: Path, hits: tuple[str, ...]) -> object:
    from harness.judge.evidence import EventLog
    from harness.model import CrashSchedule, EventKind, ExecutionPlan
    from harness.model.story import StoryRecord
    from harness.plan.scenario import load_scenario
    from harness.run.execution import collect
    from harness.story.controller import KillController

    root = Path(__file__).resolve().parent.parent
    plan = ExecutionPlan(load_scenario(root / "scenarios" / "o1001.toml"), CrashSchedule())
    events = EventLog()
    for label in hits:
        events.add(EventKind.HIT, label, 4242, 0)
    record = StoryRecord(
        steps=(), workers=(), errors=(), approval_event=None, checkpoint_seq_at_approval=None,
        injected=(), v1_rows=0, checkpoints_db=tmp_path / "checkpoints.db",
        approvals_db=tmp_path / "approvals.db", gateway_db=tmp_path / "gateway.db",
        workdir=tmp_path)
    return collect(plan, record, KillController((), events), events, tmp_path)


def test_a_checkpoint_file_gone_after_a_committed_checkpoint_is_a_gap(tmp_path: Path) -> None:
    """Found by a hostile implementation: a worker that replaced its database with a FIFO
    (swept from the sandbox) or deleted it got full marks on checks over an empty history.
    The harness's own trace says a checkpoint was committed: the missing file is a gap."""
    evidence = _collect(tmp_path, ("t0.case_started", "t3.checkpoint_saved"))
    (gap,) = [g for g in evidence.gaps if g.source is EvidenceSource.CHECKPOINTS]
    assert "is gone although a worker reached t3.checkpoint_saved" in gap.reason


def test_a_checkpoint_file_never_written_is_no_gap(tmp_path: Path) -> None:
    evidence = _collect(tmp_path, ("t0.case_started", "t1.get_customer"))
    assert not [g for g in evidence.gaps if g.source is EvidenceSource.CHECKPOINTS]


def test_a_database_created_but_killed_before_its_schema_is_an_empty_history(
        tmp_path: Path) -> None:
    """A worker killed after SQLite created its file and before its schema was committed
    (found with ``--timeout 0.01``: the reference failed ``draft_identical`` with "has no
    table checkpoints"): nothing was written, as with no file; a database whose schema
    has other tables but no ``checkpoints`` still fails the contract."""
    db = tmp_path / "checkpoints.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")  # the file exists, no table yet
    assert db.stat().st_size > 0
    assert read_checkpoints(db, "case-O-1001") == ((), None, None)
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE other(x)")
        conn.commit()
    rows, gap, unfit = read_checkpoints(db, "case-O-1001")
    assert rows == () and gap is None and unfit is not None and "no table" in unfit
