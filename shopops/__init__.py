"""ShopOps: the reference Chapter 8 loop (checkpointing and resumability) under test."""

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

__all__ = [
    "ApprovalQueue",
    "CheckpointStore",
    "LoopResult",
    "grant_approval",
    "run_loop",
    "ApprovalRefused",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointNotFound",
    "Draft",
    "FencedOff",
    "IllegalTransition",
    "LeaseHeld",
    "Phase",
    "ShopOpsError",
    "State",
    "UnsupportedSchemaVersion",
]
