"""Grading mode: score an implementation of the chapter against a rubric.

``grade(sut, out_dir)`` runs the rubric's scenarios against the implementation in real
processes (``harness.sut``), then scores every rubric item from the harness's own evidence
and writes a Gradescope ``results.json`` (https://gradescope-autograders.readthedocs.io/
en/latest/specs/ — ``tests[]`` with ``name``, ``score``, ``max_score``, ``output``,
``visibility``; top-level ``score``, ``execution_time``, ``output``) plus a readable
``report.md``. It always writes ``results.json``: when the implementation does not import,
hangs, crashes, or the harness itself errs, the affected items score 0 with the reason.

Items are all-or-nothing: crash-safety holds at every kill point or it does not; the
output lists the executions that broke it, each with its replay command.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.checks import CHECK_IDS
from harness.launcher import Launcher, make_launcher
from harness.model import SRC, ExecutionResult, Sut
from shopops.errors import ShopOpsError

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
SCENARIOS_DIR = Path(SRC) / "scenarios"


class RubricError(ShopOpsError, ValueError):
    """A bad rubric file (fields: ``path``, ``field``, ``reason``)."""


@dataclass(frozen=True)
class RubricItem:
    """One graded test.

    Attributes:
        name: the Gradescope test name.
        points: its ``max_score``.
        scenarios: scenario names (files under ``scenarios/``) whose executions count.
        checks: the check ids this item is about: in every one of those executions each
            must come out as its scenario expects (pass, or fail for a teaching demo's
            expected failure). Always, a scenario's expected worker error must have
            happened and the verdict must be definite (not ``unknown``); other checks do
            not count here, so one bug costs the items about it, not every item.
        visibility: Gradescope visibility.
        explain: one line for the student: what the item means.
    """

    name: str
    points: float
    scenarios: tuple[str, ...]
    checks: tuple[str, ...] = ()
    visibility: str = "visible"
    explain: str = ""


DEFAULT_RUBRIC: tuple[RubricItem, ...] = (
    RubricItem("Checklist 1: the draft after resume is the pre-crash draft", 10,
               ("o1001", "nondeterministic-policy"), ("draft_identical", "intake_not_repeated"),
               explain="Checkpoint the draft; never re-draft on resume."),
    RubricItem("Checklist 2: phase stays awaiting_approval until grant_approval", 10,
               ("o1001", "rejection"), ("parked_until_approval",),
               explain="A resume without an approval must park again and send nothing."),
    RubricItem("Checklist 3: email_sent is false until the post-approval send", 10,
               ("o1001",), ("not_sent_before_approval",),
               explain="Record the send only after the gateway confirmed it."),
    RubricItem("Checklist 4: step continues across resume", 10, ("o1001",),
               ("step_continues",), explain="Load step from the checkpoint; never reset it."),
    RubricItem("Checklist 5: the same idempotency key after a crash; one delivery", 10,
               ("o1001", "reply-lost-first-attempt", "gateway-5xx", "reply-after-timeout"),
               ("same_key_one_delivery",),
               explain="Persist the key before the first attempt; every retry reuses it."),
    RubricItem("Exactly one delivery at every kill point", 10, ("o1001",),
               ("exactly_one_delivery",),
               explain="The gateway's own log must show one delivery, and the case done."),
    RubricItem("No send without a server-issued ticket", 10,
               ("o1001", "forged-ticket", "forged-ticket-in-state", "ticket-other-case",
                "ticket-stale-draft", "ticket-consumed"),
               ("ticket_server_issued",),
               explain="Tickets are server-side facts: verify them with the queue."),
    RubricItem("Exercise 1: a corrupt state_json raises a clear error", 10,
               ("checkpoint-corrupt-json", "checkpoint-truncated-json",
                "checkpoint-invalid-utf8", "checkpoint-unknown-version"),
               ("storage_safe",),
               explain="Fail closed: a typed error, the row untouched, never a fresh start."),
    RubricItem("Exercise 2: v1->v2 migration adds preferred_channel = \"email\"", 10,
               ("v1-migration",), ("storage_safe",),
               explain="Explicit, recorded, safe to run twice and to kill half-way."),
    RubricItem("Exercise 3: without keys a double resume duplicates; with keys it does not",
               10, ("demo-keys-off", "reply-lost-first-attempt"),
               ("same_key_one_delivery",),
               explain="The keys-off switch must really send without a key."),
    RubricItem("Exercise 4: a lease owner rejects resume from another owner", 10,
               ("two-resumers", "lease-takeover", "lease-same-owner"),
               explain="Leases with an owner and an expiry; fence a taken-over worker."),
    RubricItem("History: nothing is sent or written once the case is done", 10,
               ("o1001", "lease-takeover", "lease-same-owner", "two-resumers", "rejection",
                "dead-letter"), ("no_request_after_done", "phase_path"),
               explain="No gateway call after completion, even a deduplicated one; phases "
                       "follow the FSM and stop at a terminal one."),
    RubricItem("Leases: one writer at a time, fences only rise", 10,
               ("two-resumers", "lease-takeover", "lease-same-owner"), ("lease_exclusive",),
               explain="A new holder gets a higher fence; a taken-over worker never writes."),
    RubricItem("Rejections end the case or are answered by a redraft", 10,
               ("rejection", "rejection-feedback", "reject-twice-then-approve"),
               ("rejection_respected",),
               explain="Never park forever on a rejected draft; answer the feedback."),
    RubricItem("Recovery attempts are counted; dead-lettered past the maximum", 10,
               ("dead-letter", "o1001"), ("attempts_bounded",),
               explain="Count every pick-up in flight durably; stop retrying at the maximum."),
)


@dataclass(frozen=True)
class GradedTest:
    """One entry of ``results.json``'s ``tests``."""

    name: str
    score: float
    max_score: float
    output: str
    visibility: str


@dataclass(frozen=True)
class Grade:
    """The outcome: ``tests``, total ``score``/``max_score``, ``execution_time`` (seconds),
    a top-level ``output`` and the paths written."""

    tests: tuple[GradedTest, ...]
    score: float
    max_score: float
    execution_time: float
    output: str
    results_path: Path
    report_path: Path


def load_rubric(path: str | Path) -> tuple[RubricItem, ...]:
    """Read a rubric TOML file: ``[[tests]]`` tables with ``name``, ``points``,
    ``scenarios`` and optionally ``checks``, ``visibility``, ``explain``.

    Raises:
        RubricError: unreadable, syntax error, unknown field, wrong type, unknown check id,
            unknown visibility, unknown scenario, or no tests.
    """
    path = Path(path)

    def fail(fld: str, reason: str) -> RubricError:
        return RubricError(f"{path}: field '{fld}': {reason}", path=str(path), field=fld,
                           reason=reason)

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RubricError(f"{path}: cannot read the rubric: {exc}", path=str(path),
                          field=None, reason="unreadable") from exc
    tests = data.get("tests")
    if set(data) - {"tests"} or not isinstance(tests, list) or not tests:
        raise fail("tests", "a rubric is a non-empty list of [[tests]] tables, nothing else")
    known = {p.stem for p in SCENARIOS_DIR.glob("*.toml")}
    items = []
    for i, raw in enumerate(tests):
        where = f"tests[{i}]"
        if not isinstance(raw, dict):
            raise fail(where, "must be a table")
        extra = set(raw) - {"name", "points", "scenarios", "checks", "visibility", "explain"}
        if extra:
            raise fail(f"{where}.{sorted(extra)[0]}", "unknown field; allowed: name, points, "
                       "scenarios, checks, visibility, explain")
        name, points = raw.get("name"), raw.get("points")
        scenarios, checks = raw.get("scenarios"), raw.get("checks", [])
        if not isinstance(name, str) or not name:
            raise fail(f"{where}.name", "a non-empty string is required")
        if isinstance(points, bool) or not isinstance(points, int | float) or points < 0:
            raise fail(f"{where}.points", "a number >= 0 is required")
        if not isinstance(scenarios, list) or not scenarios or any(
                s not in known for s in scenarios):
            raise fail(f"{where}.scenarios", "a non-empty list of scenario names; known: "
                       + ", ".join(sorted(known)))
        if not isinstance(checks, list) or any(c not in CHECK_IDS for c in checks):
            raise fail(f"{where}.checks", f"check ids from: {', '.join(CHECK_IDS)}")
        visibility = raw.get("visibility", "visible")
        if visibility not in VISIBILITIES:
            raise fail(f"{where}.visibility", f"{visibility!r}; allowed: "
                       + ", ".join(VISIBILITIES))
        items.append(RubricItem(name, float(points), tuple(scenarios), tuple(checks),
                                visibility, str(raw.get("explain", ""))))
    return tuple(items)


def score_item(item: RubricItem, results: Sequence[ExecutionResult]) -> GradedTest:
    """Score one rubric item from the executions of its scenarios (all-or-nothing)."""
    mine = [r for r in results if r.plan.scenario.name in item.scenarios]
    if not mine:
        return GradedTest(item.name, 0.0, item.points,
                          "No execution of " + ", ".join(item.scenarios) + " ran.",
                          item.visibility)
    broken = []
    for r in mine:
        if r.verdict == "unknown":
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
        lines += [f"- {r.plan.id}: {reason}", f"  replay: {r.plan.replay}"]
    return GradedTest(item.name, 0.0, item.points, "\n".join(lines), item.visibility)


def _item_problems(item: RubricItem, r: ExecutionResult) -> list[str]:
    """What, of the item's checks and the scenario's expectations, went wrong in ``r``."""
    expected = r.plan.scenario.expect_failing if r.plan.schedule.kills else frozenset()
    why = []
    for c in r.checks:
        if c.check_id not in item.checks:
            continue
        if c.check_id in expected and c.passed:
            why.append(f"{c.check_id}: expected to fail here (a teaching demo), but passed")
        elif c.check_id not in expected and not c.passed:
            why.append(f"{c.check_id}: {c.detail}")
    return why + [reason for reason in r.reasons if reason.startswith("expected a worker")]


def preflight(sut: Sut, timeout_s: float = 60.0) -> str | None:
    """Start the implementation once (``MODULE --help`` under its limits). Returns ``None``
    if it starts, else what went wrong (for the student)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    env["PYTHONPATH"] = sut.pythonpath(env.get("PYTHONPATH"))
    try:
        proc = subprocess.run(sut.argv("--help"), env=env, capture_output=True, text=True,
                              timeout=timeout_s, cwd=str(sut.path or SRC),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"`python -m {sut.module} --help` did not finish within {timeout_s:g} s"
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        return (f"`python -m {sut.module} --help` exited {proc.returncode}; the "
                f"implementation does not start:\n{tail}")
    return None


def write_results(tests: Sequence[GradedTest], out: Path, elapsed_s: float, output: str
                  ) -> Path:
    """Write Gradescope's ``results.json`` to ``out`` (replacing whatever is there)."""
    payload = {
        "score": round(sum(t.score for t in tests), 4),
        "execution_time": round(elapsed_s, 3),
        "output": output,
        "visibility": "visible",
        "tests": [{"name": t.name, "score": t.score, "max_score": t.max_score,
                   "output": t.output, "visibility": t.visibility} for t in tests],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    return out


def write_report(tests: Sequence[GradedTest], path: Path, sut: Sut, output: str) -> Path:
    """The readable ``report.md`` next to ``results.json``."""
    total = sum(t.score for t in tests)
    best = sum(t.max_score for t in tests)
    lines = [f"# Grade: {total:g} / {best:g}", "", f"Implementation: `{sut.describe()}`", "",
             output, "", "| test | score |", "|---|---|"]
    lines += [f"| {t.name} | {t.score:g} / {t.max_score:g} |" for t in tests]
    for t in tests:
        lines += ["", f"## {t.name} — {t.score:g} / {t.max_score:g}", "", t.output]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _launcher(sut: Sut, name: str | None) -> Launcher:
    """Spawn for a foreign implementation (its imports are not ours to preload); a fork
    server preloaded from the implementation's folder for the reference or a trusted
    variant, unless ``name`` says otherwise."""
    if name == "spawn" or (name is None and sut.foreign and not sut.trusted):
        return make_launcher("spawn")
    from harness.fork_launcher import ForkLauncher

    return ForkLauncher(code_path=str(sut.path.resolve()) if sut.path else None)


def grade(sut: Sut, out_dir: Path, *, rubric: Sequence[RubricItem] = DEFAULT_RUBRIC,
          results_path: Path | None = None, jobs: int | None = None,
          worker_timeout_s: float = 30.0, launcher: str | None = None) -> Grade:
    """Grade ``sut``: run the rubric's scenarios, score, write ``results.json`` and
    ``report.md``. Never raises for the implementation's faults, nor for the harness's
    own: ``results.json`` is written in every case.

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
    """
    from harness.reports import write_reports
    from harness.runner import run
    from harness.scenario import load_scenarios

    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    results_path = results_path or out_dir / "results.json"
    report_path = out_dir / "report.md"
    tests: list[GradedTest]
    problem = preflight(sut)
    if problem is not None:
        tests = [GradedTest(i.name, 0.0, i.points, problem, i.visibility) for i in rubric]
        output = "The implementation could not be started, so nothing could be graded."
    else:
        try:
            names = dict.fromkeys(n for item in rubric for n in item.scenarios)
            scenarios = load_scenarios([SCENARIOS_DIR / f"{n}.toml" for n in names])
            chosen = _launcher(sut, launcher)
            try:
                result = run(scenarios, out_dir / "run", jobs=jobs, launcher=chosen,
                             worker_timeout_s=worker_timeout_s, sut=sut)
            finally:
                chosen.close()
            write_reports(result, out_dir / "run")
            tests = [score_item(item, result.results) for item in rubric]
            output = (f"{len(result.results)} executions of {len(scenarios)} scenarios; "
                      f"verdicts pass {sum(r.verdict == 'pass' for r in result.results)}, "
                      f"fail {sum(r.verdict == 'fail' for r in result.results)}, unknown "
                      f"{sum(r.verdict == 'unknown' for r in result.results)}. Evidence: "
                      f"{out_dir / 'run'}")
        except Exception as exc:  # the harness erred: say so, score nothing
            tests = [GradedTest(i.name, 0.0, i.points, f"harness error: {exc}",
                                i.visibility) for i in rubric]
            output = f"The grader itself failed ({type(exc).__name__}: {exc}); not your fault."
    elapsed = time.monotonic() - started
    write_results(tests, results_path, elapsed, output)
    write_report(tests, report_path, sut, output)
    return Grade(tuple(tests), sum(t.score for t in tests), sum(t.max_score for t in tests),
                 round(elapsed, 3), output, results_path, report_path)
