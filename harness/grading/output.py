"""What a grade is and how it is written: the frozen ``GradedTest``/``Grade`` and the three
files a grade leaves — Gradescope's ``results.json`` (its documented shape: ``score``,
``execution_time``, ``output``, ``tests[]`` with ``name``/``score``/``max_score``/
``output``/``visibility``), ``report.md`` and the student-facing ``report.html`` — each
written with ``harness.grading.safe_io.write_sealed``. ``harness.grading.grade`` scores; this
writes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.grading.safe_io import write_sealed
from harness.model import ItemScore

__all__ = ["Grade", "GradedTest", "write_page", "write_report", "write_results"]


@dataclass(frozen=True)
class GradedTest:
    """One entry of ``results.json``'s ``tests``."""

    name: str
    score: float
    max_score: float
    output: str
    visibility: str

    @property
    def points(self) -> ItemScore:
        """Its score as the reports show it (``n/a`` when not applicable)."""
        return ItemScore(self.score, self.max_score)


@dataclass(frozen=True)
class Grade:
    """The outcome: ``tests``, total ``score``/``max_score``, ``execution_time`` (seconds),
    a top-level ``output`` and the paths written."""

    tests: tuple[GradedTest, ...]
    score: float
    max_score: float
    execution_time: float
    output: str
    results_path: Path
    report_path: Path
    page_path: Path | None = None
    interrupted: bool = False  # SIGINT/SIGTERM cut the run short: nothing was scored


def write_results(tests: Sequence[GradedTest], out: Path, elapsed_s: float, output: str
                  ) -> Path:
    """Write Gradescope's ``results.json`` to ``out`` (replacing whatever is there)."""
    payload = {
        "score": round(sum(t.score for t in tests), 4),
        "execution_time": round(elapsed_s, 3),
        "output": output,
        "visibility": "visible",
        "tests": [{"name": t.name, "score": t.score, "max_score": t.max_score,
                   "output": t.output, "visibility": t.visibility} for t in tests],
    }
    return write_sealed(out, json.dumps(payload, indent=2) + "\n")


def write_report(tests: Sequence[GradedTest], path: Path, implementation: str,
                 output: str) -> Path:
    """The readable ``report.md`` next to ``results.json``; ``implementation`` names what
    was graded (``harness.grading.grade.grade``: no path of the grader's machine for a
    target)."""
    total = sum(t.score for t in tests)
    best = sum(t.max_score for t in tests)
    lines = [f"# Grade: {total:g} / {best:g}", "", f"Implementation: `{implementation}`", "",
             output, "", "| test | score |", "|---|---|"]
    lines += [f"| {t.name} | {t.points.shown} |" for t in tests]
    for t in tests:
        lines += ["", f"## {t.name} — {t.points.shown}", "", t.output]
    return write_sealed(path, "\n".join(lines) + "\n")


def write_page(tests: Sequence[GradedTest], path: Path, implementation: str,
               output: str) -> Path:
    """The student-facing ``report.html`` next to ``report.md``, in the style of the run's
    ``report.html`` (``harness.reports.html.render_grade``: jinja2 autoescape, so every
    string the implementation controls is escaped and its control characters spelled out).
    Written with ``write_sealed`` (O_EXCL|O_NOFOLLOW in a fresh folder, then rename), never
    a plain open, so a planted link is replaced, not followed. Links the run's own
    ``run/report.html`` when the run got that far.

    Raises:
        OSError: the folder cannot be written.
    """
    from harness.reports.html import render_grade

    total, best = sum(t.score for t in tests), sum(t.max_score for t in tests)
    run_page = path.parent / "run" / "report.html"
    page = render_grade(title=f"Grade: {total:g} / {best:g}", score=total, max_score=best,
                        implementation=implementation, output=output, tests=tests,
                        run_report="run/report.html" if run_page.is_file() else None)
    return write_sealed(path, page)
