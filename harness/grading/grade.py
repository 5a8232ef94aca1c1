"""Grading mode: score an implementation of the chapter against a rubric.

``grade(sut, out_dir)`` runs the rubric's scenarios against the implementation in real
processes (it meets ``docs/contract.md``), then scores every rubric item from the harness's
own evidence and writes a Gradescope ``results.json`` (https://gradescope-autograders.readthedocs.io/
en/latest/specs/ — ``tests[]`` with ``name``, ``score``, ``max_score``, ``output``,
``visibility``; top-level ``score``, ``execution_time``, ``output``) plus a readable
``report.md``. It always writes ``results.json``: when the implementation does not import,
hangs, crashes, or the harness itself errs, the affected items score 0 with the reason.

Items are all-or-nothing: crash-safety holds at every kill point or it does not; the
output lists the executions that broke it, each with its replay command.

Sealed (``harness.sandbox.users``): an untrusted implementation's workers run as a user of their
own that can write only its sandbox; output paths are checked before anything runs and
written so they cannot be redirected (``harness.grading.safe_io``); an ``unknown`` for a reason
outside the implementation is run again a bounded number of times (``harness.grading.retry``).
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.grading.output import (  # re-exported: the grade's types and writers
    Grade,
    GradedTest,
    write_page,
    write_report,
    write_results,
)
from harness.grading.preflight import preflight, sealed
from harness.grading.retry import retry_unknowns
from harness.grading.rubric import DEFAULT_RUBRIC, RubricItem
from harness.grading.rubric_file import (  # the rubric file's names, re-exported
    MAX_POINTS,
    SCENARIOS_DIR,
    VISIBILITIES,
    RubricError,
    load_rubric,
)
from harness.grading.safe_io import check_outputs
from harness.launch.launcher import Launcher, make_launcher
from harness.model import (
    CheckId,
    CheckStatus,
    Counts,
    CrashSchedule,
    ExecutionResult,
    PythonTarget,
    Sut,
    Verdict,
)
from harness.plan.catalogue import catalogue_name
from harness.reports.console import ProgressLine
from harness.run.execution import execute
from harness.sandbox import users as sandbox

__all__ = ["DEFAULT_RUBRIC", "MAX_POINTS", "VISIBILITIES", "Grade", "GradedTest",
           "RubricError", "RubricItem", "grade", "load_rubric", "preflight", "replay_command",
           "score_item", "sealed", "write_page", "write_report", "write_results"]

Say = Callable[[str], None]


class _Interrupted(Exception):
    """The run under the grade was interrupted (``RunResult.interrupted``)."""

    def __init__(self, done: int) -> None:
        super().__init__(done)
        self.done = done


def replay_command(r: ExecutionResult) -> str:
    """``r``'s replay command as a student types it in their own checkout, with the
    harness installed: a shipped scenario by its catalogue name, any other by its path
    relative to the current folder, and ``--sut .`` (``ExecutionPlan.replay_from``); no
    path of the grader's machine."""
    return r.plan.replay_from(Path.cwd(), scenario_as=catalogue_name(r.plan.scenario.path),
                              sut_as=".")


def score_item(item: RubricItem, results: Sequence[ExecutionResult]) -> GradedTest:
    """Score one rubric item from the executions of its scenarios (all-or-nothing)."""
    mine = [r for r in results if r.plan.scenario.name in item.scenarios]
    if not mine:
        return GradedTest(item.name, 0.0, item.points,
                          "No execution of " + ", ".join(item.scenarios) + " ran.",
                          item.visibility)
    if item.checks and all(not c.applicable for r in mine for c in r.checks
                           if c.check_id in item.checks):
        detail = next((c.detail for r in mine for c in r.checks if c.check_id in item.checks),
                      "not applicable")
        detail = detail.removeprefix("not applicable: ")
        return GradedTest(item.name, 0.0, 0.0, f"Not applicable: {detail}.", item.visibility)
    broken = []
    for r in mine:
        if r.verdict is Verdict.UNKNOWN:
            broken.append((r, "could not be verified: " + "; ".join(r.reasons[:2])))
        else:
            why = _item_problems(item, r)
            if why:
                broken.append((r, "; ".join(why)))
    lines = [item.explain] if item.explain else []
    if not broken:
        lines.append(f"Held in all {len(mine)} executions.")
        return GradedTest(item.name, item.points, item.points, "\n".join(lines),
                          item.visibility)
    lines.append(f"Broken in {len(broken)} of {len(mine)} executions, for example:")
    for r, reason in broken[:5]:
        lines += [f"- {r.plan.id}: {reason}", f"  replay: {replay_command(r)}"]
    return GradedTest(item.name, 0.0, item.points, "\n".join(lines), item.visibility)


def _item_problems(item: RubricItem, r: ExecutionResult) -> list[str]:
    """What, of the item's checks and the scenario's expectations, went wrong in ``r``."""
    expected = r.plan.expected_failing
    why = []
    for c in r.checks:
        if c.check_id not in item.checks or not c.applicable:
            continue
        if c.check_id in expected and c.passed:
            why.append(f"{c.check_id}: expected to fail here (a teaching demo), but passed")
        elif c.check_id not in expected and not c.passed:  # undecided: its detail may be
            why.append(f"{c.check_id}: could not be decided: {c.undecided}"  # a pass's words
                       if c.undecided is not None else f"{c.check_id}: {c.detail}")
    return why + [reason for reason in r.reasons if reason.startswith("expected a worker")]


def _launcher(sut: Sut, name: str | None, target: PythonTarget | None = None) -> Launcher:
    """How the workers start. An untrusted implementation: a sealed fork server
    (``harness.forkserver.sealed``: preloaded with the libraries it may use, never with its code)
    when sealing is available, else a fresh interpreter each (``spawn``; also when ``name``
    says so); for an untrusted target, that server also preloads the frameworks its folder
    imports and the harness's target worker (``target_preload``). The reference or a
    trusted variant: a fork server preloaded from its folder."""
    from harness.launch.fork import ForkLauncher

    if target is not None and target.untrusted and sandbox.available() and name != "spawn":
        from harness.launch.target_servers import sealed_server

        return sealed_server(target.folder, target.extra)
    if sut.untrusted:
        if name == "spawn" or not sandbox.available():
            return make_launcher("spawn")
        return ForkLauncher(sealed=True, fallback=None)
    if name == "spawn":
        return make_launcher("spawn")
    return ForkLauncher(code_path=str(sut.path.resolve()) if sut.path else None)


def grade(sut: Sut, out_dir: Path, *, rubric: Sequence[RubricItem] = DEFAULT_RUBRIC,
          results_path: Path | None = None, jobs: int | None = None,
          worker_timeout_s: float = 30.0, launcher: str | None = None,
          say: Say | None = None, schedule: CrashSchedule | None = None,
          target: PythonTarget | None = None) -> Grade:
    """Grade ``sut``: run the rubric's scenarios, score, write ``results.json``,
    ``report.md`` and the student-facing ``report.html``. Never raises for the
    implementation's faults, nor for the harness's own: ``results.json`` is written in
    every case.

    Args:
        sut: the implementation (``Sut(path=...)``; the reference when ``path`` is None).
        out_dir: where the run's reports and ``report.md`` go.
        rubric: the items (``DEFAULT_RUBRIC`` or ``load_rubric(file)``).
        results_path: where ``results.json`` goes (default ``out_dir/results.json``;
            Gradescope wants ``/autograder/results/results.json``).
        jobs: parallel executions.
        worker_timeout_s: seconds one worker may run.
        launcher: ``fork`` or ``spawn``; default ``spawn`` for a foreign implementation
            (whose imports the harness does not control) and ``fork`` for the reference.
        say: called with each console line: progress, each item's score and, for each
            zero, its one-line reason and replay command (``None``: silent).
        schedule: grade only this crash schedule of every scenario (a quick re-check of
            one execution; no trace runs). Default: the whole kill matrix.
        target: grade this target (``harness.grading.targets.load_target_dir``) instead of
            a package: every scenario runs on it, items it cannot be graded on are not
            applicable (0 of 0 points, with why); ``sut`` is then the reference.

    Returns:
        the ``Grade``; when SIGINT/SIGTERM interrupted the run, every item scores 0 with
        that reason and ``Grade.interrupted`` is set (a partial matrix is not a grade).

    Raises:
        OutputPathError: ``out_dir`` or ``results_path`` cannot be used (before anything
            runs; ``harness.grading.safe_io.check_outputs``).
    """
    started = time.monotonic()
    check_outputs(out_dir, results_path)
    say = say or (lambda line: None)
    chosen = _launcher(sut, launcher, target)  # closed below, whatever happens
    try:
        return _grade(sut, out_dir, rubric, results_path, jobs, worker_timeout_s, chosen,
                      say, schedule, target, started)
    finally:
        chosen.close()


def _grade(sut: Sut, out_dir: Path, rubric: Sequence[RubricItem], results_path: Path | None,
           jobs: int | None, worker_timeout_s: float, chosen: Launcher, say: Say,
           schedule: CrashSchedule | None, target: PythonTarget | None, started: float
           ) -> Grade:
    from harness.plan.scenario import load_scenarios
    from harness.reports.write import write_reports
    from harness.run.runner import run

    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = results_path or out_dir / "results.json"
    report_path = out_dir / "report.md"
    tests: list[GradedTest]
    interrupted = False
    try:
        problem = preflight(sut, launcher=chosen)
        if problem is not None:
            tests = [GradedTest(i.name, 0.0, i.points, problem, i.visibility) for i in rubric]
            output = "The implementation could not be started, so nothing could be graded."
            say(f"the implementation does not start: {problem.splitlines()[-1]}")
        else:
            tests, output = _run_and_score(sut, out_dir, rubric, jobs, worker_timeout_s,
                                           chosen, say, schedule, run, write_reports,
                                           load_scenarios, target)
    # a partial matrix must never read as a grade; SIGINT/SIGTERM outside the run (the
    # start-up check, the run's reports) too: KeyboardInterrupt / SystemExit there
    except (_Interrupted, KeyboardInterrupt, SystemExit) as stop:
        interrupted = True
        done = stop.done if isinstance(stop, _Interrupted) else None
        why = ("The grade was interrupted (SIGINT or SIGTERM)"
               + (f" after {done} executions" if done is not None else "")
               + "; nothing was scored. Grade again.")
        tests = [GradedTest(i.name, 0.0, i.points, why, i.visibility) for i in rubric]
        output = why
        say(why)
    except Exception as exc:  # the harness erred: say so, score nothing
        tests = [GradedTest(i.name, 0.0, i.points, f"harness error: {exc}",
                            i.visibility) for i in rubric]
        output = f"The grader itself failed ({type(exc).__name__}: {exc}); not your fault."
    elapsed = time.monotonic() - started
    write_results(tests, results_path, elapsed, output)
    # a target by its folder's name: no path of the grader's machine on a student's page
    graded = (sut.describe() if target is None
              else f"{(target.source or target.folder).name} (target {target.name})")
    write_report(tests, report_path, graded, output)
    page_path = write_page(tests, out_dir / "report.html", graded, output)
    return Grade(tuple(tests), sum(t.score for t in tests), sum(t.max_score for t in tests),
                 round(elapsed, 3), output, results_path, report_path, page_path,
                 interrupted)


def _run_and_score(sut: Sut, out_dir: Path, rubric: Sequence[RubricItem], jobs: int | None,
                   worker_timeout_s: float, chosen: Launcher, say: Say,
                   schedule: CrashSchedule | None, run: Any,
                   write_reports: Any, load_scenarios: Any, target: PythonTarget | None = None
                   ) -> tuple[list[GradedTest], str]:
    names = dict.fromkeys(n for item in rubric for n in item.scenarios)
    scenarios = load_scenarios([SCENARIOS_DIR / f"{n}.toml" for n in names])
    na: list[GradedTest] = []
    if target is not None:
        from harness.grading.targets import adapt_rubric, on_target

        scenarios, _ = on_target(scenarios, target)
        rubric, dropped = adapt_rubric(rubric, {s.name for s in scenarios}, target)
        na = [GradedTest(i.name, 0.0, 0.0, f"Not applicable to a {target.name} target: "
                         f"{why}.", i.visibility) for i, why in dropped]
    run_dir = out_dir / "run"
    run_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(run_dir, 0o700)  # nothing of the run is for a worker's eyes

    line = ProgressLine()

    def progress(done: int, total: int, r: ExecutionResult, final: bool) -> None:
        # the estimate run shows: "[  3/27+]" while traces may add, "[ 12/418] eta 35s" after
        say(f"{line.prefix(done, total, final)} {r.plan.id}: {r.verdict}")

    result = run(scenarios, run_dir, jobs=jobs, launcher=chosen,
                 worker_timeout_s=worker_timeout_s, sut=sut, progress=progress,
                 schedule=schedule, exhaustive=True)  # grading is always exhaustive
    if result.interrupted:  # no retries, no scores: its reports say interrupted
        write_reports(result, run_dir)
        raise _Interrupted(len(result.results))

    def again(r: ExecutionResult, attempt: int) -> ExecutionResult:
        say(f"retrying {r.plan.id} (attempt {attempt + 1}): unknown for a reason "
            "outside the implementation")
        where = run_dir / "executions" / f"retry-{attempt}" / uuid.uuid4().hex[:12]
        return execute(r.plan, where, launcher=chosen, worker_timeout_s=worker_timeout_s)

    results, retried = retry_unknowns(result.results, again)
    result = dataclasses.replace(result, results=type(result.results)(results))
    write_reports(result, run_dir)
    tests = [score_item(item, results) for item in rubric]
    for item, t in zip(rubric, tests, strict=True):
        say(_console_line(t))
        if t.score == 0 and t.max_score > 0:
            broken = _first_broken(item, results)
            if broken is not None:
                r, reason = broken
                say(f"        why: {r.plan.id}: {reason.splitlines()[0][:160]}")
                say(f"        replay: {replay_command(r)}")
    for t in na:
        say(_console_line(t))
    tests += na
    counts = Counts.of(r.verdict for r in results)
    lines = [f"{len(results)} executions of {len(scenarios)} scenarios; verdicts pass "
             f"{counts.passed}, fail {counts.failed}, unknown {counts.unknown}. "
             "Evidence: the run/ folder beside these results (its report.html)."]
    untrusted = sut.untrusted or (target is not None and target.untrusted)
    lines.append("Sealed: every worker ran as a user of its own that could write only its "
                 "sandbox." if untrusted and sandbox.available() else "Not sealed: " + (
                     "the harness is not root, so workers ran as the harness's user."
                     if untrusted else "our own code (the reference or a variant)."))
    if retried:
        lines.append(f"Run again (unknown for a reason outside the implementation): "
                     f"{len(retried)} execution(s):")
        lines += [f"- {note}" for note in retried]
    # failed, not undecided: an execution cut short cannot decide them, and is no tampering
    tampered = [(r, c) for r in results for c in r.checks
                if c.check_id in (CheckId.NO_TAMPERING, CheckId.NO_PROCESS_LEFT)
                and c.status is CheckStatus.FAIL]
    if tampered:
        count = len({r.plan.id for r, _ in tampered})
        lines.append(f"Tampering or processes left behind in {count} execution(s) "
                     "(refused, killed, and failed; the verdict came from the harness's own "
                     "evidence):")
        lines += [f"- {r.plan.id}: {c.check_id}: {c.detail}" for r, c in tampered[:10]]
        for r, c in tampered[:10]:
            say(f"tampering: {r.plan.id}: {c.check_id}: {c.detail[:160]}")
    def local(text: str) -> str:
        return _local(text, run_dir, sut.path or (target.source if target else None))

    return ([dataclasses.replace(t, output=local(t.output)) for t in tests],
            local("\n".join(lines)))


def _local(text: str, run_dir: Path, sut_dir: Path | None) -> str:
    """``text`` for the student's page, with no path of the grader's machine: the run's
    folder as ``run``, the implementation's own folder as ``.`` (their checkout)."""
    for path, name in ((run_dir.resolve(), "run"), (run_dir, "run"),
                       *(((sut_dir.resolve(), "."), (sut_dir, ".")) if sut_dir else ())):
        text = text.replace(str(path), name)
    return text


def _first_broken(item: RubricItem, results: Sequence[ExecutionResult]
                  ) -> tuple[ExecutionResult, str] | None:
    """The first execution that broke ``item`` and why (what ``score_item`` lists first)."""
    for r in results:
        if r.plan.scenario.name not in item.scenarios:
            continue
        if r.verdict is Verdict.UNKNOWN:
            return r, "could not be verified: " + "; ".join(r.reasons[:1])
        why = _item_problems(item, r)
        if why:
            return r, why[0]
    return None


def _console_line(t: GradedTest) -> str:
    """One rubric item on the console: ``"    3 / 5    name"``, or ``"  n/a        name
    (not applicable)"`` for an item worth nothing here (as ``report.md`` says ``n/a``)."""
    if t.points.applicable:
        return f"{t.score:5g} / {t.max_score:<4g} {t.name}"
    return f"{'n/a':>5}        {t.name} (not applicable)"
