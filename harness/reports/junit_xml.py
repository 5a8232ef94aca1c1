"""``junit.xml``: one JUnit test case per execution, xunit2 as pytest writes it.

``<testsuites>`` holds one ``<testsuite name="shopops-chaos">``; each execution is a
``<testcase classname="<scenario>" name="<plan id>">``. ``fail`` gives ``<failure>``,
``unknown`` gives ``<error>`` (unknown is never a pass), and every case carries its replay
command as a ``<property name="replay">`` (pytest's ``record_property`` shape) and in
``<system-out>``; ``time`` is the execution's own wall time in seconds. A run that was
interrupted or ran nothing adds one ``<error>`` case, so CI never reads it as green.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from harness.model import ExecutionResult, RunResult, Verdict
from harness.reports.base import (
    failing_checks,
    undecided_checks,
    write_atomic,
)
from harness.reports.text import visible

__all__ = ["SUITE", "JunitXml", "failure_text", "junit_tree"]

FAIL, UNKNOWN = Verdict.FAIL, Verdict.UNKNOWN

SUITE = "shopops-chaos"


def _clean(text: str) -> str:
    """Characters XML 1.0 cannot carry (worker stderr may hold any byte) and terminal
    controls, spelled out (``harness.reports.text.visible``); pytest escapes them too."""
    return visible(text)


def failure_text(result: ExecutionResult) -> str:
    """The body of ``<failure>``/``<error>``: reasons, failing checks with their evidence,
    and the replay command."""
    lines = list(result.reasons)
    for check in failing_checks(result):
        lines.append(f"[{check.check_id}] {check.detail}")
        lines += [f"    {line}" for line in check.evidence]
    for check in undecided_checks(result):
        lines.append(f"[{check.check_id}] undecided: {check.undecided}")
    lines.append(f"replay: {result.plan.replay}")
    return "\n".join(lines)


def _testcase(suite: ET.Element, result: ExecutionResult) -> None:
    case = ET.SubElement(suite, "testcase", classname=result.plan.scenario.name,
                         name=result.plan.id, time=f"{result.elapsed_s:.3f}")
    props = ET.SubElement(case, "properties")
    for name, value in (("replay", result.plan.replay), ("verdict", result.verdict),
                        ("deliveries", str(result.evidence.deliveries)),
                        ("workdir", result.evidence.workdir)):
        if value:  # no workdir: a passing execution whose files were not kept
            ET.SubElement(props, "property", name=name, value=_clean(value))
    first = result.reasons[0] if result.reasons else result.verdict
    if result.verdict == FAIL:
        node = ET.SubElement(case, "failure", message=_clean(first))
        node.text = _clean(failure_text(result))
    elif result.verdict == UNKNOWN:
        node = ET.SubElement(case, "error", message=_clean(f"unknown: {first}"))
        node.text = _clean(failure_text(result))
    out = ET.SubElement(case, "system-out")
    out.text = _clean("\n".join([f"replay: {result.plan.replay}", *result.reasons]))


def junit_tree(run: RunResult) -> ET.Element:
    """The JUnit document for the run (deterministic: no host name, run order)."""
    n = run.counts
    incomplete = run.incomplete or not run.results
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=SUITE,
                          errors=str(n.unknown + int(incomplete)), failures=str(n.failed),
                          skipped="0", tests=str(len(run.results) + int(incomplete)),
                          time=f"{run.elapsed_s:.3f}", timestamp=run.started_at)
    for result in run.results:
        _testcase(suite, result)
    if incomplete:
        why = ("the run was interrupted" if run.interrupted
               else "; ".join(run.shortfall()) if run.gaps else "the run had no executions")
        case = ET.SubElement(suite, "testcase", classname=SUITE, name="run", time="0.000")
        ET.SubElement(case, "error", message=f"unknown: {why}").text = (
            f"run {run.run_id}: {why}; its verdict is unknown")
    ET.indent(root)
    return root


class JunitXml:
    """Writes ``junit.xml``."""

    name = "junit"
    filename = "junit.xml"

    def write(self, run: RunResult, out_dir: Path) -> Path:
        """Write ``out_dir/junit.xml``; return its path."""
        body = ET.tostring(junit_tree(run), encoding="unicode")
        return write_atomic(out_dir / self.filename,
                            '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n")
