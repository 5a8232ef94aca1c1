"""A ``Scenario`` written back as a scenario file that ``harness.scenario.load_scenario``
reads back as the same scenario (the explorer writes its shrunk variant this way, so the
replay command it prints runs from a real file)."""

from __future__ import annotations

import json
from typing import Any

from harness.model import FaultSpec, Scenario


def _q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; DEL must be escaped too)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _b(value: bool) -> str:
    return "true" if value else "false"


def _list(items: Any) -> str:
    return "[" + ", ".join(_q(str(i)) for i in items) + "]"


def _fault(f: FaultSpec) -> str:
    extra = f", ms = {f.ms}" if f.kind in ("latency", "delay_after_accept") else (
        f", status = {f.status}" if f.kind == "error" else "")
    return f"{{ kind = {_q(f.kind)}{extra} }}"


def scenario_toml(s: Scenario, *, comment: str = "") -> str:
    """``s`` as a scenario file that ``load_scenario`` reads back as ``s`` (every field
    written, defaults too; ``path`` aside). ``comment`` goes on top as ``#`` lines."""
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines += [f"name = {_q(s.name)}", f"description = {_q(s.description)}", "",
              "[case]", f"case_id = {_q(s.case_id)}", f"order_id = {_q(s.order_id)}", "",
              "[sut]", f"policy = {_q(s.policy)}",
              f"idempotency_keys = {_b(s.idempotency_keys)}"]
    if s.read_timeout_s is not None:
        lines.append(f"read_timeout_s = {float(s.read_timeout_s)!r}")
    lines += ["",
              "[crash]",
              f"points = {_list(s.points) if s.points is not None else _q('all')}",
              f"schedules = {_list(x.id for x in s.schedules)}",
              f"baseline = {_b(s.baseline)}", f"double = {_b(s.double)}", "",
              "[human]", f"action = {_q(s.human_action)}"]
    if s.approve_at is not None:
        lines.append(f"approve_at = {_q(str(s.approve_at))}")
    lines += [f"delay_hours = {float(s.approve_delay_h)!r}", f"twice = {_b(s.approve_twice)}",
              f"ticket = {_q(s.ticket)}", "",
              "[gateway]", "faults = [" + ", ".join(_fault(f) for f in s.gateway_faults) + "]",
              "", "[concurrency]", f"resumers = {s.resumers}", f"leases = {_b(s.leases)}",
              f"lease_ttl_s = {float(s.lease_ttl_s)!r}", f"same_owner = {_b(s.same_owner)}"]
    if s.takeover_at is not None:
        lines.append(f"takeover_at = {_q(str(s.takeover_at))}")
    lines += ["", "[storage]", f"fault = {_q(s.storage_fault)}"]
    if s.lock_at is not None:
        lines.append(f"lock_at = {_q(str(s.lock_at))}")
    lines += [f"lock_ms = {s.lock_ms}", "", "[expect]",
              f"failing_checks = {_list(sorted(s.expect_failing))}",
              f"deliveries = {s.expect_deliveries}"]
    if s.expect_worker_error is not None:
        lines.append(f"worker_error = {_q(s.expect_worker_error)}")
    return "\n".join(lines) + "\n"
