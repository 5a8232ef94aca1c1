"""A sharded run's parts — plain frozen data (``harness.plan.shard`` cuts the matrix into
them; ``RunResult`` records which part it is and how the matrix was cut)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

from shopops_contract.limits import MAX_SHARDS

__all__ = ["Shard", "ShardError", "ShardPlan", "Unit"]


class ShardError(ValueError):
    """A shard spec or CI variable that cannot name a shard; the message names the input,
    the value and what is allowed."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count`` (1..``MAX_SHARDS``)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (1 <= self.count <= MAX_SHARDS and 1 <= self.index <= self.count):
            raise ShardError(f"shard {self.index}/{self.count}: allowed I/N with "
                             f"1 <= I <= N <= {MAX_SHARDS}")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class Unit:
    """What one shard runs as a whole: ``scenario`` and ``key`` — ``no-kill`` (the trace
    run) or the id of a family's first schedule (``t4.parked``, ``a>b`` for a listed
    multi-kill schedule); ``executions``: how many it is expected to hold."""

    scenario: str
    key: str
    executions: int = 1

    @property
    def id(self) -> str:
        """``scenario[key]``: the id of the unit's first execution."""
        return f"{self.scenario}[{self.key}]"


@dataclass(frozen=True)
class ShardPlan:
    """Which shard runs which unit: ``units`` in matrix order, ``owners`` the 1-based shard
    of each (same order), ``costs`` the expected seconds of each."""

    count: int
    units: tuple[Unit, ...]
    owners: tuple[int, ...]
    costs: tuple[float, ...]

    def owner_of(self, scenario: str, key: str) -> int | None:
        """The shard that runs unit ``scenario[key]``, ``None`` if it is not a unit."""
        return self._index.get((scenario, key))

    @cached_property
    def _index(self) -> dict[tuple[str, str], int]:
        return {(u.scenario, u.key): o for u, o in zip(self.units, self.owners, strict=True)}

    def position_of(self, scenario: str, key: str) -> int | None:
        """Where unit ``scenario[key]`` stands in ``units`` (matrix order), ``None`` if it
        is not a unit."""
        return self._positions.get((scenario, key))

    @cached_property
    def _positions(self) -> dict[tuple[str, str], int]:
        return {(u.scenario, u.key): i for i, u in enumerate(self.units)}

    def load(self, shard: int) -> float:
        """Expected seconds of ``shard``."""
        return sum(c for c, o in zip(self.costs, self.owners, strict=True) if o == shard)

    @property
    def fingerprint(self) -> str:
        """SHA-256 over ``count`` and every (unit, owner): equal iff two shards cut the
        same matrix the same way."""
        text = json.dumps([self.count, [[u.scenario, u.key, o] for u, o
                                        in zip(self.units, self.owners, strict=True)]])
        return hashlib.sha256(text.encode()).hexdigest()

    def as_dict(self, shard: Shard) -> dict[str, object]:
        """What a shard's ``summary.json`` records under ``shard``."""
        return {"index": shard.index, "count": shard.count, "fingerprint": self.fingerprint,
                "units": len(self.units),
                "units_here": sum(o == shard.index for o in self.owners),
                "expected_s": round(self.load(shard.index), 3),
                "expected_s_all": [round(self.load(i), 3) for i in range(1, self.count + 1)]}
