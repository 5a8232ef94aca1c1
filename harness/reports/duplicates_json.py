"""``duplicates.json``: the duplicate-send report (``docs/design.md``), machine form.

Every execution whose case did not get exactly one delivery from the gateway — two or more
is a duplicate send, zero a lost send (or, for an execution cut short or with gaps in its
evidence, ``unknown``: not shown to be lost) — with the keys, each send's time, the worker that
sent it and the kill it followed, the schedule, and the command that replays it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.model import RunResult
from harness.reports.base import duplicate_entries, write_json

__all__ = ["DuplicatesJson", "duplicates"]


def duplicates(run: RunResult) -> dict[str, Any]:
    """``{"run_id", "interrupted", "executions": [...]}``; see ``base.duplicate_entries``."""
    return {"run_id": run.run_id, "interrupted": run.interrupted,
            "executions": duplicate_entries(run)}


class DuplicatesJson:
    """Writes ``duplicates.json``."""

    name = "duplicates"
    filename = "duplicates.json"

    def write(self, run: RunResult, out_dir: Path) -> Path:
        """Write ``out_dir/duplicates.json``; return its path."""
        return write_json(out_dir / self.filename, duplicates(run))
