"""ShopOps: the reference Chapter 8 loop (checkpointing and resumability) under test."""

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
from shopops.phases import Phase
from shopops.state import Draft, State

__all__ = [
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
