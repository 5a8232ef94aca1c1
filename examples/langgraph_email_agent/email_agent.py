"""An order-update email agent with a human in the loop, written the way LangGraph's
documentation writes one (https://docs.langchain.com/oss/python/langgraph/interrupts):
a ``StateGraph`` checkpointed by ``SqliteSaver``, ``interrupt()`` to ask a reviewer to
approve the draft, ``Command(resume=True)`` to answer — or, the docs' review pattern,
``Command(resume={"approved": False, "feedback": "..."})`` to send the draft back to be
redrafted with the feedback and reviewed again —, and the side effect in a node of its
own, sent with the ``resend`` SDK under an idempotency key derived from the thread (set
``EMAIL_IDEMPOTENCY_KEYS=off`` to send without one).

Run it by hand::

    RESEND_API_KEY=re_... python email_agent.py O-1001
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from typing import Any, TypedDict

import resend
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

ORDERS = {
    "O-1001": {"customer": "Ada Lovelace", "email": "ada@example.com",
               "item": "brass telescope", "status": "delayed", "eta": "2026-12-09"},
}
SENDER = "ShopOps support <support@shopops.example>"
USE_KEYS = os.environ.get("EMAIL_IDEMPOTENCY_KEYS", "on") != "off"


class State(TypedDict, total=False):
    order_id: str
    order: dict[str, Any]
    email: dict[str, str]
    feedback: str
    approved: bool
    email_id: str


def look_up_order(state: State) -> State:
    return {"order": ORDERS[state["order_id"]]}


def draft_email(state: State) -> State:
    order = state["order"]
    first = order["customer"].split()[0]
    body = (f"Hi {first},\n\nYour order {state['order_id']} ({order['item']}) is "
            f"{order['status']}; the carrier now expects it by {order['eta']}.\n\n")
    if state.get("feedback"):  # the reviewer's note on the previous draft, answered
        body += f"{state['feedback']}\n\n"
    body += "ShopOps support"
    return {"email": {"to": order["email"], "subject": f"Update on your order "
                      f"{state['order_id']}", "body": body}}


def human_review(state: State) -> State:
    # Pauses the graph; the reviewer answers with Command(resume=True or False), or with
    # Command(resume={"approved": False, "feedback": "..."}) to have the email redrafted.
    answer = interrupt({"question": "Send this email?", "email": state["email"]})
    if isinstance(answer, dict):
        return {"approved": bool(answer.get("approved")),
                "feedback": str(answer.get("feedback") or "")}
    return {"approved": bool(answer), "feedback": ""}


def route(state: State) -> str:
    if state["approved"]:
        return "send_email"
    return "draft_email" if state.get("feedback") else END


def send_email(state: State, config: RunnableConfig) -> State:
    email = state["email"]
    thread = config["configurable"]["thread_id"]
    options = {}
    if USE_KEYS:  # the same key on every retry of this send
        digest = hashlib.sha256(repr(sorted(email.items())).encode()).hexdigest()[:16]
        options["idempotency_key"] = f"{thread}/send_email/{digest}"
    sent = resend.Emails.send({"from": SENDER, "to": [email["to"]],
                               "subject": email["subject"], "text": email["body"]}, options)
    return {"email_id": sent["id"]}


builder = StateGraph(State)
builder.add_node(look_up_order)
builder.add_node(draft_email)
builder.add_node(human_review)
builder.add_node(send_email)
builder.add_edge(START, "look_up_order")
builder.add_edge("look_up_order", "draft_email")
builder.add_edge("draft_email", "human_review")
builder.add_conditional_edges("human_review", route, ["send_email", "draft_email", END])
builder.add_edge("send_email", END)

checkpointer = SqliteSaver(sqlite3.connect("checkpoints.sqlite", check_same_thread=False))
graph = builder.compile(checkpointer=checkpointer)


if __name__ == "__main__":
    config = {"configurable": {"thread_id": f"order-{sys.argv[1]}"}}
    state = graph.get_state(config)
    if not state.values:
        graph.invoke({"order_id": sys.argv[1]}, config)
    elif state.next and not state.interrupts:
        graph.invoke(None, config)  # resume after a crash
    state = graph.get_state(config)
    while state.interrupts:
        print(state.interrupts[0].value)
        if input("approve? [y/N] ").strip().lower() == "y":
            answer: Any = True
        else:  # feedback sends the draft back to be redrafted; none rejects it
            feedback = input("feedback (empty: reject)? ").strip()
            answer = {"approved": False, "feedback": feedback} if feedback else False
        graph.invoke(Command(resume=answer), config)
        state = graph.get_state(config)
    print(graph.get_state(config).values.get("email_id"))
