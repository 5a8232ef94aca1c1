"""The default run's sample of a double-crash matrix (``crash_sample``, used by the root
``conftest.py``): every single kill, every first kill and every second-kill label in some
kept pair, deterministic; and the default run really deselects the rest (a collect-only
session of the real ``scenarios/o1001-double.toml`` against one that names the file)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from crash_sample import double_sample
from hypothesis import given, settings
from hypothesis import strategies as st

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

LABELS = ["t0.case_started", "t4.parked", "t6.request_leaving", "t6.gateway_accepted",
          "ckpt.before_commit", "t7.completed_saved"]
point = st.builds(lambda label, n: label if n == 1 else f"{label}#{n}",
                  st.sampled_from(LABELS), st.integers(1, 3))


@st.composite
def matrices(draw: st.DrawFn) -> list[str]:
    """A double matrix as the plan lists it: the singles, then each one's pairs."""
    firsts = draw(st.lists(point, min_size=1, max_size=8, unique=True))
    ids = list(firsts)
    for first in firsts:
        ids += [f"{first}>{second}" for second in draw(st.lists(point, max_size=6,
                                                                 unique=True))]
    return ids


def _column(sid: str) -> str:
    return sid.rsplit(">", 1)[1].split("#", 1)[0]


@settings(max_examples=100, deadline=None, derandomize=True)
@given(matrices())
def test_the_sample_keeps_every_single_and_covers_every_row_and_column(ids: list[str]) -> None:
    kept = double_sample(ids)
    assert kept == [sid for sid in ids if sid in set(kept)]  # plan order, no duplicates
    assert [s for s in ids if ">" not in s] == [s for s in kept if ">" not in s]
    pairs = [s for s in ids if ">" in s]
    assert {s.split(">")[0] for s in pairs} == {s.split(">")[0] for s in kept if ">" in s}
    assert {_column(s) for s in pairs} == {_column(s) for s in kept if ">" in s}
    assert double_sample(list(ids)) == kept  # deterministic


def test_the_sample_is_small_and_spreads_its_columns() -> None:
    firsts = [f"p{i}" for i in range(20)]
    ids = firsts + [f"{a}>{b}" for a in firsts for b in firsts[:15]]
    kept = double_sample(ids)
    pairs = [s for s in kept if ">" in s]
    assert len(pairs) == 20  # one per row; the 15 columns fall within them
    assert len({_column(s) for s in pairs}) == 15
    # a's pairs: a>b first; then column c, still uncovered, by its first pair in plan order
    assert double_sample(["no-kill", "a", "a>b", "a>c", "a>b>c"]) == ["no-kill", "a", "a>b",
                                                                      "a>c"]


DOUBLE = """name = "d"
[crash]
points = ["t4.parked", "t6.gateway_accepted"]
baseline = false
double = true
"""


@pytest.mark.processes
def test_the_default_run_deselects_the_pairs_outside_the_sample_and_naming_runs_all(
        pytester: pytest.Pytester) -> None:
    """The project's root ``conftest.py`` in a project of its own (``testpaths`` as ours,
    one small double-crash scenario, its plan learned once and cached): the default run's
    items are the sample; naming the file, or ``--crash-soak``, keeps them all."""
    pytester.makeini("[pytest]\ntestpaths = scenarios\n")
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    (pytester.path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "crash_sample.py", pytester.path / "tests")
    (pytester.path / "scenarios").mkdir()
    (pytester.path / "scenarios" / "d.toml").write_text(DOUBLE)

    def collected(*args: str, learn: bool = False) -> list[str]:
        # learning the plan runs executions: a subprocess; once cached, collection runs
        # nothing, so this process will do
        run = pytester.runpytest_subprocess if learn else pytester.runpytest_inprocess
        result = run("--collect-only", "-q", *args)
        assert result.ret == 0, result.stdout.str()
        return [ln.split("[", 1)[1][:-1].replace("+", ">").replace(":", "#")
                for ln in result.outlines if ln.startswith("scenarios/d.toml::")]

    named = collected("scenarios/d.toml", learn=True)
    assert sum(">" in s for s in named) >= 6
    default = collected()
    assert default == double_sample(named) and len(default) < len(named)
    assert collected("--crash-soak") == named


SINGLE = """name = "s"
[crash]
points = ["t0.case_started", "t4.parked"]
"""

GRADES = '''
import pytest

def part_scenarios(part):
    return {"first": ("s",), "second": ("other",)}[part]

DETERMINISM = ("other",)

@pytest.mark.parametrize("part", ["first", "second"])
def test_the_reference_scores_full_marks(part):
    pass
'''


def test_items_a_selected_grade_of_the_reference_runs_are_not_run_twice(
        pytester: pytest.Pytester) -> None:
    """The root ``conftest.py``: a scenario's items are deselected in the default run when a
    selected full-marks grade of the reference covers that scenario (it runs and checks each
    of its executions); kept when ``-k`` deselects the grade, when the file is named, and
    with ``--crash-soak``."""
    pytester.makeini("[pytest]\ntestpaths = scenarios tests\n")
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    (pytester.path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "crash_sample.py", pytester.path / "tests")
    # not named test_mutants.py: in this process that module is the real one
    (pytester.path / "tests" / "test_grades_stub.py").write_text(GRADES)
    (pytester.path / "scenarios").mkdir()
    (pytester.path / "scenarios" / "s.toml").write_text(SINGLE)

    def items(*args: str) -> list[str]:
        result = pytester.runpytest_inprocess("--collect-only", "-q", *args)
        assert result.ret == 0, result.stdout.str()
        return [ln.split("[", 1)[1][:-1] for ln in result.outlines
                if ln.startswith("scenarios/s.toml::")]

    every = items("scenarios/s.toml")
    assert every == ["no-kill", "t0.case_started", "t4.parked"]
    assert items() == []  # the grade's part "first" covers s
    assert items("-k", "s and not full_marks") == every  # no grade selected: the items run
    assert items("-k", "second or s.toml") == every  # the selected part covers another
    assert items("--crash-soak") == every
