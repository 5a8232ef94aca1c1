"""The checklist as pure functions over ``Evidence``: Chapter 8's "Kill-resume checklist
for O-1001" (checks 1-5) and the two delivery rules beyond it that every execution is
judged on (exactly one delivery; no send without a server-issued ticket —
``docs/design.md``, "The checklist"). Each reads the loop's durable writes as neutral
observations (``support.writes``) beside the harness's own trace, gateway ledger and
approval records, and returns a ``CheckResult`` with the lines a human needs to see why;
none reads a file or asks the loop anything. ``harness.judge.checks.registry`` registers
them with what each needs observed.
"""

from __future__ import annotations

from harness.judge.checks.support import absent as _absent
from harness.judge.checks.support import draft_digest as _digest
from harness.judge.checks.support import gate_tickets, history_replaced
from harness.judge.checks.support import redrafts_owed as _redrafts_owed
from harness.judge.checks.support import writes as _writes
from harness.model import (
    DEFAULT_GATE,
    NOTE_GATE,
    CheckId,
    CheckResult,
    Delivery,
    DurableWrite,
    EventKind,
    Evidence,
    HistorySource,
    NoteDelivery,
    TicketRecord,
    WorkerRole,
    key_text,
)
from shopops_contract.digests import note_digest
from shopops_contract.phases import PRE_APPROVAL, TERMINAL, Phase

__all__ = ["NOT_COMPARED", "draft_identical", "exactly_one_delivery",
           "not_sent_before_approval", "parked_until_approval", "same_key_one_delivery",
           "step_continues", "ticket_consumed_first", "ticket_server_issued"]

#: What a check that sets rows against the approval by ``seq`` says of a replaced history.
NOT_COMPARED = ("the checkpoint history was replaced or rewritten after the approval: its seq "
                "numbers are not compared with it (see history_not_replaced)")


def _store(ev: Evidence) -> bool:
    """The writes come from the contract's checkpoint store, whose ``seq`` the harness also
    read when the human approved and after each worker (a target's history is numbered by
    its own order; its reads after each worker are judged by ``history_not_replaced``)."""
    return ev.history.source is HistorySource.CHECKPOINT_STORE


def draft_identical(ev: Evidence) -> CheckResult:
    """1. The draft after resume is identical to the pre-crash (checkpointed) draft, to the
    draft of the ticket the loop used (held in a checkpoint or consumed by a send), and to
    what the gateway delivered. The one exception is a redraft after a human rejected the
    draft with feedback: then the rejected draft may give way (once) to a new one, and the
    newest draft is the one that must be approved and delivered."""
    writes, problems = _writes(ev)
    # each checkpointed draft's digest, computed once: (seq, digest) in seq order
    drafts = [(w.seq, w.draft.digest) for w in writes if w.draft is not None]
    lines = [f"checkpoint seq {seq}: draft {d[:12]}" for seq, d in drafts]
    owed = _redrafts_owed(ev)
    lines += [f"draft {d[:12]} rejected with feedback: a redraft is owed" for d in sorted(owed)]
    held = {w.email.ticket for w in writes if w.email.ticket}
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
    for w in writes:
        before = [d for sq, d in drafts if sq < w.seq]
        if w.draft is None and before and before[-1] not in owed:
            lost.append(w.seq)
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
    and sends nothing; a loop that ends parked has asked for the approval. Which writes came
    before the approval is told by ``seq`` only for the checkpoint store, and only while
    its history is the one the harness read then (``history_not_replaced`` judges a
    replaced one); a target's writes are judged by where its history ends."""
    writes, problems = _writes(ev)
    cut = ev.checkpoint_seq_at_approval
    replaced = history_replaced(ev) if _store(ev) else None  # compared by seq
    compare = _store(ev) and not replaced
    lines = [f"human approved at trace seq {ev.approval_event}; checkpoints up to seq {cut} "
             "were saved before"] if ev.approval_event is not None else ["no approval happened"]
    if replaced:
        lines.append(NOT_COMPARED)
    bad = [(w.seq, str(w.phase)) for w in writes if compare and (cut is None or w.seq <= cut)
           and w.phase is not None and w.phase not in PRE_APPROVAL]
    if not _store(ev) and ev.approval_event is None:  # never approved: never past the park
        bad += [(w.seq, str(w.phase)) for w in writes
                if w.phase is not None and w.phase not in PRE_APPROVAL]
    lines += [f"checkpoint seq {seq}: phase {p} before the approval" for seq, p in bad]

    def approved_while_running(index: int) -> bool:
        span = [e.seq for e in ev.events if e.worker == index
                and e.kind in (EventKind.WORKER_START, EventKind.WORKER_EXIT)]
        return (ev.approval_event is not None and len(span) == 2
                and span[0] < ev.approval_event < span[1])

    rechecks = [w for w in ev.workers if w.role == WorkerRole.RECHECK and not w.killed_by_harness
                and not approved_while_running(w.index)]
    for w in rechecks:
        # the harness reads a store's latest phase after each worker; of a target's history
        # it keeps only digests then (history_not_replaced): its rechecks are judged by
        # what they sent; one the harness killed at its deadline never ended: where it
        # stopped is not judged (wherever the kill landed), only what it sent
        parked = (w.phase_after == Phase.AWAITING_APPROVAL or not _store(ev)
                  or w.timed_out)
        sent = [e for e in ev.events if e.kind == EventKind.DELIVERY and e.worker == w.index]
        lines.append(f"worker {w.index} resumed without approval: latest checkpoint "
                     f"{w.phase_after}, {len(sent)} delivery(ies) while it ran"
                     + (" (killed at its deadline)" if w.timed_out else ""))
        if not parked or sent:
            bad.append((-1, "resume without approval did not park"))
    final = writes[-1] if writes else None
    unasked = (final is not None and final.phase == Phase.AWAITING_APPROVAL
               and not any(r.gate == DEFAULT_GATE for r in ev.approval_requests))
    if unasked:  # parked for a human who was never asked (the queue is the harness's)
        assert final is not None
        lines.append(f"the loop parked (latest checkpoint awaiting_approval, request "
                     f"{final.email.request_id}) but the queue never held a request of "
                     "the case")
    if problems:
        return CheckResult(CheckId.PARKED_UNTIL_APPROVAL, False, problems[0],
                           tuple(lines + problems))
    if unasked and not bad:
        return CheckResult(CheckId.PARKED_UNTIL_APPROVAL, False, "the loop parked for approval "
                           "but never asked for it: the queue held no request of the case",
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
    not make. Checkpoints are set against the approval by ``seq`` only for the checkpoint
    store, while its history is the one the harness read then (``history_not_replaced``
    judges a replaced one); the trace and the ledger judge every loop."""
    writes, problems = _writes(ev)
    lines: list[str] = []
    approval = ev.approval_event
    early = [e for e in ev.events if e.kind == EventKind.DELIVERY
             and (approval is None or e.seq < approval)]
    lines += [f"trace seq {e.seq}: delivery {e.detail} before the approval" for e in early]
    cut = ev.checkpoint_seq_at_approval
    replaced = history_replaced(ev) if _store(ev) else None  # compared by seq
    if replaced:
        lines.append(NOT_COMPARED)
    flagged = [w.seq for w in writes if _store(ev) and not replaced and w.email.sent
               and (cut is None or w.seq <= cut)]
    if not _store(ev) and approval is None:
        flagged += [w.seq for w in writes if w.email.sent]
    lines += [f"checkpoint seq {seq}: email_sent true before the approval" for seq in flagged]
    ids = {d.delivery_id for d in ev.gateway.deliveries_for(ev.case_id)}
    phantom = [(w.seq, w.email.delivery_id) for w in writes if w.email.sent
               and w.email.delivery_id not in ids
               and (_store(ev) or w.email.delivery_id is not None)]
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
    writes, problems = _writes(ev)
    stepped = [w for w in writes if w.step is not None]
    lines = [f"checkpoint seq {w.seq}: step {w.step} phase {w.phase}" for w in stepped]
    drops = [(a.seq, b.seq) for a, b in zip(stepped, stepped[1:], strict=False)
             if b.step is not None and a.step is not None and b.step < a.step]
    if problems:
        return CheckResult(CheckId.STEP_CONTINUES, False, problems[0], tuple(lines + problems))
    if drops:
        a, b = drops[0]
        return CheckResult(CheckId.STEP_CONTINUES, False,
                           f"step went down between checkpoint seq {a} and {b}", tuple(lines))
    return CheckResult(CheckId.STEP_CONTINUES, True, "step never reset", tuple(lines))


def same_key_one_delivery(ev: Evidence) -> CheckResult:
    """5. Side-effect tools reuse the same idempotency key before and after the crash, and
    the gateway delivers exactly one email for it. The gateway's log judges every loop; the
    key a loop made durable is compared where its writes show it."""
    writes, problems = _writes(ev)
    durable = {w.email.key for w in writes if w.email.key}
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
        return result if _claims_done(writes) else _absent(ev, result)
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


def _claims_done(writes: list[DurableWrite]) -> bool:
    """A checkpoint says the send happened or the case is over (``email_sent``, or a
    terminal phase): the loop will not send again, so a send missing then is a proven
    loss, even in a story cut short (``support.absent`` does not apply)."""
    return any(w.email.sent or w.phase in TERMINAL for w in writes)


def exactly_one_delivery(ev: Evidence) -> CheckResult:
    """Beyond the five: the case completes with exactly one delivery (not zero, not two),
    and the final checkpoint records that delivery (its phase ``completed`` and
    ``email_sent`` where the loop's writes show them, its delivery id where they name
    one). Where the scenario expects no delivery (a rejection, a refused ticket, a
    checkpoint that must fail closed), the gateway must have delivered nothing and no
    checkpoint may claim a send."""
    writes, problems = _writes(ev)
    deliveries = ev.gateway.deliveries_for(ev.case_id)
    lines = [f"delivery {d.delivery_id} at {d.delivered_at} key {key_text(d.idempotency_key)}"
             for d in deliveries]
    final = writes[-1] if writes else None
    lines.append(f"final checkpoint: {final.phase if final else 'none'}"
                 f"{' email_sent' if final and final.email.sent else ''}")
    if problems:
        return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False, problems[0],
                           tuple(lines + problems))
    if ev.expected_deliveries == 0:
        claimed = [w.seq for w in writes if w.email.sent or w.phase == Phase.COMPLETED]
        if deliveries or claimed:
            return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False,
                               f"expected no delivery: {len(deliveries)} delivered, "
                               f"{len(claimed)} checkpoint(s) claim a send", tuple(lines))
        return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, True, "nothing delivered, as expected",
                           tuple(lines))
    if len(deliveries) != 1:
        result = CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False,
                             f"{len(deliveries)} deliveries for {ev.case_id}", tuple(lines))
        return _absent(ev, result) if not deliveries and not _claims_done(writes) else result
    strict = _store(ev)  # a target shows what its history reports, and only that
    done = (final is None and not strict) or final is not None and (
        final.phase == Phase.COMPLETED or final.phase is None and not strict) and (
        final.email.sent is True or final.email.sent is None and not strict)
    if not done:
        return _absent(ev, CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False,
                                       "delivered, but the case did not complete",
                                       tuple(lines)))
    if final is not None and final.email.delivery_id != deliveries[0].delivery_id and (
            strict or final.email.delivery_id is not None):
        return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, False,
                           f"final checkpoint names delivery {final.email.delivery_id}, the "
                           f"gateway made {deliveries[0].delivery_id}", tuple(lines))
    return CheckResult(CheckId.EXACTLY_ONE_DELIVERY, True, "completed with one delivery",
                       tuple(lines))


def ticket_server_issued(ev: Evidence) -> CheckResult:
    """Beyond the five: no send without a server-issued ticket — every checkpointed ticket
    was issued by the queue for this case (the email's on gate ``send_email``, an order
    note's on ``add_order_note``), and every delivery's key consumed such a ticket of its
    gate for the delivered content (an email, or an order note in its own ledger)."""
    writes, problems = _writes(ev)
    emails, notes = gate_tickets(ev), gate_tickets(ev, NOTE_GATE)
    lines = [f"ticket {t.ticket_id}" + (f" ({t.gate})" if t.gate != DEFAULT_GATE else "")
             + f" issued to {t.approver} at {t.issued_at}, consumed by {t.consumed_by_key}"
             for t in ev.tickets]
    held = {(g.ticket, g.gate) for w in writes for g in (w.email, w.gate(NOTE_GATE))
            if g.ticket is not None}
    issued = {(t.ticket_id, t.gate) for t in ev.tickets}
    forged = sorted(held - issued)
    lines += [f"checkpointed ticket {t} was never issued by the queue"
              + (f" on gate {gate}" if gate != DEFAULT_GATE else "") for t, gate in forged]
    unbacked = []
    sent: list[tuple[Delivery | NoteDelivery, str, tuple[TicketRecord, ...], str]]
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


def ticket_consumed_first(ev: Evidence) -> CheckResult:
    """A ticket's consumption precedes the gateway request it authorises: for every
    delivery of the case (an email, or an order note in its own ledger), the ticket bound
    to its key (on its gate, for its content) was consumed — the approval service's own
    record, put into the trace before the worker had its answer — before the request that
    delivered it reached the gateway (the gateway's own record in the same trace). Both
    records are the harness's, so no clock of the loop's is read: trace order is the order
    in which the two services saw them. A ticket bound only after the send lets a crash
    between the two leave a delivery no consumed ticket authorised when it left, and a
    second send in the meantime would find the ticket unconsumed. A delivery with no such
    ticket is ``ticket_server_issued``'s to judge."""
    consumed: dict[str, int] = {}
    for e in ev.events:
        if e.kind == EventKind.CONSUMED and e.ref is not None:
            consumed.setdefault(e.ref, e.seq)
    requested = {e.ref: e.seq for e in ev.events if e.kind == EventKind.REQUEST}
    sent: list[tuple[Delivery | NoteDelivery, str, tuple[TicketRecord, ...], str]]
    sent = [(d, _digest(d.to, d.subject, d.body), gate_tickets(ev), str(d.request_seq))
            for d in ev.gateway.deliveries_for(ev.case_id)]
    sent += [(n, note_digest(n.order_id, n.body), gate_tickets(ev, NOTE_GATE),
              f"note:{n.request_seq}") for n in ev.gateway.notes_for(ev.case_id)]
    lines, bad = [], []
    for d, digest, tickets, ref in sent:
        backing = [t for t in tickets if t.consumed_by_key is not None
                   and t.draft_digest == digest
                   and d.idempotency_key in (None, t.consumed_by_key)]
        at = requested.get(ref)
        if not backing or at is None:
            lines.append(f"delivery {d.delivery_id}: "
                         + ("no consumed ticket for it (ticket_server_issued judges that)"
                            if not backing else "its request is not in the trace"))
            continue
        firsts = [(consumed[t.ticket_id], t.ticket_id) for t in backing
                  if t.ticket_id in consumed]
        if firsts and min(firsts)[0] < at:
            seq, ticket_id = min(firsts)
            lines.append(f"delivery {d.delivery_id}: ticket {ticket_id} consumed at trace seq "
                         f"{seq}, its request {ref} reached the gateway at trace seq {at}")
            continue
        when = (f"only at trace seq {min(firsts)[0]}" if firsts
                else "never, as the approval service saw it")
        bad.append(f"delivery {d.delivery_id}: its request {ref} reached the gateway at trace "
                   f"seq {at}, but ticket {backing[0].ticket_id} was consumed {when}")
    lines += bad
    if bad:
        return CheckResult(CheckId.TICKET_CONSUMED_FIRST, False, bad[0], tuple(lines))
    return CheckResult(CheckId.TICKET_CONSUMED_FIRST, True,
                       "every delivery's ticket was consumed before its request left",
                       tuple(lines))
