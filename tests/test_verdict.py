"""``judge``: pass, fail or unknown, and the reasons, from evidence and check results.

``unknown`` is never a pass: it means the execution did not test what it claimed.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.checks import CHECK_IDS, CheckResult
from harness.evidence import Evidence, WorkerRun
from harness.execution import ExecutionPlan
from harness.mock_gateway import GatewayLog
from harness.scenario import Scenario
from harness.schedule import CrashSchedule, KillPoint
from harness.verdict import EXIT_STATUS, FAIL, PASS, UNKNOWN, judge

DEMO = Scenario(name="demo-keys-off", idempotency_keys=False,
                expect_failing=frozenset({"same_key_one_delivery", "exactly_one_delivery"}))
CRASH_SAFE = Scenario(name="o1001")
KILLED = CrashSchedule.parse("t6.gateway_accepted")
BASELINE = CrashSchedule()


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
    return Evidence(**base)


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
    assert reasons == ("kill point t6.request_leaving#2 was never reached",)


def test_worker_exiting_non_zero_on_its_own_is_unknown() -> None:
    workers = list(clean_workers())
    workers[2] = run(2, "resume", 1, stderr="Traceback ...\nsqlite3.OperationalError: locked")
    verdict, reasons = judge(evidence(workers=tuple(workers)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("worker 2 (resume) exited with status 1; stderr: "
                       "sqlite3.OperationalError: locked",)


def test_worker_sigkilled_by_someone_else_is_unknown() -> None:
    # The OOM killer (or anyone but the harness) sent SIGKILL: exit -9, not ours.
    workers = list(clean_workers())
    workers[0] = run(0, "start", -9, killed=False)
    verdict, reasons = judge(evidence(workers=tuple(workers)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("worker 0 (start) was SIGKILLed but not by the harness; stderr: "
                       "(empty)",)


def test_worker_killed_by_the_harness_with_another_signal_status_is_unknown() -> None:
    # The harness sent SIGKILL, but the worker died of SIGTERM first: not exactly -SIGKILL.
    workers = list(clean_workers())
    workers[1] = run(1, "resume", -15, killed=True)
    verdict, reasons = judge(evidence(workers=tuple(workers)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("worker 1 (resume) exited with status -15; stderr: (empty)",)


def test_worker_that_timed_out_is_unknown() -> None:
    workers = list(clean_workers())
    workers[2] = run(2, "resume", -9, killed=True, timed_out=True, stderr="waiting\nstill waiting")
    verdict, reasons = judge(evidence(workers=tuple(workers)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == ("worker 2 (resume) passed its deadline; stderr: still waiting",)


def test_evidence_errors_are_unknown() -> None:
    err = "gateway log /tmp/x/gateway.db unreadable: file is not a database"
    verdict, reasons = judge(evidence(errors=(err,)), checks(), plan())
    assert verdict == UNKNOWN
    assert reasons == (err,)


def test_unknown_wins_over_failing_checks_and_lists_every_cause() -> None:
    workers = list(clean_workers())
    workers[2] = run(2, "resume", 1)
    ev = evidence(unreached=(KillPoint("t7.completed_saved"),), workers=tuple(workers),
                  errors=("the human could not approve: no pending request",))
    verdict, reasons = judge(ev, checks("exactly_one_delivery", "step_continues"), plan())
    assert verdict == UNKNOWN
    assert reasons == ("kill point t7.completed_saved was never reached",
                       "worker 2 (resume) exited with status 1; stderr: (empty)",
                       "the human could not approve: no pending request")
    assert not any("exactly_one_delivery" in r for r in reasons)


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

