"""The order note, the O-1001 story's second gated side effect (issue 9), in the reference
loop against a real mock gateway and order service and real SQLite: its own approval gate,
its own key durable before its first attempt, its own ledger; the case completes only when
both the email and the note are done. A crash is stood in for by a failpoint that raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.services.gateway import MockGateway
from shopops import failpoints
from shopops.approvals import NOTE_GATE
from shopops.checkpoint import CheckpointStore
from shopops.errors import FailpointRaised, StateInvalid
from shopops.runtime import Services
from shopops.state import NOTE_FIELDS, State
from shopops.worker import work
from shopops_contract.digests import note_digest

CASE, ORDER, RUN = "case-O-1001", "O-1001", "run-1"


pytestmark = pytest.mark.usefixtures("disarmed")  # tests/conftest.py


def run(store: CheckpointStore, svc: Services) -> str:
    return work(CASE, ORDER, store=store, services=svc, order_note=True).stopped


def crash_at(label: str, store: CheckpointStore, svc: Services) -> None:
    failpoints.configure(f"{label}=raise")
    with pytest.raises(FailpointRaised):
        run(store, svc)
    failpoints.configure(None, None)


def latest(store: CheckpointStore) -> State:
    return store.load(CASE, RUN)


def approve_both(svc: Services) -> None:
    svc.approvals.approve(CASE, approver="maya")
    svc.approvals.approve(CASE, approver="maya", gate=NOTE_GATE)


def test_the_park_asks_for_both_gates(store: CheckpointStore, svc: Services) -> None:
    assert run(store, svc) == "parked"
    state = latest(store)
    assert state.order_note and state.note_text is not None
    assert state.draft is not None and state.draft.digest()[:12] in state.note_text
    requests = {r.gate: r for r in svc.approvals.requests(CASE)}
    assert set(requests) == {"send_email", NOTE_GATE}
    assert requests[NOTE_GATE].draft_digest == note_digest(ORDER, state.note_text)
    assert state.note_request_id == requests[NOTE_GATE].request_id


def test_one_approval_is_not_enough(store: CheckpointStore, svc: Services,
                                    gateway: MockGateway) -> None:
    run(store, svc)
    svc.approvals.approve(CASE, approver="maya")  # the email only
    assert run(store, svc) == "parked"
    assert latest(store).phase == "awaiting_approval"
    assert gateway.log().requests == () and gateway.log().note_requests == ()


def test_both_approved_sends_each_once_in_its_own_ledger(store: CheckpointStore, svc: Services,
                                                         gateway: MockGateway) -> None:
    run(store, svc)
    approve_both(svc)
    assert run(store, svc) == "completed"
    state, log = latest(store), gateway.log()
    assert state.email_sent and state.note_sent
    assert [d.delivery_id for d in log.deliveries] == [state.delivery_id]
    assert [n.delivery_id for n in log.notes] == [state.note_delivery_id]
    assert log.notes[0].body == state.note_text and log.notes[0].order_id == ORDER
    assert log.note_requests[0].idempotency_key == state.note_idempotency_key
    assert state.note_idempotency_key != state.send_idempotency_key
    assert {t.gate: t.consumed_by_key for t in svc.approvals.tickets(CASE)} == {
        "send_email": state.send_idempotency_key, NOTE_GATE: state.note_idempotency_key}
    assert run(store, svc) == "completed"  # a resume after completion sends nothing
    assert (len(gateway.log().requests), len(gateway.log().note_requests)) == (1, 1)


def test_the_note_key_is_durable_before_the_first_attempt(store: CheckpointStore, svc: Services,
                                                          gateway: MockGateway) -> None:
    run(store, svc)
    approve_both(svc)
    crash_at("t6.send_key_persisted", store, svc)
    state = latest(store)
    assert state.phase == "sending" and state.note_idempotency_key is not None
    assert gateway.log().note_requests == ()


@pytest.mark.parametrize("label", ["t6.email_sent_saved", "t6.note_request_leaving",
                                   "t6.note_reply_received"])
def test_a_crash_around_the_note_resends_neither(label: str, store: CheckpointStore,
                                                 svc: Services, gateway: MockGateway) -> None:
    run(store, svc)
    approve_both(svc)
    crash_at(label, store, svc)
    acked = latest(store)
    assert acked.phase == "sending" and acked.email_sent and not acked.note_sent
    assert run(store, svc) == "completed"
    log = gateway.log()
    assert len(log.requests) == 1, "the email was acknowledged: it must not be sent again"
    assert len(log.notes) == 1
    assert {r.idempotency_key for r in log.note_requests} == {acked.note_idempotency_key}


def test_a_rejected_note_ends_the_case_with_nothing_sent(store: CheckpointStore, svc: Services,
                                                         gateway: MockGateway) -> None:
    run(store, svc)
    svc.approvals.approve(CASE, approver="maya")
    svc.approvals.reject(CASE, approver="maya", gate=NOTE_GATE)
    assert run(store, svc) == "rejected"
    assert gateway.log().requests == () and gateway.log().note_requests == ()


def test_a_redraft_needs_a_new_note_approval(store: CheckpointStore, svc: Services,
                                            gateway: MockGateway) -> None:
    run(store, svc)
    first = latest(store).note_text
    svc.approvals.approve(CASE, approver="maya", gate=NOTE_GATE)
    svc.approvals.reject(CASE, approver="maya", feedback="Offer express shipping.")
    assert run(store, svc) == "parked"
    second = latest(store)
    assert second.note_text is not None and second.note_text != first
    svc.approvals.approve(CASE, approver="maya")
    assert run(store, svc) == "parked", "the old note's ticket is void for the new note"
    svc.approvals.approve(CASE, approver="maya", gate=NOTE_GATE)
    assert run(store, svc) == "completed"
    assert gateway.log().notes[0].body == second.note_text


def test_a_case_without_the_note_is_unchanged(store: CheckpointStore, svc: Services,
                                              gateway: MockGateway) -> None:
    assert work(CASE, ORDER, store=store, services=svc).stopped == "parked"
    assert [r.gate for r in svc.approvals.requests(CASE)] == ["send_email"]
    svc.approvals.approve(CASE, approver="maya")
    assert work(CASE, ORDER, store=store, services=svc).stopped == "completed"
    assert gateway.log().note_requests == ()
    assert {f: getattr(latest(store), f) for f in NOTE_FIELDS} == NOTE_FIELDS


def test_a_v2_checkpoint_from_before_the_note_still_reads() -> None:
    data = State(case_id=CASE, order_id=ORDER).to_dict()
    for name in NOTE_FIELDS:
        del data[name]
    assert State.from_json(json.dumps(data)) == State(case_id=CASE, order_id=ORDER)
    del data["email_sent"]
    with pytest.raises(StateInvalid, match="missing state field"):
        State.from_dict(data)


def test_some_note_fields_missing_is_refused() -> None:
    data = State(case_id=CASE, order_id=ORDER, order_note=True).to_dict()
    del data["note_sent"]
    with pytest.raises(StateInvalid) as info:
        State.from_dict(data)
    assert info.value.fields["field"] == "note_sent"


@pytest.mark.parametrize(("change", "field"), [
    ({"phase": "completed", "note_sent": False}, "note_sent"),
    ({"order_note": False}, "order_note"),
])
def test_note_invariants(store: CheckpointStore, svc: Services, change: dict[str, object],
                         field: str) -> None:
    run(store, svc)
    approve_both(svc)
    assert run(store, svc) == "completed"
    data = {**latest(store).to_dict(), **change}
    with pytest.raises(StateInvalid) as info:
        State.from_dict(data)
    assert info.value.fields["field"] == field


# -- the scenario side: sut.order_note, the gate in [[story]] ---------------------------------

def _write(folder: Path, text: str) -> Path:
    path = folder / "x.toml"
    path.write_text('name = "x"\n' + text, encoding="utf-8")
    return path


_NOTE_STORY = """
[[story]]
step = "workers"
role = "start"

[[story]]
step = "human"
action = "approve"
gate = "add_order_note"
"""


def test_the_shipped_order_note_scenario_has_both_gates() -> None:
    from scenario_helpers import ROOT

    from harness.plan.scenario import load_scenario

    s = load_scenario(ROOT / "scenarios" / "order-note.toml")
    assert s.order_note and s.points is None  # every point the trace run reaches
    assert [getattr(st, "gate", None) for st in s.story if st.kind == "human"] == [
        "send_email", NOTE_GATE]


def test_a_note_gate_needs_the_order_note(tmp_path: Path) -> None:
    from scenario_helpers import refused

    err = refused(_write(tmp_path, _NOTE_STORY))
    assert err.field == "story[1].gate" and "sut.order_note = true" in str(err)
    assert err.line == 10
    from harness.plan.scenario import load_scenario

    assert load_scenario(_write(tmp_path, "[sut]\norder_note = true\n" + _NOTE_STORY)).order_note


@pytest.mark.parametrize(("text", "field", "says"), [
    ('[sut]\norder_note = "yes"\n', "sut.order_note", "true or false"),
    ('[sut]\norder_note = true\n[[story]]\nstep = "human"\ngate = "refund"\n', "gate",
     "allowed: send_email, add_order_note"),
    ('[sut]\norder_note = true\n[[story]]\nstep = "human"\ngate = "add_order_note"\n'
     'ticket = "forged_in_state"\n', "ticket", "is the email's: gate 'add_order_note' takes"),
    ('[sut]\norder_note = true\n[target]\nkind = "dbos"\n', "sut.order_note",
     "a [target] has none"),
])
def test_bad_order_note_fields_are_refused(tmp_path: Path, text: str, field: str,
                                           says: str) -> None:
    from scenario_helpers import refused

    err = refused(_write(tmp_path, text))
    assert field in str(err) and says in str(err), str(err)


def test_the_order_note_reaches_the_worker_and_the_shorthand_approves_both() -> None:
    from harness.model import HumanStep, Scenario
    from harness.plan.story_plan import expand

    steps = expand(Scenario(name="x", order_note=True))
    assert [s.gate for s in steps if isinstance(s, HumanStep)] == ["send_email", NOTE_GATE]
    assert [s.gate for s in expand(Scenario(name="x")) if isinstance(s, HumanStep)] == [
        "send_email"]


def test_a_story_that_rejects_the_note_ends_rejected_with_nothing_sent(tmp_path: Path) -> None:
    """End to end, one execution: start, approve the email, reject the note on its gate,
    resume: the case ends rejected, neither ledger has a delivery, every check passes."""
    from harness.launch.spawn import SpawnLauncher
    from harness.model import (
        CrashSchedule,
        ExecutionPlan,
        HumanAction,
        HumanStep,
        Scenario,
        WorkerRole,
        WorkersStep,
    )
    from harness.model.plan import Sut
    from harness.run.execution import execute

    story = (WorkersStep(WorkerRole.START), HumanStep(),
             HumanStep(HumanAction.REJECT, gate=NOTE_GATE), WorkersStep(WorkerRole.RESUME))
    scenario = Scenario(name="note-rejected", order_note=True, story=story,
                        expect_deliveries=0)
    result = execute(ExecutionPlan(scenario, CrashSchedule(), Sut()), tmp_path / "exe",
                     launcher=SpawnLauncher())
    ev = result.evidence
    assert result.verdict == "pass", (result.reasons, [c for c in result.checks if not c.passed])
    assert ev.gateway.requests == () and ev.gateway.note_requests == ()
    assert {(r.gate, r.status) for r in ev.approval_requests} == {
        ("send_email", "approved"), (NOTE_GATE, "rejected")}
    assert ev.workers[-1].phase_after == "rejected"
