"""The target adapter: how the harness drives one kind of durable loop.

One small protocol, one module per target (as pytest-xdist keeps one module per
scheduler): ``harness.targets.python`` (functions ``module:function``; the LangGraph and
DBOS examples are Python targets with an extra), the reference loop keeping its own CLI
(``harness.sut``). A target says how to start a case, resume/recover it, deliver the
human's decision for a gate, which durable state it exposes for the checks, and where the
harness may kill (its ``failpoint()`` calls plus the boundaries ``harness.boundaries``
installs). The gateway's ledger stays the one judge of deliveries for every target.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol


class Role(StrEnum):
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


@dataclass(frozen=True)
class DurableState:
    """One durable snapshot of a target, as its own API reports it (LangGraph's
    ``get_state_history``, DBOS's ``list_workflow_steps``). A field the target does not
    expose is ``None`` and listed in the target's ``exposes`` as absent."""

    phase: str | None = None
    step: int | None = None
    draft: dict[str, Any] | None = None
    sent: bool | None = None
    key: str | None = None
    attempts: int | None = None

    @classmethod
    def from_dict(cls, data: Any, where: str) -> DurableState:
        """Validate one snapshot dict printed by a target's ``history``.

        Raises:
            ValueError: not a dict, an unknown field, or a mistyped value (names ``where``).
        """
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        known = {f.value for f in StateField}
        values = {k: v for k, v in data.items() if k in known}
        types = {"phase": str, "step": int, "draft": dict, "sent": bool, "key": str,
                 "attempts": int}
        for name, value in values.items():
            if value is not None and (not isinstance(value, types[name])
                                      or (types[name] is int and isinstance(value, bool))):
                raise ValueError(f"{where}.{name}: {value!r} is not a {types[name].__name__}")
        return cls(**values)


class Target(Protocol):
    """A durable loop the harness can drive.

    Attributes:
        name: how reports name it (``"reference"``, ``"python"``, ``"langgraph"``, ...).
        exposes: the ``StateField`` s its ``history`` reports; a check that needs another
            is reported not applicable, never passed.
        extra: the optional extra it needs (``harness.targets.extras``), or ``None``.
    """

    name: str
    exposes: frozenset[StateField]
    extra: str | None

    def has(self, role: Role) -> bool:
        """Whether the target implements ``role``."""
        ...

    def argv(self, role: Role, context_file: Path) -> list[str]:
        """The command line of a worker playing ``role`` on the context in
        ``context_file``."""
        ...
