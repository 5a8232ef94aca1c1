"""The real email wires the mock gateway speaks beside its own API, translated to and from
the email ledger (``harness.services.ledger.EMAIL``), so that every dialect leaves the same
evidence: one logged request, at most one delivery per key, the normalised message's digest,
the sender the kernel names.

Resend (``POST /emails``), as its public API reference and its Python SDK (``resend``,
``resend.Emails.send(params, {"idempotency_key": ...})``) define it: a JSON object with
``from``, ``to`` (a string or a list of strings), ``subject`` and ``html`` and/or ``text``;
the ``Idempotency-Key`` header. A sent email is answered 200 ``{"id": ...}`` — a replay with
the same key and payload gets the same answer — an error as ``{"statusCode", "name",
"message"}`` (409 ``invalid_idempotent_request`` for a key reused with another payload, 422
``missing_required_field``/``validation_error`` for a bad body), which the SDK raises as its
``ResendError`` subclasses.

SMTP (``harness.services.smtp``): the message's ``Resend-Idempotency-Key`` header (Resend's
SMTP idempotency header), else its ``Message-ID``, is the key; ``To`` (else the envelope's
recipients), ``Subject`` and the plain-text part (else the HTML one; its last line break,
which MIME adds, removed) are the message.

The case a message belongs to: the gateway's ``case_id`` (an execution's gateway serves one
case); a gateway with none (``shopops-chaos gateway serve``) takes a Resend tag named
``case_id``, or an SMTP header ``X-ShopOps-Case``.
"""

from __future__ import annotations

import dataclasses
import email
import email.policy
from email.message import EmailMessage
from typing import Any

from harness.model.kinds import FaultKind
from harness.services.ledger import json_object

__all__ = ["CASE_HEADER", "CASE_TAG", "MOCK_RESEND_KEY", "RESEND_PATH", "SMTP_KEY_HEADER",
           "Outcome", "parse_resend", "parse_smtp", "resend_reply", "smtp_reply"]

#: The largest request body or SMTP message the gateway takes, in bytes (a message is a few
#: KiB): HTTP answers 413 (werkzeug's ``Request.max_content_length``), SMTP 552
#: (aiosmtpd's ``data_size_limit``).
MAX_BODY = 1 << 20

#: Resend's SMTP header for an idempotency key (its idempotency-keys documentation).
SMTP_KEY_HEADER = "Resend-Idempotency-Key"
#: Where a gateway serving no one case finds a message's case (a Resend tag, an SMTP header).
CASE_TAG = "case_id"
CASE_HEADER = "X-ShopOps-Case"

#: The ``RESEND_API_KEY`` a worker is given: the SDK sends it; the gateway ignores it.
MOCK_RESEND_KEY = "re_shopops_mock_gateway"

#: Resend's send-email path (``harness.services.dialects``), served beside the native API.
RESEND_PATH = "/emails"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the gateway decided for one request, in its own terms (``MockGateway.submit``).

    Attributes:
        status: 201 new delivery, 200 replay, 400/413 bad request, 403 refused sender,
            409 key reused with another body, 5xx an injected ``error`` fault.
        reply: the native API's JSON answer.
        fault: a fault the caller must carry out after the delivery (``drop_after_accept``,
            ``delay_after_accept``), else ``None``.
        hold_s: how long ``delay_after_accept`` holds the answer, in seconds.
    """

    status: int
    reply: dict[str, Any]
    fault: FaultKind | None = None
    hold_s: float = 0.0


Parsed = tuple[dict[str, str] | None, tuple[str, str] | None]


def parse_resend(raw: bytes, case_id: str | None) -> Parsed:
    """``(message, None)`` — the email ledger's ``case_id``, ``to``, ``subject``, ``body`` —
    or ``(None, (field, why))`` for a Resend ``POST /emails`` body. ``to`` as a list is
    joined with ``", "``; ``body`` is ``text``, else ``html``."""
    data, problem = json_object(raw)
    if data is None:
        return None, problem
    for field in ("from", "to", "subject"):
        if field not in data:
            return None, (field, "missing")
    for field in ("from", "subject"):
        if not isinstance(data[field], str):
            return None, (field, f"must be a string, got {type(data[field]).__name__}")
    to = data["to"]
    if isinstance(to, list) and to and all(isinstance(t, str) for t in to):
        to = ", ".join(to)
    if not isinstance(to, str) or not to:
        return None, ("to", "must be a non-empty string or list of strings")
    body = next((data[f] for f in ("text", "html") if isinstance(data.get(f), str)), None)
    if body is None:
        return None, ("text", "missing: one of text or html (a string) is required")
    tagged = _tags(data.get("tags"))
    if len(tagged) > 1:
        return None, ("tags", f"{len(tagged)} tags named {CASE_TAG!r} with different values "
                      f"({', '.join(map(repr, sorted(tagged)))}); allowed: one case")
    case = case_id if case_id is not None else next(iter(tagged), None)
    if case is None:
        return None, ("tags", f"no case: this gateway serves no one case; add a tag named "
                      f"{CASE_TAG!r}")
    return {"case_id": case, "to": to, "subject": data["subject"], "body": body}, None


def _tags(tags: Any) -> set[str]:
    """The values of the ``case_id`` tags (strings) in a Resend ``tags`` list."""
    if not isinstance(tags, list):
        return set()
    return {t["value"] for t in tags if isinstance(t, dict) and t.get("name") == CASE_TAG
            and isinstance(t.get("value"), str)}


def resend_reply(status: int, reply: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The Resend wire answer ``(HTTP status, JSON)`` for the gateway's own ``(status,
    reply)`` (201 new, 200 replay, 400/413 bad body, 403, 409, 5xx injected)."""
    if status in (200, 201):
        return 200, {"id": reply["delivery_id"]}
    if status == 409:
        return 409, _error(409, "invalid_idempotent_request",
                           "Same idempotency key used with a different request payload. "
                           "Change your idempotency key or payload.")
    if status == 400:
        name = ("missing_required_field" if str(reply.get("detail", "")).endswith(": missing")
                else "validation_error")
        return 422, _error(422, name, str(reply.get("detail", "invalid request")))
    if status == 403:
        return 403, _error(403, "invalid_access", str(reply.get("detail", "forbidden")))
    if status == 413:
        return 413, _error(413, "validation_error", str(reply.get("detail", "too large")))
    return status, _error(status, "application_error", "injected fault")


def _error(code: int, name: str, message: str) -> dict[str, Any]:
    return {"statusCode": code, "name": name, "message": message}


def parse_smtp(content: bytes, rcpt_tos: list[str], case_id: str | None
               ) -> tuple[dict[str, str] | None, tuple[str, str] | None, str | None]:
    """``(message, problem, key)`` for one SMTP ``DATA``: the email ledger's message (or
    ``None`` and ``(field, why)``) and the idempotency key (``Resend-Idempotency-Key``, else
    ``Message-ID``, else ``None``)."""
    if content.endswith(b"\n\r\n"):  # smtplib ended a message of LF lines with a CRLF
        content = content[:-2]  # of the DATA framing: not the message's
    try:
        msg = email.message_from_bytes(content, policy=email.policy.default)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad message
        return None, ("DATA", f"not an RFC 5322 message: {exc}"), None
    assert isinstance(msg, EmailMessage)
    key = msg.get(SMTP_KEY_HEADER) or msg.get("Message-ID")
    key = str(key).strip() if key is not None else None
    to = str(msg.get("To") or ", ".join(rcpt_tos))
    subject = msg.get("Subject")
    if subject is None:
        return None, ("Subject", "missing"), key
    part = msg.get_body(preferencelist=("plain", "html"))
    if part is None:
        return None, ("DATA", "no text/plain or text/html part"), key
    case = case_id if case_id is not None else msg.get(CASE_HEADER)
    if case is None:
        return None, (CASE_HEADER, "no case: this gateway serves no one case"), key
    # MIME ends a part with a line break the sender's text did not have
    body = str(part.get_content()).replace("\r\n", "\n")
    body = body[:-1] if body.endswith("\n") else body
    return {"case_id": str(case), "to": to, "subject": str(subject), "body": body}, None, key


def smtp_reply(status: int, reply: dict[str, Any]) -> str:
    """The SMTP reply line for the gateway's own ``(status, reply)``."""
    if status in (200, 201):
        # a replay gets the first answer, as over HTTP; the id is the last word, as in
        # Postfix's "queued as"
        return f"250 2.0.0 OK: queued as {reply['delivery_id']}"
    if status == 409:
        return "554 5.7.0 idempotency key reused with a different message"
    if status == 403:
        return "550 5.7.1 not this execution's worker"
    if status in (400, 413):
        return f"550 5.6.0 {reply.get('detail', 'invalid message')}"
    return f"451 4.3.0 injected fault ({status})"
