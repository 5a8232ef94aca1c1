"""O-1001 as a LangGraph ``StateGraph``, checkpointed by ``SqliteSaver`` on a file.

get_customer -> get_order -> draft -> request_approval -> await_approval (``interrupt()``)
-> send -> done. Resumed with ``Command(resume={"ticket": ...})``; a run killed between
nodes is continued with ``invoke(None, config)`` from its last checkpoint.

Written as LangGraph's documentation recommends for side effects
(https://docs.langchain.com/oss/python/langgraph/interrupts, "Side effects before
interrupt must be idempotent"; https://docs.langchain.com/oss/python/langgraph/durable-execution,
"wrap side effects ... in separate nodes or tasks" and make them idempotent): the approval
request and the send are each their own node, the node holding ``interrupt()`` does
nothing else, and the send carries an idempotency key derived from durable facts (switch
``keys`` off to see what it prevents). ``options.durability`` picks LangGraph's durability
mode: ``sync`` (checkpoint before the next step), ``async`` (while it runs, the default),
``exit`` (only when the graph exits or interrupts). ``options.resume_on`` (``tasks``, the
default, or ``next``) picks how a resumed worker decides the thread has work left;
``options.intake`` (``serial``, the default, or ``fanout``) reads the customer and the
order one after the other or in two parallel branches (``Send``).

The harness entry points are ``start``, ``resume`` and ``history`` (``[target]`` table);
they take a ``harness.targets.context.TargetContext``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any, TypedDict

import requests
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

DURABILITY = ("sync", "async", "exit")
#: What says a thread killed mid-run still has work: ``tasks`` (any pending task, even one
#: whose writes were saved) or ``next`` (the nodes still to run, as LangGraph's
#: human-in-the-loop examples test ``snapshot.next``). ``next`` is empty when the killed
#: worker saved a task's writes but not the checkpoint after it (seen with ``async``):
#: the harness measures that as lost work (docs/targets.md, "What the harness measured").
RESUME_ON = ("tasks", "next")
#: Where the human is asked: ``own_node`` (the request is its own node before the
#: interrupt, idempotent for case + draft, as LangGraph's documentation recommends) or
#: ``interrupt_node`` (a notification sent inside the node that holds ``interrupt()``,
#: under a fresh request id: the node runs again when it is resumed, so the human is asked
#: again — the pitfall LangGraph's documentation warns of, which ``asked_once`` fails).
ASK = ("own_node", "interrupt_node")
#: How intake reads the customer and the order: ``serial`` (one node after the other) or
#: ``fanout`` (two parallel branches started with ``Send`` from START, joined at ``draft``:
#: LangGraph runs them in one superstep and checkpoints after both).
INTAKE = ("serial", "fanout")


class _Case(TypedDict, total=False):
    """The channels both graphs share (LangGraph reads inherited keys too)."""

    case_id: str
    order_id: str
    customer: dict[str, Any]
    order: dict[str, Any]
    draft: dict[str, str]
    request_id: str
    ticket: str
    idempotency_key: str | None
    delivery_id: str
    sent: bool


class O1001(_Case, total=False):
    """The graph's state (LangGraph channels)."""

    step: int


def _larger(old: int, new: int) -> int:
    """``step``'s reducer in the fan-out graph: the larger of two writes."""
    return max(old, new)


class O1001Fanout(_Case, total=False):
    """The state of the fan-out graph: as ``O1001``, but ``step`` keeps the larger of the
    values written in one superstep (both branches write it)."""

    step: Annotated[int, _larger]


def _digest(draft: dict[str, str]) -> str:
    blob = json.dumps(draft, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _ask_anew(ctx: Any, case_id: str, digest: str) -> None:
    """Ask the human through the harness's approval service (its JSON-lines protocol,
    docs/contract.md, "The approval protocol") under a request id of its own."""
    request = {"request_id": f"req-{case_id}-{uuid.uuid4().hex[:12]}", "case_id": case_id,
               "draft_digest": digest, "gate": "send_email",
               "requested_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    address = ctx.approvals_service
    family_address = "\0" + address[1:] if address.startswith("@") else address
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(family_address)
        sock.sendall(json.dumps({"op": "add_request", "request": request}).encode() + b"\n")
        reply = json.loads(sock.makefile("rb").readline())
    if not reply.get("ok"):
        raise RuntimeError(f"the approval service refused the request: {reply}")


def build(ctx: Any) -> StateGraph:
    """The O-1001 graph for one execution (its nodes close over ``ctx``)."""
    fixtures = Path(ctx.fixtures)
    ask = ctx.option("ask", "own_node", ASK)
    fanout = ctx.option("intake", "serial", INTAKE) == "fanout"

    def get_customer(state: O1001) -> O1001:
        order = json.loads((fixtures / "orders.json").read_text())[state["order_id"]]
        customers = json.loads((fixtures / "customers.json").read_text())
        return {"customer": customers[order["customer_id"]], "step": state.get("step", 0) + 1}

    def get_order(state: O1001) -> O1001:
        orders = json.loads((fixtures / "orders.json").read_text())
        return {"order": orders[state["order_id"]], "step": state["step"] + 1}

    def draft(state: O1001) -> O1001:
        customer, order = state["customer"], state["order"]
        first = customer["name"].split()[0]
        body = (f"Hi {first},\n\nYour order {order['order_id']} ({order['item']}) is "
                f"{order['status']}; the carrier now expects it by {order['carrier_eta']}.\n\n"
                "— ShopOps support")
        text = {"to": customer["email"], "subject": f"Update on your order {order['order_id']}",
                "body": body}
        return {"draft": text, "step": state["step"] + 1}

    def request_approval(state: O1001) -> O1001:
        if ask == "interrupt_node":
            return {"request_id": "notified in await_approval", "step": state["step"] + 1}
        with ctx.approval_queue() as queue:  # idempotent for case + draft
            request_id = queue.request(state["case_id"], _digest(state["draft"]))
        return {"request_id": request_id, "step": state["step"] + 1}

    def spent_on(state: O1001) -> str:
        """The key the ticket is spent on: the send's own (or a fixed one with keys off)."""
        return f"{state['case_id']}:send_email:{_digest(state['draft'])[:16]}"

    def await_approval(state: O1001) -> O1001:
        if ask == "interrupt_node":  # runs again on every resume of this node
            _ask_anew(ctx, state["case_id"], _digest(state["draft"]))
        decision = interrupt({"request_id": state["request_id"]})  # parks the thread
        ticket = str(decision["ticket"])
        with ctx.approval_queue() as queue:  # issued for this case and draft, and unspent
            # or spent on this very send (a run restarted from the interrupt comes here again)
            queue.check_held(ticket, state["case_id"], _digest(state["draft"]),
                             spent_on(state))
        return {"ticket": ticket, "step": state["step"] + 1}

    def send(state: O1001) -> O1001:
        digest = _digest(state["draft"])
        key = spent_on(state) if ctx.keys else None
        with ctx.approval_queue() as queue:  # the ticket is spent on this one send
            queue.consume(state["ticket"], state["case_id"], digest, spent_on(state))
        headers = {"X-ShopOps-Worker-Pid": str(os.getpid())}
        if key is not None:
            headers["Idempotency-Key"] = key
        reply = requests.post(f"{ctx.gateway_url}/v1/messages", timeout=(2, 5),
                              headers=headers, json={"case_id": state["case_id"],
                                                     **state["draft"]})
        reply.raise_for_status()
        return {"idempotency_key": key, "delivery_id": reply.json()["delivery_id"],
                "sent": True, "step": state["step"] + 1}

    def done(state: O1001) -> O1001:
        return {"step": state["step"] + 1}

    graph = StateGraph(O1001Fanout if fanout else O1001)
    nodes = (get_customer, get_order, draft, request_approval, await_approval, send, done)
    previous = START
    if fanout:  # both reads at once, each a branch of its own; draft joins them
        graph.add_node("get_customer", get_customer)
        graph.add_node("get_order", get_order)
        graph.add_conditional_edges(
            START, lambda state: [Send("get_customer", state), Send("get_order", state)],
            ["get_customer", "get_order"])
        graph.add_edge("get_customer", "draft")
        graph.add_edge("get_order", "draft")
        graph.add_node("draft", draft)
        nodes, previous = nodes[3:], "draft"
    for node in nodes:
        graph.add_node(node.__name__, node)
        graph.add_edge(previous, node.__name__)
        previous = node.__name__
    graph.add_edge(previous, END)
    return graph


def _run(ctx: Any, *, resume_value: Any | None) -> None:
    durability = ctx.option("durability", "async", DURABILITY)
    resume_on = ctx.option("resume_on", "tasks", RESUME_ON)
    Path(ctx.workdir).mkdir(parents=True, exist_ok=True)
    config = {"configurable": {"thread_id": ctx.run_id}}
    with closing(sqlite3.connect(Path(ctx.workdir) / "langgraph.db",
                                 check_same_thread=False)) as conn:
        app = build(ctx).compile(checkpointer=SqliteSaver(conn))
        if getattr(ctx, "from_seq", None) is not None:
            _chosen_checkpoint(app, config, ctx.from_seq)
        snapshot = app.get_state(config)
        if not snapshot.values:  # never checkpointed: start the case afresh
            app.invoke({"case_id": ctx.case_id, "order_id": ctx.order_id, "step": 0},
                       config, durability=durability)
        elif snapshot.interrupts:  # parked at the approval
            if resume_value is not None:
                app.invoke(Command(resume=resume_value), config, durability=durability)
        elif snapshot.tasks if resume_on == "tasks" else snapshot.next:
            # killed mid-run: continue from the last checkpoint and its saved writes
            app.invoke(None, config, durability=durability)


def _chosen_checkpoint(app: Any, config: dict[str, Any], from_seq: int) -> None:
    """A resume from a chosen earlier checkpoint (``ctx.from_seq``, the contract's
    ``--from-seq``): the ``from_seq``-th checkpoint of the thread, oldest first (as
    ``history`` lists them), read back through LangGraph with its own config — its
    ``checkpoint_id`` — as time travel would invoke it. Invoking the graph with that config
    would fork the thread and run every node after it again (the send included); the nodes
    after it already ran and recorded their writes, so the thread goes on from its latest
    checkpoint instead: nothing recorded after the chosen one is done again.

    Raises:
        LookupError: the thread has no such checkpoint, or it cannot be read back.
    """
    snapshots = list(reversed(list(app.get_state_history(config))))
    if not 1 <= from_seq <= len(snapshots):
        raise LookupError(f"thread {config['configurable']['thread_id']!r} has "
                          f"{len(snapshots)} checkpoint(s), not {from_seq}")
    chosen = snapshots[from_seq - 1].config
    if app.get_state(chosen).config["configurable"].get("checkpoint_id") != chosen[
            "configurable"]["checkpoint_id"]:
        raise LookupError(f"checkpoint {chosen['configurable']['checkpoint_id']} cannot be "
                          "read back")


def start(ctx: Any) -> None:
    """Run the case until it parks at the approval (``interrupt()``)."""
    _run(ctx, resume_value=None)


def resume(ctx: Any) -> None:
    """Continue the thread: with ``ctx.ticket`` the approval is answered
    (``Command(resume={"ticket": ...})``); without it a parked thread stays parked."""
    _run(ctx, resume_value={"ticket": ctx.ticket} if ctx.ticket else None)


def _phase(next_nodes: tuple[str, ...], values: dict[str, Any]) -> str:
    """A checkpoint's place in the contract's phases (docs/contract.md, "Phases")."""
    if not next_nodes:
        return "completed"
    if values.get("ticket"):
        return "sending" if values.get("sent") or "send" in next_nodes else "approved"
    if values.get("request_id"):
        return "awaiting_approval"
    return "drafting" if values.get("draft") or "request_approval" in next_nodes else "intake"


def history(ctx: Any) -> list[dict[str, Any]]:
    """The durable state through LangGraph's API (``get_state_history``), oldest first: one
    object per checkpoint with the contract's fields (docs/contract.md, "A target's
    history"): ``phase`` (from the nodes still to run), ``step``, ``draft``,
    ``approval_request_id``, ``approval_ticket``, ``send_idempotency_key``, ``email_sent``,
    ``delivery_id``."""
    path = Path(ctx.workdir) / "langgraph.db"
    if not path.exists():
        return []
    config = {"configurable": {"thread_id": ctx.run_id}}
    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        app = build(ctx).compile(checkpointer=SqliteSaver(conn))
        snapshots = list(app.get_state_history(config))
    out = []
    for snap in reversed(snapshots):
        values = snap.values or {}
        out.append({"phase": _phase(tuple(snap.next), values), "step": values.get("step"),
                    "draft": values.get("draft"), "approval_request_id": values.get("request_id"),
                    "approval_ticket": values.get("ticket"),
                    "send_idempotency_key": values.get("idempotency_key"),
                    "email_sent": bool(values.get("sent", False)),
                    "delivery_id": values.get("delivery_id")})
    return out
