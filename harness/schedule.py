"""Kill points and crash schedules (the types live in ``harness.model.plan``).

A ``KillPoint`` is a labelled point and which hit of it to kill at: ``t6.request_leaving#2``
is the second time any worker of the execution reaches ``t6.request_leaving`` (``#1`` is
written without the suffix). Hits are counted across every worker of the execution since
the start, or since the previous kill of the schedule fired (``harness.model.hits``), so
the same text names the same moment in the trace run and in the killed run (their
prefixes are identical: the loop is deterministic up to the kill).

A ``CrashSchedule`` is the ordered kills of one execution; its id joins them with ``>``:
``t3.checkpoint_saved>t6.gateway_accepted`` kills at the park checkpoint, then kills the
resuming worker when the gateway accepts. The empty schedule's id is ``no-kill``.
"""

from __future__ import annotations

from harness.model.plan import NO_KILL, CrashSchedule, KillPoint

__all__ = ["NO_KILL", "CrashSchedule", "KillPoint"]
