"""The smallest hand-written durable loop the harness passes: O-1001 in plain Python.

Point the harness at it with a ``[target]`` table (``kind = "python"``, ``folder``,
``start = "loop:start"``, ``resume = "loop:resume"``, ``history = "loop:history"``);
nothing is copied next to it: the fixtures, the gateway URL and the approval queue come in
the ``TargetContext``. The rules it keeps (Chapter 8's kill-resume checklist): every step
is an appended checkpoint committed before the next; the draft is made once; nothing is
sent before the queue issued a ticket for this case and draft; the idempotency key is
derived from durable facts and committed BEFORE the request leaves, and every retry or
resume reuses it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import requests


def _db(ctx: Any) -> sqlite3.Connection:
    Path(ctx.workdir).mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(Path(ctx.workdir) / "state.db")
    conn.execute("CREATE TABLE IF NOT EXISTS checkpoints (seq INTEGER PRIMARY KEY, "
                 "case_id TEXT NOT NULL, state TEXT NOT NULL)")
    conn.commit()
    return conn


def _load(conn: sqlite3.Connection, case_id: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT state FROM checkpoints WHERE case_id = ? ORDER BY seq DESC "
                       "LIMIT 1", (case_id,)).fetchone()
    return json.loads(row[0]) if row else None


def _save(conn: sqlite3.Connection, state: dict[str, Any]) -> None:
    state["step"] += 1
    with conn:  # one transaction per checkpoint
        conn.execute("INSERT INTO checkpoints (case_id, state) VALUES (?, ?)",
                     (state["case_id"], json.dumps(state, sort_keys=True)))


def _digest(draft: dict[str, str]) -> str:
    """The draft digest approvals bind to (docs/contract.md, "The draft digest")."""
    blob = json.dumps(draft, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _step(ctx: Any, conn: sqlite3.Connection, state: dict[str, Any]) -> bool:
    """Do the next step of the case and checkpoint it; False when it parks or is done."""
    phase = state["phase"]
    if phase == "intake":
        fixtures = Path(ctx.fixtures)
        order = json.loads((fixtures / "orders.json").read_text())[ctx.order_id]
        customer = json.loads((fixtures / "customers.json").read_text())[order["customer_id"]]
        first = customer["name"].split()[0]
        state["draft"] = {
            "to": customer["email"], "subject": f"Update on your order {ctx.order_id}",
            "body": f"Hi {first}, your order {ctx.order_id} is {order['status']}."}
        state["phase"] = "drafting"
    elif phase == "drafting":
        with ctx.approval_queue() as queue:
            state["approval_request_id"] = queue.request(ctx.case_id, _digest(state["draft"]))
        state["phase"] = "awaiting_approval"
    elif phase == "awaiting_approval":
        if ctx.ticket is None:
            return False  # park: only the human's ticket moves the case on
        with ctx.approval_queue() as queue:
            queue.verify(ctx.ticket, ctx.case_id, _digest(state["draft"]))
        state.update(approval_ticket=ctx.ticket, phase="sending",
                     send_idempotency_key=f"{ctx.case_id}:send_email:"
                                          f"{_digest(state['draft'])[:16]}")
    elif phase == "sending":
        with ctx.approval_queue() as queue:  # the ticket is spent on this send (its key)
            queue.consume(state["approval_ticket"], ctx.case_id, _digest(state["draft"]),
                          state["send_idempotency_key"])
        headers = {"X-ShopOps-Worker-Pid": str(os.getpid())}
        if ctx.keys:
            headers["Idempotency-Key"] = state["send_idempotency_key"]
        reply = requests.post(f"{ctx.gateway_url}/v1/messages", timeout=(2, 5),
                              headers=headers, json={"case_id": ctx.case_id, **state["draft"]})
        reply.raise_for_status()
        state.update(email_sent=True, phase="completed",
                     delivery_id=reply.json()["delivery_id"])
    else:
        return False  # completed
    _save(conn, state)
    return True


def _run(ctx: Any) -> None:
    with closing(_db(ctx)) as conn:
        state = _load(conn, ctx.case_id)
        if state is None:
            state = {"case_id": ctx.case_id, "phase": "intake", "step": 0, "email_sent": False,
                     "draft": None, "send_idempotency_key": None, "approval_ticket": None,
                     "delivery_id": None}
            _save(conn, state)
        while _step(ctx, conn, state):
            pass


def start(ctx: Any) -> None:
    """Run a new case until it parks for approval."""
    _run(ctx)


def resume(ctx: Any) -> None:
    """Resume from the last checkpoint; with ``ctx.ticket`` run to the end."""
    _run(ctx)


def history(ctx: Any) -> list[dict[str, Any]]:
    """Every checkpoint, oldest first: the state as saved, whose fields are the contract's
    (docs/contract.md, "A target's history")."""
    if not (Path(ctx.workdir) / "state.db").exists():
        return []
    with closing(_db(ctx)) as conn:
        rows = conn.execute("SELECT state FROM checkpoints WHERE case_id = ? ORDER BY seq",
                            (ctx.case_id,)).fetchall()
    return [json.loads(r[0]) for r in rows]
