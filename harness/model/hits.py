"""The one hit counter: which occurrence of its label a hit is (``KillPoint``).

Kill points name the N-th hit of a label across every worker of an execution
(``harness.model.points``). The kill controller counts live hits with it, the kill matrix and
the explorer count the hits of a recorded trace with ``number_trace``: one rule, so the
same text names the same moment in a trace run and in a killed run.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.model.evidence import Event
from harness.model.kinds import EventKind
from harness.model.points import KillPoint

__all__ = ["HIT_KINDS", "HitCounter", "number_trace"]

#: Trace events that are hits of a labelled point: worker-side hits and gateway deliveries.
HIT_KINDS = frozenset({EventKind.HIT, EventKind.DELIVERY})


class HitCounter:
    """Counts hits per label; ``clear`` starts counting afresh (after a kill fires)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def hit(self, label: str) -> KillPoint:
        """Count one hit of ``label``; return it as a ``KillPoint`` (``label#N``)."""
        self._counts[label] = self._counts.get(label, 0) + 1
        return KillPoint(label, self._counts[label])

    def seen(self, label: str) -> int:
        """How many hits of ``label`` were counted so far."""
        return self._counts.get(label, 0)

    def clear(self) -> None:
        """Forget every count."""
        self._counts.clear()


def number_trace(events: Iterable[Event], *, after: int | None = None
                 ) -> tuple[tuple[Event, KillPoint], ...]:
    """Every hit of a trace with the kill point it is, in trace order.

    Args:
        events: a trace (``Evidence.events``).
        after: count only events whose ``seq`` is greater (the recovery after a kill).
    """
    counter = HitCounter()
    return tuple((e, counter.hit(e.label)) for e in events
                 if e.kind in HIT_KINDS and e.label and (after is None or e.seq > after))
