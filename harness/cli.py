"""``shopops-chaos``: run the kill matrix, list the labelled points.

Exit status of ``run``: 0 every execution passed; 1 any execution failed; 2 otherwise
unknown (a kill point never reached, a worker died of something other than our SIGKILL, a
deadline), a bad scenario file, a harness error, or an interrupted run.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.scenario import ScenarioError

DEFAULT_SCENARIOS = "scenarios"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``shopops-chaos --help``)."""
    parser = argparse.ArgumentParser(prog="shopops-chaos", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run the kill matrix of scenario files and write reports")
    p.add_argument("paths", nargs="*", help="scenario files or folders (default: scenarios/)")
    p.add_argument("--schedule", default=None,
                   help="run only this crash schedule, e.g. 't3.checkpoint_saved>t6.gateway_"
                        "accepted' or 'no-kill' (what a report's replay command uses)")
    p.add_argument("--report-dir", default="reports", help="where reports/<run-id>/ goes")
    p.add_argument("--jobs", "-j", type=int, default=None,
                   help="executions in parallel (default: number of CPUs)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds one worker may run before it is killed (verdict unknown)")
    p.add_argument("--launcher", choices=("fork", "spawn"), default="fork",
                   help="how workers start: forked from a pre-imported server (default, "
                        "fast) or a fresh interpreter each (full isolation)")
    sub.add_parser("points", help="list the labelled points of the crash timeline")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``shopops-chaos``; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "points":
        return _points()
    return _run(args)


def _points() -> int:
    from shopops.labels import CATALOGUE

    width = max(len(label.name) for label in CATALOGUE)
    for label in CATALOGUE:
        print(f"{label.name:<{width}}  {label.side:<7}  {label.moment}")
    return 0


def _default_paths() -> list[Path]:
    here = Path(DEFAULT_SCENARIOS)
    if here.is_dir():
        return [here]
    return [Path(__file__).resolve().parent.parent / DEFAULT_SCENARIOS]


def _run(args: argparse.Namespace) -> int:
    from harness.processes import reaping_on_signals
    from harness.reports import write_reports
    from harness.runner import new_run_id, run
    from harness.scenario import load_scenarios
    from harness.schedule import CrashSchedule

    try:
        scenarios = load_scenarios(args.paths or _default_paths())
        schedule = CrashSchedule.parse(args.schedule) if args.schedule else None
    except (ScenarioError, ValueError) as exc:
        print(f"shopops-chaos: error: {exc}", file=sys.stderr)
        return 2
    if not scenarios:
        print("shopops-chaos: error: no scenario files found", file=sys.stderr)
        return 2
    out_dir = Path(args.report_dir) / new_run_id()
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"shopops-chaos: {len(scenarios)} scenario(s) -> {out_dir}", flush=True)

    def progress(done: int, total: int, res: object) -> None:
        from harness.execution import ExecutionResult

        assert isinstance(res, ExecutionResult)
        mark = {"pass": "PASS", "fail": "FAIL", "unknown": "UNKNOWN"}[res.verdict]
        extra = f"  deliveries={res.evidence.deliveries}"
        print(f"[{done:>3}/{total:<3}] {mark:<7} {res.plan.id:<55} {res.elapsed_s:6.2f}s{extra}",
              flush=True)

    with reaping_on_signals():
        result = run(scenarios, out_dir, jobs=args.jobs, launcher=args.launcher,
                     schedule=schedule, worker_timeout_s=args.timeout, progress=progress)
    if result.interrupted:
        print("shopops-chaos: interrupted; every worker was reaped; reporting the "
              f"{len(result.results)} execution(s) that finished", file=sys.stderr)
    paths = write_reports(result, out_dir)
    _summary(result, paths)
    return result.exit_status


def _summary(result: object, paths: dict[str, Path]) -> None:
    from harness.runner import RunResult

    assert isinstance(result, RunResult)
    counts = {v: sum(r.verdict == v for r in result.results) for v in ("pass", "fail", "unknown")}
    dupes = [r for r in result.results if r.evidence.deliveries != 1]
    print()
    print(f"verdict: {result.verdict.upper()}   pass {counts['pass']}  fail {counts['fail']}  "
          f"unknown {counts['unknown']}   ({len(result.results)} executions, "
          f"{result.elapsed_s:.1f} s)")
    for res in result.results:
        if res.verdict != "pass":
            first = res.reasons[0] if res.reasons else ""
            print(f"  {res.verdict.upper():<7} {res.plan.id}: {first}")
            print(f"          replay: {res.plan.replay}")
    if dupes:
        print(f"  deliveries != 1 in {len(dupes)} execution(s) (see duplicates.json):")
        for res in dupes:
            print(f"    {res.plan.id}: {res.evidence.deliveries} deliveries"
                  f"{' (expected by the scenario)' if res.verdict == 'pass' else ''}")
    for name, path in paths.items():
        print(f"  {name:<10} {os.path.relpath(path)}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
