"""A target's history is read after each worker, not only at the end (``Workers.read_history``,
``Evidence.history_reads``), and ``history_not_replaced`` judges that each read begins with
the one before but its newest object (``check_support.reads_departed``). Proven by a
variant of the plain-Python starter whose ``resume`` deletes its SQLite store and starts
over: its final history looks like one clean run (``step_continues`` passes, as it did when
the history was read only at the end), and the read after a resume killed before it caught
up again shows the history that was thrown away: ``fail`` on ``history_not_replaced``
alone. The starter itself passes at the same kill point."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from scenario_helpers import ROOT

from harness.judge.checks.history import history_not_replaced
from harness.judge.checks.registry import run_checks
from harness.judge.checks.support import reads_departed
from harness.judge.observers.target import history_of, item_digests
from harness.model import (
    CheckStatus,
    CrashSchedule,
    Evidence,
    ExecutionPlan,
    GatewayLog,
    HistoryRead,
    KillPoint,
    Verdict,
    WorkerRole,
)
from harness.plan.scenario import load_scenario
from harness.reports.codec import decode, encode
from harness.run.execution import execute

STARTER = ROOT / "examples" / "python_starter"
SCENARIO = ROOT / "scenarios" / "targets" / "python-starter.toml"
#: The starter's first commit in its resume (three in start: intake, drafting, the park):
#: the variant's fresh store holds one checkpoint there, its first read held three.
FIRST_RESUME_COMMIT = KillPoint("b.sqlite.after_commit", 4)

I1, I2, I3, I4 = ({"phase": "intake", "step": 1}, {"phase": "drafting", "step": 2},
                  {"phase": "awaiting_approval", "step": 3}, {"phase": "sending", "step": 4})


def _read(worker: int | None, *items: dict, role: WorkerRole = WorkerRole.RESUME,
          killed: bool = False, unreadable: str | None = None) -> HistoryRead:
    return HistoryRead(worker, role if worker is not None else None, killed,
                       item_digests(items), unreadable)


def _evidence(*reads: HistoryRead, final: tuple[dict, ...] = (I1, I2, I3, I4)) -> Evidence:
    return Evidence(execution_id="t[x]", case_id="case-O-1001", events=(), workers=(),
                    checkpoints=(), approval_requests=(), tickets=(),
                    gateway=GatewayLog((), ()), approval_event=None,
                    checkpoint_seq_at_approval=None, unreached=(), expected_deliveries=0,
                    target="python", history=history_of(final), history_reads=reads)


# -- the rule (pure) -------------------------------------------------------------------------

@pytest.mark.pure
def test_a_history_that_grows_from_read_to_read_passes() -> None:
    ev = _evidence(_read(0, I1, I2, I3, role=WorkerRole.START), _read(1, I1, I2, I3, I4))
    result = history_not_replaced(ev)
    assert result.status is CheckStatus.PASS, result.detail
    assert result.evidence == ("read after worker 0 (start): 3 object(s)",
                               "read after worker 1 (resume): 4 object(s)")


@pytest.mark.pure
def test_a_read_that_lost_an_earlier_object_fails_naming_both_reads() -> None:
    ev = _evidence(_read(0, I1, I2, I3, role=WorkerRole.START),
                   _read(1, I1, killed=True), _read(2, I1, I2, I3, I4))
    result = history_not_replaced(ev)
    assert result.status is CheckStatus.FAIL
    assert result.detail.startswith(
        "the history read after worker 1 (resume, killed) does not begin with the history "
        "read after worker 0 (start): of the 3 object(s) read then, object 2 (1 = the "
        "oldest) is missing in the 1 read now")
    # the final read alone would pass: it is one clean run
    assert history_not_replaced(_evidence(_read(2, I1, I2, I3, I4))).passed


@pytest.mark.pure
def test_an_earlier_object_rewritten_fails_its_newest_may_still_change() -> None:
    changed = {**I2, "draft_revision": 7}
    bad = reads_departed((_read(0, I1, I2, I3), _read(1, I1, changed, I3, I4)))
    assert bad is not None and "object 2 (1 = the oldest) is another object" in bad
    # the newest object is the frontier: a wait going on, completed in place (DBOS's recv)
    frontier = {**I3, "phase": None}
    assert reads_departed((_read(0, I1, I2, I3), _read(1, I1, I2, frontier, I4))) is None
    # the same JSON with its keys in another order is the same object
    assert item_digests(({"a": 1, "b": 2},)) == item_digests(({"b": 2, "a": 1},))


@pytest.mark.pure
def test_an_unreadable_read_is_named_and_not_compared() -> None:
    locked = "the target's history could not be read: locked"
    ev = _evidence(_read(0, role=WorkerRole.START, killed=True, unreadable=locked),
                   _read(1, I1, I2), _read(2, I1, I2, I3, I4))
    result = history_not_replaced(ev)
    assert result.status is CheckStatus.PASS, result.detail
    assert result.evidence[0].startswith("read after worker 0 (start, killed): unreadable")
    # the readable reads on either side of it are still compared
    bad = reads_departed((_read(0, I1, I2, I3), _read(1, unreadable=locked), _read(2, I1)))
    assert bad is not None and bad.startswith("the history read after worker 2 (resume) "
                                              "does not begin with the history read after "
                                              "worker 0 (resume)")


@pytest.mark.pure
def test_without_reads_a_target_is_not_applicable_and_the_reads_round_trip() -> None:
    checks = {c.check_id: c for c in run_checks(_evidence())}
    assert checks["history_not_replaced"].status is CheckStatus.NOT_APPLICABLE
    ev = _evidence(_read(0, I1), _read(None, I1, I2))
    assert decode(json.loads(json.dumps(encode(ev)))) == ev
    assert ev.history_reads[-1].after() == "after the story"


# -- real executions: the starter and its variant that starts over ---------------------------

@pytest.fixture(scope="module")
def forked() -> Iterator[object]:
    """One fork server for the module's executions, as ``test_target_scenarios`` has."""
    from harness.launch.fork import ForkLauncher

    with ForkLauncher(modules=("harness.targets.worker",), fallback=None,
                      preload=("harness.targets.worker", "harness.targets.boundaries")) as launcher:
        yield launcher


def _starting_over(tmp_path: Path) -> Path:
    """``python-starter.toml`` over a copy of the starter whose ``resume`` deletes its
    SQLite store and runs the case from the beginning: a fresh history each resume."""
    app = tmp_path / "app"
    shutil.copytree(STARTER, app, ignore=shutil.ignore_patterns("__pycache__"))
    loop = app / "loop.py"
    text = loop.read_text(encoding="utf-8")
    old = '''    """Resume from the last checkpoint; with ``ctx.ticket`` run to the end."""\n'''
    assert text.count(old) == 1
    text = text.replace(old, old + (
        '    for name in ("state.db", "state.db-journal", "state.db-wal", "state.db-shm"):\n'
        '        (Path(ctx.workdir) / name).unlink(missing_ok=True)  # start over\n'))
    compile(text, str(loop), "exec")
    loop.write_text(text, encoding="utf-8")
    toml = SCENARIO.read_text(encoding="utf-8").replace(
        'folder = "../../examples/python_starter"', f'folder = "{app}"')
    assert str(app) in toml
    path = tmp_path / "starting-over.toml"
    path.write_text(toml, encoding="utf-8")
    return path


def _run(scenario: Path, workdir: Path, launcher: object):
    plan = ExecutionPlan(load_scenario(scenario), CrashSchedule((FIRST_RESUME_COMMIT,)))
    return execute(plan, workdir, launcher=launcher, worker_timeout_s=120)  # type: ignore[arg-type]


def test_a_resume_that_deletes_its_store_and_starts_over_fails_history_not_replaced(
        tmp_path, forked) -> None:
    r = _run(_starting_over(tmp_path), tmp_path / "x", forked)
    status = {c.check_id: c.status for c in r.checks}
    failed = {c for c, s in status.items() if s is CheckStatus.FAIL}
    assert r.verdict is Verdict.FAIL and failed == {"history_not_replaced"}, r.reasons
    # what the read at the end alone shows: one clean run, every step in order
    assert status["step_continues"] is CheckStatus.PASS
    assert [w.phase for w in r.evidence.history.writes] == [
        "intake", "drafting", "awaiting_approval", "sending", "completed"]
    check = next(c for c in r.checks if c.check_id == "history_not_replaced")
    assert check.detail.startswith(
        "the history read after worker 1 (resume, killed) does not begin with the history "
        "read after worker 0 (start): of the 3 object(s) read then, object 2"), check.detail
    reads = r.evidence.history_reads
    assert [(h.worker, h.killed, len(h.items)) for h in reads] == [
        (0, False, 3), (1, True, 1), (2, False, 5)]
    assert (tmp_path / "x" / "history-after-1.out").read_text(encoding="utf-8").startswith("[")


def test_the_starter_passes_at_the_same_kill_point_with_every_read_judged(
        tmp_path, forked) -> None:
    r = _run(SCENARIO, tmp_path / "x", forked)
    assert r.verdict is Verdict.PASS, r.reasons
    check = next(c for c in r.checks if c.check_id == "history_not_replaced")
    assert check.status is CheckStatus.PASS and check.evidence == (
        "read after worker 0 (start): 3 object(s)",
        "read after worker 1 (resume, killed): 4 object(s)",
        "read after worker 2 (resume): 5 object(s)"), check.evidence
    # the read after the last worker is the history at the end: no read after the story
    assert [h.worker for h in r.evidence.history_reads] == [0, 1, 2]
    assert not (tmp_path / "x" / "history.out").exists()
