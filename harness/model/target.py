"""The loop under test when it is not the reference: a target's roles, the durable state it
exposes, one snapshot of that state, and the target itself (functions ``module:function``
run by ``harness.targets.worker``) — plain frozen data (``docs/design.md``, "Targets").

Parsing of a scenario's ``[target]`` table lives in ``harness.targets.spec``; the shipped
examples in ``harness.targets.examples``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

__all__ = ["DurableState", "PythonTarget", "StateField", "TargetRole"]


class TargetRole(StrEnum):
    """What a target worker is asked to do."""

    START = "start"  # run a new case until it parks at the human's gate
    RESUME = "resume"  # resume/recover it; with a ticket in the context, to the end
    DECIDE = "decide"  # deliver the human's decision (e.g. a DBOS message)
    HISTORY = "history"  # print its durable state, oldest first, as JSON


class StateField(StrEnum):
    """Durable facts a check may need from a target's own storage."""

    DRAFT = "draft"
    PHASE = "phase"
    STEP = "step"
    SENT = "sent"
    KEY = "key"
    ATTEMPTS = "attempts"


_TYPES: dict[str, type] = {"phase": str, "step": int, "draft": dict, "sent": bool, "key": str,
                           "attempts": int}


@dataclass(frozen=True)
class DurableState:
    """One durable snapshot of a target, as its own API reports it (LangGraph's
    ``get_state_history``, DBOS's ``list_workflow_steps``). A field the target does not
    expose is ``None`` (and absent from the target's ``exposes``)."""

    phase: str | None = None
    step: int | None = None
    draft: dict[str, Any] | None = None
    sent: bool | None = None
    key: str | None = None
    attempts: int | None = None

    @classmethod
    def from_dict(cls, data: Any, where: str) -> DurableState:
        """Validate one snapshot dict printed by a target's ``history`` (unknown keys are
        ignored: a target may print more than the checks read).

        Raises:
            ValueError: not a dict, or a mistyped value (the message names ``where``).
        """
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        values = {k: v for k, v in data.items() if k in _TYPES}
        for name, value in values.items():
            kind = _TYPES[name]
            if value is not None and (not isinstance(value, kind)
                                      or (kind is int and isinstance(value, bool))):
                raise ValueError(f"{where}.{name}: {value!r} is not a {kind.__name__}")
        return cls(**values)


@dataclass(frozen=True)
class PythonTarget:
    """A loop given as functions of a module in ``folder``, each run in a fresh worker by
    ``python -m harness.targets.worker ROLE FOLDER MODULE:FUNCTION CONTEXT_FILE``.

    Attributes:
        folder: the folder put first on ``sys.path`` (absolute).
        functions: ``{TargetRole: "module:function"}``; START and RESUME present.
        exposes: the fields ``history`` reports (empty without ``history``): a check that
            needs another is not applicable.
        extra: the optional extra the module needs (``"langgraph"``, ``"dbos"``), or
            ``None``.
        name: how reports name it (``python``, ``langgraph``, ``dbos``).
        options: ``target.options`` (strings), handed over in ``TargetContext.options``.
        source: the folder whose ``target.toml`` named it on the command line
            (``--sut DIR --target KIND``: every scenario then runs on it, and a replay
            command must say so), or ``None`` when a scenario's own ``[target]`` did.
    """

    folder: Path
    functions: dict[TargetRole, str]
    exposes: frozenset[StateField] = frozenset()
    extra: str | None = None
    name: str = "python"
    options: dict[str, str] = field(default_factory=dict)
    source: Path | None = None

    def __hash__(self) -> int:  # the dicts are never mutated after construction
        return hash((self.folder, self.name, tuple(sorted(self.functions.items())),
                     tuple(sorted(self.options.items()))))

    def has(self, role: TargetRole) -> bool:
        """Whether ``role`` has a function."""
        return role in self.functions

    def argv(self, role: TargetRole, context_file: Path) -> list[str]:
        """``python -m harness.targets.worker ROLE FOLDER MODULE:FUNCTION CONTEXT_FILE``.

        Raises:
            KeyError: the target has no function for ``role``.
        """
        return [sys.executable, "-m", "harness.targets.worker", role.value, str(self.folder),
                self.functions[role], str(context_file)]
