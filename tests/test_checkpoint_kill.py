"""Real SIGKILLs in the middle of checkpoint writes (Chapter 8: "Test kill-resume in CI:
SIGKILL fixture mid-loop"; exercise 2: a migration killed half-way).

Each test runs a fresh interpreter with ``subprocess.Popen``, asserts its exit status
exactly, and reaps it in ``finally`` whatever happens.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from shopops.checkpoint import CheckpointStore
from shopops.errors import UnsupportedSchemaVersion
from shopops.state import State

CASE, RUN = "case-O-1001", "run-1"
REPO = Path(__file__).resolve().parent.parent
V1_FIXTURE = REPO / "fixtures" / "v1_parked.db"
TIMEOUT_S = 60

SAVE_A_THEN_B = """
import sys
from shopops.checkpoint import CheckpointStore
from shopops.state import State

with CheckpointStore(sys.argv[1]) as store:
    store.save(State(case_id="case-O-1001", order_id="O-1001", step=3), run_id="run-1",
               created_at="2026-07-19T00:00:00Z")
    print("saved A", flush=True)
    store.save(State(case_id="case-O-1001", order_id="O-1001", step=4), run_id="run-1",
               created_at="2026-07-19T00:00:01Z")
    print("saved B", flush=True)
"""

# Runs the real migration and SIGKILLs itself while upgrading row number argv[2]: every
# earlier row has already been UPDATEd (and the update trigger dropped) inside the
# uncommitted transaction.
MIGRATE_AND_DIE = """
import os, signal, sys
import shopops.checkpoint as ck

real, calls, kill_at = ck._upgrade_v1_state, [], int(sys.argv[2])

def upgrade_then_die(row):
    calls.append(row.seq)
    text = real(row)
    if len(calls) == kill_at:
        print("dying at seq", row.seq, "after updating", calls[:-1], flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return text

ck._upgrade_v1_state = upgrade_then_die
with ck.CheckpointStore(sys.argv[1]) as store:
    store.migrate_v1_to_v2()
print("migration committed", flush=True)
"""


def run_child(code: str, *args: object, failpoints: str | None = None) -> tuple[int, str, str]:
    """Run ``code`` in a fresh interpreter; return (returncode, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_FAILPOINT")}
    if failpoints is not None:
        env["SHOPOPS_FAILPOINTS"] = failpoints
    with subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return proc.returncode, out, err


def test_sigkill_before_commit_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    db = tmp_path / "shopops.db"
    rc, out, err = run_child(SAVE_A_THEN_B, db, failpoints="ckpt.before_commit=1*off->kill")
    assert rc == -signal.SIGKILL, (rc, out, err)
    assert out.splitlines() == ["saved A"], err
    with CheckpointStore(db) as store:
        assert store.load(CASE, RUN) == State(case_id=CASE, order_id="O-1001", step=3)
        rows = store.history(CASE)
        assert [(r.seq, r.created_at) for r in rows] == [(1, "2026-07-19T00:00:00Z")]
        assert store.save(State(case_id=CASE, order_id="O-1001", step=4), RUN) == 2
        assert store.load(CASE, RUN).step == 4


def test_unarmed_child_saves_both(tmp_path: Path) -> None:
    db = tmp_path / "shopops.db"
    rc, out, err = run_child(SAVE_A_THEN_B, db)
    assert rc == 0, err
    assert out.splitlines() == ["saved A", "saved B"]
    with CheckpointStore(db) as store:
        assert [r.seq for r in store.history(CASE)] == [1, 2]
        assert store.load(CASE, RUN).step == 4


def _versions(db: Path) -> list[tuple[int, int]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT schema_version, json_extract(state_json, '$.schema_version')"
            " FROM checkpoints ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("kill_at", [1, 3])
def test_migration_killed_half_way_leaves_all_v1(tmp_path: Path, kill_at: int) -> None:
    db = tmp_path / "v1_parked.db"
    shutil.copyfile(V1_FIXTURE, db)
    conn = sqlite3.connect(db)
    try:
        v1_rows = conn.execute("SELECT * FROM checkpoints ORDER BY seq").fetchall()
    finally:
        conn.close()

    rc, out, err = run_child(MIGRATE_AND_DIE, db, kill_at)
    assert rc == -signal.SIGKILL, (rc, out, err)
    assert out.startswith(f"dying at seq {kill_at} after updating"), (out, err)

    conn = sqlite3.connect(db, isolation_level=None)
    try:
        assert conn.execute("SELECT * FROM checkpoints ORDER BY seq").fetchall() == v1_rows
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone() == (0,)
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE checkpoints SET schema_version = 2")  # trigger is back
    finally:
        conn.close()
    assert _versions(db) == [(1, 1)] * 3

    with CheckpointStore(db) as store:
        with pytest.raises(UnsupportedSchemaVersion):
            store.load(CASE, RUN)
        assert store.migrate_v1_to_v2() == 3
        assert store.migrate_v1_to_v2() == 0
        assert store.load(CASE, RUN).preferred_channel == "email"
    assert _versions(db) == [(2, 2)] * 3
