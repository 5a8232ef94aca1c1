"""Benchmark: per-execution time of each target (reference, python starter, LangGraph,
DBOS), and the import time that dominates a framework target's worker start.

For each target runs its no-kill execution ``--rounds`` times with fresh interpreters
(``spawn``) and ``--rounds`` times with the run's fork launcher (``fork``: the reference
loop from its fork server, target workers from a second server that preloaded the
frameworks, ``harness.forkserver.worker.TARGET_PRELOAD``; one warm-up execution first, so that
the servers' start is not counted), side by side in one run, and measures, in a fresh
interpreter, how long importing the target's module takes — the part of every worker's
start the preloading server saves. The last line is a JSON object::

    {"<target>": {"execution_s": median seconds of one no-kill execution, spawned,
                  "fork_execution_s": the same, forked,
                  "speedup": execution_s / fork_execution_s,
                  "workers": workers it started,
                  "per_worker_ms": execution_s / workers in ms (spawned),
                  "import_ms": median ms to import the target's module,
                  "fork_workers_s": median seconds its workers lived (launch to reap,
                                    summed over the execution's workers), forked,
                  "ratio": fork_execution_s / fork_workers_s,
                  "within_budget": fork_execution_s <= 1.5 * fork_workers_s + 0.05
                                   (issue 25: the harness pays only for the app)}, ...,
     "rounds": N}

Run: ``python benchmarks/targets_bench.py [--rounds 3]``. Numbers, not a timed test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.launch.launcher import Launcher, SpawnLauncher, make_launcher  # noqa: E402
from harness.model import CrashSchedule, ExecutionPlan, Scenario  # noqa: E402
from harness.plan.scenario import load_scenario  # noqa: E402
from harness.run.execution import execute  # noqa: E402

TARGETS = {
    "reference": (ROOT / "scenarios" / "o1001.toml", "shopops.loop"),
    "python": (ROOT / "scenarios" / "targets" / "python-starter.toml", "loop"),
    "langgraph": (ROOT / "scenarios" / "targets" / "langgraph-sync.toml", "o1001_graph"),
    "dbos": (ROOT / "scenarios" / "targets" / "dbos.toml", "o1001_workflow"),
}


def import_ms(scenario: Scenario, module: str) -> float:
    """Milliseconds a fresh interpreter spends importing ``module`` (minus a bare start)."""
    folder = str(scenario.target.folder) if scenario.target else str(ROOT)

    def run(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=folder)
        return (time.perf_counter() - t0) * 1000

    bare = run("pass")
    return run(f"import sys; sys.path.insert(0, {folder!r}); import {module}") - bare


def _median_execution(scenario: Scenario, launcher: Launcher, rounds: int,
                      name: str) -> tuple[float, int, float]:
    """Median seconds of ``rounds`` no-kill executions with ``launcher``, the workers one
    execution started, and the median seconds those workers lived (summed: each worker's
    ``WorkerRun.elapsed_s``, launch to reap)."""
    times, lives, workers = [], [], 0
    for i in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            result = execute(ExecutionPlan(scenario, CrashSchedule(())), Path(tmp) / str(i),
                             launcher=launcher, worker_timeout_s=300)
        if result.verdict != "pass":
            print(f"{name}: verdict {result.verdict}: {result.reasons}", file=sys.stderr)
        times.append(result.elapsed_s)
        lives.append(sum(w.elapsed_s for w in result.evidence.workers))
        workers = len(result.evidence.workers)
    return statistics.median(times), workers, statistics.median(lives)


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rounds", type=int, default=3,
                        help="executions per target, 1..20 (the median is reported)")
    parser.add_argument("--only", choices=sorted(TARGETS), action="append",
                        help="measure only this target (repeatable; default: all)")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 20:
        parser.error(f"--rounds: {args.rounds} is not in 1..20")
    out: dict[str, object] = {"rounds": args.rounds}
    for name, (path, module) in TARGETS.items():
        if args.only and name not in args.only:
            continue
        scenario = load_scenario(path)
        median, workers, _ = _median_execution(scenario, SpawnLauncher(), args.rounds, name)
        fork = make_launcher("fork")
        try:
            _median_execution(scenario, fork, 1, name)  # warm-up: the servers start
            forked, _, lived = _median_execution(scenario, fork, args.rounds, name)
        finally:
            fork.close()
        out[name] = {"execution_s": round(median, 3), "fork_execution_s": round(forked, 3),
                     "speedup": round(median / forked, 2), "workers": workers,
                     "per_worker_ms": round(1000 * median / max(workers, 1), 1),
                     "import_ms": round(statistics.median(
                         import_ms(scenario, module) for _ in range(args.rounds)), 1),
                     "fork_workers_s": round(lived, 3),
                     "ratio": round(forked / max(lived, 1e-6), 2),
                     "within_budget": forked <= 1.5 * lived + 0.05}
        print(f"{name:<10} spawn {median:7.2f} s/execution, fork {forked:7.2f} s "
              f"({median / forked:.1f}x)  {workers} workers  "
              f"import {out[name]['import_ms']} ms  workers lived {lived:.2f} s "
              f"(execution {forked / max(lived, 1e-6):.1f}x of it; budget 1.5x + 50 ms: "
              f"{'within' if forked <= 1.5 * lived + 0.05 else 'over'})",
              flush=True)  # type: ignore[index]
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
