"""O-1001 as a DBOS workflow on a SQLite system database, recovered the DBOS way.

Steps ``get_customer``, ``get_order``, ``draft``, ``request_approval``, then the workflow
announces the park (``DBOS.set_event("parked", ...)``) and waits in
``DBOS.recv("approval")``; the human's decision arrives as a message the harness sends
with ``DBOSClient.send`` (``decide``); then the ``verify_ticket`` and ``send_email`` steps.
A worker killed anywhere is recovered the way DBOS recovers: a new process calls
``DBOS.launch()``, which resumes every PENDING workflow of this executor from its last
recorded step (https://docs.dbos.dev/architecture, "How Workflow Recovery Works").

Side effects are written as DBOS's documentation recommends (https://docs.dbos.dev/python/
tutorials/step-tutorial): each is a step, so a completed step is never re-run; a step cut
off before its output was recorded IS re-run, hence the send carries an idempotency key
built from the workflow ID and the step ID ("use the workflow ID as an idempotency key";
switch ``keys`` off to see what it prevents).

The harness entry points are ``start``, ``resume``, ``decide`` and ``history``; they take a
``harness.targets.context.TargetContext``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import requests
from dbos import DBOS, DBOSClient, DBOSConfig, SetWorkflowID

TOPIC = "approval"
PARK_TIMEOUT_S = 120.0
_ctx: Any = None  # the execution's context, set before DBOS launches


def _digest(draft: dict[str, str]) -> str:
    blob = json.dumps(draft, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _fixture(name: str) -> dict[str, Any]:
    return json.loads((Path(_ctx.fixtures) / name).read_text())  # type: ignore[no-any-return]


@DBOS.step()
def get_customer(order_id: str) -> dict[str, Any]:
    """Intake: the customer who placed the order."""
    return _fixture("customers.json")[_fixture("orders.json")[order_id]["customer_id"]]


@DBOS.step()
def get_order(order_id: str) -> dict[str, Any]:
    """Intake: the order."""
    return _fixture("orders.json")[order_id]  # type: ignore[no-any-return]


@DBOS.step()
def draft(customer: dict[str, Any], order: dict[str, Any]) -> dict[str, str]:
    """The email to send."""
    first = customer["name"].split()[0]
    body = (f"Hi {first},\n\nYour order {order['order_id']} ({order['item']}) is "
            f"{order['status']}; the carrier now expects it by {order['carrier_eta']}.\n\n"
            "— ShopOps support")
    return {"to": customer["email"], "subject": f"Update on your order {order['order_id']}",
            "body": body}


@DBOS.step()
def request_approval(case_id: str, text: dict[str, str]) -> str:
    """Ask a human through the approval queue (idempotent for case + draft)."""
    with _ctx.approval_queue() as queue:
        return queue.request(case_id, _digest(text))


@DBOS.step()
def verify_ticket(case_id: str, text: dict[str, str], ticket: str) -> str:
    """The queue must have issued the ticket for this case and draft."""
    with _ctx.approval_queue() as queue:
        queue.verify(ticket, case_id, _digest(text))
    return ticket


@DBOS.step()
def send_email(case_id: str, text: dict[str, str], ticket: str) -> dict[str, Any]:
    """POST the email to the gateway, keyed by workflow ID and step ID, once the ticket is
    spent on this send."""
    key = f"{DBOS.workflow_id}:{DBOS.step_id}" if _ctx.keys else None
    with _ctx.approval_queue() as queue:
        queue.consume(ticket, case_id, _digest(text),
                      key or f"{case_id}:send_email:{DBOS.workflow_id}")
    headers = {"X-ShopOps-Worker-Pid": str(os.getpid())}
    if key is not None:
        headers["Idempotency-Key"] = key
    reply = requests.post(f"{_ctx.gateway_url}/v1/messages", timeout=(2, 5), headers=headers,
                          json={"case_id": case_id, **text})
    reply.raise_for_status()
    return {"delivery_id": reply.json()["delivery_id"], "key": key}


@DBOS.workflow()
def o1001(case_id: str, order_id: str) -> dict[str, Any]:
    """The case, from intake to the one send."""
    customer = get_customer(order_id)
    order = get_order(order_id)
    text = draft(customer, order)
    request_id = request_approval(case_id, text)
    DBOS.set_event("parked", request_id)
    decision = DBOS.recv(TOPIC, timeout_seconds=24 * 3600)
    if not decision or "ticket" not in decision:
        raise RuntimeError(f"{case_id}: no approval arrived")
    ticket = verify_ticket(case_id, text, str(decision["ticket"]))
    return send_email(case_id, text, ticket)


def _url(ctx: Any) -> str:
    return f"sqlite:///{Path(ctx.workdir) / 'dbos.sqlite'}"


def _launch(ctx: Any) -> None:
    global _ctx
    _ctx = ctx
    Path(ctx.workdir).mkdir(parents=True, exist_ok=True)
    config: DBOSConfig = {"name": "dbos-o1001", "system_database_url": _url(ctx),
                          "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()  # recovers this executor's PENDING workflows


def _drive(ctx: Any, *, approved: bool) -> None:
    _launch(ctx)
    if DBOS.get_workflow_status(ctx.run_id) is None:  # never started (or not durably)
        with SetWorkflowID(ctx.run_id):
            DBOS.start_workflow(o1001, ctx.case_id, ctx.order_id)
    if approved:
        DBOS.retrieve_workflow(ctx.run_id).get_result()
    elif DBOS.get_event(ctx.run_id, "parked", timeout_seconds=PARK_TIMEOUT_S) is None:
        raise RuntimeError(f"{ctx.case_id} did not park within {PARK_TIMEOUT_S:g} s")
    # the workflow's thread still waits in recv: leave without joining it (it is durable)
    os._exit(0)


def start(ctx: Any) -> None:
    """Start the workflow and leave once it has parked at the approval."""
    _drive(ctx, approved=False)


def resume(ctx: Any) -> None:
    """Relaunch (DBOS recovers the workflow); with ``ctx.ticket`` wait until it completes,
    without it until it has parked again."""
    _drive(ctx, approved=ctx.ticket is not None)


def decide(ctx: Any) -> None:
    """The human's decision, from outside the workflow: ``DBOSClient.send`` of the ticket
    (keyed by the ticket, so a repeated decision is one message)."""
    client = DBOSClient(system_database_url=_url(ctx))
    try:
        client.send(ctx.run_id, {"ticket": ctx.ticket}, TOPIC,
                    idempotency_key=f"approval:{ctx.ticket}")
    finally:
        client.destroy()


#: Each step of the workflow and the contract's phase once it is recorded (docs/contract.md,
#: "Phases"); a step not listed (DBOS's own ``recv``, ``setEvent``) keeps the phase before.
_PHASES = {"get_customer": "intake", "get_order": "intake", "draft": "drafting",
           "request_approval": "awaiting_approval", "verify_ticket": "approved",
           "send_email": "completed"}


def history(ctx: Any) -> list[dict[str, Any]]:
    """The durable state through DBOS's API (``DBOSClient.list_workflow_steps``), oldest
    first: one object per recorded step with the contract's fields (docs/contract.md, "A
    target's history")."""
    if not (Path(ctx.workdir) / "dbos.sqlite").exists():
        return []
    client = DBOSClient(system_database_url=_url(ctx))
    try:
        steps = client.list_workflow_steps(ctx.run_id)
    finally:
        client.destroy()
    out: list[dict[str, Any]] = []
    state: dict[str, Any] = {"phase": "intake", "draft": None, "approval_request_id": None,
                             "approval_ticket": None, "send_idempotency_key": None,
                             "email_sent": False, "delivery_id": None}
    for n, info in enumerate(steps, start=1):
        name = info["function_name"].rsplit(".", 1)[-1]
        output = info["output"]
        state["phase"] = _PHASES.get(name, state["phase"])
        if name == "draft":
            state["draft"] = output
        elif name == "request_approval":
            state["approval_request_id"] = output
        elif name == "verify_ticket":
            state["approval_ticket"] = output
        elif name == "send_email" and output:
            state.update(email_sent=True, send_idempotency_key=output["key"],
                         delivery_id=output["delivery_id"])
        out.append({**state, "step": n})
    return out
