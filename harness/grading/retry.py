"""A grade that survives a noisy machine: run again what was ``unknown`` for no fault of the
implementation's.

An ``unknown`` scores like a failure, so one stray signal on a busy machine would zero a
whole rubric item. An execution is run again, at most ``ATTEMPTS`` more times and for at
most ``BUDGET`` executions per grade, when its evidence shows a cause outside the
implementation:

- a worker died of a signal the harness did not send, other than the signals of a crash of
  its own (``SIGSEGV``, ``SIGBUS``, ``SIGILL``, ``SIGFPE``, ``SIGABRT``) or of its limits
  (``SIGXCPU``, ``SIGXFSZ``);
- a worker passed its deadline (an overloaded machine — or a hang, which then hangs again
  and is scored as before: the bound keeps that cheap);
- the harness itself erred during the story.

A kill point never reached, a non-zero exit, a crash: the implementation is the reason and
nothing is retried. The last attempt counts; its reasons say how many were made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from harness.model import Verdict
from harness.run.execution import ExecutionResult

__all__ = ["ATTEMPTS", "BUDGET", "outside_cause", "retry_unknowns"]

#: Further attempts per execution, and executions retried per grade.
ATTEMPTS = 2
BUDGET = 8


def outside_cause(result: ExecutionResult) -> str | None:
    """Why ``result`` is ``unknown`` for a reason outside the implementation, or ``None``."""
    if result.verdict is not Verdict.UNKNOWN:
        return None
    ev = result.evidence
    for w in ev.workers:
        if (why := w.stopped_from_outside) is not None:
            return why
    for error in ev.errors:
        if error.startswith("harness error"):
            return error
    return None


def retry_unknowns(results: Sequence[ExecutionResult],
                   again: Callable[[ExecutionResult, int], ExecutionResult],
                   *, attempts: int = ATTEMPTS, budget: int = BUDGET
                   ) -> tuple[list[ExecutionResult], list[str]]:
    """Run again, through ``again(result, attempt)``, the executions ``outside_cause``
    names, in order, within the bounds.

    Returns:
        the results (a retried one replaced by its last attempt, whose reasons end with a
        note of the attempts) and one line per retried execution for the report.
    """
    out, notes = list(results), []
    for i, first in enumerate(results):
        cause = outside_cause(first)
        if cause is None or budget <= 0:
            continue
        budget -= 1
        latest, causes = first, [cause]
        for attempt in range(1, attempts + 1):
            latest = again(first, attempt)
            cause = outside_cause(latest)
            if cause is None:
                break
            causes.append(cause)
        note = (f"run {attempt + 1} times: attempt 1 was unknown ({causes[0]}); the last "
                f"came out {latest.verdict}")
        out[i] = dataclasses.replace(latest, reasons=(*latest.reasons, note))
        notes.append(f"{first.plan.id}: {note}")
    return out, notes
