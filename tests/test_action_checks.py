"""The per-action check (``harness.judge.checks.actions.per_action``): it passes on the good story
of ``test_checks`` and fails on the evidence realistic broken loops leave behind — a send
that "polishes" the approved draft on the way out, a rejected draft sent anyway, a resumed
worker that sends again under a fresh key, a case that completes without sending, a case
that ends rejected after a send — each with the evidence lines that say why."""

from __future__ import annotations

from dataclasses import replace

from test_checks import (
    CASE,
    DIGEST,
    DRAFT,
    FRESH_KEY,
    REDRAFT,
    REQUEST_ID,
    delivery,
    evidence,
    good_states,
    request,
    row,
    ticket,
)

from harness.judge.checks.actions import ACTIONS, CHECK_ID, per_action
from harness.judge.checks.registry import CHECK_IDS, needs, run_checks
from harness.model import EvidenceSource
from harness.services.gateway import GatewayLog
from shopops.approvals import ApprovalRequest
from shopops.state import State


def test_the_check_is_registered_with_what_it_reads() -> None:
    assert CHECK_ID in CHECK_IDS
    assert needs(CHECK_ID) == {EvidenceSource.CHECKPOINTS, EvidenceSource.TARGET,
                               EvidenceSource.APPROVALS, EvidenceSource.GATEWAY}
    # send_email is the default gate; the order note is the second gated action
    assert [a.gate for a in ACTIONS] == ["send_email", "add_order_note"]


def test_the_good_story_passes() -> None:
    res = per_action(evidence())
    assert res.passed, res
    assert res.evidence[0].startswith("send_email: 1 delivery(ies); 1 approved and 0 rejected")
    assert {r.check_id: r.passed for r in run_checks(evidence())}[CHECK_ID]


def test_a_send_that_edits_the_approved_body_fails() -> None:
    """The loop appends a line to the approved draft when it sends: one delivery, one key,
    but not what the human approved."""
    gw = GatewayLog((request(1, "k"),), (delivery(draft=REDRAFT),))
    res = per_action(evidence(gateway=gw))
    assert not res.passed
    assert "sent content no human approved" in res.detail
    assert REDRAFT.digest()[:12] in res.detail and DIGEST[:12] in res.detail


def test_a_second_delivery_under_a_fresh_key_fails() -> None:
    gw = GatewayLog((request(1, "k"), request(2, FRESH_KEY, delivery_id="dlv-000002")),
                    (delivery(), delivery("dlv-000002", FRESH_KEY, request_seq=2)))
    res = per_action(evidence(gateway=gw))
    assert not res.passed
    assert res.detail == "send_email: 2 deliveries (dlv-000001, dlv-000002); at most one is " \
                         "allowed"


def test_a_rejected_draft_sent_anyway_fails() -> None:
    rejected = (ApprovalRequest(REQUEST_ID, CASE, DIGEST, "t", "rejected", None),)
    res = per_action(evidence(approval_requests=rejected, tickets=()))
    assert not res.passed
    assert "sent content a human rejected" in res.detail


def test_a_case_that_ends_rejected_after_a_send_fails() -> None:
    """The delivered draft was approved, but the final checkpoint says rejected."""
    states = good_states()[:5] + [replace(good_states()[2], phase="rejected", step=6,
                                          done=True)]
    res = per_action(evidence(states=states))
    assert not res.passed
    assert "send_email: the case ended rejected but 1 delivery(ies) were made" in res.evidence


def test_a_case_completed_without_a_delivery_fails() -> None:
    res = per_action(evidence(gateway=GatewayLog((), ())))
    assert not res.passed
    assert res.detail == "send_email: the case completed with no delivery"


def test_nothing_sent_for_a_rejection_passes() -> None:
    rejected = (ApprovalRequest(REQUEST_ID, CASE, DIGEST, "t", "rejected", None),)
    states = good_states()[:3] + [replace(good_states()[2], phase="rejected", step=5,
                                          done=True)]
    res = per_action(evidence(states=states, approval_requests=rejected, tickets=(),
                              gateway=GatewayLog((), ())))
    assert res.passed, res


def test_a_parked_case_with_nothing_sent_passes() -> None:
    res = per_action(evidence(states=good_states()[:3], tickets=(ticket(consumed_by_key=None),),
                              gateway=GatewayLog((), ())))
    assert res.passed, res


def test_an_unreadable_checkpoint_is_never_a_pass() -> None:
    rows = (*(row(i, s) for i, s in enumerate(good_states(), start=1)), row(7, b"{not json"))
    res = per_action(evidence(checkpoints=rows))
    assert not res.passed
    assert res.detail.startswith("checkpoint seq 7:")


def test_the_approved_draft_is_the_one_compared() -> None:
    """A redraft after feedback is approved and sent: the earlier (rejected) digest does not
    count against it."""
    rejected = ApprovalRequest(REQUEST_ID, CASE, DIGEST, "t", "rejected", "add a P.S.")
    second = ApprovalRequest(f"req-{CASE}-{REDRAFT.digest()[:12]}", CASE, REDRAFT.digest(),
                             "t2", "approved")
    states: list[State] = [replace(s, draft=REDRAFT) if s.draft else s for s in good_states()]
    gw = GatewayLog((request(1, "k"),), (delivery(draft=REDRAFT),))
    res = per_action(evidence(states=states, approval_requests=(rejected, second),
                              tickets=(ticket(draft_digest=REDRAFT.digest()),), gateway=gw))
    assert res.passed, res
    assert DRAFT.digest() != REDRAFT.digest()
