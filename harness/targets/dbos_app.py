"""A DBOS app under test with no glue: the harness's ``start``/``resume``/``decide``/
``history`` for a workflow named by ``[target] workflow = "module:function"`` (issue 25,
``docs/targets.md``).

The configuration the harness supplies, documented for the app's author
(``harness.targets.human.prepare_app``, then):

- ``DBOS_SYSTEM_DATABASE_URL`` is ``sqlite:///<the execution's folder>/dbos.sqlite``: the
  app's ``DBOSConfig`` reads it, as DBOS's own quickstart writes
  ``"system_database_url": os.environ.get("DBOS_SYSTEM_DATABASE_URL")``;
- the app's module configures DBOS (``DBOS(config=...)``) when it is imported, as DBOS's
  documentation writes it; the harness imports it, then calls ``DBOS.launch()`` — which
  recovers this executor's PENDING workflows, DBOS's own recovery — and starts the workflow
  under the workflow ID ``ctx.run_id`` with ``args`` (default ``[order_id]``) if it never
  started;
- the human answers the workflow's ``DBOS.recv(topic)`` with ``DBOSClient.send(run_id,
  approve, topic)`` (``approve`` default ``true``), keyed by the ticket so a repeated
  decision is one message; a rejection (the harness's records) with ``DBOS.send(run_id,
  reject, topic)`` (``reject`` default ``false``; with the reviewer's feedback
  ``reject_feedback``, default ``{"approved": false, "feedback": ...}``,
  ``harness.targets.human.rejection_answer``) by the next worker, keyed by the ask; a
  workflow that redrafts and waits in ``recv`` again is a new ask.

A workflow waits for the human when its steps (``DBOS.list_workflow_steps``) end with the
durable timeout ``DBOS.recv`` records (a ``DBOS.sleep`` whose function ID follows one with
no recorded output): each such wait is recorded as an ask (``harness.targets.human``),
showing the newest step output that holds an email.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from harness.targets.human import email_in, ended_as, prepare_app, record_ask, rejection_answer

__all__ = ["PARK_DEADLINE_S", "history", "parked_at", "resume", "start"]

#: Seconds a worker waits for the workflow to park at a ``recv`` or to end.
PARK_DEADLINE_S = 120.0
_POLL_S = 0.02
_SYSTEM_DB = "dbos.sqlite"
_DONE = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


def _url(ctx: Any) -> str:
    return f"sqlite:///{os.path.join(ctx.workdir, _SYSTEM_DB)}"


def _workflow(ctx: Any) -> Any:
    prepare_app(ctx)
    os.environ["DBOS_SYSTEM_DATABASE_URL"] = _url(ctx)
    module, _, name = ctx.options["workflow"].partition(":")
    return getattr(importlib.import_module(module), name)


def parked_at(steps: Sequence[Mapping[str, Any]], now: float | None = None) -> int | None:
    """The function ID of the ``recv`` the steps show waiting (see the module docstring),
    or ``None``. Given ``now`` (epoch seconds), a wait whose durable timeout (the
    ``DBOS.sleep`` step's output: its wake-up time, epoch seconds) is not after ``now`` is
    over — the recovered ``recv`` returns ``None`` and the workflow goes on — so it is no
    longer waiting for the human."""
    if not steps:
        return None
    last = steps[-1]
    ids = {s["function_id"] for s in steps}
    if last["function_name"] == "DBOS.sleep" and last["function_id"] - 1 not in ids:
        if now is not None and _wake_up(last.get("output")) <= now:
            return None
        return int(last["function_id"]) - 1
    return None


def _wake_up(output: Any) -> float:
    """The wake-up time a durable sleep recorded (epoch seconds; ``inf`` if unreadable)."""
    try:
        return float(output)
    except (TypeError, ValueError):
        return float("inf")


def _shown(steps: Sequence[Mapping[str, Any]]) -> Any:
    return next((s["output"] for s in reversed(steps) if email_in(s["output"])), None)


def _drive(ctx: Any) -> None:
    from dbos import DBOS, SetWorkflowID

    workflow = _workflow(ctx)
    DBOS.launch()  # recovers this executor's PENDING workflows
    if DBOS.get_workflow_status(ctx.run_id) is None:
        args = json.loads(ctx.options.get("args", "null")) or [ctx.order_id]
        with SetWorkflowID(ctx.run_id):
            DBOS.start_workflow(workflow, *args)
    deadline = time.monotonic() + PARK_DEADLINE_S
    while time.monotonic() < deadline:
        status = DBOS.get_workflow_status(ctx.run_id)
        if status is not None and status.status in _DONE:
            return
        steps = DBOS.list_workflow_steps(ctx.run_id)
        at = parked_at(steps, time.time())  # a wait timed out goes on: not parked
        if at is not None and ctx.ticket is None:
            ask = f"recv-{ctx.run_id}-{at}"
            said_no, answer = rejection_answer(ctx, [ask])
            if said_no:  # the human's rejection, told the DBOS way; the workflow goes on
                DBOS.send(ctx.run_id, answer, ctx.options.get("topic"),
                          idempotency_key=f"rejection:{ask}")
            else:  # waits for the human: ask, and leave
                record_ask(ctx, ask, _shown(steps))
                return
        time.sleep(_POLL_S)
    raise RuntimeError(f"workflow {ctx.run_id} neither parked nor ended within "
                       f"{PARK_DEADLINE_S:g} s")


def _leave(run: Any, ctx: Any) -> None:
    try:
        run(ctx)
    except BaseException as exc:
        import sys
        print(f"target: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        os._exit(1)
    os._exit(0)  # the workflow's thread may still wait in recv: it is durable, leave it


def start(ctx: Any) -> None:
    """Launch (recovering what is pending), start the workflow if it never started, and
    leave once it waits for the human (the ask recorded) or has ended."""
    _leave(_drive, ctx)


def resume(ctx: Any) -> None:
    """Relaunch (DBOS recovers the workflow); with the human's ticket wait until it ends,
    without until it waits for the human again."""
    _leave(_drive, ctx)


def decide(ctx: Any) -> None:
    """The human's decision: ``DBOSClient.send(run_id, approve, topic)``, keyed by the
    ticket."""
    from dbos import DBOSClient

    prepare_app(ctx)
    client = DBOSClient(system_database_url=_url(ctx))
    try:
        client.send(ctx.run_id, json.loads(ctx.options.get("approve", "true")),
                    ctx.options.get("topic"), idempotency_key=f"approval:{ctx.ticket}")
    finally:
        client.destroy()


def history(ctx: Any) -> list[dict[str, Any]]:
    """One object per recorded step (``DBOSClient.list_workflow_steps``), oldest first, with
    what the harness can tell of any workflow: ``step`` (its count), ``draft`` (the newest
    email-shaped step output so far), ``phase`` ``awaiting_approval`` on the durable timeout
    of a ``recv`` still waiting, ``rejected``/``completed`` (``human.ended_as``) on the last
    step of a workflow that ended ``SUCCESS`` (else not reported)."""
    if not os.path.exists(os.path.join(ctx.workdir, _SYSTEM_DB)):
        return []
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=_url(ctx))
    try:
        steps = client.list_workflow_steps(ctx.run_id)
        status = client.retrieve_workflow(ctx.run_id).get_status().status if steps else None
    finally:
        client.destroy()
    waiting = parked_at(steps)
    ended = ended_as(ctx) if status == "SUCCESS" else None
    out: list[dict[str, Any]] = []
    draft = None
    for n, info in enumerate(steps, start=1):
        draft = email_in(info["output"]) or draft
        phase = ("awaiting_approval" if waiting is not None and n == len(steps) else
                 ended if status == "SUCCESS" and n == len(steps) else None)
        out.append({"step": n, "phase": phase, "draft": draft})
    return out
