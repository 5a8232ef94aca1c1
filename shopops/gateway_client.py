"""The loop's email-gateway client: one logical send, bounded retries, the *same* key.

Chapter 8 pairs checkpoints with Chapter 6 idempotency: "Checkpoints do not give exactly-once
side effects. A crash may land after the gateway accepts a send but before the checkpoint
records it." The key, persisted before the send, makes that ambiguity safe — and every retry
must reuse it, because "if (5) fails, checkpoints create more duplicates, not fewer".

The wire protocol follows the IETF draft "The Idempotency-Key HTTP Header Field"
(draft-ietf-httpapi-idempotency-key-header): the key travels in ``Idempotency-Key``; a
repeat with the same key and payload returns the original result; a reuse with another
payload is refused with a 4xx, which is a definite answer and is never retried.
"""

from __future__ import annotations

import ipaddress
import os
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from shopops.errors import GatewayRejected, GatewayUnavailable
from shopops.failpoints import failpoint

MESSAGES_PATH = "/v1/messages"
#: The harness-owned mock order service's endpoint (served beside the email gateway).
NOTES_PATH = "/v1/order-notes"

# Transport failures after which the send may or may not have happened: retry, same key.
# ConnectTimeout is both a ConnectionError and a Timeout; ChunkedEncodingError is a reply
# cut off mid-body.
_RETRYABLE = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


@dataclass(frozen=True)
class SendResult:
    """The gateway's answer to one logical send.

    Attributes:
        delivery_id: the gateway's id of the (single) delivery, e.g. ``"dlv-000001"``.
        duplicate: ``True`` when the gateway had already delivered for this key (a retry
            after a lost reply, or a resume re-issuing the send): nothing new was sent.
        attempts: HTTP requests made for this send, 1..``max_attempts``.
        status: the final HTTP status (201 new delivery, 200 duplicate).
    """

    delivery_id: str
    duplicate: bool
    attempts: int
    status: int


class EmailGatewayClient:
    """HTTP client of the email gateway's ``POST /v1/messages``.

    Args:
        base_url: e.g. ``"http://127.0.0.1:41234"`` (no trailing path).
        use_idempotency_keys: send ``Idempotency-Key``; ``False`` omits the header entirely,
            only to demonstrate the duplicates of the chapter's exercise 3.
        connect_timeout_s: seconds to establish the TCP connection, per attempt.
        read_timeout_s: seconds to wait for the reply (between bytes), per attempt. Passed
            to requests as ``timeout=(connect, read)``; requests has no default timeout.
        max_attempts: HTTP requests per ``send`` at most (>= 1).
        backoff_s: seconds before the first retry, doubled before each later one (default
            10 ms: the gateway this loop talks to is the harness's, on loopback, where a
            retry waits for nothing but the next answer; ``0.05`` cost every execution
            with two 5xx answers 150 ms of sleep).
        worker_pid: sent as ``X-ShopOps-Worker-Pid`` (evidence for the gateway log);
            defaults to ``os.getpid()`` at each send, so it is right after a fork.
        session: a ``requests.Session`` to use (not closed by ``close``); default: own one,
            which for a loopback ``base_url`` (the harness's gateway) ignores the
            environment's proxy and ``.netrc`` settings (``trust_env = False``, requests'
            docs "Session Objects"): no proxy may sit between the loop and its gateway, and
            reading them cost ~2 ms per send.
    """

    def __init__(self, base_url: str, *, use_idempotency_keys: bool = True,
                 connect_timeout_s: float = 2.0, read_timeout_s: float = 5.0,
                 max_attempts: int = 3, backoff_s: float = 0.01, worker_pid: int | None = None,
                 session: requests.Session | None = None) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts: {max_attempts!r} must be >= 1")
        if connect_timeout_s <= 0 or read_timeout_s <= 0:
            raise ValueError("connect_timeout_s and read_timeout_s must be > 0 seconds")
        if backoff_s < 0:
            raise ValueError(f"backoff_s: {backoff_s!r} must be >= 0 seconds")
        self.base_url = base_url.rstrip("/")
        self.use_idempotency_keys = use_idempotency_keys
        self.timeout = (connect_timeout_s, read_timeout_s)
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.worker_pid = worker_pid
        self._own_session = session is None
        self.session = session if session is not None else requests.Session()
        if session is None and _loopback(self.base_url):
            self.session.trust_env = False

    def close(self) -> None:
        """Close the session if this client created it."""
        if self._own_session:
            self.session.close()

    def __enter__(self) -> EmailGatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, *, case_id: str, to: str, subject: str, body: str,
             idempotency_key: str | None,
             before_attempt: Callable[[], None] | None = None) -> SendResult:
        """Send one email, retrying transport failures and 5xx with the same key.

        Calls ``failpoint("t6.request_leaving")`` before every attempt and
        ``failpoint("t6.reply_received")`` after a successful reply.

        Args:
            case_id, to, subject, body: the message (the gateway hashes them to detect a
                key reused for another message).
            idempotency_key: the key persisted with the state before the send (Chapter 8
                checklist item 5). Required while ``use_idempotency_keys`` is on; ignored
                when it is off.
            before_attempt: called right before every attempt leaves (after the
                ``t6.request_leaving`` failpoint); it raises to stop the send — the loop
                checks there that its lease was not taken over (a fencing check as late as
                the client can make it; the gateway itself knows no fence).

        Returns:
            SendResult; ``duplicate`` tells a retry that found the first delivery.

        Raises:
            ValueError: ``idempotency_key`` missing or empty while keys are on. A fresh key
                made up here would defeat the point: a resumed worker must reuse its key.
            GatewayRejected: a 4xx (or other non-2xx, non-5xx) answer, e.g. 409 for a key
                reused with another body; not retried (fields ``status``, ``body``).
            GatewayUnavailable: ``max_attempts`` attempts without a definite answer (fields
                ``attempts``, ``last_error``); the email may have been delivered, so the
                caller must retry later with the same key.
        """
        payload = {"case_id": case_id, "to": to, "subject": subject, "body": body}
        return self._post(MESSAGES_PATH, payload, idempotency_key, before_attempt,
                          ("t6.request_leaving", "t6.reply_received"), "send")

    def add_note(self, *, case_id: str, order_id: str, body: str, idempotency_key: str | None,
                 before_attempt: Callable[[], None] | None = None) -> SendResult:
        """Add one note to the order (``POST /v1/order-notes`` on the same base URL: the
        harness's mock order service), with the same retry rules and the note's own key.

        Calls ``failpoint("t6.note_request_leaving")`` before every attempt and
        ``failpoint("t6.note_reply_received")`` after a successful reply.

        Args:
            case_id, order_id, body: the note (hashed by the service, like an email).
            idempotency_key: the note's key, persisted before its first attempt.
            before_attempt: as for ``send``.

        Returns:
            SendResult; ``delivery_id`` is the note's id (``"nte-000001"``).

        Raises:
            ValueError, GatewayRejected, GatewayUnavailable: as ``send``.
        """
        payload = {"case_id": case_id, "order_id": order_id, "body": body}
        return self._post(NOTES_PATH, payload, idempotency_key, before_attempt,
                          ("t6.note_request_leaving", "t6.note_reply_received"), "note")

    def _post(self, path: str, payload: dict[str, str], idempotency_key: str | None,
              before_attempt: Callable[[], None] | None, points: tuple[str, str],
              what: str) -> SendResult:
        """One logical request to ``path``: bounded retries, the same key every attempt;
        ``points`` are the failpoints before an attempt and after a good reply."""
        case_id = payload["case_id"]
        pid = os.getpid() if self.worker_pid is None else self.worker_pid
        headers = {"X-ShopOps-Worker-Pid": str(pid)}
        if self.use_idempotency_keys:
            if not idempotency_key:
                raise ValueError("idempotency_key is required while use_idempotency_keys is on")
            headers["Idempotency-Key"] = idempotency_key
        last_error = ""
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                time.sleep(self.backoff_s * 2 ** (attempt - 2))
            failpoint(points[0])
            if before_attempt is not None:
                before_attempt()
            try:
                response = self.session.post(self.base_url + path, json=payload,
                                             headers=headers, timeout=self.timeout,
                                             allow_redirects=False)
            except _RETRYABLE as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code >= 500:
                last_error = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if not 200 <= response.status_code < 300:
                body_ = _body(response)
                raise GatewayRejected(
                    f"gateway refused the {what} for {case_id}: HTTP {response.status_code} "
                    f"{body_}", status=response.status_code, body=body_)
            result = _result(response, attempt)
            if result is None:  # a 2xx we cannot read: retrying with the same key is safe
                last_error = f"HTTP {response.status_code}: unreadable {response.text[:200]!r}"
                continue
            failpoint(points[1])
            return result
        raise GatewayUnavailable(
            f"gateway unavailable for the {what} of {case_id} after {self.max_attempts} "
            f"attempts: {last_error}",
            attempts=self.max_attempts, last_error=last_error)


def _body(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def _result(response: requests.Response, attempt: int) -> SendResult | None:
    data = _body(response)
    if not isinstance(data, dict) or not isinstance(data.get("delivery_id"), str):
        return None
    return SendResult(data["delivery_id"], bool(data.get("duplicate", False)), attempt,
                      response.status_code)


def _loopback(url: str) -> bool:
    """``url``'s host is a loopback address or ``localhost``."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
