"""The independent implementation (examples/independent/, written from docs/contract.md
alone) scores full marks on the default rubric: the contract is enough to pass the judge."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness

FOLDER = Path(__file__).resolve().parent.parent / "examples" / "independent"


@pytest.mark.processes
def test_independent_loop_scores_170_of_170(tmp_path: Path) -> None:
    grade = harness.grade(harness.Sut(path=FOLDER, module="independent_loop"),
                          tmp_path / "grade")
    lost = [f"{t.name}: {t.score:g}/{t.max_score:g}\n{t.output}"
            for t in grade.tests if t.score < t.max_score]
    assert not grade.interrupted
    assert (grade.score, grade.max_score) == (170, 170), "\n\n".join(lost)
