"""Proof of detection: the grader catches every mutant on the rubric item it breaks.

A grader that passes a broken implementation is worse than none. Every mutant of
``tests/mutants.py`` is graded (a fork server preloaded from the mutant's folder: they are
our own code) on the rubric items it must lose, on the execution that shows it (with
``--crash-soak``: over that scenario's whole kill matrix), and must lose them through
``fail`` verdicts — never ``unknown``; the reference scores full marks on the whole default
rubric, over the whole kill matrix of every rubric scenario: graded in parts (``PARTS``,
each part's items restricted to its scenarios; items are all-or-nothing, so full marks in
every part is full marks in one grade) so that no test runs a minute; one part is graded
twice to show the grade is deterministic; with ``--crash-soak`` also in one grade.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from mutants import MUTANTS, Mutant

from harness.grading.grade import DEFAULT_RUBRIC, RubricItem, grade
from harness.model import CrashSchedule
from harness.model.plan import Sut
from harness.run.execution import ExecutionResult

FULL = sum(item.points for item in DEFAULT_RUBRIC)
SCENARIOS = tuple(dict.fromkeys(s for item in DEFAULT_RUBRIC for s in item.scenarios))

#: The rubric's scenarios in parts of about the same cost (each whole kill matrix: order-note
#: 28 executions, gateway-5xx 23, reply-lost-first-attempt 22, o1001 21, ...); the part
#: ``None`` names takes every rubric scenario no other part names (o1001, rejection and the
#: one-execution ones). ``DETERMINISM`` is graded twice by
#: ``test_the_reference_grade_is_deterministic``: a nondeterministic policy is where a grade
#: that depends on the run would show first.
DETERMINISM = ("nondeterministic-policy",)
PARTS: dict[str, tuple[str, ...] | None] = {
    "order-note": ("order-note", "reject-twice-then-approve", "rejection-feedback"),
    "gateway-faults": ("gateway-5xx", "reply-after-timeout"),
    "reply-lost": ("reply-lost-first-attempt", "v1-migration"),
    "o1001-and-the-rest": None,
}

def execute_mutant(mutant: Mutant, tmp_path: Path) -> ExecutionResult:
    """``mutant`` built under ``tmp_path`` and executed once on ``o1001[no-kill]``, forked
    from a server preloaded from its folder (our own code)."""
    from harness.launch.fork import ForkLauncher
    from harness.model import CrashSchedule, ExecutionPlan, Scenario
    from harness.run.execution import execute

    sut = Sut(path=mutant.build(tmp_path / "sut"), trusted=True)
    plan = ExecutionPlan(Scenario(name="o1001"), CrashSchedule(), sut)
    assert sut.path is not None
    with ForkLauncher(code_path=str(sut.path.resolve()), fallback=None) as launcher:
        return execute(plan, tmp_path / "exe", launcher=launcher)


def named(name: str) -> Mutant:
    """The mutant of ``MUTANTS`` called ``name``."""
    (mutant,) = [m for m in MUTANTS if m.name == name]
    return mutant



def part_scenarios(part: str) -> tuple[str, ...]:
    """The rubric scenarios of ``part`` (``PARTS``; ``"determinism"``: ``DETERMINISM``)."""
    if part == "determinism":
        return DETERMINISM
    named = PARTS[part]
    if named is not None:
        return named
    taken = {s for p in PARTS.values() if p for s in p} | set(DETERMINISM)
    return tuple(s for s in SCENARIOS if s not in taken)


def part_rubric(scenarios: tuple[str, ...]) -> list[RubricItem]:
    """Every rubric item with a scenario among ``scenarios``, restricted to those."""
    return [replace(item, scenarios=tuple(s for s in item.scenarios if s in scenarios))
            for item in DEFAULT_RUBRIC if set(item.scenarios) & set(scenarios)]


@pytest.mark.pure
def test_the_parts_grade_every_item_on_every_scenario_once() -> None:
    parts = [part_scenarios(p) for p in (*PARTS, "determinism")]
    assert all(parts) and sorted(s for p in parts for s in p) == sorted(SCENARIOS)
    for item in DEFAULT_RUBRIC:  # restricted, the parts' copies of an item add up to it
        copies = [i for p in parts for i in part_rubric(p) if i.name == item.name]
        assert sorted(s for i in copies for s in i.scenarios) == sorted(item.scenarios)


def _full_marks(result: object, rubric: list[RubricItem]) -> None:
    tests = result.tests  # type: ignore[attr-defined]
    assert [(t.name, t.score) for t in tests] == [(i.name, i.points) for i in rubric], [
        t.output for t in tests if t.score != t.max_score]
    written = json.loads(result.results_path.read_text())  # type: ignore[attr-defined]
    assert written["score"] == sum(i.points for i in rubric)
    assert [t["name"] for t in written["tests"]] == [i.name for i in rubric]


def _verdicts(out: Path) -> dict[str, str]:
    summary = json.loads((out / "run" / "summary.json").read_text())
    return {e["id"]: e["verdict"] for e in summary["executions"]}


@pytest.mark.parametrize("part", list(PARTS))
def test_the_reference_scores_full_marks(part: str, tmp_path: Path) -> None:
    """Whole kill matrices of the part's scenarios; every execution ``pass``."""
    rubric = part_rubric(part_scenarios(part))
    result = grade(Sut(), tmp_path / "out", rubric=rubric)
    _full_marks(result, rubric)
    verdicts = _verdicts(tmp_path / "out")
    assert {i.partition("[")[0] for i in verdicts} == set(part_scenarios(part))
    assert set(verdicts.values()) == {"pass"}, verdicts


def test_the_reference_grade_is_deterministic(tmp_path: Path) -> None:
    """The same part graded twice: full marks, the same scores, the same verdict for
    every execution; and progress as ``run`` shows it."""
    rubric = part_rubric(DETERMINISM)
    said: list[str] = []
    first = grade(Sut(), tmp_path / "a", rubric=rubric, say=said.append)
    # progress as run shows it: "[ 3/27+]" while traces may add, then "[ 12/41] eta 5s"
    steps = [re.match(r"\[\s*(\d+)/(\d+)(\+?)\]( eta \d+(m\d\ds|s))? ", line)
             for line in said if line.startswith("[")]
    assert steps and all(steps), said
    finals = [m for m in steps if not m.group(3)]
    assert finals and finals[-1].group(1) == finals[-1].group(2)  # ends on a final total
    assert any(m.group(4) for m in finals if m.group(1) != m.group(2)), said  # an estimate
    second = grade(Sut(), tmp_path / "b", rubric=rubric)
    _full_marks(first, rubric)
    assert [(t.name, t.score) for t in first.tests] == [(t.name, t.score) for t in second.tests]
    assert _verdicts(tmp_path / "a") == _verdicts(tmp_path / "b")
    assert set(_verdicts(tmp_path / "a").values()) == {"pass"}


@pytest.mark.slow
def test_the_reference_scores_full_marks_in_one_grade(tmp_path: Path) -> None:
    """The default rubric in one grade, as a course runs it (the parts above, unsplit)."""
    result = grade(Sut(), tmp_path / "out")
    _full_marks(result, list(DEFAULT_RUBRIC))
    assert result.score == FULL


@pytest.mark.pure
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
    from harness.model import CheckStatus

    result = execute_mutant(named("double-send-then-refusal"), tmp_path)
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


def test_a_checkpoint_file_started_again_fails_on_its_own_reason(tmp_path: Path) -> None:
    """The resumer deletes ``checkpoints.db`` once the human approved and creates it again,
    so its rows start over at seq 1. The harness compares the history at the end with what
    it read at the approval (the file, the rows up to that seq): ``fail``, one reason that
    says the history was replaced, and none that sets the new file's seq numbers against
    the approval's ("moved past awaiting_approval before a human approved")."""
    from harness.model import CheckStatus

    result = execute_mutant(named("checkpoints-recreated-after-approval"), tmp_path)
    ev = result.evidence
    mark = ev.history_at_approval
    assert mark is not None and mark.seq == ev.checkpoint_seq_at_approval > 0
    assert ev.checkpoints[0].seq == 1 and ev.checkpoints_file != mark.file_id  # a new file
    assert result.verdict == "fail", result.reasons
    (reason,) = result.reasons
    assert reason.startswith("history_not_replaced: the checkpoint history was replaced or "
                             "rewritten during the execution: ")
    assert "seen at approval" in reason and reason.endswith("at the end")
    status = {c.check_id: c.status for c in result.checks}
    assert status["parked_until_approval"] is CheckStatus.PASS
    assert status["not_sent_before_approval"] is CheckStatus.PASS
    assert not [line for c in result.checks for line in c.evidence
                if "before the approval" in line]


def test_a_history_hidden_from_the_approval_fails_on_its_own_reason(tmp_path: Path) -> None:
    """The parked worker renames ``checkpoints.db`` away, so the harness finds no file when
    the human approves although its trace shows a committed checkpoint; the resumer puts
    it back and starts it afresh. Before, the approval's mark said "0 rows, no file" and
    the end's history (seq 1.., in the restored file) passed every check (found by an
    attack: 10/10 in a grade). Now: ``fail``, one reason naming the unreadable history."""
    result = execute_mutant(named("checkpoints-hidden-at-approval"), tmp_path)
    mark = result.evidence.history_at_approval
    assert mark is not None and mark.unreadable is not None
    assert "although a worker had reached t3.checkpoint_saved" in mark.unreadable
    assert result.verdict == "fail", result.reasons
    (reason,) = result.reasons
    assert reason.startswith("history_not_replaced: the checkpoint history could not be "
                             "read when the human approved (no checkpoint file")


def test_an_empty_decoy_history_at_the_approval_fails(tmp_path: Path) -> None:
    """The parked worker moves its history away and leaves an empty checkpoint database in
    its place; the next worker copies the real rows back into that same file (same inode,
    same seq numbers) and deletes the original. The harness read "0 rows" at the approval
    and nothing was compared (found by an attack: PASS 21/21, 130/160 in a grade). Now the
    human approving a request the loop made over a history with no checkpoint is itself
    the failure."""
    result = execute_mutant(named("decoy-history-at-approval"), tmp_path)
    ev = result.evidence
    mark = ev.history_at_approval
    assert mark is not None and mark.rows == 0 and mark.file_id == ev.checkpoints_file
    assert [r.seq for r in ev.checkpoints][:3] == [1, 2, 3]  # the rows came back
    assert result.verdict == "fail", result.reasons
    (reason,) = result.reasons
    assert reason.startswith("history_not_replaced: ") and "asked for this approval" in reason


def test_a_history_deleted_at_the_end_is_a_fail_not_unknown(tmp_path: Path) -> None:
    """The last worker completes, then deletes its checkpoint files: the history is gone
    although the harness's trace shows committed checkpoints. Before, that gap left every
    check over the history undecided and the execution came out ``unknown`` — also after a
    duplicate delivery or a send before the approval, which the gateway's log proves
    (found by an attack). Now the removal is tampering (``no_tampering``): ``fail``."""
    mutant = Mutant(
        "history-deleted-when-done",
        (("loop.py", "            failpoint(\"t7.completed_saved\")\n",
          "            failpoint(\"t7.completed_saved\")\n"
          "            import os\n"
          "            for ext in (\"\", \"-wal\", \"-shm\"):\n"
          "                if os.path.exists(store.path + ext):\n"
          "                    os.remove(store.path + ext)\n"
          "            os._exit(0)\n"),),
        (), "o1001[no-kill]")
    result = execute_mutant(mutant, tmp_path)
    assert result.evidence.deliveries == 1
    assert result.verdict == "fail", result.reasons
    assert any(r.startswith("no_tampering: ") and "checkpoint database " in r and "is gone" in r
               for r in result.reasons), result.reasons
