"""The loop under test when it is not the reference: a target's roles and the target itself
(functions ``module:function`` run by ``harness.targets.worker``) — plain frozen data
(``docs/design.md``, "Targets"). What its ``history`` shows is observed by
``harness.judge.observers.target``.

Parsing of a scenario's ``[target]`` table lives in ``harness.targets.spec``; the shipped
examples in ``harness.targets.examples``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

__all__ = ["PythonTarget", "TargetRole"]


class TargetRole(StrEnum):
    """What a target worker is asked to do."""

    START = "start"  # run a new case until it parks at the human's gate
    RESUME = "resume"  # resume/recover it; with a ticket in the context, to the end
    DECIDE = "decide"  # deliver the human's decision (e.g. a DBOS message)
    HISTORY = "history"  # print its durable state, oldest first, as JSON


@dataclass(frozen=True)
class PythonTarget:
    """A loop given as functions of a module in ``folder``, each run in a fresh worker by
    ``python -m harness.targets.worker ROLE FOLDER MODULE:FUNCTION CONTEXT_FILE``.

    Attributes:
        folder: the folder put first on ``sys.path`` (absolute).
        functions: ``{TargetRole: "module:function"}``; START and RESUME present.
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

    @property
    def untrusted(self) -> bool:
        """Named on the command line as the implementation under test (``--sut DIR
        --target KIND``: a student's folder): its workers and its ``history`` read run
        sealed when the harness is root (``harness.run.execution``), as an untrusted
        package's do. A scenario's own ``[target]`` (a shipped example, the grader's
        choice) runs as the harness's user."""
        return self.source is not None

    def argv(self, role: TargetRole, context_file: Path) -> list[str]:
        """``python -m harness.targets.worker ROLE FOLDER MODULE:FUNCTION CONTEXT_FILE``.

        Raises:
            KeyError: the target has no function for ``role``.
        """
        return [sys.executable, "-m", "harness.targets.worker", role.value, str(self.folder),
                self.functions[role], str(context_file)]
