"""``run_loop`` and the durable worker against a real mock gateway and real SQLite files.

The story of O-1001 (Chapter 8): park at step 4 → checkpoint → approve → resume → send
once. The gateway's own log is the authority on what was delivered; the checkpoint history
is read from the database. Chapter 8 exercises 3 (keys off duplicates, keys on do not) and
4 (a lease owner rejects another owner's resume) are tested as pairs.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.services.gateway import MockGateway
from shopops import failpoints
from shopops.approvals import ApprovalQueue
from shopops.checkpoint import CheckpointStore
from shopops.errors import (
    ApprovalRefused,
    CheckpointCorrupt,
    CheckpointNotFound,
    FailpointRaised,
    FencedOff,
    LeaseHeld,
    UnsupportedSchemaVersion,
)
from shopops.gateway_client import EmailGatewayClient
from shopops.grant import grant_approval
from shopops.loop import LoopResult, run_loop
from shopops.phases import Phase
from shopops.policy import DeterministicPolicy, Policy, VaryingDraftPolicy
from shopops.records import Records
from shopops.runtime import Services
from shopops.state import State
from shopops.worker import work

CASE, ORDER, RUN = "case-O-1001", "O-1001", "run-1"
STORY = [p.value for p in (Phase.INTAKE, Phase.DRAFTING, Phase.AWAITING_APPROVAL,
                           Phase.APPROVED, Phase.SENDING, Phase.COMPLETED)]

MakeServices = Callable[..., Services]


@pytest.fixture(autouse=True)
def disarmed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No failpoint armed, and nothing written outside tmp_path by a stray default."""
    monkeypatch.chdir(tmp_path)
    failpoints.configure(None, None)
    yield
    failpoints.configure(None, None)


@pytest.fixture
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> MockGateway:
    gw = MockGateway(tmp_path / "gateway.db", port=0).start()
    request.addfinalizer(gw.stop)
    return gw


@pytest.fixture
def make_services(tmp_path: Path, gateway: MockGateway) -> Iterator[MakeServices]:
    """Build ``Services`` explicitly; every queue and client is closed at teardown."""
    opened: list[Services] = []

    def make(policy: Policy | None = None, *, keys: bool = True,
             records: Records | None = None) -> Services:
        svc = Services(
            approvals=ApprovalQueue(tmp_path / "approvals.db"),
            gateway=EmailGatewayClient(gateway.url, use_idempotency_keys=keys, backoff_s=0.0),
            policy=policy or DeterministicPolicy(),
            records=records or Records.load(),
        )
        opened.append(svc)
        return svc

    yield make
    for svc in opened:
        svc.approvals.close()
        assert svc.gateway is not None
        svc.gateway.close()


@pytest.fixture
def svc(make_services: MakeServices) -> Services:
    return make_services()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CheckpointStore]:
    with CheckpointStore(tmp_path / "shopops.db") as s:
        yield s


def park(store: CheckpointStore, svc: Services, case_id: str = CASE,
         run_id: str = RUN) -> LoopResult:
    order_id = case_id.removeprefix("case-")
    return run_loop(State(case_id=case_id, order_id=order_id), store=store, run_id=run_id,
                    services=svc)


def resume(store: CheckpointStore, svc: Services, ticket: str | None = None) -> LoopResult:
    """The chapter's resume: load, grant (if a ticket), extend the budget, continue."""
    state = store.load(CASE, RUN)
    if ticket is not None:
        grant_approval(state, ticket, queue=svc.approvals)
    state.max_steps = state.step + 5
    state.done = False
    return run_loop(state, store=store, run_id=RUN, services=svc)


def same_facts(loaded: State, live: State) -> bool:
    """Equal in everything but ``done``: the loop sets ``done`` after its last save."""
    return dataclasses.replace(loaded, done=live.done) == live


def phases(store: CheckpointStore, run_id: str = RUN) -> list[str]:
    return [row.state().phase for row in store.history(CASE, run_id)]


def parked_state(store: CheckpointStore, run_id: str = RUN) -> State:
    [state] = [r.state() for r in store.history(CASE, run_id)
               if r.state().phase == "awaiting_approval"]
    return state


# -- the story --------------------------------------------------------------------------------

def test_the_story_parks_at_step_4_without_sending(store: CheckpointStore, svc: Services,
                                                   gateway: MockGateway) -> None:
    result = park(store, svc)
    state = result.state
    assert (result.stopped, result.steps) == ("parked", 4)
    assert (state.phase, state.step, state.done) == ("awaiting_approval", 4, True)
    assert state.draft is not None and state.draft.to == "jordan.lee@example.com"
    assert state.customer is not None and state.customer["customer_id"] == "C-501"
    assert (state.email_sent, state.approval_ticket, state.send_idempotency_key) == (
        False, None, None)
    assert [r.request_id for r in svc.approvals.requests(CASE)] == [state.approval_request_id]
    assert svc.approvals.tickets() == []
    assert gateway.log().requests == ()
    assert same_facts(store.load(CASE, RUN), state)  # the parked state is what is durable


def test_checkpoint_history_follows_the_story(store: CheckpointStore, svc: Services) -> None:
    park(store, svc)
    ticket = svc.approvals.approve(CASE, approver="maya")
    resume(store, svc, ticket.ticket_id)
    rows = store.history(CASE, RUN)
    states = [row.state() for row in rows]
    got = [s.phase for s in states]
    assert got == ["drafting", "drafting", "awaiting_approval", "approved", "sending",
                   "completed"]
    assert [STORY.index(p) for p in got] == sorted(STORY.index(p) for p in got)
    steps = [s.step for s in states]
    assert steps == sorted(steps) == [2, 3, 4, 5, 5, 5]  # continues, never decreases
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    assert states[0].customer is not None and states[0].order is not None  # Intake durable
    assert states[1].draft is not None and states[1].approval_request_id is None  # draft first
    sending = states[4]
    assert sending.send_idempotency_key and not sending.email_sent  # key durable before send
    assert all(s.draft == states[1].draft for s in states[1:])
    assert states[-1].email_sent and states[-1].delivery_id


def test_resume_with_approval_sends_exactly_once(store: CheckpointStore, svc: Services,
                                                 gateway: MockGateway) -> None:
    park(store, svc)
    checkpointed = parked_state(store)
    ticket = svc.approvals.approve(CASE, approver="maya", ticket_id="apr-desk-9")
    result = resume(store, svc, "apr-desk-9")
    state = result.state
    assert (result.stopped, state.phase, state.email_sent, state.step) == (
        "completed", "completed", True, 5)
    [delivery] = gateway.log().deliveries
    assert checkpointed.draft is not None
    assert (delivery.to, delivery.subject, delivery.body) == (
        checkpointed.draft.to, checkpointed.draft.subject, checkpointed.draft.body)
    assert delivery.idempotency_key == state.send_idempotency_key
    assert delivery.delivery_id == state.delivery_id
    [used] = svc.approvals.tickets(CASE)
    assert (used.ticket_id, used.consumed_by_key) == (ticket.ticket_id, state.send_idempotency_key)
    assert same_facts(store.load(CASE, RUN), state)


def test_resume_without_approval_parks_again_and_sends_nothing(
        store: CheckpointStore, svc: Services, gateway: MockGateway) -> None:
    park(store, svc)
    before = store.history(CASE, RUN)
    result = resume(store, svc)
    assert (result.stopped, result.steps) == ("parked", 0)
    assert (result.state.phase, result.state.step, result.state.email_sent) == (
        "awaiting_approval", 4, False)
    result = work(CASE, ORDER, store=store, services=svc)  # the worker: no ticket either
    assert (result.stopped, result.state.phase) == ("parked", "awaiting_approval")
    assert store.history(CASE, RUN) == before
    assert gateway.log().requests == ()


def test_the_worker_picks_up_the_queue_ticket_and_completes(
        store: CheckpointStore, svc: Services, gateway: MockGateway) -> None:
    assert work(CASE, ORDER, store=store, services=svc).stopped == "parked"
    svc.approvals.approve(CASE, approver="maya")
    result = work(CASE, ORDER, store=store, services=svc)
    assert (result.stopped, result.state.approval_ticket) == ("completed", "apr-desk-1")
    assert len(gateway.log().deliveries) == 1
    again = work(CASE, ORDER, store=store, services=svc)  # a completed case stays completed
    assert (again.stopped, again.steps, again.state.phase) == ("completed", 0, "completed")
    assert len(gateway.log().requests) == 1


def test_resume_does_not_repeat_intake(store: CheckpointStore, make_services: MakeServices,
                                       gateway: MockGateway) -> None:
    park(store, make_services())
    no_crm = make_services(records=Records({}, {}))  # any Intake read would fail
    ticket = no_crm.approvals.approve(CASE, approver="maya")
    result = resume(store, no_crm, ticket.ticket_id)
    assert result.state.email_sent
    assert len(gateway.log().deliveries) == 1


def test_a_rejected_case_never_sends(store: CheckpointStore, svc: Services,
                                     gateway: MockGateway) -> None:
    work(CASE, ORDER, store=store, services=svc)
    svc.approvals.reject(CASE, approver="maya")
    result = work(CASE, ORDER, store=store, services=svc)
    assert (result.stopped, result.state.phase, result.state.email_sent) == (
        "rejected", "rejected", False)
    assert phases(store)[-1] == "rejected"
    assert gateway.log().requests == ()


# -- a varying "model": the checkpointed draft is the one sent ---------------------------

def test_varying_policy_drafts_differ_between_fresh_cases(
        store: CheckpointStore, make_services: MakeServices) -> None:
    svc = make_services(VaryingDraftPolicy())
    first = park(store, svc, run_id="run-1").state.draft
    second = park(store, svc, run_id="run-2").state.draft
    assert first is not None and second is not None
    assert (first.to, first.subject) == (second.to, second.subject)
    assert first.body != second.body
    assert len(svc.approvals.requests(CASE)) == 2  # two drafts, two approval requests


def test_varying_policy_resume_sends_the_checkpointed_draft_byte_for_byte(
        store: CheckpointStore, make_services: MakeServices, gateway: MockGateway) -> None:
    park(store, make_services(VaryingDraftPolicy()))
    checkpointed = parked_state(store).draft
    assert checkpointed is not None
    later = make_services(VaryingDraftPolicy())  # a new worker, a new "model"
    early = work(CASE, ORDER, store=store, services=later)  # resumed before the approval
    assert (early.stopped, early.state.draft) == ("parked", checkpointed)
    later.approvals.approve(CASE, approver="maya")
    result = work(CASE, ORDER, store=store, services=later)
    assert result.state.email_sent
    [delivery] = gateway.log().deliveries
    assert delivery.body.encode("utf-8") == checkpointed.body.encode("utf-8")
    assert delivery.subject == checkpointed.subject and delivery.to == checkpointed.to
    assert result.state.draft == checkpointed


# -- Chapter 8 exercise 3: keys off duplicate, keys on do not -----------------------------

def crash_after_accept_then_resume(store: CheckpointStore, svc: Services,
                                   gateway: MockGateway) -> None:
    """The gateway delivers, the worker dies before its reply is checkpointed (t6), and a
    new worker resumes from the ``sending`` checkpoint and sends again."""
    park(store, svc)
    ticket = svc.approvals.approve(CASE, approver="maya")
    failpoints.configure("t6.reply_received=raise")  # stands in for the SIGKILL
    with pytest.raises(FailpointRaised):
        resume(store, svc, ticket.ticket_id)
    failpoints.configure(None, None)
    assert len(gateway.log().deliveries) == 1
    assert phases(store)[-1] == "sending"  # the crash left the send ambiguous
    result = resume(store, svc)
    assert result.state.phase == "completed"


def lost_reply_then_retry(store: CheckpointStore, svc: Services,
                          gateway: MockGateway) -> None:
    """The gateway delivers and drops the connection; the client retries (bounded)."""
    park(store, svc)
    ticket = svc.approvals.approve(CASE, approver="maya")
    gateway.set_faults([{"kind": "drop_after_accept"}])
    result = resume(store, svc, ticket.ticket_id)
    assert result.state.phase == "completed"
    assert gateway.pending_faults() == ()


@pytest.mark.parametrize("crash", [crash_after_accept_then_resume, lost_reply_then_retry],
                         ids=["resume-from-sending", "retry-after-lost-reply"])
@pytest.mark.parametrize(("keys", "deliveries"), [(False, 2), (True, 1)],
                         ids=["keys-off", "keys-on"])
def test_exercise_3_duplicates_only_without_keys(
        store: CheckpointStore, make_services: MakeServices, gateway: MockGateway,
        crash: Callable[[CheckpointStore, Services, MockGateway], None], keys: bool,
        deliveries: int) -> None:
    crash(store, make_services(keys=keys), gateway)
    log = gateway.log()
    assert len(log.requests) == 2  # the send went out twice either way
    assert len(log.deliveries_for(CASE)) == deliveries
    state = store.load(CASE, RUN)
    assert state.email_sent
    if keys:
        assert [r.idempotency_key for r in log.requests] == [state.send_idempotency_key] * 2
        assert [r.duplicate for r in log.requests] == [False, True]
        assert state.delivery_id == log.deliveries[0].delivery_id
    else:
        assert {r.idempotency_key for r in log.requests} == {None}


# -- forged approvals are refused at send time ---------------------------------------------

@pytest.mark.parametrize("forge", ["invented", "another-case"])
def test_a_forged_ticket_in_the_checkpoint_is_refused_at_send(
        store: CheckpointStore, svc: Services, gateway: MockGateway, forge: str) -> None:
    park(store, svc)
    if forge == "invented":
        ticket_id, reason = "apr-desk-9", "unknown_ticket"
    else:  # a real ticket, issued for O-1002
        park(store, svc, case_id="case-O-1002")
        ticket_id = svc.approvals.approve("case-O-1002", approver="maya").ticket_id
        reason = "wrong_case"
    forged = store.load(CASE, RUN)
    forged.approval_ticket = ticket_id  # the model wrote it into the state …
    forged.phase = Phase.APPROVED.value  # … and forced the phase past the FSM
    store.save(forged, run_id=RUN)
    with pytest.raises(ApprovalRefused) as info:
        work(CASE, ORDER, store=store, services=svc)
    assert (info.value.reason, info.value.ticket_id, info.value.case_id) == (
        reason, ticket_id, CASE)
    assert gateway.log().requests == ()  # nothing even reached the gateway
    assert not store.load(CASE, RUN).email_sent


def test_a_forged_ticket_in_memory_is_refused_at_send(store: CheckpointStore, svc: Services,
                                                      gateway: MockGateway) -> None:
    state = park(store, svc).state
    state.approval_ticket = "apr-desk-9"
    state.phase = "approved"
    state.max_steps, state.done = state.step + 5, False
    with pytest.raises(ApprovalRefused) as info:
        run_loop(state, services=svc)
    assert info.value.reason == "unknown_ticket"
    assert gateway.log().requests == ()


# -- Chapter 8 exercise 4: leases ----------------------------------------------------------

def test_a_second_owner_is_refused_while_the_lease_is_live(
        store: CheckpointStore, svc: Services, gateway: MockGateway) -> None:
    assert work(CASE, ORDER, store=store, services=svc, owner="worker-a").stopped == "parked"
    assert store.current_lease(CASE) is None  # stopping on its own, it handed the case back
    store.acquire_lease(CASE, "worker-a", 60)  # as if worker-a had died holding its lease
    rows = store.history(CASE, RUN)
    assert {(r.lease_owner, r.fence) for r in rows} == {("worker-a", 1)}
    svc.approvals.approve(CASE, approver="maya")
    with pytest.raises(LeaseHeld) as info:
        work(CASE, ORDER, store=store, services=svc, owner="worker-b")
    assert (info.value.owner, info.value.holder, info.value.case_id) == (
        "worker-b", "worker-a", CASE)
    assert store.history(CASE, RUN) == rows  # the refused resume wrote nothing
    assert gateway.log().requests == ()  # and sent nothing
    assert svc.approvals.ticket_for(CASE) is not None  # the ticket is still unused
    result = work(CASE, ORDER, store=store, services=svc, owner="worker-a")  # same owner
    assert result.state.email_sent and len(gateway.log().deliveries) == 1


def test_after_expiry_the_new_owner_fences_the_old_one_off(
        tmp_path: Path, svc: Services) -> None:
    now = [1_784_419_200.0]
    with CheckpointStore(tmp_path / "leased.db", clock=lambda: now[0]) as store:
        work(CASE, ORDER, store=store, services=svc, owner="worker-a", lease_ttl_s=30)
        store.acquire_lease(CASE, "worker-a", 30)  # worker-a again (a new grant: fence 2)
        old = store.current_lease(CASE)  # and dies holding it
        assert old is not None and (old.owner, old.fence) == ("worker-a", 2)
        now[0] += 31  # worker-a's lease expired (it was killed, say)
        result = work(CASE, ORDER, store=store, services=svc, owner="worker-b")
        assert result.stopped == "parked"
        lease = store.current_lease(CASE, include_expired=True)  # released when it parked
        assert lease is not None and (lease.owner, lease.fence) == ("worker-b", 3)
        count = len(store.history(CASE, RUN))
        with pytest.raises(FencedOff):  # the zombie worker-a tries to write
            store.save(result.state, run_id=RUN, lease=old)
        assert len(store.history(CASE, RUN)) == count


# -- the worker: start when empty, fail closed when corrupt ---------------------------------

def test_the_worker_starts_a_case_without_a_checkpoint(store: CheckpointStore, svc: Services,
                                                       gateway: MockGateway) -> None:
    assert store.history(CASE) == []
    result = work(CASE, ORDER, store=store, services=svc)
    assert (result.stopped, result.state.step) == ("parked", 4)
    assert phases(store) == ["drafting", "drafting", "awaiting_approval"]


def test_resume_requires_a_checkpoint_when_told(store: CheckpointStore, svc: Services) -> None:
    with pytest.raises(CheckpointNotFound) as info:
        work(CASE, ORDER, store=store, services=svc, require_checkpoint=True)
    assert (info.value.case_id, info.value.run_id) == (CASE, RUN)
    assert store.history(CASE) == []
    assert svc.approvals.requests() == []


GOOD = State(case_id=CASE, order_id=ORDER).to_json()


@pytest.mark.parametrize(("version", "state_json", "error"), [
    (2, '{"case_id": "case-O-1001", "phase": ', CheckpointCorrupt),
    (2, None, CheckpointCorrupt),
    (2, "[]", CheckpointCorrupt),
    (2, GOOD.replace('"step":0', '"step":"zero"'), CheckpointCorrupt),
    (2, GOOD.replace('"phase":"intake"', '"phase":"parked"'), CheckpointCorrupt),
    (2, GOOD.replace(CASE, "case-O-1002"), CheckpointCorrupt),
    (1, GOOD, UnsupportedSchemaVersion),
    (99, GOOD, UnsupportedSchemaVersion),
    (None, GOOD, UnsupportedSchemaVersion),
], ids=["truncated", "null", "array", "mistyped", "bad-phase", "other-case", "v1", "v99",
        "null-version"])
def test_the_worker_raises_on_a_corrupt_checkpoint_never_starts_fresh(
        store: CheckpointStore, svc: Services, gateway: MockGateway, version: int | None,
        state_json: str | None, error: type[Exception]) -> None:
    raw = sqlite3.connect(store.path)
    try:
        with raw:
            raw.execute("INSERT INTO checkpoints(case_id, run_id, schema_version, state_json,"
                        " created_at) VALUES (?, ?, ?, ?, ?)",
                        (CASE, RUN, version, state_json, "2026-07-19T00:00:00Z"))
    finally:
        raw.close()
    before = store.history(CASE)
    with pytest.raises(error) as info:
        work(CASE, ORDER, store=store, services=svc)
    assert (info.value.case_id, info.value.run_id) == (CASE, RUN)  # type: ignore[attr-defined]
    assert info.value.seq == before[-1].seq  # type: ignore[attr-defined]
    assert store.history(CASE) == before  # the row is untouched, nothing appended
    assert svc.approvals.requests() == []  # no fresh start: no Intake, no draft, no request
    assert gateway.log().requests == ()


def test_a_corrupt_latest_row_is_not_skipped_for_an_older_good_one(
        store: CheckpointStore, svc: Services, gateway: MockGateway) -> None:
    park(store, svc)
    raw = sqlite3.connect(store.path)
    try:
        with raw:
            raw.execute("INSERT INTO checkpoints(case_id, run_id, schema_version, state_json,"
                        " created_at) VALUES (?, ?, 2, '{\"torn', '2026-07-19T00:00:09Z')",
                        (CASE, RUN))
    finally:
        raw.close()
    svc.approvals.approve(CASE, approver="maya")
    with pytest.raises(CheckpointCorrupt):
        work(CASE, ORDER, store=store, services=svc)
    assert gateway.log().requests == ()
