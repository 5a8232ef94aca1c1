"""The approval queue on a real SQLite file: tickets are server-side facts (Chapter 8,
"Forged approval on resume"; Chapter 29's queue owns ticket creation)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from shopops.approvals import DEFAULT_GATE, NOTE_GATE, ApprovalQueue
from shopops.errors import ApprovalRefused
from shopops.grant import grant_approval
from shopops.state import Draft, State

CASE, OTHER = "case-O-1001", "case-O-1002"
DRAFT = Draft("jordan.lee@example.com", "Update on your order O-1001", "Hi Jordan, ...")
OTHER_DRAFT = Draft("priya.nair@example.com", "Update on your order O-1002", "Hi Priya, ...")


class Clock:
    def __init__(self) -> None:
        self.now = 1_784_419_200.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "approvals.db"


@pytest.fixture
def queue(db: Path) -> Iterator[ApprovalQueue]:
    with ApprovalQueue(db, clock=Clock()) as q:
        yield q


def parked(case_id: str = CASE, draft: Draft = DRAFT) -> State:
    return State(case_id=case_id, order_id=case_id.removeprefix("case-"),
                 phase="awaiting_approval", step=4, done=True, draft=draft)


def propose(queue: ApprovalQueue, state: State) -> str:
    assert state.draft is not None
    request_id = queue.request(state.case_id, state.draft.digest())
    state.approval_request_id = request_id
    return request_id


def refused(state: State, ticket_id: str, queue: ApprovalQueue) -> ApprovalRefused:
    before = state.to_json()
    with pytest.raises(ApprovalRefused) as info:
        grant_approval(state, ticket_id, queue=queue)
    assert state.to_json() == before, "a refused grant must not change the state"
    return info.value


# -- request / approve ----------------------------------------------------------------------

def test_request_is_idempotent_per_case_and_draft(queue: ApprovalQueue) -> None:
    first = queue.request(CASE, DRAFT.digest())
    assert first == f"req-{CASE}-{DRAFT.digest()[:12]}"
    assert queue.request(CASE, DRAFT.digest()) == first
    assert [r.request_id for r in queue.requests(CASE)] == [first]
    assert queue.requests(CASE)[0].status == "pending"
    other = queue.request(CASE, OTHER_DRAFT.digest())
    assert other != first and len(queue.requests(CASE)) == 2


def test_request_survives_reopening_the_file(db: Path, queue: ApprovalQueue) -> None:
    request_id = queue.request(CASE, DRAFT.digest())
    with ApprovalQueue(db) as again:
        assert [r.request_id for r in again.requests()] == [request_id]
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("SELECT case_id, status FROM approval_requests").fetchall() == [
            (CASE, "pending")]
    finally:
        raw.close()


def test_approve_issues_numbered_tickets(queue: ApprovalQueue) -> None:
    propose(queue, parked(CASE))
    propose(queue, parked(OTHER, OTHER_DRAFT))
    first = queue.approve(CASE, approver="maya")
    second = queue.approve(OTHER, approver="maya")
    assert (first.ticket_id, second.ticket_id) == ("apr-desk-1", "apr-desk-2")
    assert (first.case_id, first.draft_digest, first.approver) == (CASE, DRAFT.digest(), "maya")
    assert first.consumed_by_key is None and first.issued_at.endswith("Z")
    assert queue.requests(CASE)[0].status == "approved"
    assert [t.ticket_id for t in queue.tickets()] == ["apr-desk-1", "apr-desk-2"]


def test_approve_with_a_given_ticket_id(queue: ApprovalQueue) -> None:
    propose(queue, parked())
    ticket = queue.approve(CASE, approver="maya", ticket_id="apr-desk-9")
    assert ticket.ticket_id == "apr-desk-9"
    assert queue.ticket_for(CASE) == ticket


def test_approve_without_a_pending_request_is_refused(queue: ApprovalQueue) -> None:
    with pytest.raises(ApprovalRefused) as info:
        queue.approve(CASE, approver="maya")
    assert (info.value.reason, info.value.case_id) == ("no_request", CASE)
    propose(queue, parked())
    queue.approve(CASE, approver="maya")
    with pytest.raises(ApprovalRefused) as again:  # the request is no longer pending
        queue.approve(CASE, approver="maya")
    assert again.value.reason == "no_request"
    assert len(queue.tickets(CASE)) == 1


def test_a_ticket_id_cannot_be_issued_twice(queue: ApprovalQueue) -> None:
    propose(queue, parked())
    propose(queue, parked(OTHER, OTHER_DRAFT))
    queue.approve(CASE, approver="maya", ticket_id="apr-desk-9")
    with pytest.raises(ApprovalRefused) as info:
        queue.approve(OTHER, approver="maya", ticket_id="apr-desk-9")
    assert info.value.reason == "duplicate_ticket"
    assert queue.requests(OTHER)[0].status == "pending"  # rolled back, still approvable
    assert queue.tickets(OTHER) == []


# -- grant_approval ---------------------------------------------------------------------------

def test_grant_accepts_the_issued_ticket(queue: ApprovalQueue) -> None:
    state = parked()
    propose(queue, state)
    ticket = queue.approve(CASE, approver="maya", ticket_id="apr-desk-9")
    grant_approval(state, ticket.ticket_id, queue=queue)
    assert state.phase == "approved"
    assert state.approval_ticket == "apr-desk-9"
    assert queue.ticket_for(CASE) is not None  # granting does not consume


def test_a_ticket_merely_written_into_the_state_is_refused(queue: ApprovalQueue) -> None:
    state = parked()
    propose(queue, state)
    state.approval_ticket = "apr-desk-9"  # the model wrote it; the queue never issued it
    exc = refused(state, "apr-desk-9", queue)
    assert (exc.reason, exc.ticket_id, exc.case_id) == ("unknown_ticket", "apr-desk-9", CASE)
    assert "server-side facts" in str(exc)


def test_an_unknown_ticket_id_is_refused(queue: ApprovalQueue) -> None:
    state = parked()
    propose(queue, state)
    queue.approve(CASE, approver="maya")  # apr-desk-1 exists
    assert refused(state, "apr-desk-2", queue).reason == "unknown_ticket"


def test_a_ticket_for_another_case_is_refused(queue: ApprovalQueue) -> None:
    mine, theirs = parked(CASE), parked(OTHER, OTHER_DRAFT)
    propose(queue, mine)
    propose(queue, theirs)
    their_ticket = queue.approve(OTHER, approver="maya")
    exc = refused(mine, their_ticket.ticket_id, queue)
    assert (exc.reason, exc.case_id) == ("wrong_case", CASE)


def test_a_ticket_for_a_stale_draft_is_refused(queue: ApprovalQueue) -> None:
    state = parked()
    propose(queue, state)
    ticket = queue.approve(CASE, approver="maya")
    state.draft = Draft(DRAFT.to, DRAFT.subject, DRAFT.body + " P.S. 20% off!")
    exc = refused(state, ticket.ticket_id, queue)
    assert exc.reason == "stale_draft"


def test_a_consumed_ticket_is_refused(queue: ApprovalQueue) -> None:
    state = parked()
    propose(queue, state)
    ticket = queue.approve(CASE, approver="maya")
    queue.consume(ticket.ticket_id, CASE, DRAFT.digest(), "key-1")
    exc = refused(state, ticket.ticket_id, queue)
    assert exc.reason == "consumed"
    assert "key-1" in str(exc)
    assert queue.ticket_for(CASE) is None


@pytest.mark.parametrize("phase", ["intake", "drafting", "approved", "sending", "completed",
                                   "rejected"])
def test_grant_in_the_wrong_phase_is_refused(queue: ApprovalQueue, phase: str) -> None:
    state = parked()
    propose(queue, state)
    ticket = queue.approve(CASE, approver="maya")
    state.phase = phase
    exc = refused(state, ticket.ticket_id, queue)
    assert exc.reason == "wrong_phase"


def test_grant_without_a_draft_is_refused(queue: ApprovalQueue) -> None:
    state = parked()
    propose(queue, state)
    ticket = queue.approve(CASE, approver="maya")
    state.draft = None
    assert refused(state, ticket.ticket_id, queue).reason == "no_draft"


def test_a_ticket_issued_through_another_connection_is_accepted(db: Path,
                                                                queue: ApprovalQueue) -> None:
    state = parked()
    propose(queue, state)
    with ApprovalQueue(db) as human_side:  # the reviewer's process, say
        ticket = human_side.approve(CASE, approver="maya", ticket_id="apr-desk-9")
    grant_approval(state, ticket.ticket_id, queue=queue)
    assert state.phase == "approved"


# -- consume -------------------------------------------------------------------------------

def test_consume_with_the_same_key_twice_is_fine(queue: ApprovalQueue) -> None:
    propose(queue, parked())
    ticket = queue.approve(CASE, approver="maya")
    first = queue.consume(ticket.ticket_id, CASE, DRAFT.digest(), "case-O-1001:send_email:ab")
    again = queue.consume(ticket.ticket_id, CASE, DRAFT.digest(), "case-O-1001:send_email:ab")
    assert first.consumed_by_key == again.consumed_by_key == "case-O-1001:send_email:ab"
    assert first.consumed_at == again.consumed_at  # the second consume changed nothing


def test_consume_with_another_key_is_refused(queue: ApprovalQueue) -> None:
    propose(queue, parked())
    ticket = queue.approve(CASE, approver="maya")
    queue.consume(ticket.ticket_id, CASE, DRAFT.digest(), "key-1")
    with pytest.raises(ApprovalRefused) as info:
        queue.consume(ticket.ticket_id, CASE, DRAFT.digest(), "key-2")
    assert info.value.reason == "consumed"
    assert queue.tickets(CASE)[0].consumed_by_key == "key-1"


@pytest.mark.parametrize(("ticket_id", "case_id", "draft", "reason"), [
    ("apr-desk-404", CASE, DRAFT, "unknown_ticket"),
    ("apr-desk-1", OTHER, DRAFT, "wrong_case"),
    ("apr-desk-1", CASE, OTHER_DRAFT, "stale_draft"),
])
def test_consume_rechecks_the_binding(queue: ApprovalQueue, ticket_id: str, case_id: str,
                                      draft: Draft, reason: str) -> None:
    propose(queue, parked())
    queue.approve(CASE, approver="maya")
    with pytest.raises(ApprovalRefused) as info:
        queue.consume(ticket_id, case_id, draft.digest(), "key-1")
    assert info.value.reason == reason
    assert queue.tickets(CASE)[0].consumed_by_key is None  # rolled back


def test_verify_refuses_a_consumed_ticket_but_consume_with_its_key_passes(
        queue: ApprovalQueue) -> None:
    propose(queue, parked())
    ticket = queue.approve(CASE, approver="maya")
    queue.consume(ticket.ticket_id, CASE, DRAFT.digest(), "key-1")
    with pytest.raises(ApprovalRefused) as info:
        queue.verify(ticket.ticket_id, CASE, DRAFT.digest())
    assert info.value.reason == "consumed"
    queue.consume(ticket.ticket_id, CASE, DRAFT.digest(), "key-1")  # a resumed send


# -- reject --------------------------------------------------------------------------------

def test_reject_marks_the_case(queue: ApprovalQueue) -> None:
    state = parked()
    request_id = propose(queue, state)
    assert not queue.is_rejected(CASE)
    rejected = queue.reject(CASE, approver="maya")
    assert (rejected.request_id, rejected.status) == (request_id, "rejected")
    assert queue.is_rejected(CASE)
    assert queue.requests(CASE)[0].status == "rejected"
    assert not queue.is_rejected(OTHER)
    with pytest.raises(ApprovalRefused) as info:  # nothing left to approve
        queue.approve(CASE, approver="maya")
    assert info.value.reason == "no_request"
    assert queue.ticket_for(CASE) is None


def test_reject_without_a_pending_request_is_refused(queue: ApprovalQueue) -> None:
    with pytest.raises(ApprovalRefused) as info:
        queue.reject(CASE, approver="maya")
    assert info.value.reason == "no_request"


def test_ticket_for_returns_the_newest_unconsumed(queue: ApprovalQueue) -> None:
    assert queue.ticket_for(CASE) is None
    propose(queue, parked())
    first = queue.approve(CASE, approver="maya")
    queue.consume(first.ticket_id, CASE, DRAFT.digest(), "key-1")
    propose(queue, parked(CASE, OTHER_DRAFT))
    second = queue.approve(CASE, approver="maya")
    assert queue.ticket_for(CASE) == second


# -- named gates (issue 9: a second gated action, the order note) ----------------------------

NOTE_DIGEST = "a" * 64


def test_each_gate_is_decided_on_its_own(queue: ApprovalQueue) -> None:
    propose(queue, parked())
    note_request = queue.request(CASE, NOTE_DIGEST, gate=NOTE_GATE)
    assert note_request == f"req-{CASE}-{NOTE_GATE}-{NOTE_DIGEST[:12]}"
    note = queue.approve(CASE, approver="maya", gate=NOTE_GATE)
    assert (note.gate, note.draft_digest) == (NOTE_GATE, NOTE_DIGEST)
    # the email is still pending: the note's approval granted nothing on its gate
    assert queue.ticket_for(CASE, DRAFT.digest()) is None
    assert queue.latest_request(CASE).status == "pending"  # type: ignore[union-attr]
    assert queue.ticket_for(CASE, NOTE_DIGEST, gate=NOTE_GATE) == note
    email = queue.approve(CASE, approver="maya")
    assert email.gate == DEFAULT_GATE
    assert [t.gate for t in queue.tickets(CASE)] == [NOTE_GATE, DEFAULT_GATE]


def test_a_ticket_of_one_gate_never_grants_another(queue: ApprovalQueue) -> None:
    queue.request(CASE, NOTE_DIGEST, gate=NOTE_GATE)
    note = queue.approve(CASE, approver="maya", gate=NOTE_GATE)
    for act in (lambda: queue.verify(note.ticket_id, CASE, NOTE_DIGEST),
                lambda: queue.consume(note.ticket_id, CASE, NOTE_DIGEST, "k"),
                lambda: queue.check_held(note.ticket_id, CASE, NOTE_DIGEST, None)):
        with pytest.raises(ApprovalRefused) as info:
            act()
        assert info.value.reason == "wrong_gate"
    assert queue.consume(note.ticket_id, CASE, NOTE_DIGEST, "k", gate=NOTE_GATE
                         ).consumed_by_key == "k"


def test_rejecting_one_gate_leaves_the_other_pending(queue: ApprovalQueue) -> None:
    propose(queue, parked())
    queue.request(CASE, NOTE_DIGEST, gate=NOTE_GATE)
    rejected = queue.reject(CASE, approver="maya", gate=NOTE_GATE)
    assert (rejected.gate, rejected.status) == (NOTE_GATE, "rejected")
    assert queue.is_rejected(CASE, gate=NOTE_GATE) and not queue.is_rejected(CASE)
    with pytest.raises(ApprovalRefused) as info:
        queue.reject(CASE, approver="maya", gate=NOTE_GATE)
    assert info.value.reason == "no_request" and NOTE_GATE in str(info.value)


def test_an_unknown_gate_is_refused(queue: ApprovalQueue) -> None:
    for act in (lambda: queue.request(CASE, NOTE_DIGEST, gate="refund"),
                lambda: queue.approve(CASE, approver="maya", gate="refund"),
                lambda: queue.reject(CASE, approver="maya", gate="refund")):
        with pytest.raises(ApprovalRefused) as info:
            act()
        assert info.value.reason == "unknown_gate" and "add_order_note" in str(info.value)


def test_a_queue_database_from_before_gates_keeps_working(db: Path) -> None:
    """An old file (no gate columns): opened, it gains them; its rows are send_email."""
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "CREATE TABLE approval_requests (request_id TEXT PRIMARY KEY, case_id TEXT NOT NULL,"
            " draft_digest TEXT NOT NULL, requested_at TEXT NOT NULL, status TEXT NOT NULL,"
            " feedback TEXT);"
            "CREATE TABLE tickets (ticket_id TEXT PRIMARY KEY, request_id TEXT NOT NULL,"
            " case_id TEXT NOT NULL, draft_digest TEXT NOT NULL, approver TEXT NOT NULL,"
            " issued_at TEXT NOT NULL, issued_at_epoch REAL NOT NULL, consumed_by_key TEXT,"
            " consumed_at TEXT);")
        conn.execute("INSERT INTO approval_requests VALUES ('req-1', ?, ?, 't', 'approved', "
                     "NULL)", (CASE, DRAFT.digest()))
        conn.execute("INSERT INTO tickets VALUES ('apr-desk-1', 'req-1', ?, ?, 'maya', 't', "
                     "1.0, NULL, NULL)", (CASE, DRAFT.digest()))
    with ApprovalQueue(db) as queue:
        (old,) = queue.tickets(CASE)
        assert old.gate == DEFAULT_GATE
        assert queue.verify("apr-desk-1", CASE, DRAFT.digest()) == old
        assert queue.requests(CASE)[0].gate == DEFAULT_GATE
        queue.request(CASE, NOTE_DIGEST, gate=NOTE_GATE)
        assert queue.approve(CASE, approver="maya", gate=NOTE_GATE).gate == NOTE_GATE
