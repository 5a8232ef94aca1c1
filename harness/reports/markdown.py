"""``report.md``: the report a reviewer reads as text (docs/design.md, "Reports").

A title with the verdict and counts; one row per scenario (its verdict, counts, deliveries
and the schedules that went wrong) before any per-execution row; one section per execution
worth reading — failed, then unknown, then a demo whose expected failures happened — with
its reasons, failing checks and their evidence, the trace drawn as a timeline and the
replay command; every execution's checks (named in the column headers); then deliveries
other than one: duplicates, lost sends, zero deliveries not known to be lost (cut short,
or gaps in the evidence), unexpected sends, and apart from them the zero-delivery outcomes
a scenario expects. A missing idempotency key is spelled
``(no key)`` everywhere; control characters from the implementation are made visible.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.judge.checks.registry import CHECK_IDS
from harness.model import CheckStatus, Event, EventKind, ExecutionResult, RunResult, Verdict
from harness.reports.base import (
    duplicate_entries,
    failing_checks,
    is_expected,
    power_note,
    undecided_checks,
    workdir_text,
    write_atomic,
)
from harness.reports.text import visible, visible_line
from harness.reports.view import (
    NO_KEY,
    DeliveryOutcome,
    delivery_outcome,
    ordered,
    scenario_rows,
)

__all__ = ["PASS", "Markdown", "render", "timeline"]

PASS = Verdict.PASS

_MARKS = {EventKind.KILL: "*** SIGKILL", EventKind.DELIVERY: ">>> delivery",
          EventKind.POWER_CUT: "*** POWER CUT"}


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
    """Free text: control characters made visible, ``<`` escaped (no raw HTML), on one
    line (a newline would end a list item or a table row)."""
    return visible_line(text).replace("<", "&lt;")


def timeline(result: ExecutionResult) -> list[str]:
    """One line per trace event: time, worker, kind (kills and deliveries marked), label,
    detail — ``    751.7 ms  w1 resume   *** SIGKILL   t6.gateway_accepted  SIGKILL at …``."""
    ev = result.evidence
    roles = {w.index: w.role for w in ev.workers}
    width = max((len(e.label or "") for e in ev.events), default=0)

    def who(e: Event) -> str:
        if e.worker is not None:
            return f"w{e.worker} {roles.get(e.worker, '?')}"
        return "human" if e.kind in (EventKind.APPROVE, EventKind.HUMAN) else "harness"

    return [f"{e.t_ms:9.1f} ms  {who(e):<10} {_MARKS.get(e.kind, e.kind):<13} "
            f"{e.label or '':<{width}}  {visible_line(e.detail)}".rstrip() for e in ev.events]


def _scenarios(run: RunResult) -> list[str]:
    lines = ["| scenario | verdict | executions | fail | unknown | pass | deliveries (count×n) "
             "| failing and unknown schedules |", "|---|---|---|---|---|---|---|---|"]
    for s in scenario_rows(run):
        bad = ", ".join(_code(sched, True) for _, sched, _ in s.bad[:8])
        if len(s.bad) > 8:
            bad += f" … {len(s.bad) - 8} more"
        verdict = s.verdict if s.verdict == PASS else f"**{s.verdict}**"
        lines.append(f"| {_code(s.name, True)} | {verdict} | {s.executions} | {s.counts.failed} "
                     f"| {s.counts.unknown} | {s.counts.passed} | {s.deliveries} "
                     f"| {bad or '–'} |")
    return lines


def _matrix(run: RunResult) -> list[str]:
    head = ["execution", *CHECK_IDS, "deliveries", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in run.results:
        marks = {c.check_id: "n/a" if c.status is CheckStatus.NOT_APPLICABLE else "✓" if c.passed
                 else "?" if c.undecided else "✗*" if is_expected(r, c.check_id)
                 else "✗" for c in r.checks}
        power = f" ({power_note(r).strip()})" if power_note(r) else ""
        twin = f" ≡ {_code(r.equivalent_to, True)}" if r.equivalent_to else ""
        cells = [_code(r.plan.id, True) + power + twin, *(marks.get(c, "–") for c in CHECK_IDS),
                 str(r.evidence.deliveries), f"**{r.verdict}**" if r.verdict != PASS
                 else r.verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", "✓ passed, ✗ failed, ✗* failed as the scenario expects, ? undecided (its "
            "evidence is missing), n/a not applicable (the target does not expose the state it "
            "needs), – not run; ≡ X: proven equivalent to X (its first crash left X's state) "
            "and not run."]


def _section(r: ExecutionResult) -> list[str]:
    plan = r.plan
    source = f" from {_code(visible_line(str(plan.scenario.path)))}" if plan.scenario.path else ""
    out = [f"### {_code(plan.id)} — {r.verdict}", "",
           f"Scenario {_code(plan.scenario.name)}{source}, schedule {_code(plan.schedule.id)}"
           f"{f' ({power_note(r).strip()})' if power_note(r) else ''}, "
           f"{r.evidence.deliveries} delivery(ies), {r.elapsed_s:.2f} s, "
           f"workdir {_code(visible_line(workdir_text(r)))}.", ""]
    if r.equivalent_to:
        out += [f"Not run: equivalent to {_code(r.equivalent_to)} (its first crash left the "
                "same durable state); what follows is that execution's.", ""]
    out += ["Reasons:", ""]
    out += [f"- {_prose(reason)}" for reason in r.reasons] or ["- (none)"]
    for c in undecided_checks(r):
        out += ["", f"#### {_code(c.check_id)} undecided", "",
                _prose(c.undecided or "")]
    for c in failing_checks(r):
        note = " (expected by the scenario)" if is_expected(r, c.check_id) else ""
        out += ["", f"#### {_code(c.check_id)} failed{note}", "", _prose(c.detail), ""]
        out += _fence(visible("\n".join(c.evidence)) or "(no evidence lines)")
    out += ["", "Timeline:", "", *_fence("\n".join(timeline(r)) or "(no events)")]
    return [*out, "", "Replay:", "", *_fence(visible(plan.replay), "sh"), ""]


def _sends(entry: dict[str, Any]) -> str:
    return "; ".join(
        f"{s['delivery_id']} by "
        + (f"w{s['worker']} {s['worker_role']}, " if s["worker"] is not None
           else "an unknown worker, ")
        + (f"after kill at {s['after_kill']}" if s["after_kill"] else "before any kill")
        + f", key {s['idempotency_key'] or NO_KEY}"
        for s in entry["sends"]) or "none"


_DELIVERY_TITLES = {
    DeliveryOutcome.DUPLICATE: "Duplicate sends (two or more deliveries)",
    DeliveryOutcome.LOST: "Lost sends (no delivery where one was expected)",
    DeliveryOutcome.UNKNOWN: ("No delivery, not known to be lost (the execution was cut "
                              "short or its evidence has gaps)"),
    DeliveryOutcome.UNEXPECTED: "Sent although the scenario expects no delivery",
}


def _deliveries(run: RunResult) -> list[str]:
    entries = {e["id"]: e for e in duplicate_entries(run)}
    out: list[str] = []
    for kind, title in _DELIVERY_TITLES.items():
        mine = [r for r in run.results if delivery_outcome(r) is kind]
        out += [f"### {title}: {len(mine)}", ""]
        if not mine:
            continue
        out += ["| execution | verdict | deliveries | keys | sends | replay |",
                "|---|---|---|---|---|---|"]
        for r in mine:
            e = entries[r.plan.id]
            keys = ", ".join(NO_KEY if k is None else k for k in e["keys"]) or "none sent"
            out.append(f"| {_code(r.plan.id, True)} | {r.verdict} | {e['deliveries']} "
                       f"| {_code(visible_line(keys), True)} | {_prose(_sends(e))} "
                       f"| {_code(visible_line(r.plan.replay), True)} |")
        out.append("")
    expected = [r for r in run.results if delivery_outcome(r) is DeliveryOutcome.NONE_EXPECTED]
    by_scenario: dict[str, int] = {}
    for r in expected:
        by_scenario[r.plan.scenario.name] = by_scenario.get(r.plan.scenario.name, 0) + 1
    out += [f"### No delivery, as the scenario expects: {len(expected)}", ""]
    if by_scenario:
        out += ["Not a lost send: these scenarios expect nothing to be sent (a rejection, a "
                "refused ticket, a checkpoint that must fail closed). "
                + ", ".join(f"{_code(name)} ×{n}" for name, n in by_scenario.items()) + ".",
                ""]
    return out


def render(run: RunResult) -> str:
    """The whole report as Markdown text: verdict, per-scenario summary, the executions to
    look at (failures, then unknowns, then demos whose expected failures happened), the
    checks of every execution, then the deliveries other than one."""
    verdict = run.verdict
    state = " (INTERRUPTED)" if run.interrupted else ""
    out = [f"# shopops-chaos run {run.run_id}: {verdict.upper()}{state}", "",
           f"**{verdict.upper()}**{state} — {run.counts.sentence()} ({len(run.results)} "
           f"executions, {run.elapsed_s:.1f} s, "
           f"launcher {run.launcher}, started {run.started_at or 'n/a'}).", ""]
    eq = run.equivalence
    if eq.equivalent or eq.mismatches:
        out += [f"Crash states counted once: {eq.run} executions run, {eq.equivalent} proven "
                f"equivalent to one run and not run ({eq.sampled} of them run all the same, "
                "as a check); `--exhaustive` runs them all.", ""]
    out += [f"> HARNESS ERROR (equivalence): {_prose(line)}" for line in eq.mismatches]
    if run.interrupted:
        out += ["> The run was interrupted: only the executions that finished are here, "
                "and its verdict is unknown.", ""]
    out += [f"> **Not a full run:** {_prose(line)}. Its verdict is never a pass." for line
            in run.shortfall()]
    out += [""] if run.shortfall() else []
    out += ["## Scenarios", "", *_scenarios(run), ""]
    if run.skipped:
        out += ["Not run (the schedule is not in their kill matrix): "
                + ", ".join(_code(name) for name, _ in run.skipped) + ".", ""]
    worth = [r for _, r in ordered(run.results) if r.verdict != PASS or failing_checks(r)]
    out += ["## Executions to look at", ""]
    for r in worth:
        out += _section(r)
    if not worth:
        out += ["None: every execution passed every check.", ""]
    out += ["## Checks per execution", "", *_matrix(run), ""]
    out += ["## Deliveries other than one", "", *_deliveries(run)]
    return "\n".join(out).rstrip("\n") + "\n"


class Markdown:
    """Writes ``report.md``."""

    name = "markdown"
    filename = "report.md"

    def write(self, run: RunResult, out_dir: Path) -> Path:
        """Write ``out_dir/report.md``; return its path."""
        return write_atomic(out_dir / self.filename, render(run))
