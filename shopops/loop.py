"""``run_loop``: the ShopOps agent loop with Chapter 8 checkpoints.

One tool call per step, chosen by the policy. With a store, the loop checkpoints at every
phase change and before and after each side effect (Chapter 8, "Production
considerations"): after Intake (→ drafting), after the draft (before the approval request),
after the park (t3), after the approval (before the send), when the send key is durable
(t6.send_key_persisted, before the request leaves) and after the send (t7). A case with
the order note (``state.order_note``) persists the note's key with the send's, checkpoints
the email's acknowledgment (t6.email_sent_saved) before the note leaves, and completes only
once the note is added too.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from shopops import tools
from shopops.checkpoint import CheckpointStore, Lease
from shopops.failpoints import failpoint
from shopops.phases import TERMINAL, Phase
from shopops.runtime import TOOL_SCHEMA_HASH, Services, default_services
from shopops.state import State

DEFAULT_RUN_ID = "run-1"


class Stopped(StrEnum):
    """Why ``run_loop`` stopped (``LoopResult.stopped``): a terminal phase, parked awaiting
    approval without a ticket, ``max_steps`` reached, or called with ``state.done`` true."""

    PARKED = "parked"
    COMPLETED = "completed"
    REJECTED = "rejected"
    DEAD_LETTERED = "dead_lettered"
    MAX_STEPS = "max_steps"
    DONE = "done"


@dataclass
class LoopResult:
    """What ``run_loop`` returns.

    Attributes:
        state: the (mutated) state.
        stopped: why it stopped — ``parked`` (awaiting approval, no ticket), ``completed``,
            ``rejected``, ``dead_lettered``, ``max_steps``, or ``done`` (called with
            ``state.done`` true).
        steps: tool calls made by this call.
    """

    state: State
    stopped: Stopped
    steps: int


def run_loop(
    state: State,
    *,
    store: CheckpointStore | None = None,
    run_id: str = DEFAULT_RUN_ID,
    services: Services | None = None,
    lease: Lease | None = None,
) -> LoopResult:
    """Run the case until it parks, completes, is rejected, or reaches ``max_steps``.

    Args:
        state: the case; mutated in place and returned in the result.
        store: checkpoint store; without one nothing is saved (the chapter's first call).
        run_id: the checkpoint run id; ``step`` continues within a run.
        services: approval queue, gateway, policy, records; default from the environment.
        lease: the caller's lease; every save is fenced by it.

    Returns:
        ``LoopResult``.

    Raises:
        shopops.errors.ApprovalRefused, shopops.errors.GatewayError,
        shopops.errors.FencedOff, shopops.errors.IllegalTransition: from the tools and store.
    """
    svc = services or default_services()
    policy = svc.policy
    if not state.policy_version:
        state.policy_version = policy.version
        state.model_route_id = policy.model_route_id
        state.tool_schema_hash = TOOL_SCHEMA_HASH

    def save() -> None:
        if store is not None:
            store.save(state, run_id=run_id, lease=lease)

    def fence_check() -> None:  # before every send attempt: a taken-over worker stops
        if store is not None and lease is not None:
            store.check_lease(lease, run_id)

    if Phase(state.phase) in TERMINAL:
        state.done = True
        return LoopResult(state, Stopped(state.phase), 0)
    if state.done:
        return LoopResult(state, Stopped.DONE, 0)
    if state.phase == Phase.INTAKE and state.step == 0 and state.customer is None:
        failpoint("t0.case_started")
    start = state.step
    while True:
        phase = Phase(state.phase)
        if phase in TERMINAL:
            state.done = True
            return LoopResult(state, Stopped(phase.value), state.step - start)
        tool = policy.next_tool(state)
        if tool is None:  # awaiting approval without a ticket: park
            state.done = True
            failpoint("t4.parked")
            return LoopResult(state, Stopped.PARKED, state.step - start)
        if state.step >= state.max_steps:
            return LoopResult(state, Stopped.MAX_STEPS, state.step - start)
        state.step += 1
        if tool == "get_customer":
            tools.get_customer(state, svc)
        elif tool == "get_order":
            tools.get_order(state, svc)
            state.transition(Phase.DRAFTING)
            save()
        elif tool == "draft_email":
            tools.draft_email(state, svc)
            save()  # the draft is durable before the approval request (a side effect)
        elif tool == "propose_send":
            tools.propose_send(state, svc)
            state.done = True  # the park checkpoint says parked (the chapter resets it)
            save()
            failpoint("t3.checkpoint_saved")
        elif tool == "send_email":
            if phase is Phase.APPROVED:
                save()  # "approval is a state transition recorded before consequential send"
                state.send_idempotency_key = tools.send_key(state)
                if state.order_note:  # the note's own key, durable before its first attempt
                    state.note_idempotency_key = tools.note_key(state)
                state.transition(Phase.SENDING)
                save()
                failpoint("t6.send_key_persisted")
            if not state.email_sent:
                tools.send_email(state, svc, guard=fence_check)
                if state.order_note:
                    save()  # the email is acknowledged durably before the note leaves
                    failpoint("t6.email_sent_saved")
            if state.order_note and not state.note_sent:
                tools.add_order_note(state, svc, guard=fence_check)
            state.transition(Phase.COMPLETED)
            state.done = True
            save()
            failpoint("t7.completed_saved")
        else:  # pragma: no cover - a policy naming a tool that does not exist
            raise ValueError(f"policy chose unknown tool {tool!r}")
