"""The explorer's search space: what Hypothesis draws for one scenario
(``harness.explore.explorer``).

A ``Variant`` is one to three kills at labels the scenario's trace run reached, when the
approval lands, the mock gateway's faults and the policy; ``learn_space`` reads the labels
and the possible approval points from the trace, ``variants`` is the strategy that draws
(and shrinks) variants over it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from harness.model import (
    CrashSchedule,
    EventKind,
    Evidence,
    FaultKind,
    FaultSpec,
    KillPoint,
    Scenario,
    number_trace,
)
from harness.plan.matrix import points_from_trace
from harness.plan.scenario import impossible
from shopops.policy import POLICIES
from shopops_contract import labels
from shopops_contract.phases import Phase

__all__ = ["MAX_FAULTS", "MAX_KILLS", "MAX_OCCURRENCE", "Space", "Variant", "learn_space",
           "variant_name", "variants"]

#: Fault choices, the least disruptive first (Hypothesis shrinks towards the first).
_LATENCY_MS = (10, 100, 400)
_STATUSES = (500, 502, 503, 504)
#: At most this many faults: the client makes three attempts per send.
MAX_FAULTS = 2
MAX_KILLS = 3
MAX_OCCURRENCE = 3


@dataclass(frozen=True)
class Variant:
    """One drawn variant of a scenario (see the module docstring).

    Attributes:
        kills: the crash schedule's kills, in order.
        approve_at: approve when a worker reaches this point (``None``: after the park).
        delay_hours: the approval lands this many hours after the park (simulated clock).
        faults: the gateway's fault plan, one per send request in order.
        policy: ``deterministic`` or ``varying``.
    """

    kills: tuple[KillPoint, ...]
    approve_at: KillPoint | None = None
    delay_hours: float = 0.0
    faults: tuple[FaultSpec, ...] = ()
    policy: str = "deterministic"

    @property
    def schedule(self) -> CrashSchedule:
        """The crash schedule of the kills."""
        return CrashSchedule(self.kills)

    @property
    def approval(self) -> str:
        """When the approval lands, in words."""
        if self.approve_at is not None:
            return f"at {self.approve_at}"
        return f"{self.delay_hours:g} h after the park" if self.delay_hours else "after the park"

    def describe(self) -> str:
        """Everything but the schedule, on one line:
        ``approve after the park; faults -; policy deterministic``."""
        faults = ",".join(f.label for f in self.faults) or "-"
        return f"approve {self.approval}; faults {faults}; policy {self.policy}"

    def key(self) -> str:
        """The whole variant on one line (schedule id first); equal keys, equal variants."""
        return f"{self.schedule.id} | {self.describe()}"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {"schedule": self.schedule.id, "kills": [str(k) for k in self.kills],
                "approval": self.approval,
                "approve_at": str(self.approve_at) if self.approve_at else None,
                "delay_hours": self.delay_hours, "faults": [f.label for f in self.faults],
                "policy": self.policy}

    def apply(self, base: Scenario) -> Scenario:
        """The scenario that runs this variant: ``base`` with the drawn approval, faults and
        policy, named ``<base>-explore``, whose matrix is exactly this schedule."""
        return dataclasses.replace(
            base, name=variant_name(base), path=None,
            description=f"explored variant of {base.name}: {self.key()}",
            policy=self.policy, approve_at=self.approve_at,
            approve_delay_h=float(self.delay_hours), gateway_faults=self.faults,
            points=(), schedules=(self.schedule,), baseline=False, double=False)


def variant_name(base: Scenario) -> str:
    """The scenario name of ``base``'s variants (execution ids ``<name>[<schedule>]``)."""
    return f"{base.name}-explore"


@dataclass(frozen=True)
class Space:
    """What can be drawn for one scenario, learned from its trace run.

    Attributes:
        labels: every label the trace reached, in the order first reached.
        reached: how many times the trace reached each label.
        approve_points: points where the human can approve mid-story: the trace's points
            after the park checkpoint (the first ``awaiting_approval`` row: the approval
            request exists) and before its approval, plus the first hit of a later label
            the scenario rules accept as ``approve_at`` (``t6.checkpoint_loaded``); empty
            when the scenario cannot approve mid-story (a rejection, a bad ticket, twice).
        policies: the policies to draw, the scenario's own first.
    """

    labels: tuple[str, ...]
    reached: dict[str, int]
    approve_points: tuple[KillPoint, ...]
    policies: tuple[str, ...]


def learn_space(base: Scenario, trace: Evidence) -> Space:
    """The ``Space`` of ``base`` from the evidence of its no-kill trace run.

    Raises:
        ValueError: the trace reached no labelled point at all.
    """
    points = points_from_trace(trace)
    if not points:
        raise ValueError(f"the trace run of {base.name} reached no labelled point; "
                         "nothing to explore")
    reached = Counter(p.label for p in points)
    approved = next((e.seq for e in trace.events if e.kind == EventKind.APPROVE), None)
    parked = _park_commit(trace)
    before: list[KillPoint] = []
    later: list[KillPoint] = []
    for event, point in number_trace(trace.events):
        if parked is None or event.seq <= parked:
            continue  # no approval request yet: the human would have nothing to approve
        if approved is None or event.seq < approved:
            before.append(point)
        elif point.occurrence == 1:
            later.append(point)
    approve_points = tuple(p for p in before + later
                           if not impossible(dataclasses.replace(base, approve_at=p)))
    policies = (base.policy,) + tuple(p for p in POLICIES if p != base.policy)
    return Space(tuple(dict.fromkeys(p.label for p in points)), dict(reached),
                 approve_points, policies)


def _park_commit(trace: Evidence) -> int | None:
    """The trace ``seq`` of the ``ckpt.before_commit`` hit that committed the first
    ``awaiting_approval`` checkpoint (every save passes that point once, in row order), or
    ``None`` if the trace has no such row or the rows and hits do not line up."""
    index = next((i for i, w in enumerate(trace.history.writes)
                  if w.phase is Phase.AWAITING_APPROVAL), None)
    if index is None:
        return None
    commits = [e.seq for e in trace.events
               if e.kind == EventKind.HIT and e.label == labels.SAVE_COMMIT]
    return commits[index] if index < len(commits) else None


def variants(space: Space) -> st.SearchStrategy[Variant]:
    """The Hypothesis strategy of ``Variant`` over ``space``; it shrinks towards one kill
    at the first label reached, approval after the park, no fault, the first policy."""

    @st.composite
    def point(draw: st.DrawFn) -> KillPoint:
        label = draw(st.sampled_from(space.labels))
        seen = min(MAX_OCCURRENCE, space.reached[label])
        # one draw in eight goes one hit past what the trace reached (a retry's
        # t6.request_leaving#2, a recheck and a resume both loading the checkpoint);
        # the others stay within it. Shrinks to within, then to #1.
        past = draw(st.integers(0, 7)) == 7 and seen < MAX_OCCURRENCE
        occurrence = seen + 1 if past else draw(st.integers(1, seen))
        return KillPoint(label, occurrence)

    fault = st.one_of(
        st.sampled_from(_LATENCY_MS).map(lambda ms: FaultSpec(FaultKind.LATENCY, ms=ms)),
        st.sampled_from(_STATUSES).map(lambda status: FaultSpec(FaultKind.ERROR, status=status)),
        st.just(FaultSpec(FaultKind.DROP_AFTER_ACCEPT)),
    )
    approvals: list[st.SearchStrategy[tuple[KillPoint | None, float]]] = [
        st.just((None, 0.0))]
    if space.approve_points:
        approvals.append(st.sampled_from(space.approve_points).map(lambda p: (p, 0.0)))
    approvals.append(st.integers(1, 72).map(lambda h: (None, float(h))))

    @st.composite
    def variant(draw: st.DrawFn) -> Variant:
        kills = draw(st.lists(point(), min_size=1, max_size=MAX_KILLS))
        approve_at, delay = draw(st.one_of(*approvals))
        faults = draw(st.lists(fault, max_size=MAX_FAULTS))
        policy = draw(st.sampled_from(space.policies))
        return Variant(tuple(kills), approve_at, delay, tuple(faults), policy)

    return variant()


