"""Shards: a deterministic, cost-balanced part of the kill matrix (``run --shard I/N``).

The matrix is cut into **units** that must run in one process: a scenario's trace run
(its no-kill execution), and each *family* — one first kill (or one listed multi-kill
schedule) together with the double-crash row learned from that execution's own evidence
(``harness.plan.matrix.double_kill_plans``). Every shard computes the same units from the same
scenario files and the same trace runs (the loop is deterministic up to a kill), then the
same assignment: longest-processing-time first (Graham's LPT rule: sort by expected cost,
give each unit to the least-loaded shard, ties to the lower index). So the union of the N
shards is exactly the matrix, each execution once, with no coordinator.

Expected cost of a unit: its seconds in an earlier run (``summary.json``'s ``elapsed_s``
per execution, summed over the family) when that run has it; otherwise the median of the
known executions (1.0 with no earlier run) times the executions the family is expected to
hold (1, plus for a double-crash scenario the points its recovery can still reach in the
trace). The plan's ``fingerprint`` (a hash of every unit and its shard) goes into each
shard's reports, so ``merge`` refuses shards that did not cut the same matrix.

Where the index and count come from (1-based ``I`` of ``N``): ``--shard I/N``; else
``--shard auto`` or no option with ``SHOPOPS_SHARD=I/N`` set: ``SHOPOPS_SHARD``, then GitLab
``parallel:`` (``CI_NODE_INDEX``/``CI_NODE_TOTAL``, 1-based), CircleCI
(``CIRCLE_NODE_INDEX``/``CIRCLE_NODE_TOTAL``, 0-based) and Buildkite
(``BUILDKITE_PARALLEL_JOB``/``BUILDKITE_PARALLEL_JOB_COUNT``, 0-based). GitHub Actions has
no such variables: set ``SHOPOPS_SHARD: ${{ matrix.shard }}/N`` (README, "Sharding in CI").
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from harness.model import NO_KILL, CrashSchedule, KillPoint
from harness.model.input_files import (
    MAX_JSON_BYTES,
    MAX_JSON_NESTING,
    InputFileError,
    check_nesting,
    read_input,
)
from harness.model.plan import REFERENCE, Sut
from harness.model.shard import Shard, ShardError, ShardPlan, Unit
from harness.plan.matrix import single_kill_plans
from harness.plan.scenario import Scenario
from shopops.validators import shard_spec

__all__ = ["CI_VARIABLES", "cut_matrix", "earlier_durations", "expected_double_row", "family_key",
           "parse_shard", "plan_shards", "resolve_shard", "shard_from_env", "trace_unit"]

#: (variable with the index, variable with the count, index base), in the order read.
CI_VARIABLES: tuple[tuple[str, str, int], ...] = (
    ("CI_NODE_INDEX", "CI_NODE_TOTAL", 1),  # GitLab CI `parallel:`
    ("CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL", 0),  # CircleCI `parallelism:`
    ("BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0),  # Buildkite `parallelism:`
)


def parse_shard(text: str, what: str = "--shard") -> Shard:
    """Parse ``I/N`` (1-based: ``1/4`` … ``4/4``).

    Raises:
        ShardError: naming ``what``, the value and the allowed form.
    """
    try:
        return Shard(*shard_spec(text))  # the one rule: shopops.validators.shard_spec
    except ValueError as exc:
        raise ShardError(f"{what} {exc}") from None


def shard_from_env(env: Mapping[str, str]) -> Shard | None:
    """The shard the environment names: ``SHOPOPS_SHARD``, else the first pair of
    ``CI_VARIABLES`` that is set; ``None`` when none is.

    Raises:
        ShardError: a variable set to something that is not a shard (naming it), or only
            one of a pair set.
    """
    if env.get("SHOPOPS_SHARD", "").strip():
        return parse_shard(env["SHOPOPS_SHARD"], "SHOPOPS_SHARD")
    for index_var, count_var, base in CI_VARIABLES:
        index, count = env.get(index_var, "").strip(), env.get(count_var, "").strip()
        if not index and not count:
            continue
        if not (index.isdigit() and count.isdigit() and len(index) <= 4 and len(count) <= 4):
            raise ShardError(f"{index_var}={index!r} {count_var}={count!r}: both must be "
                             f"set to whole numbers ({index_var} {base}-based)")
        try:
            return Shard(int(index) - base + 1, int(count))
        except ShardError as exc:
            raise ShardError(f"{index_var}={index} {count_var}={count}: {exc}") from None
    return None


def resolve_shard(option: str | None, env: Mapping[str, str]) -> Shard | None:
    """The shard a run is: ``--shard I/N`` wins; ``--shard auto`` needs the environment to
    name one; no option reads only ``SHOPOPS_SHARD`` (a CI job's own parallel variables
    shard a run only when asked with ``auto``).

    Raises:
        ShardError: a bad value, or ``auto`` with no variable set.
    """
    if option is None:
        return parse_shard(env["SHOPOPS_SHARD"], "SHOPOPS_SHARD") \
            if env.get("SHOPOPS_SHARD", "").strip() else None
    if option.strip() == "auto":
        found = shard_from_env(env)
        if found is None:
            names = ["SHOPOPS_SHARD"] + [f"{i}/{c}" for i, c, _ in CI_VARIABLES]
            raise ShardError("--shard auto: none of " + ", ".join(names) + " is set")
        return found
    return parse_shard(option)


def family_key(execution_id: str) -> str:
    """The unit an execution id belongs to: ``o1001[a>b]`` -> ``o1001[a]`` for a double
    kill, ``o1001[a>b>c]`` -> itself (three kills are only ever listed by hand).

    Note: a listed two-kill schedule and a learned one are told apart by the plan, not the
    id; ``ShardPlan.owner_of`` does that.
    """
    name, _, schedule = execution_id.partition("[")
    kills = schedule.rstrip("]").split(">")
    return f"{name}[{kills[0]}]" if len(kills) == 2 else execution_id


def expected_double_row(first: KillPoint, reached: Sequence[KillPoint]) -> int:
    """How many second kills a double-crash family at ``first`` can be expected to add: the
    trace's points after ``first``, plus one (the re-run path reaches roughly those)."""
    try:
        at = list(reached).index(first)
    except ValueError:
        return 0
    return len(reached) - at


def earlier_durations(path: Path | None) -> dict[str, float]:
    """Seconds per execution id from an earlier run's ``summary.json`` (a file, or a run
    folder holding one); ``{}`` when ``path`` is ``None`` or does not exist.

    Raises:
        ShardError: the file exists but is not a summary (names the file and the field),
            or is not a regular file, too big or too deeply nested
            (``harness.model.input_files``).
    """
    if path is None:
        return {}
    file = path / "summary.json" if path.is_dir() else path
    if not os.path.lexists(file):
        return {}
    try:  # a regular file (a FIFO hung the run), bounded before json sees it
        text = read_input(file, MAX_JSON_BYTES)
        check_nesting(text, file, MAX_JSON_NESTING, toml=False)
    except InputFileError as exc:
        raise ShardError(f"--durations {exc}") from None
    try:
        data = json.loads(text)
        out = {}
        for e in data["executions"]:
            seconds = float(e["elapsed_s"])
            if not (0 <= seconds < 86_400):
                raise ValueError(f"elapsed_s {seconds!r} is not 0..86400 seconds")
            out[str(e["id"])] = seconds
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ShardError(f"--durations {file}: not a summary.json with executions[].id and "
                         f"elapsed_s: {type(exc).__name__}: {exc}") from None


def plan_shards(units: Iterable[Unit], count: int,
                durations: Mapping[str, float] | None = None) -> ShardPlan:
    """Assign every unit to one of ``count`` shards, balanced by expected cost (LPT).

    Args:
        units: in matrix order (distinct ``(scenario, key)``).
        count: shards (1..``MAX_SHARDS``).
        durations: seconds per execution id of an earlier run (``earlier_durations``).

    Returns:
        the ``ShardPlan``; the same inputs give the same plan on every machine (no hash
        seed, no clock: sorted by cost, then matrix position).
    """
    units = tuple(units)
    durations = dict(durations or {})
    per_family: dict[str, float] = {}
    for execution_id, seconds in durations.items():
        key = family_key(execution_id)
        per_family[key] = per_family.get(key, 0.0) + seconds
    typical = statistics.median(durations.values()) if durations else 1.0
    costs = tuple(per_family.get(u.id, typical * max(u.executions, 1)) for u in units)
    loads = [0.0] * count
    owners = [0] * len(units)
    for i in sorted(range(len(units)), key=lambda i: (-costs[i], i)):
        shard = min(range(count), key=lambda s: (loads[s], s))
        owners[i] = shard + 1
        loads[shard] += costs[i]
    return ShardPlan(count, units, tuple(owners), costs)


def trace_unit(scenario: str) -> Unit:
    """The unit of a scenario's trace run (its no-kill execution)."""
    return Unit(scenario, NO_KILL, 1)


def cut_matrix(scenarios: Sequence[Scenario], learned: Mapping[str, Sequence[KillPoint]],
               schedule: CrashSchedule | None, count: int,
               durations: Mapping[str, float], sut: Sut = REFERENCE) -> ShardPlan:
    """The units of a run and their shards.

    Args:
        scenarios: in run order.
        learned: the trace's kill points of every scenario whose points are learned
            (``harness.plan.matrix.points_from_trace``); scenarios that list points need none.
        schedule: a replay (``--schedule``): one unit per scenario, that schedule.
        count: shards.
        durations: an earlier run's seconds per execution id.
    """
    units = []
    for s in scenarios:
        if schedule is not None:
            units.append(Unit(s.name, schedule.id))
            continue
        if s.baseline:
            units.append(trace_unit(s.name))
        reached = tuple(learned.get(s.name, ()))
        for plan in single_kill_plans(s, reached, sut):
            n = 1
            if s.double and len(plan.schedule.kills) == 1:
                n += expected_double_row(plan.schedule.kills[0], reached or s.points or ())
            units.append(Unit(s.name, plan.schedule.id, n))
    return plan_shards(units, count, durations)
