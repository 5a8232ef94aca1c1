"""The scratch area (``harness.sandbox.scratch``): executions run on a RAM-backed folder and their
files end up in the run's folder; nothing is left in the scratch area; areas of dead
harness processes are pruned; ``SHOPOPS_SCRATCH`` is validated."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.model import CrashSchedule, ExecutionPlan
from harness.plan.scenario import load_scenario
from harness.run.execution import execute
from harness.sandbox import scratch
from shopops.errors import ConfigError
from shopops.validators import check_environment

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh_area(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """``SHOPOPS_SCRATCH`` set to a folder of the test's own, and no area yet."""
    root = tmp_path / "scratch-root"
    root.mkdir()
    monkeypatch.setenv(scratch.ENV, str(root))
    monkeypatch.setattr(scratch, "_area", None)
    return root


def test_in_scratch_gives_a_new_folder_and_move_home_brings_every_file(
        fresh_area: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = scratch.in_scratch(home)
    assert work != home and fresh_area in work.parents and work.name == home.name
    (work / "a.db").write_bytes(b"x" * 10)
    (work / "sub").mkdir()
    (work / "sub" / "out.txt").write_text("hello")
    scratch.move_home(work, home)
    assert (home / "a.db").read_bytes() == b"x" * 10
    assert (home / "sub" / "out.txt").read_text() == "hello"
    assert not work.exists() and list(fresh_area.glob("*/*")) == []


def test_a_home_with_files_or_scratch_off_runs_in_place(
        fresh_area: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "older.txt").write_text("kept")
    assert scratch.in_scratch(home) == home
    (home / "older.txt").unlink()
    monkeypatch.setenv(scratch.ENV, "off")
    monkeypatch.setattr(scratch, "_area", None)
    assert scratch.area() is None
    assert scratch.in_scratch(home) == home
    scratch.move_home(home, home)  # the same folder: nothing moves, nothing is removed
    assert home.is_dir()


def test_a_bad_scratch_setting_is_refused_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setattr(scratch, "_area", None)
    monkeypatch.setenv(scratch.ENV, str(missing))
    with pytest.raises(ValueError, match="SHOPOPS_SCRATCH"):
        scratch.area()
    with pytest.raises(ConfigError, match="SHOPOPS_SCRATCH.*allowed: auto, off"):
        check_environment({scratch.ENV: str(missing)})
    for good in ("auto", "off", str(tmp_path)):
        check_environment({scratch.ENV: good})


def test_areas_of_dead_harness_processes_are_pruned(fresh_area: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = fresh_area / f"shopops-scratch-{int(dead.stdout)}-abc123"
    stale.mkdir()
    (stale / "left.db").write_text("from a harness killed with SIGKILL")
    other = fresh_area / "somebody-elses"
    other.mkdir()
    mine = scratch.area()
    assert mine is not None and mine.is_dir() and mine.parent == fresh_area
    assert not stale.exists()
    assert other.is_dir()  # not ours: left alone


def test_an_execution_runs_in_scratch_and_its_evidence_names_the_run_folder(
        fresh_area: Path, tmp_path: Path) -> None:
    plan = ExecutionPlan(load_scenario(ROOT / "scenarios" / "o1001.toml"),
                         CrashSchedule.parse("t6.gateway_accepted"))
    home = tmp_path / "run" / "e1"
    result = execute(plan, home)
    assert result.verdict == "pass", result.reasons
    assert result.evidence.workdir == str(home.resolve())
    names = {p.name for p in home.iterdir()}
    assert {"checkpoints.db", "approvals.db", "gateway.db"} <= names, names
    area = scratch.area()
    assert area is not None and list(area.iterdir()) == []  # nothing left behind
    # a run without --keep-all keeps no file of a passing execution, and no folder
    lean = execute(plan, tmp_path / "run" / "e2", keep_databases=False)
    assert lean.verdict == "pass" and len(lean.evidence.checkpoints) == len(
        result.evidence.checkpoints)  # the evidence was read before they went
    assert lean.evidence.workdir == "" and not (tmp_path / "run" / "e2").exists()
    assert [w.stdout_tail for w in lean.evidence.workers] == [
        w.stdout_tail for w in result.evidence.workers]  # the output tails are kept
    assert list(area.iterdir()) == []
    # a folder that already holds a file is run in, not in scratch, and nothing is removed
    (tmp_path / "run" / "e3").mkdir()
    (tmp_path / "run" / "e3" / "notes.txt").write_text("mine")
    kept = execute(plan, tmp_path / "run" / "e3", keep_databases=False)
    assert kept.evidence.workdir == str((tmp_path / "run" / "e3").resolve())
    assert (tmp_path / "run" / "e3" / "notes.txt").read_text() == "mine"


def test_discard_removes_the_scratch_folder_and_an_empty_home_only(fresh_area: Path,
                                                                   tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = scratch.in_scratch(home)
    (work / "c.db").write_text("c")
    assert scratch.discard(work, home, made=False) is True
    assert not home.exists() and list(fresh_area.glob("*/*")) == []
    home.mkdir()  # a file of someone else's arrives at home meanwhile: home stays
    work = scratch.in_scratch(home)
    (home / "notes").write_text("mine")
    assert scratch.discard(work, home, made=False) is False
    assert (home / "notes").read_text() == "mine" and list(fresh_area.glob("*/*")) == []
    # no scratch area: home is removed only when the execution made it
    assert scratch.discard(home, home, made=False) is False and (home / "notes").exists()
    assert scratch.discard(home, home, made=True) is True and not home.exists()


def test_without_a_scratch_area_a_passing_execution_keeps_no_folder_either(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user: with ``SHOPOPS_SCRATCH=off`` (or no tmpfs with room, as in a
    container with a small ``/dev/shm``) every passing execution kept its folder and
    worker output, unlike what ``run --help`` and the docs say."""
    monkeypatch.setenv(scratch.ENV, "off")
    monkeypatch.setattr(scratch, "_area", None)
    plan = ExecutionPlan(load_scenario(ROOT / "scenarios" / "o1001.toml"),
                         CrashSchedule.parse("t4.parked"))
    lean = execute(plan, tmp_path / "run" / "e1", keep_databases=False)
    assert lean.verdict == "pass" and lean.evidence.workdir == ""
    assert not (tmp_path / "run" / "e1").exists()
    kept = execute(plan, tmp_path / "run" / "e2")  # --keep-all
    assert kept.evidence.workdir == str((tmp_path / "run" / "e2").resolve())
    assert {"checkpoints.db", "worker-0.out"} <= {p.name for p in (tmp_path / "run" / "e2")
                                                  .iterdir()}


def test_the_story_errors_and_gaps_name_the_run_folder_not_the_scratch_area(
        tmp_path: Path) -> None:
    """``collect`` runs before the files move home: a story error or a gap that names one of
    them must name it where it stays (a scratch path is gone once the execution ends). And a
    checkpoint file a worker overwrote with garbage is a gap, not a harness error: reading its
    migrations raised ``sqlite3.DatabaseError`` and ended the whole run with exit 2."""
    from harness.judge.evidence import EventLog
    from harness.model.story import StoryRecord
    from harness.run.execution import collect
    from harness.story.controller import KillController

    work, home = tmp_path / "scratch" / "e1", tmp_path / "run" / "e1"
    work.mkdir(parents=True)
    (work / "checkpoints.db").write_bytes(b"not a database, certainly not SQLite")
    plan = ExecutionPlan(load_scenario(ROOT / "scenarios" / "o1001.toml"), CrashSchedule())
    events = EventLog()
    record = StoryRecord(
        steps=(), workers=(), errors=(f"the migrated checkpoint cannot be read: "
                                      f"{work / 'checkpoints.db'} is damaged",),
        approval_event=None, checkpoint_seq_at_approval=None, injected=(), v1_rows=0,
        checkpoints_db=work / "checkpoints.db", approvals_db=work / "approvals.db",
        gateway_db=work / "gateway.db", workdir=work)
    evidence = collect(plan, record, KillController((), events), events, home)
    texts = [*evidence.errors, *(g.reason for g in evidence.gaps)]
    assert len(evidence.errors) == 1 and evidence.gaps, texts
    assert all(str(home / "checkpoints.db") in t for t in texts[:2]), texts
    assert not any(str(work) in t for t in texts), texts


@pytest.mark.skipif(scratch.default_root() is None, reason="needs a tmpfs at /dev/shm")
def test_a_move_across_filesystems_keeps_content_mode_and_links(tmp_path: Path) -> None:
    """From the tmpfs to the test's folder (another filesystem here, so no rename): small
    files copied by hand, a large one and a symlink through ``shutil.move``; all keep what
    they were, and nothing stays behind."""
    shm = scratch.default_root()
    assert shm is not None
    outer = Path(tempfile.mkdtemp(prefix="shopops-test-move-", dir=shm))
    src = outer / "home"  # as in_scratch makes it: move_home removes its parent
    src.mkdir()
    try:
        home = tmp_path / "home"
        home.mkdir()
        if os.stat(src).st_dev == os.stat(home).st_dev:
            pytest.skip("the test folder is on the tmpfs too: a move is a rename")
        (src / "small.out").write_bytes(b"tail\n" * 100)
        os.chmod(src / "small.out", 0o640)
        (src / "empty.err").write_bytes(b"")
        big = os.urandom(scratch._SMALL + 7)
        (src / "big.db").write_bytes(big)
        os.symlink("small.out", src / "link")
        scratch.move_home(src, home)
        assert (home / "small.out").read_bytes() == b"tail\n" * 100
        assert stat.S_IMODE(os.stat(home / "small.out").st_mode) == 0o640
        assert (home / "empty.err").read_bytes() == b""
        assert (home / "big.db").read_bytes() == big
        assert os.readlink(home / "link") == "small.out"
        assert not outer.exists()
    finally:
        shutil.rmtree(outer, ignore_errors=True)
