"""The ``[target]`` table (issue 11): every bad one refused before anything runs, the
shipped target scenarios load, the story hands a target its ticket and reads its state
back; the one checklist judges it, and a check whose needs its history cannot show is
``not_applicable`` — never a pass, never an unknown. Two real executions of the plain-Python starter
(one of them through its printed replay command); the framework scenarios run behind
``--crash-soak``."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from scenario_helpers import ROOT, refused
from target_helpers import NEEDS_DBOS, NEEDS_LANGGRAPH

from harness.judge.checks.registry import CHECK_IDS, CHECKS, run_checks
from harness.judge.observers.target import history_of
from harness.judge.verdict import decide, judge
from harness.model import (
    CheckStatus,
    CrashSchedule,
    Evidence,
    ExecutionPlan,
    ExecutionResult,
    GatewayLog,
    KillPoint,
    Observable,
    Scenario,
    TargetRole,
    Verdict,
    WorkersStep,
)
from harness.plan.scenario import load_scenario, load_scenarios
from harness.plan.story_plan import expand
from harness.reports.base import execution_dict
from harness.run.execution import execute
from harness.targets.examples import DBOS, STARTER

STARTER_DIR = ROOT / "examples" / "python_starter"
TARGETS_DIR = ROOT / "scenarios" / "targets"
TARGET_SCENARIOS = sorted(TARGETS_DIR.glob("*.toml"))


def write(tmp_path: Path, target: str, extra: str = "") -> Path:
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\n{extra}\n[target]\n{target}\n', encoding="utf-8")
    return path


def python_target(folder: Path = STARTER_DIR, **fields: str) -> str:
    base = {"kind": "python", "folder": str(folder), "start": "loop:start",
            "resume": "loop:resume", **fields}
    return "\n".join(f'{k} = "{v}"' for k, v in base.items() if v != "-")


# -- the table --------------------------------------------------------------------------------

@pytest.mark.pure
@NEEDS_LANGGRAPH
@NEEDS_DBOS
def test_shipped_target_scenarios_load_and_name_their_target() -> None:
    scenarios = load_scenarios(TARGET_SCENARIOS)
    assert {s.target.name for s in scenarios if s.target} == {"python", "langgraph", "dbos"}
    assert all(s.target is not None for s in scenarios)
    lg = next(s for s in scenarios if s.name == "langgraph-exit")
    assert lg.target is not None and lg.target.options == {"durability": "exit"}


@pytest.mark.pure
def test_todays_scenarios_stay_on_the_reference_loop() -> None:
    assert all(s.target is None for s in load_scenarios([ROOT / "scenarios"]))


@pytest.mark.pure
def test_a_python_target_resolves_its_folder_against_the_scenario_file(tmp_path) -> None:
    s = load_scenario(write(tmp_path, python_target(history="loop:history")))
    assert s.target is not None and s.target.folder == STARTER_DIR.resolve()
    assert s.target.has(TargetRole.HISTORY)


@pytest.mark.pure
@pytest.mark.parametrize(("target", "field", "says"), [
    ('kind = "temporal"', "target.kind", "'temporal'; allowed: reference, python, langgraph"),
    ('kind = 3', "target.kind", "must be a string"),
    ('kind = "python"\nstart = "loop:start"\nresume = "loop:resume"', "target.folder",
     "required for kind = \"python\""),
    (python_target(start="-"), "target.start", "required for kind"),
    (python_target(resume="loop"), "target.resume", "'loop' must be module:function"),
    (python_target(folder=Path("/nonexistent/x")), "target.folder", "outside the allowed"),
    (python_target(folder=Path(tempfile.gettempdir()) / "nonexistent-x"), "target.folder",
     "is not a folder"),
    (python_target(start="os:system"), "target.start", "no module 'os'"),
    (python_target(resume="loop:nope"), "target.resume", "defines no 'nope'"),
    ('kind = "reference"\nstart = "a:b"', "target.start", "takes no target fields"),
    ('kind = "reference"\noptions = { x = "y" }', "target.options.x", "takes no options"),
    ('kind = "langgraph"\nstart = "a:b"', "target.start", "give only kind and options"),
    ('kind = "langgraph"\noptions = { durability = 1 }', "target.options.durability",
     "must be a string"),
    ('kind = "langgraph"\noptions = { durability = "never" }', "target.options.durability",
     "'never'; allowed: async, sync, exit"),
    ('kind = "langgraph"\noptions = { speed = "fast" }', "target.options.speed",
     "unknown option for kind 'langgraph'; allowed: durability, resume_on"),
    ('kind = "dbos"\noptions = { durability = "sync" }', "target.options.durability",
     "allowed: none"),
    ('kind = "dbos"\nspeed = "fast"', "target.speed", "unknown field; allowed in [target]"),
    ('kind = "python"\noptions = "x"', "target.options", "must be dict"),
])
def test_a_bad_target_table_is_refused(tmp_path, target, field, says) -> None:
    err = refused(write(tmp_path, target))
    assert err.field == field
    assert says in str(err)
    assert str(err).startswith(str(tmp_path / "t.toml"))


@pytest.mark.pure
@pytest.mark.parametrize(("extra", "field"), [
    ("[concurrency]\nleases = true\n", "concurrency.leases"),
    ("[human]\ntwice = true\n", "human.twice"),
    ("[human]\naction = \"reject\"\n", "human.action"),
    ("[storage]\nfault = \"corrupt_json\"\n", "storage.fault"),
    ("[sut]\nmax_attempts = 3\n", "sut.max_attempts"),
    ('[[story]]\nstep = "workers"\nrole = "start"\n[[story]]\nstep = "clock"\n', "story"),
])
def test_reference_only_features_are_refused_for_a_target(tmp_path, extra, field) -> None:
    err = refused(write(tmp_path, python_target(), extra))
    assert err.field == field
    assert "not supported for target kind 'python'" in str(err)


@pytest.mark.pure
def test_a_decide_worker_needs_a_target(tmp_path) -> None:
    path = tmp_path / "d.toml"
    path.write_text('name = "d"\n[[story]]\nstep = "workers"\nrole = "decide"\n',
                    encoding="utf-8")
    err = refused(path)
    assert err.field == "story" and "decide" in str(err)


@pytest.mark.pure
def test_a_target_whose_extra_is_missing_names_the_install_command(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dbos", None)  # as if .[dbos] were not installed
    err = refused(write(tmp_path, 'kind = "dbos"'))
    assert err.field == "target.kind"
    assert "pip install -e '.[dbos]'" in str(err)


@pytest.mark.pure
def test_a_target_with_decide_is_told_after_the_approval() -> None:
    steps = expand(Scenario("d", target=DBOS))
    roles = [st.role for st in steps if isinstance(st, WorkersStep)]
    assert roles == ["start", "decide", "resume"]
    assert [st.role for st in expand(Scenario("p", target=STARTER))
            if isinstance(st, WorkersStep)] == ["start", "resume"]


# -- checks over a target's evidence (pure) --------------------------------------------------

def _evidence(items: tuple[dict, ...] | None, expected: int = 0) -> Evidence:
    """A target's evidence with its history observed from ``items`` (``None``: the target
    has no history function)."""
    from harness.model import History, HistorySource

    history = (History(HistorySource.TARGET_HISTORY, observes=frozenset(),
                       cannot="the target has no history function")
               if items is None else history_of(items))
    return Evidence(execution_id="t[no-kill]", case_id="case-O-1001", events=(), workers=(),
                    checkpoints=(), approval_requests=(), tickets=(),
                    gateway=GatewayLog((), ()), approval_event=None,
                    checkpoint_seq_at_approval=None, unreached=(), expected_deliveries=expected,
                    target="python", history=history)


def _plan() -> ExecutionPlan:
    return ExecutionPlan(Scenario("t", target=STARTER), CrashSchedule(()))


@pytest.mark.pure
def test_without_a_history_only_what_it_needs_shown_is_not_applicable() -> None:
    checks = run_checks(_evidence(None))
    assert tuple(c.check_id for c in checks) == CHECK_IDS
    na = {c.check_id for c in checks if c.status is CheckStatus.NOT_APPLICABLE}
    # the rest judge the trace and ledger; history_not_replaced judges the reads of the
    # history after each worker, which a target without one never had
    assert na == {c.id for c in CHECKS if c.requires} | {"history_not_replaced"}
    assert "exactly_one_delivery" not in na and "asked_once" not in na
    assert all(not c.passed and c.detail.startswith("not applicable") for c in checks
               if not c.applicable)


@pytest.mark.pure
def test_a_history_shows_what_it_reports_and_the_checks_that_need_it_apply() -> None:
    items = ({"phase": "intake", "step": 1}, {"phase": "drafting", "step": 2,
                                              "draft": {"to": "a", "subject": "s", "body": "b"}})
    ev = _evidence(items)
    assert ev.history.observes == {Observable.PHASE, Observable.STEP, Observable.DRAFT}
    status = {c.check_id: c.status for c in run_checks(ev)}
    assert status["step_continues"] is CheckStatus.PASS
    assert status["phase_path"] is CheckStatus.PASS
    assert status["draft_identical"] is CheckStatus.PASS
    assert status["lease_exclusive"] is CheckStatus.NOT_APPLICABLE  # no lease reported
    assert status["storage_safe"] is CheckStatus.NOT_APPLICABLE  # never its stored rows


@pytest.mark.pure
def test_not_applicable_is_neither_pass_nor_unknown_and_the_verdict_ignores_it() -> None:
    ev = _evidence(None)
    checks = decide(ev, run_checks(ev), _plan())
    assert {c.status for c in checks} == {CheckStatus.PASS, CheckStatus.NOT_APPLICABLE}
    verdict, reasons = judge(ev, checks, _plan())
    assert verdict is Verdict.PASS, reasons
    result = ExecutionResult(_plan(), ev, checks, verdict, reasons, 0.0)
    as_json = json.loads(json.dumps(execution_dict(result)))["checks"]
    assert as_json["storage_safe"]["status"] == "not_applicable"
    assert as_json["storage_safe"]["applicable"] is False
    assert as_json["no_process_left"]["status"] == "pass"


@pytest.mark.pure
def test_a_step_that_goes_down_fails_where_the_target_reports_it() -> None:
    checks = {c.check_id: c for c in run_checks(_evidence(({"step": 3}, {"step": 1})))}
    assert checks["step_continues"].status is CheckStatus.FAIL
    assert "step went down between checkpoint seq 1 and 2" in checks["step_continues"].detail


@pytest.mark.pure
def test_a_changed_durable_draft_fails() -> None:
    a = {"to": "a@x", "subject": "s", "body": "one"}
    checks = {c.check_id: c for c in run_checks(_evidence(({"draft": a},
                                                           {"draft": {**a, "body": "two"}})))}
    assert checks["draft_identical"].status is CheckStatus.FAIL


@pytest.mark.pure
def test_a_mistyped_history_field_is_a_named_failure_not_a_pass() -> None:
    ev = _evidence(({"step": "three"},))
    one = {c.check_id: c for c in run_checks(ev)}["step_continues"]
    assert one.status is CheckStatus.FAIL and "history[0]: field 'step'" in one.detail


@pytest.mark.pure
def test_a_target_that_says_it_sent_nothing_after_a_delivery_fails() -> None:
    ev = _evidence(({"email_sent": False},), expected=0)
    checks = {c.check_id: c for c in run_checks(ev)}
    assert checks["exactly_one_delivery"].passed  # nothing expected, nothing delivered
    ev1 = _evidence(({"email_sent": False},), expected=1)
    one = {c.check_id: c for c in run_checks(ev1)}["exactly_one_delivery"]
    assert one.status is CheckStatus.FAIL and "0 deliveries" in one.detail


# -- real executions of the plain-Python starter ---------------------------------------------

@pytest.fixture(scope="module")
def forked() -> Iterator[object]:
    """One fork server for the module's starter executions (the harness's side preloaded,
    no framework): each worker a fork instead of a fresh interpreter. Fresh interpreters
    run the starter in ``test_a_target_worker_forked_after_preload_is_killed_at_a_boundary_
    point``, with the same verdict."""
    from harness.launch.fork import ForkLauncher

    with ForkLauncher(modules=("harness.targets.worker",), fallback=None,
                      preload=("harness.targets.worker", "harness.targets.boundaries")) as launcher:
        yield launcher


def test_the_starter_runs_through_the_story_with_its_ticket_and_its_state(
        tmp_path, forked, monkeypatch: pytest.MonkeyPatch) -> None:
    """... with a proxy nobody listens on in the harness's environment: the workers reach
    the harness's gateway on loopback without it (``NO_PROXY``; the starter's own client
    failed with ProxyError before, a FAIL blamed on the implementation)."""
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "example.invalid")
    s = load_scenario(TARGETS_DIR / "python-starter.toml")
    r = execute(ExecutionPlan(s, CrashSchedule((KillPoint("t6.gateway_accepted", 1),))),
                tmp_path / "x", launcher=forked, worker_timeout_s=120)
    assert r.verdict is Verdict.PASS, r.reasons
    assert r.evidence.deliveries == 1 and [k.label for k in r.evidence.kills] == [
        "t6.gateway_accepted"]
    assert [w.role for w in r.evidence.workers] == ["start", "resume", "resume"]
    assert r.evidence.target == "python"
    assert r.evidence.history.writes[-1].phase == "completed"
    # the resume was handed the ticket the human's approval issued
    ctx = json.loads((tmp_path / "x" / "worker-1.context.json").read_text())
    assert ctx["ticket"] is not None and ctx["ticket"].startswith("apr-")
    assert os.environ["NO_PROXY"] == "example.invalid"  # ours untouched; the workers' extended
    assert json.loads((tmp_path / "x" / "worker-0.context.json").read_text())["ticket"] is None
    status = {c.check_id: c.status for c in r.checks}
    assert status["storage_safe"] is CheckStatus.NOT_APPLICABLE
    assert status["draft_identical"] is CheckStatus.PASS
    assert status["ticket_server_issued"] is CheckStatus.PASS  # it spent its ticket
    assert status["asked_once"] is CheckStatus.PASS


def test_a_keys_off_duplicate_replays_with_its_printed_command(tmp_path, forked) -> None:
    s = load_scenario(TARGETS_DIR / "python-starter-keys-off.toml")
    r = execute(ExecutionPlan(s, CrashSchedule((KillPoint("t6.gateway_accepted", 1),))),
                tmp_path / "x", launcher=forked, worker_timeout_s=120)
    assert r.verdict is Verdict.FAIL and r.evidence.deliveries == 2, r.reasons
    argv = shlex.split(r.plan.replay)
    assert argv[:2] == ["shopops-chaos", "run"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    done = subprocess.run([sys.executable, "-m", "harness", *argv[1:], "--jobs", "1",
                           "--timeout", "120", "--report-dir", str(tmp_path / "reports")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"FAIL\s+python-starter-keys-off\[t6\.gateway_accepted\]", done.stdout)
    dup = json.loads((tmp_path / "reports" / "latest" / "duplicates.json").read_text())
    assert [(e["id"], e["deliveries"]) for e in dup["executions"]] == [
        ("python-starter-keys-off[t6.gateway_accepted]", 2)]


# -- the framework scenarios, measured (soak: each takes minutes) ----------------------------

#: What each shipped target scenario ends with under ``shopops-chaos run`` (the table of
#: ``docs/targets.md``, "What the harness measured"): keys off is the finding (duplicates: fail).
EXPECTED: dict[str, Verdict] = {
    "python-starter": Verdict.PASS, "python-starter-keys-off": Verdict.FAIL,
    "langgraph-sync": Verdict.PASS, "langgraph-sync-keys-off": Verdict.FAIL,
    "langgraph-async": Verdict.PASS, "langgraph-async-keys-off": Verdict.FAIL,
    "langgraph-exit": Verdict.PASS, "langgraph-exit-keys-off": Verdict.FAIL,
    "langgraph-double": Verdict.PASS, "dbos": Verdict.PASS, "dbos-keys-off": Verdict.FAIL,
    "langgraph-reask": Verdict.FAIL, "langgraph-from-earlier": Verdict.PASS,
    "langgraph-fanout": Verdict.PASS,
    "langgraph-email-agent": Verdict.PASS, "langgraph-email-agent-keys-off": Verdict.FAIL,
    "dbos-email-agent": Verdict.PASS, "dbos-email-agent-keys-off": Verdict.FAIL,
    "langgraph-email-agent-reject": Verdict.PASS, "dbos-email-agent-reject": Verdict.PASS,
    "langgraph-email-agent-feedback": Verdict.PASS, "dbos-email-agent-feedback": Verdict.PASS,
    "langgraph-email-agent-late": Verdict.PASS, "dbos-email-agent-late": Verdict.PASS,
    "langgraph-email-agent-never": Verdict.PASS, "dbos-email-agent-never": Verdict.PASS,
}


@pytest.mark.pure
def test_every_target_scenario_has_an_expected_verdict_and_a_docs_row() -> None:
    assert {p.stem for p in TARGET_SCENARIOS} == set(EXPECTED)
    page = (ROOT / "docs" / "targets.md").read_text(encoding="utf-8")
    measured = page.split("## What the harness measured", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in measured.splitlines() if line.startswith("| ")]
    for name, verdict in EXPECTED.items():
        row = next((r for r in rows if f"`{name}.toml`" in r), None)
        assert row is not None, f"no row of docs/targets.md's measured table names {name}.toml"
        keys_off = name.endswith("-keys-off")  # a finding of its own is in the keys-on cell
        cell = row.split(" | ")[1 if keys_off else 2]
        assert f"**{verdict}**" in cell, (name, cell)


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=NEEDS_LANGGRAPH if n.startswith("langgraph") else
                 NEEDS_DBOS if n.startswith("dbos") else ()) for n in sorted(EXPECTED)])
def test_a_target_scenario_ends_with_the_verdict_the_docs_report(tmp_path, name) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    done = subprocess.run([sys.executable, "-m", "harness", "run",
                           str(TARGETS_DIR / f"{name}.toml"), "--jobs", "2", "--timeout",
                           "240", "--report-dir", str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == EXPECTED[name].exit_status, done.stdout[-4000:] + done.stderr


# -- grading and running through a target (--sut DIR --target KIND) --------------------------

@pytest.mark.pure
def test_a_target_folder_is_read_from_its_target_toml(tmp_path) -> None:
    from harness.grading.targets import load_target_dir

    t = load_target_dir("python", STARTER_DIR)
    assert t.source == STARTER_DIR.resolve() and t.has(TargetRole.HISTORY)
    (tmp_path / "target.toml").write_text('[target]\nstart = "loop:start"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"target\.toml: field 'target.resume': required"):
        load_target_dir("python", tmp_path)
    (tmp_path / "target.toml").write_text('[target]\nkind = "dbos"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="given on the command line"):
        load_target_dir("python", tmp_path)
    with pytest.raises(ValueError, match=r"cannot read the target file"):
        load_target_dir("python", tmp_path / "nowhere")


@pytest.mark.pure
def test_the_rubric_keeps_what_a_target_can_be_graded_on() -> None:
    from harness.grading.rubric import DEFAULT_RUBRIC
    from harness.grading.targets import adapt_rubric, load_target_dir, on_target
    from harness.plan.scenario import load_scenarios

    t = load_target_dir("python", STARTER_DIR)
    names = dict.fromkeys(n for i in DEFAULT_RUBRIC for n in i.scenarios)
    kept, refused = on_target(load_scenarios([ROOT / "scenarios" / f"{n}.toml"
                                              for n in names]), t)
    assert "o1001" in {s.name for s in kept} and "forged-ticket" in refused
    items, dropped = adapt_rubric(DEFAULT_RUBRIC, {s.name for s in kept}, t)
    assert any(i.checks == ("exactly_one_delivery",) for i in items)
    # one checklist: an item keeps every check (which apply is known once it ran) and the
    # scenarios the target can run
    ticket = next(i for i in items if "server-issued ticket" in i.name)
    assert ticket.scenarios == ("o1001",) and ticket.checks == ("ticket_server_issued",
                                                              "ticket_consumed_first")
    assert any("Exercise 1" in i.name for i, _ in dropped)  # storage faults: reference only


def test_an_item_whose_checks_all_came_out_not_applicable_scores_0_of_0() -> None:
    from harness.grading.grade import score_item
    from harness.grading.rubric import RubricItem

    ev = _evidence(None)
    checks = decide(ev, run_checks(ev), _plan())
    result = ExecutionResult(_plan(), ev, checks, Verdict.PASS, (), 0.0)
    leases = score_item(RubricItem("Leases", 10, ("t",), ("lease_exclusive",)), [result])
    assert (leases.score, leases.max_score) == (0.0, 0.0)
    assert leases.output.startswith("Not applicable: the target_history cannot show lease")
    sends = score_item(RubricItem("Sends", 10, ("t",), ("exactly_one_delivery",)), [result])
    assert (sends.score, sends.max_score) == (10, 10)


def test_grade_through_a_target_scores_it_and_replays_on_it(tmp_path) -> None:
    from harness.grading.grade import grade, replay_command
    from harness.grading.rubric import RubricItem
    from harness.grading.targets import load_target_dir
    from harness.model import REFERENCE

    t = load_target_dir("python", STARTER_DIR)
    rubric = (RubricItem("one delivery", 10, ("o1001",), ("exactly_one_delivery",)),
              RubricItem("tickets", 10, ("forged-ticket",), ("ticket_server_issued",)))
    kill = CrashSchedule((KillPoint("t6.gateway_accepted", 1),))
    g = grade(REFERENCE, tmp_path / "g", rubric=rubric, target=t, schedule=kill,
              jobs=1, worker_timeout_s=120)
    tests = {x.name: x for x in g.tests}
    assert (tests["one delivery"].score, tests["one delivery"].max_score) == (10, 10), \
        tests["one delivery"].output
    assert (tests["tickets"].score, tests["tickets"].max_score) == (0, 0)
    assert "Not applicable to a python target" in tests["tickets"].output
    results = json.loads((tmp_path / "g" / "results.json").read_text())
    assert results["score"] == 10
    plan = ExecutionPlan(Scenario("o1001", path=ROOT / "scenarios" / "o1001.toml", target=t),
                         kill)
    assert plan.replay.endswith(f"--sut {STARTER_DIR.resolve()} --target python")
    r = ExecutionResult(plan, _evidence(None), (), Verdict.PASS, (), 0.0)
    # the student's page: the shipped scenario by name, their own checkout as --sut
    assert replay_command(r) == ("shopops-chaos run o1001 --schedule t6.gateway_accepted "
                                 "--sut . --target python")
    page = (tmp_path / "g" / "report.md").read_text() + (tmp_path / "g" / "results.json"
                                                          ).read_text()
    assert str(tmp_path) not in page and "/work/" not in page  # no path of the grader's


@pytest.mark.io
def test_run_refuses_a_target_without_its_folder_or_a_scenario_it_cannot_follow(
        tmp_path) -> None:
    """In this process (``input_helpers.call``: the real entry point); nothing is written
    under the report folder and nothing is started."""
    from input_helpers import call

    def chaos(*args: str):
        return call("shopops-chaos", ["run", *args, "--report-dir", str(tmp_path)], tmp_path)

    no_sut = chaos(str(ROOT / "scenarios" / "o1001.toml"), "--target", "python")
    assert no_sut.code == 2 and "--target python: needs --sut DIR" in no_sut.err
    ticket = chaos(str(ROOT / "scenarios" / "forged-ticket.toml"), "--target", "python",
                   "--sut", str(STARTER_DIR))
    assert ticket.code == 2
    assert "scenario 'forged-ticket' cannot run on a target: human.ticket" in ticket.err
    for done in (no_sut, ticket):  # nothing ran
        assert done.changed == {} and done.new_processes == (), done


@NEEDS_LANGGRAPH
@pytest.mark.slow
def test_a_langgraph_skeleton_is_graded_through_its_target_toml(tmp_path) -> None:
    from harness.grading.grade import grade
    from harness.grading.rubric import RubricItem
    from harness.grading.targets import load_target_dir
    from harness.model import REFERENCE

    t = load_target_dir("langgraph", ROOT / "examples" / "langgraph_o1001")
    assert t.extra == "langgraph" and t.options == {"durability": "sync"}
    rubric = (RubricItem("one delivery", 10, ("o1001",), ("exactly_one_delivery",)),)
    g = grade(REFERENCE, tmp_path / "g", rubric=rubric, target=t, jobs=1,
              schedule=CrashSchedule((KillPoint("t6.gateway_accepted", 1),)),
              worker_timeout_s=240)
    assert g.score == 10, g.tests[0].output



def test_a_target_worker_forked_after_preload_is_killed_at_a_boundary_point(tmp_path) -> None:
    """A target worker forked from a server that imported the harness's side before the
    fork still gets its boundary points (installed in the child, before the target is
    imported): killed at an SQLite commit, the case resumes and passes, as spawned."""
    from harness.launch.fork import ForkLauncher
    from harness.launch.spawn import SpawnLauncher

    s = load_scenario(TARGETS_DIR / "python-starter.toml")
    plan = ExecutionPlan(s, CrashSchedule((KillPoint("b.sqlite.after_commit", 2),)))
    with ForkLauncher(modules=("harness.targets.worker",), fallback=None, degrade=False,
                      preload=("harness.targets.worker", "harness.targets.boundaries")) as launcher:
        forked = execute(plan, tmp_path / "fork", launcher=launcher, worker_timeout_s=120)
        assert launcher.server_pid is not None  # every worker was forked (no fallback)
    spawned = execute(plan, tmp_path / "spawn", launcher=SpawnLauncher(),
                      worker_timeout_s=120)
    assert [k.label for k in forked.evidence.kills] == ["b.sqlite.after_commit"]
    assert forked.verdict is spawned.verdict is Verdict.PASS, forked.reasons
    assert forked.evidence.deliveries == spawned.evidence.deliveries == 1


@pytest.mark.slow
def test_target_workers_fork_from_a_preloaded_server_with_the_spawned_verdicts(
        tmp_path) -> None:
    """The run's fork launcher forks ``python -m harness.targets.worker`` from a second
    server that preloaded the frameworks (``harness.forkserver.worker.TARGET_PRELOAD``); the
    matrix (every kill point the trace found) and its verdicts are those of fresh
    interpreters."""
    from harness.launch.fork import ForkLauncher
    from harness.launch.launcher import make_launcher
    from harness.launch.spawn import SpawnLauncher
    from harness.run.runner import run

    s = load_scenario(TARGETS_DIR / "python-starter.toml")
    launcher = make_launcher("fork")
    try:
        forked = run([s], tmp_path / "fork", jobs=2, launcher=launcher, worker_timeout_s=120)
        targets = launcher.fallback
        assert isinstance(launcher, ForkLauncher) and isinstance(targets, ForkLauncher)
        assert targets.unavailable is None and targets.server_pid is not None
        assert "harness.targets.worker" in targets.modules
    finally:
        launcher.close()
    spawned = run([s], tmp_path / "spawn", jobs=2, launcher=SpawnLauncher(),
                  worker_timeout_s=120)
    got = {r.plan.id: r.verdict for r in forked.results}
    assert got == {r.plan.id: r.verdict for r in spawned.results}
    assert len(got) > 3 and any("b.sqlite" in i or "b.http" in i for i in got), got


@NEEDS_LANGGRAPH
def test_a_langgraph_app_that_asks_again_on_resume_fails_asked_once_and_only_that(
        tmp_path) -> None:
    """One checklist for every target: the human is asked once per decision. A LangGraph
    app notifying the human inside the node that holds ``interrupt()`` asks again when
    the node is resumed (``options.ask = "interrupt_node"``); the shipped example, which
    asks in a node of its own, does not (its scenarios pass ``asked_once``)."""
    s = load_scenario(TARGETS_DIR / "langgraph-reask.toml")
    r = execute(ExecutionPlan(s, CrashSchedule()), tmp_path / "x", worker_timeout_s=240)
    failed = {c.check_id for c in r.checks if c.status is CheckStatus.FAIL}
    assert r.verdict is Verdict.FAIL and failed == {"asked_once"}, r.reasons
    assert "asked 2 times for one decision" in r.reasons[0]
    assert r.evidence.deliveries == 1

