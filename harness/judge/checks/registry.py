"""The kill-resume checklist as pure functions over ``Evidence``: the registry.

The first five are Chapter 8's "Kill-resume checklist for O-1001" and two delivery rules
(``harness/judge/checks/checklist.py``); the rest are the design's "beyond the five"
(``harness/judge/checks/safety.py``), the checks over the whole history
(``harness/judge/checks/history.py``) and the per-action check
(``harness/judge/checks/actions.py``) and asking the human once
(``harness/judge/checks/asked.py``). One checklist for every loop under test: each check
reads neutral observations, and is not applicable only where the loop's history source
cannot show what it needs (``Check.requires``). Each returns a ``CheckResult`` with the evidence
lines a human needs to see why. None of them reads a file or asks the loop anything; each ``Check``
says which sources of evidence it reads. Every check is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.judge.checks.actions import per_action
from harness.judge.checks.asked import asked_once
from harness.judge.checks.checklist import (
    draft_identical,
    exactly_one_delivery,
    not_sent_before_approval,
    parked_until_approval,
    same_key_one_delivery,
    step_continues,
    ticket_consumed_first,
    ticket_server_issued,
)
from harness.judge.checks.history import (
    attempts_bounded,
    commits_durable,
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
from harness.model import CheckId, CheckResult, Evidence, EvidenceSource, Observable

__all__ = ["CHECKS", "CHECK_IDS", "Check", "CheckFailed", "CheckResult", "_absent",
           "draft_identical", "exactly_one_delivery", "intake_not_repeated",
           "no_process_left", "no_tampering", "not_sent_before_approval",
           "parked_until_approval", "run_checks", "same_key_one_delivery", "step_continues",
           "applicability", "asked_once", "needs", "storage_safe", "ticket_consumed_first",
           "ticket_server_issued"]


class CheckFailed(AssertionError):
    """Raised by the pytest plugin for a failing execution (an ``AssertionError``, so pytest
    shows a failure, not an error)."""


_C, _A, _G = EvidenceSource.CHECKPOINTS, EvidenceSource.APPROVALS, EvidenceSource.GATEWAY
_T = EvidenceSource.TARGET  # a target's history, in place of the checkpoint store
_H = (_C, _T)  # the loop's durable history, wherever it was read
_O = Observable


@dataclass(frozen=True)
class Check:
    """One check of the checklist: its ``id``, the function that judges it, the sources of
    evidence it reads (``needs``: a check whose source could not be read is undecided,
    ``harness.judge.verdict.decide``) and what it needs a loop's history to show
    (``requires``: where the history's source cannot show it, ``History.observes``, the
    check is not applicable); ``shows``: ``applicability``'s two columns (what it needs,
    whether it applies to a target) where ``requires`` does not say it (a check that
    decides its applicability itself).
    Calling it runs it, or gives its not-applicable result."""

    id: CheckId
    run: Callable[[Evidence], CheckResult]
    needs: frozenset[EvidenceSource]
    requires: frozenset[Observable] = frozenset()
    shows: tuple[str, str] | None = None

    def __call__(self, ev: Evidence) -> CheckResult:
        """``run(ev)``, or not applicable when ``ev.history`` cannot show ``requires``."""
        missing = self.requires - ev.history.observes
        if missing:
            return CheckResult(self.id, False, f"not applicable: the {ev.history.source} "
                               f"cannot show {', '.join(sorted(missing))} "
                               f"({ev.history.cannot})", applicable=False)
        return self.run(ev)


def _check(check_id: CheckId, run: Callable[[Evidence], CheckResult],
           needs: tuple[EvidenceSource, ...], *requires: Observable,
           shows: tuple[str, str] | None = None) -> Check:
    return Check(check_id, run, frozenset(needs), frozenset(requires), shows)


#: What ``history_not_replaced`` needs (``Check.shows``): not applicable only for a target
#: without ``history``, which it says itself.
_ONE_HISTORY = ("rows, or a target's history read after each worker",
                "when it has a history: each read after a worker begins with the one before")

#: Every check, one per ``CheckId``, in its order (a test says so). ``docs/contract.md``'s
#: table of what applies to which loop is made from ``requires``.
CHECKS: tuple[Check, ...] = (
    _check(CheckId.DRAFT_IDENTICAL, draft_identical, (*_H, _A, _G), _O.DRAFT),
    _check(CheckId.PARKED_UNTIL_APPROVAL, parked_until_approval, _H, _O.PHASE),
    _check(CheckId.NOT_SENT_BEFORE_APPROVAL, not_sent_before_approval, (*_H, _G)),
    _check(CheckId.STEP_CONTINUES, step_continues, _H, _O.STEP),
    _check(CheckId.SAME_KEY_ONE_DELIVERY, same_key_one_delivery, (*_H, _G)),
    _check(CheckId.EXACTLY_ONE_DELIVERY, exactly_one_delivery, (*_H, _G)),
    _check(CheckId.TICKET_SERVER_ISSUED, ticket_server_issued, (*_H, _A, _G), _O.TICKET),
    _check(CheckId.INTAKE_NOT_REPEATED, intake_not_repeated, (), _O.ROWS),
    _check(CheckId.STORAGE_SAFE, storage_safe, (_C,), _O.ROWS),
    _check(CheckId.NO_PROCESS_LEFT, no_process_left, ()),
    _check(CheckId.NO_TAMPERING, no_tampering, (_G,)),  # the trace, and forged headers
    _check(CheckId.NO_REQUEST_AFTER_DONE, no_request_after_done, (*_H, _G)),
    _check(CheckId.PHASE_PATH, phase_path, _H, _O.PHASE),
    _check(CheckId.LEASE_EXCLUSIVE, lease_exclusive, _H, _O.LEASE),
    _check(CheckId.REJECTION_RESPECTED, rejection_respected, (*_H, _A, _G), _O.PHASE, _O.DRAFT),
    _check(CheckId.ATTEMPTS_BOUNDED, attempts_bounded, _H, _O.ROWS),
    _check(CheckId.HISTORY_NOT_REPLACED, history_not_replaced, _H,
           shows=_ONE_HISTORY),
    _check(CheckId.PER_ACTION, per_action, (*_H, _A, _G)),
    _check(CheckId.ASKED_ONCE, asked_once, (_A,)),
    _check(CheckId.COMMITS_DURABLE, commits_durable, (_C,), _O.ROWS),
    _check(CheckId.TICKET_CONSUMED_FIRST, ticket_consumed_first, (_A, _G)),
)
CHECK_IDS: tuple[CheckId, ...] = tuple(c.id for c in CHECKS)
_BY_ID: dict[CheckId, Check] = {c.id: c for c in CHECKS}


def needs(check_id: CheckId) -> frozenset[EvidenceSource]:
    """The sources of evidence the check ``check_id`` reads (``Check.needs``)."""
    return _BY_ID[check_id].needs


def applicability() -> str:
    """The Markdown table of ``docs/contract.md``, "What is judged, per kind of loop": each
    check, what it needs a history to show (``Check.requires``), and whether it applies to a
    package's checkpoint store (which shows everything) and to a target's ``history`` (which
    shows what it reports, never the stored rows: ``Observable.ROWS``)."""
    out = ["| check | needs the history to show | package (checkpoint store) "
           "| target (its `history`) |", "|---|---|---|---|"]
    for c in CHECKS:
        needs = ", ".join(sorted(c.requires))
        if not c.requires:
            target = "yes"
        elif Observable.ROWS in c.requires:
            target = "no: the stored rows themselves"
        else:
            target = f"when its history reports {needs}"
        shown = needs or "— (the harness's own evidence)"
        if c.shows is not None:
            shown, target = c.shows
        out.append(f"| `{c.id}` | {shown} | yes | {target} |")
    return "\n".join(out) + "\n"


def run_checks(ev: Evidence) -> tuple[CheckResult, ...]:
    """Every check, in ``CHECKS`` order, for any loop: the reference, a package, a target."""
    return tuple(check(ev) for check in CHECKS)
