"""The example targets shipped in ``examples/``, by name (``[target] kind = "langgraph"``).

Each is a ``PythonTarget`` over its folder; see the folders' module docstrings.
"""

from __future__ import annotations

from pathlib import Path

from harness.targets.base import Role
from harness.targets.python import PythonTarget

__all__ = ["BY_NAME", "DBOS", "EXAMPLES_DIR", "LANGGRAPH", "OPTIONS", "STARTER"]

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

LANGGRAPH = PythonTarget(
    EXAMPLES_DIR / "langgraph_o1001",
    {Role.START: "o1001_graph:start", Role.RESUME: "o1001_graph:resume",
     Role.HISTORY: "o1001_graph:history"},
    extra="langgraph", name="langgraph")

DBOS = PythonTarget(
    EXAMPLES_DIR / "dbos_o1001",
    {Role.START: "o1001_workflow:start", Role.RESUME: "o1001_workflow:resume",
     Role.DECIDE: "o1001_workflow:decide", Role.HISTORY: "o1001_workflow:history"},
    extra="dbos", name="dbos")

STARTER = PythonTarget(
    EXAMPLES_DIR / "python_starter",
    {Role.START: "loop:start", Role.RESUME: "loop:resume", Role.HISTORY: "loop:history"},
    name="python")

BY_NAME: dict[str, PythonTarget] = {t.name: t for t in (LANGGRAPH, DBOS)}
"""The framework examples by ``target.kind``; the starter is a plain ``python`` target."""

#: ``target.options`` each shipped example accepts, with their allowed values (the first
#: is the default); checked before anything runs. The examples check them again through
#: ``TargetContext.option`` (``o1001_graph.DURABILITY``, ``RESUME_ON``, ``ASK``, ``INTAKE``).
OPTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "langgraph": {"durability": ("async", "sync", "exit"), "resume_on": ("tasks", "next"),
                  "ask": ("own_node", "interrupt_node"), "intake": ("serial", "fanout")},
    "dbos": {},
}
