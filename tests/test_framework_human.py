"""The human at a framework app's own gate beyond approve and reject (issue 25, item 1): a
rejection with feedback answered through the framework (the app redrafts and asks again),
an approval hours later on the harness's simulated clock, and a human who never decides.
Each catch is proven by a variant of the shipped example (one small edit) that comes out
``fail``; the shipped examples pass.
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pytest
from scenario_helpers import ROOT
from target_helpers import NEEDS_DBOS, NEEDS_LANGGRAPH

from harness.model import CheckId, CrashSchedule, ExecutionPlan, Verdict
from harness.plan.scenario import ScenarioError, load_scenario
from harness.plan.story_plan import expand
from harness.run.execution import execute
from harness.targets.spec import target_limits
from shopops_contract.approvals import RequestStatus
from shopops_contract.digests import draft_digest

TARGETS = ROOT / "scenarios" / "targets"
APPS = {"langgraph": ROOT / "examples" / "langgraph_email_agent",
        "dbos": ROOT / "examples" / "dbos_email_agent"}
NEEDS = {"langgraph": NEEDS_LANGGRAPH, "dbos": NEEDS_DBOS}
KINDS = [pytest.param(k, marks=NEEDS[k]) for k in sorted(APPS)]
FEEDBACK = "Please offer free express shipping on the next order."
MODULE = {"langgraph": "email_agent.py", "dbos": "email_workflow.py"}


def _run(launcher, tmp_path: Path, scenario: Path):
    return execute(ExecutionPlan(load_scenario(scenario), CrashSchedule()), tmp_path / "x",
                   worker_timeout_s=120, launcher=launcher)


def _checks(result) -> dict[str, object]:
    return {c.check_id: c for c in result.checks}


def _variant(tmp_path: Path, kind: str, scenario: str,
             edits: tuple[tuple[str, str], ...]) -> Path:
    """The shipped scenario ``scenario`` over a copy of the example app with ``edits``
    (each ``old`` found exactly once): a mutant of the app."""
    app = tmp_path / "app"
    shutil.copytree(APPS[kind], app, ignore=shutil.ignore_patterns("__pycache__"))
    source = app / MODULE[kind]
    text = source.read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    compile(text, str(source), "exec")
    source.write_text(text, encoding="utf-8")
    toml = (TARGETS / f"{scenario}.toml").read_text(encoding="utf-8")
    toml = toml.replace(f'folder = "../../examples/{APPS[kind].name}"', f'folder = "{app}"')
    toml = "\n".join(line for line in toml.splitlines()
                     if not line.startswith("points = "))  # no kill: the bug shows alone
    path = tmp_path / f"{scenario}.toml"
    path.write_text(toml.replace("[crash]\n", ""), encoding="utf-8")
    return path


# -- what a scenario may ask of an app -------------------------------------------------------

@pytest.mark.pure
@NEEDS_LANGGRAPH
@NEEDS_DBOS
def test_the_new_scenarios_are_accepted_for_apps_and_told_as_the_reference_tells_them() -> None:
    for kind in APPS:
        feedback = load_scenario(TARGETS / f"{kind}-email-agent-feedback.toml")
        assert target_limits(feedback) == [] and feedback.reject_feedback == FEEDBACK
        kinds = [type(st).__name__ + ":" + getattr(getattr(st, "role", None), "value", "-")
                 for st in expand(feedback)]
        decide = ["WorkersStep:decide"] if kind == "dbos" else []
        assert kinds == ["WorkersStep:start", "HumanStep:-", "WorkersStep:recheck",
                         "HumanStep:-", *decide, "WorkersStep:resume"], kinds
        late = load_scenario(TARGETS / f"{kind}-email-agent-late.toml")
        assert target_limits(late) == [] and late.approve_delay_h == 6
        never = load_scenario(TARGETS / f"{kind}-email-agent-never.toml")
        assert target_limits(never) == [] and never.expect_deliveries == 0


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\n[target]\n{body}\n', encoding="utf-8")
    return path


@pytest.mark.pure
@NEEDS_LANGGRAPH
@pytest.mark.parametrize(("body", "field", "says"), [
    ('kind = "langgraph"\nfolder = "."\ngraph = "a:g"\nreject_feedback = { approved = false }',
     "target.reject_feedback", "must hold {feedback}"),
    ('kind = "langgraph"\nfolder = "."\ngraph = "a:g"\nreject_feedback = 3',
     "target.reject_feedback", ""),
    # the shipped LangGraph example (no folder) is not an app: its loop keeps real time
    ('kind = "langgraph"\n[human]\ndelay_hours = 6', "human.delay_hours",
     "not supported for target kind"),
    ('kind = "langgraph"\n[human]\naction = "reject"\nfeedback = "shorter"', "human.action",
     "not supported for target kind"),
])
def test_a_bad_answer_template_or_an_unsupported_human_is_refused(tmp_path, body, field,
                                                                  says) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(_write(tmp_path, body))
    assert err.value.field == field and says in err.value.reason, err.value


@pytest.mark.pure
@NEEDS_LANGGRAPH
def test_an_answer_template_is_kept_as_json_for_the_adapter(tmp_path) -> None:
    s = load_scenario(_write(tmp_path, 'kind = "langgraph"\nfolder = "."\ngraph = "a:g"\n'
                             'reject_feedback = { ok = false, notes = ["{feedback}"] }'))
    assert s.target is not None
    assert s.target.options["reject_feedback"] == '{"ok": false, "notes": ["{feedback}"]}'


# -- the shipped examples, in real processes -------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_a_rejection_with_feedback_is_redrafted_asked_again_and_only_the_redraft_sent(
        forked_launcher, tmp_path, kind) -> None:
    r = _run(forked_launcher, tmp_path, TARGETS / f"{kind}-email-agent-feedback.toml")
    ev = r.evidence
    assert r.verdict is Verdict.PASS and ev.deliveries == 1, r.reasons
    rejected, approved = ev.approval_requests  # two asks: the draft, then the redraft
    assert rejected.status == RequestStatus.REJECTED and rejected.feedback == FEEDBACK
    assert approved.status == RequestStatus.APPROVED
    assert rejected.request_id != approved.request_id
    (sent,) = ev.gateway.deliveries_for(ev.case_id)
    assert FEEDBACK in sent.body  # the feedback is visible in what went out
    assert draft_digest(sent.to, sent.subject, sent.body) == approved.draft_digest
    assert approved.draft_digest != rejected.draft_digest
    checks = _checks(r)
    assert checks[CheckId.ASKED_ONCE].passed and checks[CheckId.REJECTION_RESPECTED].passed


@pytest.mark.parametrize("kind", KINDS)
def test_a_late_approval_is_given_hours_after_the_ask_and_the_draft_sent_once(
        forked_launcher, tmp_path, kind) -> None:
    r = _run(forked_launcher, tmp_path, TARGETS / f"{kind}-email-agent-late.toml")
    ev = r.evidence
    assert r.verdict is Verdict.PASS and ev.deliveries == 1, r.reasons
    (ask,) = ev.approval_requests
    (ticket,) = ev.tickets
    asked_at = datetime.fromisoformat(ask.requested_at.replace("Z", "+00:00")).timestamp()
    assert 6 * 3600 <= ticket.issued_at_epoch - asked_at < 6 * 3600 + 120
    assert any("6 h after the park" in e.detail for e in ev.events if e.kind == "approve")


@pytest.mark.parametrize("kind", KINDS)
def test_a_human_who_never_decides_leaves_the_app_parked_asked_once(
        forked_launcher, tmp_path, kind) -> None:
    r = _run(forked_launcher, tmp_path, TARGETS / f"{kind}-email-agent-never.toml")
    ev = r.evidence
    assert r.verdict is Verdict.PASS and ev.deliveries == 0, r.reasons
    assert [w.role for w in ev.workers] == ["start", "resume", "resume"]
    (ask,) = ev.approval_requests  # the same wait found by three workers: one ask
    assert ask.status == RequestStatus.PENDING
    asked = _checks(r)[CheckId.ASKED_ONCE]
    assert asked.passed and "asked 1 time(s)" in asked.evidence[0], asked


# -- the mutants: each catch comes out fail ------------------------------------------------

#: LangGraph: the draft is written once, so the feedback changes nothing and the rejected
#: draft is asked for again and sent.
_KEEPS_FIRST_DRAFT = (("    order = state[\"order\"]\n    first = ",
                       "    if state.get(\"email\"):  # drafted already: keep it\n"
                       "        return {}\n    order = state[\"order\"]\n    first = "),)
#: DBOS: the redraft is shown and approved, but the first draft is what goes out.
_SENDS_FIRST_DRAFT = (("    email = draft_email(order_id, order)\n",
                       "    email = first = draft_email(order_id, order)\n"),
                      ("return send_email(email)", "return send_email(first)"))
#: LangGraph: a second look once approved asks the human again for the same email.
_ASKS_AGAIN_ONCE_APPROVED = (
    ('["send_email", "draft_email", END]', '["confirm", "draft_email", END]'),
    ('    if state["approved"]:\n        return "send_email"',
     '    if state["approved"]:\n        return "confirm"'),
    ("builder = StateGraph(State)\n",
     "def confirm(state: State) -> State:\n"
     "    return {\"approved\": bool(interrupt({\"question\": \"Still send it?\",\n"
     "                                       \"email\": state[\"email\"]}))}\n\n\n"
     "builder = StateGraph(State)\nbuilder.add_node(confirm)\n"
     "builder.add_edge(\"confirm\", \"send_email\")\n"))
#: DBOS: silence is consent — no answer within half a second sends the draft (the resumes
#: find the ``recv`` timed out and wait for the workflow to go on: ``dbos_app.parked_at``).
#: Waits for no answer at all (``timeout_seconds=0``: a 0.5 s wait made the send depend on a
#: worker living past it, and the mutant passed on a busy machine) and takes none as yes.
_SILENCE_IS_CONSENT = (("timeout_seconds=7 * 24 * 3600", "timeout_seconds=0"),
                       ("        if decision:\n", "        if decision or decision is None:\n"))


@NEEDS_LANGGRAPH
def test_an_app_that_ignores_the_feedback_and_sends_the_rejected_draft_fails(
        forked_launcher, tmp_path) -> None:
    r = _run(forked_launcher, tmp_path, _variant(
        tmp_path, "langgraph", "langgraph-email-agent-feedback", _KEEPS_FIRST_DRAFT))
    checks = _checks(r)
    assert r.verdict is Verdict.FAIL and r.evidence.deliveries == 1, r.reasons
    respected = checks[CheckId.REJECTION_RESPECTED]
    assert not respected.passed and "sent a rejected draft" in respected.detail, respected
    assert not checks[CheckId.PER_ACTION].passed


@NEEDS_DBOS
def test_an_app_that_sends_the_rejected_draft_after_its_redraft_was_approved_fails(
        forked_launcher, tmp_path) -> None:
    r = _run(forked_launcher, tmp_path, _variant(tmp_path, "dbos", "dbos-email-agent-feedback",
                                _SENDS_FIRST_DRAFT))
    checks = _checks(r)
    assert r.verdict is Verdict.FAIL and r.evidence.deliveries == 1, r.reasons
    respected = checks[CheckId.REJECTION_RESPECTED]
    assert not respected.passed and "sent a rejected draft" in respected.detail, respected
    per_action = checks[CheckId.PER_ACTION]
    assert not per_action.passed and "rejected" in per_action.detail, per_action
    assert checks[CheckId.ASKED_ONCE].passed  # it did ask for the redraft, once


@NEEDS_LANGGRAPH
def test_an_app_that_asks_again_after_the_late_approval_fails_asked_once(
        forked_launcher, tmp_path) -> None:
    r = _run(forked_launcher, tmp_path, _variant(
        tmp_path, "langgraph", "langgraph-email-agent-late", _ASKS_AGAIN_ONCE_APPROVED))
    asked = _checks(r)[CheckId.ASKED_ONCE]
    assert r.verdict is Verdict.FAIL and not asked.passed, r.reasons
    assert "asked 2 time(s)" in asked.evidence[0] and asked.evidence[0].count("interrupt-") == 2


@NEEDS_DBOS
def test_an_app_that_sends_when_the_human_never_answers_fails(forked_launcher, tmp_path) -> None:
    r = _run(forked_launcher, tmp_path, _variant(tmp_path, "dbos", "dbos-email-agent-never",
                                _SILENCE_IS_CONSENT))
    checks = _checks(r)
    assert r.verdict is Verdict.FAIL and r.evidence.deliveries == 1, r.reasons
    assert not checks[CheckId.PER_ACTION].passed, checks[CheckId.PER_ACTION]


class _Queue:
    """The approval records ``rejection_answer`` reads: ``requests(case_id)``."""

    def __init__(self, requests: list[object]) -> None:
        self._requests = requests

    def __enter__(self) -> _Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def requests(self, case_id: str) -> list[object]:
        return self._requests


class _Ctx:
    case_id = "case-O-1001"

    def __init__(self, options: dict[str, str], requests: list[object]) -> None:
        self.options, self._requests = options, requests

    def approval_queue(self) -> _Queue:
        return _Queue(self._requests)


@pytest.mark.pure
def test_the_answer_to_a_rejection_fills_the_feedback_into_the_template() -> None:
    from types import SimpleNamespace

    from harness.targets.human import rejection_answer

    def asked(status: str, feedback: str | None = None) -> object:
        return SimpleNamespace(request_id="interrupt-a", status=status, feedback=feedback)

    assert rejection_answer(_Ctx({}, [asked("pending")]), ["interrupt-a"]) == (False, None)
    assert rejection_answer(_Ctx({}, [asked("rejected")]), ["interrupt-b"]) == (False, None)
    assert rejection_answer(_Ctx({}, [asked("rejected")]), ["interrupt-a"]) == (True, False)
    assert rejection_answer(_Ctx({"reject": '"no"'}, [asked("rejected")]),
                            ["interrupt-a"]) == (True, "no")
    assert rejection_answer(_Ctx({}, [asked("rejected", "Say sorry.")]), ["interrupt-a"]) == \
        (True, {"approved": False, "feedback": "Say sorry."})
    custom = {"reject_feedback": '{"ok": false, "notes": ["Reviewer: {feedback}"], "n": 1}'}
    assert rejection_answer(_Ctx(custom, [asked("rejected", "Say sorry.")]),
                            ["interrupt-a"]) == \
        (True, {"ok": False, "notes": ["Reviewer: Say sorry."], "n": 1})
