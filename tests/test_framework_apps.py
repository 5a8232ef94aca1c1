"""Framework apps under test with no glue (issue 25, parts 1, 3, 4): a LangGraph graph or a
DBOS workflow named in a few lines of TOML, driven through the framework's own
human-in-the-loop (``interrupt``/``Command(resume=...)``, ``recv``/``DBOSClient.send``) and
its own recovery, each ask recorded for ``asked_once``. The apps in ``examples/`` were
written from the frameworks' documentation and know nothing of the harness.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scenario_helpers import ROOT
from target_helpers import NEEDS_DBOS, NEEDS_LANGGRAPH

from harness.model import CheckId, CrashSchedule, ExecutionPlan, KillPoint, Verdict
from harness.plan.scenario import ScenarioError, load_scenario
from harness.run.execution import execute
from harness.targets.dbos_app import parked_at
from harness.targets.human import email_in, shown_digest
from shopops_contract.digests import draft_digest

TARGETS = ROOT / "scenarios" / "targets"
APPS = {"langgraph": ROOT / "examples" / "langgraph_email_agent",
        "dbos": ROOT / "examples" / "dbos_email_agent"}
#: Where the shipped examples duplicate with keys off (docs/targets.md): the gateway
#: accepted with the reply lost, the reply in hand, the end of the send node / step.
WINDOWS = {"langgraph": ("t6.gateway_accepted", "b.http.after_response",
                         "b.langgraph.node_end#4"),
           "dbos": ("t6.gateway_accepted", "b.http.after_response", "b.dbos.step_end#3")}
NEEDS = {"langgraph": NEEDS_LANGGRAPH, "dbos": NEEDS_DBOS}


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\n[target]\n{body}\n', encoding="utf-8")
    return path


# -- no glue --------------------------------------------------------------------------------

@pytest.mark.pure
@pytest.mark.parametrize("kind", sorted(APPS))
def test_the_apps_know_nothing_of_the_harness_and_their_toml_is_short(kind) -> None:
    for source in APPS[kind].glob("*.py"):
        text = source.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import)\s+(harness|shopops)|SHOPOPS_|failpoint|"
                             r"TargetContext|approval_queue", text, re.M), source
    for name in (f"{kind}-email-agent", f"{kind}-email-agent-keys-off",
                 f"{kind}-email-agent-reject"):
        lines = (TARGETS / f"{name}.toml").read_text(encoding="utf-8").splitlines()
        assert len(lines) <= 10, name


@pytest.mark.pure
@NEEDS_LANGGRAPH
@NEEDS_DBOS
def test_an_app_target_is_the_harness_adapter_over_the_app() -> None:
    lg = load_scenario(TARGETS / "langgraph-email-agent-keys-off.toml").target
    assert lg is not None and lg.name == "langgraph" and lg.folder == APPS["langgraph"]
    assert lg.options == {"graph": "email_agent:graph",
                          "env": '{"EMAIL_IDEMPOTENCY_KEYS": "off"}'}
    assert {r.value for r in lg.functions} == {"start", "resume", "history"}
    db = load_scenario(TARGETS / "dbos-email-agent.toml").target
    assert db is not None and db.options == {"workflow": "email_workflow:email_workflow",
                                             "topic": "approval"}
    assert all(ref.startswith("harness.targets.dbos_app:") for ref in db.functions.values())


@pytest.mark.pure
@NEEDS_LANGGRAPH
@NEEDS_DBOS
@pytest.mark.parametrize(("body", "field", "says"), [
    ('kind = "langgraph"\nfolder = "."', "target.graph", "required for a langgraph app"),
    ('kind = "langgraph"\nfolder = "."\ngraph = "no colon"', "target.graph", "module:attr"),
    ('kind = "langgraph"\nfolder = "."\ngraph = "a:g"\nworkflow = "a:w"', "target.workflow",
     "not a field of a langgraph app"),
    ('kind = "dbos"\nfolder = "."\nworkflow = "a:w"\noptions = { x = "1" }', "target.options",
     "not a field of a dbos app"),
    ('kind = "dbos"\nfolder = "."\nworkflow = "a:w"\nenv = { X = 1 }', "target.env",
     "table of strings"),
    ('kind = "dbos"\nfolder = "."\nworkflow = "a:w"\nargs = { x = "1" }', "target.args",
     "must be a list"),
    ('kind = "python"\nfolder = "."\nstart = "a:s"\nresume = "a:r"\ngraph = "a:g"',
     "target.graph", "not of kind = \"python\""),
    ('kind = "langgraph"\nfolder = "nowhere"\ngraph = "a:g"', "target.folder",
     "is not a folder"),
    ('kind = "langgraph"\nfolder = "."\ngraph = "a:g"\n[human]\ntwice = true',
     "human.twice", "not supported for target kind"),
])
def test_a_bad_app_target_is_refused_naming_the_field(tmp_path, body, field, says) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, body))
    assert err.value.field == field and says in err.value.reason, err.value


# -- what the human is shown, and when a DBOS workflow waits ---------------------------------

@pytest.mark.pure
def test_the_draft_an_ask_shows_is_the_email_in_its_value() -> None:
    email = {"to": ["ada@example.com"], "subject": "S", "text": "B"}
    assert email_in({"question": "Send?", "email": email}) == {
        "to": "ada@example.com", "subject": "S", "body": "B"}
    assert shown_digest({"email": email}) == draft_digest("ada@example.com", "S", "B")
    assert email_in({"question": "Send?"}) is None
    assert shown_digest(True) != shown_digest(False)  # no email: the value's own digest


@pytest.mark.pure
def test_a_dbos_workflow_waits_in_recv_when_its_timeout_follows_an_unrecorded_step() -> None:
    def step(n: int, name: str) -> dict[str, object]:
        return {"function_id": n, "function_name": name, "output": None}

    waiting = [step(1, "draft"), step(2, "DBOS.setEvent"), step(4, "DBOS.sleep")]
    assert parked_at(waiting) == 3
    assert parked_at([*waiting[:2], step(3, "DBOS.recv"), step(4, "DBOS.sleep")]) is None
    assert parked_at([step(1, "draft"), step(2, "DBOS.sleep")]) is None  # a plain sleep
    assert parked_at([]) is None
    timed = [*waiting[:2], {**step(4, "DBOS.sleep"), "output": 1000.0}]  # wakes at 1000 s
    assert parked_at(timed, now=999.0) == 3 and parked_at(timed) == 3
    assert parked_at(timed, now=1000.0) is None  # its recv returns None: the wait is over


# -- the verdicts, in real processes ---------------------------------------------------------

def _run(launcher, tmp_path: Path, name: str, point: str | None):
    s = load_scenario(TARGETS / f"{name}.toml")
    kills = (KillPoint.parse(point),) if point else ()
    return execute(ExecutionPlan(s, CrashSchedule(kills)), tmp_path, worker_timeout_s=120,
                   launcher=launcher)


@pytest.mark.parametrize(("kind", "point"), [
    pytest.param(k, p, marks=NEEDS[k]) for k in sorted(APPS) for p in WINDOWS[k]])
def test_keys_off_the_app_duplicates_at_the_shipped_windows(
        forked_launcher, tmp_path, kind, point) -> None:
    r = _run(forked_launcher, tmp_path, f"{kind}-email-agent-keys-off", point)
    assert r.verdict is Verdict.FAIL and r.evidence.deliveries == 2, r.reasons
    checks = {c.check_id: c for c in r.checks}
    assert not checks[CheckId.EXACTLY_ONE_DELIVERY].passed
    asked = checks[CheckId.ASKED_ONCE]  # asked through the framework, once, recorded
    assert asked.passed and "asked 1 time(s)" in asked.evidence[0], asked
    assert checks[CheckId.PER_ACTION].evidence  # the content sent is the content approved
    assert "no human approved" not in " ".join(r.reasons)


@pytest.mark.parametrize(("kind", "point"), [
    pytest.param(k, p, marks=NEEDS[k]) for k in sorted(APPS)
    for p in (None, "b.http.before_request", *WINDOWS[k])])
def test_keys_on_the_app_sends_once_whatever_the_kill(
        forked_launcher, tmp_path, kind, point) -> None:
    # LangGraph's no-kill execution spawns fresh interpreters (the path without a fork
    # server; DBOS workers start fresh in test_targets); the rest fork from the target
    # server that preloaded the framework (run's default): a fresh DBOS execution was the
    # suite's third slowest test (9 s)
    spawned = point is None and kind == "langgraph"
    r = _run(None if spawned else forked_launcher, tmp_path, f"{kind}-email-agent", point)
    assert r.verdict is Verdict.PASS and r.evidence.deliveries == 1, r.reasons
    asked = {c.check_id: c for c in r.checks}[CheckId.ASKED_ONCE]
    prefix = "interrupt-" if kind == "langgraph" else "recv-run-1-"
    assert asked.passed and prefix in asked.evidence[0] and "(approved)" in asked.evidence[0]


_TWICE = '''
import sqlite3
from typing import TypedDict
import resend
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

class S(TypedDict, total=False):
    order_id: str
    ok: bool

EMAIL = {"to": "ada@example.com", "subject": "Update", "body": "Hi"}

def review(state):
    return {"ok": bool(interrupt({"email": EMAIL}))}

def confirm(state):  # asks again for the same email: one decision, two asks
    return {"ok": bool(interrupt({"email": EMAIL, "question": "really?"}))}

def send(state):
    resend.Emails.send({"from": "a@b.example", **EMAIL, "text": EMAIL["body"]})
    return {}

builder = StateGraph(S)
for f in (review, confirm, send):
    builder.add_node(f)
builder.add_edge(START, "review")
builder.add_edge("review", "confirm")
builder.add_edge("confirm", "send")
builder.add_edge("send", END)
'''


@NEEDS_LANGGRAPH
def test_an_app_asking_twice_for_one_decision_fails_asked_once(forked_launcher, tmp_path) -> None:
    """The catch ``asked_once`` claims on a framework app: a graph (a builder, compiled by
    the harness on its own checkpointer) that interrupts a second time for the same email."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "twice.py").write_text(_TWICE, encoding="utf-8")
    path = tmp_path / "twice.toml"
    path.write_text(f'name = "twice"\n[target]\nkind = "langgraph"\nfolder = "{app}"\n'
                    'graph = "twice:builder"\n', encoding="utf-8")
    r = execute(ExecutionPlan(load_scenario(path), CrashSchedule()), tmp_path / "x",
                worker_timeout_s=120, launcher=forked_launcher)
    asked = {c.check_id: c for c in r.checks}[CheckId.ASKED_ONCE]
    assert r.verdict is Verdict.FAIL and not asked.passed, r.reasons
    assert "asked 2 time(s)" in asked.evidence[0] and asked.evidence[0].count("interrupt-") == 2


@pytest.mark.pure
@NEEDS_LANGGRAPH
@NEEDS_DBOS
@pytest.mark.parametrize("kind", sorted(APPS))
def test_an_app_folder_is_graded_through_its_target_toml(kind) -> None:
    from harness.grading.targets import load_target_dir

    t = load_target_dir(kind, APPS[kind])
    assert t.name == kind and t.source == APPS[kind] and t.folder == APPS[kind]
    assert all(ref.startswith(f"harness.targets.{kind}_app:") for ref in t.functions.values())


@pytest.mark.parametrize("kind", [pytest.param(k, marks=NEEDS[k]) for k in sorted(APPS)])
def test_a_rejection_reaches_the_app_through_its_framework_and_nothing_is_sent(
        forked_launcher, tmp_path, kind) -> None:
    r = _run(forked_launcher, tmp_path, f"{kind}-email-agent-reject", None)
    checks = {c.check_id: c for c in r.checks}
    assert r.verdict is Verdict.PASS and r.evidence.deliveries == 0, r.reasons
    respected = checks[CheckId.REJECTION_RESPECTED]
    assert respected.passed and "final checkpoint: rejected" in respected.evidence, respected


_IGNORES = _TWICE.replace('builder.add_edge("review", "confirm")\n'
                          'builder.add_edge("confirm", "send")',
                          'builder.add_edge("review", "send")')


@NEEDS_LANGGRAPH
def test_an_app_that_sends_what_the_human_rejected_fails(forked_launcher, tmp_path) -> None:
    """The catch ``per_action`` claims on a framework app: a graph that sends whatever the
    reviewer answered sends content a human rejected (its history shows no draft, so
    ``rejection_respected`` is not applicable; the ledger judges)."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "ignores.py").write_text(_IGNORES, encoding="utf-8")
    path = tmp_path / "ignores.toml"
    path.write_text(f'name = "ignores"\n[target]\nkind = "langgraph"\nfolder = "{app}"\n'
                    'graph = "ignores:builder"\n[human]\naction = "reject"\n'
                    '[expect]\ndeliveries = 0\n', encoding="utf-8")
    r = execute(ExecutionPlan(load_scenario(path), CrashSchedule()), tmp_path / "x",
                worker_timeout_s=120, launcher=forked_launcher)
    checks = {c.check_id: c for c in r.checks}
    assert r.verdict is Verdict.FAIL and r.evidence.deliveries == 1, r.reasons
    per_action = checks[CheckId.PER_ACTION]  # the ledger against the rejected ask's email
    assert not per_action.passed and "sent content a human rejected" in per_action.detail, \
        per_action
