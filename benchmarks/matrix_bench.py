"""Benchmark: the full single-crash kill matrix of ``scenarios/o1001.toml``.

Not a timed test: it prints figures, the last line a JSON object::

    {"executions", "matrix_wall_s", "per_execution_ms", "interpreter_start_ms",
     "workers", "per_worker_ms", "jobs", "launcher"}

``interpreter_start_ms`` is the mean of two bare ``python -c pass`` starts measured in the
same run, the baseline that a fresh-interpreter worker pays at least once per worker.

Run: ``python benchmarks/matrix_bench.py [--jobs N]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.runner import run
from harness.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def interpreter_start_ms(samples: int = 2) -> float:
    """Mean wall milliseconds of ``python -c pass``."""
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append((time.perf_counter() - t) * 1000)
    return sum(times) / len(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="parallel executions")
    args = parser.parse_args()
    scenario = load_scenario(ROOT / "scenarios" / "o1001.toml")
    start_ms = interpreter_start_ms()
    with tempfile.TemporaryDirectory(prefix="shopops-bench-") as tmp:
        t = time.perf_counter()
        result = run([scenario], Path(tmp) / "run", jobs=args.jobs)
        wall = time.perf_counter() - t
    n = len(result.results)
    workers = sum(len(r.evidence.workers) for r in result.results)
    verdicts = {v: sum(r.verdict == v for r in result.results) for v in ("pass", "fail",
                                                                          "unknown")}
    print(f"verdicts: {verdicts}")
    serial = sum(r.elapsed_s for r in result.results)
    print(f"{n} executions, {workers} worker processes, wall {wall:.2f} s "
          f"(sum of execution times {serial:.2f} s)")
    figures = {
        "executions": n,
        "matrix_wall_s": round(wall, 3),
        "per_execution_ms": round(serial / n * 1000, 1),
        "interpreter_start_ms": round(start_ms, 1),
        "workers": workers,
        "per_worker_ms": round(serial / workers * 1000, 1),
        "jobs": args.jobs,
        "launcher": result.launcher,
    }
    print(json.dumps(figures))
    return 0 if verdicts["pass"] == n else 1


if __name__ == "__main__":
    sys.exit(main())
