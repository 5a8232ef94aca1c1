"""A framework app as a target in a few lines of TOML (issue 25): the fields naming the app
and the ``PythonTarget`` over the harness's own adapter for its framework.

::

    [target]
    kind = "langgraph"
    folder = "../../examples/langgraph_email_agent"   # relative to the scenario file
    graph = "email_agent:graph"       # a compiled graph or a StateGraph builder

    [target]
    kind = "dbos"
    folder = "../../examples/dbos_email_agent"
    workflow = "email_workflow:email_workflow"   # the @DBOS.workflow function
    topic = "approval"                 # the DBOS.recv topic the human answers on

Optional: ``input`` (LangGraph: the graph's input, default ``{order_id, case_id}``),
``args`` (DBOS: the workflow's arguments, default ``[order_id]``), ``approve`` (what the
human answers on approval, default ``true``), ``reject`` (on a plain rejection, default
``false``), ``reject_feedback`` (on a rejection with feedback: any TOML value in whose
strings ``{feedback}`` is replaced by the reviewer's text, default ``{ approved = false,
feedback = "{feedback}" }``; ``FEEDBACK_SLOT``) and ``env`` (a table of strings set in the
app's environment before it is imported, e.g. its own settings). The adapters
(``harness.targets.langgraph_app``, ``harness.targets.dbos_app``) derive start, resume,
decide and history; their docstrings document what the harness supplies the app.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.model import PythonTarget, TargetRole

__all__ = ["APP_FIELDS", "APP_TYPES", "DEFAULT_REJECT_FEEDBACK", "FEEDBACK_SLOT", "FIELDS_OF",
           "app_target", "fill_feedback", "is_app"]

#: The fields of an app target, by kind; the first is required.
FIELDS_OF: dict[str, tuple[str, ...]] = {
    "langgraph": ("graph", "input", "approve", "reject", "reject_feedback", "env"),
    "dbos": ("workflow", "topic", "args", "approve", "reject", "reject_feedback", "env"),
}
#: Where the reviewer's feedback goes in ``reject_feedback`` (each string holding it).
FEEDBACK_SLOT = "{feedback}"
#: What the human answers on a rejection with feedback unless ``reject_feedback`` says.
DEFAULT_REJECT_FEEDBACK: dict[str, Any] = {"approved": False, "feedback": FEEDBACK_SLOT}
APP_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(f for fs in FIELDS_OF.values() for f in fs))
#: Each app field's TOML type(s), for the scenario's table check (``harness.plan.scenario``).
APP_TYPES: dict[str, type | tuple[type, ...]] = {
    "graph": str, "workflow": str, "topic": str, "input": dict, "args": list, "env": dict,
    "approve": (bool, int, float, str, list, dict), "reject": (bool, int, float, str, list, dict),
    "reject_feedback": (str, list, dict)}
_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
_ADAPTER = {"langgraph": "harness.targets.langgraph_app", "dbos": "harness.targets.dbos_app"}
_ROLES = {"langgraph": (TargetRole.START, TargetRole.RESUME, TargetRole.HISTORY),
          "dbos": (TargetRole.START, TargetRole.RESUME, TargetRole.DECIDE,
                   TargetRole.HISTORY)}
_JSON_FIELDS = {"input": dict, "args": list}


def app_target(kind: str, table: dict[str, Any], folder: Path,
               fail: Callable[[str, str], Exception]) -> PythonTarget:
    """The target for an app of framework ``kind`` (``"langgraph"`` or ``"dbos"``) in
    ``folder``, from its ``[target]`` table.

    Raises:
        whatever ``fail(field, reason)`` makes: a field of another kind, ``options`` (an
        app is configured by its own fields), the required field missing or not
        ``module:attr``, ``topic`` not a string, ``input``/``args``/``env`` of the wrong
        type, ``reject_feedback`` with no string holding ``{feedback}``.
    """
    allowed = FIELDS_OF[kind]
    for key in table:
        if key not in ("kind", "folder", *allowed):
            raise fail(f"target.{key}", f"not a field of a {kind} app; allowed: kind, "
                       f"folder, {', '.join(allowed)}")
    main = allowed[0]
    ref = table.get(main)
    if not isinstance(ref, str) or not _REF.match(ref):
        raise fail(f"target.{main}", f"required for a {kind} app: module:attr in the folder "
                   f"(e.g. \"app:{main}\"), got {ref!r}")
    options = {main: ref}
    for name, shape in _JSON_FIELDS.items():
        if name in table:
            if not isinstance(table[name], shape):
                raise fail(f"target.{name}", f"must be a {'table' if shape is dict else 'list'}")
            options[name] = json.dumps(table[name])
    for answer in ("approve", "reject"):
        if answer in table:
            options[answer] = json.dumps(table[answer])
    if "reject_feedback" in table:
        template = table["reject_feedback"]
        if not _holds_slot(template):
            raise fail("target.reject_feedback", "what the human answers on a rejection with "
                       f"feedback must hold {FEEDBACK_SLOT} in one of its strings, where the "
                       "reviewer's text goes (e.g. { approved = false, feedback = "
                       f"\"{FEEDBACK_SLOT}\" }}), got {template!r}")
        options["reject_feedback"] = json.dumps(template)
    if "topic" in table:
        if not isinstance(table["topic"], str):
            raise fail("target.topic", "must be a string (the DBOS.recv topic)")
        options["topic"] = table["topic"]
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in env.items()):
        raise fail("target.env", "must be a table of strings, e.g. { MY_SETTING = \"off\" }")
    if env:
        options["env"] = json.dumps(env)
    adapter = _ADAPTER[kind]
    return PythonTarget(folder, {role: f"{adapter}:{role.value}" for role in _ROLES[kind]},
                        kind, kind, options)


def fill_feedback(value: Any, feedback: str) -> Any:
    """``value`` (a TOML value: nested tables and lists) with ``FEEDBACK_SLOT`` replaced by
    ``feedback`` in each of its strings (``harness.targets.human.rejection_answer``)."""
    if isinstance(value, str):
        return value.replace(FEEDBACK_SLOT, feedback)
    if isinstance(value, dict):
        return {k: fill_feedback(v, feedback) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_feedback(v, feedback) for v in value]
    return value


def _holds_slot(value: Any) -> bool:
    """Whether a string in ``value`` holds ``FEEDBACK_SLOT`` (filling it changes ``value``)."""
    return fill_feedback(value, "\0") != value


def is_app(target: PythonTarget | None) -> bool:
    """Whether ``target`` is a framework app driven by the harness's adapter (``app_target``),
    which can take the human's rejection through the framework."""
    return target is not None and any(ref.startswith(tuple(_ADAPTER.values()))
                                      for ref in target.functions.values())
