"""Benchmark for the speed targets (issue "Fast and deep"): one run, side by side.

Prints progress, then on its last line a JSON object::

    {"harness_cpu_ms_per_execution", "speedup_per_execution", "speedup_per_execution_cold",
     "fork_server_start_ms", "speedup_per_execution_serial", "double_matrix_s",
     "double_matrix_exhaustive_s", "double_matrix_executions", "single_matrix_s",
     "speedup_fork_vs_spawn", "speedup_worker_lifetime", "worker_lifetime_ms", "peak_rss_mib",
     "per_execution_ms_100", "per_execution_ms_5000", "leaked_fds", "leaked_processes",
     "leaked_temp_entries", "executions_long", "targets_met"}

The issue-27 figures first: ``harness_cpu_ms_per_execution`` (the harness process's own
CPU per execution, below), ``speedup_per_execution`` (an execution's mean time with fresh
interpreters / with the fork server, on the single-crash matrix), ``double_matrix_s`` (the
double-crash matrix with crash states counted once, ``harness.run.equivalence``) beside
``double_matrix_exhaustive_s`` (every execution run), and ``double_matrix_executions``
(``run``, ``equivalent``, ``sampled``, ``total``). The machine is shared: compare the
figures of one run with each other, not with another run's.

- ``speedup_per_execution`` is measured with the fork server started before the matrix is
  timed: its start (``fork_server_start_ms``, once per run, ~150 ms) is not an execution's,
  and counted in the first execution it added ~8 ms to the mean of the 21-execution matrix
  (stop 36). ``speedup_per_execution_cold`` is the figure as measured before, the server
  started by the first worker;
- ``speedup_per_execution_serial``: the same ratio with one execution at a time
  (``--jobs 1``), as the issue's prototype was timed; ``targets_met``: for each of issue
  27's targets (``TARGETS``), whether this run's figure meets it;
- ``speedup_fork_vs_spawn``: the matrix's execution time per worker (the sum of its
  executions' times over its worker processes: a worker, and the harness's work around it)
  with fresh interpreters / with the fork server, on the single-crash matrix of
  ``scenarios/o1001.toml`` (same machine, same run, same ``--jobs``);
- ``speedup_worker_lifetime``: a worker's own time, from its launch to its reap (the mean
  of ``WorkerRun.elapsed_s``), with fresh interpreters / with the fork server, in the same
  two runs of that matrix; ``worker_lifetime_ms``: those two means (``fork``, ``spawn``);
- ``single_matrix_s`` / ``double_matrix_s``: wall seconds of the full single-crash and
  double-crash matrices with the fork launcher and ``--jobs`` (default: ``run``'s own,
  ``harness.run.runner.default_jobs``, one more than the processors: 3 on 2 cores);
- ``per_execution_ms_100`` / ``per_execution_ms_5000``: mean wall milliseconds per
  execution over the first 100 and the last 100 of a long run of ``--long`` executions
  (default 5000) of one schedule: flat means no growth with run length;
- ``peak_rss_mib``: the harness process's peak resident memory;
- ``leaked_*``: open fds (after a garbage collection), child processes and the harness's
  temp-dir entries (``shopops*``: other programs' are not counted) after the long run minus
  before it;
- ``cpu_ms_per_execution`` (harness, fork server, workers, total) and
  ``noop_worker_cpu_ms``: where an execution's CPU goes, and the floor a forked worker that
  does nothing sets (``benchmarks/cpu_bench.py``, 40 executions of
  ``o1001[t6.gateway_accepted]``).

Run: ``python benchmarks/speed_bench.py [--jobs N] [--long 5000]`` (minutes, not a test).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_bench import count, noop_workers  # noqa: E402
from cpu_bench import executions as cpu_split  # noqa: E402
from matrix_bench import ROOT, measure  # noqa: E402

from harness.launch.launcher import make_launcher  # noqa: E402
from harness.model import CrashSchedule  # noqa: E402
from harness.plan.scenario import load_scenario  # noqa: E402
from harness.run.execution import ExecutionPlan, execute  # noqa: E402
from harness.run.runner import default_jobs, run  # noqa: E402

#: Issue 27's targets, by figure: whether this run's value meets it.
TARGETS = {
    "harness_cpu_ms_per_execution": lambda v: v <= 15.0,
    "speedup_per_execution": lambda v: v >= 10.0,
    "double_matrix_s": lambda v: v <= 6.0,
    "single_matrix_s": lambda v: v <= 1.0,
}


def long_run(n: int, jobs: int) -> tuple[float, float, dict[str, int]]:
    """``n`` executions of ``o1001[t6.gateway_accepted]``; per-execution wall ms of the first
    and last 100, and what leaked."""
    me = psutil.Process()
    tmp_before = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("shopops")}
    fds_before, kids_before = me.num_fds(), len(me.children(recursive=True))
    plan = ExecutionPlan(load_scenario(ROOT / "scenarios" / "o1001.toml"),
                         CrashSchedule.parse("t6.gateway_accepted"))
    launcher = make_launcher("fork")
    stamps: list[float] = []
    with tempfile.TemporaryDirectory(prefix="shopops-bench-") as tmp:
        def one(i: int) -> str:
            result = execute(plan, Path(tmp) / f"e{i}", launcher=launcher,
                             keep_databases=False)  # as `run` without --keep-all
            stamps.append(time.perf_counter())
            assert not Path(tmp, f"e{i}").exists()  # a passing execution keeps no folder
            return result.verdict

        start = time.perf_counter()
        with ThreadPoolExecutor(jobs) as pool:
            verdicts = list(pool.map(one, range(n)))
    launcher.close()
    gc.collect()  # selectors held by reference cycles are closed when collected, not leaked
    assert set(verdicts) == {"pass"}, {v: verdicts.count(v) for v in set(verdicts)}
    stamps.sort()
    first = (stamps[99] - start) / 100 * 1000 if n >= 100 else float("nan")
    last = (stamps[-1] - stamps[-101]) / 100 * 1000 if n >= 200 else first
    leaks = {"leaked_fds": me.num_fds() - fds_before,
             "leaked_processes": len(me.children(recursive=True)) - kids_before,
             "leaked_temp_entries": len({n for n in os.listdir(tempfile.gettempdir())
                                         if n.startswith("shopops")} - tmp_before)}
    return first, last, leaks


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--jobs", type=count(1, 64), default=default_jobs(),
                        help="parallel executions, 1 to 64 (default: run's own, "
                             f"{default_jobs()} here)")
    parser.add_argument("--long", type=count(200, 100_000), default=5000,
                        help="executions of the long run, 200 to 100000 (default 5000)")
    args = parser.parse_args()
    o1001 = load_scenario(ROOT / "scenarios" / "o1001.toml")
    fork = measure(o1001, launcher="fork", jobs=args.jobs)
    warm = measure(o1001, launcher="fork", jobs=args.jobs, warm=True)
    spawn = measure(o1001, launcher="spawn", jobs=args.jobs)
    # one execution at a time, as the prototype was timed (no lane waits for a core)
    serial_fork = measure(o1001, launcher="fork", jobs=1, warm=True)
    serial_spawn = measure(o1001, launcher="spawn", jobs=1)
    print(f"single matrix: fork {fork['matrix_wall_s']:.2f} s (its server started first: "
          f"{warm['matrix_wall_s']:.2f} s, the start {warm['server_start_ms']:.0f} ms), "
          f"spawn {spawn['matrix_wall_s']:.2f} s; an execution: fork "
          f"{warm['per_execution_ms']:.1f} ms, spawn {spawn['per_execution_ms']:.1f} ms; a "
          f"worker's lifetime: fork {fork['worker_lifetime_ms']:.1f} ms, spawn "
          f"{spawn['worker_lifetime_ms']:.1f} ms", flush=True)
    double = load_scenario(ROOT / "scenarios" / "o1001-double.toml")
    timed: dict[bool, tuple[float, object]] = {}
    for exhaustive in (False, True):
        with tempfile.TemporaryDirectory(prefix="shopops-bench-") as tmp:
            t = time.perf_counter()
            result = run([double], Path(tmp) / "run", jobs=args.jobs, launcher="fork",
                         exhaustive=exhaustive, keep_databases=False)
            timed[exhaustive] = (time.perf_counter() - t, result)
        assert result.verdict == "pass", result.verdict
    double_s, eq_result = timed[False]
    exhaustive_s, _ = timed[True]
    eq = eq_result.equivalence  # type: ignore[attr-defined]
    print(f"double matrix: {eq.run + eq.equivalent} executions, {eq.run} run and "
          f"{eq.equivalent} proven equivalent ({eq.sampled} of them run as a check) in "
          f"{double_s:.2f} s; exhaustive {exhaustive_s:.2f} s", flush=True)
    first, last, leaks = long_run(args.long, args.jobs)
    print(f"long run: {args.long} executions, first 100 {first:.1f} ms each, last 100 "
          f"{last:.1f} ms each; leaks {leaks}", flush=True)
    split = cpu_split("t6.gateway_accepted", 40)
    noop, _ = noop_workers(30)
    print(f"CPU per execution: harness {split['harness_cpu_ms']:.1f} ms, fork server "
          f"{split['fork_server_cpu_ms']:.1f} ms, workers {split['workers_cpu_ms']:.1f} ms "
          f"({split['workers_per_execution']}); a forked worker doing nothing {noop:.1f} ms",
          flush=True)
    figures = {
        "harness_cpu_ms_per_execution": round(split["harness_cpu_ms"], 1),
        "speedup_per_execution": round(spawn["per_execution_ms"] / warm["per_execution_ms"], 2),
        "speedup_per_execution_cold": round(spawn["per_execution_ms"]
                                            / fork["per_execution_ms"], 2),
        "fork_server_start_ms": warm["server_start_ms"],
        "speedup_per_execution_serial": round(serial_spawn["per_execution_ms"]
                                              / serial_fork["per_execution_ms"], 2),
        "double_matrix_s": round(double_s, 3),
        "double_matrix_exhaustive_s": round(exhaustive_s, 3),
        "double_matrix_executions": {"run": eq.run, "equivalent": eq.equivalent,
                                     "sampled": eq.sampled, "total": eq.run + eq.equivalent},
        "single_matrix_s": round(fork["matrix_wall_s"], 3),
        "speedup_fork_vs_spawn": round(spawn["per_worker_ms"] / fork["per_worker_ms"], 2),
        "speedup_worker_lifetime": round(spawn["worker_lifetime_ms"]
                                         / fork["worker_lifetime_ms"], 2),
        "worker_lifetime_ms": {"fork": fork["worker_lifetime_ms"],
                               "spawn": spawn["worker_lifetime_ms"]},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "per_execution_ms_100": round(first, 1),
        "per_execution_ms_5000": round(last, 1),
        "executions_long": args.long,
        **leaks,
        "cpu_ms_per_execution": {k.removesuffix("_cpu_ms"): round(split[k], 1) for k in (
            "harness_cpu_ms", "fork_server_cpu_ms", "workers_cpu_ms", "total_cpu_ms")},
        "noop_worker_cpu_ms": round(noop, 1),
    }
    figures["targets_met"] = {name: ok(figures[name]) for name, ok in TARGETS.items()}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
