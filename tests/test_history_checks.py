"""The checks over the whole history (``harness.judge.checks.history``): each passes on the good
story of ``test_checks`` and fails on the evidence a realistic broken loop leaves — a
worker that calls the gateway after completion, a stale worker rewriting a finished case, a
lease holder writing after a takeover, a rejected case parked forever, a case retried past
the maximum — with the evidence lines that say why."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from test_checks import (
    APPROVAL_CUT,
    CASE,
    DIGEST,
    DRAFT,
    PIDS,
    REQUEST_ID,
    Spec,
    events,
    evidence,
    good_gateway,
    good_specs,
    good_states,
    good_workers,
    request,
    row,
    rows,
    state,
    worker,
)

from harness.judge.checks.checklist import not_sent_before_approval, parked_until_approval
from harness.judge.checks.history import (
    attempts_bounded,
    history_not_replaced,
    lease_exclusive,
    no_request_after_done,
    phase_path,
    rejection_respected,
)
from harness.judge.checks.registry import CHECK_IDS, run_checks
from harness.model import Evidence, HistoryMark, LeaseSeen, rows_digest
from harness.reports.codec import decode, encode
from harness.services.gateway import GatewayLog
from shopops.approvals import ApprovalRequest
from shopops.checkpoint import CheckpointRow
from shopops.state import State

FEEDBACK = "Please offer free express shipping on the next order."
STALE_PID = 12999


def test_the_good_story_passes_the_history_checks() -> None:
    ev = evidence()
    results = {r.check_id: r for r in run_checks(ev)}
    for check in ("no_request_after_done", "phase_path", "lease_exclusive",
                  "rejection_respected", "attempts_bounded", "history_not_replaced"):
        assert check in CHECK_IDS
        assert results[check].passed, results[check]


# -- no request once done --------------------------------------------------------------------

def after_completion_worker() -> tuple[Any, ...]:
    late = replace(worker(3, "resume", 0, False, "completed", phase_before="completed"),
                   index=4, pid=STALE_PID)
    return (*good_workers(), late)


def test_a_deduplicated_request_after_completion_fails() -> None:
    gw = good_gateway()
    repeat = replace(request(3, gw.requests[0].idempotency_key, status=200, duplicate=True),
                     worker_pid=STALE_PID)
    ev = evidence(workers=after_completion_worker(),
                  gateway=GatewayLog(gw.requests + (repeat,), gw.deliveries))
    res = no_request_after_done(ev)
    assert not res.passed and ev.deliveries == 1  # delivery counting alone sees nothing
    assert res.detail == "1 gateway request(s) after the case was done"
    assert any("gateway request 3 (status 200) by worker 4, which started from a completed "
               "checkpoint" in line for line in res.evidence)


def test_a_request_breaking_both_rules_is_counted_once_in_the_headline() -> None:
    """Issue 26: a request by a worker that started from the completed checkpoint, made
    after that checkpoint in the trace, breaks two rules: the headline counts it once."""
    gw = good_gateway()
    repeat = replace(request(3, gw.requests[0].idempotency_key, status=200, duplicate=True),
                     worker_pid=STALE_PID)
    evs = events(good_specs())
    late = replace(evs[-1], seq=len(evs), kind="request", label=None, pid=STALE_PID,
                   worker=None, detail="status 200 duplicate", ref="3")
    ev = evidence(workers=after_completion_worker(), events=(*evs, late),
                  gateway=GatewayLog(gw.requests + (repeat,), gw.deliveries))
    res = no_request_after_done(ev)
    assert not res.passed
    assert sum("gateway request 3" in line for line in res.evidence) == 2  # both rules
    assert res.detail == "1 gateway request(s) after the case was done"


def test_a_stale_worker_sending_after_the_completed_checkpoint_fails() -> None:
    specs = [*good_specs(), ("request", None, 2, "status 200 duplicate")]
    evs = events(specs)
    evs = evs[:-1] + (replace(evs[-1], ref="3"),)
    res = no_request_after_done(evidence(events=evs))
    assert not res.passed
    assert any(f"gateway request 3 from worker 2 (pid {PIDS[2]}) after the completed "
               "checkpoint" in line for line in res.evidence)


def test_a_request_before_completion_is_fine() -> None:
    specs = good_specs()
    cut = next(i for i, s in enumerate(specs) if s[1] == "t7.completed_saved")
    specs.insert(cut, ("request", None, 3, "status 200 duplicate"))
    assert no_request_after_done(evidence(specs=specs)).passed


# -- the phase path --------------------------------------------------------------------------

def test_a_stale_write_after_completion_fails() -> None:
    states = good_states()
    states.append(states[4])  # a stale worker re-saves its "sending" state
    res = phase_path(evidence(states=states))
    assert not res.passed
    assert res.detail == "checkpoint seq 7 (sending) written after the terminal checkpoint seq 6"


def test_a_phase_moving_backwards_fails() -> None:
    states = good_states()
    states.insert(5, states[3])  # approved again after sending
    res = phase_path(evidence(states=states))
    assert not res.passed and "sending -> approved is not a path of the FSM" in res.detail


def test_a_redraft_needs_a_rejection_with_feedback() -> None:
    states = good_states()[:3] + [state("drafting", 5, draft=None), state(
        "drafting", 6, draft=replace(DRAFT, body=DRAFT.body + FEEDBACK), draft_revision=1,
        review_feedback=[FEEDBACK])]
    assert not phase_path(evidence(states=states)).passed
    rejected = ApprovalRequest(REQUEST_ID, CASE, DIGEST, "t", "rejected", FEEDBACK)
    assert phase_path(evidence(states=states, approval_requests=(rejected,))).passed


# -- lease exclusivity -----------------------------------------------------------------------

def leased(seq: int, st: State, owner: str, fence: int, pid: int) -> CheckpointRow:
    return replace(row(seq, st), lease_owner=owner, fence=fence, writer_pid=pid)


def leased_rows(*writers: tuple[str, int, int]) -> tuple[CheckpointRow, ...]:
    states = good_states()
    return tuple(leased(i, states[i - 1], *w) for i, w in enumerate(writers, start=1))


def test_fences_that_rise_with_each_holder_pass() -> None:
    rows = leased_rows(("worker-0", 1, 1), ("worker-0", 1, 1), ("worker-0", 1, 1),
                       ("worker-2", 2, 3), ("worker-2", 2, 3), ("worker-3", 3, 4))
    res = lease_exclusive(evidence(checkpoints=rows))
    assert res.passed, res


def test_a_taken_over_holder_writing_again_fails() -> None:
    rows = leased_rows(("worker-0", 1, 1), ("worker-0", 1, 1), ("worker-0", 1, 1),
                       ("worker-1", 2, 2), ("worker-2", 3, 3), ("worker-1", 2, 2))
    res = lease_exclusive(evidence(checkpoints=rows))
    assert not res.passed
    assert res.detail == ("checkpoint seq 6: fence 2 after fence 3 (seq 5): a taken-over "
                          "holder wrote")


def test_two_processes_of_one_owner_name_under_one_fence_fail() -> None:
    rows = leased_rows(("worker-0", 1, 1), ("worker-0", 1, 1), ("worker-0", 1, 1),
                       ("worker-0", 2, 2), ("worker-0", 2, 3), ("worker-0", 2, 2))
    res = lease_exclusive(evidence(checkpoints=rows))
    assert not res.passed and "two holders of one lease" in res.detail


def test_a_write_without_a_lease_after_leased_writes_fails() -> None:
    rows = leased_rows(("worker-0", 1, 1), ("worker-0", 1, 1), ("worker-0", 1, 1),
                       ("worker-1", 2, 2), ("worker-1", 2, 2), ("worker-1", 2, 2))
    rows = rows[:5] + (replace(rows[5], lease_owner=None, fence=None),)
    res = lease_exclusive(evidence(checkpoints=rows))
    assert not res.passed and "without a lease" in res.detail


# -- lease records (issue 26): two holders at once, with no stale write -----------------------

def held_then_taken(*, live: bool = True, holder_exits_first: bool = False,
                    ended_with: str = "worker-2") -> Evidence:
    """Worker 1 holds the lease (fence 2); worker 2 starts while it runs and ends holding
    ``ended_with``'s lease; worker 1 exits after it (or, ``holder_exits_first``, before)."""
    exits = [("worker_exit", None, 1, "returncode 1")]
    specs: list[Spec] = [("worker_start", None, 0, "start"),
                         ("worker_exit", None, 0, "returncode 0"),
                         ("worker_start", None, 1, "resume"), ("worker_start", None, 2, "resume")]
    specs += [*exits, ("worker_exit", None, 2, "returncode 0")] if holder_exits_first else [
        ("worker_exit", None, 2, "returncode 0"), *exits]
    now = 1_000.0
    held = LeaseSeen("worker-1", 2, now + (300 if live else -1), now)
    fence = 3 if ended_with == "worker-2" else 2
    workers = (replace(worker(0, "start", 0, False, "awaiting_approval"), owner="worker-0",
                       lease_after=LeaseSeen("worker-0", 1, 0.0, now)),
               replace(worker(1, "resume", 1, False, "completed"), owner="worker-1",
                       lease_before=LeaseSeen("worker-0", 1, 0.0, now),
                       lease_after=LeaseSeen("worker-2", 3, 0.0, now + 1)),
               replace(worker(2, "resume", 0, False, "completed"), owner="worker-2",
                       lease_before=held,
                       lease_after=LeaseSeen(ended_with, fence, now + 200, now + 1)))
    return evidence(specs=specs, workers=workers, checkpoints=())


def test_a_live_lease_taken_while_its_holder_runs_fails_without_a_stale_write() -> None:
    res = lease_exclusive(held_then_taken())
    assert not res.passed
    assert res.detail == ("worker 2 (worker-2) took the lease worker-1 held (fence 2 -> 3, "
                          "300.0 s before it expired) while worker 1 still ran: two holders "
                          "at once")
    assert ("worker 2 (worker-2): lease at start owner worker-1 fence 2, live for 300.0 s; "
            "at exit owner worker-2 fence 3, live for 199.0 s") in res.evidence


@pytest.mark.parametrize("change", [
    {"live": False},  # the holder's lease had expired: a takeover (lease-takeover)
    {"holder_exits_first": True},  # the holder was gone before the taker ended
    {"ended_with": "worker-1"},  # refused: the holder still holds it (two-resumers)
])
def test_a_takeover_of_an_expired_or_abandoned_lease_or_a_refusal_passes(
        change: dict[str, Any]) -> None:
    res = lease_exclusive(held_then_taken(**change))
    assert res.passed, res


def test_no_lease_record_read_judges_no_takeover() -> None:
    ev = held_then_taken()
    ev = replace(ev, workers=tuple(replace(w, lease_before=None, lease_after=None)
                                   for w in ev.workers))
    res = lease_exclusive(ev)
    assert res.passed and not any("lease at start" in line for line in res.evidence), res


# -- rejections ------------------------------------------------------------------------------

def rejected(feedback: str | None = None) -> tuple[ApprovalRequest, ...]:
    return (ApprovalRequest(REQUEST_ID, CASE, DIGEST, "t", "rejected", feedback),)


REJECT_SPECS = [*good_specs()[:12], ("human", None, None, "rejected: ..."),
                ("worker_start", None, 1, "resume"), ("worker_exit", None, 1, "returncode 0")]


def parked_states() -> list[State]:
    return good_states()[:3]


def test_a_rejected_case_parked_forever_fails() -> None:
    ev = evidence(states=parked_states(), approval_requests=rejected(), specs=REJECT_SPECS,
                  tickets=(), gateway=GatewayLog((), ()))
    res = rejection_respected(ev)
    assert not res.passed
    assert "was rejected but the case is awaiting_approval, not rejected" in res.detail
    assert "the case is parked on a draft the human rejected: it waits forever" in res.evidence


def test_a_rejected_case_that_ends_rejected_passes() -> None:
    states = [*parked_states(), state("rejected", 4, done=True)]
    ev = evidence(states=states, approval_requests=rejected(), specs=REJECT_SPECS,
                  tickets=(), gateway=GatewayLog((), ()))
    assert rejection_respected(ev).passed


def test_feedback_must_show_in_the_redraft() -> None:
    answered = replace(DRAFT, body=DRAFT.body + "\n" + FEEDBACK)
    ignored = replace(DRAFT, body=DRAFT.body + "\n(revised)")
    for draft, ok in ((answered, True), (ignored, False)):
        states = [*parked_states(), state("drafting", 5, draft=None),
                  state("awaiting_approval", 7, draft=draft, draft_revision=1,
                        review_feedback=[FEEDBACK])]
        requests = (*rejected(FEEDBACK), ApprovalRequest("req-2", CASE, draft.digest(), "t",
                                                         "pending"))
        ev = evidence(states=states, approval_requests=requests, specs=REJECT_SPECS,
                      tickets=(), gateway=GatewayLog((), ()))
        res = rejection_respected(ev)
        assert res.passed is ok, res
    assert "no later draft answers the feedback" in res.detail


def test_sending_a_rejected_draft_fails() -> None:
    ev = evidence(approval_requests=rejected(), specs=REJECT_SPECS)
    res = rejection_respected(ev)
    assert not res.passed and "sent a rejected draft" in " ".join(res.evidence)


# -- recovery attempts -----------------------------------------------------------------------

def retried(final_phase: str, maximum: int | None) -> Any:
    """Kills at t6.request_leaving three times, then a fourth worker finishes the case."""
    specs = good_specs()[:14]  # the start worker, the recheck, the approval
    workers = list(good_workers()[:2])
    pids = dict(PIDS)
    for i in range(2, 6):
        pids[i] = 13000 + i
        specs += [("worker_start", None, i, "resume"),
                  *[("hit", lab, i, "") for lab in ("t6.checkpoint_loaded",
                                                     "ckpt.before_commit",
                                                     "t6.request_leaving")]]
        killed = i < 5
        if killed:
            specs.append(("kill", "t6.request_leaving", i, "SIGKILL"))
        specs.append(("worker_exit", None, i, "returncode -9" if killed else "returncode 0"))
        workers.append(replace(worker(2, "resume", -9 if killed else 0, killed, "sending",
                                      phase_before="awaiting_approval" if i == 2
                                      else "sending"), index=i, pid=pids[i]))
    states = good_states()
    final = (state("dead_lettered", 5, done=True, dead_letter_reason="too many",
                   recovery_attempts=3, approval_ticket="apr-desk-1",
                   approval_request_id=REQUEST_ID) if final_phase == "dead_lettered"
             else replace(states[5], recovery_attempts=3))
    return evidence(specs=specs, workers=tuple(workers), states=[*states[:5], final],
                    max_attempts=maximum, gateway=GatewayLog((), ()))


def test_past_the_maximum_the_case_must_be_dead_lettered() -> None:
    res = attempts_bounded(retried("completed", 2))
    assert not res.passed
    assert res.detail == ("3 recoveries, more than the maximum 2, but the case ended "
                          "completed, not dead_lettered")
    assert attempts_bounded(retried("dead_lettered", 2)).passed
    assert attempts_bounded(retried("completed", 3)).passed
    assert attempts_bounded(retried("completed", None)).passed


def test_the_attempt_counter_never_goes_down() -> None:
    states = good_states()
    states[4] = replace(states[4], recovery_attempts=2)
    states[5] = replace(states[5], recovery_attempts=0)
    res = attempts_bounded(evidence(states=states))
    assert not res.passed
    assert res.detail == "checkpoint seq 6: the attempt counter went down from 2 to 0"


def crashed_at_load(kills: int, counter: int) -> Evidence:
    """The good story, then ``kills`` resumes each killed at ``t6.checkpoint_loaded`` before
    the last one completes; the loop's counter reads ``counter`` at the end."""
    specs, workers = good_specs(), list(good_workers())
    last = workers.pop()
    pids = {i: 14000 + i for i in range(3, 4 + kills)}
    specs = [s for s in specs if s[2] != 3]
    for i in range(3, 3 + kills):
        specs += [("worker_start", None, i, "resume"), ("hit", "t6.checkpoint_loaded", i, ""),
                  ("kill", "t6.checkpoint_loaded", i, "SIGKILL"),
                  ("worker_exit", None, i, "returncode -9")]
        workers.append(replace(worker(2, "resume", -9, True, "sending",
                                      phase_before="sending"), index=i, pid=pids[i]))
    n = 3 + kills
    specs += [("worker_start", None, n, "resume"),
              *[("hit", lab, n, "") for lab in ("ckpt.before_commit", "t6.checkpoint_loaded",
                                                "t6.request_leaving", "t7.completed_saved")],
              ("worker_exit", None, n, "returncode 0")]
    workers.append(replace(last, index=n, pid=pids[n]))
    states = good_states()
    states[5] = replace(states[5], recovery_attempts=counter)
    evs = tuple(replace(e, pid=pids.get(e.worker, e.pid)) for e in events(specs))
    return evidence(events=evs, workers=tuple(workers), states=states, max_attempts=9)


def test_workers_killed_before_saving_their_attempt_are_counted() -> None:
    """Issue 26: a worker killed at ``t6.checkpoint_loaded`` before it saved its attempt is
    a recovery all the same; a counter that missed it is a ``fail``."""
    res = attempts_bounded(crashed_at_load(3, 1))
    assert not res.passed
    assert res.detail == "the loop counted 1 recovery attempt(s), the harness saw 4 " \
                         "(workers [3, 4, 5, 6])"
    assert attempts_bounded(crashed_at_load(3, 4)).passed
    res = attempts_bounded(replace(crashed_at_load(3, 1), max_attempts=2))
    assert any("4 recoveries, more than the maximum 2" in line for line in res.evidence)


def test_a_parked_pickup_counted_as_a_recovery_fails() -> None:
    """The resume after the approval picks up the checkpoint the recheck parked on and
    exited: not a recovery; a counter that says 3 counted it. (The recheck after the kill at
    ``t4.parked`` may be one: the harness cannot tell a park from a proposal's write.)"""
    states = good_states()
    states[5] = replace(states[5], recovery_attempts=3)
    res = attempts_bounded(evidence(states=states))
    assert not res.passed
    assert res.detail.startswith("the loop counted 3 recovery attempt(s), but only 2 "
                                 "pickup(s) could be recoveries (workers [1, 3])")
    states[5] = replace(states[5], recovery_attempts=2)
    assert attempts_bounded(evidence(states=states)).passed


def test_a_worker_refused_before_loading_is_not_a_recovery() -> None:
    """A worker that reported no labelled point (refused by another owner's lease before it
    loaded anything) did not pick the case up."""
    ev = crashed_at_load(1, 2)
    refused = replace(ev.workers[-1], index=9, pid=15999, returncode=1)
    res = attempts_bounded(replace(ev, workers=(*ev.workers, refused)))
    assert res.passed, res


# -- the history is the one read at the approval -----------------------------------------------

FILE, OTHER_FILE = (2049, 70001), (2049, 70002)  # (st_dev, st_ino) of checkpoints.db


def marked(ev: Evidence, file: tuple[int, int] | None = FILE) -> Evidence:
    """``ev`` as the harness records it: at the approval it read the rows up to the cut
    from ``file``; at the end it read ``ev.checkpoints`` from the same file."""
    seen = [r for r in ev.checkpoints if r.seq <= APPROVAL_CUT]
    return replace(ev, history_at_approval=HistoryMark(file, APPROVAL_CUT, len(seen),
                                                       rows_digest(seen)),
                   checkpoints_file=file)


def test_a_history_kept_since_the_approval_passes() -> None:
    ev = marked(evidence())  # three rows seen at the approval, three appended after it
    result = history_not_replaced(ev)
    assert result.passed, result
    assert [(c.check_id, c.passed or not c.applicable) for c in run_checks(ev)] == [
        (c, True) for c in CHECK_IDS]
    # no checkpoint file yet when the human approved: whatever came later is no replacement
    empty = replace(ev, history_at_approval=HistoryMark(None, 0, 0, rows_digest(())))
    assert history_not_replaced(empty).passed
    # no approval (or an unreadable history then): nothing to compare
    assert history_not_replaced(evidence(history_at_approval=None)).passed


def started_again() -> Evidence:
    """The loop deleted checkpoints.db once the human approved and created it again: the
    rows after the approval start over at seq 1, in another file."""
    good = marked(evidence())
    after = good_states()[APPROVAL_CUT:]  # approved, sending, completed
    return replace(good, checkpoints=rows(after), checkpoints_file=OTHER_FILE)


def test_a_history_started_again_after_the_approval_fails_with_one_clear_reason() -> None:
    ev = started_again()
    result = history_not_replaced(ev)
    assert not result.passed
    assert result.detail.startswith("the checkpoint history was replaced or rewritten "
                                    "during the execution: ")
    assert "file dev 2049 inode 70001 with 3 row(s) up to seq 3" in result.detail
    assert "seen at approval, file dev 2049 inode 70002 with 3 row(s) up to seq 3" \
        in result.detail
    assert result.detail.endswith("at the end")
    # the checks that set rows against the approval's seq do not read the new file's seq 1-3
    # as "saved before the approval" (they did: "3 checkpoint(s)/resume(s) moved past ...")
    for check in (parked_until_approval, not_sent_before_approval):
        other = check(ev)
        assert other.passed, other
        assert not [line for line in other.evidence if "before the approval" in line]
        assert any("see history_not_replaced" in line for line in other.evidence)
    failing = [c.check_id for c in run_checks(ev) if not c.passed and c.applicable]
    assert failing == ["history_not_replaced"]


def test_a_history_rewritten_or_emptied_in_the_same_file_fails() -> None:
    good = marked(evidence())
    changed = list(good.checkpoints)
    changed[1] = replace(changed[1], created_at="2026-07-19T09:09:09Z")  # seq 2 rewritten
    rewritten = replace(good, checkpoints=tuple(changed))
    emptied = replace(good, checkpoints=good.checkpoints[APPROVAL_CUT:])  # seq 1-3 deleted
    for ev, left in ((rewritten, 3), (emptied, 0)):
        result = history_not_replaced(ev)
        assert not result.passed, result
        assert f"file dev 2049 inode 70001 with {left} row(s) up to seq 3" in result.detail
        assert parked_until_approval(ev).passed and not_sent_before_approval(ev).passed


def test_the_mark_round_trips_through_run_json_and_rejudges_alike() -> None:
    from harness.judge.assess import assess
    from harness.model import CrashSchedule, ExecutionPlan, Scenario

    ev = started_again()
    back = decode(json.loads(json.dumps(encode(ev))))
    assert back == ev and back.history_at_approval == ev.history_at_approval
    assert back.checkpoints_file == OTHER_FILE
    plan = ExecutionPlan(Scenario(name="o1001"), CrashSchedule())
    assert assess(back, plan) == assess(ev, plan)
    assert assess(back, plan)[1] == "fail"


def test_an_approval_over_a_history_without_the_approved_draft_is_unreadable() -> None:
    """The human approves the loop's request for a draft; the history the harness read then
    must hold that draft (a loop makes it durable before asking, Chapter 8). One without it
    — only the first row left, the rest moved away and back later (found by an attack:
    PASS with the hidden rows rewritten meanwhile) — marks the history unreadable at the
    approval, which ``history_not_replaced`` fails on; one with it is left as it was, and
    so is an already unreadable mark."""
    from harness.judge.evidence import rows_digest
    from harness.model import HistoryMark
    from harness.story.queue_acts import draft_not_durable as _draft_not_durable
    from tests.test_checks import DIGEST, good_states, rows

    full = rows(good_states()[:3])
    mark = HistoryMark((1, 2), 3, 3, rows_digest(full))
    assert _draft_not_durable(mark, full, DIGEST) is mark
    thinned = full[:1]  # drafting, before the draft was written
    flagged = _draft_not_durable(replace(mark, rows=1, seq=1), thinned, DIGEST)
    assert flagged.unreadable is not None and DIGEST[:12] in flagged.unreadable
    assert _draft_not_durable(mark, full, "0" * 64).unreadable is not None  # another draft
    gone = replace(mark, unreadable="not ours")
    assert _draft_not_durable(gone, (), DIGEST) is gone


def test_a_loop_parked_without_asking_fails_parked_until_approval() -> None:
    """The loop's last checkpoint is ``awaiting_approval`` but the harness's approval
    service never received a request of the case: the human cannot approve and the case
    is stuck for good. Before, the story was cut short ("the human could not approve") and
    the lost send was ``unknown`` (found by an attack); the parked history and the
    harness's empty queue prove it."""
    from harness.judge.checks.checklist import parked_until_approval
    from shopops.approvals import ApprovalRequest
    from tests.test_checks import DIGEST, REQUEST_ID, good_states, rows
    from tests.test_verdict import evidence

    parked = rows(good_states()[:3])
    ev = evidence(checkpoints=parked, approval_event=None, checkpoint_seq_at_approval=None,
                  approval_requests=())
    result = parked_until_approval(ev)
    assert not result.passed and "never asked" in result.detail
    asked = replace(ev, approval_requests=(ApprovalRequest(
        REQUEST_ID, "case-O-1001", DIGEST, "2026-07-19T00:00:03Z", "pending"),))
    assert parked_until_approval(asked).passed


def test_an_email_a_checkpoint_claims_but_its_ledger_lacks_fails_per_action() -> None:
    """A checkpoint says the email went, but the gateway's own ledger holds no delivery: a
    proven loss, named by ``per_action`` (found by an attack, for the order note: named by
    no check, and ``unknown`` when the worker then died of an outside signal)."""
    from harness.judge.checks.actions import per_action
    from tests.test_verdict import evidence as bare_evidence

    states = good_states()[:5]
    states[-1] = replace(states[-1], email_sent=True)  # "sending", but says it went
    result = per_action(bare_evidence(checkpoints=rows(states)))
    assert not result.passed
    assert any("seq 5 says it was done, but its ledger at the gateway holds no delivery"
               in line for line in result.evidence), result.evidence


def test_a_redraft_must_raise_the_draft_revision() -> None:
    """Issue 26: the redraft answering a rejection with feedback carries a higher
    ``draft_revision`` than the rejected draft; one that keeps revision 0 fails
    ``rejection_respected``, naming the write."""
    redrafted = replace(DRAFT, body=DRAFT.body + FEEDBACK)

    def story(revision: int) -> Evidence:
        states = good_states()[:3] + [
            state("drafting", 5, draft=None, draft_revision=1, review_feedback=[FEEDBACK]),
            state("awaiting_approval", 6, draft=redrafted, draft_revision=revision,
                  review_feedback=[FEEDBACK])]
        rejected = ApprovalRequest(REQUEST_ID, CASE, DIGEST, "t", "rejected", FEEDBACK)
        return evidence(states=states, approval_requests=(rejected,),
                        gateway=GatewayLog((), ()))

    res = rejection_respected(story(0))
    assert not res.passed
    assert res.detail == ("checkpoint seq 5: a new draft with revision 0, not more than the "
                          "previous draft's 0 (seq 3)")
    assert not any("revision" in line for line in rejection_respected(story(1)).evidence)
