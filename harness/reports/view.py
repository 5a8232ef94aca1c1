"""What the human-facing reports show, computed once from a run: ``report.md``,
``report.html`` and the CI step summary all render these frozen views.

- ``scenario_rows``: one row per scenario (counts, verdict, which points went wrong) — the
  first thing a reader needs, before any per-execution row.
- ``single_grid``/``double_grids``: scenarios × kill points, and first × second kill per
  double-crash scenario, each cell an execution and its verdict.
- ``delivery_outcome``: one execution's deliveries against what its scenario expects, so
  an expected zero-delivery case (a rejection, a refused ticket) is never listed as a lost
  or duplicate send, nor an execution cut short before it could send (its own kind,
  ``unknown``: the evidence does not show a loss).
- ``lanes``: an execution's trace as one lane per worker plus the human and the harness.

Text an implementation or a scenario controls passes through ``visible`` here or at the
writer; HTML escaping is the template engine's (jinja2 autoescape).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.model import (
    NO_KEY,
    CheckId,
    CheckStatus,
    Counts,
    EventKind,
    KillPoint,
    Verdict,
    roll_up,
)

if TYPE_CHECKING:
    from harness.model import Event, ExecutionResult, RunResult

__all__ = [
    "NO_KEY", "OUTCOME_TEXT", "VERDICT_ORDER", "Cell", "DeliveryOutcome", "Grid", "Lane",
    "LaneMark",
    "ScenarioRow", "delivery_outcome", "double_grids", "lanes", "ordered",
    "scenario_rows", "single_grid",
]

#: How a send without an ``Idempotency-Key`` header is spelled in human-facing reports.
#: Failures first, then unknowns, then passes: the order a reader wants.
VERDICT_ORDER = {Verdict.FAIL: 0, Verdict.UNKNOWN: 1, Verdict.PASS: 2}


class DeliveryOutcome(enum.StrEnum):
    """An execution's deliveries against its scenario's ``expect.deliveries``."""

    AS_EXPECTED = "as_expected"      # exactly what the scenario expects (usually one)
    NONE_EXPECTED = "none_expected"  # zero, and the scenario expects zero (not a loss)
    DUPLICATE = "duplicate"          # two or more
    LOST = "lost"                    # zero where one was expected, on complete evidence
    UNKNOWN = "unknown"              # zero where one was expected, but cut short / gaps
    UNEXPECTED = "unexpected"        # one where the scenario expects none


#: How each outcome reads in a sentence ("0 deliveries, <text>"): the console, report.md
#: and report.html say the same.
OUTCOME_TEXT: dict[DeliveryOutcome, str] = {
    DeliveryOutcome.AS_EXPECTED: "as expected",
    DeliveryOutcome.NONE_EXPECTED: "none expected",
    DeliveryOutcome.DUPLICATE: "duplicate",
    DeliveryOutcome.LOST: "lost",
    DeliveryOutcome.UNKNOWN: ("not known: the execution was cut short or its evidence has "
                              "gaps (not a lost send)"),
    DeliveryOutcome.UNEXPECTED: "unexpected",
}


#: The checks that judge how many emails were delivered: a ``fail`` execution is a lost
#: send only when they decided it (one undecided — the story cut short — leaves the count
#: unknown, whatever else failed).
COUNT_CHECKS = frozenset({CheckId.EXACTLY_ONE_DELIVERY, CheckId.SAME_KEY_ONE_DELIVERY})


def delivery_outcome(result: ExecutionResult) -> DeliveryOutcome:
    """Classify ``result``'s gateway deliveries (from the gateway's own log).

    Zero deliveries where the scenario expects some is ``LOST`` only when the verdict
    rests on the evidence: a ``fail`` (or a demo's expected failure). An ``unknown``
    execution — the story cut short (a worker's deadline, a fork server gone, the human
    unable to act), a file the harness could not read, a kill point never reached — is
    ``UNKNOWN``: the send may simply not have had the chance to happen, and the evidence
    does not show the loop losing it. The same for any verdict but ``fail`` on evidence
    with gaps, and for a ``fail`` whose delivery checks (``COUNT_CHECKS``) are undecided:
    it failed for another reason."""
    ev = result.evidence
    got, want = ev.deliveries, ev.expected_deliveries
    if got >= 2:
        return DeliveryOutcome.DUPLICATE
    if got == want:
        return DeliveryOutcome.NONE_EXPECTED if got == 0 else DeliveryOutcome.AS_EXPECTED
    if got:
        return DeliveryOutcome.UNEXPECTED
    verdict = result.verdict
    incomplete = ev.cut_short or bool(ev.gaps)
    if verdict is Verdict.UNKNOWN or (verdict is not Verdict.FAIL and incomplete):
        return DeliveryOutcome.UNKNOWN
    if any(c.check_id in COUNT_CHECKS and c.status is CheckStatus.UNDECIDED
           for c in result.checks):  # failed for another reason; the count is not known
        return DeliveryOutcome.UNKNOWN
    return DeliveryOutcome.LOST


def ordered(results: Sequence[ExecutionResult]) -> list[tuple[int, ExecutionResult]]:
    """``(run index, result)`` with failures first, then unknowns, then passes (run order
    within each); the index names the execution's anchor (``x<index>``)."""
    return sorted(enumerate(results), key=lambda p: (VERDICT_ORDER[p[1].verdict], p[0]))


@dataclass(frozen=True)
class ScenarioRow:
    """One scenario of the run: ``counts`` of its executions' verdicts, ``verdict`` their
    roll-up; ``bad`` are the ``(index, schedule id, verdict)`` of its failing and unknown
    executions."""

    name: str
    description: str
    path: str | None
    executions: int
    counts: Counts
    verdict: Verdict
    deliveries: str
    bad: tuple[tuple[int, str, Verdict], ...]


def scenario_rows(run: RunResult) -> list[ScenarioRow]:
    """One ``ScenarioRow`` per scenario, in run order."""
    groups: dict[str, list[tuple[int, ExecutionResult]]] = {}
    for i, r in enumerate(run.results):
        groups.setdefault(r.plan.scenario.name, []).append((i, r))
    rows = []
    for name, members in groups.items():
        scenario = members[0][1].plan.scenario
        counts = Counts.of(r.verdict for _, r in members)
        verdict = roll_up(r.verdict for _, r in members)
        spread: dict[int, int] = {}
        for _, r in members:
            spread[r.evidence.deliveries] = spread.get(r.evidence.deliveries, 0) + 1
        want = ("a duplicate: its kills must duplicate"  # a demo such as demo-keys-off
                if CheckId.EXACTLY_ONE_DELIVERY in scenario.expect_failing
                else scenario.expect_deliveries)
        deliveries = ", ".join(f"{n}×{d}" for d, n in sorted(spread.items()))
        rows.append(ScenarioRow(
            name=name, description=scenario.description,
            path=str(scenario.path) if scenario.path else None, executions=len(members),
            counts=counts, verdict=verdict, deliveries=f"{deliveries} (expects {want})",
            bad=tuple((i, r.plan.schedule.id, r.verdict) for i, r in members
                      if r.verdict is not Verdict.PASS)))
    return rows


@dataclass(frozen=True)
class Cell:
    """One execution in a grid: its run ``index`` (anchor ``x<index>``), ``id``, ``verdict``
    and ``expected`` (a demo whose expected failures happened)."""

    index: int
    id: str
    verdict: Verdict
    expected: bool


@dataclass(frozen=True)
class Grid:
    """``rows`` of ``(name, cells)``, one cell (or ``None``: not run) per column."""

    title: str
    corner: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[Cell | None, ...]], ...]
    scenario: str | None = None  # the one scenario of a double grid (rows are kill points)


def _point_key(point: str) -> tuple[int, int]:
    """A grid column's place on the timeline (``KillPoint.timeline_key``)."""
    return KillPoint.parse(point).timeline_key


def _cell(i: int, r: ExecutionResult) -> Cell:
    expected = any(not c.passed and c.check_id in r.plan.expected_failing for c in r.checks)
    return Cell(i, r.plan.id, r.verdict, expected)


def single_grid(run: RunResult) -> Grid:
    """Scenarios × (no kill and every single kill point run), in timeline order."""
    cells: dict[str, dict[str, Cell]] = {}
    points: set[str] = set()
    for i, r in enumerate(run.results):
        kills = r.plan.schedule.kills
        if len(kills) > 1:
            continue
        column = str(kills[0]) if kills else "no-kill"
        cells.setdefault(r.plan.scenario.name, {})[column] = _cell(i, r)
        if kills:
            points.add(column)
    columns = ("no-kill", *sorted(points, key=_point_key))
    rows = tuple((name, tuple(row.get(c) for c in columns)) for name, row in cells.items())
    return Grid("Single kills", "scenario \\ kill point", columns, rows)


def double_grids(run: RunResult) -> list[Grid]:
    """Per scenario with two-kill executions: first kill (rows) × second kill (columns).
    Schedules of three or more kills are listed by ``multi_kills``."""
    by_scenario: dict[str, dict[tuple[str, str], Cell]] = {}
    for i, r in enumerate(run.results):
        kills = r.plan.schedule.kills
        if len(kills) == 2:
            by_scenario.setdefault(r.plan.scenario.name, {})[(str(kills[0]),
                                                              str(kills[1]))] = _cell(i, r)
    grids = []
    for name, cells in by_scenario.items():
        firsts = sorted({a for a, _ in cells}, key=_point_key)
        seconds = sorted({b for _, b in cells}, key=_point_key)
        rows = tuple((a, tuple(cells.get((a, b)) for b in seconds)) for a in firsts)
        grids.append(Grid(f"Double kills: {name}", "first \\ second kill", tuple(seconds),
                          rows, scenario=name))
    return grids


def multi_kills(run: RunResult) -> list[Cell]:
    """Executions of three or more kills (a scenario's own ``schedules``)."""
    return [_cell(i, r) for i, r in enumerate(run.results) if len(r.plan.schedule.kills) > 2]


@dataclass(frozen=True)
class LaneMark:
    """One trace event on a lane: ``pct`` is its time as a share (0–100) of the trace."""

    seq: int
    t_ms: float
    pct: float
    kind: str
    label: str
    detail: str


@dataclass(frozen=True)
class Lane:
    """One lane of a timeline: ``name`` (``w1 resume``, ``human``, ``harness``), the span
    it was alive as shares of the trace (``start_pct``, ``end_pct``) and its marks."""

    name: str
    start_pct: float
    end_pct: float
    marks: tuple[LaneMark, ...]


def lanes(result: ExecutionResult) -> tuple[float, list[Lane]]:
    """``(trace length in ms, lanes)``: a lane per worker in launch order, then ``human``
    (approvals, decisions, tickets offered) and ``harness`` (injected rows, locks,
    errors), each only if it has events. Deliveries sit on the sending worker's lane."""
    ev = result.evidence
    events: Sequence[Event] = ev.events
    total = max((e.t_ms for e in events), default=0.0) or 1.0

    def pct(t: float) -> float:
        return round(100.0 * t / total, 2)

    def mark(e: Event) -> LaneMark:
        return LaneMark(e.seq, e.t_ms, pct(e.t_ms), e.kind, e.label or "", e.detail)

    out = []
    for w in ev.workers:
        mine = [e for e in events if e.worker == w.index]
        start = next((e.t_ms for e in mine if e.kind == EventKind.WORKER_START), None)
        end = next((e.t_ms for e in reversed(mine) if e.kind == EventKind.WORKER_EXIT), None)
        first = mine[0].t_ms if mine else 0.0
        out.append(Lane(f"w{w.index} {w.role}", pct(start if start is not None else first),
                        pct(end if end is not None else total),
                        tuple(mark(e) for e in mine)))
    human = [e for e in events
             if e.worker is None and e.kind in (EventKind.APPROVE, EventKind.HUMAN)]
    rest = [e for e in events if e.worker is None and e not in human]
    for name, group in (("human", human), ("harness", rest)):
        if group:
            out.append(Lane(name, 0.0, 100.0, tuple(mark(e) for e in group)))
    return total, out
