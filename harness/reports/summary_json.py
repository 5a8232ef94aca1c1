"""``summary.json``: the whole run, one object per execution (machine form)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.model import RunResult
from harness.reports.base import execution_dict, write_json

__all__ = ["SummaryJson", "summary"]


def summary(run: RunResult) -> dict[str, Any]:
    """The run as a JSON-ready dict: run facts, overall verdict, counts, executions."""
    out = {
        "run_id": run.run_id,
        "started_at": run.started_at,
        "elapsed_s": run.elapsed_s,
        "launcher": run.launcher,
        "interrupted": run.interrupted,
        "verdict": run.verdict,
        "counts": run.counts.as_dict(),
        "equivalence": run.equivalence.as_dict(),  # executions run / proven equivalent
        "skipped": [{"scenario": name, "why": why} for name, why in run.skipped],
        "incomplete_matrices": [gap.as_dict() for gap in run.gaps],  # learned cut short
        "not_run": run.not_run,  # planned executions never run (interrupt, fail-fast)
        "unlearned": list(run.unlearned),  # scenarios whose trace run never returned
        "shortfall": list(run.shortfall()),  # the three above, in words
        "executions": [execution_dict(r) for r in run.results],
    }
    if run.shard is not None and run.shard_plan is not None:
        out["shard"] = run.shard_plan.as_dict(run.shard)  # harness.plan.shard.ShardPlan.as_dict
    return out


class SummaryJson:
    """Writes ``summary.json``."""

    name = "summary"
    filename = "summary.json"

    def write(self, run: RunResult, out_dir: Path) -> Path:
        """Write ``out_dir/summary.json``; return its path."""
        return write_json(out_dir / self.filename, summary(run))
