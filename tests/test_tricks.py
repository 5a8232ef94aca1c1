"""No trick raises a score: each hostile implementation of ``tests/tricks.py`` is graded with
and without its trick on the one execution that shows its bug (the mutant once without a
trick, then with each of the tricks that sit on it); the scores are the same, the
trick is reported where the harness can see it, and after grading no process of a sandbox
user is alive and nothing outside the output folder changed.

Sealing needs root (workers get a uid of their own), as in CI and on Gradescope.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from tricks import TRICKS, Trick

from harness.grading.grade import DEFAULT_RUBRIC, grade
from harness.model import CrashSchedule
from harness.model.plan import Sut
from harness.sandbox import users as sandbox

pytestmark = pytest.mark.skipif(not sandbox.available(),
                                reason="sealed grading gives workers a uid: needs root")


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _grade(trick: Trick, tmp: Path, with_trick: bool) -> tuple[float, dict[str, str], Path]:
    results = tmp / "results" / "results.json"
    folder = trick.build(tmp / "sut", results, with_trick=with_trick)
    before = _tree(folder)
    rubric = [replace(i, scenarios=(trick.execution.split("[")[0],))
              for i in DEFAULT_RUBRIC if i.name.startswith(trick.item)]
    schedule = CrashSchedule.parse(trick.execution.split("[", 1)[1].rstrip("]"))
    result = grade(Sut(path=folder), tmp / "out", rubric=rubric, results_path=results,
                   schedule=schedule)
    assert _tree(folder) == before  # the submission's own folder: read, never written
    summary = json.loads((tmp / "out" / "run" / "summary.json").read_text())
    (execution,) = summary["executions"]
    assert execution["id"] == trick.execution
    return result.score, execution["checks"], results


#: The mutants the tricks sit on, each with the item it loses and the execution graded: the
#: mutant is graded once without a trick, then once with each of its tricks.
BASELINES = tuple(dict.fromkeys((t.mutant, t.item, t.execution) for t in TRICKS))


@pytest.mark.pure
def test_every_trick_has_a_baseline() -> None:
    assert sorted(t.name for b in BASELINES for t in TRICKS
                  if (t.mutant, t.item, t.execution) == b) == sorted(t.name for t in TRICKS)


@pytest.mark.parametrize("baseline", BASELINES, ids=lambda b: b[0])
def test_a_trick_does_not_change_the_score_and_is_reported(baseline: tuple[str, str, str],
                                                           tmp_path: Path) -> None:
    tricks = [t for t in TRICKS if (t.mutant, t.item, t.execution) == baseline]
    plain, plain_checks, _ = _grade(tricks[0], tmp_path / "plain", with_trick=False)
    assert plain == 0, plain  # the bug shows without a trick
    for trick in tricks:
        tricked, checks, results = _grade(trick, tmp_path / trick.name, with_trick=True)
        assert tricked == 0, (trick.name, tricked)  # and still shows with it
        if trick.reported is not None:
            assert not checks[trick.reported]["passed"], (trick.name, checks[trick.reported])
            assert plain_checks[trick.reported]["passed"], (trick.name, plain_checks)
        written = results.read_text()
        # no process of any uid this test's grading used is alive (setsid-daemon's daemon
        # included), so nothing can rewrite the results later: no need to wait and see
        assert sandbox.strays() == [], trick.name
        assert sorted(p.name for p in sandbox.area().iterdir()
                      if not p.name.startswith("code-")) == [], trick.name  # all removed
        assert results.read_text() == written and json.loads(written)["score"] == 0


def test_a_planted_symlink_is_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    results = tmp_path / "results" / "results.json"
    results.parent.mkdir()
    for name in ("results.json.tmp", ".results.json.tmp"):
        (results.parent / name).symlink_to(outside)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.md.tmp").symlink_to(outside)
    result = grade(Sut(), tmp_path / "out", rubric=DEFAULT_RUBRIC[:1], results_path=results,
                   schedule=CrashSchedule.parse("t4.parked"))
    assert outside.read_text() == "precious\n"
    assert not results.is_symlink() and json.loads(results.read_text())["score"] == 10
    assert result.score == 10
    assert not result.report_path.is_symlink()


@pytest.mark.io
def test_a_symlink_given_as_the_results_path_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    from harness.grading.safe_io import OutputPathError

    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    (tmp_path / "results.json").symlink_to(outside)
    with pytest.raises(OutputPathError, match="symbolic link"):
        grade(Sut(), tmp_path / "out", rubric=DEFAULT_RUBRIC[:1],
              results_path=tmp_path / "results.json")
    assert not (tmp_path / "out").exists() and outside.read_text() == "precious\n"
