"""Validating a scenario's ``[[story]]`` array of tables into story steps
(``harness.model.story``), as strictly as the rest of a scenario file: every problem names
the file, the line, the field (``story[2].role``) and what is allowed, before anything runs.
``scenarios/README.md`` documents each step kind with an example.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from harness.model import (
    DEFAULT_GATE,
    DEFAULT_OWNER,
    NO_RECOVERY,
    NOTE_GATE,
    PAST_LEASE,
    ClockStep,
    HoldStep,
    HumanAction,
    HumanStep,
    KillPoint,
    ReleaseStep,
    Step,
    StepKind,
    StorageFault,
    StorageStep,
    TicketKind,
    Wait,
    When,
    WorkerRole,
    WorkersStep,
)
from shopops.validators import DELAY_HOURS, FREE_TEXT, LOCK_MS, Number
from shopops_contract import labels
from shopops_contract.limits import MAX_HISTORY_ROWS
from shopops_contract.phases import Phase

__all__ = ["GATES", "STEP_FIELDS", "parse_story"]

#: The named gates a human decision can be about (the loop's gated actions).
GATES = (DEFAULT_GATE, NOTE_GATE)
#: The fields each step kind allows (besides ``step`` and ``when``), with their types.
_NUM = (int, float)
STEP_FIELDS: dict[StepKind, dict[str, type | tuple[type, ...]]] = {
    StepKind.WORKERS: {"role": str, "count": int, "together": bool, "recover": str,
                       "owner": str, "wait": str, "from_seq": int, "from_phase": str},
    StepKind.HUMAN: {"action": str, "gate": str, "twice": bool, "feedback": str,
                     "ticket": str, "delay_hours": _NUM, "at": str},
    StepKind.HOLD: {"at": str, "ms": int},
    StepKind.RELEASE: {"at": str, "on": str},
    StepKind.CLOCK: {"advance_s": (str, int, float)},
    StepKind.STORAGE: {"fault": str, "at": str, "ms": int},
}
#: Upper bounds (absurd values are bad input): workers per step, hold/lock ms, clock, hours.
#: (the delay of a decision, a lock's ms and feedback text use ``shopops.validators``).
MAX_COUNT, MAX_MS, MAX_CLOCK_S = 4, 600_000, 10 * 365 * 86400.0
_COUNT = Number(1, MAX_COUNT, "workers", integer=True)
#: ``from_seq``: a checkpoint's ``seq`` (a history longer than the harness reads is a gap).
_FROM_SEQ = Number(1, MAX_HISTORY_ROWS, "(a checkpoint's seq)", integer=True)
_HOLD_MS = Number(0, MAX_MS, "milliseconds", integer=True)
#: The range of each numeric step field (``mistyped`` names it when the type is wrong too).
_RANGES: dict[tuple[StepKind, str], Number] = {
    (StepKind.WORKERS, "count"): _COUNT, (StepKind.WORKERS, "from_seq"): _FROM_SEQ,
    (StepKind.HOLD, "ms"): _HOLD_MS,
    (StepKind.STORAGE, "ms"): LOCK_MS, (StepKind.HUMAN, "delay_hours"): DELAY_HOURS}
#: Roles that start by loading a checkpoint (where workers started together are made to
#: overlap: ``labels.CHECKPOINT_LOADED``).
_LOADING = (WorkerRole.RECHECK, WorkerRole.RESUME, WorkerRole.TAKEOVER)
_OWNER = re.compile(r"[A-Za-z0-9_.-]*(\{index\})?[A-Za-z0-9_.-]*")

Fail = Callable[[str, str, int | None], Exception]


def parse_story(raw: Any, text: str, *, leases: bool, fail: Fail,
                order_note: bool = False) -> tuple[Step, ...]:
    """The steps of a ``[[story]]`` value.

    Args:
        raw: the parsed TOML value of ``story``.
        text: the file's text (to find each step's line).
        leases: the scenario's workers take leases (``concurrency.leases``).
        order_note: the case has the order note (``sut.order_note``): its gate
            ``add_order_note`` is allowed in ``human`` steps.
        fail: builds the error to raise from ``(field, reason, line)``.

    Raises:
        whatever ``fail`` builds: not a list of tables, an unknown step kind or field, a
        wrong type, a value not allowed, or steps that cannot run in that order.
    """
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise fail("story", "must be an array of tables: [[story]] (see scenarios/README.md)",
                   _story_line(text))
    if not raw:
        raise fail("story", "needs at least one step", None)
    steps: list[Step] = []
    for i, table in enumerate(raw):
        steps.append(_step(i, table, text, leases, fail, order_note))
    _order(steps, text, fail)
    return tuple(steps)


def _step(i: int, table: dict[str, Any], text: str, leases: bool, fail: Fail,
          order_note: bool = False) -> Step:
    def bad(key: str, reason: str) -> Exception:
        return fail(f"story[{i}].{key}" if key else f"story[{i}]", reason,
                    _field_line(text, i, key))

    kinds = ", ".join(StepKind)
    if "step" not in table and "kind" in table:  # the word other tables use for a kind
        given = table["kind"]
        what = ("" if given in tuple(StepKind)
                else f"; and {given!r} is not a step kind either")
        raise bad("kind", f"{given!r}: a [[story]] step names its kind with step = \"...\", "
                  f"not kind{what}; allowed kinds: {kinds}")
    if "step" not in table:
        raise bad("step", f"required: every [[story]] step names its kind with step = "
                  f"\"...\"; allowed kinds: {kinds}")
    kind_raw = table["step"]
    if kind_raw not in tuple(StepKind):
        raise bad("step", f"{kind_raw!r}: not a step kind; allowed kinds: {kinds}")
    kind = StepKind(kind_raw)
    allowed = STEP_FIELDS[kind]
    for key, value in table.items():
        if key in ("step", "when"):
            continue
        if key not in allowed:
            raise bad(key, f"unknown field for step = \"{kind}\"; allowed: "
                      + ", ".join(["step", "when", *allowed]))
        why = mistyped(allowed[key], value, strict_bool=True, rule=_RANGES.get((kind, key)))
        if why is not None:
            raise bad(key, why)
    when = _choice(table, "when", When.ALWAYS, When, bad)

    def point(key: str, required: bool) -> KillPoint | None:
        if key not in table:
            if required:
                raise bad(key, "required: a labelled point, e.g. \"t6.checkpoint_loaded\"")
            return None
        try:
            return KillPoint.parse(table[key])
        except ValueError as exc:
            raise bad(key, str(exc)) from None

    def ms(key: str, default: int) -> int:
        try:
            return int(_HOLD_MS.check(table.get(key, default)))
        except ValueError as exc:
            raise bad(key, str(exc)) from None

    if kind is StepKind.WORKERS:
        return _workers(table, when, leases, bad)
    if kind is StepKind.HUMAN:
        return _human(table, when, point("at", False), bad, order_note)
    if kind is StepKind.HOLD:
        return HoldStep(point("at", True), ms("ms", 0), when)  # type: ignore[arg-type]
    if kind is StepKind.RELEASE:
        return ReleaseStep(point("at", True), when,  # type: ignore[arg-type]
                           on=point("on", False))
    if kind is StepKind.CLOCK:
        advance = table.get("advance_s", PAST_LEASE)
        if isinstance(advance, str):
            if advance != PAST_LEASE:
                raise bad("advance_s", f"{advance!r}; allowed: a number of seconds or "
                          f"\"{PAST_LEASE}\" (the lease TTL + 1 s)")
        elif not (math.isfinite(advance) and 0 < advance <= MAX_CLOCK_S):
            raise bad("advance_s", f"{advance!r}: a finite number of seconds in "
                      f"(0, {MAX_CLOCK_S:g}]")
        return ClockStep(advance if isinstance(advance, str) else float(advance), when)
    fault = _choice(table, "fault", None, StorageFault, bad)
    if fault is None or fault is StorageFault.NONE:
        raise bad("fault", "required; allowed: "
                  + ", ".join(f for f in StorageFault if f is not StorageFault.NONE))
    at = point("at", fault is StorageFault.LOCK)
    if at is not None and fault is not StorageFault.LOCK:
        raise bad("at", f"only a lock is taken at a point; {fault} is injected now")
    if "ms" in table and fault is not StorageFault.LOCK:
        raise bad("ms", "only with fault = \"lock\"")
    try:
        lock_ms = int(LOCK_MS.check(table.get("ms", 300)))
    except ValueError as exc:
        raise bad("ms", str(exc)) from None
    return StorageStep(fault, at, lock_ms, when)


def _workers(table: dict[str, Any], when: When, leases: bool,
             bad: Callable[[str, str], Exception]) -> WorkersStep:
    role = _choice(table, "role", None, WorkerRole, bad)
    if role is None:
        raise bad("role", "required; allowed: " + ", ".join(WorkerRole))
    try:
        count = int(_COUNT.check(table.get("count", 1)))
    except ValueError as exc:
        raise bad("count", str(exc)) from None
    recover_raw = table.get("recover", NO_RECOVERY)
    if recover_raw != NO_RECOVERY and recover_raw not in tuple(WorkerRole):
        raise bad("recover", f"{recover_raw!r}; allowed: {NO_RECOVERY}, "
                  + ", ".join(WorkerRole))
    recover = None if recover_raw == NO_RECOVERY else WorkerRole(recover_raw)
    together = table.get("together", False)
    wait = _choice(table, "wait", Wait.EXIT, Wait, bad)
    owner = table.get("owner", DEFAULT_OWNER)
    if not (0 < len(owner) <= 64 and _OWNER.fullmatch(owner)):
        raise bad("owner", f"{owner!r}: 1-64 letters, digits, '.', '_' or '-', with at most "
                  "one {index} (the worker's launch index)")
    if together and count < 2:
        raise bad("together", "needs count >= 2")
    if together and role not in (*_LOADING, WorkerRole.MIGRATE):
        raise bad("together", "workers overlap where they load the checkpoint, or migrate: "
                  "roles " + ", ".join((*_LOADING, WorkerRole.MIGRATE)))
    if together and recover is not None:
        raise bad("recover", "workers started together recover in a later step (when = "
                  "\"killed\")")
    # migrators take no lease: they overlap on the database's write lock
    lease_together = together and role is not WorkerRole.MIGRATE
    if (lease_together or role is WorkerRole.TAKEOVER or owner != DEFAULT_OWNER) and not leases:
        raise bad("together" if together else "role" if role is WorkerRole.TAKEOVER
                  else "owner", "needs concurrency.leases = true")
    if wait is Wait.HELD and (count != 1 or together or recover is not None):
        raise bad("wait", "\"held\" starts one worker (count = 1, not together, recover = "
                  "\"none\")")
    if role is WorkerRole.MIGRATE and recover not in (None, WorkerRole.MIGRATE):
        raise bad("recover", "a migration is recovered by another migration")
    from_seq, from_phase = table.get("from_seq"), table.get("from_phase")
    for key, value in (("from_seq", from_seq), ("from_phase", from_phase)):
        if value is None:
            continue
        if role not in _LOADING or together:
            raise bad(key, "a resume from a chosen checkpoint: roles "
                      + ", ".join(_LOADING) + ", not together")
        if from_seq is not None and from_phase is not None:
            raise bad(key, "from_seq or from_phase, not both")
    if from_seq is not None:
        try:
            from_seq = int(_FROM_SEQ.check(from_seq))
        except ValueError as exc:
            raise bad("from_seq", str(exc)) from None
    if from_phase is not None and from_phase not in tuple(Phase):
        raise bad("from_phase", f"{from_phase!r}; allowed: {', '.join(Phase)}")
    return WorkersStep(role, count, together, recover, owner, wait, when,
                       from_seq=from_seq, from_phase=from_phase)


def _human(table: dict[str, Any], when: When, at: KillPoint | None,
           bad: Callable[[str, str], Exception], order_note: bool = False) -> HumanStep:
    action = _choice(table, "action", HumanAction.APPROVE, HumanAction, bad)
    gate = table.get("gate", DEFAULT_GATE)
    if gate not in GATES:
        raise bad("gate", f"{gate!r}; allowed: {', '.join(GATES)}")
    if gate == NOTE_GATE and not order_note:
        raise bad("gate", f"{gate!r} needs sut.order_note = true (the case has no order note "
                  "otherwise)")
    ticket = _choice(table, "ticket", TicketKind.ISSUED, TicketKind, bad)
    hours = table.get("delay_hours", 0)
    try:
        DELAY_HOURS.check(hours)
    except ValueError as exc:
        raise bad("delay_hours", str(exc)) from None
    feedback = table.get("feedback")
    if action is HumanAction.REJECT:
        for key in ("twice", "ticket", "delay_hours"):
            if key in table:
                raise bad(key, "only when action = \"approve\"")
    elif feedback is not None:
        raise bad("feedback", "only when action = \"reject\" (the reviewer's feedback)")
    if feedback is not None:
        try:
            FREE_TEXT.check(feedback)
        except ValueError as exc:
            raise bad("feedback", str(exc)) from None
    twice = table.get("twice", False)
    if ticket is not TicketKind.ISSUED and (twice or "delay_hours" in table):
        raise bad("ticket", "a bad ticket is offered instead of an approval: twice and "
                  "delay_hours need ticket = \"issued\"")
    if ticket in (TicketKind.FORGED_IN_STATE, TicketKind.FORGED_IN_PARKED_STATE) \
            and gate != DEFAULT_GATE:
        raise bad("ticket", f"a ticket forged into the state is the email's: gate {gate!r} "
                  "takes issued, forged, other_case, stale_draft, consumed or "
                  "other_case_same_draft")
    if at is not None:
        if action is HumanAction.APPROVE and (ticket is not TicketKind.ISSUED or twice):
            raise bad("at", "an approval at a point issues the ticket itself: ticket and twice "
                      "need it unset")
        if at.label in labels.AFTER_APPROVAL:
            raise bad("at", f"{at.label} is only reached after an approval")
    return HumanStep(action, gate, twice, feedback, ticket, float(hours), at, when)


def _order(steps: list[Step], text: str, fail: Fail) -> None:
    """Steps that cannot run in the order written."""
    held: dict[KillPoint, HoldStep] = {}
    started = history = False
    for i, step in enumerate(steps):
        def bad(key: str, reason: str, i: int = i) -> Exception:
            return fail(f"story[{i}].{key}", reason, _field_line(text, i, key))

        if isinstance(step, HoldStep):
            if step.at in held:
                raise bad("at", f"{step.at} is already held by an earlier step")
            held[step.at] = step
        elif isinstance(step, ReleaseStep):
            hold = held.pop(step.at, None)
            if hold is None or hold.ms:
                raise bad("at", f"no earlier hold (without ms) at {step.at} to release")
            if step.on is not None and step.on.label in labels.AFTER_APPROVAL and not any(
                    isinstance(s, HumanStep) for s in steps[:i]):
                raise bad("on", f"{step.on.label} is only reached after an approval")
            if step.on is not None and not any(isinstance(s, WorkersStep)
                                               for s in steps[i + 1:]):
                raise bad("on", "a release when a worker reaches a point needs a later step "
                          "= \"workers\" to get there")
        elif isinstance(step, WorkersStep):
            if step.wait is Wait.HELD and not any(not h.ms for h in held.values()):
                raise bad("wait", "\"held\" needs an earlier hold step (without ms) not yet "
                          "released")
            if not started and not history and step.role in _LOADING:
                raise bad("role", f"{step.role.value!r}: nothing to recover yet; the first "
                          "workers step starts the case (role = \"start\"), unless a "
                          "storage step installs a v1 history first")
            started = True
        elif isinstance(step, StorageStep) and step.fault is StorageFault.V1_CHECKPOINT:
            if started:
                raise bad("fault", "a v1 history is installed before any worker starts")
            history = True
    if not started:
        raise fail("story", "needs at least one step = \"workers\"", _header_line(text, 0))
    for at in held:
        if not held[at].ms:
            index = steps.index(held[at])
            raise fail(f"story[{index}].at", f"the worker held at {at} is never released: add "
                       "a step = \"release\" (or give the hold ms)",
                       _field_line(text, index, "at"))


def _choice(table: dict[str, Any], key: str, default: Any, enum: Any,
            bad: Callable[[str, str], Exception]) -> Any:
    value = table.get(key, default)
    if value is None:
        return None
    if value not in tuple(enum):
        raise bad(key, f"{value!r}; allowed: {', '.join(enum)}")
    return enum(value)


def _types(expected: type | tuple[type, ...]) -> tuple[type, ...]:
    return expected if isinstance(expected, tuple) else (expected,)


def _type_text(expected: type | tuple[type, ...]) -> str:
    names = {str: "a string", bool: "true or false", list: "a list", int: "an integer",
             float: "a number"}
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in _types(expected)))


def mistyped(expected: type | tuple[type, ...], value: Any, *,
             strict_bool: bool = False, rule: Number | None = None) -> str | None:
    """Why ``value`` (as TOML parsed it) is not of the ``expected`` type(s), naming the value
    as it was written (``true``, ``1e+09``, ``"x"``); ``None`` if it is. A boolean passes as
    an integer (Python's ``bool`` is an ``int``: a table's range check then refuses it,
    naming the range) unless ``strict_bool`` (a story step's fields). With ``rule`` (the
    field's range, ``shopops.validators.Number``), the message says what is allowed in full
    (``must be an integer from 0 to 60000 milliseconds, got a number 1.5``), as the range
    check would. The one rule for a scenario's tables and its story steps."""
    types = _types(expected)
    if isinstance(value, types) and not (strict_bool and isinstance(value, bool)
                                         and bool not in types):
        return None
    shown = ("true" if value is True else "false" if value is False
             else f'"{value[:60]}"' if isinstance(value, str) else repr(value)[:60])
    kind = {bool: "a boolean", str: "a string", int: "an integer", float: "a number",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)
    wanted = rule.allowed if rule is not None else _type_text(expected)
    return f"must be {wanted}, got {kind} {shown}"


def _header_line(text: str, index: int) -> int | None:
    """The 1-based line of the ``index``-th ``[[story]]`` header."""
    seen = -1
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(r"^\s*\[\[\s*\"?story\"?\s*\]\]", line):
            seen += 1
            if seen == index:
                return number
    return None


def _story_line(text: str) -> int | None:
    """The 1-based line where ``story`` is first given, whatever its form: a ``[story]`` or
    ``[[story]]`` header, or ``story = ...`` at the top level (before any table)."""
    in_table = False
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(r"^\s*\[\[?\s*[\"']?story[\"']?\s*[.\]]", line):
            return number
        if re.match(r"^\s*\[", line):
            in_table = True
        elif not in_table and re.match(r"^\s*[\"']?story[\"']?\s*[.=]", line):
            return number
    return None


def _field_line(text: str, index: int, key: str) -> int | None:
    """The line where ``key`` is set in the ``index``-th ``[[story]]`` table — as
    ``key = ...`` in it, or as a ``[story.key]`` table of its own that follows it — else the
    table's header line."""
    header = _header_line(text, index)
    if header is None:
        return None
    lines = text.splitlines()
    for number in range(header + 1, len(lines) + 1):
        stripped = lines[number - 1].strip()
        if key and re.match(rf"^\[\s*\"?story\"?\s*\.\s*\"?{re.escape(key)}\"?\s*[.\]]",
                            stripped):
            return number  # [story.key]: a table in the last [[story]] step
        if stripped.startswith("[[") or (stripped.startswith("[") and not re.match(
                r"^\[\s*\"?story\"?\s*\.", stripped)):
            break
        if key and re.match(rf"^\"?{re.escape(key)}\"?\s*=", stripped):
            return number
    return header
