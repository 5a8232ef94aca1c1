"""The Python target: a hand-written loop given as functions ``module:function``.

Each function takes a ``TargetContext`` and is run by ``harness.target_worker`` in a fresh
worker process, with the target's folder first on ``sys.path`` and the harness's boundary
kill points installed before the module is imported. ``start`` and ``resume`` are
required; ``decide`` (deliver the human's decision) and ``history`` (report durable state)
are optional: without ``history`` every check needing the target's state is not
applicable.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness.targets.base import Role, StateField


@dataclass(frozen=True)
class PythonTarget:
    """Functions of a module in ``folder``.

    Attributes:
        folder: the folder put first on ``sys.path`` (absolute).
        functions: ``{Role: "module:function"}``; START and RESUME present.
        exposes: the fields ``history`` reports (empty without ``history``).
        extra: optional extra the module needs (``"langgraph"``, ``"dbos"``).
        name: for reports.
    """

    folder: Path
    functions: dict[Role, str]
    exposes: frozenset[StateField] = frozenset()
    extra: str | None = None
    name: str = "python"

    def has(self, role: Role) -> bool:
        """Whether ``role`` has a function."""
        return role in self.functions

    def argv(self, role: Role, context_file: Path) -> list[str]:
        """``python -m harness.target_worker ROLE FOLDER MODULE:FUNCTION CONTEXT_FILE``.

        Raises:
            KeyError: the target has no function for ``role``.
        """
        return [sys.executable, "-m", "harness.target_worker", role.value, str(self.folder),
                self.functions[role], str(context_file)]
