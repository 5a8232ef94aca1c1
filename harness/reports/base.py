"""The ``ReportWriter`` protocol and the helpers every writer shares.

Reports are written from the evidence only (``docs/design.md``, "Duplicate-send report"): deliveries
and keys come from the gateway's own log, the sender of each delivery and the kill before it
from the harness's trace. Everything here is a pure function of the ``RunResult``, so the
same run gives byte-identical reports.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.model import (
    CheckId,
    CheckResult,
    CheckStatus,
    EventKind,
    ExecutionResult,
    RunResult,
    Verdict,
)

__all__ = ["NOT_KEPT", "ReportWriter", "case_keys", "duplicate_entries", "execution_dict",
           "failing_checks", "is_expected", "schedule_list", "sends", "undecided_checks",
           "workdir_text", "write_atomic", "write_json"]

PASS, FAIL, UNKNOWN = Verdict.PASS, Verdict.FAIL, Verdict.UNKNOWN


@runtime_checkable
class ReportWriter(Protocol):
    """One report format (one module each, like pytest-xdist's schedulers).

    Attributes:
        name: the key in ``write_reports``'s answer (``summary``, ``junit``, …).
        filename: the file it writes inside the run folder.
    """

    name: str
    filename: str

    def write(self, run: RunResult, out_dir: Path) -> Path:
        """Write the report into ``out_dir`` (created if missing); return its path."""
        ...


def schedule_list(result: ExecutionResult) -> list[str]:
    """The kill points as strings (``["t3.checkpoint_saved", "t6.gateway_accepted#2"]``)."""
    return [str(k) for k in result.plan.schedule.kills]


def case_keys(result: ExecutionResult) -> list[str | None]:
    """Distinct ``Idempotency-Key`` values the gateway saw for the case (``None`` = no key
    header), ``None`` first, then sorted."""
    ev = result.evidence
    keys = {r.idempotency_key for r in ev.gateway.requests if r.case_id == ev.case_id}
    return sorted(keys, key=lambda k: (k is not None, k or ""))


def failing_checks(result: ExecutionResult) -> list[CheckResult]:
    """The execution's checks that were decided and failed, in check order."""
    return [c for c in result.checks if c.status is CheckStatus.FAIL]


def undecided_checks(result: ExecutionResult) -> list[CheckResult]:
    """The execution's checks that could not be decided, in check order."""
    return [c for c in result.checks if c.status is CheckStatus.UNDECIDED]


def is_expected(result: ExecutionResult, check_id: CheckId) -> bool:
    """The scenario expects ``check_id`` to fail here (``ExecutionPlan.expected_failing``:
    demos; never on the no-kill run)."""
    return check_id in result.plan.expected_failing


def power_cuts(result: ExecutionResult) -> list[str]:
    """The kill points of the execution that were power cuts (``label#N``), in order: those
    the harness performed (``Evidence.power_cuts``), the one list every report shows."""
    return [str(c.point) for c in result.evidence.power_cuts]


def power_note(result: ExecutionResult) -> str:
    """``" power cut at t4.parked"`` (every power cut, comma-separated), or ``""``."""
    cuts = power_cuts(result)
    return f" power cut at {', '.join(cuts)}" if cuts else ""


#: What the reports say for the folder of a passing execution whose files a run did not
#: keep (``harness.run.execution.execute``, ``keep_databases=False``).
NOT_KEPT = "not kept (a passing execution; --keep-all keeps its files)"


def workdir_text(result: ExecutionResult) -> str:
    """The execution's folder as the reports show it: its path, or ``NOT_KEPT``."""
    return result.evidence.workdir or NOT_KEPT


def execution_dict(result: ExecutionResult) -> dict[str, Any]:
    """One execution as the JSON object of ``summary.json``."""
    ev, plan = result.evidence, result.plan
    return {
        "id": plan.id,
        "scenario": plan.scenario.name,
        "scenario_file": str(plan.scenario.path) if plan.scenario.path else None,
        "schedule": schedule_list(result),
        "power_cuts": power_cuts(result),  # kills after which the state went back to its sync
        "expect_failing": sorted(plan.scenario.expect_failing),
        "verdict": result.verdict,
        "reasons": list(result.reasons),
        "checks": {c.check_id: {"passed": c.passed, "status": c.status,
                                "undecided": c.undecided,
                                "applicable": c.applicable,
                                "detail": c.detail,
                                "evidence": list(c.evidence)} for c in result.checks},
        "deliveries": ev.deliveries,
        # more than one request for the case: the human was asked twice
        "approval_requests": len(ev.approval_requests),
        "idempotency_keys": case_keys(result),
        "workers": [{"index": w.index, "role": w.role, "pid": w.pid,
                     "returncode": w.returncode, "killed_by_harness": w.killed_by_harness,
                     "timed_out": w.timed_out, "elapsed_s": w.elapsed_s,
                     # the last lines it printed: all that is left of a passing
                     # execution's output when its folder is not kept
                     "stdout_tail": w.stdout_tail, "stderr_tail": w.stderr_tail}
                    for w in ev.workers],
        "elapsed_s": result.elapsed_s,
        "equivalent_to": result.equivalent_to,  # not run: its twin's evidence and verdict
        "workdir": ev.workdir or None,  # None: a passing execution whose files were not kept
        "replay": plan.replay,
    }


def sends(result: ExecutionResult) -> list[dict[str, Any]]:
    """One entry per gateway delivery for the case: who sent it and after which kill.

    The sender is the worker of the trace's ``delivery`` event naming the delivery id (the
    harness's gateway reports it, not the worker); ``after_kill`` is the kill point
    (``label#N``) of the latest ``kill`` event before it in the trace, or ``None``.
    """
    ev = result.evidence
    roles = {w.index: w.role for w in ev.workers}
    out = []
    for d in ev.gateway.deliveries_for(ev.case_id):
        event = next((e for e in ev.events if e.kind == EventKind.DELIVERY
                      and e.ref == d.delivery_id), None)
        before = [e for e in ev.events if e.kind == EventKind.KILL and event and e.seq < event.seq]
        worker = event.worker if event else None
        out.append({
            "delivery_id": d.delivery_id,
            "idempotency_key": d.idempotency_key,
            "delivered_at": d.delivered_at,
            "trace_seq": event.seq if event else None,
            "worker": worker,
            "worker_role": roles.get(worker) if worker is not None else None,
            "after_kill": before[-1].ref if before else None,
        })
    return out


def duplicate_entries(run: RunResult) -> list[dict[str, Any]]:
    """Every execution whose case got other than exactly one delivery, in run order.

    ``kind`` (``harness.reports.view.DeliveryOutcome``): ``duplicate`` (two or more),
    ``lost`` (none where one was expected, the verdict ``fail``), ``unknown`` (none where
    one was expected, but the execution was cut short or its evidence has gaps: not shown
    to be a loss), ``none_expected`` (none, as the scenario expects: not a loss),
    ``unexpected`` (one where the scenario expects none).
    """
    from harness.reports.view import delivery_outcome

    entries = []
    for r in run.results:
        n = r.evidence.deliveries
        if n == 1 and r.evidence.expected_deliveries == 1:
            continue
        entries.append({
            "id": r.plan.id,
            "scenario": r.plan.scenario.name,
            "schedule": schedule_list(r),
            "kind": delivery_outcome(r).value,
            "expected_deliveries": r.evidence.expected_deliveries,
            "deliveries": n,
            "keys": case_keys(r),
            "verdict": r.verdict,
            "replay": r.plan.replay,
            "sends": sends(r),
        })
    return entries


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temp file and ``os.replace``, so a
    reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; reports are for reviewers and CI
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: Path, data: Any) -> Path:
    """Deterministic JSON: sorted keys, ``indent=2``, UTF-8, trailing newline."""
    return write_atomic(path, json.dumps(data, indent=2, sort_keys=True,
                                         ensure_ascii=False) + "\n")
