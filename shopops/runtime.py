"""Wiring: the services a loop talks to, built explicitly or from the environment.

The chapter's usage calls ``run_loop(state)`` and ``grant_approval(state, ticket)`` with no
wiring, so a process-wide default is built on first use from these variables:

- ``SHOPOPS_APPROVALS_DB``: the approval queue's SQLite file (``shopops-approvals.db``);
- ``SHOPOPS_APPROVALS_SOCKET``: the harness's approval service (``@name`` or a socket path);
  set, the queue's records live there instead (``shopops.approval_client``);
- ``SHOPOPS_GATEWAY_URL``: base URL of the email gateway (none: a send fails);
- ``SHOPOPS_IDEMPOTENCY_KEYS``: ``on`` (default) or ``off`` (exercise 3 demonstration);
- ``SHOPOPS_POLICY``: ``deterministic`` (default) or ``varying``;
- ``SHOPOPS_FIXTURES``: folder with ``customers.json``/``orders.json`` (``fixtures/``);
- ``SHOPOPS_CLOCK_OFFSET_S``: seconds added to the clock (simulated time; default 0);
- ``SHOPOPS_READ_TIMEOUT_S``: seconds the gateway client waits for a reply per attempt
  (requests' read timeout; default 5);
- ``SHOPOPS_MAX_ATTEMPTS``: recovery attempts before a case is dead-lettered (default 5).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shopops.approvals import ENV_SOCKET, ApprovalQueue
from shopops.errors import ConfigError
from shopops.policy import Policy, make_policy
from shopops.records import Records

if TYPE_CHECKING:  # imported where a client is made: requests costs ~50 ms to import, and
    # the harness reads this module (offset_clock) without ever sending
    from shopops.gateway_client import EmailGatewayClient

TOOL_NAMES = ("get_customer", "get_order", "draft_email", "propose_send", "send_email")
#: Hash of the tool names and their argument shapes: snapshot metadata (Chapter 8).
TOOL_SCHEMA_HASH = hashlib.sha256(",".join(TOOL_NAMES).encode()).hexdigest()[:16]


def clock_from_env(env: dict[str, str] | None = None) -> Callable[[], float]:
    """Epoch seconds, shifted by ``SHOPOPS_CLOCK_OFFSET_S`` (a simulated clock: the harness
    runs a worker "hours later" without waiting hours).

    Raises:
        ConfigError: the offset is not a number.
    """
    raw = (os.environ if env is None else env).get("SHOPOPS_CLOCK_OFFSET_S", "0")
    try:
        offset = float(raw)
    except ValueError:
        raise ConfigError(f"SHOPOPS_CLOCK_OFFSET_S={raw!r}; allowed: a number of seconds",
                          variable="SHOPOPS_CLOCK_OFFSET_S", value=raw,
                          allowed="seconds") from None
    return offset_clock(offset)


def positive_seconds(env: dict[str, str], variable: str, default: float,
                     maximum: float = 3600.0) -> float:
    """A finite number ``0 < x <= maximum`` read from ``env[variable]`` (``default`` unset).

    Raises:
        ConfigError: not a number, not finite, or out of range.
    """
    raw = env.get(variable)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value <= maximum):  # NaN fails every comparison
        raise ConfigError(f"{variable}={raw!r}; allowed: a finite number of seconds in "
                          f"(0, {maximum:g}]", variable=variable, value=raw,
                          allowed=f"(0, {maximum:g}] seconds")
    return value


def max_attempts_from_env(env: dict[str, str], default: int) -> int:
    """``SHOPOPS_MAX_ATTEMPTS`` as an integer 1..1000 (``default`` when unset).

    Raises:
        ConfigError: not an integer in range (``shopops.validators.MAX_ATTEMPTS``).
    """
    from shopops.validators import MAX_ATTEMPTS

    raw = env.get("SHOPOPS_MAX_ATTEMPTS")
    if raw is None:
        return default
    try:
        return int(MAX_ATTEMPTS.parse(raw))
    except ValueError as exc:
        raise ConfigError(f"SHOPOPS_MAX_ATTEMPTS: {exc}", variable="SHOPOPS_MAX_ATTEMPTS",
                          value=raw, allowed=MAX_ATTEMPTS.allowed) from None


def offset_clock(offset_s: float) -> Callable[[], float]:
    """``time.time`` shifted by ``offset_s`` seconds (``time.time`` itself for 0)."""
    return (lambda: time.time() + offset_s) if offset_s else time.time


@dataclass
class Services:
    """What the loop's tools talk to.

    Attributes:
        approvals: the approval queue (server-side tickets).
        gateway: the email gateway client, or ``None`` (a send then raises ``ConfigError``).
        policy: the model stand-in.
        records: the CRM records.
    """

    approvals: ApprovalQueue
    gateway: EmailGatewayClient | None
    policy: Policy
    records: Records

    def require_gateway(self) -> EmailGatewayClient:
        """The gateway client. Raises ``ConfigError`` when none is configured."""
        if self.gateway is None:
            raise ConfigError(
                "no email gateway configured: set SHOPOPS_GATEWAY_URL (e.g. the URL printed "
                "by `shopops-chaos gateway serve`)",
                variable="SHOPOPS_GATEWAY_URL", value=None, allowed="an http:// URL",
            )
        return self.gateway


def services_from_env(env: dict[str, str] | None = None) -> Services:
    """Build ``Services`` from environment variables (table above).

    Raises:
        ConfigError: ``SHOPOPS_IDEMPOTENCY_KEYS`` or ``SHOPOPS_POLICY`` has a value not allowed.
    """
    env = dict(os.environ if env is None else env)
    keys = env.get("SHOPOPS_IDEMPOTENCY_KEYS", "on")
    if keys not in ("on", "off"):
        raise ConfigError(
            f"SHOPOPS_IDEMPOTENCY_KEYS={keys!r}; allowed: on, off",
            variable="SHOPOPS_IDEMPOTENCY_KEYS", value=keys, allowed="on, off",
        )
    policy_name = env.get("SHOPOPS_POLICY", "deterministic")
    try:
        policy = make_policy(policy_name)
    except ValueError as exc:
        raise ConfigError(
            f"SHOPOPS_POLICY: {exc}", variable="SHOPOPS_POLICY", value=policy_name,
            allowed="deterministic, varying",
        ) from None
    url = env.get("SHOPOPS_GATEWAY_URL")
    read_timeout = positive_seconds(env, "SHOPOPS_READ_TIMEOUT_S", 5.0)
    gateway = None
    if url:
        from shopops.gateway_client import EmailGatewayClient

        gateway = EmailGatewayClient(url, use_idempotency_keys=keys == "on",
                                     read_timeout_s=read_timeout)
    return Services(
        approvals=ApprovalQueue(env.get("SHOPOPS_APPROVALS_DB", "shopops-approvals.db"),
                                clock=clock_from_env(env),
                                service=env.get(ENV_SOCKET) or None),
        gateway=gateway,
        policy=policy,
        records=Records.load(env.get("SHOPOPS_FIXTURES") or None),
    )


_default: Services | None = None


def default_services() -> Services:
    """The process-wide ``Services``, built from the environment on first use."""
    global _default
    if _default is None:
        _default = services_from_env()
    return _default


def set_default_services(services: Services | None) -> None:
    """Replace (or with ``None`` drop) the process-wide default; used by the CLI and by a
    fork server so that no connection leaks from one execution into the next."""
    global _default
    _default = services
