"""The human at a framework's own human-in-the-loop gate, as the harness plays it (issue 25).

A LangGraph app asks with ``interrupt(value)`` and is answered with ``Command(resume=...)``;
a DBOS workflow waits in ``DBOS.recv(topic)`` and is answered with ``DBOSClient.send``. The
framework adapters (``harness.targets.langgraph_app``, ``harness.targets.dbos_app``) find
such a pending ask in the app's own durable state and record it here, in the harness's
approval records, so that the judge counts asks (``asked_once``) and compares what was sent
with what the human approved, as for a loop that asks through the approval queue.

What the human is shown (the draft an approval binds to) is the first mapping, in the
ask's value or one level inside it, that holds ``to``, ``subject`` and one of ``body``,
``text`` or ``html`` (a list ``to`` joined with ``", "``, as the gateway's Resend dialect
does): its digest is ``shopops_contract.digests.draft_digest``. An ask showing no email has
the digest of its whole value, so a send after it is content no human approved.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from harness.targets.apps import DEFAULT_REJECT_FEEDBACK, fill_feedback
from shopops.approval_records import ApprovalRequest
from shopops_contract.approvals import DEFAULT_GATE, RequestStatus
from shopops_contract.digests import draft_digest

__all__ = ["email_in", "ended_as", "prepare_app", "record_ask", "rejection_answer",
           "shown_digest"]

_BODY = ("body", "text", "html")


def _email(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    to = value.get("to")
    if isinstance(to, list) and to and all(isinstance(t, str) for t in to):
        to = ", ".join(to)
    body = next((value[f] for f in _BODY if isinstance(value.get(f), str)), None)
    if isinstance(to, str) and isinstance(value.get("subject"), str) and body is not None:
        return {"to": to, "subject": value["subject"], "body": body}
    return None


def email_in(value: Any) -> dict[str, str] | None:
    """The email (``to``, ``subject``, ``body``) ``value`` shows: ``value`` itself or one of
    its mapping's values, first found in insertion order; ``None`` when it shows none."""
    found = _email(value)
    if found is None and isinstance(value, dict):
        found = next((e for e in map(_email, value.values()) if e is not None), None)
    return found


def shown_digest(value: Any) -> str:
    """The digest an approval of an ask showing ``value`` binds to (the module docstring)."""
    email = email_in(value)
    if email is not None:
        return draft_digest(email["to"], email["subject"], email["body"])
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def record_ask(ctx: Any, request_id: str, value: Any) -> None:
    """Record that the app asked the human (request ``request_id``, showing ``value``) in
    the harness's approval records (its service, else ``ctx.approvals_db``). Idempotent per
    ``request_id``: the same pending ask found again by a later worker is one ask.

    Args:
        ctx: the worker's ``TargetContext``.
        request_id: names the framework's ask (a LangGraph interrupt's id, a DBOS
            workflow's recv).
        value: what the ask shows the human.
    """
    request = ApprovalRequest(request_id, ctx.case_id, shown_digest(value),
                              time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              RequestStatus.PENDING, gate=DEFAULT_GATE)
    with ctx.approval_queue() as queue:
        queue._store.add_request(request)  # noqa: SLF001 - the queue's own store, by id


def prepare_app(ctx: Any) -> None:
    """What the harness supplies a framework app before it is imported (documented in
    ``docs/targets.md``): the working directory is the execution's folder for its durable
    state (``ctx.workdir``, created) and the target's ``env`` table (``ctx.options["env"]``,
    JSON) is set in ``os.environ``. The email client's address (``RESEND_API_URL``, ...) is
    already in every worker's environment (``MockGateway.worker_env``)."""
    os.makedirs(ctx.workdir, exist_ok=True)
    os.chdir(ctx.workdir)
    os.environ.update(json.loads(ctx.options.get("env", "{}")))


def rejection_answer(ctx: Any, request_ids: list[str]) -> tuple[bool, Any]:
    """What the harness answers the app's ask when the human rejected one of the asks
    ``request_ids`` (the harness's approval records: the story's rejection marks the case's
    pending request ``rejected``, with the reviewer's feedback if any).

    Returns:
        ``(False, None)`` when none was rejected; else ``(True, answer)``: a plain
        rejection answers the target's ``reject`` (default ``false``); one with feedback
        answers ``reject_feedback`` (default ``{"approved": false, "feedback": "{feedback}"}``)
        with every ``{feedback}`` in its strings replaced by the reviewer's text
        (``harness.targets.apps``).
    """
    with ctx.approval_queue() as queue:
        found = [r for r in queue.requests(ctx.case_id)
                 if r.request_id in request_ids and r.status == RequestStatus.REJECTED]
    if not found:
        return False, None
    feedback = found[-1].feedback
    if not feedback:
        return True, json.loads(ctx.options.get("reject", "false"))
    raw = ctx.options.get("reject_feedback")
    template = json.loads(raw) if raw else DEFAULT_REJECT_FEEDBACK
    return True, fill_feedback(template, feedback)


def ended_as(ctx: Any) -> str:
    """The phase of an app whose run ended: ``rejected`` when the human's last decision on
    the case was a rejection (the harness answered the app's ask with it), else
    ``completed``."""
    with ctx.approval_queue() as queue:
        decided = [r for r in queue.requests(ctx.case_id)
                   if r.status != RequestStatus.PENDING]
    return ("rejected" if decided and decided[-1].status == RequestStatus.REJECTED
            else "completed")
