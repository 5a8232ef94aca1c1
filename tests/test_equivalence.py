"""Crash states counted once (issue 27): a double whose first crash left a state already run
is reported as equivalent, not run — and it must come out with the verdict the exhaustive
run gives it. The default run compares a representative part (the O-1001 double matrix on
points chosen to hold equal and unequal states, and a scenario whose doubles fail); with
``--crash-soak`` every scenario of the catalogue, made a double-crash matrix.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from harness.model import (
    REFERENCE,
    CheckResult,
    CrashSchedule,
    Equivalence,
    ExecutionPlan,
    ExecutionResult,
    KillPoint,
    RunResult,
    Verdict,
)
from harness.plan.catalogue import CATALOGUE, resolve
from harness.plan.scenario import load_scenario
from harness.run.equivalence import Classes, applies, equivalent_result
from harness.run.runner import run
from harness.story.crash_state import durable_digest, fingerprint

ROOT = Path(__file__).resolve().parent.parent


def _points(*names: str) -> tuple[KillPoint, ...]:
    return tuple(KillPoint.parse(n) for n in names)


def _compare(scenario, tmp_path: Path) -> tuple[RunResult, RunResult]:  # type: ignore[no-untyped-def]
    """The scenario run with equivalence (no sample: every claim stands unchecked) and
    exhaustively; every execution id has the same verdict in both."""
    eq = run([scenario], tmp_path / "eq", jobs=2, launcher="fork", sample=0.0)
    full = run([scenario], tmp_path / "full", jobs=2, launcher="fork", exhaustive=True)
    assert not full.equivalence.enabled and full.equivalence.equivalent == 0
    assert eq.equivalence.enabled and not eq.equivalence.mismatches
    mine = {r.plan.id: r.verdict for r in eq.results}
    theirs = {r.plan.id: r.verdict for r in full.results}
    assert mine == theirs
    ran = {r.plan.id for r in eq.results if r.equivalent_to is None}
    for r in eq.results:
        if r.equivalent_to is not None:
            assert r.equivalent_to in ran and r.elapsed_s == 0.0
            assert r.plan.schedule.kills[1:] == \
                next(x for x in eq.results if x.plan.id == r.equivalent_to).plan.schedule.kills[1:]
    assert eq.equivalence.run + eq.equivalence.equivalent == len(eq.results)
    return eq, full


def test_equivalence_gives_the_exhaustive_verdicts_on_o1001(tmp_path: Path) -> None:
    """Two kills before any commit leave one state: the doubles of the second are
    equivalent to the first's, with the same verdicts as when all run (the park's pair:
    the keys-off test below)."""
    s = load_scenario(ROOT / "scenarios" / "o1001-double.toml")
    s = replace(s, points=_points("t0.case_started", "t1.get_customer"))
    eq, _ = _compare(s, tmp_path)
    assert eq.equivalence.equivalent > 0
    assert eq.verdict is Verdict.PASS
    # the reports say which were not run and link each to the one it stands for
    from harness.reports.html import render as html
    from harness.reports.markdown import render as markdown
    from harness.reports.summary_json import summary

    doc = summary(eq)
    assert doc["equivalence"]["equivalent"] == eq.equivalence.equivalent
    linked = {e["id"]: e["equivalent_to"] for e in doc["executions"] if e["equivalent_to"]}
    assert len(linked) == eq.equivalence.equivalent
    twin = next(r for r in eq.results if r.plan.id == next(iter(linked.values())))
    claimed = next(e for e in doc["executions"] if e["equivalent_to"] == twin.plan.id)
    assert claimed["workdir"] == twin.evidence.workdir  # its evidence: the twin's folder
    assert "Not run: equivalent to" in html(eq) and "proven equivalent" in html(eq)
    assert f"{eq.equivalence.equivalent} proven equivalent" in markdown(eq)


def test_equivalence_keeps_failing_doubles_failing(tmp_path: Path) -> None:
    """Keys off: a second kill at the delivery sends twice (fail). The failures of the
    equivalent doubles are the exhaustive run's failures, execution by execution."""
    s = load_scenario(ROOT / "scenarios" / "demo-keys-off.toml")
    s = replace(s, double=True, points=_points("t3.checkpoint_saved", "t4.parked"))
    eq, full = _compare(s, tmp_path)
    assert eq.equivalence.equivalent > 0
    assert any(r.verdict is Verdict.FAIL for r in full.results)
    assert any(r.verdict is Verdict.FAIL and r.equivalent_to for r in eq.results)


#: Scenarios whose exhaustive double matrix differs from one run to the next, so two runs
#: of it cannot be compared execution by execution: measured 2026-12-03, five exhaustive
#: runs of migrators-together gave 14 or 15 executions and 1-2 unknown (two migrators race
#: for the write lock; which one reaches ckpt.migration_started again after a recovery,
#: and whether a held one is reached, varies), with or without equivalence.
NOT_REPRODUCIBLE = {"migrators-together"}


def _catalogue() -> list[str]:
    return sorted(p.stem for p in CATALOGUE.glob("*.toml"))


@pytest.mark.parametrize("name", _catalogue())
def test_equivalence_on_the_whole_catalogue(name: str, tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    """Every scenario of the catalogue as a double-crash matrix: the same verdicts with
    equivalence as exhaustive (``--crash-soak`` only: ~an hour of executions)."""
    if not request.config.getoption("--crash-soak", False):
        pytest.skip("the whole catalogue's double matrices run with --crash-soak")
    if name in NOT_REPRODUCIBLE:
        pytest.skip("its double matrix differs between two exhaustive runs (NOT_REPRODUCIBLE)")
    s = replace(load_scenario(resolve(name)), double=True)
    if not applies(ExecutionPlan(s, CrashSchedule(), REFERENCE)):
        pytest.skip("equivalence does not apply (a target or a varying policy)")
    _compare(s, tmp_path)


def test_the_fingerprint_leaves_out_times_and_pids_only(tmp_path: Path) -> None:
    """Two databases whose rows differ only in a timestamp or a pid have one digest; a
    different state, a relative deadline or another file does not."""
    def db(folder: Path, created: str, pid: int, state: str, expires: float) -> Path:
        folder.mkdir()
        with closing(sqlite3.connect(folder / "checkpoints.db")) as c:
            c.execute("CREATE TABLE checkpoints(seq INTEGER PRIMARY KEY, state_json TEXT, "
                      "created_at TEXT, writer_pid INTEGER)")
            c.execute("CREATE TABLE leases(case_id TEXT, expires_at REAL)")
            c.execute("INSERT INTO checkpoints VALUES (1, ?, ?, ?)", (state, created, pid))
            c.execute("INSERT INTO leases VALUES ('c', ?)", (expires,))
            c.commit()
        return folder

    a = db(tmp_path / "a", "2026-01-01", 10, '{"step": 2}', 1000.0)
    b = db(tmp_path / "b", "2027-01-01", 99, '{"step": 2}', 1000.0)
    c = db(tmp_path / "c", "2026-01-01", 10, '{"step": 3}', 1000.0)
    d = db(tmp_path / "d", "2026-01-01", 10, '{"step": 2}', 1000.0 + 3600)
    assert durable_digest([a], 0.0) == durable_digest([b], 0.0)
    assert durable_digest([a], 0.0) != durable_digest([c], 0.0)
    assert durable_digest([a], 0.0) != durable_digest([d], 0.0)
    # a lease's expiry counts as minutes from now: the same deadline an hour later differs
    assert durable_digest([a], 0.0) != durable_digest([a], 3600.0)
    (b / "worker-0.out").write_text("output differs")  # a worker's output is not state
    assert durable_digest([a], 0.0) == durable_digest([b], 0.0)
    (b / "state.json").write_text("{}")  # any other file is
    assert durable_digest([a], 0.0) != durable_digest([b], 0.0)
    # the story's position is part of it: the same files with the human's approval behind
    # or ahead, or another ticket offered to the next worker, are other states
    story = {"step": 2, "approved": False, "offered_ticket": None}
    assert fingerprint(story, [a], 0.0) == fingerprint(dict(story), [a], 0.0)
    assert fingerprint(story, [a], 0.0) != fingerprint({**story, "approved": True}, [a], 0.0)
    assert fingerprint(story, [a], 0.0) != fingerprint({**story, "offered_ticket": "t"}, [a],
                                                       0.0)


def _result(plan: ExecutionPlan, verdict: Verdict, state: str | None) -> ExecutionResult:
    from harness.model import Evidence, GatewayLog

    ev = Evidence(execution_id=plan.id, case_id="c", events=(), workers=(), checkpoints=(),
                  approval_requests=(), tickets=(), gateway=GatewayLog((), ()),
                  approval_event=None, checkpoint_seq_at_approval=None, unreached=(),
                  crash_state=state)
    return ExecutionResult(plan, ev, (CheckResult("exactly_one_delivery", True, ""),),
                           verdict, (), 1.0)


def test_a_claim_that_does_not_hold_is_a_harness_error() -> None:
    """Equal states whose recoveries reach other points, or a sample whose verdict differs
    from its twin's, are mismatches; a run with one is never a pass."""
    s = load_scenario(ROOT / "scenarios" / "o1001-double.toml")
    p, q, r = (ExecutionPlan(s, CrashSchedule(_points(n)), REFERENCE)
               for n in ("t0.case_started", "t1.get_customer", "t1.get_order"))
    later = _points("t7.completed_saved")[0]
    doubles = [replace(p, schedule=CrashSchedule((p.schedule.kills[0], later)))]
    classes = Classes(sample=0.0)
    assert classes.twin_of(p, _result(p, Verdict.PASS, "s1"), doubles) is None  # the first
    mine = [replace(q, schedule=CrashSchedule((q.schedule.kills[0], later)))]
    assert classes.twin_of(q, _result(q, Verdict.PASS, "s1"), mine) == p
    assert classes.twin_of(q, _result(q, Verdict.FAIL, "s1"), mine) is None  # its own prefix
    assert classes.twin_of(q, _result(q, Verdict.PASS, None), mine) is None  # no fingerprint
    assert not classes.mismatches
    assert classes.twin_of(r, _result(r, Verdict.PASS, "s1"), []) is None
    assert len(classes.mismatches) == 1
    twin = _result(doubles[0], Verdict.PASS, "s1")
    claimed = equivalent_result(mine[0], twin)
    assert claimed.equivalent_to == doubles[0].id and claimed.plan == mine[0]
    classes.compare(_result(mine[0], Verdict.FAIL, "s1"), twin)
    assert len(classes.mismatches) == 2
    ok = RunResult("r", Path("."), (twin,))
    assert ok.verdict is Verdict.PASS
    bad = replace(ok, equivalence=Equivalence(True, 1, 0, 1, tuple(classes.mismatches)))
    assert bad.verdict is Verdict.UNKNOWN and bad.exit_status == 2


def test_untrusted_code_and_varying_policies_never_get_equivalence() -> None:
    """An implementation under ``--sut`` could tell two runs apart; a varying policy drafts
    differently from the same state."""
    from harness.model import Sut

    s = load_scenario(ROOT / "scenarios" / "o1001-double.toml")
    assert applies(ExecutionPlan(s, CrashSchedule(), REFERENCE))
    assert not applies(ExecutionPlan(s, CrashSchedule(), Sut(path=ROOT / "shopops")))
    assert not applies(ExecutionPlan(replace(s, policy="varying"), CrashSchedule(), REFERENCE))
