"""The ``shopops`` CLI as real subprocesses (``python -m shopops``, cwd=tmp_path); the
argument errors argparse refuses before anything runs are checked in this process.

Exit statuses (``shopops.cli``): 0 success, 1 the system refused, 2 bad usage; a worker
SIGKILLed by a failpoint exits with exactly ``-signal.SIGKILL``. The gateway is a real mock
gateway started by the test; deliveries are read from its own log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from input_helpers import assert_refused, call

from harness.services.gateway import MockGateway, read_log

CASE = "case-O-1001"
TIMEOUT_S = 60.0
V1_FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "v1_parked.db"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        lines = self.out.splitlines()
        assert len(lines) == 1, self.out
        return json.loads(lines[0])


def shopops(cwd: Path, *args: str, **env: str) -> Ran:
    """Run ``python -m shopops ARGS`` in ``cwd``; the child is always reaped."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    full_env.update(env)
    proc = subprocess.Popen([sys.executable, "-m", "shopops", *args], cwd=cwd, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    return Ran(proc.returncode, out, err)


@pytest.fixture
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> MockGateway:
    gw = MockGateway(tmp_path / "gateway.db", port=0).start()
    request.addfinalizer(gw.stop)
    return gw


DB = ("--db", "shopops.db", "--approvals", "approvals.db")


def history(cwd: Path, *extra: str, db: str = "shopops.db") -> list[dict[str, Any]]:
    ran = shopops(cwd, "history", "--db", db, *extra)
    assert ran.code == 0, ran.err
    return [json.loads(line) for line in ran.out.splitlines()]


def test_run_parks(tmp_path: Path) -> None:
    ran = shopops(tmp_path, "run", *DB)
    assert ran.code == 0, ran.err
    assert ran.json() == {"stopped": "parked", "phase": "awaiting_approval", "step": 4,
                          "email_sent": False, "delivery_id": None, "idempotency_key": None}
    assert (tmp_path / "shopops.db").exists() and (tmp_path / "approvals.db").exists()


def test_approve_prints_the_ticket(tmp_path: Path) -> None:
    assert shopops(tmp_path, "run", *DB).code == 0
    ran = shopops(tmp_path, "approve", "--approvals", "approvals.db", "--approver", "maya")
    assert ran.code == 0, ran.err
    ticket = ran.json()
    assert (ticket["ticket_id"], ticket["case_id"]) == ("apr-desk-1", CASE)
    assert len(ticket["draft_digest"]) == 64
    again = shopops(tmp_path, "approve", "--approvals", "approvals.db")
    assert again.code == 1 and again.out == ""
    assert "ApprovalRefused: no pending approval request for case-O-1001" in again.err


def test_approve_with_a_given_ticket_id(tmp_path: Path) -> None:
    assert shopops(tmp_path, "run", *DB).code == 0
    ran = shopops(tmp_path, "approve", "--approvals", "approvals.db", "--ticket", "apr-desk-9")
    assert ran.code == 0 and ran.json()["ticket_id"] == "apr-desk-9"


def test_run_approve_resume_sends_exactly_once(tmp_path: Path, gateway: MockGateway) -> None:
    assert shopops(tmp_path, "run", *DB).json()["phase"] == "awaiting_approval"
    ticket = shopops(tmp_path, "approve", "--approvals", "approvals.db").json()["ticket_id"]
    ran = shopops(tmp_path, "resume", *DB, "--gateway", gateway.url)
    assert ran.code == 0, ran.err
    result = ran.json()
    assert (result["stopped"], result["phase"], result["email_sent"], result["step"]) == (
        "completed", "completed", True, 5)
    log = read_log(tmp_path / "gateway.db")
    [delivery] = log.deliveries
    assert delivery.idempotency_key == result["idempotency_key"]
    assert delivery.delivery_id == result["delivery_id"]
    assert delivery.case_id == CASE and delivery.to == "jordan.lee@example.com"
    phases = [json.loads(row["state_json"])["phase"] for row in history(tmp_path)]
    assert phases == ["drafting", "drafting", "awaiting_approval", "approved", "sending",
                      "completed"]
    assert ticket == "apr-desk-1"
    again = shopops(tmp_path, "resume", *DB, "--gateway", gateway.url)  # nothing left to do
    assert again.code == 0 and again.json()["stopped"] == "completed"
    assert len(read_log(tmp_path / "gateway.db").requests) == 1


def test_worker_killed_at_park_then_resumed_sends_once(tmp_path: Path,
                                                       gateway: MockGateway) -> None:
    killed = shopops(tmp_path, "run", *DB, "--gateway", gateway.url,
                     SHOPOPS_FAILPOINTS="t4.parked=kill")
    assert killed.code == -signal.SIGKILL
    assert killed.out == ""
    assert [json.loads(r["state_json"])["phase"] for r in history(tmp_path)][-1] == (
        "awaiting_approval")  # t3 committed before the kill
    assert shopops(tmp_path, "approve", "--approvals", "approvals.db").code == 0
    ran = shopops(tmp_path, "resume", *DB, "--gateway", gateway.url)
    assert ran.code == 0, ran.err
    assert ran.json()["email_sent"] is True
    assert len(read_log(tmp_path / "gateway.db").deliveries) == 1


def test_history_prints_json_lines(tmp_path: Path) -> None:
    assert shopops(tmp_path, "run", *DB).code == 0
    rows = history(tmp_path)
    assert len(rows) == 3
    assert all(set(row) == {"seq", "run_id", "schema_version", "created_at", "state_json"}
               for row in rows)
    assert [row["seq"] for row in rows] == sorted(row["seq"] for row in rows)
    assert {(row["run_id"], row["schema_version"]) for row in rows} == {("run-1", 2)}
    states = [json.loads(row["state_json"]) for row in rows]
    assert [(s["phase"], s["step"]) for s in states] == [
        ("drafting", 2), ("drafting", 3), ("awaiting_approval", 4)]
    assert history(tmp_path, "--run-id", "run-2") == []
    assert history(tmp_path, "--case", "case-O-1002") == []


@pytest.mark.parametrize("args", [
    [],
    ["frobnicate"],
    ["run", "--keys", "maybe"],
    ["run", "--policy", "oracle"],
    ["run", "--lease-ttl", "soon"],
    ["approve", "--no-such-flag"],
    ["migrate"],
], ids=lambda a: " ".join(a) or "no-args")
@pytest.mark.io
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str]) -> None:
    """In this process (``input_helpers.call``): exit 2 with the usage, one error line,
    nothing created, no process started."""
    refused = call("shopops", args, tmp_path)
    assert "usage: shopops" in refused.err
    assert_refused(refused, 2)


@pytest.mark.parametrize("args", [["gateway"], ["gateway", "serve", "--port", "0"]])
def test_the_gateway_moved_to_the_harness_with_a_clear_message(tmp_path: Path,
                                                               args: list[str]) -> None:
    """``shopops`` never imports the harness: the mock gateway is ``shopops-chaos``'s."""
    ran = shopops(tmp_path, *args)
    assert ran.code == 2 and ran.out == ""
    assert ran.err == ("shopops: error: the mock gateway moved to the harness: run "
                       "`shopops-chaos gateway serve [--db FILE] [--port N]`\n")
    assert list(tmp_path.iterdir()) == []


def test_resume_without_a_checkpoint_exits_1_with_a_clear_message(tmp_path: Path) -> None:
    ran = shopops(tmp_path, "resume", *DB)
    assert ran.code == 1
    assert ran.out == ""
    lines = ran.err.splitlines()
    assert len(lines) == 1, ran.err
    assert lines[0].startswith("shopops: error: CheckpointNotFound: ")
    assert "shopops.db" in lines[0] and "case-O-1001" in lines[0] and "run-1" in lines[0]
    assert "Traceback" not in ran.err


def test_resume_refuses_a_corrupt_checkpoint(tmp_path: Path) -> None:
    assert shopops(tmp_path, "run", *DB).code == 0
    raw = sqlite3.connect(tmp_path / "shopops.db")
    try:
        with raw:
            raw.execute("INSERT INTO checkpoints(case_id, run_id, schema_version, state_json,"
                        " created_at) VALUES (?, 'run-1', 2, '{\"torn', 'x')", (CASE,))
    finally:
        raw.close()
    ran = shopops(tmp_path, "resume", *DB)
    assert ran.code == 1 and ran.out == ""
    assert "CheckpointCorrupt" in ran.err and "seq=4" in ran.err
    assert len(history(tmp_path)) == 4  # left untouched


def test_a_forged_ticket_on_the_command_line_is_refused(tmp_path: Path,
                                                        gateway: MockGateway) -> None:
    assert shopops(tmp_path, "run", *DB).code == 0
    ran = shopops(tmp_path, "resume", *DB, "--gateway", gateway.url, "--ticket", "apr-desk-9")
    assert ran.code == 1
    assert "ApprovalRefused" in ran.err and "apr-desk-9" in ran.err
    assert read_log(tmp_path / "gateway.db").requests == ()


def test_a_second_owner_is_refused_while_the_lease_is_live(tmp_path: Path) -> None:
    # worker-a dies right after parking, still holding its lease
    died = shopops(tmp_path, "run", *DB, "--owner", "worker-a",
                   SHOPOPS_FAILPOINTS="t4.parked=kill")
    assert died.code == -signal.SIGKILL
    ran = shopops(tmp_path, "run", *DB, "--owner", "worker-b")
    assert ran.code == 1
    assert "LeaseHeld" in ran.err and "worker-a" in ran.err
    assert shopops(tmp_path, "run", *DB, "--owner", "worker-a").code == 0  # the same owner


def test_the_read_timeout_is_an_option(tmp_path: Path, gateway: MockGateway) -> None:
    assert shopops(tmp_path, "run", *DB).code == 0
    assert shopops(tmp_path, "approve", *DB).code == 0
    gateway.set_faults([{"kind": "delay_after_accept", "ms": 3000}])
    ran = shopops(tmp_path, "run", *DB, "--gateway", gateway.url, "--read-timeout", "0.4")
    assert ran.code == 0, ran.err
    log = gateway.log()  # the first reply came after 0.4 s: a retry with the same key
    assert [(r.fault, r.status) for r in log.requests] == [
        ("delay_after_accept:3000ms", 201), (None, 200)]
    assert len({r.idempotency_key for r in log.requests}) == 1 and len(log.deliveries) == 1


@pytest.mark.io
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_bad_read_timeout_is_refused(tmp_path: Path, gateway: MockGateway,
                                       value: str) -> None:
    """In this process (``input_helpers.call``): argparse refuses the value, naming the
    option and what is allowed; nothing created, nothing started, nothing sent."""
    work = tmp_path / "work"
    work.mkdir()
    refused = call("shopops", ["run", *DB, "--gateway", gateway.url,
                               f"--read-timeout={value}"], work)
    assert_refused(refused, 2, "--read-timeout", "0.001 to 3600")
    assert gateway.log().requests == ()


def test_a_worker_that_stops_on_its_own_hands_the_lease_back(tmp_path: Path) -> None:
    assert shopops(tmp_path, "run", *DB, "--owner", "worker-a").code == 0
    assert shopops(tmp_path, "run", *DB, "--owner", "worker-b").code == 0


def test_migrate_the_v1_fixture(tmp_path: Path) -> None:
    if not V1_FIXTURE.exists():
        pytest.skip(f"{V1_FIXTURE} not written yet (fixtures/make_v1_fixture.py)")
    shutil.copyfile(V1_FIXTURE, tmp_path / "v1.db")
    v1 = ("--db", "v1.db", "--approvals", "approvals.db")
    before = shopops(tmp_path, "resume", *v1)
    assert before.code == 1
    assert "UnsupportedSchemaVersion" in before.err and "shopops migrate" in before.err

    ran = shopops(tmp_path, "migrate", "v1.db")
    assert ran.code == 0, ran.err
    migrated = ran.json()["migrated_rows"]
    assert migrated >= 1
    assert shopops(tmp_path, "migrate", "v1.db").json() == {"migrated_rows": 0}

    rows = history(tmp_path, db="v1.db")
    assert len(rows) == migrated
    assert {row["schema_version"] for row in rows} == {2}
    states = [json.loads(row["state_json"]) for row in rows]
    assert {s["preferred_channel"] for s in states} == {"email"}
    assert {s["schema_version"] for s in states} == {2}
    assert states[-1]["phase"] == "awaiting_approval"

    after = shopops(tmp_path, "run", *v1)  # loads the migrated checkpoint, parks again
    assert after.code == 0, after.err
    assert (after.json()["phase"], after.json()["step"]) == ("awaiting_approval",
                                                             states[-1]["step"])
