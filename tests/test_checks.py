"""The checklist as pure functions over hand-built ``Evidence``.

The good story is the one a real execution of ``o1001[t4.parked>t6.gateway_accepted]``
records: the start worker parks and is killed, a recheck worker parks again, the human
approves, a resume worker is killed when the gateway accepts, the next resume completes.
Every broken story below changes that evidence the way a realistic broken loop would, and
each test asserts both the verdict of the check and the lines that say why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from observed import observed

from harness.judge.checks.registry import (
    CHECK_IDS,
    CHECKS,
    CheckResult,
    draft_identical,
    exactly_one_delivery,
    no_process_left,
    no_tampering,
    not_sent_before_approval,
    parked_until_approval,
    run_checks,
    same_key_one_delivery,
    step_continues,
    ticket_server_issued,
)
from harness.judge.evidence import Event, Evidence, WorkerRun
from harness.model import CheckId
from harness.services.gateway import Delivery, GatewayLog, RequestRecord
from shopops.approvals import ApprovalRequest, Ticket
from shopops.checkpoint import CheckpointRow
from shopops.state import Draft, State

# --------------------------------------------------------------------------- the story

CASE = "case-O-1001"
ORDER = "O-1001"
CUSTOMER = {"customer_id": "C-501", "email": "jordan.lee@example.com", "name": "Jordan Lee",
            "tier": "gold"}
ORDER_FACTS = {"carrier_eta": "2026-07-24", "customer_id": "C-501", "item": "Trail running shoes",
               "order_id": ORDER, "status": "delayed", "total_cents": 12900}
DRAFT = Draft("jordan.lee@example.com", "Update on your order O-1001",
              "Hi Jordan,\n\nThanks for your patience with order O-1001 (Trail running shoes). "
              "It is currently delayed; the carrier now expects it by 2026-07-24.\n\n"
              "— ShopOps support")
# What a loop that asks the model again on resume writes instead.
REDRAFT = replace(DRAFT, body=DRAFT.body + "\nP.S. 10% off your next order!")
DIGEST = DRAFT.digest()
KEY = f"{CASE}:send_email:{DIGEST[:16]}"
FRESH_KEY = f"{CASE}:send_email:fresh-after-resume"
REQUEST_ID = f"req-{CASE}-{DIGEST[:12]}"
TICKET_ID = "apr-desk-1"
DELIVERY_ID = "dlv-000001"
APPROVAL_CUT = 3  # the awaiting_approval checkpoint is the last one before the human


def state(phase: str, step: int, **fields: Any) -> State:
    """A ``State`` of the story: Intake facts read, the draft written from step 3 on."""
    base: dict[str, Any] = {"customer": CUSTOMER, "order": ORDER_FACTS,
                            "draft": DRAFT if step >= 3 else None,
                            "policy_version": "policy-deterministic-1",
                            "tool_schema_hash": "d5ba1444c8995a32",
                            "model_route_id": "route-none-deterministic"}
    base.update(fields)
    return State(case_id=CASE, order_id=ORDER, phase=phase, step=step, **base)


def row(seq: int, st: State | bytes | None) -> CheckpointRow:
    """A raw checkpoint row holding ``st``'s real JSON (or the given bytes)."""
    blob = st.to_json().encode() if isinstance(st, State) else st
    return CheckpointRow(seq, CASE, "run-1", 2, blob, f"2026-07-19T00:00:{seq:02d}Z", None, None)


def good_states() -> list[State]:
    """The six checkpoints of a crash-safe run, seq 1..6."""
    return [
        state("drafting", 2),
        state("drafting", 3),
        state("awaiting_approval", 4, approval_request_id=REQUEST_ID),
        state("approved", 5, max_steps=9, approval_request_id=REQUEST_ID,
              approval_ticket=TICKET_ID),
        state("sending", 5, max_steps=9, approval_request_id=REQUEST_ID,
              approval_ticket=TICKET_ID, send_idempotency_key=KEY),
        state("completed", 6, max_steps=10, done=True, approval_request_id=REQUEST_ID,
              approval_ticket=TICKET_ID, send_idempotency_key=KEY, email_sent=True,
              delivery_id=DELIVERY_ID, recovery_attempts=1),  # worker 3 picked up `sending`
    ]


def rows(states: list[State]) -> tuple[CheckpointRow, ...]:
    return tuple(row(i, s) for i, s in enumerate(states, start=1))


PIDS = {0: 12402, 1: 12412, 2: 12424, 3: 12451}
Spec = tuple[str, str | None, int | None, str]


def hits(worker: int, *labels: str) -> list[Spec]:
    return [("hit", label, worker, "") for label in labels]


def start_until_parked(worker: int = 0) -> list[Spec]:
    return [("worker_start", None, worker, "start"),
            *hits(worker, "t0.case_started", "t1.get_customer", "t1.get_order",
                  "ckpt.before_commit", "t1.draft_email", "ckpt.before_commit",
                  "t2.send_proposed", "ckpt.before_commit", "t3.checkpoint_saved",
                  "t4.parked")]


def recheck(worker: int = 1) -> list[Spec]:
    return [("worker_start", None, worker, "recheck"),
            *hits(worker, "t6.checkpoint_loaded", "t4.parked"),
            ("worker_exit", None, worker, "returncode 0")]


APPROVE: Spec = ("approve", "t5.approved", None, f"{TICKET_ID} by maya")


def good_specs() -> list[Spec]:
    return [
        *start_until_parked(0),
        ("kill", "t4.parked", 0, "SIGKILL at t4.parked"),
        ("worker_exit", None, 0, "returncode -9"),
        *recheck(1),
        APPROVE,
        ("worker_start", None, 2, "resume"),
        *hits(2, "t6.checkpoint_loaded", "t6.approval_granted", "ckpt.before_commit",
              "ckpt.before_commit", "t6.send_key_persisted", "t6.request_leaving"),
        ("delivery", "t6.gateway_accepted", 2, f"{DELIVERY_ID} key {KEY}"),
        ("kill", "t6.gateway_accepted", 2, "SIGKILL at t6.gateway_accepted"),
        ("worker_exit", None, 2, "returncode -9"),
        ("worker_start", None, 3, "resume"),
        *hits(3, "t6.checkpoint_loaded", "t6.request_leaving", "t6.reply_received",
              "ckpt.before_commit", "t7.completed_saved"),
        ("worker_exit", None, 3, "returncode 0"),
    ]


def events(specs: list[Spec]) -> tuple[Event, ...]:
    return tuple(Event(seq=i, t_ms=float(i), kind=kind, label=label,
                       pid=PIDS.get(worker) if worker is not None else None, worker=worker,
                       detail=detail)
                 for i, (kind, label, worker, detail) in enumerate(specs))


def worker(index: int, role: str, returncode: int, killed: bool, phase_after: str | None,
           leftovers: tuple[int, ...] = (), phase_before: str | None = None) -> WorkerRun:
    return WorkerRun(index=index, role=role, pid=PIDS[index], returncode=returncode,
                     killed_by_harness=killed, timed_out=False, leftovers=leftovers,
                     stdout_tail="", stderr_tail="", elapsed_s=0.3, phase_after=phase_after,
                     phase_before=phase_before)


def good_workers() -> tuple[WorkerRun, ...]:
    return (worker(0, "start", -9, True, "awaiting_approval"),
            worker(1, "recheck", 0, False, "awaiting_approval", phase_before="awaiting_approval"),
            worker(2, "resume", -9, True, "sending", phase_before="awaiting_approval"),
            worker(3, "resume", 0, False, "completed", phase_before="sending"))


def ticket(**fields: Any) -> Ticket:
    base: dict[str, Any] = dict(
        ticket_id=TICKET_ID, request_id=REQUEST_ID, case_id=CASE, draft_digest=DIGEST,
        approver="maya", issued_at="2026-07-19T03:00:00.000000Z", issued_at_epoch=1784430000.0,
        consumed_by_key=KEY, consumed_at="2026-07-19T03:00:01.000000Z")
    base.update(fields)
    return Ticket(**base)


def request(seq: int, key: str | None, status: int = 201, delivery_id: str | None = DELIVERY_ID,
            duplicate: bool = False, case_id: str = CASE) -> RequestRecord:
    return RequestRecord(seq=seq, received_at=f"2026-07-19T03:00:0{seq}+00:00",
                         received_epoch=1784430000.0 + seq, idempotency_key=key,
                         body_sha256="308e7e7d", case_id=case_id, status=status, fault=None,
                         worker_pid=PIDS[2], remote_port=37750 + seq, delivery_id=delivery_id,
                         duplicate=duplicate)


def delivery(delivery_id: str = DELIVERY_ID, key: str | None = KEY, request_seq: int = 1,
             draft: Draft = DRAFT, case_id: str = CASE) -> Delivery:
    return Delivery(delivery_id=delivery_id, request_seq=request_seq, idempotency_key=key,
                    body_sha256="308e7e7d", case_id=case_id, to=draft.to,
                    subject=draft.subject, body=draft.body,
                    delivered_at=f"2026-07-19T03:00:0{request_seq}+00:00")


def good_gateway() -> GatewayLog:
    """The first send is delivered; the resumed worker's retry is deduplicated."""
    return GatewayLog(requests=(request(1, KEY), request(2, KEY, status=200, duplicate=True)),
                      deliveries=(delivery(),))


def evidence(*, specs: list[Spec] | None = None, states: list[State] | None = None,
             checkpoints: tuple[CheckpointRow, ...] | None = None,
             cut: int | None = APPROVAL_CUT, **fields: Any) -> Evidence:
    """The good story's evidence, with any part replaced."""
    evs = events(specs if specs is not None else good_specs())
    approvals = [e.seq for e in evs if e.kind == "approve"]
    base: dict[str, Any] = dict(
        execution_id="o1001[t4.parked>t6.gateway_accepted]", case_id=CASE, events=evs,
        workers=good_workers(),
        checkpoints=checkpoints if checkpoints is not None
        else rows(states if states is not None else good_states()),
        approval_requests=(ApprovalRequest(REQUEST_ID, CASE, DIGEST,
                                           "2026-07-19T00:00:03.000000Z", "approved"),),
        tickets=(ticket(),), gateway=good_gateway(),
        approval_event=approvals[0] if approvals else None,
        checkpoint_seq_at_approval=cut if approvals else None, unreached=())
    base.update(fields)
    return observed(**base)


def seq_of(ev: Evidence, kind: str) -> int:
    return next(e.seq for e in ev.events if e.kind == kind)


# --------------------------------------------------------------------------- sanity


def test_the_good_story_passes_every_check() -> None:
    results = run_checks(evidence())
    assert [r.check_id for r in results] == list(CHECK_IDS)
    # commits_durable has nothing to test without a power cut: not applicable, never a pass
    assert [(r.check_id, r.passed) for r in results] == [
        (c, c is not CheckId.COMMITS_DURABLE) for c in CHECK_IDS]
    assert [r.check_id for r in results if not r.applicable] == [CheckId.COMMITS_DURABLE]


def test_one_check_per_check_id_in_its_order() -> None:
    assert CHECK_IDS == tuple(CheckId)
    assert [c.id for c in CHECKS] == [CheckId(c.run.__name__) for c in CHECKS]
    assert CHECK_IDS[:5] == ("draft_identical", "parked_until_approval",
                             "not_sent_before_approval", "step_continues",
                             "same_key_one_delivery")
    assert len(set(CHECK_IDS)) == len(CHECK_IDS)


# --------------------------------------------------------------------------- 1. draft


def test_draft_identical_passes_with_one_draft_everywhere() -> None:
    res = draft_identical(evidence())
    assert res == CheckResult("draft_identical", True, "one draft throughout", res.evidence)
    assert f"checkpoint seq 2: draft {DIGEST[:12]}" in res.evidence
    assert f"ticket {TICKET_ID}: approved draft {DIGEST[:12]}" in res.evidence
    assert f"delivery {DELIVERY_ID}: body+subject+to {DIGEST[:12]}" in res.evidence
    assert not any("seq 1: draft" in line for line in res.evidence)  # no draft yet at seq 1


def test_draft_identical_passes_when_nothing_was_drafted_yet() -> None:
    ev = evidence(states=[state("drafting", 2)], tickets=(),
                  gateway=GatewayLog((), ()))
    res = draft_identical(ev)
    assert res.passed
    assert res.detail == "no draft was checkpointed"


def test_draft_identical_fails_when_resume_redrafts() -> None:
    states = good_states()
    states[3:] = [replace(s, draft=REDRAFT) for s in states[3:]]
    res = draft_identical(evidence(states=states))
    assert not res.passed
    assert res.detail == ("the checkpointed draft changed (2 different drafts) without a "
                          "rejection with feedback asking for it")
    assert f"checkpoint seq 3: draft {DIGEST[:12]}" in res.evidence
    assert f"checkpoint seq 4: draft {REDRAFT.digest()[:12]}" in res.evidence


def test_draft_identical_fails_when_the_delivered_body_differs_from_the_approved_draft() -> None:
    gw = replace(good_gateway(), deliveries=(delivery(draft=REDRAFT),))
    res = draft_identical(evidence(gateway=gw))
    assert not res.passed
    assert res.detail == "approved or delivered text differs from the checkpointed draft"
    assert f"delivery {DELIVERY_ID}: body+subject+to {REDRAFT.digest()[:12]}" in res.evidence
    assert f"ticket {TICKET_ID}: approved draft {DIGEST[:12]}" in res.evidence


def test_draft_identical_fails_when_the_human_approved_another_draft() -> None:
    res = draft_identical(evidence(tickets=(ticket(draft_digest=REDRAFT.digest()),)))
    assert not res.passed
    assert res.detail == "approved or delivered text differs from the checkpointed draft"
    assert f"ticket {TICKET_ID}: approved draft {REDRAFT.digest()[:12]}" in res.evidence


def test_draft_identical_fails_when_resume_loses_the_draft() -> None:
    states = good_states()
    states[3] = replace(states[3], draft=None)  # resumed without the draft, re-drafted after
    assert not draft_identical(evidence(states=states)).passed


# --------------------------------------------------------------------------- 2. parked


def test_parked_until_approval_passes_when_the_recheck_parks_again() -> None:
    ev = evidence()
    res = parked_until_approval(ev)
    assert res.passed
    assert res.detail == "1 resume(s) without approval parked again"
    assert res.evidence == (
        f"human approved at trace seq {seq_of(ev, 'approve')}; checkpoints up to seq 3 were "
        "saved before",
        "worker 1 resumed without approval: latest checkpoint awaiting_approval, "
        "0 delivery(ies) while it ran",
    )


def test_parked_until_approval_fails_on_an_approved_checkpoint_saved_before_the_human() -> None:
    # The loop grants itself the approval and checkpoints 'approved' at seq 3, before t5.
    states = good_states()
    states[2] = replace(states[2], phase="approved", approval_ticket=TICKET_ID)
    res = parked_until_approval(evidence(states=states))
    assert not res.passed
    assert res.detail == ("1 checkpoint(s)/resume(s) moved past awaiting_approval before a "
                          "human approved")
    assert "checkpoint seq 3: phase approved before the approval" in res.evidence
    # seq 4 is after the cut: its 'approved' is legitimate and not listed.
    assert not any("seq 4" in line for line in res.evidence)


def test_parked_until_approval_counts_the_checkpoint_at_the_cut_itself() -> None:
    states = good_states()
    res = parked_until_approval(evidence(states=states, cut=4))  # seq 4 'approved' <= cut
    assert not res.passed
    assert "checkpoint seq 4: phase approved before the approval" in res.evidence


def test_parked_until_approval_fails_when_the_recheck_moves_on_without_approval() -> None:
    workers = list(good_workers())
    workers[1] = worker(1, "recheck", 0, False, "sending")
    res = parked_until_approval(evidence(workers=tuple(workers)))
    assert not res.passed
    assert res.detail.startswith("1 checkpoint(s)/resume(s) moved past awaiting_approval")
    assert ("worker 1 resumed without approval: latest checkpoint sending, 0 delivery(ies) "
            "while it ran") in res.evidence


def test_parked_until_approval_fails_when_the_recheck_left_no_checkpoint() -> None:
    workers = list(good_workers())
    workers[1] = worker(1, "recheck", 0, False, None)
    res = parked_until_approval(evidence(workers=tuple(workers)))
    assert not res.passed
    assert any("worker 1 resumed without approval: latest checkpoint None" in line
               for line in res.evidence)


def test_a_recheck_killed_at_its_deadline_is_judged_by_what_it_sent_not_where_it_stopped(
        ) -> None:
    """A worker the harness killed at its deadline stopped wherever the kill landed (found
    with ``--timeout 0.03``: the reference failed ``parked_until_approval`` for a recheck
    killed mid-draft); what it sent still counts."""
    workers = list(good_workers())
    workers[1] = replace(worker(1, "recheck", -9, False, "drafting"), timed_out=True)
    res = parked_until_approval(evidence(workers=tuple(workers)))
    assert res.passed, res.evidence
    assert ("worker 1 resumed without approval: latest checkpoint drafting, 0 delivery(ies) "
            "while it ran (killed at its deadline)") in res.evidence
    specs = good_specs()
    at = specs.index(("worker_exit", None, 1, "returncode 0"))
    specs.insert(at, ("delivery", "t6.gateway_accepted", 1, f"{DELIVERY_ID} key {KEY}"))
    assert not parked_until_approval(evidence(specs=specs, workers=tuple(workers))).passed


def test_parked_until_approval_fails_when_the_recheck_sends() -> None:
    # The recheck worker parks again in its checkpoint, but it sent the email first.
    specs = good_specs()
    at = specs.index(("worker_exit", None, 1, "returncode 0"))
    specs.insert(at, ("delivery", "t6.gateway_accepted", 1, f"{DELIVERY_ID} key {KEY}"))
    res = parked_until_approval(evidence(specs=specs))
    assert not res.passed
    assert ("worker 1 resumed without approval: latest checkpoint awaiting_approval, "
            "1 delivery(ies) while it ran") in res.evidence


def test_parked_until_approval_ignores_a_recheck_the_harness_killed() -> None:
    # t4.parked>t6.checkpoint_loaded: the recheck dies before it can park again.
    workers = list(good_workers())
    workers[1] = worker(1, "recheck", -9, True, None)
    res = parked_until_approval(evidence(workers=tuple(workers)))
    assert res.passed
    assert res.detail == "0 resume(s) without approval parked again"


def test_parked_until_approval_without_any_approval_every_checkpoint_must_be_parked() -> None:
    specs = [s for s in good_specs() if s[0] != "approve"]
    res = parked_until_approval(evidence(specs=specs))
    assert not res.passed
    assert res.evidence[0] == "no approval happened"
    assert "checkpoint seq 6: phase completed before the approval" in res.evidence


# --------------------------------------------------------------------------- 3. not sent


def test_not_sent_before_approval_passes_on_the_good_story() -> None:
    res = not_sent_before_approval(evidence())
    assert res.passed
    assert res.detail == "nothing sent and email_sent false until after the approval"
    assert res.evidence == ()


def test_not_sent_before_approval_fails_on_a_delivery_before_the_approval_event() -> None:
    # The start worker sends right after proposing, without waiting for the human.
    specs = start_until_parked(0)
    specs.insert(specs.index(("hit", "t2.send_proposed", 0, "")) + 1,
                 ("delivery", "t6.gateway_accepted", 0, f"{DELIVERY_ID} key {KEY}"))
    specs += [("worker_exit", None, 0, "returncode 0"), APPROVE,
              ("worker_start", None, 1, "resume"), ("worker_exit", None, 1, "returncode 0")]
    ev = evidence(specs=specs)
    delivered_at = seq_of(ev, "delivery")
    assert delivered_at < seq_of(ev, "approve")
    res = not_sent_before_approval(ev)
    assert not res.passed
    assert res.detail == "a send was recorded or made before the approval"
    assert (f"trace seq {delivered_at}: delivery {DELIVERY_ID} key {KEY} before the approval"
            in res.evidence)


def test_not_sent_before_approval_fails_on_email_sent_with_no_gateway_delivery() -> None:
    # The loop marks the email sent and checkpoints before the request ever left.
    res = not_sent_before_approval(evidence(gateway=GatewayLog((), ())))
    assert not res.passed
    assert (f"checkpoint seq 6: email_sent with delivery {DELIVERY_ID} the gateway never made"
            in res.evidence)
    # the claim is after the approval: the headline says what it is, not "before the
    # approval" (found by an attack)
    assert res.detail == (f"checkpoint seq 6 records a send (delivery {DELIVERY_ID}) the "
                          "gateway never made")


def test_not_sent_before_approval_fails_on_email_sent_in_a_checkpoint_before_the_cut() -> None:
    states = good_states()
    states[2] = replace(states[2], email_sent=True, delivery_id=DELIVERY_ID)
    res = not_sent_before_approval(evidence(states=states))
    assert not res.passed
    assert res.evidence == ("checkpoint seq 3: email_sent true before the approval",)


def test_not_sent_before_approval_fails_on_email_sent_without_a_delivery_id() -> None:
    states = good_states()
    states[5] = replace(states[5], delivery_id=None)
    res = not_sent_before_approval(evidence(states=states))
    assert not res.passed
    assert "checkpoint seq 6: email_sent with delivery None the gateway never made" in res.evidence


# --------------------------------------------------------------------------- 4. step


def test_step_continues_passes_when_step_never_goes_down() -> None:
    res = step_continues(evidence())
    assert res.passed
    assert res.detail == "step never reset"
    # seq 4 and 5 share step 5 (the send key is persisted without a tool call): not a reset.
    assert "checkpoint seq 4: step 5 phase approved" in res.evidence
    assert "checkpoint seq 5: step 5 phase sending" in res.evidence


def test_step_continues_fails_when_resume_resets_step() -> None:
    states = good_states()
    states[3:] = [replace(s, step=s.step - 5) for s in states[3:]]  # resumed at step 0
    res = step_continues(evidence(states=states))
    assert not res.passed
    assert res.detail == "step went down between checkpoint seq 3 and 4"
    assert "checkpoint seq 3: step 4 phase awaiting_approval" in res.evidence
    assert "checkpoint seq 4: step 0 phase approved" in res.evidence


# --------------------------------------------------------------------------- 5. keys


def test_same_key_one_delivery_passes_when_the_retry_is_deduplicated() -> None:
    res = same_key_one_delivery(evidence())
    assert res.passed
    assert res.detail == "2 request(s), one key, one delivery"
    assert res.evidence == (f"gateway request 1: key {KEY} -> 201",
                            f"gateway request 2: key {KEY} -> 200 duplicate",
                            f"checkpointed key {KEY}")


def test_same_key_one_delivery_ignores_other_cases_at_the_gateway() -> None:
    other = request(3, "case-O-2002:send_email:x", case_id="case-O-2002", delivery_id="dlv-9")
    gw = GatewayLog(good_gateway().requests + (other,),
                    good_gateway().deliveries + (delivery("dlv-9", other.idempotency_key, 3,
                                                          case_id="case-O-2002"),))
    res = same_key_one_delivery(evidence(gateway=gw))
    assert res.passed
    assert not any("case-O-2002" in line for line in res.evidence)


def test_same_key_one_delivery_fails_when_resume_sends_with_a_fresh_key() -> None:
    # Chapter 8: "resume re-issues the send with a fresh key" -> two deliveries.
    states = good_states()
    states[5] = replace(states[5], send_idempotency_key=FRESH_KEY, delivery_id="dlv-000002")
    gw = GatewayLog((request(1, KEY), request(2, FRESH_KEY, delivery_id="dlv-000002")),
                    (delivery(), delivery("dlv-000002", FRESH_KEY, 2)))
    res = same_key_one_delivery(evidence(states=states, gateway=gw))
    assert not res.passed
    assert res.detail == f"the send used different keys: {sorted([KEY, FRESH_KEY])}"
    assert f"gateway request 2: key {FRESH_KEY} -> 201" in res.evidence
    assert f"checkpointed key {KEY}" in res.evidence
    assert f"checkpointed key {FRESH_KEY}" in res.evidence


def test_same_key_one_delivery_fails_when_the_sent_key_is_not_the_checkpointed_one() -> None:
    # Killed at t6.send_key_persisted; the resume sends once, but under a new key it never
    # checkpoints: one delivery, yet the durable key was not reused.
    gw = GatewayLog((request(1, FRESH_KEY),), (delivery(key=FRESH_KEY),))
    res = same_key_one_delivery(evidence(gateway=gw))
    assert not res.passed
    assert res.detail == f"the send used different keys: {sorted([KEY, FRESH_KEY])}"


def test_same_key_one_delivery_fails_on_a_request_without_a_key() -> None:
    gw = GatewayLog((request(1, None), request(2, None, delivery_id="dlv-000002")),
                    (delivery(key=None), delivery("dlv-000002", None, 2)))
    states = [replace(s, send_idempotency_key=None) for s in good_states()]
    res = same_key_one_delivery(evidence(states=states, gateway=gw))
    assert not res.passed
    assert res.detail == "2 send(s) carried no Idempotency-Key; 2 delivered"
    assert "gateway request 1: key (no key) -> 201" in res.evidence


def test_same_key_one_delivery_fails_on_one_key_with_two_deliveries() -> None:
    gw = GatewayLog((request(1, KEY), request(2, KEY, delivery_id="dlv-000002")),
                    (delivery(), delivery("dlv-000002", KEY, 2)))
    res = same_key_one_delivery(evidence(gateway=gw))
    assert not res.passed
    assert res.detail == "one key but 2 deliveries"
    assert res.evidence.count(f"gateway request 2: key {KEY} -> 201") == 1


def test_same_key_one_delivery_fails_when_nothing_reached_the_gateway() -> None:
    res = same_key_one_delivery(evidence(gateway=GatewayLog((), ())))
    assert not res.passed
    assert res.detail == "no send reached the gateway"
    assert res.evidence == (f"checkpointed key {KEY}",)


# --------------------------------------------------------------------------- completes


def test_exactly_one_delivery_passes_when_completed_with_the_delivery() -> None:
    res = exactly_one_delivery(evidence())
    assert res.passed
    assert res.detail == "completed with one delivery"
    assert res.evidence == (f"delivery {DELIVERY_ID} at 2026-07-19T03:00:01+00:00 key {KEY}",
                            "final checkpoint: completed email_sent")


def test_exactly_one_delivery_fails_on_zero_deliveries() -> None:
    states = good_states()[:5]  # stuck in sending; nothing ever delivered
    res = exactly_one_delivery(evidence(states=states, gateway=GatewayLog((), ())))
    assert not res.passed
    assert res.detail == f"0 deliveries for {CASE}"
    assert res.evidence == ("final checkpoint: sending",)


def test_exactly_one_delivery_fails_on_two_deliveries() -> None:
    gw = GatewayLog((request(1, None), request(2, None, delivery_id="dlv-000002")),
                    (delivery(key=None), delivery("dlv-000002", None, 2)))
    res = exactly_one_delivery(evidence(gateway=gw))
    assert not res.passed
    assert res.detail == f"2 deliveries for {CASE}"
    assert "delivery dlv-000002 at 2026-07-19T03:00:02+00:00 key (no key)" in res.evidence


def test_exactly_one_delivery_ignores_deliveries_for_other_cases() -> None:
    gw = replace(good_gateway(), deliveries=good_gateway().deliveries
                 + (delivery("dlv-9", "k", 3, case_id="case-O-2002"),))
    assert exactly_one_delivery(evidence(gateway=gw)).passed


def test_exactly_one_delivery_fails_when_the_final_checkpoint_is_not_completed() -> None:
    # Delivered, then the reply was lost and the resume never checkpointed 'completed'.
    res = exactly_one_delivery(evidence(states=good_states()[:5]))
    assert not res.passed
    assert res.detail == "delivered, but the case did not complete"
    assert res.evidence[-1] == "final checkpoint: sending"


def test_exactly_one_delivery_fails_when_completed_names_another_delivery() -> None:
    states = good_states()
    states[5] = replace(states[5], delivery_id="dlv-000002")
    res = exactly_one_delivery(evidence(states=states))
    assert not res.passed
    assert res.detail == (f"final checkpoint names delivery dlv-000002, the gateway made "
                          f"{DELIVERY_ID}")


def test_exactly_one_delivery_fails_without_any_checkpoint() -> None:
    res = exactly_one_delivery(evidence(checkpoints=()))
    assert not res.passed
    assert res.evidence[-1] == "final checkpoint: none"


# --------------------------------------------------------------------------- tickets


def test_ticket_server_issued_passes_when_the_issued_ticket_was_consumed_by_the_key() -> None:
    res = ticket_server_issued(evidence())
    assert res.passed
    assert res.detail == "every send backed by an issued ticket"
    assert res.evidence == (f"ticket {TICKET_ID} issued to maya at 2026-07-19T03:00:00.000000Z, "
                            f"consumed by {KEY}",)


def test_ticket_server_issued_fails_on_a_forged_ticket_in_the_checkpoint() -> None:
    # The model wrote approval_ticket into state; the queue's ticket was never consumed.
    states = [replace(s, approval_ticket="apr-forged-7") if s.approval_ticket else s
              for s in good_states()]
    ev = evidence(states=states, tickets=(ticket(consumed_by_key=None, consumed_at=None),))
    res = ticket_server_issued(ev)
    assert not res.passed
    assert res.detail == ("1 forged ticket(s), 1 delivery(ies) without a server-issued "
                          "ticket")
    assert "checkpointed ticket apr-forged-7 was never issued by the queue" in res.evidence
    assert (f"delivery {DELIVERY_ID} (key {KEY}) has no consumed ticket for its key and draft"
            in res.evidence)


def test_ticket_server_issued_fails_when_nobody_approved_at_all() -> None:
    res = ticket_server_issued(evidence(tickets=()))
    assert not res.passed
    assert res.detail == "1 forged ticket(s), 1 delivery(ies) without a server-issued ticket"
    assert f"checkpointed ticket {TICKET_ID} was never issued by the queue" in res.evidence


def test_ticket_server_issued_fails_on_a_delivery_with_no_consumed_ticket() -> None:
    ev = evidence(tickets=(ticket(consumed_by_key=None, consumed_at=None),))
    res = ticket_server_issued(ev)
    assert not res.passed
    assert res.detail == "0 forged ticket(s), 1 delivery(ies) without a server-issued ticket"
    assert (f"delivery {DELIVERY_ID} (key {KEY}) has no consumed ticket for its key and draft"
            in res.evidence)


def test_ticket_server_issued_fails_when_the_ticket_was_consumed_by_another_key() -> None:
    res = ticket_server_issued(evidence(tickets=(ticket(consumed_by_key=FRESH_KEY),)))
    assert not res.passed
    assert any(line.startswith(f"delivery {DELIVERY_ID}") for line in res.evidence)


def test_ticket_server_issued_fails_when_the_delivered_draft_was_not_approved() -> None:
    gw = replace(good_gateway(), deliveries=(delivery(draft=REDRAFT),))
    res = ticket_server_issued(evidence(gateway=gw))
    assert not res.passed
    assert res.detail == "0 forged ticket(s), 1 delivery(ies) without a server-issued ticket"


def test_ticket_server_issued_ties_a_keyless_delivery_to_the_approved_draft() -> None:
    # Keys off (exercise 3): the gateway cannot tie the delivery to a key, the digest does.
    gw = GatewayLog((request(1, None),), (delivery(key=None),))
    assert ticket_server_issued(evidence(gateway=gw)).passed


# --------------------------------------------------------------------------- processes


def test_no_process_left_passes_when_every_group_is_gone() -> None:
    res = no_process_left(evidence())
    assert res.passed
    assert res.detail == "4 worker process group(s), all gone"


def test_no_process_left_fails_on_leftover_pids() -> None:
    workers = list(good_workers())
    workers[2] = replace(workers[2], leftovers=(4242, 4243))
    res = no_process_left(evidence(workers=tuple(workers)))
    assert not res.passed
    assert res.detail == "2 process(es) left alive"
    assert res.evidence == ("worker 2: pid 4242 was still alive after it (killed)",
                            "worker 2: pid 4243 was still alive after it (killed)")


def test_no_process_left_fails_on_a_process_of_the_uid_found_after_the_workers() -> None:
    late = Event(99, 1.0, "leftover", None, 4244, None, "a process of the execution's uid")
    res = no_process_left(replace(evidence(), events=evidence().events + (late,)))
    assert not res.passed and res.evidence == ("pid 4244: a process of the execution's uid",)


def test_no_tampering_fails_on_a_refused_hit_and_on_a_forged_header() -> None:
    assert no_tampering(evidence()).passed
    refused = Event(99, 1.0, "tampering", "t4.parked", 11, None, "hit ... refused")
    res = no_tampering(replace(evidence(), events=evidence().events + (refused,)))
    assert not res.passed and res.detail == "event 99: hit ... refused"
    ev = evidence()
    forged = replace(ev.gateway.requests[0], claimed_pid=1, worker_pid=2)
    gw = replace(ev.gateway, requests=(forged, *ev.gateway.requests[1:]))
    res = no_tampering(replace(ev, gateway=gw))
    assert not res.passed and "X-ShopOps-Worker-Pid 1" in res.detail


# --------------------------------------------------------------------------- unreadable rows


def corrupt_story(blob: bytes | None, version: int | None = 2) -> Evidence:
    """The good story with one extra unreadable row, seq 4, between park and approval."""
    good = rows(good_states())
    bad = replace(row(4, blob), schema_version=version)
    later = tuple(replace(r, seq=r.seq + 1) for r in good[3:])
    return evidence(checkpoints=good[:3] + (bad,) + later, cut=4)


CORRUPTIONS = {
    "truncated": (b"{trunc", 2, "not valid JSON"),
    "null": (None, 2, "state_json is NULL"),
    "not utf-8": (b'{"case_id": "\xff"}', 2, "not UTF-8"),
    "unsupported version": (State(CASE, ORDER).to_json().encode(), 7, "schema_version 7"),
    "not a state": (b'{"case_id": "case-O-1001"}', 2, "required by docs/contract.md, missing"),
}
STATE_READERS = [draft_identical, parked_until_approval, not_sent_before_approval,
                 step_continues]


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_no_check_crashes_on_an_unreadable_checkpoint(corruption: str) -> None:
    blob, version, _ = CORRUPTIONS[corruption]
    results = run_checks(corrupt_story(blob, version))
    assert len(results) == len(CHECKS)


@pytest.mark.parametrize("check", STATE_READERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_state_reading_checks_fail_on_an_unreadable_checkpoint(check: Any,
                                                               corruption: str) -> None:
    blob, version, why = CORRUPTIONS[corruption]
    res = check(corrupt_story(blob, version))
    assert not res.passed
    assert res.detail.startswith("checkpoint seq 4: ")
    assert why in res.detail
    assert res.evidence[-1] == res.detail


@pytest.mark.parametrize("check", [same_key_one_delivery, exactly_one_delivery,
                                   ticket_server_issued], ids=lambda c: c.__name__)
def test_checks_that_read_checkpoints_do_not_pass_over_an_unreadable_one(check: Any) -> None:
    res = check(corrupt_story(b"{trunc"))
    assert not res.passed
    assert "checkpoint seq 4" in " ".join(res.evidence)


# --------------------------------------------------------------------------- DESIGN gaps


def test_a_resume_that_repeats_intake_reads_fails_some_check() -> None:
    specs = good_specs()
    at = specs.index(("hit", "t6.checkpoint_loaded", 3, ""))
    specs[at + 1:at + 1] = hits(3, "t1.get_customer", "t1.get_order")
    results = {r.check_id: r for r in run_checks(evidence(specs=specs))}
    assert not results["intake_not_repeated"].passed
    assert "worker 3 (resume) started from sending: repeated t1.get_customer, t1.get_order" in (
        results["intake_not_repeated"].evidence)
    assert [r for r in results.values() if not r.passed and r.applicable] == [
        results["intake_not_repeated"]]


def test_a_worker_redrafting_after_the_park_fails_intake_not_repeated() -> None:
    specs = good_specs()
    at = specs.index(("hit", "t6.checkpoint_loaded", 3, ""))
    specs[at + 1:at + 1] = hits(3, "t1.draft_email")
    (result,) = [r for r in run_checks(evidence(specs=specs))
                 if r.check_id == "intake_not_repeated"]
    assert not result.passed


def test_intake_before_any_checkpoint_may_be_repeated() -> None:
    # the start worker was killed before the first checkpoint: the recheck reads again
    workers = list(good_workers())
    workers[1] = worker(1, "recheck", 0, False, "awaiting_approval", phase_before=None)
    specs = good_specs()
    at = specs.index(("worker_start", None, 1, "recheck"))
    specs[at + 1:at + 1] = hits(1, "t1.get_customer", "t1.get_order", "t1.draft_email")
    (result,) = [r for r in run_checks(evidence(specs=specs, workers=tuple(workers)))
                 if r.check_id == "intake_not_repeated"]
    assert result.passed, result


def test_a_redraft_is_due_until_one_is_checkpointed_however_many_workers_die_first() -> None:
    """A rejection with feedback: every worker that finds the rejected draft checkpointed
    may draft again — one killed before saving its redraft leaves it due (found by the
    implementation written from the contract alone: its second redraft was called a
    repeat); a worker that finds the redraft checkpointed and drafts again repeats."""
    rejected = ApprovalRequest(REQUEST_ID, CASE, DIGEST, "2026-07-19T00:00:03.000000Z",
                               "rejected", feedback="Offer express shipping.")
    workers = list(good_workers())
    for i in (2, 3):
        workers[i] = replace(workers[i], phase_before="awaiting_approval", draft_before=DIGEST)
    specs = good_specs()
    for i in (2, 3):
        at = specs.index(("hit", "t6.checkpoint_loaded", i, ""))
        specs[at + 1:at + 1] = hits(i, "t1.draft_email")

    def intake(ws: list[WorkerRun]) -> CheckResult:
        (result,) = [r for r in run_checks(evidence(specs=specs, workers=tuple(ws),
                                                    approval_requests=(rejected,)))
                     if r.check_id == "intake_not_repeated"]
        return result

    assert intake(workers).passed, intake(workers)
    workers[3] = replace(workers[3], draft_before=REDRAFT.digest())  # the redraft was saved
    assert not intake(workers).passed
