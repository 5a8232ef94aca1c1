"""The kill-resume checklist as pure functions over ``Evidence``: the registry.

The first five are Chapter 8's "Kill-resume checklist for O-1001" and two delivery rules
(``harness/judge/checks/checklist.py``); the rest are the design's "beyond the five"
(``harness/judge/checks/safety.py``), the checks over the whole history
(``harness/judge/checks/history.py``) and the per-action check
(``harness/judge/checks/actions.py``). Each returns a ``CheckResult`` with the evidence lines a
human needs to see why. None of them reads a file or asks the loop anything; each ``Check``
says which sources of evidence it reads. Every check is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.judge.checks.actions import per_action
from harness.judge.checks.checklist import (
    draft_identical,
    exactly_one_delivery,
    not_sent_before_approval,
    parked_until_approval,
    same_key_one_delivery,
    step_continues,
    ticket_server_issued,
)
from harness.judge.checks.history import (
    attempts_bounded,
    history_not_replaced,
    lease_exclusive,
    no_request_after_done,
    phase_path,
    rejection_respected,
)
from harness.judge.checks.safety import (
    intake_not_repeated,
    no_process_left,
    no_tampering,
    storage_safe,
)
from harness.judge.checks.support import absent as _absent
from harness.model import CheckId, CheckResult, Evidence, EvidenceSource

__all__ = ["CHECKS", "CHECK_IDS", "Check", "CheckFailed", "CheckResult", "_absent",
           "draft_identical", "exactly_one_delivery", "intake_not_repeated",
           "no_process_left", "no_tampering", "not_sent_before_approval",
           "parked_until_approval", "run_checks", "same_key_one_delivery", "step_continues",
           "storage_safe", "needs", "ticket_server_issued"]


class CheckFailed(AssertionError):
    """Raised by the pytest plugin for a failing execution (an ``AssertionError``, so pytest
    shows a failure, not an error)."""


_C, _A, _G = EvidenceSource.CHECKPOINTS, EvidenceSource.APPROVALS, EvidenceSource.GATEWAY
_T = EvidenceSource.TARGET  # a [target]'s durable state, in place of the checkpoints


@dataclass(frozen=True)
class Check:
    """One check of the checklist: its ``id``, the function that judges it, and the sources
    of evidence it reads (``needs``): a check whose source could not be read is undecided
    (``harness.judge.verdict.decide``). Calling it runs the function."""

    id: CheckId
    run: Callable[[Evidence], CheckResult]
    needs: frozenset[EvidenceSource]

    def __call__(self, ev: Evidence) -> CheckResult:
        """``run(ev)``."""
        return self.run(ev)


def _check(check_id: CheckId, run: Callable[[Evidence], CheckResult],
           *needs: EvidenceSource) -> Check:
    return Check(check_id, run, frozenset(needs))


#: Every check, one per ``CheckId``, in its order (a test says so).
CHECKS: tuple[Check, ...] = (
    _check(CheckId.DRAFT_IDENTICAL, draft_identical, _C, _A, _G, _T),
    _check(CheckId.PARKED_UNTIL_APPROVAL, parked_until_approval, _C),
    _check(CheckId.NOT_SENT_BEFORE_APPROVAL, not_sent_before_approval, _C, _G),
    _check(CheckId.STEP_CONTINUES, step_continues, _C, _T),
    _check(CheckId.SAME_KEY_ONE_DELIVERY, same_key_one_delivery, _C, _G, _T),
    _check(CheckId.EXACTLY_ONE_DELIVERY, exactly_one_delivery, _C, _G, _T),
    _check(CheckId.TICKET_SERVER_ISSUED, ticket_server_issued, _C, _A, _G),
    _check(CheckId.INTAKE_NOT_REPEATED, intake_not_repeated),
    _check(CheckId.STORAGE_SAFE, storage_safe, _C),
    _check(CheckId.NO_PROCESS_LEFT, no_process_left),
    _check(CheckId.NO_TAMPERING, no_tampering, _G),  # the trace, and forged headers
    _check(CheckId.NO_REQUEST_AFTER_DONE, no_request_after_done, _C, _G),
    _check(CheckId.PHASE_PATH, phase_path, _C),
    _check(CheckId.LEASE_EXCLUSIVE, lease_exclusive, _C),
    _check(CheckId.REJECTION_RESPECTED, rejection_respected, _C, _A, _G),
    _check(CheckId.ATTEMPTS_BOUNDED, attempts_bounded, _C),
    _check(CheckId.HISTORY_NOT_REPLACED, history_not_replaced, _C),
    _check(CheckId.PER_ACTION, per_action, _C, _A, _G),
)
CHECK_IDS: tuple[CheckId, ...] = tuple(c.id for c in CHECKS)
_BY_ID: dict[CheckId, Check] = {c.id: c for c in CHECKS}


def needs(check_id: CheckId) -> frozenset[EvidenceSource]:
    """The sources of evidence the check ``check_id`` reads (``Check.needs``)."""
    return _BY_ID[check_id].needs


def run_checks(ev: Evidence) -> tuple[CheckResult, ...]:
    """Every check, in ``CHECKS`` order."""
    return tuple(check(ev) for check in CHECKS)
