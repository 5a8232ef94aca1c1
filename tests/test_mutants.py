"""Proof of detection: the grader catches every mutant on the rubric item it breaks.

A grader that passes a broken implementation is worse than none. Every mutant of
``tests/mutants.py`` is graded (a fork server preloaded from the mutant's folder: they are
our own code) on the rubric items it must lose, on the execution that shows it (with
``--crash-soak``: over that scenario's whole kill matrix), and must lose them through
``fail`` verdicts — never ``unknown``; the reference
scores full marks on the whole default rubric.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from mutants import MUTANTS, Mutant

from harness.grading import DEFAULT_RUBRIC, grade
from harness.schedule import CrashSchedule
from harness.sut import Sut

FULL = sum(item.points for item in DEFAULT_RUBRIC)


def test_the_reference_scores_full_marks(tmp_path: Path) -> None:
    result = grade(Sut(), tmp_path / "out")
    assert [t.name for t in result.tests if t.score != t.max_score] == []
    assert result.score == FULL
    written = json.loads(result.results_path.read_text())
    assert written["score"] == FULL
    assert {t["name"] for t in written["tests"]} == {i.name for i in DEFAULT_RUBRIC}


def test_the_catalogue_has_twelve_distinct_mutants() -> None:
    assert len({m.name for m in MUTANTS}) == len(MUTANTS) >= 12


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_is_caught_by_the_check_it_breaks(mutant: Mutant, tmp_path: Path,
                                                      request: pytest.FixtureRequest) -> None:
    """Graded on the execution that shows the bug (``shown_by``); with ``--crash-soak`` on
    that scenario's whole kill matrix, as a course's grader would run it."""
    scenario, _, schedule = mutant.shown_by.partition("[")
    rubric = [replace(item, scenarios=(scenario,)) for item in DEFAULT_RUBRIC
              if item.name.startswith(mutant.breaks)]
    assert len(rubric) == len(mutant.breaks)
    folder = mutant.build(tmp_path / "sut")
    only = (None if request.config.getoption("--crash-soak")
            else CrashSchedule.parse(schedule.removesuffix("]")))
    result = grade(Sut(path=folder, trusted=True), tmp_path / "out", rubric=rubric,
                   schedule=only)
    assert [(t.name, t.score) for t in result.tests] == [(i.name, 0.0) for i in rubric], (
        result.output, [t.output for t in result.tests])
    summary = json.loads((tmp_path / "out" / "run" / "summary.json").read_text())
    verdicts = {e["id"]: e["verdict"] for e in summary["executions"]}
    assert verdicts[mutant.shown_by] == "fail", summary


def test_a_proven_duplicate_stays_fail_when_the_worker_then_refuses(tmp_path: Path) -> None:
    """Verdict precedence end to end: the mutant delivers twice, then its worker exits 1
    with ``ApprovalRefused``. The gateway's log holds the proof: ``fail``, and the checks
    that a refusal leaves undecided say so."""
    from harness.execution import execute
    from harness.model import CheckStatus, CrashSchedule, ExecutionPlan, Scenario
    from harness.spawn_launcher import SpawnLauncher

    (mutant,) = [m for m in MUTANTS if m.name == "double-send-then-refusal"]
    sut = Sut(path=mutant.build(tmp_path / "sut"), trusted=True)
    plan = ExecutionPlan(Scenario(name="o1001"), CrashSchedule(), sut)
    result = execute(plan, tmp_path / "exe", launcher=SpawnLauncher())
    ev = result.evidence
    assert ev.deliveries == 2
    (refused,) = [w for w in ev.workers if w.returncode == 1]
    assert "ApprovalRefused" in refused.stderr_tail
    assert result.verdict == "fail", result.reasons
    status = {c.check_id: c.status for c in result.checks}
    assert status["exactly_one_delivery"] is CheckStatus.FAIL
    assert status["same_key_one_delivery"] is CheckStatus.FAIL
    undecided = result.undecided
    assert undecided and all(f"worker {refused.index}" in c.undecided for c in undecided)
