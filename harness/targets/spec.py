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

import ast
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.model import (
    DEFAULT_GATE,
    DEFAULT_OWNER,
    HumanAction,
    HumanStep,
    PythonTarget,
    Scenario,
    Step,
    StorageFault,
    TargetRole,
    TicketKind,
    Wait,
    WorkerRole,
    WorkersStep,
)
from harness.model.input_files import InputFileError, read_input
from harness.targets.apps import APP_FIELDS, app_target, is_app
from harness.targets.apps import FIELDS_OF as APP_FIELDS_OF
from harness.targets.examples import BY_NAME, EXAMPLES_DIR, OPTIONS
from harness.targets.extras import ExtraMissing, require

__all__ = ["FIELDS", "KINDS", "allowed_roots", "parse_target", "target_limits"]

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
        missing folder or one outside ``allowed_roots``, a ``module:function`` whose module
        is not a file in the folder or does not define the function (``os:system``), a
        missing extra (with the install command), an option that is not a string or not
        one the shipped example accepts.
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
    folder = _folder(table, path, kind, fail)
    for role, ref in functions.items():
        why = _not_defined(folder, ref)
        if why is not None:
            raise fail(f"target.{role.value}", f"{ref!r}: {why}; allowed: module:function "
                       f"naming a function defined in a .py file inside {folder}")
    return PythonTarget(folder, functions, None, "python", options)


def _folder(table: dict[str, Any], path: Path, kind: str,
            fail: Callable[[str, str], Exception]) -> Path:
    raw = table.get("folder")
    if not isinstance(raw, str) or not raw.strip():
        raise fail("target.folder", f"required for kind = \"{kind}\": the folder holding the "
                   "module, relative to the scenario file")
    folder = (path.parent / raw).resolve()
    roots = allowed_roots(path)
    if not any(folder == r or folder.is_relative_to(r) for r in roots):
        raise fail("target.folder", f"{raw!r} resolves to {folder}, outside the allowed "
                   "places; allowed: a folder inside " + ", ".join(map(str, roots)))
    if not folder.is_dir():
        raise fail("target.folder", f"{folder} is not a folder")
    return folder


def allowed_roots(path: Path) -> tuple[Path, ...]:
    """Where a ``python`` target's ``folder`` may be (issue 24: ``folder =
    "../../../../etc"`` was accepted): inside the scenario file's folder, the current
    folder, the shipped examples (``harness.targets.examples.EXAMPLES_DIR``) or the system's
    temporary folder (``tempfile.gettempdir``, where tests and graders build targets)."""
    return tuple(dict.fromkeys(p.resolve() for p in (
        path.parent, Path.cwd(), EXAMPLES_DIR, Path(tempfile.gettempdir()))))


#: The largest module file read to find a target's function, in bytes.
_MAX_MODULE_BYTES = 4 * 1024 * 1024
#: ``ast.parse`` is not safe from two threads at once before CPython 3.11.8 (gh-106905:
#: "SystemError: AST constructor recursion depth mismatch", met with two grades in one
#: process): one parse at a time.
_PARSE_LOCK = threading.Lock()


def _not_defined(folder: Path, ref: str) -> str | None:
    """Why ``module:function`` is not a function of a module in ``folder``, else ``None``.

    Read, never imported (importing runs the target's code, as root before sealing): the
    module's file (``a/b.py`` or ``a/b/__init__.py``, resolved inside ``folder``, so
    ``os:system`` — a module of the standard library — is refused) is parsed and the name
    must be bound at its top level (``def``, ``async def``, a class, an assignment or an
    import)."""
    module, name = ref.split(":")
    base = folder.joinpath(*module.split("."))
    candidates = (base.with_name(base.name + ".py"), base / "__init__.py")
    file = next((c for c in candidates if c.is_file()), None)
    if file is None:
        return f"no module {module!r} in the target's folder (looked for " + \
            " and ".join(str(c.relative_to(folder)) for c in candidates) + ")"
    if not file.resolve().is_relative_to(folder):
        return f"{file} leads outside the target's folder"
    try:
        text = read_input(file, _MAX_MODULE_BYTES)
        with _PARSE_LOCK:
            tree = ast.parse(text, str(file))
    except (InputFileError, SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"{file} cannot be read as Python ({type(exc).__name__}: {exc})"
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    if name not in bound:
        return f"{file.relative_to(folder)} defines no {name!r} at its top level"
    return None


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
    # a framework app takes the human's rejection (with feedback too) and a late approval
    # through its framework (harness.targets.human)
    app = is_app(s.target)
    used = [("human.action", s.human_action is not HumanAction.APPROVE and not app),
            ("human.approve_at", s.approve_at is not None),
            ("human.delay_hours", bool(s.approve_delay_h) and not app),
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
            ("story", bool(s.story) and not all(_target_step(st, app) for st in s.story))]
    human = ("approvals of the email now, late (delay_hours) or rejections, with feedback "
             "or not" if app else "approvals of the email now")
    return [(name, f"not supported for target kind {s.target.name!r} (only the reference "
             "loop has it; a target may use [case], sut.idempotency_keys, [crash], "
             "[gateway], [expect] and a [[story]] of workers steps — start, recheck, "
             f"resume, from_seq —, one after another, and {human})")
            for name, on in used if on]


#: The roles a target's story may start (``_target_step``).
_TARGET_ROLES = (WorkerRole.START, WorkerRole.RECHECK, WorkerRole.RESUME)


def _target_step(step: Step, app: bool = False) -> bool:
    """Whether a target can play ``step``: workers of its own roles, one after another
    (``from_seq``: a resume from its history's N-th checkpoint, ``TargetContext.from_seq``),
    or the human approving the email now — and, for a framework app (``app``: the harness
    answers its ask through the framework), approving hours later or rejecting, with
    feedback or not. Holds, storage faults, bad tickets and the rest reach into the
    reference loop's own storage or command line."""
    if isinstance(step, WorkersStep):
        return (step.role in _TARGET_ROLES and not step.together and step.wait is Wait.EXIT
                and step.owner == DEFAULT_OWNER and step.from_phase is None
                and step.recover in (None, *_TARGET_ROLES))
    if isinstance(step, HumanStep):
        plain = step.gate == DEFAULT_GATE and step.ticket is TicketKind.ISSUED \
            and not step.twice and step.at is None
        if app:
            return plain
        return plain and step.action is HumanAction.APPROVE and not step.delay_hours
    return False
