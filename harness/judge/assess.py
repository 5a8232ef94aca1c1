"""Evidence → checks → verdict: the one place an execution is judged from its evidence.

``assess(evidence, plan)`` runs the one checklist (``harness.judge.checks.registry``: the
same for the reference, a package and a target), decides it against the evidence's gaps and judges
the verdict (``harness.judge.verdict``). ``harness.run.execution`` calls it once the evidence is
collected; ``harness.cli.merge`` calls it again over each shard's stored evidence, so a verdict
edited in a shard's ``run.json`` cannot survive the merge. Pure: no file, process or clock is read.
"""

from __future__ import annotations

from harness.judge.checks.registry import run_checks
from harness.judge.verdict import decide, judge
from harness.model import CheckResult, Evidence, ExecutionPlan, Verdict

__all__ = ["assess"]


def assess(evidence: Evidence, plan: ExecutionPlan
           ) -> tuple[tuple[CheckResult, ...], Verdict, tuple[str, ...]]:
    """``(checks, verdict, reasons)`` of one execution: the checks decided
    (``verdict.decide``), then ``verdict.judge``. Raises nothing of its own."""
    checks = decide(evidence, run_checks(evidence), plan)
    verdict, reasons = judge(evidence, checks, plan)
    return checks, verdict, reasons
