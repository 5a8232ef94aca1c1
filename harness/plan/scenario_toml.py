"""A ``Scenario`` written back as a scenario file that ``harness.plan.scenario.load_scenario``
reads back as the same scenario (the explorer writes its shrunk variant this way, so the
replay command it prints runs from a real file)."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from harness.model import FaultKind, FaultSpec, Scenario, Step, WorkersStep

__all__ = ["scenario_toml"]


def _q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; DEL must be escaped too)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _b(value: bool) -> str:
    return "true" if value else "false"


def _list(items: Any) -> str:
    return "[" + ", ".join(_q(str(i)) for i in items) + "]"


def _fault(f: FaultSpec) -> str:
    extra = f", ms = {f.ms}" if f.kind.takes_ms else (
        f", status = {f.status}" if f.kind is FaultKind.ERROR else "")
    return f"{{ kind = {_q(f.kind)}{extra} }}"


def scenario_toml(s: Scenario, *, comment: str = "") -> str:
    """``s`` as a scenario file that ``load_scenario`` reads back as ``s`` (every field
    written, defaults too; ``path`` aside). ``comment`` goes on top as ``#`` lines. A
    scenario with a ``story`` is written with ``[[story]]`` tables instead of the tables
    that are its shorthands (``[human]``, ``[storage]``, the story's ``[concurrency]``)."""
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines += [f"name = {_q(s.name)}", f"description = {_q(s.description)}", "",
              "[case]", f"case_id = {_q(s.case_id)}", f"order_id = {_q(s.order_id)}", "",
              "[sut]", f"policy = {_q(s.policy)}",
              f"idempotency_keys = {_b(s.idempotency_keys)}"]
    if s.read_timeout_s is not None:
        lines.append(f"read_timeout_s = {float(s.read_timeout_s)!r}")
    if s.max_attempts is not None:
        lines.append(f"max_attempts = {s.max_attempts}")
    if s.order_note:
        lines.append("order_note = true")
    lines += ["",
              "[crash]",
              f"points = {_list(s.points) if s.points is not None else _q('all')}",
              f"schedules = {_list(x.id for x in s.schedules)}",
              f"baseline = {_b(s.baseline)}", f"double = {_b(s.double)}",
              f"mode = {_q(s.crash_mode)}"]
    if s.power_points is not None:
        lines.append(f"power_points = {_list(sorted(s.power_points))}")
    lines.append("")
    if not s.story:
        lines += ["[human]", f"action = {_q(s.human_action)}"]
        if s.reject_feedback is not None:
            lines.append(f"feedback = {_q(s.reject_feedback)}")
        if s.approve_at is not None:
            lines.append(f"approve_at = {_q(str(s.approve_at))}")
        lines += [f"delay_hours = {float(s.approve_delay_h)!r}",
                  f"twice = {_b(s.approve_twice)}", f"ticket = {_q(s.ticket)}", ""]
    lines += ["[gateway]", "faults = [" + ", ".join(_fault(f) for f in s.gateway_faults) + "]",
              f"dialect = {_q(s.gateway_dialect)}",
              "", "[concurrency]", f"leases = {_b(s.leases)}",
              f"lease_ttl_s = {float(s.lease_ttl_s)!r}"]
    if not s.story:
        lines += [f"resumers = {s.resumers}", f"same_owner = {_b(s.same_owner)}"]
        if s.takeover_at is not None:
            lines.append(f"takeover_at = {_q(str(s.takeover_at))}")
        lines += ["", "[storage]", f"fault = {_q(s.storage_fault)}"]
        if s.lock_at is not None:
            lines.append(f"lock_at = {_q(str(s.lock_at))}")
        lines.append(f"lock_ms = {s.lock_ms}")
    lines += ["", "[expect]", f"failing_checks = {_list(sorted(s.expect_failing))}",
              f"deliveries = {s.expect_deliveries}"]
    if s.expect_worker_error is not None:
        lines.append(f"worker_error = {_q(s.expect_worker_error)}")
    for step in s.story:
        lines += ["", "[[story]]", *_step(step)]
    return "\n".join(lines) + "\n"


#: Step fields the parser requires even where they hold their default.
_REQUIRED = frozenset({"role", "at", "fault"})


def _step(step: Step) -> list[str]:
    """One ``[[story]]`` table: ``step`` and every field that is not its default (a
    default field would be refused where it does not apply, e.g. a lock's ``ms``)."""
    out = [f"step = {_q(step.kind)}"]
    for f in fields(step):
        value = getattr(step, f.name)
        if f.name == "kind" or value is None and f.name != "recover" or (
                value == f.default and f.name not in _REQUIRED):
            continue
        if f.name == "recover" and isinstance(step, WorkersStep):
            value = "none" if value is None else value
        if isinstance(value, bool):
            text = _b(value)
        elif isinstance(value, int | float):
            text = repr(value)
        else:
            text = _q(str(value))
        out.append(f"{f.name} = {text}")
    return out
