"""Benchmark: the full single-crash kill matrix of ``scenarios/o1001.toml``.

Not a timed test: it prints figures, the last line a JSON object::

    {"executions", "matrix_wall_s", "per_execution_ms", "interpreter_start_ms",
     "workers", "per_worker_ms", "jobs", "launcher"}

``interpreter_start_ms`` is the mean of two bare ``python -c pass`` starts measured in the
same run, the baseline that a fresh-interpreter worker pays at least once per worker.
``per_worker_ms`` is the sum of the execution times divided by the worker processes: what a
worker costs the harness, its start, its work and the execution around it.

Run: ``python benchmarks/matrix_bench.py [--jobs N] [--launcher fork|spawn]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.launch.fork import ForkLauncher
from harness.launch.launcher import Launcher, make_launcher
from harness.plan.scenario import Scenario, load_scenario
from harness.run.runner import run

ROOT = Path(__file__).resolve().parent.parent


def interpreter_start_ms(samples: int = 2) -> float:
    """Mean wall milliseconds of ``python -c pass``."""
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append((time.perf_counter() - t) * 1000)
    return sum(times) / len(times)


def measure(scenario: Scenario, *, launcher: str, jobs: int | None,
            warm: bool = False) -> dict[str, Any]:
    """Run the scenario's kill matrix once; the figures of the JSON line (without
    ``interpreter_start_ms``) plus ``verdicts`` and ``worker_lifetime_ms`` (mean start-to-reap
    time of one worker). ``warm``: the fork server is started before the run is timed (its
    start, once per run, is not an execution's: ``server_start_ms`` gives it; 0 for
    ``spawn``); otherwise the first execution pays it, as in ``shopops-chaos run``."""
    chosen: Launcher | str = launcher
    server_start_ms = 0.0
    if warm:
        chosen = make_launcher(launcher)
        if isinstance(chosen, ForkLauncher):
            t = time.perf_counter()
            chosen.ready()
            server_start_ms = (time.perf_counter() - t) * 1000
    try:
        with tempfile.TemporaryDirectory(prefix="shopops-bench-") as tmp:
            t = time.perf_counter()
            result = run([scenario], Path(tmp) / "run", jobs=jobs, launcher=chosen,
                         keep_databases=False)  # as `shopops-chaos run` without --keep-all
            wall = time.perf_counter() - t
    finally:
        if not isinstance(chosen, str):
            chosen.close()
    n = len(result.results)
    runs = [w for r in result.results for w in r.evidence.workers]
    serial = sum(r.elapsed_s for r in result.results)
    return {
        "executions": n,
        "matrix_wall_s": round(wall, 3),
        "per_execution_ms": round(serial / n * 1000, 1),
        "workers": len(runs),
        "per_worker_ms": round(serial / len(runs) * 1000, 1),
        "jobs": jobs,
        "launcher": result.launcher,
        "verdicts": {v: sum(r.verdict == v for r in result.results)
                     for v in ("pass", "fail", "unknown")},
        "worker_lifetime_ms": round(sum(w.elapsed_s for w in runs) / len(runs) * 1000, 1),
        "server_start_ms": round(server_start_ms, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", type=int, default=None, help="parallel executions")
    parser.add_argument("--launcher", choices=("fork", "spawn"), default="fork",
                        help="how workers start (default fork, as shopops-chaos run)")
    args = parser.parse_args()
    scenario = load_scenario(ROOT / "scenarios" / "o1001.toml")
    start_ms = interpreter_start_ms()
    m = measure(scenario, launcher=args.launcher, jobs=args.jobs)
    print(f"verdicts: {m['verdicts']}")
    print(f"{m['executions']} executions, {m['workers']} worker processes, wall "
          f"{m['matrix_wall_s']:.2f} s (sum of execution times "
          f"{m['per_execution_ms'] * m['executions'] / 1000:.2f} s), launcher {m['launcher']}, "
          f"mean worker lifetime {m['worker_lifetime_ms']} ms")
    keys = ("executions", "matrix_wall_s", "per_execution_ms", "interpreter_start_ms",
            "workers", "per_worker_ms", "jobs", "launcher")
    figures = {k: round(start_ms, 1) if k == "interpreter_start_ms" else m[k] for k in keys}
    print(json.dumps(figures))
    return 0 if m["verdicts"]["pass"] == m["executions"] else 1


if __name__ == "__main__":
    sys.exit(main())
