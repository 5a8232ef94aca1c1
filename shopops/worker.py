"""The durable worker: resume a case from its checkpoint and drive it as far as it goes.

This is what a fleet worker does when it picks a case up (and what the harness launches as
a real OS process): take the lease, load the latest checkpoint (or start the case if there
is none at all — a corrupt checkpoint raises, it is never "no checkpoint"), pick up a
server-issued ticket if a human approved, and run the loop.
"""

from __future__ import annotations

import contextlib

from shopops.checkpoint import CheckpointStore
from shopops.errors import CheckpointError
from shopops.failpoints import failpoint
from shopops.grant import grant_approval
from shopops.loop import DEFAULT_RUN_ID, LoopResult, run_loop
from shopops.phases import TERMINAL, Phase
from shopops.runtime import Services
from shopops.state import State

#: Steps a resumed worker may take, as in the chapter (``state.max_steps = state.step + 5``).
STEP_BUDGET = 5


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
    require_checkpoint: bool = False,
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
        require_checkpoint: refuse to start a new case (``shopops resume``).

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
        state = State(case_id=case_id, order_id=order_id)
    else:
        failpoint("t6.checkpoint_loaded")
        if state.phase == Phase.AWAITING_APPROVAL:
            if ticket is None:
                issued = services.approvals.ticket_for(case_id)
                ticket = issued.ticket_id if issued else None
            if ticket is not None:
                grant_approval(state, ticket, queue=services.approvals)
            elif services.approvals.is_rejected(case_id):
                state.transition(Phase.REJECTED)
                store.save(state, run_id=run_id, lease=lease)
        elif state.phase in (Phase.APPROVED, Phase.SENDING) and state.draft is not None:
            # A checkpoint past approval is not proof of approval (a model may have written
            # the ticket into the state): the queue must confirm it before anything else.
            services.approvals.check_held(state.approval_ticket, case_id,
                                          state.draft.digest(), state.send_idempotency_key)
        if Phase(state.phase) not in TERMINAL:
            state.max_steps = state.step + STEP_BUDGET
            state.done = False
    try:
        if state.phase in (Phase.APPROVED, Phase.SENDING):
            services.require_gateway()  # fail before any state change, not after the key
        return run_loop(state, store=store, run_id=run_id, services=services, lease=lease)
    finally:
        if lease is not None:  # a worker that stops on its own hands the case back
            with contextlib.suppress(CheckpointError):
                store.release_lease(lease)
