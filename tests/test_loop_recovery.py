"""The reference loop's production behaviour, against a real mock gateway and real SQLite:
a rejection with feedback is answered by a redraft and a new approval request; a recovery
attempt is counted durably and the case is dead-lettered past the maximum; the v1->v2
migration sets every v2 field. A crash is stood in for by a failpoint that raises."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.services.gateway import MockGateway
from shopops import failpoints
from shopops.approvals import ApprovalQueue
from shopops.checkpoint import CheckpointStore
from shopops.errors import ApprovalRefused, FailpointRaised, StateInvalid
from shopops.grant import grant_approval
from shopops.phases import TERMINAL, Phase, check_transition
from shopops.runtime import ConfigError, Services, max_attempts_from_env
from shopops.state import State
from shopops.worker import MAX_REVISIONS, work

CASE, ORDER, RUN = "case-O-1001", "O-1001", "run-1"
FEEDBACK = "Please offer free express shipping on the next order."


pytestmark = pytest.mark.usefixtures("disarmed")  # tests/conftest.py


def run(store: CheckpointStore, svc: Services, **kwargs: object) -> str:
    return work(CASE, ORDER, store=store, services=svc, **kwargs).stopped  # type: ignore[arg-type]


def crash_at(label: str, store: CheckpointStore, svc: Services, **kwargs: object) -> None:
    failpoints.configure(f"{label}=raise")
    with pytest.raises(FailpointRaised):
        run(store, svc, **kwargs)
    failpoints.configure(None, None)


def states(store: CheckpointStore) -> list[State]:
    return [r.state() for r in store.history(CASE, RUN)]


# -- a rejection with feedback: redraft, ask again ------------------------------------------

def test_a_rejection_with_feedback_is_answered_by_a_redraft(store: CheckpointStore,
                                                            svc: Services,
                                                            gateway: MockGateway) -> None:
    assert run(store, svc) == "parked"
    first = store.load(CASE, RUN).draft
    assert first is not None and FEEDBACK not in first.body
    svc.approvals.reject(CASE, approver="maya", feedback=FEEDBACK)
    assert run(store, svc) == "parked"  # drafted again, and asks again
    parked = store.load(CASE, RUN)
    assert parked.draft is not None and FEEDBACK in parked.draft.body
    assert (parked.draft_revision, parked.review_feedback) == (1, [FEEDBACK])
    requests = svc.approvals.requests(CASE)
    assert [(r.status, r.draft_digest) for r in requests] == [
        ("rejected", first.digest()), ("pending", parked.draft.digest())]
    assert requests[0].feedback == FEEDBACK
    phases = [s.phase for s in states(store)]
    assert phases[-3:] == ["drafting", "drafting", "awaiting_approval"]  # no send meanwhile
    assert gateway.log().requests == ()
    svc.approvals.approve(CASE, approver="maya")
    assert run(store, svc) == "completed"
    (delivery,) = gateway.log().deliveries
    assert delivery.body == parked.draft.body  # the approved redraft, nothing else


def test_a_ticket_for_the_rejected_draft_is_void(store: CheckpointStore, svc: Services,
                                                 tmp_path: Path) -> None:
    run(store, svc)
    old = store.load(CASE, RUN).draft
    assert old is not None
    svc.approvals.reject(CASE, approver="maya", feedback=FEEDBACK)
    run(store, svc)
    with sqlite3.connect(tmp_path / "approvals.db") as conn:  # a ticket for the old draft
        request_id = svc.approvals.requests(CASE)[0].request_id
        conn.execute("INSERT INTO tickets(ticket_id, request_id, case_id, draft_digest, "
                     "approver, issued_at, issued_at_epoch) VALUES ('apr-old', ?, ?, ?, "
                     "'maya', 't', 0)", (request_id, CASE, old.digest()))
    conn.close()
    stale = next(t for t in svc.approvals.tickets(CASE) if t.ticket_id == "apr-old")
    state = store.load(CASE, RUN)
    assert svc.approvals.ticket_for(CASE, state.draft.digest()) is None  # type: ignore[union-attr]
    with pytest.raises(ApprovalRefused) as info:
        grant_approval(state, stale.ticket_id, queue=svc.approvals)
    assert info.value.fields["reason"] == "stale_draft"
    assert run(store, svc) == "parked"  # the worker does not pick the void ticket up


def test_a_rejection_without_feedback_ends_the_case(store: CheckpointStore,
                                                   svc: Services) -> None:
    run(store, svc)
    svc.approvals.reject(CASE, approver="maya")
    assert run(store, svc) == "rejected"
    assert run(store, svc) == "rejected"  # and stays so


def test_redrafts_are_bounded(store: CheckpointStore, svc: Services) -> None:
    run(store, svc)
    for n in range(MAX_REVISIONS):
        svc.approvals.reject(CASE, approver="maya", feedback=f"{FEEDBACK} ({n})")
        assert run(store, svc) == "parked"
    svc.approvals.reject(CASE, approver="maya", feedback="still no")
    assert run(store, svc) == "rejected"
    assert store.load(CASE, RUN).draft_revision == MAX_REVISIONS


@pytest.mark.parametrize("feedback", ["", "   ", "x" * 2001])
def test_empty_or_huge_feedback_is_refused(store: CheckpointStore, svc: Services,
                                           feedback: str) -> None:
    run(store, svc)
    with pytest.raises(ApprovalRefused) as info:
        svc.approvals.reject(CASE, approver="maya", feedback=feedback)
    assert info.value.fields["reason"] == "bad_feedback"
    assert [r.status for r in svc.approvals.requests(CASE)] == ["pending"]


def test_an_old_queue_database_gets_the_feedback_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE approval_requests (request_id TEXT PRIMARY KEY, case_id TEXT"
                     " NOT NULL, draft_digest TEXT NOT NULL, requested_at TEXT NOT NULL,"
                     " status TEXT NOT NULL)")
        conn.execute("INSERT INTO approval_requests VALUES ('r1', ?, 'd', 't', 'pending')",
                     (CASE,))
    conn.close()
    with ApprovalQueue(path) as queue:
        assert queue.reject(CASE, approver="maya", feedback="shorter").feedback == "shorter"
        assert queue.requests(CASE)[0].feedback == "shorter"


# -- recovery attempts and dead-lettering ---------------------------------------------------

def approved(store: CheckpointStore, svc: Services) -> None:
    run(store, svc)
    svc.approvals.approve(CASE, approver="maya")


def test_a_recovery_attempt_is_counted_before_any_work(store: CheckpointStore,
                                                       svc: Services) -> None:
    approved(store, svc)
    assert run(store, svc, ticket=None) == "completed"
    assert {s.recovery_attempts for s in states(store)} == {0}  # parks are not recoveries


def test_each_pickup_after_a_crash_counts_one(store: CheckpointStore, svc: Services,
                                              gateway: MockGateway) -> None:
    approved(store, svc)
    crash_at("t6.request_leaving", store, svc)
    assert store.load(CASE, RUN).recovery_attempts == 0
    crash_at("t6.request_leaving", store, svc)  # counted, durably, before it crashed again
    assert store.load(CASE, RUN).recovery_attempts == 1
    assert run(store, svc) == "completed"
    counts = [s.recovery_attempts for s in states(store)]
    assert counts == sorted(counts) and counts[-1] == 2
    assert len(gateway.log().deliveries) == 1


def test_past_the_maximum_the_case_is_dead_lettered(store: CheckpointStore, svc: Services,
                                                    gateway: MockGateway) -> None:
    approved(store, svc)
    for _ in range(3):
        crash_at("t6.request_leaving", store, svc, max_attempts=2)
    before = gateway.log()
    assert run(store, svc, max_attempts=2) == "dead_lettered"
    final = store.load(CASE, RUN)
    assert (final.phase, final.recovery_attempts, final.done) == ("dead_lettered", 3, True)
    assert final.dead_letter_reason and "maximum of 2" in final.dead_letter_reason
    (letter,) = store.dead_letters(CASE)
    assert (letter.attempts, letter.last_phase, letter.seq) == (
        3, "sending", store.history(CASE, RUN)[-1].seq)
    assert gateway.log() == before  # it tried nothing
    assert run(store, svc, max_attempts=2) == "dead_lettered"  # terminal: no more work
    assert len(store.history(CASE, RUN)) == letter.seq
    assert gateway.log() == before


def test_a_dead_lettered_worker_hands_its_lease_back(store: CheckpointStore,
                                                     svc: Services) -> None:
    approved(store, svc)
    crash_at("t6.request_leaving", store, svc, owner="w")
    assert run(store, svc, owner="w", max_attempts=0) == "dead_lettered"
    assert store.current_lease(CASE) is None


@pytest.mark.parametrize("raw", ["0", "-1", "1001", "two", "2.5", ""])
def test_a_bad_max_attempts_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        max_attempts_from_env({"SHOPOPS_MAX_ATTEMPTS": raw}, 5)
    assert info.value.fields["variable"] == "SHOPOPS_MAX_ATTEMPTS"
    assert max_attempts_from_env({}, 5) == 5 and max_attempts_from_env(
        {"SHOPOPS_MAX_ATTEMPTS": "7"}, 5) == 7


# -- the state and the FSM ---------------------------------------------------------------

def test_dead_lettered_is_terminal_and_reachable_from_every_live_phase() -> None:
    assert Phase.DEAD_LETTERED in TERMINAL
    for phase in Phase:
        if phase not in TERMINAL:
            check_transition(phase.value, "dead_lettered")


@pytest.mark.parametrize(("changes", "field"), [
    ({"phase": "dead_lettered", "dead_letter_reason": None}, "dead_letter_reason"),
    ({"dead_letter_reason": "why"}, "dead_letter_reason"),
    ({"recovery_attempts": -1}, "recovery_attempts"),
    ({"draft_revision": 1}, "draft_revision"),
    ({"review_feedback": [1]}, "review_feedback"),
    ({"review_feedback": "x"}, "review_feedback"),
])
def test_inconsistent_new_fields_are_invalid(changes: dict[str, object], field: str) -> None:
    data = {**State(case_id=CASE, order_id=ORDER).to_dict(), **changes}
    with pytest.raises(StateInvalid) as info:
        State.from_dict(data)
    assert info.value.fields["field"] == field


def test_the_v1_migration_sets_every_v2_field(tmp_path: Path) -> None:
    from shopops.records import DEFAULT_FIXTURES
    db = tmp_path / "v1.db"
    db.write_bytes((DEFAULT_FIXTURES / "v1_parked.db").read_bytes())
    with CheckpointStore(db) as s:
        assert s.migrate_v1_to_v2() == 3
        rows = s.history(CASE, RUN)
    for row in rows:
        data = json.loads(row.state_json or b"")
        assert (data["preferred_channel"], data["recovery_attempts"], data["draft_revision"],
                data["review_feedback"], data["dead_letter_reason"]) == ("email", 0, 0, [], None)
