"""The target adapter: how the harness drives one kind of durable loop.

One small protocol, one module per target (as pytest-xdist keeps one module per
scheduler): ``harness.targets.python`` (functions ``module:function``; the LangGraph and
DBOS examples are Python targets with an extra), the reference loop keeping its own CLI
(``docs/contract.md``). A target says how to start a case, resume/recover it, deliver the
human's decision for a gate, how its durable state is read (its ``history``), and where the
harness may kill (its ``failpoint()`` calls plus the boundaries ``harness.targets.boundaries``
installs). The gateway's ledger stays the one judge of deliveries for every target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from harness.model.target import TargetRole

__all__ = ["Role", "Target", "TargetRole"]


Role = TargetRole
"""The roles of a target worker (``harness.model.target.TargetRole``)."""


class Target(Protocol):
    """A durable loop the harness can drive.

    Attributes:
        name: how reports name it (``"reference"``, ``"python"``, ``"langgraph"``, ...).
        extra: the optional extra it needs (``harness.targets.extras``), or ``None``.
    """

    name: str
    extra: str | None

    def has(self, role: Role) -> bool:
        """Whether the target implements ``role``."""
        ...

    def argv(self, role: Role, context_file: Path) -> list[str]:
        """The command line of a worker playing ``role`` on the context in
        ``context_file``."""
        ...
