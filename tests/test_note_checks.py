"""The checks on a case with two gated side effects (issue 9): the O-1001 email and an order
note, each approved on its own gate, each delivered by its own mock ledger. The good story
passes every check — none takes the note for the email or the email for the note — and
the evidence of realistic broken loops fails: a note re-sent under a fresh key, a note
sent with no approval of its own (the email's approval taken for it), a rejected note sent
anyway, a case completed without its note, the email sent again after a checkpoint
acknowledged it, a note request after the case completed."""

from __future__ import annotations

from dataclasses import replace

from test_checks import (
    CASE,
    DELIVERY_ID,
    DIGEST,
    ORDER,
    REQUEST_ID,
    TICKET_ID,
    evidence,
    good_gateway,
    good_specs,
    good_states,
    request,
    ticket,
)

from harness.judge.checks.actions import per_action
from harness.judge.checks.history import no_request_after_done
from harness.judge.checks.registry import run_checks, ticket_server_issued
from harness.model import Event, EventKind, Evidence, NoteDelivery
from shopops.approvals import NOTE_GATE, ApprovalRequest
from shopops.state import State
from shopops_contract.digests import note_digest

NOTE_TEXT = f"Customer emailed about order {ORDER}: 'Update on your order O-1001'."
NOTE_DIGEST = note_digest(ORDER, NOTE_TEXT)
NOTE_KEY = f"{CASE}:{NOTE_GATE}:{NOTE_DIGEST[:16]}"
NOTE_REQUEST = f"req-{CASE}-{NOTE_GATE}-{NOTE_DIGEST[:12]}"
NOTE_TICKET = "apr-desk-2"
NOTE_ID = "nte-000001"
GATES = ("send_email", NOTE_GATE)


def note_states() -> list[State]:
    """The good story's checkpoints, for a case with the order note."""
    out = []
    for s in good_states():
        fields: dict[str, object] = {"order_note": True}
        if s.draft is not None:
            fields |= {"note_text": NOTE_TEXT, "note_request_id": NOTE_REQUEST}
        if s.approval_ticket is not None:
            fields["note_ticket"] = NOTE_TICKET
        if s.send_idempotency_key is not None:
            fields["note_idempotency_key"] = NOTE_KEY
        if s.phase == "completed":
            fields |= {"note_sent": True, "note_delivery_id": NOTE_ID}
        out.append(replace(s, **fields))  # type: ignore[arg-type]
    return out


def note(note_id: str = NOTE_ID, key: str | None = NOTE_KEY, body: str = NOTE_TEXT,
         request_seq: int = 1) -> NoteDelivery:
    return NoteDelivery(note_id, request_seq, key, "ab12", CASE, ORDER, body,
                        "2026-07-19T03:00:09+00:00")


def note_ticket(**fields: object) -> object:
    return ticket(**{"ticket_id": NOTE_TICKET, "request_id": NOTE_REQUEST,
                     "draft_digest": NOTE_DIGEST, "consumed_by_key": NOTE_KEY,
                     "gate": NOTE_GATE, **fields})


def note_evidence(**fields: object) -> Evidence:
    base: dict[str, object] = dict(
        states=note_states(), gates=GATES,
        approval_requests=(
            ApprovalRequest(REQUEST_ID, CASE, DIGEST, "t", "approved"),
            ApprovalRequest(NOTE_REQUEST, CASE, NOTE_DIGEST, "t", "approved", None, NOTE_GATE)),
        tickets=(ticket(), note_ticket()),
        gateway=replace(good_gateway(), note_requests=(request(1, NOTE_KEY, delivery_id=NOTE_ID),),
                        notes=(note(),)))
    base.update(fields)
    return evidence(**base)  # type: ignore[arg-type]


def test_the_good_two_action_story_passes_every_check() -> None:
    results = {r.check_id: r for r in run_checks(note_evidence())}
    assert [c for c, r in results.items() if not r.passed and r.applicable] == []
    lines = results["per_action"].evidence
    assert any(line.startswith("send_email: 1 delivery(ies)") for line in lines)
    assert any(line.startswith(f"{NOTE_GATE}: 1 delivery(ies); 1 approved") for line in lines)


def test_a_note_resent_under_a_fresh_key_fails() -> None:
    gw = replace(good_gateway(), notes=(note(), note("nte-000002", "fresh", request_seq=2)))
    res = per_action(note_evidence(gateway=gw))
    assert not res.passed
    assert res.detail == (f"{NOTE_GATE}: 2 deliveries ({NOTE_ID}, nte-000002); at most one "
                          "is allowed")
    assert not ticket_server_issued(note_evidence(gateway=gw)).passed  # no ticket for "fresh"


def test_a_note_changed_on_the_way_out_fails() -> None:
    gw = replace(good_gateway(), notes=(note(body=NOTE_TEXT + " (ShopOps)"),))
    res = per_action(note_evidence(gateway=gw))
    assert not res.passed and res.detail.startswith(f"{NOTE_GATE}: delivery {NOTE_ID} sent "
                                                    "content no human approved")


def test_the_emails_approval_never_approves_the_note() -> None:
    """A loop that adds the note on the email's approval alone: the only tickets are the
    email's, so the note's content was approved on no gate of its own."""
    res = per_action(note_evidence(tickets=(ticket(),)))
    assert not res.passed
    assert f"{NOTE_GATE}: delivery {NOTE_ID} sent content no human approved" in res.detail
    assert "approved: none" in res.detail


def test_the_notes_approval_never_approves_the_email() -> None:
    wrong = ticket(gate=NOTE_GATE)  # the email's digest, approved on the note's gate
    res = per_action(note_evidence(tickets=(wrong, note_ticket())))
    assert not res.passed and res.detail.startswith(
        f"send_email: delivery {DELIVERY_ID} sent content no human approved")
    assert not ticket_server_issued(note_evidence(tickets=(wrong, note_ticket()))).passed


def test_a_rejected_note_sent_anyway_fails() -> None:
    rejected = ApprovalRequest(NOTE_REQUEST, CASE, NOTE_DIGEST, "t", "rejected", None, NOTE_GATE)
    res = per_action(note_evidence(
        approval_requests=(ApprovalRequest(REQUEST_ID, CASE, DIGEST, "t", "approved"), rejected),
        tickets=(ticket(),)))
    assert not res.passed and "sent content a human rejected" in res.detail


def test_a_case_completed_without_its_note_fails() -> None:
    res = per_action(note_evidence(gateway=good_gateway()))
    assert not res.passed and res.detail == f"{NOTE_GATE}: the case completed with no delivery"
    # and the checkpoint that says the note went is named: the loop will not add it again
    assert any(line.startswith(f"{NOTE_GATE}: checkpoint seq ") and "says it was done" in line
               for line in res.evidence), res.evidence


def test_a_note_from_a_case_without_one_fails() -> None:
    """The scenario has no order note (gates: the email only): a note nobody approved."""
    ev = note_evidence(gates=("send_email",), tickets=(ticket(),))
    assert not per_action(ev).passed
    assert per_action(evidence()).passed  # and without any note, the email story passes


def _request_event(seq: int, worker: int, ref: str) -> Event:
    return Event(seq=seq, t_ms=float(seq), kind=EventKind.REQUEST, pid=None, worker=worker,
                 detail="status 200 duplicate", ref=ref)


def test_an_email_request_after_its_acknowledgment_fails() -> None:
    """A resumed worker sends the (deduplicated) email again though the checkpoint said it
    was sent: after ``t6.email_sent_saved``, only the note may leave."""
    specs = good_specs()
    cut = next(i for i, s in enumerate(specs) if s[1] == "t7.completed_saved")
    specs.insert(cut, ("hit", "t6.email_sent_saved", 3, ""))
    base = evidence(specs=specs)
    acked = next(e.seq for e in base.events if e.label == "t6.email_sent_saved")
    assert no_request_after_done(replace(base, events=base.events + (
        _request_event(len(base.events), 3, "note:1"),))).passed is False  # after t7
    early = list(base.events[:acked + 1]) + [_request_event(acked + 1, 3, "note:1")]
    early += [replace(e, seq=e.seq + 1) for e in base.events[acked + 1:]]
    assert no_request_after_done(replace(base, events=tuple(early))).passed
    late = list(base.events[:acked + 1]) + [_request_event(acked + 1, 3, "2")]
    late += [replace(e, seq=e.seq + 1) for e in base.events[acked + 1:]]
    res = no_request_after_done(replace(base, events=tuple(late)))
    assert not res.passed
    assert any("email request 2" in line and "acknowledging the email" in line
               for line in res.evidence)


def test_a_note_request_by_a_worker_started_from_a_terminal_checkpoint_fails() -> None:
    ev = note_evidence()
    done = replace(ev.workers[3], phase_before="completed")
    r = replace(request(5, NOTE_KEY, status=200, delivery_id=NOTE_ID, duplicate=True),
                worker_pid=done.pid)
    ev = replace(ev, workers=ev.workers[:3] + (done,),
                 gateway=replace(ev.gateway, note_requests=ev.gateway.note_requests + (r,)))
    res = no_request_after_done(ev)
    assert not res.passed and "started from a completed checkpoint" in res.detail + "".join(
        res.evidence)


def test_the_note_ticket_must_be_issued_on_its_gate() -> None:
    """A note ticket written into the state (never issued on gate add_order_note)."""
    states = [replace(s, note_ticket="apr-forged") if s.note_ticket else s
              for s in note_states()]
    res = ticket_server_issued(note_evidence(states=states))
    assert not res.passed
    assert f"checkpointed ticket apr-forged was never issued by the queue on gate {NOTE_GATE}" \
        in res.evidence
    assert TICKET_ID in res.evidence[0]
