"""A whole run: scenarios → trace runs → kill matrix → executions (in parallel) → results.

Executions run in a thread pool: each thread only waits on its own worker processes, the
real work happens in those processes. ``STOPPING`` (set on SIGINT/SIGTERM) stops new
workers from starting; every live worker of the run (``REGISTRY.within``: not another
run's in the same process) is then killed and reaped.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from harness.launch.launcher import Launcher, make_launcher
from harness.launch.processes import REGISTRY, STOPPING, HarnessStopping
from harness.launch.stop import DeferredSignals
from harness.model import (
    NO_KILL,
    REFERENCE,
    CrashSchedule,
    Equivalence,
    ExecutionPlan,
    ExecutionResult,
    KillPoint,
    MatrixGap,
    RunResult,
    Scenario,
    Shard,
    ShardPlan,
    Sut,
    Verdict,
)
from harness.plan.matrix import (
    double_kill_plans,
    points_after_first_kill,
    points_from_trace,
    single_kill_plans,
)
from harness.plan.shard import cut_matrix
from harness.run.completions import Completions
from harness.run.equivalence import DEFAULT_SAMPLE, Classes, equivalent_result, twin_plan
from harness.run.execution import execute
from harness.sandbox import users as sandbox

__all__ = ["Progress", "RunResult", "default_jobs", "execution_dirname", "new_run_id", "run"]

#: ``progress(done, total, result)`` or ``progress(done, total, result, final)``: ``final``
#: is true once no trace run (or, for a double-crash scenario, no single-kill execution)
#: can add executions, so ``total`` is it. A callback taking three arguments gets three.
Progress = Callable[..., None]


def _takes_final(progress: Progress) -> bool:
    """The callback accepts a fourth positional argument (``final``)."""
    import inspect

    try:
        params = inspect.signature(progress).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 4 or any(p.kind is p.VAR_POSITIONAL for p in params)


#: Seconds between reapings while an interrupted run waits for its executions to return.
_REAP_EVERY_S = 0.5
_NOT_PLANNED = "not in its kill matrix (its listed points and schedules)"
_NOT_REACHED = "not in its kill matrix (its trace run does not reach it)"


def _in_matrix(scenario: Scenario, schedule: CrashSchedule,
               reached: tuple[KillPoint, ...]) -> bool:
    """``schedule`` is one of ``scenario``'s own executions (``single_kill_plans``; for a
    double-crash scenario, a two-kill schedule whose first kill is one of its singles)."""
    if not schedule.kills:
        return scenario.baseline
    singles = {p.schedule for p in single_kill_plans(scenario, reached)}
    if schedule in singles:
        return True
    return (scenario.double and len(schedule.kills) == 2
            and CrashSchedule(schedule.kills[:1]) in singles)


def new_run_id() -> str:
    """A fresh run id: UTC time to the second and this process id."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"


def execution_dirname(plan: ExecutionPlan, salt: str = "") -> str:
    """A filesystem-safe folder name for a plan (``ExecutionPlan.dirname``); for an
    untrusted implementation (``salt`` given) an opaque one instead, ``x-<scenario>-`` and
    16 hex digits of a salted SHA-256 of the id, so that nothing the implementation can see
    spells out its crash schedule (the reports keep the mapping: each execution's
    ``workdir``)."""
    if salt:
        digest = hashlib.sha256(f"{salt}\0{plan.id}".encode()).hexdigest()
        return f"x-{plan.scenario.name}-{digest[:16]}"
    return plan.dirname


def default_jobs() -> int:
    """Executions run in parallel by default: one more than the processors this process may
    use (``os.sched_getaffinity``). An execution is a chain of processes handing over to
    each other (the harness, the fork server, a worker, the harness's service loop), each
    waiting on the last, so one execution per processor leaves them idle part of the time
    (the double-crash matrix of O-1001 on 2 cores used 1.55 of them); one more lane filled
    it: 3 against 2 jobs, the whole command in alternating pairs (``farm-bench``, medians of
    the pairs' ratios, stop 35), wall 0.937 of the single matrix's and 0.927 of the
    double's on a busy machine (6 and 5 pairs), 0.894 of the double's on a quiet one (6
    pairs), CPU 0.97–1.03.
    """
    return len(os.sched_getaffinity(0)) + 1


def run(
    scenarios: Sequence[Scenario],
    out_dir: Path,
    *,
    jobs: int | None = None,
    launcher: Launcher | str | None = None,
    schedule: CrashSchedule | None = None,
    worker_timeout_s: float = 30.0,
    progress: Progress | None = None,
    repeat: int = 1,
    fail_fast: bool = False,
    on_repeat: Callable[[int], None] | None = None,
    sut: Sut = REFERENCE,
    shard: Shard | None = None,
    durations: dict[str, float] | None = None,
    keep_databases: bool = True,
    where_planned: bool = False,
    exhaustive: bool = False,
    sample: float = DEFAULT_SAMPLE,
    seed: int = 0,
) -> RunResult:
    """Run the kill matrix of every scenario; results in ``RunResult`` (no reports written).

    Args:
        scenarios: validated scenarios.
        out_dir: the run's folder; each execution gets ``executions/<name>/``.
        jobs: parallel executions (threads); default ``default_jobs()``.
        launcher: a ``Launcher`` (the caller closes it) or a name for ``make_launcher``
            (``"fork"``, the default, or ``"spawn"``; that one is closed here).
        schedule: run only this schedule for every scenario (replay); no trace run.
        worker_timeout_s: per-worker deadline in seconds.
        progress: called as ``progress(done, total, result[, final])`` after each
            execution (counted within the current repeat); ``final``: ``total`` will not
            grow (passed when the callback takes a fourth argument).
        where_planned: with ``schedule`` (not sharded), run it only on the scenarios whose
            own kill matrix holds it (listed points and schedules, or the points their
            trace run reaches; for a double-crash scenario a two-kill schedule whose first
            kill is a single), listing the others in ``RunResult.skipped``.
        repeat: run the whole matrix (trace runs included) this many times, one after the
            other (soak). Ids stay the same in every repeat; ``RunResult.repeats`` says which
            repeat each result belongs to, and with ``repeat`` > 1 the executions of repeat
            ``i`` live under ``executions/repeat-<i>/``.
        fail_fast: stop at the first failing execution: nothing new starts (executions
            already running finish and are reported), no further repeat; sets
            ``RunResult.stopped_early``.
        on_repeat: called as ``on_repeat(i)`` when repeat ``i`` (1-based) starts.
        sut: the implementation under test (default: the reference loop).
        shard: run only this shard's units of the matrix (``harness.plan.shard``): every shard
            runs the trace runs points are learned from (each is reported by the one shard
            that owns it), cuts the matrix with ``cut_matrix`` and runs only its own units;
            the same cut in every repeat. ``None``: the whole matrix.
        durations: seconds per execution id of an earlier run, to balance the shards.
        keep_databases: ``False``: passing executions leave their SQLite files behind in
            the scratch area instead of copying them into ``out_dir``
            (``execution.execute``), for a run that drops them anyway (``--keep-all``
            not given).
        exhaustive: run every execution of the double-crash matrix. Without it, for trusted
            code (``sut`` not untrusted) in a whole, unsharded matrix, a double whose first
            crash left the state of an earlier single's (``harness.run.equivalence``) is
            reported as equivalent to that one's double with the same second kill, not run;
            ``sample`` (0 to 1) of them, drawn with ``seed``, run all the same and must give
            the same verdict (``RunResult.equivalence``).

    Returns:
        the ``RunResult``; on SIGINT/SIGTERM (``KeyboardInterrupt``/``SystemExit``) every
        worker is reaped and the executions that finished are returned with
        ``interrupted`` set. A kill matrix learned from an execution that was cut short
        (its deadline, ``worker_timeout_s``) is in ``RunResult.gaps``; planned executions
        that never ran are counted in ``RunResult.not_run``.
    """
    if repeat < 1:
        raise ValueError(f"repeat: {repeat!r} must be at least 1")
    with_final = progress is not None and _takes_final(progress)
    skipped: list[tuple[str, str]] = []  # where_planned: (scenario, why)
    gaps: list[MatrixGap] = []  # matrices learned from an execution cut short
    # the trace runs (and where_planned's scouts) of the repeat going on, until they return:
    # those left when the run ends never taught their scenario its matrix
    traces: dict[Future[ExecutionResult], Scenario] = {}
    scouts: dict[Future[ExecutionResult], Scenario] = {}
    owned = launcher is None or isinstance(launcher, str)
    if launcher is None or isinstance(launcher, str):
        launcher = make_launcher(launcher or "fork")
    started = time.monotonic()
    started_at = datetime.now(UTC).isoformat()
    interrupted = stopped_early = False
    cuts: list[ShardPlan] = []  # the shard plan, once the matrix was cut
    finished: dict[tuple[int, str], ExecutionResult] = {}  # (repeat, id)
    order: list[tuple[int, str]] = []
    pool = ThreadPoolExecutor(max_workers=jobs or default_jobs(),
                              thread_name_prefix="execution")
    submitted: list[Future[ExecutionResult]] = []
    # the main thread waits for executions holding no lock, and takes SIGINT/SIGTERM only
    # where it waits (DeferredSignals says why: a signal inside concurrent.futures.wait
    # hung the run for ever)
    completions = Completions()
    signals = DeferredSignals(completions.wake_fd)
    # this run's workers: its end reaps them, never another run's in this process (a
    # concurrent grade's, mid-story)
    this_run = object()

    def launch(fn: Callable[[ExecutionPlan], ExecutionResult], plan: ExecutionPlan
               ) -> Future[ExecutionResult]:
        fut = pool.submit(REGISTRY.within, this_run, fn, plan)
        submitted.append(fut)
        completions.watch(fut)
        return fut
    salt = secrets.token_hex(16) if sut.untrusted else ""
    equivalence = (not exhaustive and not sut.untrusted and shard is None
                   and schedule is None)
    if not 0.0 <= sample <= 1.0:
        raise ValueError(f"sample: {sample!r} must be between 0 and 1")
    tally = {"equivalent": 0, "sampled": 0}
    mismatches: list[str] = []

    def matrix(rep: int) -> bool:
        """One repeat of the whole matrix; ``True`` if ``fail_fast`` stopped it."""
        exe_dir = out_dir / "executions" / (f"repeat-{rep}" if repeat > 1 else "")

        def do(plan: ExecutionPlan, home: Path = exe_dir) -> ExecutionResult:
            return execute(plan, home / execution_dirname(plan, salt), launcher=launcher,
                           worker_timeout_s=worker_timeout_s, keep_databases=keep_databases)

        def scout(plan: ExecutionPlan) -> ExecutionResult:
            # a folder of its own: the no-kill schedule's plan has the scout's id, and in
            # one folder the real execution would inherit the scout's durable state
            return do(plan, out_dir / "scouts" / (f"repeat-{rep}" if repeat > 1 else ""))

        pending: dict[Future[ExecutionResult], ExecutionPlan] = {}
        traces.clear()
        scouts.clear()
        learned: dict[str, tuple[KillPoint, ...]] = {}  # sharded: each trace's points
        held: list[ExecutionResult] = []  # sharded: traces finished before the cut
        cut: ShardPlan | None = None
        total = done_here = 0
        stop = False
        classes = Classes(seed, sample) if equivalence else None
        waiting: dict[str, list[ExecutionPlan]] = {}  # twin's id: the plans equivalent to it
        samples: list[tuple[str, str]] = []  # (a sampled equivalent's id, its twin's id)

        def defer(plan: ExecutionPlan, twin: str) -> None:
            """``plan`` is equivalent to the execution ``twin``: reported once that one is."""
            nonlocal total
            if stop or (rep, plan.id) in order:
                return
            order.append((rep, plan.id))
            total += 1
            if (rep, twin) in finished:
                report(equivalent_result(plan, finished[(rep, twin)]))
            else:
                waiting.setdefault(twin, []).append(plan)

        def submit(plan: ExecutionPlan) -> None:
            nonlocal total
            if stop or (rep, plan.id) in order:  # the double matrix may reach one again
                return
            order.append((rep, plan.id))
            pending[launch(do, plan)] = plan
            total += 1

        def trace(scenario: Scenario) -> None:  # the no-kill execution is the trace run
            nonlocal total
            plan = ExecutionPlan(scenario, CrashSchedule(), sut)
            order.append((rep, plan.id))
            traces[launch(do, plan)] = scenario
            total += 1

        def drop(res: ExecutionResult) -> None:  # a trace run nobody reports
            nonlocal total
            order.remove((rep, res.plan.id))
            total -= 1
            unreported(res)

        def unreported(res: ExecutionResult) -> None:
            """Remove the files of an execution no report shows (a trace run or a scout),
            whatever its verdict, unless every execution's files are kept: a run of passing
            executions kept the folders of its ``baseline = false`` scenarios' trace runs,
            which no report named (found by a new user)."""
            if not keep_databases and res.evidence.workdir:
                shutil.rmtree(res.evidence.workdir, ignore_errors=True)

        def report(res: ExecutionResult) -> None:
            nonlocal done_here, stop, total
            finished[(rep, res.plan.id)] = res
            if res.equivalent_to is not None:
                tally["equivalent"] += 1
            done_here += 1
            if progress and not with_final:
                progress(done_here, total, res)
            elif progress:
                final = not traces and not scouts and (shard is None or cut is not None) \
                    and not any(p.scenario.double and schedule is None
                                and len(p.schedule.kills) == 1 for p in pending.values())
                progress(done_here, total, res, final)
            if fail_fast and res.verdict == Verdict.FAIL and not stop:
                stop = True  # cancel what has not started; running ones finish
                for queued in (pending, traces):
                    for f in [f for f in queued if f.cancel()]:
                        del queued[f]
                        total -= 1
            for plan in waiting.pop(res.plan.id, []):
                report(equivalent_result(plan, res))

        def learn(res: ExecutionResult, points: tuple[KillPoint, ...]) -> None:
            """``points`` were learned from ``res``: if it was cut short, the matrix
            holds only those, and the run says so (``MatrixGap``)."""
            why = res.evidence.cut_short_by
            if why is not None:
                gaps.append(MatrixGap(res.plan.scenario.name, res.plan.id, why,
                                      len(dict.fromkeys(points)),
                                      any(w.timed_out for w in res.evidence.workers)))

        def mine(scenario: Scenario, key: str) -> bool:
            assert cut is not None and shard is not None
            return cut.owner_of(scenario.name, key) == shard.index

        def start_shard() -> None:
            """Every trace the matrix is learned from is in: cut it, run this shard's part."""
            nonlocal cut
            assert shard is not None
            cut = cut_matrix(scenarios, learned, schedule, shard.count, durations or {}, sut)
            cuts[:] = [cut]
            for res in held:
                if res.plan.scenario.baseline and mine(res.plan.scenario, NO_KILL):
                    report(res)
                else:
                    drop(res)
            for scenario in scenarios:
                if schedule is not None:
                    if mine(scenario, schedule.id):
                        submit(ExecutionPlan(scenario, schedule, sut))
                    continue
                if scenario.name not in learned and scenario.baseline \
                        and mine(scenario, NO_KILL):
                    trace(scenario)  # its points are listed: only its owner runs it
                for plan in single_kill_plans(scenario, learned.get(scenario.name, ()), sut):
                    if mine(scenario, plan.schedule.id):
                        submit(plan)

        for scenario in scenarios:
            if shard is None and schedule is not None and where_planned:
                if scenario.points is None:  # learn its matrix first
                    scouts[launch(scout, ExecutionPlan(scenario, CrashSchedule(), sut))] = (
                        scenario)
                elif _in_matrix(scenario, schedule, ()):
                    submit(ExecutionPlan(scenario, schedule, sut))
                elif rep == 1:
                    skipped.append((scenario.name, _NOT_PLANNED))
            elif shard is None:
                if schedule is not None:
                    submit(ExecutionPlan(scenario, schedule, sut))
                else:
                    trace(scenario)
            elif schedule is None and scenario.points is None:
                trace(scenario)  # every shard learns the points it may have to kill at
        if shard is not None and not traces:
            start_shard()
        while pending or traces or scouts:
            completions.wait()
            signals.take()  # a signal raises here, where the main thread holds no lock
            fut = completions.pop()
            if fut is None or not (fut in pending or fut in traces or fut in scouts):
                continue  # cancelled (fail_fast), or a wake-up without a completion
            res = fut.result()
            if fut in scouts:
                scenario = scouts.pop(fut)
                unreported(res)
                assert schedule is not None
                reached = points_from_trace(res.evidence)
                if _in_matrix(scenario, schedule, reached):
                    submit(ExecutionPlan(scenario, schedule, sut))
                elif rep == 1:
                    skipped.append((scenario.name, _NOT_REACHED))
                    learn(res, reached)  # not reached: perhaps only for lack of time
                continue
            if fut in traces:
                scenario = traces.pop(fut)
                if scenario.points is None:
                    learn(res, points_from_trace(res.evidence))
                if shard is not None and cut is None:
                    learned[scenario.name] = points_from_trace(res.evidence)
                    held.append(res)
                    if not traces:
                        start_shard()
                    continue
                if shard is None:
                    reached = points_from_trace(res.evidence)
                    for plan in single_kill_plans(scenario, reached, sut):
                        submit(plan)
                if not scenario.baseline:
                    drop(res)
                    continue
            else:
                plan = pending.pop(fut)
                if plan.scenario.double and schedule is None:
                    seconds = double_kill_plans(plan, res.evidence)
                    learn(res, points_after_first_kill(res.evidence))
                    twin = (classes.twin_of(plan, res, seconds)
                            if classes is not None else None)
                    for second in seconds:
                        if cut is not None and cut.owner_of(
                                plan.scenario.name, second.schedule.id) is not None:
                            continue  # a listed schedule is a unit of its own
                        if twin is None:
                            submit(second)
                        elif classes is not None and classes.sampled(second):
                            submit(second)  # run all the same: checked against its twin
                            samples.append((second.id, twin_plan(second, twin).id))
                        else:
                            defer(second, twin_plan(second, twin).id)
            report(res)
        for ran_id, twin_id in samples:
            if (rep, ran_id) in finished and (rep, twin_id) in finished:
                tally["sampled"] += 1
                assert classes is not None
                classes.compare(finished[(rep, ran_id)], finished[(rep, twin_id)])
        if classes is not None:
            mismatches.extend(classes.mismatches)
        return stop

    try:
        with signals:  # SIGINT/SIGTERM are taken only at ``signals.take()``
            try:
                for rep in range(1, repeat + 1):
                    if on_repeat:
                        on_repeat(rep)
                    if matrix(rep):
                        stopped_early = True
                        break
            except (KeyboardInterrupt, SystemExit, HarnessStopping):
                interrupted = True  # the caller reports what finished; nothing is lost
                STOPPING.set()
            except BaseException:
                interrupted = True
                STOPPING.set()
                raise
            finally:  # no signal raises here: nothing of the teardown is cut short
                pool.shutdown(wait=False, cancel_futures=True)
                REGISTRY.reap_all(this_run)
                # a worker that was being started while that reaping ran (past the
                # launcher's check of STOPPING, not yet registered) would hold its
                # execution, and this wait, until its deadline: reap again until every
                # execution has returned (done(): a future cancelled above counts too)
                while True:
                    completions.clear()
                    if all(f.done() for f in submitted):
                        break
                    completions.wait(_REAP_EVERY_S)
                    REGISTRY.reap_all(this_run)
                pool.shutdown(wait=True)
                REGISTRY.reap_all(this_run)
                sandbox.sweep_strays()  # sealed runs: nothing of an execution's uid outlives it
                if owned:
                    launcher.close()
        # a signal during the teardown (found by a new user: SIGTERM just after the last
        # execution reported none of them): what finished is reported, marked interrupted
        interrupted = signals.finish() or interrupted
    finally:
        completions.close()
        STOPPING.clear()  # scoped to this run: a later run in the same process starts clean
        keys = [k for k in order if k in finished]
        # planned, never run: cancelled by fail_fast, cut off by an interrupt, or equivalent
        # to an execution that never ran (the trace runs nobody reports left ``order``)
        not_run = len(order) - len(keys)
        result = RunResult(out_dir.name, out_dir, tuple(finished[k] for k in keys),
                           started_at, round(time.monotonic() - started, 3), interrupted,
                           launcher.name, tuple(rep for rep, _ in keys), stopped_early,
                           shard, cuts[0] if cuts else None, tuple(skipped),
                           Equivalence(equivalence, len(keys) - tally["equivalent"],
                                       tally["equivalent"], tally["sampled"],
                                       tuple(mismatches)),
                           tuple(dict.fromkeys(gaps)), not_run,
                           tuple(dict.fromkeys(s.name for s in [*traces.values(),
                                                                *scouts.values()])))
    return result
