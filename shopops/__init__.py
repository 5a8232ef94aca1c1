"""ShopOps: the reference Chapter 8 loop (checkpointing and resumability) under test.

The names below are imported on first use (PEP 562 module ``__getattr__``): importing a
submodule (``shopops.checkpoint_file``, ``shopops.failpoints``...) does not import the whole
loop and its HTTP client (``requests``, ~160 ms), which the harness's command line and
every fork server would otherwise pay at start-up.
"""

# no `from __future__` import here: tests of grading prefix this file with a broken start
import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the submodule that defines it.
_WHERE = {
    "ApprovalQueue": "shopops.approvals",
    "CheckpointStore": "shopops.checkpoint",
    "LoopResult": "shopops.loop",
    "run_loop": "shopops.loop",
    "grant_approval": "shopops.grant",
    "Phase": "shopops.phases",
    "Draft": "shopops.state",
    "State": "shopops.state",
    **{name: "shopops.errors" for name in (
        "ApprovalRefused", "CheckpointCorrupt", "CheckpointError", "CheckpointNotFound",
        "FencedOff", "IllegalTransition", "LeaseHeld", "ShopOpsError",
        "UnsupportedSchemaVersion")},
}

__all__ = [
    "ApprovalQueue", "ApprovalRefused", "CheckpointCorrupt", "CheckpointError",
    "CheckpointNotFound", "CheckpointStore", "Draft", "FencedOff", "IllegalTransition",
    "LeaseHeld", "LoopResult", "Phase", "ShopOpsError", "State", "UnsupportedSchemaVersion",
    "grant_approval", "run_loop",
]
assert sorted(__all__) == sorted(_WHERE)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from shopops.approvals import ApprovalQueue
    from shopops.checkpoint import CheckpointStore
    from shopops.errors import (
        ApprovalRefused,
        CheckpointCorrupt,
        CheckpointError,
        CheckpointNotFound,
        FencedOff,
        IllegalTransition,
        LeaseHeld,
        ShopOpsError,
        UnsupportedSchemaVersion,
    )
    from shopops.grant import grant_approval
    from shopops.loop import LoopResult, run_loop
    from shopops.phases import Phase
    from shopops.state import Draft, State


def __getattr__(name: str) -> Any:
    """Import the submodule defining ``name`` on first use. Raises ``AttributeError`` for
    a name the package does not export."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'shopops' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
