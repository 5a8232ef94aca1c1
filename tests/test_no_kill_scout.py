"""``--schedule no-kill`` on a scenario whose matrix is learned (``points = "all"``), among
several scenarios (``run(where_planned=True)``): the trace run that learns the matrix (the
scout) must not share the real execution's folder, or the real one inherits the scout's
durable state and comes out a false ``unknown`` (issue 25)."""

from __future__ import annotations

from pathlib import Path

from scenario_helpers import ROOT

from harness.model import CrashSchedule, Verdict
from harness.plan.scenario import load_scenario
from harness.run.runner import run


def test_a_no_kill_replay_of_a_learned_matrix_is_not_spoiled_by_its_scout(
        tmp_path: Path) -> None:
    s = load_scenario(ROOT / "scenarios" / "targets" / "python-starter.toml")
    assert s.points is None  # "all": learned from a trace run
    result = run([s], tmp_path / "out", schedule=CrashSchedule(), where_planned=True,
                 jobs=1, worker_timeout_s=120)
    assert [r.verdict for r in result.results] == [Verdict.PASS], [
        r.reasons for r in result.results]
    assert result.results[0].evidence.deliveries == 1
