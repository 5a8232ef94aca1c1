"""A scenario's ``[target]`` table, validated into a target (``None``: the reference loop).

::

    [target]
    kind = "langgraph"                  # reference (default) | python | langgraph | dbos
    options = { durability = "exit" }   # strings handed to the target (TargetContext)

    [target]
    kind = "python"
    folder = "../../examples/python_starter"   # relative to the scenario file
    start = "loop:start"                 # module:function, required
    resume = "loop:resume"               # required
    decide = "loop:decide"               # optional: deliver the human's decision
    history = "loop:history"             # optional: the durable state the checks read

Everything is checked before anything runs, and an error names the field and what is
allowed; a framework kind whose extra is not installed is refused naming the install
command (``harness.targets.extras``). ``target_limits`` lists the scenario features only
the reference loop has (they reach into its own checkpoint schema or command line).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.model import (
    HumanAction,
    PythonTarget,
    Scenario,
    StorageFault,
    TargetRole,
    TicketKind,
)
from harness.targets.apps import APP_FIELDS, app_target, is_app
from harness.targets.apps import FIELDS_OF as APP_FIELDS_OF
from harness.targets.examples import BY_NAME, OPTIONS
from harness.targets.extras import ExtraMissing, require

__all__ = ["FIELDS", "KINDS", "parse_target", "target_limits"]

KINDS = ("reference", "python", *BY_NAME)
FIELDS = ("kind", "folder", "start", "resume", "decide", "history", "options", *APP_FIELDS)
_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
_OPTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_MAX_OPTION = 200


def parse_target(table: dict[str, Any], path: Path,
                 fail: Callable[[str, str], Exception]) -> PythonTarget | None:
    """The target a ``[target]`` table names.

    Args:
        table: the table (``{}`` when absent).
        path: the scenario file (``folder`` is relative to its directory).
        fail: makes the scenario's error for ``(field, reason)``.

    Returns:
        ``None`` for the reference loop, else the ``PythonTarget``.

    Raises:
        whatever ``fail`` makes: an unknown field or kind, a bad ``module:function``, a
        missing folder, a missing extra (with the install command), an option that is not
        a string or not one the shipped example accepts.
    """
    for key in table:
        if key not in FIELDS:
            raise fail(f"target.{key}", "unknown field; allowed in [target]: "
                       + ", ".join(FIELDS))
    kind = table.get("kind", "reference")
    if kind not in KINDS:
        raise fail("target.kind", f"{kind!r}; allowed: {', '.join(KINDS)}")
    if kind in BY_NAME and "folder" in table:  # an app of that framework, no glue
        try:
            require(BY_NAME[kind].extra or "", f"target.kind = {kind!r}")
        except ExtraMissing as exc:
            raise fail("target.kind", str(exc)) from None
        return app_target(kind, table, _folder(table, path, kind, fail), fail)
    options = _options(table.get("options", {}), kind, fail)
    functions = {role: table[role.value] for role in TargetRole if role.value in table}
    for role, ref in functions.items():
        if not isinstance(ref, str) or not _REF.match(ref):
            raise fail(f"target.{role.value}", f"{ref!r} must be module:function "
                       "(e.g. \"loop:start\")")
    if kind == "reference":
        extra = sorted(set(table) - {"kind"})
        if extra:
            raise fail(f"target.{extra[0]}", "the reference loop takes no target fields; it "
                       "is configured by [sut]")
        return None
    if kind != "python":
        given = sorted(set(table) - {"kind", "options"})
        if given:
            raise fail(f"target.{given[0]}", f"kind {kind!r} without a folder is the shipped "
                       "example (examples/): give only kind and options; an app of your own "
                       "needs folder and " + APP_FIELDS_OF[kind][0])
        target = BY_NAME[kind]
        try:
            require(target.extra or "", f"target.kind = {kind!r}")  # fail() names the file
        except ExtraMissing as exc:
            raise fail("target.kind", str(exc)) from None
        return replace(target, options=options)
    for name in APP_FIELDS:
        if name in table:
            raise fail(f"target.{name}", "a field of a framework app (kind = \"langgraph\" "
                       "or \"dbos\" with a folder), not of kind = \"python\"")
    for role in (TargetRole.START, TargetRole.RESUME):
        if role not in functions:
            raise fail(f"target.{role.value}", "required for kind = \"python\" "
                       "(module:function)")
    return PythonTarget(_folder(table, path, kind, fail), functions, None, "python", options)


def _folder(table: dict[str, Any], path: Path, kind: str,
            fail: Callable[[str, str], Exception]) -> Path:
    raw = table.get("folder")
    if not isinstance(raw, str) or not raw.strip():
        raise fail("target.folder", f"required for kind = \"{kind}\": the folder holding the "
                   "module, relative to the scenario file")
    folder = (path.parent / raw).resolve()
    if not folder.is_dir():
        raise fail("target.folder", f"{folder} is not a folder")
    return folder


def _options(raw: Any, kind: str, fail: Callable[[str, str], Exception]) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise fail("target.options", "must be a table of strings, e.g. "
                   "{ durability = \"exit\" }")
    known = OPTIONS.get(kind)
    for name, value in raw.items():
        dotted = f"target.options.{name}"
        if kind == "reference":
            raise fail(dotted, "the reference loop takes no options; it is configured by "
                       "[sut]")
        if not _OPTION.match(name):
            raise fail(dotted, "an option name is a letter or _ then letters, digits, _ "
                       "(at most 64)")
        if not isinstance(value, str) or len(value) > _MAX_OPTION:
            raise fail(dotted, f"must be a string of at most {_MAX_OPTION} characters, got "
                       f"{type(value).__name__}")
        if known is not None and name not in known:
            allowed = ", ".join(known) or "none"
            raise fail(dotted, f"unknown option for kind {kind!r}; allowed: {allowed}")
        if known is not None and value not in known[name]:
            raise fail(dotted, f"{value!r}; allowed: {', '.join(known[name])}")
    return dict(raw)


def target_limits(s: Scenario) -> list[tuple[str, str]]:
    """What a scenario on a non-reference target cannot ask for (yet): the features that
    reach into the reference loop's own storage or command line (``(field, reason)``
    pairs; empty for the reference loop)."""
    if s.target is None:
        return []
    app = is_app(s.target)  # a framework app takes a plain rejection through its framework
    used = [("human.action", s.human_action is not HumanAction.APPROVE and not app),
            ("human.feedback", app and s.reject_feedback is not None),
            ("human.approve_at", s.approve_at is not None),
            ("human.delay_hours", bool(s.approve_delay_h)),
            ("human.twice", s.approve_twice),
            ("human.ticket", s.ticket is not TicketKind.ISSUED),
            ("concurrency.resumers", s.resumers > 1), ("concurrency.leases", s.leases),
            ("concurrency.takeover_at", s.takeover_at is not None),
            ("concurrency.same_owner", s.same_owner),
            ("storage.fault", s.storage_fault is not StorageFault.NONE),
            ("sut.policy", s.policy != "deterministic"),
            ("sut.read_timeout_s", s.read_timeout_s is not None),
            ("sut.max_attempts", s.max_attempts is not None),
            ("expect.worker_error", s.expect_worker_error is not None),
            ("story", bool(s.story))]
    return [(name, f"not supported for target kind {s.target.name!r} (only the reference "
             "loop has it; a target may use [case], sut.idempotency_keys, [crash], "
             "[gateway] and [expect])") for name, on in used if on]
