"""The gateway's evidence is its ledger, held in the harness's memory (``MockGateway.log``
of ``MockGateway(memory=True)``), not a file a worker can reach: an unsealed target that
sends twice and deletes its second delivery from ``../gateway.db`` fails (found by an
attack: it passed ``shopops-chaos run`` when the ledger was that file). The ledger is
written to ``gateway.db`` after the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from target_helpers import starter_variant

from harness.model import CrashSchedule, ExecutionPlan, Verdict
from harness.plan.scenario import load_scenario
from harness.run.execution import execute
from harness.services.gateway import MockGateway
from harness.services.ledger import read_log

#: the starter's send, then a second send under another key whose rows it deletes
FORGE = '''
        headers["Idempotency-Key"] = state["send_idempotency_key"] + "-again"
        requests.post(f"{ctx.gateway_url}/v1/messages", timeout=(2, 5), headers=headers,
                      json={"case_id": ctx.case_id, **state["draft"]}).raise_for_status()
        log = os.path.join(os.path.dirname(os.path.abspath(ctx.workdir)), "gateway.db")
        with closing(sqlite3.connect(log)) as db, db:
            db.execute("DELETE FROM deliveries WHERE idempotency_key LIKE '%-again'")
            db.execute("DELETE FROM requests WHERE idempotency_key LIKE '%-again'")
'''
SENT = "        reply.raise_for_status()\n"


def test_the_ledger_in_memory_is_what_its_saved_file_holds(tmp_path: Path) -> None:
    gateway = MockGateway(tmp_path / "gateway.db", memory=True)
    with gateway:
        for key in ("k1", "k1", "k2", None):
            headers = {"Idempotency-Key": key} if key else {}
            requests.post(f"{gateway.url}/v1/messages", headers=headers, timeout=10,
                          json={"case_id": "O-1", "to": "a@b", "subject": "s", "body": key
                                or "b"})
        requests.post(f"{gateway.url}/v1/messages", json={"case_id": 1}, timeout=10)
        held = gateway.log()
    gateway.save()
    assert held == read_log(tmp_path / "gateway.db")
    assert len(held.requests) == 5 and len(held.deliveries) == 3


def test_a_target_that_deletes_its_second_delivery_from_the_log_fails(tmp_path: Path) -> None:
    scenario = starter_variant(tmp_path, SENT, FORGE)
    plan = ExecutionPlan(load_scenario(scenario), CrashSchedule(()))
    result = execute(plan, tmp_path / "run")
    assert result.verdict is Verdict.FAIL
    failed = {str(c.check_id) for c in result.checks
              if not c.passed and c.applicable and c.undecided is None}
    assert {"no_tampering", "same_key_one_delivery", "exactly_one_delivery"} <= failed
    assert len(result.evidence.gateway.deliveries) == 2
    tampering = [e.detail for e in result.evidence.events if str(e.kind) == "tampering"]
    assert any("gateway.db was created by a worker" in t for t in tampering), tampering
    # the file kept for the report is the harness's ledger, not what the worker made
    assert len(read_log(tmp_path / "run" / "gateway.db").deliveries) == 2


def test_an_executions_ledger_is_no_file_while_it_runs_and_saved_after(
        tmp_path: Path) -> None:
    gateway = MockGateway(tmp_path / "gateway.db", memory=True)
    with gateway:
        requests.post(f"{gateway.url}/v1/messages", headers={"Idempotency-Key": "k"},
                      timeout=10, json={"case_id": "O-1", "to": "a@b", "subject": "s",
                                        "body": "b"})
        assert not (tmp_path / "gateway.db").exists()
        assert len(gateway.log().deliveries) == 1
    (tmp_path / "gateway.db").write_bytes(b"a worker's file")  # replaced, not adopted
    gateway.save()
    assert read_log(tmp_path / "gateway.db") == gateway.log()


def test_the_bodies_a_gateway_holds_are_bounded(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an attack: every delivered body is held twice in the harness's memory, and
    a worker sent one-megabyte messages until the harness held 529 MiB. Past
    ``MAX_HELD_CHARS`` a new message is refused (413, logged) and nothing more is held."""
    import harness.services.gateway as gw

    monkeypatch.setattr(gw, "MAX_HELD_CHARS", 3000)
    with MockGateway(tmp_path / "gateway.db", memory=True) as gateway:
        codes = [requests.post(f"{gateway.url}/v1/messages", timeout=10,
                               headers={"Idempotency-Key": f"k{i}"},
                               json={"case_id": "O-1", "to": "a@b", "subject": "s",
                                     "body": "x" * 1000}).status_code for i in range(5)]
        held = gateway.log()
    assert codes == [201, 201, 201, 413, 413]
    assert len(held.deliveries) == 3 and len(held.requests) == 5
