"""Kill points and crash schedules — plain frozen data.

A ``KillPoint`` names a labelled point of ``shopops_contract.labels`` and which hit of it
(``t6.request_leaving#2``); hits are counted by ``harness.model.hits.HitCounter``. A
``CrashSchedule`` is the ordered kills of one execution.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shopops_contract import labels
from shopops_contract.limits import MAX_KILLS, MAX_OCCURRENCE

__all__ = ["NO_KILL", "CrashSchedule", "KillPoint"]

NO_KILL = "no-kill"
_POINT = re.compile(r"(?P<label>[a-z0-9_.]+)(?:#(?P<occurrence>[0-9]+))?")


@dataclass(frozen=True, order=True)
class KillPoint:
    """``label`` (from ``shopops_contract.labels``) and ``occurrence`` (1-based hit count)."""

    label: str
    occurrence: int = 1

    def __str__(self) -> str:
        return self.label if self.occurrence == 1 else f"{self.label}#{self.occurrence}"

    @classmethod
    def parse(cls, text: str) -> KillPoint:
        """Parse ``label`` or ``label#N``.

        Raises:
            ValueError: malformed, ``N`` outside 1..``MAX_OCCURRENCE``, an unknown label,
                or a ``queue`` label (the human's approval is not a place a worker can be
                killed); the message lists the allowed labels.
        """
        match = _POINT.fullmatch(text.strip())
        if not match:
            raise ValueError(f"kill point {text!r} is not of the form label or label#N")
        label = match["label"]
        digits = match["occurrence"] or "1"
        if len(digits) > 6 or not 1 <= int(digits) <= MAX_OCCURRENCE:
            raise ValueError(f"kill point {text!r}: the occurrence #N must be from 1 to "
                             f"{MAX_OCCURRENCE}")
        occurrence = int(digits)
        if label not in labels.KILLABLE:
            raise ValueError(f"kill point {text!r}: unknown label {label!r}; allowed: "
                             + ", ".join(labels.KILLABLE))
        return cls(label, occurrence)

    @property
    def timeline_key(self) -> tuple[int, int]:
        """Where the point stands on the crash timeline, for sorting: its label's place in
        the catalogue (``shopops_contract.labels.KILLABLE``), then the hit."""
        return (labels.KILLABLE.index(self.label), self.occurrence)


@dataclass(frozen=True, order=True)
class CrashSchedule:
    """The kills of one execution, in the order they must fire; its id joins them with
    ``>`` (``t3.checkpoint_saved>t6.gateway_accepted``), the empty one is ``no-kill``."""

    kills: tuple[KillPoint, ...] = ()

    @property
    def id(self) -> str:
        """``a>b`` or ``no-kill``."""
        return ">".join(str(k) for k in self.kills) or NO_KILL

    def __str__(self) -> str:
        return self.id

    @classmethod
    def parse(cls, text: str) -> CrashSchedule:
        """Parse a schedule id: ``no-kill``, ``t4.parked``, or kills joined by ``>``.

        Raises:
            ValueError: see ``KillPoint.parse``; more than ``MAX_KILLS`` kills.
        """
        text = text.strip()
        if text in ("", NO_KILL):
            return cls(())
        parts = text.split(">")
        if len(parts) > MAX_KILLS:
            raise ValueError(f"crash schedule {text[:80]!r}: {len(parts)} kills; at most "
                             f"{MAX_KILLS} (an execution's folder is named after them)")
        return cls(tuple(KillPoint.parse(part) for part in parts))
