"""An order-update email workflow with a human in the loop, written the way DBOS's
documentation writes one (https://docs.dbos.dev/python/tutorials/workflow-communication):
steps for each side effect, ``DBOS.set_event`` to publish the draft, ``DBOS.recv`` to
wait durably for the reviewer's decision (sent with ``DBOS.send``/``DBOSClient.send``:
``True``, ``False``, or ``{"approved": False, "feedback": "..."}`` to have the email
redrafted with the feedback and reviewed again),
recovery of interrupted workflows by ``DBOS.launch()``, and the email sent with the
``resend`` SDK under the idempotency key DBOS recommends, the workflow ID and step ID (set
``EMAIL_IDEMPOTENCY_KEYS=off`` to send without one).

Run it by hand::

    RESEND_API_KEY=re_... python email_workflow.py O-1001
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import resend
from dbos import DBOS, DBOSConfig, SetWorkflowID

ORDERS = {
    "O-1001": {"customer": "Ada Lovelace", "email": "ada@example.com",
               "item": "brass telescope", "status": "delayed", "eta": "2026-12-09"},
}
SENDER = "ShopOps support <support@shopops.example>"
USE_KEYS = os.environ.get("EMAIL_IDEMPOTENCY_KEYS", "on") != "off"

config: DBOSConfig = {
    "name": "email-agent",
    "system_database_url": os.environ.get("DBOS_SYSTEM_DATABASE_URL"),
}
DBOS(config=config)


@DBOS.step()
def look_up_order(order_id: str) -> dict[str, Any]:
    return ORDERS[order_id]


@DBOS.step()
def draft_email(order_id: str, order: dict[str, Any], feedback: str = "") -> dict[str, str]:
    first = order["customer"].split()[0]
    body = (f"Hi {first},\n\nYour order {order_id} ({order['item']}) is {order['status']}; "
            f"the carrier now expects it by {order['eta']}.\n\n")
    if feedback:  # the reviewer's note on the previous draft, answered
        body += f"{feedback}\n\n"
    body += "ShopOps support"
    return {"to": order["email"], "subject": f"Update on your order {order_id}", "body": body}


@DBOS.step()
def send_email(email: dict[str, str]) -> str:
    options = {}
    if USE_KEYS:  # the same on every retry of this step
        options["idempotency_key"] = f"{DBOS.workflow_id}-{DBOS.step_id}"
    sent = resend.Emails.send({"from": SENDER, "to": [email["to"]],
                               "subject": email["subject"], "text": email["body"]}, options)
    return sent["id"]


@DBOS.workflow()
def email_workflow(order_id: str) -> str | None:
    order = look_up_order(order_id)
    email = draft_email(order_id, order)
    while True:
        DBOS.set_event("draft", email)  # the reviewer reads it with DBOS.get_event
        decision = DBOS.recv("approval", timeout_seconds=7 * 24 * 3600)
        feedback = decision.get("feedback", "") if isinstance(decision, dict) else ""
        if isinstance(decision, dict):
            decision = decision.get("approved")
        if decision:
            return send_email(email)
        if not feedback:  # rejected (or no answer within the week)
            return None
        email = draft_email(order_id, order, feedback)  # redraft, and ask again


if __name__ == "__main__":
    DBOS.launch()
    with SetWorkflowID(f"order-{sys.argv[1]}"):
        handle = DBOS.start_workflow(email_workflow, sys.argv[1])
    shown = None
    while handle.get_status().status == "PENDING":
        draft = DBOS.get_event(handle.workflow_id, "draft", timeout_seconds=60)
        if draft == shown:  # the redraft is not published yet
            time.sleep(0.1)
            continue
        shown = draft
        print(draft)
        if input("approve? [y/N] ").strip().lower() == "y":
            DBOS.send(handle.workflow_id, True, "approval")
            break
        feedback = input("feedback (empty: reject)? ").strip()
        DBOS.send(handle.workflow_id,
                  {"approved": False, "feedback": feedback} if feedback else False, "approval")
        if not feedback:
            break
    print(handle.get_result())
