"""Evidence → checks → verdict: the one place an execution is judged from its evidence.

``assess(evidence, plan)`` runs the checks of the plan's kind (``harness.checks`` for the
loop, ``harness.target_checks`` for a framework target), decides them against the
evidence's gaps and judges the verdict (``harness.verdict``). ``harness.execution`` calls it
once the evidence is collected; ``harness.merge`` calls it again over each shard's stored
evidence, so a verdict edited in a shard's ``run.json`` cannot survive the merge. Pure:
no file, process or clock is read.
"""

from __future__ import annotations

from harness.checks import run_checks
from harness.model import CheckResult, Evidence, ExecutionPlan, Verdict
from harness.target_checks import target_checks
from harness.verdict import decide, judge


def assess(evidence: Evidence, plan: ExecutionPlan
           ) -> tuple[tuple[CheckResult, ...], Verdict, tuple[str, ...]]:
    """``(checks, verdict, reasons)`` of one execution: the checks decided
    (``verdict.decide``), then ``verdict.judge``. Raises nothing of its own."""
    checks = decide(evidence, (run_checks(evidence) if plan.scenario.target is None
                               else target_checks(evidence)), plan)
    verdict, reasons = judge(evidence, checks, plan)
    return checks, verdict, reasons
