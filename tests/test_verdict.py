"""``judge``: pass, fail or unknown, and the reasons, from evidence and check results.

``fail`` wins over every gap (a check that failed on evidence the harness read);
``unknown`` is never a pass: some check could not be decided, and each says why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from observed import observed

from harness.judge.checks.registry import CHECK_IDS, CHECKS, CheckResult
from harness.judge.evidence import Evidence, WorkerRun
from harness.judge.verdict import EXIT_STATUS, FAIL, PASS, UNKNOWN, decide, judge
from harness.model import CheckStatus, CrashSchedule, EvidenceSource, Gap, KillPoint
from harness.plan.scenario import Scenario
from harness.run.execution import ExecutionPlan
from harness.services.gateway import GatewayLog

DEMO = Scenario(name="demo-keys-off", idempotency_keys=False,
                expect_failing=frozenset({"same_key_one_delivery", "exactly_one_delivery"}))
CRASH_SAFE = Scenario(name="o1001")
KILLED = CrashSchedule.parse("t6.gateway_accepted")
BASELINE = CrashSchedule()
EVERY = "undecided: every check"


def run(index: int, role: str, returncode: int, *, killed: bool = False,
        timed_out: bool = False, stderr: str = "") -> WorkerRun:
    return WorkerRun(index=index, role=role, pid=1000 + index, returncode=returncode,
                     killed_by_harness=killed, timed_out=timed_out, leftovers=(),
                     stdout_tail="", stderr_tail=stderr, elapsed_s=0.2,
                     phase_after="completed" if role == "resume" else "awaiting_approval")


def clean_workers() -> tuple[WorkerRun, ...]:
    """Killed at t6.gateway_accepted: start parks, resume is SIGKILLed, resume completes."""
    return (run(0, "start", 0), run(1, "resume", -9, killed=True), run(2, "resume", 0))


def evidence(**fields: Any) -> Evidence:
    base: dict[str, Any] = dict(
        execution_id="o1001[t6.gateway_accepted]", case_id="case-O-1001", events=(),
        workers=clean_workers(), checkpoints=(), approval_requests=(), tickets=(),
        gateway=GatewayLog((), ()), approval_event=3, checkpoint_seq_at_approval=3,
        unreached=())
    base.update(fields)
    return observed(**base)


def checks(*failing: str) -> tuple[CheckResult, ...]:
    return tuple(CheckResult(c, c not in failing, f"{c} broke" if c in failing else "ok")
                 for c in CHECK_IDS)


def plan(scenario: Scenario = CRASH_SAFE, schedule: CrashSchedule = KILLED) -> ExecutionPlan:
    return ExecutionPlan(scenario, schedule)


def test_exit_statuses() -> None:
    assert EXIT_STATUS == {PASS: 0, FAIL: 1, UNKNOWN: 2}


def test_clean_evidence_and_passing_checks_pass_with_no_reasons() -> None:
    assert judge(evidence(), checks(), plan()) == (PASS, ())


# --------------------------------------------------------------------------- unknown


def test_unreached_kill_point_is_unknown() -> None:
    point = KillPoint("t6.request_leaving", 2)
    verdict, reasons = judge(evidence(unreached=(point,)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("kill point t6.request_leaving#2 was never reached", EVERY)


def test_the_cause_comes_before_what_it_caused() -> None:
    """Found by a new user: a harness error during the story (the fork server went away)
    was listed after the kill point it left unreached, and the console showed only the
    first reason. Causes first: the story, then the workers, then the kill points."""
    workers = list(clean_workers())
    workers[1] = run(1, "resume", -9, killed=False)
    story = "harness error during the story: ForkServerError: the fork server went away"
    ev = evidence(unreached=(KillPoint("t6.reply_received", 1),), workers=tuple(workers),
                  errors=(story,))
    verdict, reasons = judge(ev, checks(), plan())
    assert verdict == UNKNOWN
    assert reasons[:3] == (story, "worker 1 (resume) was SIGKILLed but not by the harness; "
                           "stderr: (empty)", "kill point t6.reply_received was never reached")
    assert {c.undecided for c in decide(ev, checks(), plan())} == {story}


def test_worker_exiting_non_zero_on_its_own_is_unknown() -> None:
    workers = list(clean_workers())
    workers[2] = run(2, "resume", 1, stderr="Traceback ...\nsqlite3.OperationalError: locked")
    verdict, reasons = judge(evidence(workers=tuple(workers)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("worker 2 (resume) exited with status 1; stderr: "
                       "sqlite3.OperationalError: locked", EVERY)


def test_worker_sigkilled_by_someone_else_is_unknown() -> None:
    # The OOM killer (or anyone but the harness) sent SIGKILL: exit -9, not ours.
    workers = list(clean_workers())
    workers[0] = run(0, "start", -9, killed=False)
    verdict, reasons = judge(evidence(workers=tuple(workers)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("worker 0 (start) was SIGKILLed but not by the harness; stderr: "
                       "(empty)", EVERY)


def test_worker_killed_by_the_harness_with_another_signal_status_is_unknown() -> None:
    # The harness sent SIGKILL, but the worker died of SIGTERM first: not exactly -SIGKILL.
    workers = list(clean_workers())
    workers[1] = run(1, "resume", -15, killed=True)
    verdict, reasons = judge(evidence(workers=tuple(workers)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("worker 1 (resume) exited with status -15; stderr: (empty)", EVERY)


def test_worker_that_timed_out_is_unknown() -> None:
    workers = list(clean_workers())
    workers[2] = run(2, "resume", -9, killed=True, timed_out=True, stderr="waiting\nstill waiting")
    verdict, reasons = judge(evidence(workers=tuple(workers)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("worker 2 (resume) passed its deadline; stderr: still waiting", EVERY)


def test_evidence_errors_are_unknown() -> None:
    err = "gateway log /tmp/x/gateway.db unreadable: file is not a database"
    verdict, reasons = judge(evidence(errors=(err,)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == (err, EVERY)


def test_a_failing_check_wins_over_every_gap() -> None:
    """Verdict precedence: a check that fails on evidence the harness read is a failure,
    whatever the workers' exits, an unreached point or a story cut short."""
    workers = list(clean_workers())
    workers[2] = run(2, "resume", 1)
    ev = evidence(unreached=(KillPoint("t7.completed_saved"),), workers=tuple(workers),
                  errors=("the human could not approve: no pending request",))
    verdict, reasons = judge(ev, checks("exactly_one_delivery", "step_continues"), plan())
    assert verdict == FAIL
    assert reasons == ("step_continues: step_continues broke",
                       "exactly_one_delivery: exactly_one_delivery broke")


def test_two_deliveries_then_a_typed_refusal_is_fail_not_unknown() -> None:
    """The issue's case: the gateway's log holds two deliveries, then the worker exits 1
    with ``ApprovalRefused`` (not a declared outcome). Two deliveries stay two."""
    workers = list(clean_workers())
    workers[2] = run(2, "resume", 1, stderr="shopops: error: ApprovalRefused: consumed")
    verdict, reasons = judge(evidence(workers=tuple(workers)),
                             checks("same_key_one_delivery", "exactly_one_delivery"), plan())
    assert verdict == FAIL
    assert [r.split(":")[0] for r in reasons] == ["same_key_one_delivery",
                                                  "exactly_one_delivery"]


def test_each_undecided_check_says_why_and_the_others_stay_decided() -> None:
    gap = Gap(EvidenceSource.APPROVALS, "approval database a.db unreadable: locked")
    ev = evidence(gaps=(gap,))
    decided = {c.check_id: c for c in decide(ev, checks(), plan())}
    undecided = sorted(k for k, c in decided.items() if c.status is CheckStatus.UNDECIDED)
    assert undecided == sorted(c.id for c in CHECKS if EvidenceSource.APPROVALS in c.needs)
    assert {decided[k].undecided for k in undecided} == {gap.reason}
    assert decided["no_process_left"].status is CheckStatus.PASS
    verdict, reasons = judge(ev, checks(), plan())
    assert verdict == UNKNOWN
    in_order = ", ".join(c for c in CHECK_IDS if c in undecided)
    assert reasons == (gap.reason, f"undecided: {in_order}")


def test_a_failure_on_a_file_that_could_not_be_read_is_undecided() -> None:
    # An empty log because the gateway's file was unreadable proves no lost send ...
    gap = Gap(EvidenceSource.GATEWAY, "gateway log g.db unreadable: not a database")
    verdict, reasons = judge(evidence(gaps=(gap,)), checks("exactly_one_delivery"), plan())
    assert verdict == UNKNOWN
    assert gap.reason in reasons
    # ... but a check that does not read that file still fails on what it read.
    verdict, reasons = judge(evidence(gaps=(gap,)), checks("intake_not_repeated"), plan())
    assert verdict == FAIL
    assert reasons == ("intake_not_repeated: intake_not_repeated broke",)


def test_a_check_that_found_itself_undecided_stays_undecided() -> None:
    results = tuple(replace(c, passed=False, undecided="the story was cut short")
                    if c.check_id == "exactly_one_delivery" else c for c in checks())
    verdict, reasons = judge(evidence(), results, plan())
    assert verdict == UNKNOWN
    assert reasons == ("undecided: exactly_one_delivery",)


def test_unknown_wins_even_over_an_expected_failure() -> None:
    ev = evidence(unreached=(KillPoint("t6.gateway_accepted"),))
    verdict, _ = judge(ev, checks("same_key_one_delivery", "exactly_one_delivery"),
                       plan(DEMO))
    assert verdict == UNKNOWN


# --------------------------------------------------------------------------- fail


def test_a_failing_check_fails_with_its_detail() -> None:
    verdict, reasons = judge(evidence(), checks("same_key_one_delivery"), plan())
    assert verdict == FAIL
    assert reasons == ("same_key_one_delivery: same_key_one_delivery broke",)


def test_failing_checks_are_reported_in_checklist_order() -> None:
    verdict, reasons = judge(evidence(), checks("no_process_left", "draft_identical"), plan())
    assert verdict == FAIL
    assert [r.split(":")[0] for r in reasons] == ["draft_identical", "no_process_left"]


# --------------------------------------------------------------------------- expected failures


def test_expected_failures_that_fail_pass_with_a_reason() -> None:
    verdict, reasons = judge(evidence(), checks("same_key_one_delivery", "exactly_one_delivery"),
                             plan(DEMO))
    assert verdict == PASS
    assert reasons == ("exactly_one_delivery: failed as the scenario expects",
                       "same_key_one_delivery: failed as the scenario expects")


def test_an_expected_failure_that_passes_fails() -> None:
    # Keys off but only one delivery: the demo did not demonstrate its duplicate.
    verdict, reasons = judge(evidence(), checks("same_key_one_delivery"), plan(DEMO))
    assert verdict == FAIL
    assert reasons == ("exactly_one_delivery: expected to fail, but passed",)


def test_an_unexpected_failure_next_to_expected_ones_fails() -> None:
    failing = ("same_key_one_delivery", "exactly_one_delivery", "draft_identical")
    verdict, reasons = judge(evidence(), checks(*failing), plan(DEMO))
    assert verdict == FAIL
    assert reasons == ("draft_identical: draft_identical broke",)


@pytest.mark.parametrize("failing", [(), ("same_key_one_delivery", "exactly_one_delivery")],
                         ids=["clean", "demo-failures"])
def test_the_no_kill_baseline_ignores_expect_failing(failing: tuple[str, ...]) -> None:
    baseline = plan(DEMO, BASELINE)
    ev = evidence(workers=(run(0, "start", 0), run(1, "resume", 0)),
                  execution_id=baseline.id)
    verdict, reasons = judge(ev, checks(*failing), baseline)
    if failing:
        assert verdict == FAIL
        assert reasons == tuple(f"{c}: {c} broke" for c in CHECK_IDS if c in failing)
    else:
        assert (verdict, reasons) == (PASS, ())


def test_expect_failing_applies_to_multi_kill_schedules_too() -> None:
    sched = CrashSchedule.parse("t3.checkpoint_saved>t6.gateway_accepted")
    verdict, _ = judge(evidence(), checks("same_key_one_delivery", "exactly_one_delivery"),
                       plan(DEMO, sched))
    assert verdict == PASS



def test_a_missing_expected_refusal_is_said_beside_other_failures() -> None:
    """A scenario expecting a worker to stop with ``LeaseHeld``: when no worker did and a
    check failed too (a process left alive), both are reasons. Before, a gap beside the
    failure hid the missing refusal, and a grade item asking only for it (no checks of its
    own) scored full marks for an implementation that did nothing (found by an attack).
    With gaps alone and no failure the verdict stays unknown, and says nothing of it."""
    lease = Scenario(name="lease", expect_worker_error="LeaseHeld")
    ev = evidence(unreached=(KillPoint("t7.completed_saved"),))
    verdict, reasons = judge(ev, checks("no_process_left"), plan(lease))
    assert verdict == FAIL
    assert "expected a worker to stop with LeaseHeld; none did" in reasons
    verdict, reasons = judge(ev, checks(), plan(lease))
    assert verdict == UNKNOWN
    assert not any(r.startswith("expected a worker") for r in reasons)


@pytest.mark.parametrize(("returncode", "decided"), [
    (-9, False),    # a SIGKILL the harness did not send (the OOM killer, a person)
    (-15, False),   # a SIGTERM from outside
    (1, True),      # the loop's own crash: its lost send is its own
    (-11, True),    # SIGSEGV: its own fault, not the environment's
    (-14, True),    # SIGALRM: a timer it set itself (found by an attack: was unknown)
])
def test_a_send_missing_after_a_kill_from_outside_is_not_known_to_be_lost(
        returncode: int, decided: bool) -> None:
    """The last worker died before sending, of a signal the harness did not send: nothing
    recovers from a kill the harness did not make, so the story ends there and the email
    had no chance to go. The delivery checks are then undecided with that reason (the
    verdict ``unknown``, retried in a grade), not a ``fail`` saying "0 deliveries" (found
    by a trial: the reference loop FAILed, "lost", when someone ``kill -9``ed a worker).
    An exit of its own (a status, a crash signal) leaves the failure decided."""
    from harness.judge.assess import assess

    workers = (run(0, "start", 0), run(1, "resume", returncode))
    ev = evidence(workers=workers, execution_id="o1001[no-kill]")
    found, verdict, reasons = assess(ev, plan(schedule=BASELINE))
    status = {c.check_id: c for c in found}
    for check in ("exactly_one_delivery", "same_key_one_delivery"):
        c = status[check]
        if decided:
            assert c.status is CheckStatus.FAIL, c
        else:
            assert c.status is CheckStatus.UNDECIDED, c
            assert c.undecided is not None and (
                f"worker 1 (resume) died of signal {-returncode} that the harness did not "
                "send" in c.undecided)
    if not decided:
        assert not any(r.startswith(("exactly_one_delivery", "same_key_one_delivery"))
                       for r in reasons), reasons



def test_a_kill_from_outside_that_other_workers_followed_does_not_cut_the_story_short(
        ) -> None:
    """The start worker parked and then died of a SIGKILL the harness did not send, but
    the human approved and a resume ran after it and sent nothing: the story went on, so
    the missing send is the resume's, a ``fail`` (found by an attack: a loop that killed
    itself after parking turned its lost send into ``unknown``)."""
    from harness.judge.assess import assess

    workers = (run(0, "start", -9), run(1, "resume", 0))
    ev = evidence(workers=workers, execution_id="o1001[no-kill]")
    assert ev.cut_short_by is None
    found, verdict, _ = assess(ev, plan(schedule=BASELINE))
    status = {c.check_id: c.status for c in found}
    assert status["exactly_one_delivery"] is CheckStatus.FAIL
    assert verdict == FAIL


def test_a_send_the_history_claims_is_a_proven_loss_even_when_cut_short() -> None:
    """The last worker checkpointed ``completed, email_sent`` with no delivery behind it,
    then died of a SIGTERM: the loop itself says it is done and will not send again, so
    the missing delivery is decided (``fail``), not "not known" (found by an attack)."""
    from harness.judge.assess import assess
    from tests.test_checks import good_states, rows

    workers = (run(0, "start", 0), run(1, "resume", -15))
    ev = evidence(workers=workers, execution_id="o1001[no-kill]",
                  checkpoints=rows(good_states()))
    assert ev.cut_short_by is not None
    found, _, _ = assess(ev, plan(schedule=BASELINE))
    status = {c.check_id: c for c in found}
    for check in ("exactly_one_delivery", "same_key_one_delivery"):
        assert status[check].status is CheckStatus.FAIL, status[check]
