"""Today's scenario tables as story steps: ``expand`` turns ``[human]``, ``[concurrency]``
and ``[storage]`` (with ``approve_at``, ``takeover_at``, ``lock_at``) into the ordered
steps the story engine interprets, so every shipped scenario keeps its meaning
(``docs/design.md``, "The story engine").

The story the tables describe (Chapter 8's timeline for O-1001):

1. a ``start`` worker runs the case until it parks; while a worker was killed before the
   human decided, a ``recheck`` worker resumes without approval (it must park again and
   send nothing). A v1 history instead runs ``migrate`` workers until the migration commits;
2. a bad checkpoint row, if the scenario injects one;
3. the human decides (approve — hours later, or twice —, reject, or a bad ticket); or,
   with ``approve_at``, approves mid-story when a worker reaches that point;
4. ``resume`` workers until one finishes without being killed: several at once, or a slow
   one held at ``takeover_at`` whose lease a ``takeover`` worker takes over.

A ``[target]`` with a ``decide`` function gets, right after the approval, ``decide``
workers until one is not killed (the harness playing the human tells the target, e.g. a
DBOS message); ``harness.targets.spec`` refuses the tables a target cannot follow.
"""

from __future__ import annotations

from dataclasses import replace

from harness.model import (
    NOTE_GATE,
    ClockStep,
    HoldStep,
    HumanAction,
    HumanStep,
    ReleaseStep,
    Scenario,
    Step,
    StorageFault,
    StorageStep,
    TargetRole,
    TicketKind,
    Wait,
    When,
    WorkerRole,
    WorkersStep,
)

__all__ = ["SAME_OWNER", "expand", "story_of"]

#: The one lease owner id of ``concurrency.same_owner``.
SAME_OWNER = "worker-0"


def story_of(s: Scenario) -> tuple[Step, ...]:
    """The steps of ``s``: its ``[[story]]`` if it has one, else ``expand(s)``."""
    return s.story or expand(s)


def expand(s: Scenario) -> tuple[Step, ...]:
    """The steps the shorthand tables of ``s`` describe (see the module docstring)."""
    steps = _expand(s)
    if s.same_owner:  # a restarted worker reuses its identity: every one leases as worker-0
        steps = [replace(st, owner=SAME_OWNER) if isinstance(st, WorkersStep) else st
                 for st in steps]
    return tuple(steps)


def _expand(s: Scenario) -> list[Step]:
    steps: list[Step] = []
    if s.approve_at is not None:  # armed first: it fires whenever a worker gets there
        steps.append(HumanStep(at=s.approve_at, delay_hours=s.approve_delay_h))
    if s.storage_fault is StorageFault.LOCK:
        steps.append(StorageStep(StorageFault.LOCK, at=s.lock_at, ms=s.lock_ms))
    if s.storage_fault is StorageFault.V1_CHECKPOINT:
        steps += [StorageStep(StorageFault.V1_CHECKPOINT),
                  WorkersStep(WorkerRole.MIGRATE, recover=WorkerRole.MIGRATE)]
    else:
        steps.append(WorkersStep(WorkerRole.START, recover=WorkerRole.RECHECK))
    if s.storage_fault.corrupts_row:
        steps.append(StorageStep(s.storage_fault))
    if s.approve_at is None:
        if s.human_action is HumanAction.REJECT and s.reject_feedback is not None:
            # rejected with feedback: the loop redrafts and parks; the human approves that
            steps += [HumanStep(HumanAction.REJECT, feedback=s.reject_feedback),
                      WorkersStep(WorkerRole.RECHECK, recover=WorkerRole.RECHECK),
                      HumanStep(delay_hours=s.approve_delay_h)]
            steps += _decide(s)
        elif s.human_action is HumanAction.REJECT:
            steps.append(HumanStep(HumanAction.REJECT))
        elif s.ticket is TicketKind.ISSUED:
            steps.append(HumanStep(delay_hours=s.approve_delay_h, twice=s.approve_twice))
            if s.order_note:  # the case's second gate: approved right after the email's
                steps.append(HumanStep(gate=NOTE_GATE))
            steps += _decide(s)
        else:
            steps.append(HumanStep(ticket=s.ticket))
    steps += _resume(s)
    return steps


def _decide(s: Scenario) -> list[Step]:
    """After an approval: a target told the decision by a worker of its own (a DBOS
    message) gets ``decide`` workers until one is not killed."""
    if s.target is not None and s.target.has(TargetRole.DECIDE):
        return [WorkersStep(WorkerRole.DECIDE, recover=WorkerRole.DECIDE)]
    return []


def _resume(s: Scenario) -> list[Step]:
    resume = WorkerRole.RESUME
    if s.takeover_at is not None:
        return [HoldStep(s.takeover_at),
                WorkersStep(resume, wait=Wait.HELD),
                ClockStep(),
                WorkersStep(WorkerRole.TAKEOVER),
                ReleaseStep(s.takeover_at),
                ClockStep(when=When.KILLED),
                WorkersStep(resume, recover=resume, when=When.KILLED)]
    if s.resumers > 1:
        return [WorkersStep(resume, count=s.resumers, together=True),
                ClockStep(when=When.KILLED),
                WorkersStep(resume, recover=resume, when=When.KILLED)]
    return [WorkersStep(resume, recover=resume)]
