"""The durable worker: resume a case from its checkpoint and drive it as far as it goes.

This is what a fleet worker does when it picks a case up (and what the harness launches as
a real OS process): take the lease, load the latest checkpoint (or start the case if there
is none at all — a corrupt checkpoint raises, it is never "no checkpoint"), count a recovery
attempt if the last worker left the case in flight (and dead-letter it past the maximum),
pick up a server-issued ticket if a human approved — or draft again if the human rejected
the draft with feedback — and run the loop. A case with the order note needs both gates
approved before it leaves the park; a rejection of the note ends the case ``rejected``.
"""

from __future__ import annotations

import contextlib

from shopops.approvals import NOTE_GATE
from shopops.checkpoint import CheckpointStore, Lease
from shopops.errors import CheckpointError
from shopops.failpoints import failpoint
from shopops.grant import grant_approval, grant_note
from shopops.loop import DEFAULT_RUN_ID, LoopResult, Stopped, run_loop
from shopops.phases import TERMINAL, Phase
from shopops.runtime import Services
from shopops.state import State
from shopops_contract.approvals import RequestStatus
from shopops_contract.digests import note_digest

#: Steps a resumed worker may take, as in the chapter (``state.max_steps = state.step + 5``).
STEP_BUDGET = 5
#: Recovery attempts before a case is dead-lettered (``--max-attempts``).
DEFAULT_MAX_ATTEMPTS = 5
#: Redrafts after rejections with feedback; one more rejection then ends the case.
MAX_REVISIONS = 3


def work(
    case_id: str,
    order_id: str,
    *,
    store: CheckpointStore,
    services: Services,
    run_id: str = DEFAULT_RUN_ID,
    owner: str | None = None,
    lease_ttl_s: float = 60.0,
    ticket: str | None = None,
    note_ticket: str | None = None,
    require_checkpoint: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    order_note: bool = False,
) -> LoopResult:
    """Start or resume ``case_id`` and run it until it parks or ends.

    Args:
        case_id, order_id: the case (``"case-O-1001"``, ``"O-1001"``).
        store: the checkpoint store.
        services: approval queue, gateway, policy, records.
        run_id: checkpoint run id.
        owner: lease owner name; with it the worker takes a lease of ``lease_ttl_s``
            seconds first, every save is fenced (Chapter 8 exercise 4, Chapter 32), and the
            lease is released when the worker stops on its own (a killed worker's lease
            stays until it expires).
        ticket: a ticket id to grant; default: the newest unconsumed ticket the approval
            queue issued for the case, if any.
        note_ticket: likewise for the order note's gate (``add_order_note``), verified with
            the queue like any other (``grant_note``).
        require_checkpoint: refuse to start a new case (``shopops resume``).
        max_attempts: recovery attempts allowed. A worker that finds the case in flight
            (the latest checkpoint is neither parked nor terminal: the last worker was
            killed) counts one, durably, before any work; the attempt past this maximum
            dead-letters the case instead (phase ``dead_lettered``, the reason in the state
            and in the store's ``dead_letters`` queue) and does nothing else.
        order_note: a case started here has the second gated action, the order note
            (``State.order_note``); a case resumed from a checkpoint keeps its own.

    Raises:
        shopops.errors.LeaseHeld: another owner holds a live lease.
        shopops.errors.CheckpointNotFound: ``require_checkpoint`` and no checkpoint.
        shopops.errors.CheckpointCorrupt, shopops.errors.UnsupportedSchemaVersion: the
            latest checkpoint cannot be trusted.
        shopops.runtime.ConfigError: the case is ready to send but no gateway is configured.
        shopops.errors.ApprovalRefused: the ticket was refused, or a checkpoint past
            approval holds a ticket the queue did not issue for this case and draft.
    """
    lease = store.acquire_lease(case_id, owner, lease_ttl_s) if owner else None
    state = store.load(case_id, run_id) if require_checkpoint else store.find(case_id, run_id)
    if state is None:
        state = State(case_id=case_id, order_id=order_id, order_note=order_note)
    else:
        if state.phase in (Phase.APPROVED, Phase.SENDING) and state.draft is not None:
            # A checkpoint past approval is not proof of approval (a model may have written
            # the ticket into the state): the queue must confirm it before anything else.
            services.approvals.check_held(state.approval_ticket, case_id,
                                          state.draft.digest(), state.send_idempotency_key)
            if state.order_note and state.note_text is not None:
                services.approvals.check_held(
                    state.note_ticket, case_id, note_digest(order_id, state.note_text),
                    state.note_idempotency_key, gate=NOTE_GATE)
        if not state.done and Phase(state.phase) not in TERMINAL:
            state.recovery_attempts += 1
            if state.recovery_attempts > max_attempts:
                return _dead_letter(state, store, run_id, lease, max_attempts)
            store.save(state, run_id=run_id, lease=lease)  # durable before any work
        # after the attempt is durable: a worker killed here was still counted (issue 26)
        failpoint("t6.checkpoint_loaded")
        if state.phase == Phase.AWAITING_APPROVAL and state.draft is not None:
            _decide(state, ticket, services, store, run_id, lease, note_ticket)
    try:
        result = _run(state, store, run_id, services, lease)
        if (result.stopped is Stopped.PARKED and state.draft is not None
                and services.approvals.ticket_for(case_id, state.draft.digest()) is not None):
            # The request this worker just parked on had been approved already: an earlier
            # worker asked for the same draft, the human approved, and that worker was
            # killed before it parked. The approval is durable (Chapter 8): take it now
            # instead of parking on it and asking the human again.
            _decide(state, None, services, store, run_id, lease)
            if state.phase != Phase.AWAITING_APPROVAL:  # not while the note is pending
                result = _run(state, store, run_id, services, lease)
        return result
    finally:
        if lease is not None:  # a worker that stops on its own hands the case back
            with contextlib.suppress(CheckpointError):
                store.release_lease(lease)


def _run(state: State, store: CheckpointStore, run_id: str, services: Services,
         lease: Lease | None) -> LoopResult:
    """Run the loop from ``state`` with a fresh step budget (a case not yet terminal), the
    gateway checked first when the next step sends (fail before any state change)."""
    if Phase(state.phase) not in TERMINAL:
        state.max_steps = state.step + STEP_BUDGET
        state.done = False
    if state.phase in (Phase.APPROVED, Phase.SENDING):
        services.require_gateway()
    return run_loop(state, store=store, run_id=run_id, services=services, lease=lease)


def _decide(state: State, ticket: str | None, services: Services, store: CheckpointStore,
            run_id: str, lease: Lease | None, note_ticket: str | None = None) -> None:
    """The human's decision on a parked case (``awaiting_approval`` with a draft): take
    ``ticket`` or the queue's usable ticket for this draft (and the note's decision), end
    the case on a refused note, or redraft / reject on a rejection of this draft; else it
    stays parked. A decision that changes the phase is checkpointed, or applied by
    ``grant_approval``."""
    assert state.draft is not None
    case_id, digest = state.case_id, state.draft.digest()
    if ticket is None:
        issued = services.approvals.ticket_for(case_id, digest)
        ticket = issued.ticket_id if issued else None
    latest = services.approvals.latest_request(case_id)
    note = _note_decision(state, services)
    if note_ticket is not None and note not in (None, RequestStatus.REJECTED):
        note = note_ticket  # offered instead of the queue's: verified like it
    if note == RequestStatus.REJECTED:  # the note was refused: nothing of the case is done
        state.transition(Phase.REJECTED)
        store.save(state, run_id=run_id, lease=lease)
    elif ticket is not None and note != "pending":
        if note is not None:
            grant_note(state, note, queue=services.approvals)
        grant_approval(state, ticket, queue=services.approvals)
    elif latest is not None and latest.status == RequestStatus.REJECTED and (
            latest.draft_digest == digest):
        if latest.feedback and state.draft_revision < MAX_REVISIONS:
            _redraft(state, latest.feedback)
        else:
            state.transition(Phase.REJECTED)
        store.save(state, run_id=run_id, lease=lease)


def _note_decision(state: State, services: Services) -> str | None:
    """The human's decision on the order note of a parked case: ``None`` (the case has no
    note), ``"pending"``, ``"rejected"``, or the id of the note's unconsumed ticket."""
    if not state.order_note or state.note_text is None:
        return None
    digest = note_digest(state.order_id, state.note_text)
    issued = services.approvals.ticket_for(state.case_id, digest, gate=NOTE_GATE)
    if issued is not None:
        return issued.ticket_id
    latest = services.approvals.latest_request(state.case_id, gate=NOTE_GATE)
    if (latest is not None and latest.status == RequestStatus.REJECTED
            and latest.draft_digest == digest):
        return "rejected"
    return "pending"


def _redraft(state: State, feedback: str) -> None:
    """A rejection with feedback: back to ``drafting`` without the rejected draft, the
    feedback kept for the policy; the loop then drafts and asks for a new approval (a
    ticket for the old draft no longer matches the draft's digest: it is void)."""
    state.review_feedback.append(feedback)
    state.draft_revision += 1
    state.draft = None
    state.approval_request_id = None
    state.note_text = None  # the note names the draft: it is written again with it
    state.note_request_id = None
    state.transition(Phase.DRAFTING)
    state.done = False


def _dead_letter(state: State, store: CheckpointStore, run_id: str, lease: Lease | None,
                 max_attempts: int) -> LoopResult:
    """Take the case out of the fleet's hands: ``dead_lettered`` and a queue record, in one
    transaction; nothing else is done (a human looks at it)."""
    last = state.phase
    state.dead_letter_reason = (
        f"recovery attempt {state.recovery_attempts} is past the maximum of {max_attempts}: "
        f"workers kept stopping in phase {last}")
    state.transition(Phase.DEAD_LETTERED)
    state.done = True
    try:
        store.save_dead_letter(state, run_id, last_phase=last, lease=lease)
    finally:
        if lease is not None:
            with contextlib.suppress(CheckpointError):
                store.release_lease(lease)
    return LoopResult(state, Stopped.DEAD_LETTERED, 0)
