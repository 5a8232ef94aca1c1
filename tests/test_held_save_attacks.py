"""Attacks on saving the in-memory gateway ledger after the verdict (``MockGateway.save``,
``harness.services.ledger_db.LedgerDatabase.save``): an unsealed target shares the
execution folder, so whatever it leaves next to ``gateway.db`` is there when the harness
writes the file."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from target_helpers import starter_variant

from harness.model import CrashSchedule, ExecutionPlan, Verdict
from harness.plan.scenario import load_scenario
from harness.run.execution import execute
from harness.services.ledger import read_log

START = 'def start(ctx: Any) -> None:\n    """Run a new case until it parks for approval."""\n'
#: the first worker leaves a directory where SQLite puts gateway.db's rollback journal
PLANT = ('    os.mkdir(os.path.join(os.path.dirname(os.path.abspath(ctx.workdir)),\n'
         '                          "gateway.db-journal"))\n')


def _forged(tmp_path: Path) -> Path:
    return starter_variant(tmp_path, START, PLANT)


def test_a_directory_at_the_ledgers_journal_does_not_crash_the_harness(
        tmp_path: Path) -> None:
    """Found by an attack: a folder a worker left at ``gateway.db-journal`` made the save
    after the verdict raise out of ``execute`` (``harness.services.saving.save_copy``)."""
    plan = ExecutionPlan(load_scenario(_forged(tmp_path)), CrashSchedule(()))
    result = execute(plan, tmp_path / "run", keep_databases=True)
    # expected: judged from the held log (one delivery), the planted file recorded or at
    # least not fatal, and the harness's ledger kept for the report
    assert result.verdict in (Verdict.PASS, Verdict.FAIL)
    assert len(result.evidence.gateway.deliveries) == 1
    kept = tmp_path / "run" / "gateway.db"
    assert kept.is_file() and not kept.is_symlink()
    assert len(read_log(kept).deliveries) == 1  # the harness's ledger, saved all the same


def test_the_service_call_log_holds_at_most_max_field_characters_a_field(
        tmp_path: Path) -> None:
    """Found by an attack: a refused call's 60 KB ``case_id`` was logged whole (~600 MB of
    harness memory from ten workers)."""
    from harness.services.approvals import MAX_FIELD, MAX_REQUESTS_PER_WORKER, ApprovalService

    svc = ApprovalService(tmp_path / "approvals.db", memory=True)
    try:
        line = (json.dumps({"op": "requests", "case_id": "c" * 60_000}) + "\n").encode()
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect("\0" + svc.address[1:])
            with sock.makefile("rb") as reader:
                for _ in range(50):
                    sock.sendall(line)
                    assert json.loads(reader.readline())["ok"] is False  # refused: too long
        logged = svc.read(lambda conn: conn.execute(
            "SELECT MAX(LENGTH(case_id)), SUM(LENGTH(case_id)) FROM service_calls").fetchone())
    finally:
        svc.close()
    # a worker's whole allowance of calls costs the harness at most MAX_FIELD a field
    assert logged[0] <= MAX_FIELD, logged
    assert logged[1] * MAX_REQUESTS_PER_WORKER / 50 <= MAX_REQUESTS_PER_WORKER * MAX_FIELD


#: a loop that opens the ``--approvals`` file it is given (a local approval cache; the
#: contract: "unused under the harness"), and then works through the service as it should
LOCAL_APPROVALS = ("cli.py",
                   "    if args.command in (\"run\", \"resume\"):\n"
                   "        return _work(args, approvals)\n",
                   "    if args.command in (\"run\", \"resume\"):\n"
                   "        import sqlite3  # a local cache of approvals: opened, unused here\n"
                   "        sqlite3.connect(approvals).close()\n"
                   "        return _work(args, approvals)\n")


def test_opening_the_approvals_file_a_worker_was_given_is_no_tampering(
        tmp_path: Path) -> None:
    """Found by an attack: unsealed, the ``--approvals`` path a worker was given was the
    harness's own ``approvals.db``, which is tampering once the records are in memory."""
    from mutants import Mutant

    from harness.model import Scenario
    from harness.model.plan import Sut

    folder = Mutant("local-approvals", (LOCAL_APPROVALS,), (), "o1001[no-kill]").build(
        tmp_path / "sut", fixtures=False)
    plan = ExecutionPlan(Scenario(name="o1001"), CrashSchedule(), Sut(path=folder,
                                                                        trusted=True))
    result = execute(plan, tmp_path / "exe")
    assert result.evidence.deliveries == 1
    assert result.verdict is Verdict.PASS, result.reasons
