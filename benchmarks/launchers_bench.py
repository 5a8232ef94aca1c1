"""Benchmark: the fork-server launcher against a fresh interpreter per worker, side by side.

Runs the single-crash kill matrix of ``scenarios/o1001.toml`` with each launcher (``jobs``
parallel executions, alternating launchers over ``--rounds`` rounds, medians reported) and
prints, on its last line, a JSON object::

    {"per_worker_ms_fork", "per_worker_ms_spawn", "speedup_fork_vs_spawn",
     "single_matrix_s", "worker_lifetime_ms_fork", "worker_lifetime_ms_spawn",
     "interpreter_start_ms", "executions", "workers", "jobs", "rounds"}

``per_worker_ms_*`` as in ``matrix_bench.py`` (sum of execution times / workers);
``speedup_fork_vs_spawn`` is their ratio; ``single_matrix_s`` is the wall time of the whole
matrix with the fork launcher; ``worker_lifetime_ms_*`` the mean start-to-reap time of one
worker (for fork: the fork, the loop's own work and the exit report).

Run: ``python benchmarks/launchers_bench.py [--jobs 2] [--rounds 1]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from matrix_bench import ROOT, interpreter_start_ms, measure  # noqa: E402

from harness.plan.scenario import load_scenario  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", type=int, default=2, help="parallel executions (default 2)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per launcher (median)")
    args = parser.parse_args()
    scenario = load_scenario(ROOT / "scenarios" / "o1001.toml")
    start_ms = interpreter_start_ms()
    seen: dict[str, list[dict[str, object]]] = {"fork": [], "spawn": []}
    for _ in range(args.rounds):
        for launcher in ("fork", "spawn"):
            m = measure(scenario, launcher=launcher, jobs=args.jobs)
            seen[launcher].append(m)
            print(f"{launcher:<5} wall {m['matrix_wall_s']:6.2f} s  per worker "
                  f"{m['per_worker_ms']:6.1f} ms  worker lifetime {m['worker_lifetime_ms']:6.1f} ms"
                  f"  {m['verdicts']}", flush=True)

    def median(launcher: str, key: str) -> float:
        return statistics.median(float(m[key]) for m in seen[launcher])  # type: ignore[arg-type]

    fork, spawn = median("fork", "per_worker_ms"), median("spawn", "per_worker_ms")
    figures = {
        "per_worker_ms_fork": round(fork, 1),
        "per_worker_ms_spawn": round(spawn, 1),
        "speedup_fork_vs_spawn": round(spawn / fork, 2),
        "single_matrix_s": round(median("fork", "matrix_wall_s"), 3),
        "worker_lifetime_ms_fork": round(median("fork", "worker_lifetime_ms"), 1),
        "worker_lifetime_ms_spawn": round(median("spawn", "worker_lifetime_ms"), 1),
        "interpreter_start_ms": round(start_ms, 1),
        "executions": seen["fork"][0]["executions"],
        "workers": seen["fork"][0]["workers"],
        "jobs": args.jobs,
        "rounds": args.rounds,
    }
    print(json.dumps(figures))
    ok = all(m["verdicts"]["pass"] == m["executions"]  # type: ignore[index]
             for runs in seen.values() for m in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
