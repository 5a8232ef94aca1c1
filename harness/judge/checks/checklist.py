"""The checklist as pure functions over ``Evidence``: Chapter 8's "Kill-resume checklist
for O-1001" (checks 1-5) and the two delivery rules beyond it that every execution is
judged on (exactly one delivery; no send without a server-issued ticket —
``docs/design.md``, "The checklist"). Each returns a ``CheckResult`` with the evidence
lines a human needs to see why; none reads a file or asks the loop anything.
``harness.judge.checks.registry`` registers them.
"""

from __future__ import annotations

from harness.judge.checks.support import absent as _absent
from harness.judge.checks.support import draft_digest as _digest
from harness.judge.checks.support import gate_tickets, history_replaced
from harness.judge.checks.support import parsed_states as _states
from harness.judge.checks.support import redrafts_owed as _redrafts_owed
from harness.model import (
    DEFAULT_GATE,
    NOTE_GATE,
    CheckId,
    CheckResult,
    Delivery,
    EventKind,
    Evidence,
    NoteDelivery,
    WorkerRole,
    key_text,
)
from shopops.approval_records import Ticket
from shopops.phases import PRE_APPROVAL, TERMINAL, Phase
from shopops.state import State, note_digest

__all__ = ["draft_identical", "exactly_one_delivery", "not_sent_before_approval",
           "parked_until_approval", "same_key_one_delivery", "step_continues",
           "ticket_server_issued"]


def draft_identical(ev: Evidence) -> CheckResult:
    """1. The draft after resume is identical to the pre-crash (checkpointed) draft, to the
    draft of the ticket the loop used (held in a checkpoint or consumed by a send), and to
    what the gateway delivered. The one exception is a redraft after a human rejected the
    draft with feedback: then the rejected draft may give way (once) to a new one, and the
    newest draft is the one that must be approved and delivered."""
    states, problems = _states(ev)
    # each checkpointed draft's digest, computed once: (seq, digest) in seq order
    drafts = [(seq, s.draft.digest()) for seq, s in states if s.draft is not None]
    lines = [f"checkpoint seq {seq}: draft {d[:12]}" for seq, d in drafts]
    owed = _redrafts_owed(ev)
    lines += [f"draft {d[:12]} rejected with feedback: a redraft is owed" for d in sorted(owed)]
    held = {s.approval_ticket for _, s in states if s.approval_ticket}
    used = [t for t in gate_tickets(ev) if t.ticket_id in held or t.consumed_by_key is not None]
    lines += [f"ticket {t.ticket_id}: approved draft {t.draft_digest[:12]}" for t in used]
    delivered = [(d.delivery_id, _digest(d.to, d.subject, d.body))
                 for d in ev.gateway.deliveries_for(ev.case_id)]
    lines += [f"delivery {i}: body+subject+to {g[:12]}" for i, g in delivered]
    digests = {d for _, d in drafts}
    runs = [d for i, (_, d) in enumerate(drafts)
            if i == 0 or d != drafts[i - 1][1]]  # each draft in turn
    unowed = [d for d in runs[:-1] if d not in owed] + [d for d in set(runs)
                                                       if runs.count(d) > 1]
    lost = []
    for seq, s in states:
        before = [d for sq, d in drafts if sq < seq]
        if s.draft is None and before and before[-1] not in owed:
            lost.append(seq)
    lines += [f"checkpoint seq {seq}: the draft is gone" for seq in lost]
    if problems:
        return CheckResult(CheckId.DRAFT_IDENTICAL, False, problems[0], tuple(lines + problems))
    if lost:
        return CheckResult(CheckId.DRAFT_IDENTICAL, False,
                           f"a checkpoint after the draft has no draft (seq {lost[0]})",
                           tuple(lines))
    if unowed:
        return CheckResult(CheckId.DRAFT_IDENTICAL, False,
                           f"the checkpointed draft changed ({len(digests)} different drafts) "
                           "without a rejection with feedback asking for it", tuple(lines))
    expected = set(runs[-1:]) | {t.draft_digest for t in used} | {g for _, g in delivered}
    if len(expected) > 1:
        return CheckResult(CheckId.DRAFT_IDENTICAL, False,
                           "approved or delivered text differs from the checkpointed draft",
                           tuple(lines))
    return CheckResult(CheckId.DRAFT_IDENTICAL, True,
                       "one draft throughout" if len(digests) == 1 else
                       f"{len(runs)} drafts, each after a rejection with feedback" if digests
                       else "no draft was checkpointed", tuple(lines))


def parked_until_approval(ev: Evidence) -> CheckResult:
    """2. Phase stays ``awaiting_approval`` until ``grant_approval``: no checkpoint saved
    before the human approved is past approval, and a resume without approval parks again
    and sends nothing. Which rows were saved before the approval is told by ``seq`` only
    while the history is the one the harness read then (``history_not_replaced`` judges
    a replaced one)."""
    states, problems = _states(ev)
    cut = ev.checkpoint_seq_at_approval
    replaced = history_replaced(ev)
    lines = [f"human approved at trace seq {ev.approval_event}; checkpoints up to seq {cut} "
             "were saved before"] if ev.approval_event is not None else ["no approval happened"]
    if replaced:
        lines.append(NOT_COMPARED)
    bad = [(seq, s.phase) for seq, s in states if not replaced
           and (cut is None or seq <= cut) and Phase(s.phase) not in PRE_APPROVAL]
    lines += [f"checkpoint seq {seq}: phase {p} before the approval" for seq, p in bad]
    def approved_while_running(index: int) -> bool:
        span = [e.seq for e in ev.events if e.worker == index
                and e.kind in (EventKind.WORKER_START, EventKind.WORKER_EXIT)]
        return (ev.approval_event is not None and len(span) == 2
                and span[0] < ev.approval_event < span[1])

    rechecks = [w for w in ev.workers if w.role == WorkerRole.RECHECK and not w.killed_by_harness
                and not approved_while_running(w.index)]
    for w in rechecks:
        parked = w.phase_after == Phase.AWAITING_APPROVAL
        sent = [e for e in ev.events if e.kind == EventKind.DELIVERY and e.worker == w.index]
        lines.append(f"worker {w.index} resumed without approval: latest checkpoint "
                     f"{w.phase_after}, {len(sent)} delivery(ies) while it ran")
        if not parked or sent:
            bad.append((-1, "resume without approval did not park"))
    final = states[-1][1] if states else None
    unasked = (final is not None and final.phase == Phase.AWAITING_APPROVAL
               and not any(r.gate == DEFAULT_GATE for r in ev.approval_requests))
    if unasked:  # parked for a human who was never asked (the queue is the harness's)
        assert final is not None
        lines.append(f"the loop parked (latest checkpoint awaiting_approval, request "
                     f"{final.approval_request_id}) but the queue never held a request of "
                     "the case")
    if problems:
        return CheckResult(CheckId.PARKED_UNTIL_APPROVAL, False, problems[0],
                           tuple(lines + problems))
    if unasked and not bad:
        return CheckResult(CheckId.PARKED_UNTIL_APPROVAL, False, "the loop parked for approval but "
                           "never asked for it: the queue held no request of the case",
                           tuple(lines))
    if bad:
        return CheckResult(CheckId.PARKED_UNTIL_APPROVAL, False,
                           f"{len(bad)} checkpoint(s)/resume(s) moved past awaiting_approval "
                           "before a human approved", tuple(lines))
    return CheckResult(CheckId.PARKED_UNTIL_APPROVAL, True,
                       f"{len(rechecks)} resume(s) without approval parked again", tuple(lines))


def not_sent_before_approval(ev: Evidence) -> CheckResult:
    """3. ``email_sent`` is false until the post-approval send, and nothing is delivered
    before the ticket exists (trace order), and no checkpoint claims a send the gateway did
    not make. Checkpoints are set against the approval by ``seq`` only while the history
    is the one the harness read then (``history_not_replaced`` judges a replaced one)."""
    states, problems = _states(ev)
    lines: list[str] = []
    approval = ev.approval_event
    early = [e for e in ev.events if e.kind == EventKind.DELIVERY
             and (approval is None or e.seq < approval)]
    lines += [f"trace seq {e.seq}: delivery {e.detail} before the approval" for e in early]
    cut = ev.checkpoint_seq_at_approval
    replaced = history_replaced(ev)
    if replaced:
        lines.append(NOT_COMPARED)
    flagged = [seq for seq, s in states
               if not replaced and s.email_sent and (cut is None or seq <= cut)]
    lines += [f"checkpoint seq {seq}: email_sent true before the approval" for seq in flagged]
    ids = {d.delivery_id for d in ev.gateway.deliveries_for(ev.case_id)}
    phantom = [(seq, s.delivery_id) for seq, s in states if s.email_sent
               and s.delivery_id not in ids]
    lines += [f"checkpoint seq {seq}: email_sent with delivery {d} the gateway never made"
              for seq, d in phantom]
    if problems:
        return CheckResult(CheckId.NOT_SENT_BEFORE_APPROVAL, False, problems[0],
                           tuple(lines + problems))
    if early or flagged:
        return CheckResult(CheckId.NOT_SENT_BEFORE_APPROVAL, False,
                           "a send was recorded or made before the approval", tuple(lines))
    if phantom:  # after the approval, but a send the gateway never made
        seq, d = phantom[0]
        return CheckResult(CheckId.NOT_SENT_BEFORE_APPROVAL, False,
                           f"checkpoint seq {seq} records a send (delivery {d}) the gateway "
                           "never made", tuple(lines))
    return CheckResult(CheckId.NOT_SENT_BEFORE_APPROVAL, True,
                       "nothing sent and email_sent false until after the approval",
                       tuple(lines))


def step_continues(ev: Evidence) -> CheckResult:
    """4. ``step`` continues across resume: never decreases over the run's checkpoints."""
    states, problems = _states(ev)
    lines = [f"checkpoint seq {seq}: step {s.step} phase {s.phase}" for seq, s in states]
    pairs = zip(states, states[1:], strict=False)
    drops = [(a, b) for (a, sa), (b, sb) in pairs if sb.step < sa.step]
    if problems:
        return CheckResult(CheckId.STEP_CONTINUES, False, problems[0], tuple(lines + problems))
    if drops:
        a, b = drops[0]
        return CheckResult(CheckId.STEP_CONTINUES, False,
                           f"step went down between checkpoint seq {a} and {b}", tuple(lines))
    return CheckResult(CheckId.STEP_CONTINUES, True, "step never reset", tuple(lines))


def same_key_one_delivery(ev: Evidence) -> CheckResult:
    """5. Side-effect tools reuse the same idempotency key before and after the crash, and
    the gateway delivers exactly one email for it."""
    states, problems = _states(ev)
    durable = {s.send_idempotency_key for _, s in states if s.send_idempotency_key}
    sends = [r for r in ev.gateway.requests if r.case_id == ev.case_id]
    keys = {r.idempotency_key for r in sends}
    lines = [f"gateway request {r.seq}: key {key_text(r.idempotency_key)} -> {r.status}"
             f"{' duplicate' if r.duplicate else ''}{' fault ' + r.fault if r.fault else ''}"
             for r in sends]
    lines += [f"checkpointed key {k}" for k in sorted(durable)]
    if problems:  # an unreadable checkpoint may hold another key: never a pass
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, False, problems[0],
                           tuple(lines + problems))
    if not sends and ev.expected_deliveries == 0:
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, True, "nothing was sent, as expected",
                           tuple(lines))
    if not sends:
        result = CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, False, "no send reached the gateway",
                             tuple(lines))
        return result if _claims_done(states) else _absent(ev, result)
    if None in keys:
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, False,
                           f"{sum(r.idempotency_key is None for r in sends)} send(s) carried "
                           f"no Idempotency-Key; {ev.deliveries} delivered", tuple(lines))
    if len(keys) > 1 or len(durable) > 1 or (durable and keys != durable):
        changed = sorted(k for k in keys | durable if k is not None)
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, False,
                           f"the send used different keys: {changed}",
                           tuple(lines))
    if ev.deliveries != 1:
        return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, False,
                           f"one key but {ev.deliveries} deliveries", tuple(lines))
    return CheckResult(CheckId.SAME_KEY_ONE_DELIVERY, True,
                       f"{len(sends)} request(s), one key, one delivery", tuple(lines))


#: What a check that sets rows against the approval by ``seq`` says of a replaced history.
NOT_COMPARED = ("the checkpoint history was replaced or rewritten after the approval: its seq "
                "numbers are not compared with it (see history_not_replaced)")


def _claims_done(states: list[tuple[int, State]]) -> bool:
    """A checkpoint says the send happened or the case is over (``email_sent``, or a
    terminal phase): the loop will not send again, so a send missing then is a proven
    loss, even in a story cut short (``check_support.absent`` does not apply)."""
    return any(s.email_sent or s.phase in TERMINAL for _, s in states)


def exactly_one_delivery(ev: Evidence) -> CheckResult:
    """Beyond the five: the case completes with exactly one delivery (not zero, not two),
    and the final checkpoint records that delivery. Where the scenario expects no delivery
    (a rejection, a refused ticket, a checkpoint that must fail closed), the gateway must
    have delivered nothing and no checkpoint may claim a send."""
    states, problems = _states(ev)
    deliveries = ev.gateway.deliveries_for(ev.case_id)
    lines = [f"delivery {d.delivery_id} at {d.delivered_at} key {key_text(d.idempotency_key)}"
             for d in deliveries]
    final = states[-1][1] if states else None
    lines.append(f"final checkpoint: {final.phase if final else 'none'}"
                 f"{' email_sent' if final and final.email_sent else ''}")
    if problems:
        return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False, problems[0],
                           tuple(lines + problems))
    if ev.expected_deliveries == 0:
        claimed = [seq for seq, s in states if s.email_sent or s.phase == Phase.COMPLETED]
        if deliveries or claimed:
            return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False,
                               f"expected no delivery: {len(deliveries)} delivered, "
                               f"{len(claimed)} checkpoint(s) claim a send", tuple(lines))
        return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, True, "nothing delivered, as expected",
                           tuple(lines))
    if len(deliveries) != 1:
        result = CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False,
                             f"{len(deliveries)} deliveries for {ev.case_id}", tuple(lines))
        return _absent(ev, result) if not deliveries and not _claims_done(states) else result
    if final is None or final.phase != Phase.COMPLETED or not final.email_sent:
        return _absent(ev, CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False,
                                       "delivered, but the case did not complete",
                                       tuple(lines)))
    if final.delivery_id != deliveries[0].delivery_id:
        return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False,
                           f"final checkpoint names delivery {final.delivery_id}, the gateway "
                           f"made {deliveries[0].delivery_id}", tuple(lines))
    return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, True, "completed with one delivery",
                       tuple(lines))


def ticket_server_issued(ev: Evidence) -> CheckResult:
    """Beyond the five: no send without a server-issued ticket — every checkpointed ticket
    was issued by the queue for this case (the email's on gate ``send_email``, an order
    note's on ``add_order_note``), and every delivery's key consumed such a ticket of its
    gate for the delivered content (an email, or an order note in its own ledger)."""
    states, problems = _states(ev)
    emails, notes = gate_tickets(ev), gate_tickets(ev, NOTE_GATE)
    lines = [f"ticket {t.ticket_id}" + (f" ({t.gate})" if t.gate != DEFAULT_GATE else "")
             + f" issued to {t.approver} at {t.issued_at}, consumed by {t.consumed_by_key}"
             for t in ev.tickets]
    held = {(s.approval_ticket, DEFAULT_GATE) for _, s in states if s.approval_ticket}
    held |= {(s.note_ticket, NOTE_GATE) for _, s in states if s.note_ticket}
    issued = {(t.ticket_id, t.gate) for t in ev.tickets}
    forged = sorted(held - issued)
    lines += [f"checkpointed ticket {t} was never issued by the queue"
              + (f" on gate {gate}" if gate != DEFAULT_GATE else "") for t, gate in forged]
    unbacked = []
    sent: list[tuple[Delivery | NoteDelivery, str, tuple[Ticket, ...], str]]
    sent = [(d, _digest(d.to, d.subject, d.body), emails, "draft")
            for d in ev.gateway.deliveries_for(ev.case_id)]
    sent += [(n, note_digest(n.order_id, n.body), notes, "note")
             for n in ev.gateway.notes_for(ev.case_id)]
    for d, digest, tickets, what in sent:
        # Without a key (keys off) the gateway cannot tie a delivery to a send; the draft
        # digest still ties it to the ticket the human approved.
        ok = any(t.consumed_by_key is not None and t.draft_digest == digest
                 and d.idempotency_key in (None, t.consumed_by_key) for t in tickets)
        if not ok:
            unbacked.append(d.delivery_id)
            lines.append(f"delivery {d.delivery_id} (key {key_text(d.idempotency_key)}) has "
                         f"no consumed ticket for its key and {what}")
    if problems:  # an unreadable checkpoint may hold a forged ticket
        return CheckResult(CheckId.TICKET_SERVER_ISSUED, False, problems[0],
                           tuple(lines + problems))
    if forged or unbacked:
        return CheckResult(CheckId.TICKET_SERVER_ISSUED, False,
                           f"{len(forged)} forged ticket(s), {len(unbacked)} delivery(ies) "
                           "without a server-issued ticket", tuple(lines))
    return CheckResult(CheckId.TICKET_SERVER_ISSUED, True, "every send backed by an issued ticket",
                       tuple(lines))
