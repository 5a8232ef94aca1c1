"""The kill matrix of a scenario file for pytest, learned once and cached on disk.

A scenario whose ``points`` are listed (and that is not a double-crash scenario) has a
static plan: no process runs at collection. Otherwise the plan is learned from real
executions (the trace run; for ``double = true`` also every single kill, whose recovery
gives the second kills) — once: the schedule ids are cached as JSON in pytest's cache
folder (``.pytest_cache/d/shopops-chaos-plans/``), keyed by the SHA-256 of the scenario
file and of the code that decides the plan (``shopops/`` — the implementation under test —
``harness/`` and ``fixtures/``). Under pytest-xdist every worker collects; an exclusive
``fcntl.flock`` on the cache entry makes the first one learn the plan while the others wait
and read it. Executions that ran while learning are handed to that process's items (so
nothing runs twice there), with their own wall time as the item's duration.

A plan learned from an execution whose verdict is ``unknown`` (a deadline on a loaded
machine) is used but not cached: the next session learns it again.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.model import Verdict

if TYPE_CHECKING:
    from harness.model import ExecutionPlan, ExecutionResult
    from harness.plan.scenario import Scenario

__all__ = ["code_digest", "learn_plan", "plan_key", "pytest_param"]

ROOT = Path(__file__).resolve().parents[2]
#: Bump when the cached JSON's shape or meaning changes.
FORMAT = 1


def pytest_param(schedule_id: str) -> str:
    """A schedule id as the parameter part of a pytest id, in characters ``-k`` accepts
    (``\\w . : + - [ ] / \\``): ``#N`` becomes ``:N`` and ``>`` becomes ``+``, so
    ``t3.checkpoint_saved>t6.request_leaving#2`` is ``t3.checkpoint_saved+t6.request_leaving:2``.
    """
    return schedule_id.replace("#", ":").replace(">", "+")


@functools.cache
def code_digest(*folders: Path) -> str:
    """SHA-256 over every ``*.py``, ``*.json`` and ``*.db`` file under ``folders`` (relative
    path and bytes, sorted), ``__pycache__`` excluded."""
    h = hashlib.sha256()
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*")):
            if "__pycache__" in path.parts or path.suffix not in (".py", ".json", ".db"):
                continue
            h.update(str(path.relative_to(folder.parent)).encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def plan_key(scenario: Scenario) -> str:
    """The cache key of a scenario's plan: its file's bytes (or its fields, for one built in
    code), the implementation's code (``sut.path`` or the reference ``shopops/``), a
    ``[target]``'s folder, the harness's own code and the fixtures."""
    import harness
    import shopops

    h = hashlib.sha256(f"v{FORMAT}\0".encode())
    if scenario.path is not None and Path(scenario.path).is_file():
        h.update(Path(scenario.path).read_bytes())
    else:
        h.update(repr(scenario).encode())
    h.update(code_digest(Path(shopops.__file__).parent, Path(harness.__file__).parent,
                         ROOT / "shopops_contract", ROOT / "fixtures").encode())
    if scenario.target is not None:  # its code decides which points a trace run reaches
        h.update(repr(scenario.target).encode())
        h.update(code_digest(scenario.target.folder).encode())
    return h.hexdigest()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        yield


def _static(scenario: Scenario) -> list[str] | None:
    """The plan without running anything, when the scenario lists its points."""
    if scenario.points is None or scenario.double:
        return None
    from harness.plan.matrix import single_kill_plans

    ids = ["no-kill"] if scenario.baseline else []
    return ids + [p.schedule.id for p in single_kill_plans(scenario, ())]


def _learn(scenario: Scenario, execute: Callable[[ExecutionPlan], ExecutionResult]
           ) -> tuple[list[str], dict[str, ExecutionResult]]:
    from harness.model import CrashSchedule, ExecutionPlan
    from harness.plan.matrix import double_kill_plans, points_from_trace, single_kill_plans

    trace = execute(ExecutionPlan(scenario, CrashSchedule()))
    done = {trace.plan.schedule.id: trace}
    singles = single_kill_plans(scenario, points_from_trace(trace.evidence))
    ids = (["no-kill"] if scenario.baseline else []) + [p.schedule.id for p in singles]
    if scenario.double:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = list(pool.map(execute, singles))
        for plan, result in zip(singles, results, strict=True):
            done[plan.schedule.id] = result
        for plan, result in zip(singles, results, strict=True):
            ids += [second.schedule.id for second in double_kill_plans(plan, result.evidence)]
    return list(dict.fromkeys(ids)), done


def learn_plan(scenario: Scenario, cache_dir: Path,
               execute: Callable[[ExecutionPlan], ExecutionResult], *, replan: bool = False
               ) -> tuple[list[str], dict[str, ExecutionResult]]:
    """The schedule ids of ``scenario``'s items, in plan order, and the executions run to
    learn them (``{schedule id: result}``, empty when the plan was static or cached).

    Args:
        scenario: a validated scenario.
        cache_dir: where plans are cached (created).
        execute: runs one plan (the plugin's ``_execute``).
        replan: ignore (and replace) a cached plan.

    Raises:
        whatever ``execute`` raises (a harness error becomes a collection error).
    """
    static = _static(scenario)
    if static is not None:
        return static, {}
    entry = cache_dir / f"{scenario.name[:64]}-{plan_key(scenario)[:24]}.json"
    with _locked(entry.with_suffix(".lock")):
        if entry.is_file() and not replan:
            try:
                return list(json.loads(entry.read_text(encoding="utf-8"))["schedules"]), {}
            except (ValueError, KeyError, TypeError):
                pass  # a damaged entry is learned again
        ids, done = _learn(scenario, execute)
        if all(r.verdict is not Verdict.UNKNOWN for r in done.values()):
            tmp = entry.with_suffix(f".{os.getpid()}.tmp")
            payload: dict[str, Any] = {"format": FORMAT, "scenario": scenario.name,
                                       "schedules": ids}
            tmp.write_text(json.dumps(payload, indent=1), encoding="utf-8")
            os.replace(tmp, entry)
        return ids, done
