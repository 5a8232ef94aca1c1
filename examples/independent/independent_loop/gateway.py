"""The email gateway and the order service: POST with an Idempotency-Key, bounded retries.

A connection error, a read timeout or a 5xx is retried with the same key; a 4xx never is.
Every attempt first passes `before_attempt` (the failpoint and the fence check).
"""

import os
import time

import requests

from .errors import GatewayRejected, GatewayUnavailable

RETRY_LIMIT = 5


class Gateway:
    def __init__(self, base_url: str, read_timeout: float, keys_on: bool):
        self.base_url = base_url.rstrip("/")
        self.read_timeout = read_timeout
        self.keys_on = keys_on
        self.session = requests.Session()
        self.session.trust_env = False  # never through a proxy: the gateway is loopback

    def post(self, path: str, payload: dict, key: str, before_attempt) -> dict:
        headers = {"X-ShopOps-Worker-Pid": str(os.getpid())}
        if self.keys_on:
            headers["Idempotency-Key"] = key
        last_problem = "no attempt made"
        for attempt in range(1, RETRY_LIMIT + 1):
            before_attempt()
            try:
                reply = self.session.post(self.base_url + path, json=payload, headers=headers,
                                          timeout=(5.0, self.read_timeout))
            except requests.RequestException as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
            else:
                if reply.status_code in (200, 201):
                    try:
                        body = reply.json()
                    except ValueError:
                        body = {}
                    return body if isinstance(body, dict) else {}
                if 500 <= reply.status_code <= 599:
                    last_problem = f"HTTP {reply.status_code}"
                else:
                    raise GatewayRejected(
                        f"{path} answered {reply.status_code}: {reply.text[:200]}")
            if attempt < RETRY_LIMIT:
                time.sleep(min(0.1 * attempt, 0.5))
        raise GatewayUnavailable(f"{path}: {RETRY_LIMIT} attempts failed, last: {last_problem}")
