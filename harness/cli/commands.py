"""``shopops-chaos``: run the kill matrix, explore crash schedules, list the labelled points.

Exit status of ``run``: 0 every execution passed; 1 any execution failed; 2 otherwise
unknown (a kill point never reached, a worker died of something other than our SIGKILL, a
deadline), a bad scenario file, a harness error, or an interrupted run.
Exit status of ``explore``: 0 no failure found, 1 a failure found (shrunk, with its replay
command), 2 a bad scenario file or option, a harness error, or an interrupted run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.args import DEFAULT_EXPLORE, DEFAULT_SCENARIOS, build_parser
from harness.cli.interrupts import Progress, interrupted, signal_exit
from harness.grading.targets import all_on, from_cli
from harness.model import PythonTarget, Verdict
from harness.plan.scenario import ScenarioError
from harness.reports.base import power_note
from harness.reports.console import ProgressLine, console, quiet_closed_stdout
from shopops import validators as v
from shopops.errors import ShopOpsError

if TYPE_CHECKING:
    from harness.launch.launcher import Launcher

__all__ = ["main"]

say = console().line


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``shopops-chaos``; returns the exit status (a closed stdout, as in
    ``shopops-chaos run | head``, does not change it and prints no traceback).
    ``kill -USR1`` prints every thread's stack to stderr (``faulthandler``): what a run that
    seems stuck is doing."""
    import faulthandler
    import signal

    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (OSError, ValueError, AttributeError):  # a stderr without a file (called in process)
        pass
    args = v.parse_args(build_parser(), argv)
    try:  # the harness imports the loop, which reads these too (failpoints, clock)
        v.check_environment()
    except ShopOpsError as exc:  # ConfigError, FailpointSpecError
        print(f"shopops-chaos: error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command == "points":
            return _points()
        if args.command == "explore":
            return _explore(args)
        if args.command == "grade":
            return _grade(args)
        if args.command == "merge":
            return _merge(args)
        if args.command == "gateway":
            from harness.services.gateway_serve import serve_command

            return serve_command(args.db, port=args.port, smtp=args.smtp)
        return _run(args)
    except BrokenPipeError:  # a write outside the console (argparse, a library)
        quiet_closed_stdout()
        return 0
    finally:
        if console().closed:
            quiet_closed_stdout()


def _merge(args: argparse.Namespace) -> int:
    """Exit status of the merged run (0/1/2), or 2 when the folders do not merge or the
    merge was interrupted (SIGINT/SIGTERM: ``harness.cli.interrupts``; its folder is left
    incomplete, kept by the next command as ``incomplete-<run-id>``: ``keep_killed``)."""
    from harness.launch.processes import reaping_on_signals

    at = Progress()
    try:
        with reaping_on_signals():
            return _merge_command(args, at)
    except (KeyboardInterrupt, SystemExit) as exc:
        if not signal_exit(exc):
            raise
        return interrupted("merge", exc, at)


def _merge_command(args: argparse.Namespace, at: Progress) -> int:
    from harness.cli.merge import MergeError, check_junit, load_shards, merge_runs
    from harness.launch.stop import ignore_further_signals
    from harness.reports.runs import DEFAULT_KEEP_RUNS, keep_killed, prune_runs
    from harness.reports.write import point_latest, write_reports
    from harness.run.runner import new_run_id

    out_dir: Path | None = None
    try:
        files = load_shards([Path(f) for f in args.folders])
        out_dir = at.out_dir = Path(args.report_dir) / new_run_id()
        merged = merge_runs(files, out_dir.name, out_dir)
        paths = write_reports(merged, out_dir, latest=False)
        check_junit(paths["junit"], [f.path.parent for f in files])
        point_latest(out_dir)  # only a merge that holds moves ``latest``
        # like a run: old complete folders beyond the default, incomplete ones of gone
        # processes (an interrupted merge's or run's)
        killed = keep_killed(out_dir.parent, current=out_dir)  # a killed run's, as evidence
        prune_runs(out_dir.parent, DEFAULT_KEEP_RUNS, current=out_dir)
        ignore_further_signals()  # written: a signal from here on can change nothing
    except (MergeError, OSError) as exc:
        if out_dir is not None:  # a refused merge leaves no report that could be published
            shutil.rmtree(out_dir, ignore_errors=True)
        print(f"shopops-chaos merge: error: {exc}", file=sys.stderr)
        return 2
    print(f"shopops-chaos merge: {len(files)} shard(s) -> {out_dir}")
    for f in files:
        print(f"  shard {f.run.shard}  {f.run.verdict:<7} {len(f.run.results):>4} executions "
              f"({f.run.counts.line()})  "
              f"{f.run.elapsed_s:.1f} s  {f.path.parent}")
    if killed is not None:
        paths["incomplete"] = killed
    _summary(merged, paths)
    return merged.exit_status


def _grade(args: argparse.Namespace) -> int:
    """Exit 0 when graded (whatever the score), 2 on bad input or an interrupted grade."""
    from harness.grading.grade import DEFAULT_RUBRIC, RubricError, grade, load_rubric
    from harness.grading.safe_io import OutputPathError, check_outputs
    from harness.model.plan import Sut
    from harness.run.runner import new_run_id

    try:
        rubric = load_rubric(args.rubric) if args.rubric else DEFAULT_RUBRIC
        target = _check_options(args)
    except (RubricError, ValueError) as exc:
        print(f"shopops-chaos: error: {exc}", file=sys.stderr)
        return 2
    sut = Sut(path=Path(args.sut) if args.sut and not target else None, module=args.module)
    out = Path(args.out) if args.out else Path("reports") / f"grade-{new_run_id()}"
    results = Path(args.results) if args.results else None
    try:
        check_outputs(out, results)
    except OutputPathError as exc:
        print(f"shopops-chaos: error: {exc}", file=sys.stderr)
        return 2
    from harness.launch.processes import reaping_on_signals
    from harness.launch.stop import ignore_further_signals

    # SIGTERM (a CI job cancelled) as SIGINT: the run under the grade stops, reaps, and the
    # grade scores nothing and says so (without this SIGTERM killed it with 143, no results)
    with reaping_on_signals():
        result = grade(sut, out, rubric=rubric, jobs=args.jobs,
                       worker_timeout_s=args.timeout, results_path=results, say=say,
                       target=target)
        ignore_further_signals()  # written: a signal from here on can change nothing
    say(f"score: {result.score:g} / {result.max_score:g}   ({result.execution_time:.1f} s)"
        + ("   INTERRUPTED: nothing was scored" if result.interrupted else ""))
    say(f"  results.json {result.results_path}\n  report.md    {result.report_path}\n"
        f"  report.html  {result.page_path}")
    return 2 if result.interrupted else 0


def _points() -> int:
    from shopops_contract.labels import CATALOGUE

    width = max(len(label.name) for label in CATALOGUE)
    for label in CATALOGUE:
        say(f"{label.name:<{width}}  {label.side:<7}  {label.moment}")
    return 0


def _check_options(args: argparse.Namespace) -> PythonTarget | None:
    """Refuse option values that cannot mean anything (before anything runs); return the
    target ``--sut DIR --target KIND`` names (``harness.grading.targets``), or ``None``.

    Raises:
        ValueError: naming the option and what is allowed.
    """
    target = from_cli(args.target, args.sut, args.module)
    if target is None and args.sut is not None and not Path(args.sut, args.module).is_dir():
        raise ValueError(f"--sut {args.sut}: no package folder {args.module}/ in it")
    return target


def _default_paths() -> list[Path]:
    """``scenarios/`` of the current folder when there is one, else the catalogue shipped
    with the harness (``harness.plan.catalogue``)."""
    from harness.plan.catalogue import CATALOGUE

    here = Path(DEFAULT_SCENARIOS)
    return [here if here.is_dir() else CATALOGUE]


def _run(args: argparse.Namespace) -> int:
    """``run``, with SIGINT/SIGTERM handled from the start (``harness.cli.interrupts``)."""
    from harness.launch.launcher import make_launcher
    from harness.launch.processes import reaping_on_signals
    from harness.model import RunResult
    from harness.reports.write import finish_run

    at = Progress()
    keep = {"keep_runs": args.keep_runs}
    early: Launcher | None = None
    try:
        with reaping_on_signals():
            # a run that forks the reference loop starts its fork server now: its imports
            # (~150–200 ms) run beside the loading and planning (~100–140 ms; stop 36)
            if args.launcher == "fork" and not args.sut:
                early = make_launcher("fork", begin=True)
            return _run_command(args, at, early)
    except (KeyboardInterrupt, SystemExit) as exc:
        if not signal_exit(exc):
            raise

        def report(out: Path) -> None:  # what a harness error writes: nothing finished
            finish_run(RunResult(out.name, out, interrupted=True), out, **keep)

        return interrupted("run", exc, at, report=report)
    finally:
        if early is not None:
            early.close()


def _run_command(args: argparse.Namespace, at: Progress, early: Launcher | None) -> int:
    from harness.launch.processes import reaping_on_signals
    from harness.launch.stop import graced, ignore_further_signals
    from harness.model import REFERENCE, CrashSchedule, RunResult, Sut
    from harness.plan.catalogue import resolve
    from harness.plan.scenario import load_scenarios
    from harness.plan.shard import earlier_durations, resolve_shard
    from harness.reports import step_summary
    from harness.reports.runs import drop_older_killed
    from harness.reports.write import finish_run
    from harness.run.runner import new_run_id, run

    scenario_paths = [resolve(p) for p in args.paths] or _default_paths()
    try:
        target = _check_options(args)
        scenarios = all_on(load_scenarios(scenario_paths), target)
        schedule = CrashSchedule.parse(args.schedule) if args.schedule is not None else None
        shard = resolve_shard(args.shard, os.environ)
        step_summary.check_target(os.environ)
        # read whenever given (a FIFO, a nested or bad file is refused even without --shard)
        durations = earlier_durations(Path(args.durations)) if args.durations else {}
        durations = durations if shard is not None else {}
        if args.sut and not target:
            from harness.sandbox.users import check_installable

            check_installable(Path(args.sut), args.module)
    except (ScenarioError, ValueError) as exc:
        print(f"shopops-chaos: error: {exc}", file=sys.stderr)
        return 2
    if not scenarios:
        where = ", ".join(map(str, scenario_paths))
        print(f"shopops-chaos: error: no scenario files (*.toml) in {where}", file=sys.stderr)
        return 2
    out_dir = Path(args.report_dir) / new_run_id()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)  # latest moves only once it is complete
    except OSError as exc:
        print(f"shopops-chaos: error: --report-dir {args.report_dir}: {exc}", file=sys.stderr)
        return 2
    at.out_dir = out_dir
    drop_older_killed(out_dir.parent, current=out_dir)  # runs killed in a row: one kept
    part = f" (shard {shard})" if shard is not None else ""
    say(f"shopops-chaos: {len(scenarios)} scenario(s){part} -> {out_dir}")
    line = ProgressLine()

    def progress(done: int, total: int, res: object, final: bool) -> None:
        from harness.model import ExecutionResult

        assert isinstance(res, ExecutionResult)
        mark = res.verdict.upper()
        ev = res.evidence
        notes = (f" notes={len(ev.gateway.notes_for(ev.case_id))}"
                 if len(ev.gates) > 1 else "")  # the order note is the second gated action
        twin = f"  equivalent to {res.equivalent_to}" if res.equivalent_to else ""
        say(f"{line.prefix(done, total, final)} {mark:<7} {res.plan.id:<55} "
            f"{res.elapsed_s:6.2f}s  deliveries={ev.deliveries}{notes}{power_note(res)}{twin}")

    def on_repeat(rep: int) -> None:
        line.started = time.monotonic()
        if args.repeat > 1:
            say(f"-- repeat {rep}/{args.repeat}")

    sut = Sut(path=Path(args.sut), module=args.module) if args.sut and not target else REFERENCE
    keep = {"keep_runs": args.keep_runs}
    try:
        with reaping_on_signals():
            result = run(scenarios, out_dir, jobs=args.jobs,
                         launcher=early or ("spawn" if sut.foreign else args.launcher),
                         schedule=schedule, worker_timeout_s=args.timeout, progress=progress,
                         repeat=args.repeat, fail_fast=args.fail_fast, on_repeat=on_repeat,
                         sut=sut, shard=shard, durations=durations,
                         keep_databases=args.keep_all, exhaustive=args.exhaustive,
                         where_planned=schedule is not None and len(scenarios) > 1)
    except Exception as exc:  # a harness error is never a verdict about the loop
        import traceback

        traceback.print_exc()
        print(f"shopops-chaos: harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        finish_run(RunResult(out_dir.name, out_dir, interrupted=True), out_dir, **keep)
        return 2
    if result.interrupted:
        print("shopops-chaos: interrupted; every worker was reaped; reporting the "
              f"{len(result.results)} execution(s) that finished", file=sys.stderr)
    at.writing = True
    # a second Ctrl-C while writing leaves latest where it was; after a run no signal
    # stopped, the first one lets the reports finish (it threw a finished run away)
    with reaping_on_signals(grace=0 if result.interrupted else 1):
        if shard is not None:  # before the reports: summary.json is written last
            from harness.reports.run_json import write_run_json

            run_file = write_run_json(result, out_dir, scenarios)
        soak = (_write_soak(result, args.repeat, args.fail_fast)
                if args.repeat > 1 or args.fail_fast else None)
        paths = finish_run(result, out_dir, **keep)  # latest moves last
        if shard is not None:
            paths["run"] = run_file
        if soak is not None:
            paths["soak"] = soak
    # the reports are complete and latest moved: a signal from here on can change nothing
    # (found by a new user: one just after the last line said the folder was incomplete
    # and ended a passing run with 2)
    ignore_further_signals()
    _summary(result, paths)
    if graced():
        print("shopops-chaos: a signal came while the reports were written: every execution "
              "had finished, so they were finished first (a second one stops the writing)",
              file=sys.stderr)
    return 2 if result.interrupted else result.exit_status  # as grade: not a verdict


def _write_soak(result: object, repeat: int, fail_fast: bool) -> Path:
    """``soak.json``: per repeat, its verdict, counts and executions (ids repeat as-is)."""
    from harness.model import Counts, RunResult, roll_up
    from harness.reports.base import write_json

    assert isinstance(result, RunResult)
    repeats = []
    for rep in sorted(set(result.repeats)):
        mine = [r for r, i in zip(result.results, result.repeats, strict=True) if i == rep]
        counts = Counts.of(r.verdict for r in mine).as_dict()
        verdict = roll_up(r.verdict for r in mine)
        repeats.append({"repeat": rep, "verdict": verdict, "counts": counts,
                        "executions": [{"id": r.plan.id, "verdict": r.verdict,
                                        "workdir": r.evidence.workdir or None}
                                       for r in mine]})
    return write_json(result.out_dir / "soak.json", {
        "run_id": result.run_id, "repeat": repeat, "fail_fast": fail_fast,
        "repeats_run": len(repeats), "stopped_early": result.stopped_early,
        "verdict": result.verdict, "repeats": repeats})


def _explore(args: argparse.Namespace) -> int:
    from harness.explore.explorer import Example, explore, write_explore_report
    from harness.launch.processes import reaping_on_signals
    from harness.plan.catalogue import resolve
    from harness.plan.scenario import load_scenario
    from harness.run.runner import new_run_id

    path = resolve(args.scenario) if args.scenario else _default_paths()[0] / DEFAULT_EXPLORE
    try:
        if path.is_dir():
            raise ValueError(f"{path}: explore takes one scenario file, not a folder")
        scenario = load_scenario(path)
    except (ScenarioError, ValueError) as exc:
        print(f"shopops-chaos: error: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(args.report_dir) / new_run_id()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)  # latest moves once explore.json is written
    except OSError as exc:
        print(f"shopops-chaos: error: --report-dir {args.report_dir}: {exc}", file=sys.stderr)
        return 2
    say(f"shopops-chaos explore: {scenario.name} ({args.profile} profile"
        f"{f', seed {args.seed}' if args.seed is not None else ''}) -> {out_dir}")

    from harness.explore.explorer import CI_EXAMPLES, DEV_EXAMPLES

    planned = args.examples or (CI_EXAMPLES if args.profile == "ci" else DEV_EXAMPLES)
    line = ProgressLine()

    def progress(ex: Example) -> None:
        mark = ex.verdict.upper()
        phase = "shrink " if ex.shrinking else ""
        where = (f"[{ex.n:>4}] " if ex.shrinking or ex.n > planned
                 else line.prefix(ex.n, planned, True) + " ")
        say(f"{where}{phase}{mark:<7} {ex.execution_id:<50} {ex.variant.describe()}  "
            f"{ex.elapsed_s:5.2f}s")

    try:
        with reaping_on_signals():
            result = explore(scenario, out_dir, max_examples=args.examples,
                             seed_value=args.seed, profile=args.profile,
                             launcher=args.launcher, worker_timeout_s=args.timeout,
                             progress=progress)
    except (KeyboardInterrupt, SystemExit):
        print("shopops-chaos: explore interrupted; every worker was reaped", file=sys.stderr)
        return 2
    except Exception as exc:  # a harness error is never a verdict about the loop
        import traceback

        traceback.print_exc()
        print(f"shopops-chaos: harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    paths = write_explore_report(result)
    counts = result.counts()
    say()
    seed = f"seed {result.seed}" if result.seed is not None else "derandomised"
    say(f"explore: {'FAILURE FOUND' if result.failure else 'no failure'}   "
          f"{counts['executions']} executions ({result.verdicts.line()}; "
          f"{counts['shrink_executions']} while shrinking), "
          f"{result.profile} profile, {seed}, {result.elapsed_s:.1f} s")
    if result.trace.verdict is not Verdict.PASS:
        say(f"  note: the trace run (no kill) itself was {result.trace.verdict}: "
              f"{result.trace.reasons[0] if result.trace.reasons else ''}")
    for reason, n in list(result.unknown_reasons().items())[:5]:
        say(f"  unknown x{n}: {reason}")
    if counts["unknown_with_failing_checks"]:
        say(f"  {counts['unknown_with_failing_checks']} unknown execution(s) had failing "
              "checks too (see explore.json)")
    if result.failure is not None and result.first_failure is not None:
        say(f"  first failure: {result.first_failure.execution_id}  "
              f"{result.first_failure.variant.describe()}")
        say(f"  shrunk to:     {result.failure.execution_id}  "
              f"{result.failure.variant.describe()}")
        for reason in result.failure.reasons:
            say(f"    {reason}")
        if result.flaky:
            say(f"  flaky: {result.flaky}")
        if result.replay_result is not None:
            say(f"  replayed from the scenario file: {result.replay_result.verdict.upper()}")
        say(f"  replay: {result.replay}")
    for name, p in paths.items():
        say(f"  {name:<10} {os.path.relpath(p)}")
    return result.exit_status


def _summary(result: object, paths: dict[str, Path]) -> None:
    from harness.model import RunResult

    assert isinstance(result, RunResult)
    dupes = [r for r in result.results if r.evidence.deliveries != 1]
    say()
    state = " (INTERRUPTED)" if result.interrupted else ""
    if result.gaps:
        state += " (KILL MATRIX INCOMPLETE)"
    if result.stopped_early:
        state += " (stopped at the first failure: --fail-fast)"
    soak = len(set(result.repeats)) > 1
    say(f"verdict: {result.verdict.upper()}{state}   {result.counts.line()}   "
          f"({len(result.results)} executions"
          f"{f' in {len(set(result.repeats))} repeats' if soak else ''}, "
          f"{result.elapsed_s:.1f} s)")
    eq = result.equivalence
    if eq.equivalent or eq.mismatches:
        say(f"  crash states counted once: {eq.run} run, {eq.equivalent} proven equivalent "
            f"({eq.sampled} of them run as a check); --exhaustive runs them all")
    for line in eq.mismatches:
        say(f"  HARNESS ERROR (equivalence): {line}")
    for res, rep in zip(result.results, result.repeats or [1] * len(result.results),
                        strict=True):
        if res.verdict is not Verdict.PASS:
            first = res.reasons[0] if res.reasons else ""
            where = f" (repeat {rep})" if soak else ""
            say(f"  {res.verdict.upper():<7} {res.plan.id}{where}: {first}")
            say(f"          replay: {res.plan.replay}")
    if dupes:
        from harness.reports.view import OUTCOME_TEXT, DeliveryOutcome, delivery_outcome

        odd = [r for r in dupes if delivery_outcome(r) is not DeliveryOutcome.NONE_EXPECTED]
        if odd:
            say(f"  deliveries other than one in {len(odd)} execution(s) "
                "(see duplicates.json):")
        for res in odd:
            note = " (as the scenario expects)" if res.verdict is Verdict.PASS else ""
            say(f"    {res.plan.id}: {res.evidence.deliveries} deliveries, "
                f"{OUTCOME_TEXT[delivery_outcome(res)]}{note}")
        if len(odd) < len(dupes):
            say(f"  {len(dupes) - len(odd)} execution(s) sent nothing, as their scenario "
                "expects (a rejection, a refused ticket, a fail-closed checkpoint)")
    if result.skipped:
        say(f"  --schedule skipped {len(result.skipped)} scenario(s) where it is not in the "
            "kill matrix: " + ", ".join(name for name, _ in result.skipped))
    for line in result.shortfall():
        say(f"  NOT A FULL RUN: {line}")
    for name, path in paths.items():
        say(f"  {name:<10} {os.path.relpath(path)}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
