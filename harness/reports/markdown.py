"""``report.md``: the report a reviewer opens (``docs/design.md``, "Duplicate-send report").

A title with the verdict and counts, a matrix (execution × check), one section per execution
worth reading — failed, unknown, or a demo whose expected failures happened — with its
reasons, failing checks and their evidence, the trace drawn as a timeline and the replay
command, then the duplicate sends.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.checks import CHECK_IDS
from harness.model import Event, ExecutionResult, RunResult, Verdict
from harness.reports.base import (
    counts,
    duplicate_entries,
    failing_checks,
    is_expected,
    write_atomic,
)

PASS = Verdict.PASS

_MARKS = {"kill": "*** SIGKILL", "delivery": ">>> delivery"}


def _code(text: str, cell: bool = False) -> str:
    """``text`` as an inline code span (``cell``: inside a table, where ``|`` is escaped)."""
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    span = f"{ticks}{pad}{text}{pad}{ticks}"
    return span.replace("|", "\\|") if cell else span


def _fence(body: str, info: str = "text") -> list[str]:
    """A fenced block longer than any backtick run inside ``body``."""
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", body)), default=0) + 1)
    return [f"{ticks}{info}", body, ticks]


def _prose(text: str) -> str:
    return text.replace("<", "&lt;")


def timeline(result: ExecutionResult) -> list[str]:
    """One line per trace event: time, worker, kind (kills and deliveries marked), label,
    detail — ``    751.7 ms  w1 resume   *** SIGKILL   t6.gateway_accepted  SIGKILL at …``."""
    ev = result.evidence
    roles = {w.index: w.role for w in ev.workers}
    width = max((len(e.label or "") for e in ev.events), default=0)

    def who(e: Event) -> str:
        if e.worker is not None:
            return f"w{e.worker} {roles.get(e.worker, '?')}"
        return "human" if e.kind == "approve" else "harness"

    return [f"{e.t_ms:9.1f} ms  {who(e):<10} {_MARKS.get(e.kind, e.kind):<13} "
            f"{e.label or '':<{width}}  {e.detail}".rstrip() for e in ev.events]


def _matrix(run: RunResult) -> list[str]:
    head = ["execution", *(str(i) for i in range(1, len(CHECK_IDS) + 1)), "deliveries",
            "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in run.results:
        marks = {c.check_id: "✓" if c.passed else "✗*" if is_expected(r, c.check_id) else "✗"
                 for c in r.checks}
        cells = [_code(r.plan.id, True), *(marks.get(c, "–") for c in CHECK_IDS),
                 str(r.evidence.deliveries), f"**{r.verdict}**" if r.verdict != PASS
                 else r.verdict]
        lines.append("| " + " | ".join(cells) + " |")
    legend = ", ".join(f"{i} {_code(c)}" for i, c in enumerate(CHECK_IDS, start=1))
    return [*lines, "", f"Checks: {legend}. ✓ passed, ✗ failed, ✗* failed as the scenario "
            "expects, – not run."]


def _section(r: ExecutionResult) -> list[str]:
    plan = r.plan
    source = f" from {_code(str(plan.scenario.path))}" if plan.scenario.path else ""
    out = [f"### {_code(plan.id)} — {r.verdict}", "",
           f"Scenario {_code(plan.scenario.name)}{source}, schedule {_code(plan.schedule.id)}, "
           f"{r.evidence.deliveries} delivery(ies), {r.elapsed_s:.2f} s, "
           f"workdir {_code(r.evidence.workdir)}.", "", "Reasons:", ""]
    out += [f"- {_prose(reason)}" for reason in r.reasons] or ["- (none)"]
    for c in failing_checks(r):
        note = " (expected by the scenario)" if is_expected(r, c.check_id) else ""
        out += ["", f"#### {_code(c.check_id)} failed{note}", "", _prose(c.detail), ""]
        out += _fence("\n".join(c.evidence) or "(no evidence lines)")
    out += ["", "Timeline:", "", *_fence("\n".join(timeline(r)) or "(no events)")]
    return [*out, "", "Replay:", "", *_fence(plan.replay, "sh"), ""]


def _duplicates(run: RunResult) -> list[str]:
    entries = duplicate_entries(run)
    if not entries:
        return ["Every execution got exactly one delivery.", ""]
    lines = ["| execution | kind | deliveries | keys | sends | replay |",
             "|---|---|---|---|---|---|"]
    for e in entries:
        sends = "; ".join(
            f"{s['delivery_id']} by "
            + (f"w{s['worker']} {s['worker_role']}, " if s["worker"] is not None
               else "an unknown worker, ")
            + (f"after kill at {s['after_kill']}" if s["after_kill"] else "before any kill")
            for s in e["sends"]) or "none"
        keys = ", ".join("null" if k is None else k for k in e["keys"]) or "none"
        lines.append(f"| {_code(e['id'], True)} | {e['kind']} | {e['deliveries']} "
                     f"| {_code(keys, True)} | {sends} | {_code(e['replay'], True)} |")
    return [*lines, ""]


def render(run: RunResult) -> str:
    """The whole report as Markdown text."""
    n = counts(run)
    out = [f"# shopops-chaos run {run.run_id}: {run.verdict.upper()}", "",
           f"**{run.verdict.upper()}** — {n['pass']} pass, {n['fail']} fail, "
           f"{n['unknown']} unknown ({len(run.results)} executions, {run.elapsed_s:.1f} s, "
           f"launcher {run.launcher}, started {run.started_at or 'n/a'}).", ""]
    if run.interrupted:
        out += ["> The run was interrupted: its verdict is unknown.", ""]
    out += ["## Matrix", "", *_matrix(run), ""]
    worth = [r for r in run.results if r.verdict != PASS or failing_checks(r)]
    out += ["## Executions to look at", ""]
    for r in worth:
        out += _section(r)
    if not worth:
        out += ["None: every execution passed every check.", ""]
    out += ["## Duplicate sends", "", *_duplicates(run)]
    return "\n".join(out).rstrip("\n") + "\n"


class Markdown:
    """Writes ``report.md``."""

    name = "markdown"
    filename = "report.md"

    def write(self, run: RunResult, out_dir: Path) -> Path:
        """Write ``out_dir/report.md``; return its path."""
        return write_atomic(out_dir / self.filename, render(run))
