"""A kill matrix learned from an execution that was cut short (a trace run past its
workers' ``--timeout``) holds only the points it reached: the run says so in the console,
``summary.json``, ``report.md``, ``report.html`` and ``junit.xml``, and is never a pass."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from harness.model import EventKind, ExecutionResult, MatrixGap, RunResult, Verdict
from harness.plan.scenario import load_scenario
from harness.run import runner

ROOT = Path(__file__).resolve().parent.parent

# points learned from the trace run; the trace itself is not reported (baseline = false)
LEARNED = """
name = "learned"
description = "O-1001 killed at every point its trace run reaches"

[crash]
points = "all"
baseline = false
"""


def test_a_matrix_learned_from_a_trace_cut_short_is_never_a_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace run is cut short after two kill points (as by its deadline): both are
    killed at and pass, and the trace itself is not reported. Every execution that ran
    passed, yet the run is unknown: the points after those two were never planned."""
    path = tmp_path / "learned.toml"
    path.write_text(LEARNED)
    real = runner.execute

    def cut_trace(plan, home, **kw):  # type: ignore[no-untyped-def]
        res: ExecutionResult = real(plan, home, **kw)
        if plan.schedule.kills:
            return res
        hits = [i for i, e in enumerate(res.evidence.events) if e.kind == EventKind.HIT]
        ev = replace(res.evidence, events=res.evidence.events[:hits[1] + 1],
                     errors=("worker 0 (start) passed its 0.5 s deadline",))
        return replace(res, evidence=ev, verdict=Verdict.UNKNOWN)

    monkeypatch.setattr(runner, "execute", cut_trace)
    result = runner.run([load_scenario(path)], tmp_path / "run", jobs=2)
    assert [r.verdict for r in result.results] == [Verdict.PASS, Verdict.PASS], [
        (r.plan.id, r.reasons) for r in result.results]
    (gap,) = result.gaps
    assert (gap.scenario, gap.learned_from, gap.reached) == ("learned", "learned[no-kill]", 2)
    assert "passed its 0.5 s deadline" in gap.why
    assert result.verdict is Verdict.UNKNOWN
    assert result.exit_status == 2


def test_a_run_with_a_gap_and_only_passes_is_unknown() -> None:
    """The roll-up itself: no execution failed or is unknown, but the matrix has a gap."""
    gap = MatrixGap("o1001", "o1001[no-kill]", "worker 0 (start) passed its 1 s deadline", 3,
                    deadline=True)
    run = RunResult("r", Path("r"), gaps=(gap,))
    assert run.incomplete and run.verdict is Verdict.UNKNOWN and run.exit_status == 2
    (line,) = run.shortfall()
    assert "o1001: kill matrix incomplete" in line and "after 3 kill point(s)" in line
    assert "--timeout" in line
    assert RunResult("r", Path("r"), not_run=4, interrupted=True).shortfall() == (
        "4 planned execution(s) not run: the run was interrupted",)


def test_a_timeout_that_expires_in_the_trace_run_says_the_matrix_was_not_run(
        tmp_path: Path) -> None:
    """``shopops-chaos run --timeout 0.001``: the trace run's first worker passes its
    deadline before any kill point, so nothing of the kill matrix is planned. Every output
    says so, and the exit status is 2 (unknown), never 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(ROOT / "scenarios" / "o1001.toml"),
         "--timeout", "0.001", "--report-dir", "r"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "KILL MATRIX INCOMPLETE" in proc.stdout
    assert ("NOT A FULL RUN: o1001: kill matrix incomplete: o1001[no-kill] was cut short "
            "(worker 0 (start) passed its 0.001 s deadline)") in proc.stdout, proc.stdout
    latest = tmp_path / "r" / "latest"
    summary = json.loads((latest / "summary.json").read_text())
    assert summary["verdict"] == "unknown"
    (gap,) = summary["incomplete_matrices"]
    assert (gap["scenario"], gap["learned_from"], gap["deadline"]) == (
        "o1001", "o1001[no-kill]", True)
    assert summary["shortfall"] and summary["not_run"] == 0
    for report in ("report.md", "report.html"):
        text = (latest / report).read_text()
        assert "Not a full run" in text and "kill matrix incomplete" in text, report
    suite = ET.parse(latest / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    run_case = [c for c in suite.iter("testcase") if c.get("name") == "run"]
    assert run_case and "kill matrix incomplete" in (run_case[0].find("error").text or "")
