"""Benchmark: where an execution's CPU goes, by process — the harness, the fork server, the
workers — and the floor that real processes set (a forked worker that does nothing).

Wall time on a shared machine depends on the load; CPU seconds, as the kernel accounts them
(``psutil.Process.cpu_times``: user + system, and the children the fork server reaped), do
not much. Prints progress, then on its last line a JSON object::

    {"executions", "workers_per_execution", "wall_ms", "harness_cpu_ms",
     "fork_server_cpu_ms", "workers_cpu_ms", "total_cpu_ms", "noop_worker_cpu_ms",
     "fork_server_start_cpu_ms"}

- ``*_cpu_ms``: per execution of ``o1001[--schedule]`` (default ``t6.gateway_accepted``:
  park, approve, kill at the gateway's acceptance, resume), run one after another as
  ``shopops-chaos run`` runs them (a passing execution's databases dropped: no ``--keep-all``);
- ``noop_worker_cpu_ms``: one forked worker that exits at once (``shopops --version``
  refused by argparse): the fork, the copy-on-write faults of a child, the reaping;
- ``fork_server_start_cpu_ms``: starting a fork server (interpreter, preload) and forking
  its first worker.

Run: ``python benchmarks/cpu_bench.py [--schedule S] [--executions 40]`` (~30 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from harness.launch.launcher import make_launcher
from harness.model import CrashSchedule
from harness.plan.scenario import load_scenario
from harness.run.execution import ExecutionPlan, execute

ROOT = Path(__file__).resolve().parent.parent


def _cpu(times: psutil._common.pcputimes, children: bool) -> float:  # type: ignore[name-defined]
    own = times.user + times.system
    return own + (times.children_user + times.children_system if children else 0.0)


def executions(schedule: str, n: int) -> dict[str, float]:
    """``n`` executions of ``o1001`` under ``schedule``: per-execution ms by process."""
    plan = ExecutionPlan(load_scenario(ROOT / "scenarios" / "o1001.toml"),
                         CrashSchedule.parse(schedule))
    launcher = make_launcher("fork")
    me = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="shopops-bench-") as tmp:
        # the server is up
        first = execute(plan, Path(tmp) / "warm", launcher=launcher, keep_databases=False)
        server = psutil.Process(launcher.server_pid)
        s0, c0 = server.cpu_times(), me.cpu_times()
        wall = time.perf_counter()
        for i in range(n):
            result = execute(plan, Path(tmp) / f"e{i}", launcher=launcher,
                             keep_databases=False)  # as `run` without --keep-all
            assert result.verdict == first.verdict == "pass", result.verdict
        wall = time.perf_counter() - wall
        s1, c1 = server.cpu_times(), me.cpu_times()
    launcher.close()
    harness = _cpu(c1, False) - _cpu(c0, False)
    fork_server = _cpu(s1, False) - _cpu(s0, False)
    workers = (s1.children_user + s1.children_system) - (s0.children_user + s0.children_system)
    return {"executions": n, "workers_per_execution": len(result.evidence.workers),
            "wall_ms": wall / n * 1000, "harness_cpu_ms": harness / n * 1000,
            "fork_server_cpu_ms": fork_server / n * 1000, "workers_cpu_ms": workers / n * 1000,
            "total_cpu_ms": (harness + fork_server + workers) / n * 1000}


def noop_workers(n: int) -> tuple[float, float]:
    """CPU ms of one forked worker that exits at once, and of a fork server's start."""
    with tempfile.TemporaryDirectory(prefix="shopops-bench-") as tmp:
        def one(launcher) -> None:
            worker = launcher.start([sys.executable, "-m", "shopops", "--version"],
                                    env=dict(os.environ), cwd=tmp, stdout=f"{tmp}/out",
                                    stderr=f"{tmp}/err", index=0)
            worker.wait(30.0)

        me = psutil.Process()
        before = me.cpu_times()
        launcher = make_launcher("fork")
        one(launcher)
        server = psutil.Process(launcher.server_pid)
        started = _cpu(server.cpu_times(), True) + _cpu(me.cpu_times(), False) - _cpu(
            before, False)
        s0 = server.cpu_times()
        for _ in range(n):
            one(launcher)
        s1 = server.cpu_times()
        launcher.close()
    per = ((s1.children_user + s1.children_system) - (s0.children_user + s0.children_system)
           + _cpu(s1, False) - _cpu(s0, False)) / n
    return per * 1000, started * 1000


def count(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``low`` to ``high`` (argparse's usage error
    naming the option otherwise)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= n <= high:
            raise argparse.ArgumentTypeError(f"{n} is not from {low} to {high}")
        return n
    return parse


def schedule(text: str) -> str:
    """An argparse ``type``: a crash schedule ``CrashSchedule.parse`` accepts (its error,
    which lists the labels, as argparse's usage error otherwise)."""
    try:
        CrashSchedule.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--schedule", type=schedule, default="t6.gateway_accepted",
                        help="the crash schedule of every execution, e.g. t4.parked or "
                             "t4.parked>t6.gateway_accepted (default t6.gateway_accepted)")
    parser.add_argument("--executions", type=count(1, 100_000), default=40,
                        help="executions measured, 1 to 100000 (default 40)")
    args = parser.parse_args()
    figures = executions(args.schedule, args.executions)
    print(f"per execution ({figures['workers_per_execution']} workers): wall "
          f"{figures['wall_ms']:.1f} ms; CPU harness {figures['harness_cpu_ms']:.1f}, fork "
          f"server {figures['fork_server_cpu_ms']:.1f}, workers {figures['workers_cpu_ms']:.1f}"
          f", total {figures['total_cpu_ms']:.1f} ms", flush=True)
    noop, start = noop_workers(30)
    print(f"a forked worker that does nothing: {noop:.1f} ms CPU (fork, exit, reap); a fork "
          f"server's start and first worker: {start:.0f} ms CPU", flush=True)
    figures |= {"noop_worker_cpu_ms": noop, "fork_server_start_cpu_ms": start}
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v
                      for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
