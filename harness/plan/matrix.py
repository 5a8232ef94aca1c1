"""The kill matrix: learn the kill points from a trace run, then plan one execution each.

The trace run is the no-kill execution of a scenario. Every failpoint hit it records
(worker side, over the channel) and every delivery its gateway makes (gateway side,
``t6.gateway_accepted``) is a kill point, numbered per label in order (``#2`` is the second
hit). So a label added to ``shopops_contract.labels`` and called in the loop becomes a kill point
without touching the harness.
"""

from __future__ import annotations

from dataclasses import replace

from harness.model import (
    REFERENCE,
    CrashSchedule,
    EventKind,
    Evidence,
    ExecutionPlan,
    KillPoint,
    Scenario,
    Sut,
    number_trace,
)

__all__ = ["double_kill_plans", "points_after_first_kill", "points_from_trace",
           "single_kill_plans"]


def points_from_trace(trace: Evidence) -> tuple[KillPoint, ...]:
    """Every (label, occurrence) the trace passed, in the order reached.

    Args:
        trace: the evidence of a no-kill execution.
    """
    return tuple(point for _, point in number_trace(trace.events))


def single_kill_plans(scenario: Scenario, reached: tuple[KillPoint, ...],
                      sut: Sut = REFERENCE) -> list[ExecutionPlan]:
    """One plan per kill point: the scenario's own list if it has one (a listed point the
    trace never reached still runs, and comes out ``unknown``), else every reached point;
    then the scenario's extra multi-kill schedules. A schedule listed twice runs once."""
    points = scenario.points if scenario.points is not None else reached
    schedules = [CrashSchedule((p,)) for p in points] + list(scenario.schedules)
    unique = dict.fromkeys(s for s in schedules if s.kills)  # once each, in order
    return [ExecutionPlan(scenario, s, sut) for s in unique]


def points_after_first_kill(ev: Evidence) -> tuple[KillPoint, ...]:
    """The kill points the recovery from an execution's first kill passed, numbered from
    that kill (the way a second kill of a schedule counts its hits)."""
    first = next((e.seq for e in ev.events if e.kind == EventKind.KILL), None)
    if first is None:
        return ()
    return tuple(point for _, point in number_trace(ev.events, after=first))


def double_kill_plans(first: ExecutionPlan, evidence: Evidence) -> list[ExecutionPlan]:
    """The double-crash matrix row of one single-kill execution: its kill, then a second
    kill at every point its recovery reached (learned from its own trace, not written by
    hand)."""
    if len(first.schedule.kills) != 1:
        return []
    (kill,) = first.schedule.kills
    return [replace(first, schedule=CrashSchedule((kill, second)))
            for second in dict.fromkeys(points_after_first_kill(evidence))]
