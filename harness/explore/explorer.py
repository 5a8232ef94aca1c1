"""Property-based exploration: Hypothesis draws crash schedules and shrinks a failure.

``docs/design.md``, "Property-based exploration": instead of the fixed kill matrix, Hypothesis draws
*variants* of one scenario and runs each as one real execution (``harness.run.execution``) with
the same checklist and verdict. A variant is

- one to three kills, each a label the scenario's trace run reached (learned with
  ``harness.plan.matrix.points_from_trace``) at a small occurrence (``#1``–``#3``);
- when the approval lands: after the park, mid-story when a worker reaches a point that
  can be reached before any approval (``approve_at``), or hours later (``delay_hours``);
- the mock gateway's fault plan, one fault per send request (at most two, so a send can
  still succeed on the client's third attempt): ``latency``, ``error`` 5xx,
  ``drop_after_accept``;
- the policy: ``deterministic`` or ``varying``.

The drawn values replace the scenario's own ``approve_at``, ``delay_hours``,
``gateway.faults`` and ``sut.policy``; everything else (keys, case, human action, tickets,
concurrency, storage faults, expectations) is the scenario's. A *failure* is the verdict
``fail``. ``unknown`` (a drawn kill point the execution never reached, a worker that
stopped with an error) is not a failure here, but it is counted and its reasons reported.

Hypothesis shrinks the first failure to the smallest variant that still fails (fewer
kills, earlier labels, lower occurrences, approval after the park, fewer faults, the
deterministic policy). The shrunk variant is written as a scenario file into the report
folder and replayed once from that file, exactly as its printed command does:
``shopops-chaos run <folder>/<name>.toml --schedule '<schedule id>'``.

Settings profiles (STYLE.md, Hypothesis notes): ``ci`` is derandomised (the same examples
on every run; ``--seed`` picks another fixed sequence), no deadline, no example database,
``max_examples`` fixed at ``CI_EXAMPLES``; ``dev`` is randomised (a fresh seed each run,
printed so it can be repeated with ``--seed``) and keeps failing examples in
``.hypothesis/explore/<scenario>/`` so the next run tries them first (without ``--seed``:
Hypothesis ignores its database when given a seed).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, assume, given, seed, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky

from harness.explore.space import (
    MAX_FAULTS,
    MAX_KILLS,
    MAX_OCCURRENCE,
    Space,
    Variant,
    learn_space,
    variant_name,
    variants,
)
from harness.launch.launcher import Launcher, make_launcher
from harness.model import (
    CheckId,
    CheckResult,
    CheckStatus,
    Counts,
    CrashSchedule,
    ExecutionPlan,
    ExecutionResult,
    RunResult,
    Scenario,
    Verdict,
)
from harness.plan.scenario import impossible, load_scenario
from harness.plan.scenario_toml import scenario_toml
from harness.run.execution import execute

__all__ = ["CI_EXAMPLES", "DEV_EXAMPLES", "MAX_FAULTS", "MAX_KILLS", "MAX_OCCURRENCE",
           "PROFILES", "Example", "ExplorationFailure", "ExploreResult", "Space", "Variant",
           "explore", "learn_space", "profile_settings", "scenario_toml", "variant_name",
           "variants", "write_explore_report"]

#: ``max_examples`` of the ``ci`` profile (fixed: CI runs are reproducible and bounded).
CI_EXAMPLES = 40
#: ``max_examples`` of the ``dev`` profile.
DEV_EXAMPLES = 100
#: Where the ``dev`` profile keeps its example database (one folder per scenario).
DEV_DATABASE = Path(".hypothesis") / "explore"
PROFILES = ("ci", "dev")

_COMMON: dict[str, Any] = dict(
    deadline=None,  # one execution is a few real processes: ~0.2-1 s
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),  # no explain phase
    report_multiple_bugs=False,  # one failure, shrunk; not every distinct one
    verbosity=Verbosity.quiet,  # the explorer prints its own lines
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.filter_too_much),
    print_blob=False,
)
settings.register_profile("shopops-explore-ci", derandomize=True, database=None,
                          max_examples=CI_EXAMPLES, **_COMMON)
settings.register_profile("shopops-explore-dev", derandomize=False,
                          max_examples=DEV_EXAMPLES, **_COMMON)

@dataclass(frozen=True)
class Example:
    """One execution the explorer ran (``n`` counts from 1, in the order run)."""

    n: int
    variant: Variant
    execution_id: str
    verdict: Verdict
    reasons: tuple[str, ...]
    elapsed_s: float
    shrinking: bool  # run after the first failure: a shrink attempt (or the final replay)
    failing_checks: tuple[CheckId, ...] = ()  # failed, and not expected to
    undecided_checks: tuple[CheckId, ...] = ()  # their evidence was missing (not failed)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {"n": self.n, "id": self.execution_id, "variant": self.variant.as_dict(),
                "verdict": self.verdict, "reasons": list(self.reasons),
                "failing_checks": list(self.failing_checks),
                "undecided_checks": list(self.undecided_checks),
                "elapsed_s": self.elapsed_s, "shrinking": self.shrinking}


def failing_and_undecided(checks: tuple[CheckResult, ...], expected: frozenset[CheckId]
                          ) -> tuple[tuple[CheckId, ...], tuple[CheckId, ...]]:
    """The ids of the checks that failed (and were not in ``expected``, the scenario's
    ``[expect] failing_checks``), and of those that could not be decided (their evidence is
    missing: not a failure, ``harness.judge.verdict``)."""
    failing = tuple(c.check_id for c in checks
                    if c.status is CheckStatus.FAIL and c.check_id not in expected)
    return failing, tuple(c.check_id for c in checks if c.status is CheckStatus.UNDECIDED)


class ExplorationFailure(AssertionError):
    """An explored variant failed the checklist (what Hypothesis sees and shrinks)."""

    def __init__(self, variant: Variant, result: ExecutionResult) -> None:
        super().__init__(f"{result.plan.id} ({variant.describe()}) failed: "
                         + "; ".join(result.reasons))
        self.variant = variant
        self.result = result


@dataclass(frozen=True)
class ExploreResult:
    """One ``shopops-chaos explore``, built once when it ends.

    Attributes:
        scenario: the explored scenario.
        out_dir: the report folder.
        profile, seed, max_examples: the Hypothesis settings used (``seed`` ``None``: the
            ``ci`` profile's derandomised sequence).
        space: what was drawn from.
        trace: the trace run (no kill) the space was learned from.
        examples: every execution Hypothesis asked for, in order (shrink attempts too).
        first_failure: the first failing example found, before shrinking.
        failure: the shrunk failing example (the one Hypothesis reported).
        scenario_file: the shrunk variant written as a scenario file.
        replay: the command that replays it.
        replay_result: the execution of that scenario file (run once to confirm).
        flaky: Hypothesis's message if the failure did not reproduce while shrinking.
        elapsed_s: wall seconds.
    """

    scenario: Scenario
    out_dir: Path
    profile: str
    seed: int | None
    max_examples: int
    space: Space
    trace: ExecutionResult
    examples: tuple[Example, ...] = ()
    first_failure: Example | None = None
    failure: Example | None = None
    scenario_file: Path | None = None
    replay: str | None = None
    replay_result: ExecutionResult | None = None
    flaky: str | None = None
    elapsed_s: float = 0.0
    launcher: str = "fork"

    @property
    def exit_status(self) -> int:
        """1 if a failure was found, else 0 (unknown executions are not failures here)."""
        return 1 if self.failure is not None else 0

    @property
    def verdicts(self) -> Counts:
        """The examples' verdicts, counted."""
        return Counts.of(e.verdict for e in self.examples)

    def counts(self) -> dict[str, int]:
        """Executions by verdict (``verdicts``), and in all: ``explore.json``'s counts."""
        out = self.verdicts.as_dict()
        out["executions"] = len(self.examples)
        out["shrink_executions"] = sum(e.shrinking for e in self.examples)
        # unknown although a check failed on the harness's evidence: verdict precedence
        # (harness.judge.verdict) makes that a fail, so anything but 0 here is a harness bug
        out["unknown_with_failing_checks"] = sum(
            e.verdict == Verdict.UNKNOWN and bool(e.failing_checks) for e in self.examples)
        return out

    def unknown_reasons(self) -> dict[str, int]:
        """Why executions came out ``unknown``: each reason and how often, most first."""
        reasons = Counter(r for e in self.examples if e.verdict == Verdict.UNKNOWN
                          for r in e.reasons)
        return dict(reasons.most_common())

    def as_dict(self) -> dict[str, Any]:
        """``explore.json``."""
        failure = None
        if self.failure is not None and self.first_failure is not None:
            replayed = self.replay_result
            failure = {
                "first_found": self.first_failure.as_dict(),
                "shrunk": self.failure.as_dict(),
                "kills": len(self.failure.variant.kills),
                "scenario_file": str(self.scenario_file) if self.scenario_file else None,
                "replay": self.replay,
                "replay_verdict": replayed.verdict if replayed else None,
                "replay_reasons": list(replayed.reasons) if replayed else [],
                "flaky": self.flaky,
            }
        return {
            "scenario": self.scenario.name,
            "scenario_file": str(self.scenario.path) if self.scenario.path else None,
            "profile": self.profile, "seed": self.seed, "max_examples": self.max_examples,
            "launcher": self.launcher, "elapsed_s": self.elapsed_s,
            "verdict": Verdict.FAIL if self.failure else Verdict.PASS,
            "space": {"labels": list(self.space.labels), "reached": self.space.reached,
                      "approve_points": [str(p) for p in self.space.approve_points],
                      "policies": list(self.space.policies)},
            "trace": {"id": self.trace.plan.id, "verdict": self.trace.verdict,
                      "reasons": list(self.trace.reasons)},
            "counts": self.counts(), "unknown_reasons": self.unknown_reasons(),
            "failure": failure,
            "examples": [e.as_dict() for e in self.examples],
        }


def profile_settings(profile: str, max_examples: int | None, scenario: Scenario) -> settings:
    """The Hypothesis ``settings`` of a profile (``ci``/``dev``), ``max_examples`` if given.

    Raises:
        ValueError: an unknown profile, or ``max_examples`` < 1.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; allowed: {', '.join(PROFILES)}")
    if max_examples is not None and max_examples < 1:
        raise ValueError(f"max_examples: {max_examples!r} must be at least 1")
    base = settings.get_profile(f"shopops-explore-{profile}")
    extra: dict[str, Any] = {}
    if max_examples is not None:
        extra["max_examples"] = max_examples
    if profile == "dev":
        extra["database"] = DirectoryBasedExampleDatabase(DEV_DATABASE / scenario.name)
    return settings(base, **extra)


def explore(
    scenario: Scenario,
    out_dir: Path,
    *,
    max_examples: int | None = None,
    seed_value: int | None = None,
    profile: str = "ci",
    launcher: Launcher | str = "fork",
    worker_timeout_s: float = 30.0,
    progress: Callable[[Example], None] | None = None,
) -> ExploreResult:
    """Explore ``scenario``: a trace run, then Hypothesis-drawn variants, shrunk on failure.

    Args:
        scenario: the scenario to vary (its crash matrix is not used).
        out_dir: the report folder (created): ``executions/`` (every failing or unknown
            execution's files; passing ones are removed), the shrunk variant's scenario
            file, ``explore.json`` (``write_explore_report``).
        max_examples: examples to draw (default: the profile's).
        seed_value: Hypothesis seed (Hypothesis then uses no example database); default:
            the ``ci`` profile's derandomised sequence, or for ``dev`` a seed Hypothesis
            draws (reported in ``ExploreResult.seed``) after it replayed the database.
        profile: ``ci`` or ``dev``.
        launcher: a ``Launcher`` (the caller closes it) or a name for ``make_launcher``
            (one launcher for the whole exploration, closed here).
        worker_timeout_s: per-worker deadline in seconds.
        progress: called with each ``Example`` as it finishes.

    Returns:
        the ``ExploreResult`` (reports not written yet).

    Raises:
        ValueError: a bad profile or ``max_examples``, or a trace that reached no point.
    """
    started = time.monotonic()
    hyp_settings = profile_settings(profile, max_examples, scenario)
    owned = isinstance(launcher, str)
    workers = make_launcher(launcher) if isinstance(launcher, str) else launcher
    exe_dir = out_dir / "executions"
    exe_dir.mkdir(parents=True, exist_ok=True)
    try:
        trace_plan = ExecutionPlan(scenario, CrashSchedule())
        trace = execute(trace_plan, exe_dir / f"trace--{trace_plan.dirname}",
                        launcher=workers, worker_timeout_s=worker_timeout_s)
        space = learn_space(scenario, trace.evidence)
        examples: list[Example] = []  # what Hypothesis asked for, in order (its callback)

        def check(variant: Variant) -> None:
            drawn = variant.apply(scenario)
            assume(not impossible(drawn))
            plan = ExecutionPlan(drawn, variant.schedule)
            n = len(examples) + 1
            workdir = exe_dir / f"{n:04d}--{plan.dirname}"
            res = execute(plan, workdir, launcher=workers, worker_timeout_s=worker_timeout_s)
            failing, undecided = failing_and_undecided(res.checks, drawn.expect_failing)
            example = Example(n, variant, plan.id, res.verdict, res.reasons, res.elapsed_s,
                              shrinking=any(e.verdict is Verdict.FAIL for e in examples),
                              failing_checks=failing, undecided_checks=undecided)
            examples.append(example)
            if progress:
                progress(example)
            if res.verdict is Verdict.PASS:
                shutil.rmtree(workdir, ignore_errors=True)
            elif res.verdict is Verdict.FAIL:
                raise ExplorationFailure(variant, res)

        test = settings(hyp_settings)(given(variants(space))(check))
        if seed_value is not None:
            test = seed(seed_value)(test)  # Hypothesis then leaves the database alone
        final: ExplorationFailure | None = None
        flaky: str | None = None
        drawn_seed = seed_value
        try:
            test()
        except ExplorationFailure as exc:
            final = exc
        except Flaky as exc:  # a failure that did not reproduce: keep the last one seen
            flaky = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        finally:
            if seed_value is None and not hyp_settings.derandomize:
                # the seed Hypothesis drew (no public accessor): --seed repeats the draws
                drawn_seed = getattr(test, "_hypothesis_internal_use_generated_seed", None)
        result = ExploreResult(scenario, out_dir, profile, drawn_seed,
                               hyp_settings.max_examples, space, trace, tuple(examples),
                               first_failure=next((e for e in examples
                                                   if e.verdict is Verdict.FAIL), None),
                               flaky=flaky, launcher=workers.name)
        if final is not None or flaky is not None:
            result = _conclude(result, final, workers, worker_timeout_s)
        return dataclasses.replace(result, elapsed_s=round(time.monotonic() - started, 3))
    finally:
        if owned:
            workers.close()


def _conclude(result: ExploreResult, final: ExplorationFailure | None, workers: Launcher,
              worker_timeout_s: float) -> ExploreResult:
    """``result`` with the shrunk failure, written as a scenario file and replayed from
    there."""
    failing = [e for e in result.examples if e.verdict is Verdict.FAIL]
    if final is not None:
        # the last failing execution is Hypothesis's final run of the shrunk example
        shrunk = next((e for e in reversed(failing) if e.variant == final.variant), None)
    else:
        shrunk = failing[-1] if failing else None
    if shrunk is None:
        return result
    drawn = shrunk.variant.apply(result.scenario)
    path = result.out_dir / f"{drawn.name}.toml"
    how = (f"seed {result.seed}" if result.seed is not None else "derandomised")
    replay = ExecutionPlan(dataclasses.replace(drawn, path=path), shrunk.variant.schedule).replay
    path.write_text(scenario_toml(drawn, comment=(
        f"Written by shopops-chaos explore ({result.profile} profile, {how}): the shrunk\n"
        f"failing variant of {result.scenario.name}. Replay it with:\n"
        f"  {replay}")), encoding="utf-8")
    loaded = load_scenario(path)
    if dataclasses.replace(loaded, path=None) != drawn:
        raise RuntimeError(f"{path} does not load back as the explored variant "
                           "(harness bug in scenario_toml)")
    plan = ExecutionPlan(loaded, shrunk.variant.schedule)
    replayed = execute(plan, result.out_dir / "executions" / f"replay--{plan.dirname}",
                       launcher=workers, worker_timeout_s=worker_timeout_s)
    return dataclasses.replace(result, failure=shrunk, scenario_file=path,
                               replay=plan.replay, replay_result=replayed)


def write_explore_report(result: ExploreResult) -> dict[str, Path]:
    """Write ``explore.json`` and, when a failure was found, the usual reports
    (``summary.json``, ``duplicates.json``, ``junit.xml``, ``report.md``) of the replayed
    shrunk execution into ``result.out_dir``; point ``<parent>/latest`` at it.

    Returns:
        ``{name: path}``, ``explore`` first.
    """
    from harness.reports.base import write_json
    from harness.reports.write import point_latest, write_reports

    paths: dict[str, Path] = {}
    if result.replay_result is not None:
        run = RunResult(result.out_dir.name, result.out_dir, (result.replay_result,),
                        started_at=datetime.now(UTC).isoformat(),
                        elapsed_s=result.replay_result.elapsed_s, launcher=result.launcher)
        paths.update(write_reports(run, result.out_dir, latest=False))
    # explore.json last (it marks the folder complete), then latest moves
    paths = {"explore": write_json(result.out_dir / "explore.json", result.as_dict()), **paths}
    point_latest(result.out_dir)
    return paths
