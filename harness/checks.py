"""The kill-resume checklist as pure functions over ``Evidence``: the registry.

The first five are Chapter 8's "Kill-resume checklist for O-1001" and two delivery rules
(``harness/checklist.py``); the rest are the design's "beyond the five"
(``harness/safety_checks.py``), the checks over the whole history
(``harness/history_checks.py``) and the per-action check (``harness/action_checks.py``).
Each returns a ``CheckResult`` with the evidence lines a human needs to see why. None of
them reads a file or asks the loop anything; ``NEEDS`` says which files' evidence each
one reads. Every check is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.action_checks import ACTION_CHECKS
from harness.check_support import absent as _absent
from harness.checklist import (
    draft_identical,
    exactly_one_delivery,
    not_sent_before_approval,
    parked_until_approval,
    same_key_one_delivery,
    step_continues,
    ticket_server_issued,
)
from harness.history_checks import HISTORY_CHECKS
from harness.model import CheckResult, Evidence, EvidenceSource
from harness.safety_checks import (
    intake_not_repeated,
    no_process_left,
    no_tampering,
    storage_safe,
)

__all__ = ["CHECKS", "CHECK_IDS", "NEEDS", "CheckFailed", "CheckResult", "_absent",
           "draft_identical", "exactly_one_delivery", "intake_not_repeated",
           "no_process_left", "no_tampering", "not_sent_before_approval",
           "parked_until_approval", "run_checks", "same_key_one_delivery", "step_continues",
           "storage_safe", "ticket_server_issued"]


class CheckFailed(AssertionError):
    """Raised by the pytest plugin for a failing execution (an ``AssertionError``, so pytest
    shows a failure, not an error)."""


CHECKS: tuple[Callable[[Evidence], CheckResult], ...] = (
    draft_identical,
    parked_until_approval,
    not_sent_before_approval,
    step_continues,
    same_key_one_delivery,
    exactly_one_delivery,
    ticket_server_issued,
    intake_not_repeated,
    storage_safe,
    no_process_left,
    no_tampering,
    *HISTORY_CHECKS,
    *ACTION_CHECKS,
)
CHECK_IDS: tuple[str, ...] = tuple(c.__name__ for c in CHECKS)

_C, _A, _G = EvidenceSource.CHECKPOINTS, EvidenceSource.APPROVALS, EvidenceSource.GATEWAY
_T = EvidenceSource.TARGET  # a [target]'s durable state, in place of the checkpoints
#: The files each check reads: a check whose file could not be read is undecided
#: (``harness.verdict.decide``). A check not listed reads all of them.
NEEDS: dict[str, frozenset[EvidenceSource]] = {
    "draft_identical": frozenset({_C, _A, _G, _T}),
    "parked_until_approval": frozenset({_C}),
    "not_sent_before_approval": frozenset({_C, _G}),
    "step_continues": frozenset({_C, _T}),
    "same_key_one_delivery": frozenset({_C, _G, _T}),
    "exactly_one_delivery": frozenset({_C, _G, _T}),
    "ticket_server_issued": frozenset({_C, _A, _G}),
    "intake_not_repeated": frozenset(),
    "storage_safe": frozenset({_C}),
    "no_process_left": frozenset(),
    "no_tampering": frozenset({_G}),  # the trace, and the gateway log's forged headers
    "no_request_after_done": frozenset({_C, _G}),
    "phase_path": frozenset({_C}),
    "lease_exclusive": frozenset({_C}),
    "rejection_respected": frozenset({_C, _A, _G}),
    "attempts_bounded": frozenset({_C}),
    "per_action": frozenset({_C, _A, _G}),
    "history_not_replaced": frozenset({_C}),
}


def run_checks(ev: Evidence) -> tuple[CheckResult, ...]:
    """Every check, in ``CHECKS`` order."""
    return tuple(check(ev) for check in CHECKS)
