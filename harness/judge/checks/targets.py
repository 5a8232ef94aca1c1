"""The checklist for a loop that is not the reference (a ``[target]``): the same check ids
as ``harness.judge.checks.registry`` (Chapter 8's kill-resume checklist and the design's "beyond the
five"), restated over what any target leaves behind — the harness's trace, the gateway's
ledger (the one judge of deliveries, for every target) and the target's own durable state
read through its API (``Evidence.target_states``).

A check that needs state the target does not expose (``Evidence.target_exposes``), or the
reference loop's own checkpoint schema, is **not applicable**
(``CheckResult.applicable = False``, status ``not_applicable``): never a pass, never an
unknown, and the verdict ignores it (``docs/design.md``, "Targets").
"""

from __future__ import annotations

from collections.abc import Callable

from harness.judge.checks.registry import CHECK_IDS, _absent, no_process_left, no_tampering
from harness.judge.checks.support import draft_digest
from harness.model import CheckId, CheckResult, EventKind, Evidence, StateField

__all__ = ["REFERENCE_ONLY", "TARGET_CHECKS", "not_applicable", "target_checks"]


def not_applicable(check_id: CheckId, ev: Evidence, needs: str) -> CheckResult:
    """The result of a check the target cannot feed: ``needs`` says what is missing."""
    return CheckResult(check_id, False, f"not applicable: target {ev.target!r} does not "
                       f"expose {needs}", applicable=False)


def _requests(ev: Evidence) -> list[str]:
    return [f"gateway request {r.seq}: status {r.status} key {r.idempotency_key} "
            f"pid {r.worker_pid}" for r in ev.gateway.requests if r.case_id == ev.case_id]


def exactly_one_delivery(ev: Evidence) -> CheckResult:
    """The case ends with the deliveries the scenario expects (the ledger: one, or none),
    and where the target exposes ``sent`` its final durable state says it sent."""
    deliveries = ev.gateway.deliveries_for(ev.case_id)
    lines = [f"delivery {d.delivery_id} at {d.delivered_at} key {d.idempotency_key}"
             for d in deliveries]
    final = ev.target_states[-1] if ev.target_states else None
    if final is not None:
        lines.append(f"final durable state: phase {final.phase} sent {final.sent}")
    if len(deliveries) != ev.expected_deliveries:
        result = CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False, f"{len(deliveries)} deliveries "
                             f"for {ev.case_id}, expected {ev.expected_deliveries}",
                             tuple(lines))
        return _absent(ev, result) if not deliveries else result
    if (StateField.SENT in ev.target_exposes and ev.expected_deliveries
            and (final is None or final.sent is not True)):
        return _absent(ev, CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False, "delivered, but the "
                                       "target's final durable state does not say it sent",
                                       tuple(lines)))
    return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, True,
                       f"{len(deliveries)} delivery(ies), as expected", tuple(lines))


def not_sent_before_approval(ev: Evidence) -> CheckResult:
    """Nothing is delivered before the human approved (the order of the harness's own
    trace: the gateway's delivery events against the approval event)."""
    early = [e for e in ev.events if e.kind == EventKind.DELIVERY
             and (ev.approval_event is None or e.seq < ev.approval_event)]
    lines = tuple(f"trace seq {e.seq}: delivery {e.detail} before the approval"
                  for e in early)
    if early:
        return CheckResult(CheckId.NOT_SENT_BEFORE_APPROVAL, False,
                           f"{len(early)} delivery(ies) before the approval", lines)
    return CheckResult(CheckId.NOT_SENT_BEFORE_APPROVAL, True, "nothing delivered before the "
                       "approval")


def same_key_one_delivery(ev: Evidence) -> CheckResult:
    """Every send request of the case carries one idempotency key — the key the target
    made durable, where it exposes ``key`` — and at most one delivery came of it (the
    ledger)."""
    sends = [r for r in ev.gateway.requests if r.case_id == ev.case_id]
    keys = {r.idempotency_key for r in sends}
    deliveries = ev.gateway.deliveries_for(ev.case_id)
    lines = _requests(ev)
    durable = {s.key for s in ev.target_states if s.key} if (
        StateField.KEY in ev.target_exposes) else set()
    lines += [f"durable key {k}" for k in sorted(durable)]
    if not sends:
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, True, "no send request", tuple(lines))
    if None in keys:
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, False,
                           f"{sum(r.idempotency_key is None for r in sends)} send request(s) "
                           "without an idempotency key", tuple(lines))
    if len(keys) > 1 or len(deliveries) > 1:
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, False, f"{len(keys)} key(s), "
                           f"{len(deliveries)} deliveries", tuple(lines))
    if durable and not keys <= durable:
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, False, "the key sent is not the key the "
                           "target made durable", tuple(lines))
    return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, True, f"{len(sends)} request(s), one key, "
                       f"{len(deliveries)} delivery", tuple(lines))


def draft_identical(ev: Evidence) -> CheckResult:
    """The durable draft never changes once written, and what the gateway delivered is
    that draft (to, subject, body)."""
    if StateField.DRAFT not in ev.target_exposes:
        return not_applicable(CheckId.DRAFT_IDENTICAL, ev, "its draft")
    drafts: list[str] = []
    for s in ev.target_states:
        if s.draft:
            d = s.draft
            digest = draft_digest(str(d.get("to")), str(d.get("subject")), str(d.get("body")))
            if not drafts or drafts[-1] != digest:
                drafts.append(digest)
    delivered = [(d.delivery_id, draft_digest(d.to, d.subject, d.body))
                 for d in ev.gateway.deliveries_for(ev.case_id)]
    lines = [f"durable draft {d[:12]}" for d in drafts]
    lines += [f"delivery {i}: to+subject+body {g[:12]}" for i, g in delivered]
    if len(set(drafts)) > 1 or len(drafts) > len(set(drafts)):
        return CheckResult(CheckId.DRAFT_IDENTICAL, False,
                           f"the durable draft changed ({len(set(drafts))} different drafts)",
                           tuple(lines))
    if delivered and (not drafts or any(g != drafts[0] for _, g in delivered)):
        return CheckResult(CheckId.DRAFT_IDENTICAL, False, "a delivered text is not the durable "
                           "draft", tuple(lines))
    return CheckResult(CheckId.DRAFT_IDENTICAL, True, "one durable draft, delivered as written",
                       tuple(lines))


def step_continues(ev: Evidence) -> CheckResult:
    """The durable ``step`` never goes down across resume."""
    if StateField.STEP not in ev.target_exposes:
        return not_applicable(CheckId.STEP_CONTINUES, ev, "a step counter")
    steps = [s.step for s in ev.target_states if s.step is not None]
    down = [(a, b) for a, b in zip(steps, steps[1:], strict=False) if b < a]
    lines = (f"durable steps: {', '.join(map(str, steps)) or 'none'}",)
    if down:
        return CheckResult(CheckId.STEP_CONTINUES, False, f"step went from {down[0][0]} to "
                           f"{down[0][1]}", lines)
    return CheckResult(CheckId.STEP_CONTINUES, True, f"{len(steps)} snapshot(s), step never "
                       "decreased", lines)


#: The checks a target can feed, by id; every other id of
#: ``harness.judge.checks.registry.CHECK_IDS`` reads the reference loop's own checkpoint schema and
#: is not applicable.
TARGET_CHECKS: dict[str, Callable[[Evidence], CheckResult]] = {
    CheckId.DRAFT_IDENTICAL: draft_identical,
    CheckId.NOT_SENT_BEFORE_APPROVAL: not_sent_before_approval,
    CheckId.STEP_CONTINUES: step_continues,
    CheckId.SAME_KEY_ONE_DELIVERY: same_key_one_delivery,
    CheckId.EXACTLY_ONE_DELIVERY: exactly_one_delivery,
    CheckId.NO_PROCESS_LEFT: no_process_left,
    CheckId.NO_TAMPERING: no_tampering,
}
REFERENCE_ONLY: tuple[str, ...] = tuple(c for c in CHECK_IDS if c not in TARGET_CHECKS)


def target_checks(ev: Evidence) -> tuple[CheckResult, ...]:
    """Every check of ``harness.judge.checks.registry.CHECK_IDS``, in that order, over a target's
    evidence: ``TARGET_CHECKS`` run, the rest not applicable."""
    return tuple(TARGET_CHECKS[c](ev) if c in TARGET_CHECKS else
                 not_applicable(c, ev, "the reference loop's checkpoint schema")
                 for c in CHECK_IDS)
