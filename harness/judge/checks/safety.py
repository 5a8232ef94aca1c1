"""The checks beyond the delivery rules (``docs/design.md``, "beyond the five"): checkpointed
work is not redone, a corrupt checkpoint fails closed, no process is left behind, nothing
was tampered with. Pure functions over ``Evidence``; ``harness.judge.checks.registry`` registers
them.
"""

from __future__ import annotations

import json

from harness.judge.checks.support import redrafts_owed as _redrafts_owed
from harness.model import CheckId, CheckResult, EventKind, Evidence
from shopops_contract import labels
from shopops_contract.phases import Phase

__all__ = ["intake_not_repeated", "no_process_left", "no_tampering", "storage_safe"]


_INTAKE_DURABLE = frozenset(p.value for p in Phase) - {Phase.INTAKE.value}
_DRAFT_DURABLE = frozenset({Phase.AWAITING_APPROVAL.value, Phase.APPROVED.value,
                            Phase.SENDING.value, Phase.COMPLETED.value})


def intake_not_repeated(ev: Evidence) -> CheckResult:
    """Beyond the five: Intake reads are not repeated, and the draft is not rewritten,
    once checkpointed — a worker that starts from a checkpoint past ``intake`` must not hit
    ``t1.get_customer``/``t1.get_order``, and one past the park must not hit
    ``t1.draft_email`` (Chapter 8: "A later worker loads those facts — it does not ask the
    model to rediscover them"), unless the draft the worker found checkpointed is one a
    human rejected with feedback (a redraft is due until one is checkpointed, however many
    workers are killed before saving it). Uses the phase and draft the harness read before
    each worker started, and the labelled points the worker reported; a loop without labels
    passes vacuously."""
    lines, repeats = [], []
    owed = _redrafts_owed(ev)  # drafts rejected with feedback: a redraft of each is due
    for w in ev.workers:
        hits = [e.label for e in ev.events if e.kind == EventKind.HIT and e.worker == w.index]
        # drafting again is due while the draft the worker found is one a human rejected
        # with feedback: the redraft of a worker killed before saving it is not a repeat
        due = w.draft_before is not None and w.draft_before in owed
        redo = [lab for lab in hits if (lab in labels.INTAKE_READS
                                        and w.phase_before in _INTAKE_DURABLE)
                or (lab in labels.DRAFTING and w.phase_before in _DRAFT_DURABLE and not due)]
        lines.append(f"worker {w.index} ({w.role}) started from {w.phase_before or 'nothing'}"
                     + (f": repeated {', '.join(redo)}" if redo else ""))
        repeats += redo
    if repeats:
        return CheckResult(CheckId.INTAKE_NOT_REPEATED, False,
                           f"{len(repeats)} read(s)/draft(s) repeated after they were "
                           "checkpointed", tuple(lines))
    return CheckResult(CheckId.INTAKE_NOT_REPEATED, True, "no checkpointed work was redone",
                       tuple(lines))


def storage_safe(ev: Evidence) -> CheckResult:
    """Beyond the five: a corrupt or unsupported checkpoint fails closed — the row the
    harness injected is byte-for-byte untouched at the end, nothing was written after it and
    the case was never started over (no ``t0.case_started`` after it); a v1 history was
    migrated explicitly, exactly once, every row. Passes when no storage fault was injected.
    """
    lines: list[str] = []
    bad: list[str] = []
    final = {r.seq: r for r in ev.checkpoints}
    for row in ev.injected:
        now = final.get(row.seq)
        if now is None or (now.state_json, now.schema_version) != (row.state_json,
                                                                   row.schema_version):
            bad.append(f"injected row seq {row.seq} was changed or deleted")
        later = [seq for seq in final if seq > row.seq]
        if later:
            bad.append(f"rows {later} were written after the injected row seq {row.seq}")
        inject_at = next((e.seq for e in ev.events if e.kind == EventKind.INJECT
                          and e.ref == str(row.seq)), 0)
        restarts = [e.seq for e in ev.events if e.label == labels.CASE_STARTED
                    and e.kind == EventKind.HIT and e.seq > inject_at]
        if restarts:
            bad.append(f"the case was started over after the injection (trace {restarts})")
        lines.append(f"injected row seq {row.seq} (schema {row.schema_version}): "
                     f"{'untouched' if now is not None else 'gone'}")
    if ev.v1_rows:
        done = dict(ev.migrations)
        migrated = sum(done.values())
        lines.append(f"{ev.v1_rows} v1 row(s) installed; migrations recorded: {done}")
        v1_left = [r.seq for r in ev.checkpoints if r.schema_version == 1]
        if v1_left:
            bad.append(f"rows {v1_left} are still schema v1")
        if migrated != ev.v1_rows:
            bad.append(f"{migrated} row(s) recorded as migrated, expected {ev.v1_rows}")
        for r in ev.checkpoints[:ev.v1_rows]:  # the fixture's rows come first
            try:
                channel = json.loads(r.state_json or b"{}").get("preferred_channel")
            except ValueError:
                channel = None
            if channel != "email":
                bad.append(f"migrated row seq {r.seq}: preferred_channel is {channel!r}, "
                           "expected 'email' (exercise 2)")
    lines += bad
    if bad:
        return CheckResult(CheckId.STORAGE_SAFE, False, bad[0], tuple(lines))
    return CheckResult(CheckId.STORAGE_SAFE, True,
                       "no storage fault injected" if not (ev.injected or ev.v1_rows)
                       else "failed closed / migrated once", tuple(lines))


def no_process_left(ev: Evidence) -> CheckResult:
    """Beyond the five: no process of the execution is left alive after it — in a worker's
    process group, or (a sealed execution) anywhere under the execution's uid, such as a
    double-forked, re-sessioned daemon (``leftover`` events; ``harness.sandbox.users``)."""
    left = [(w.index, pid) for w in ev.workers for pid in w.leftovers]
    lines = [f"worker {i}: pid {pid} was still alive after it (killed)" for i, pid in left]
    late = [e for e in ev.events if e.kind == EventKind.LEFTOVER]
    lines += [f"pid {e.pid}: {e.detail}" for e in late]
    left += [(-1, e.pid or 0) for e in late]
    if left:
        return CheckResult(CheckId.NO_PROCESS_LEFT, False, f"{len(left)} process(es) left alive",
                           tuple(lines))
    return CheckResult(CheckId.NO_PROCESS_LEFT, True,
                       f"{len(ev.workers)} worker process group(s), all gone", tuple(lines))


def no_tampering(ev: Evidence) -> CheckResult:
    """Beyond the five: the implementation did not try to change the evidence or the
    kills — no failpoint hit in another process's name or from another execution's user
    (refused by the controller: ``tampering`` events), no gateway request whose
    ``X-ShopOps-Worker-Pid`` names another process than the connection's owner (the kernel's
    answer, ``harness.services.peers``), nothing planted in the sandbox to redirect the harness's
    writes. Chapter 8's rule that the verdict comes only from evidence the harness holds,
    made checkable."""
    lines = [f"event {e.seq}: {e.detail}" for e in ev.events if e.kind == EventKind.TAMPERING]
    lines += [f"gateway request {r.seq}: header X-ShopOps-Worker-Pid {r.claimed_pid}, but "
              f"the connection is pid {r.worker_pid}'s" for r in ev.gateway.requests
              if r.forged]
    if lines:
        return CheckResult(CheckId.NO_TAMPERING, False, lines[0], tuple(lines))
    return CheckResult(CheckId.NO_TAMPERING, True, "no forged hit, header or planted file")
