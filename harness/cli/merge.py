"""``shopops-chaos merge DIR…``: shard report folders back into one run.

Each folder's ``run.json`` (``harness.reports.run_json``) gives its ``RunResult``; the folders
must come from the same harness (version and code), the same scenario set and the same cut
of the matrix (``ShardPlan.fingerprint``), and hold every shard ``1..N`` once with no
execution twice and an execution of every unit the cut gave each shard (``_complete``),
and every execution's stored verdict must be the one its stored evidence
gives when judged again (``harness.judge.assess``) — else ``MergeError`` names the folders and
what differs, before anything is written. The merged ``RunResult`` holds every execution
in matrix order (unit by unit, as ``harness.plan.shard`` cut them); the report writers
(``harness.reports``) then write its summary, duplicates, junit and Markdown exactly as
for one run, so the exit status is the one roll-up rule's (``RunResult.exit_status``).
Last, the merged ``junit.xml`` is checked against the shards' own with junitparser: the
same test cases with the same outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.judge.assess import assess
from harness.model import NO_KILL, ExecutionResult, RunResult, ShardPlan
from harness.reports.run_json import RunFile, RunFileError, read_run_json

__all__ = ["MergeError", "Merged", "check_junit", "load_shards", "merge_runs"]


class MergeError(ValueError):
    """Folders that cannot be merged; the message names them and what differs."""


@dataclass(frozen=True)
class Merged:
    """The merged ``run`` and the ``shards`` it came from (in shard order)."""

    run: RunResult
    shards: tuple[RunFile, ...]


def load_shards(folders: Sequence[Path]) -> tuple[RunFile, ...]:
    """Read and cross-check the shard folders; in shard order.

    Raises:
        MergeError: a folder without a readable ``run.json``, an unsharded run, or folders
            from different harness versions/code, scenario sets or cuts, a shard missing
            or given twice, an execution in two shards, a unit of a shard's cut without an
            execution in it (``_complete``), an execution whose stored verdict or check
            outcomes its own stored evidence does not give (``_rejudge``).
    """
    if not folders:
        raise MergeError("merge: no folders given; allowed: the shard report folders")
    files = []
    for folder in folders:
        try:
            files.append(read_run_json(folder))
        except RunFileError as exc:
            raise MergeError(str(exc)) from None
    for f in files:
        if f.run.shard is None or f.run.shard_plan is None:
            raise MergeError(f"{f.path.parent}: not a shard (run without --shard)")
    first = files[0]
    for f in files[1:]:
        for what, a, b in (("harness version", first.version, f.version),
                           ("harness code", first.code, f.code),
                           ("scenario set", first.scenarios, f.scenarios),
                           ("cut of the matrix", _cut(first), _cut(f))):
            if a != b:
                shown = (_scenario_diff(f.scenarios, first.scenarios)
                         if what == "scenario set" else f"{_short(b)} vs {_short(a)}")
                raise MergeError(f"{f.path.parent} and {first.path.parent}: different "
                                 f"{what} ({shown}); merge only shards of "
                                 "one run of one harness over one scenario set")
    count = first.run.shard.count  # type: ignore[union-attr]
    by_index: dict[int, RunFile] = {}
    for f in files:
        index = f.run.shard.index  # type: ignore[union-attr]
        if index in by_index:
            raise MergeError(f"{f.path.parent} and {by_index[index].path.parent}: both are "
                             f"shard {index}/{count}")
        by_index[index] = f
    missing = sorted(set(range(1, count + 1)) - set(by_index))
    if missing:
        raise MergeError(f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing: "
                         f"merge needs all {count} shard folders")
    for f in files:
        _rejudge(f)
    seen: dict[tuple[int, str], Path] = {}
    for f in files:
        for r, rep in zip(f.run.results, _repeats(f.run), strict=True):
            key = (rep, r.plan.id)
            if key in seen:
                raise MergeError(f"{r.plan.id}: in both {seen[key]} and {f.path.parent}")
            seen[key] = f.path.parent
    for f in files:
        _complete(f)
    return tuple(by_index[i] for i in range(1, count + 1))


def _complete(f: RunFile) -> None:
    """Every unit the cut gave ``f``'s shard has an execution in it, in each repeat it
    holds (a shard that ran to its end; an interrupted or stopped-early one is reported
    as such). Else executions were taken out of the folder after its run: one that failed,
    dropped with its junit case, would otherwise leave a merged pass (found by an attack).
    """
    plan, shard = f.run.shard_plan, f.run.shard
    assert plan is not None and shard is not None
    if f.run.interrupted or f.run.stopped_early:
        return
    owned = {i for i, o in enumerate(plan.owners) if o == shard.index}
    held: dict[int, set[int]] = {}
    for r, rep in zip(f.run.results, _repeats(f.run), strict=True):
        held.setdefault(rep, set()).add(_unit_position(r, plan))
    for rep in sorted(held) or [1]:
        missing = sorted(owned - held.get(rep, set()))
        if missing:
            names = ", ".join(plan.units[i].id for i in missing[:3])
            raise MergeError(f"{f.path}: shard {shard} holds no execution of {names}"
                             f"{' …' if len(missing) > 3 else ''}, which the cut of the "
                             "matrix gave it: executions were removed after its run; "
                             "merge only folders as the harness wrote them")


def _rejudge(f: RunFile) -> None:
    """Every execution of ``f`` judged again from its stored evidence (``harness.judge.assess``,
    the rule the run itself used): a verdict or a check's outcome that its evidence does
    not give was edited after the run, and the folder is refused."""
    for r in f.run.results:
        checks, verdict, _ = assess(r.evidence, r.plan)
        stored = [(c.check_id, c.status) for c in r.checks]
        again = [(c.check_id, c.status) for c in checks]
        if verdict is not r.verdict or stored != again:
            changed = [f"{a[0]} {a[1].value} stored, {b[1].value} from the evidence"
                       for a, b in zip(stored, again, strict=False) if a != b][:3]
            raise MergeError(
                f"{f.path}: {r.plan.id}: verdict {r.verdict.value} stored, but its own "
                f"evidence gives {verdict.value}" + (f" ({'; '.join(changed)})" if changed
                                                     else "")
                + "; the folder was changed after its run: merge only folders as the "
                "harness wrote them")


def merge_runs(files: Sequence[RunFile], run_id: str, out_dir: Path) -> RunResult:
    """One ``RunResult`` of the shards' executions, in matrix order (repeat, unit, then as
    each shard ran them); interrupted or stopped early if any shard was; ``elapsed_s`` the
    slowest shard's (they run side by side); launchers joined when they differ."""
    plan = files[0].run.shard_plan
    assert plan is not None
    rows: list[tuple[tuple[int, int, int, int], ExecutionResult, int]] = []
    for f in files:
        for n, (r, rep) in enumerate(zip(f.run.results, _repeats(f.run), strict=True)):
            rows.append(((rep, _unit_position(r, plan), f.run.shard.index, n),  # type: ignore[union-attr]
                         r, rep))
    rows.sort(key=lambda row: row[0])
    launchers = sorted({f.run.launcher for f in files})
    return RunResult(
        run_id, out_dir, results=tuple(r for _, r, _ in rows),
        started_at=min(f.run.started_at for f in files),
        elapsed_s=max(f.run.elapsed_s for f in files),
        interrupted=any(f.run.interrupted for f in files),
        launcher="+".join(launchers), repeats=tuple(rep for _, _, rep in rows),
        stopped_early=any(f.run.stopped_early for f in files),
        # every shard runs the trace runs: the same gap comes from each, said once
        gaps=tuple(dict.fromkeys(g for f in files for g in f.run.gaps)),
        not_run=sum(f.run.not_run for f in files),
        unlearned=tuple(dict.fromkeys(n for f in files for n in f.run.unlearned)))


def check_junit(merged_junit: Path, shard_folders: Sequence[Path]) -> None:
    """The merged ``junit.xml`` has exactly the shards' test cases, each with the same
    outcome (passed, failure, error), read with junitparser.

    Raises:
        MergeError: a case missing, extra or with another outcome (names it).
    """
    from junitparser import JUnitXml

    def cases(path: Path) -> dict[str, str]:
        out = {}
        for suite in JUnitXml.fromfile(str(path)):
            for case in suite:
                if case.classname == "shopops-chaos" and case.name == "run":
                    continue  # the "interrupted / nothing ran" marker of one folder
                kinds = sorted(type(r).__name__ for r in case.result)
                out[case.name] = ",".join(kinds) or "passed"
        return out

    want: dict[str, str] = {}
    for folder in shard_folders:
        want.update(cases(folder / "junit.xml"))
    got = cases(merged_junit)
    if got != want:
        diff = sorted(set(got.items()) ^ set(want.items()))[:5]
        raise MergeError(f"{merged_junit}: does not hold the shards' test cases: {diff}")


def _unit_position(r: ExecutionResult, plan: ShardPlan) -> int:
    """The position of ``r``'s unit in the cut (its own schedule, else its family's first
    kill, else the no-kill trace); past the end when it is none."""
    name, kills = r.plan.scenario.name, r.plan.schedule.kills
    for key in (r.plan.schedule.id, str(kills[0]) if kills else NO_KILL):
        at = plan.position_of(name, key)
        if at is not None:
            return at
    return len(plan.units)  # not a unit (cannot happen for a shard's own results)


def _cut(f: RunFile) -> str:
    assert f.run.shard_plan is not None
    return f.run.shard_plan.fingerprint


def _repeats(run: RunResult) -> list[int]:
    return list(run.repeats) or [1] * len(run.results)


def _scenario_diff(these: tuple[tuple[str, str], ...], those: tuple[tuple[str, str], ...]
                   ) -> str:
    """Which scenarios only one side has, or has in another version (by name)."""
    a, b = dict(these), dict(those)
    parts = [f"only in the first: {', '.join(sorted(set(a) - set(b)))}" if set(a) - set(b)
             else "", f"only in the second: {', '.join(sorted(set(b) - set(a)))}"
             if set(b) - set(a) else "",
             "changed: " + ", ".join(sorted(n for n in set(a) & set(b) if a[n] != b[n]))
             if any(a[n] != b[n] for n in set(a) & set(b)) else ""]
    return "; ".join(p for p in parts if p) or "the same scenarios in another order"


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 20 else text[:12] + "…"
