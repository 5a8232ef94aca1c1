"""A LangGraph app under test with no glue: the harness's ``start``/``resume``/``history``
for a graph named by ``[target] graph = "module:attr"`` (issue 25, ``docs/targets.md``).

The configuration the harness supplies, documented for the app's author:

- the worker's working directory is the execution's own folder for the app's durable state
  (``TargetContext.workdir``): a checkpointer opened on a relative path, as LangGraph's
  documentation writes ``SqliteSaver(sqlite3.connect("checkpoints.sqlite", ...))``, lands
  there, one per execution;
- ``attr`` is a compiled graph (used with its own checkpointer) or a ``StateGraph`` builder
  (compiled here with a ``SqliteSaver`` on ``checkpoints.sqlite`` in that folder);
- the thread is ``{"configurable": {"thread_id": ctx.run_id}}``;
- the email API's base URL is the harness's gateway: ``RESEND_API_URL`` (the ``resend``
  SDK's own variable) in the worker's environment (``MockGateway.worker_env``).

The harness drives the app as LangGraph's human-in-the-loop documentation does: ``start``
invokes the graph with ``input`` (default ``{"order_id": ..., "case_id": ...}``) until it
parks; every pending interrupt found in ``get_state`` is recorded as an ask
(``harness.targets.human``); ``resume`` with the human's ticket answers it with
``Command(resume=approve)`` (default ``True``), after the human's rejection with
``Command(resume=reject)`` (default ``False``) or, with the reviewer's feedback,
``Command(resume=reject_feedback)`` (default ``{"approved": False, "feedback": ...}``;
``harness.targets.human.rejection_answer``), undecided leaves it parked, and a
thread killed mid-run (pending tasks, no interrupt) is continued with ``invoke(None)`` from
its checkpointer — LangGraph's own recovery. ``history`` reads ``get_state_history``.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

from harness.targets.human import email_in, ended_as, prepare_app, record_ask, rejection_answer

__all__ = ["CHECKPOINTS", "history", "resume", "start"]

#: The checkpointer file a builder is compiled with, in the execution's folder.
CHECKPOINTS = "checkpoints.sqlite"


def _graph(ctx: Any) -> Any:
    """The compiled graph ``ctx.options["graph"]`` names (a builder compiled here)."""
    prepare_app(ctx)
    module, _, attr = ctx.options["graph"].partition(":")
    obj = getattr(importlib.import_module(module), attr)
    if hasattr(obj, "compile") and not hasattr(obj, "get_state"):  # a StateGraph builder
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(CHECKPOINTS, check_same_thread=False)
        obj = obj.compile(checkpointer=SqliteSaver(conn))
    if getattr(obj, "checkpointer", None) is None:
        raise ValueError(f"target.graph {ctx.options['graph']!r}: the graph has no "
                         "checkpointer, so nothing of it is durable")
    return obj


def _config(ctx: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": ctx.run_id}}


def _input(ctx: Any) -> Any:
    raw = ctx.options.get("input")
    return json.loads(raw) if raw else {"order_id": ctx.order_id, "case_id": ctx.case_id}


def _record_asks(ctx: Any, graph: Any) -> None:
    for pending in graph.get_state(_config(ctx)).interrupts:
        record_ask(ctx, f"interrupt-{pending.id}", pending.value)


def start(ctx: Any) -> None:
    """A new thread runs until it parks (its interrupts recorded as asks); a thread that
    exists already is driven as ``resume`` without a decision."""
    graph = _graph(ctx)
    if not graph.get_state(_config(ctx)).values:
        graph.invoke(_input(ctx), _config(ctx))
        _record_asks(ctx, graph)
        return
    _drive(ctx, graph)


def resume(ctx: Any) -> None:
    """The thread goes on: a pending interrupt is answered with ``Command(resume=approve)``
    when the human approved (``ctx.ticket``), else left parked; pending tasks are run from
    the checkpointer (``invoke(None)``); any interrupt pending after is recorded."""
    _drive(ctx, _graph(ctx))


def _drive(ctx: Any, graph: Any) -> None:
    from langgraph.types import Command

    snapshot = graph.get_state(_config(ctx))
    if snapshot.interrupts:
        if ctx.ticket is not None:
            answer = json.loads(ctx.options.get("approve", "true"))
        else:
            said_no, answer = rejection_answer(ctx, [f"interrupt-{i.id}"
                                                     for i in snapshot.interrupts])
            if not said_no:  # undecided: it stays parked
                _record_asks(ctx, graph)
                return
        graph.invoke(Command(resume=answer), _config(ctx))
    elif snapshot.tasks:  # killed mid-run: continue from the last checkpoint
        graph.invoke(None, _config(ctx))
    elif not snapshot.values:  # never checkpointed: start afresh
        graph.invoke(_input(ctx), _config(ctx))
    _record_asks(ctx, graph)


def _draft(values: dict[str, Any]) -> dict[str, str] | None:
    return email_in(values) or next(
        (e for e in (email_in(v) for v in values.values() if isinstance(v, dict)) if e), None)


def history(ctx: Any) -> list[dict[str, Any]]:
    """One object per checkpoint of the thread (``get_state_history``), oldest first, with
    what the harness can tell of any graph (``docs/contract.md``, "A target's history"):
    ``step`` (the checkpoint's), ``draft`` (an email-shaped value in the state, as
    ``harness.targets.human.email_in`` finds it), ``phase`` ``awaiting_approval`` while an
    interrupt is pending and, once nothing is left to run, ``rejected`` when the human's
    last decision was a rejection, else ``completed`` (``harness.targets.human.ended_as``;
    else not reported)."""
    if not os.path.exists(os.path.join(ctx.workdir, CHECKPOINTS)) and \
            not os.listdir(ctx.workdir):
        return []
    graph = _graph(ctx)
    out = []
    ended = ended_as(ctx)
    for snap in reversed(list(graph.get_state_history(_config(ctx)))):
        values = snap.values if isinstance(snap.values, dict) else {}
        asking = any(task.interrupts for task in snap.tasks)
        phase = "awaiting_approval" if asking else ended if not snap.next else None
        step = (snap.metadata or {}).get("step")
        out.append({"step": step if isinstance(step, int) and step >= 0 else None,
                    "phase": phase,
                    "draft": _draft(values)})
    return out
