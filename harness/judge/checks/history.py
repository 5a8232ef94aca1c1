"""Checks over the whole history of an execution, not only its outcome (issue 9, part C).

Counting deliveries misses what real loops get wrong: a worker that calls the gateway again
after the case completed (the gateway dedupes it), a stale worker that rewrites a finished
checkpoint, two owners writing in turn, a rejected case parked forever, a case that is
picked up after crash after crash without end. Each check is a pure function over the
evidence the harness gathered itself (its trace, the checkpoint rows it read, the approval
records, the gateway's log) and returns the evidence lines that say why.

The phase FSM is the contract's (``shopops_contract.phases``), and the history is the
loop's durable writes as neutral observations, so any loop's history is judged the same.
"""

from __future__ import annotations

from typing import Any

from harness.judge.checks.support import (
    draft_digest,
    history_replaced,
    redrafts_owed,
    writes,
)
from harness.model import CheckId, CheckResult, EventKind, Evidence, HistorySource, WorkerRole
from shopops_contract.approvals import RequestStatus
from shopops_contract.labels import (
    COMPLETED_SAVED,
    EMAIL_SENT_SAVED,
    SAVE_COMMIT,
)
from shopops_contract.phases import ALLOWED, TERMINAL, Phase

__all__ = ["EDGES", "LIVE", "PARKED", "REDRAFT", "attempts_bounded", "commits_durable",
           "history_not_replaced", "lease_exclusive", "no_request_after_done", "phase_path",
           "rejection_respected"]

#: Chapter 8's phase FSM (``docs/design.md``), with the production loop's edges: a
#: rejection with feedback goes back to drafting; any live phase may be dead-lettered.
LIVE = tuple(p for p in Phase if p not in TERMINAL)
EDGES: frozenset[tuple[str, str]] = frozenset(
    (a, b) for a, targets in ALLOWED.items() for b in targets)
#: The edge that goes back, allowed once per rejection with feedback.
REDRAFT = (Phase.AWAITING_APPROVAL, Phase.DRAFTING)
PARKED = Phase.AWAITING_APPROVAL


def _reachable(src: str) -> set[str]:
    seen, todo = {src}, [src]
    while todo:
        here = todo.pop()
        for a, b in EDGES:
            if a == here and b not in seen and (a, b) != REDRAFT:
                seen.add(b)
                todo.append(b)
    return seen


def _worker_of(ev: Evidence, pid: int | None) -> str:
    found = [w for w in ev.workers if pid is not None and w.pid == pid]
    return f"worker {found[0].index} (pid {pid})" if found else f"pid {pid}"


def _requests(ev: Evidence) -> list[Any]:
    return [r for r in ev.gateway.requests if r.case_id == ev.case_id]


def no_request_after_done(ev: Evidence) -> CheckResult:
    """No gateway request at all — not only no delivery — once the case is terminal or its
    send is acknowledged by a checkpoint: a worker that started from such a checkpoint
    (phase read by the harness before it started) makes none, and no request reaches the
    gateway after a worker reported ``t7.completed_saved`` (trace order: the gateway
    reports each request into the trace as it receives it). The same for the order note's
    requests (its own ledger, ``note:<seq>`` in the trace), and for the email once its own
    acknowledgment is durable: no email request after a worker reported
    ``t6.email_sent_saved`` (a case with the order note checkpoints the sent email before
    the note leaves). A deduplicated repeat is still a bug: it bets the customer's inbox on
    the gateway's memory (Chapter 8, "Checkpoints do not give exactly-once side
    effects")."""
    done, problems = writes(ev)
    acked_before = {w.index for w in ev.workers if w.phase_before in TERMINAL}
    lines, bad = [], []
    late_refs: set[str] = set()  # each request once, however many rules it breaks
    notes = [r for r in ev.gateway.note_requests if r.case_id == ev.case_id]
    for r in _requests(ev) + notes:
        who = next((w for w in ev.workers if w.pid == r.worker_pid), None)
        if who is not None and who.index in acked_before:
            late_refs.add(f"note:{r.seq}" if r in notes else str(r.seq))
            bad.append(f"gateway request {r.seq} (status {r.status}) by worker {who.index}, "
                       f"which started from a {who.phase_before} checkpoint")
    done_at = [e.seq for e in ev.events if e.kind == EventKind.HIT
               and e.label == COMPLETED_SAVED]
    if done_at:
        late = [e for e in ev.events if e.kind == EventKind.REQUEST and e.seq > done_at[0]]
        late_refs.update(str(e.ref) for e in late)
        bad += [f"trace seq {e.seq}: gateway request {e.ref} from {_worker_of(ev, e.pid)} "
                f"after the completed checkpoint (trace seq {done_at[0]})" for e in late]
        lines.append(f"trace seq {done_at[0]}: completed checkpoint committed")
    acked_at = [e.seq for e in ev.events if e.kind == EventKind.HIT
                and e.label == EMAIL_SENT_SAVED]
    if acked_at:
        late = [e for e in ev.events if e.kind == EventKind.REQUEST and e.seq > acked_at[0]
                and not (e.ref or "").startswith("note:")
                and not (done_at and e.seq > done_at[0])]  # those are counted above
        late_refs.update(str(e.ref) for e in late)
        bad += [f"trace seq {e.seq}: email request {e.ref} from {_worker_of(ev, e.pid)} after "
                f"the checkpoint acknowledging the email (trace seq {acked_at[0]})"
                for e in late]
    sent = [w.seq for w in done if w.email.sent]
    lines.append(f"checkpoints acknowledging the send: {sent or 'none'}; "
                 f"{len(_requests(ev))} gateway request(s) for the case"
                 + (f", {len(notes)} order-note request(s)" if notes else ""))
    lines += bad
    if problems:
        return CheckResult(CheckId.NO_REQUEST_AFTER_DONE, False, problems[0],
                           tuple(lines + problems))
    if bad:
        return CheckResult(CheckId.NO_REQUEST_AFTER_DONE, False,
                           f"{len(late_refs)} gateway request(s) after the case was done",
                           tuple(lines))
    return CheckResult(CheckId.NO_REQUEST_AFTER_DONE, True,
                       "no request once the case was done", tuple(lines))


def phase_path(ev: Evidence) -> CheckResult:
    """The checkpointed phases form a path of the FSM: each row's phase is the previous
    one's or reachable from it (nothing moves backwards, except one redraft per rejection
    with feedback), and nothing is written after a terminal phase."""
    readable, problems = writes(ev)
    phased = [w for w in readable if w.phase is not None]
    owed = len(redrafts_owed(ev))
    lines = [f"checkpoint seq {w.seq}: {w.phase}" for w in phased]
    bad: list[str] = []
    prev: str = Phase.INTAKE
    ended: int | None = None
    for w in phased:
        seq, phase = w.seq, w.phase
        assert phase is not None
        if ended is not None:
            bad.append(f"checkpoint seq {seq} ({phase}) written after the terminal "
                       f"checkpoint seq {ended}")
        elif (prev, phase) == REDRAFT and owed > 0:
            owed -= 1
        elif phase != prev and phase not in _reachable(prev):
            bad.append(f"checkpoint seq {seq}: {prev} -> {phase} is not a path of the FSM")
        if phase in TERMINAL and ended is None:
            ended = seq
        prev = phase
    lines += bad
    if problems:
        return CheckResult(CheckId.PHASE_PATH, False, problems[0], tuple(lines + problems))
    if bad:
        return CheckResult(CheckId.PHASE_PATH, False, bad[0], tuple(lines))
    return CheckResult(CheckId.PHASE_PATH, True, f"{len(phased)} checkpoint(s) along the FSM",
                       tuple(lines))


def lease_exclusive(ev: Evidence) -> CheckResult:
    """Lease exclusivity over the rows written under a lease: fences never decrease, and a
    change of writer (another owner, or another process of the same owner name) comes with
    a higher fence — so two owners' writes never interleave, and once a lease was taken
    over no write of the old holder got through (Chapter 8 exercise 4; Kleppmann's fencing
    tokens). Once any row is leased, a row without a lease is a write that bypassed it.

    And over the lease records the harness read before and after each worker
    (``WorkerRun.lease_before``/``lease_after``; issue 26): two holders at once is a fail
    even when no stale write followed — see ``_live_takeovers``. Passes vacuously when no
    row was written under a lease and no worker took a live lease."""
    rows = list(ev.loop_writes)
    leased = [r for r in rows if r.fence is not None]
    lines = [f"checkpoint seq {r.seq}: owner {r.lease_owner} fence {r.fence} by "
             f"{_worker_of(ev, r.writer_pid)}" for r in rows if r.fence is not None]
    taken, seen = _live_takeovers(ev)
    lines += seen
    if taken:
        lines += taken
        return CheckResult(CheckId.LEASE_EXCLUSIVE, False, taken[0], tuple(lines))
    if not leased:
        return CheckResult(CheckId.LEASE_EXCLUSIVE, True, "no write under a lease", tuple(lines))
    bad = []
    first = rows.index(leased[0])
    bad += [f"checkpoint seq {r.seq} was written without a lease after leased writes"
            for r in rows[first:] if r.fence is None]
    for a, b in zip(leased, leased[1:], strict=False):
        assert a.fence is not None and b.fence is not None
        writer_a, writer_b = (a.lease_owner, a.writer_pid), (b.lease_owner, b.writer_pid)
        if b.fence < a.fence:
            bad.append(f"checkpoint seq {b.seq}: fence {b.fence} after fence {a.fence} "
                       f"(seq {a.seq}): a taken-over holder wrote")
        elif writer_b != writer_a and b.fence == a.fence and None not in (a.writer_pid,
                                                                           b.writer_pid):
            bad.append(f"checkpoint seq {b.seq}: {_worker_of(ev, b.writer_pid)} wrote under "
                       f"fence {b.fence}, the fence {_worker_of(ev, a.writer_pid)} wrote under "
                       f"(seq {a.seq}): two holders of one lease")
        elif a.lease_owner != b.lease_owner and b.fence == a.fence:
            bad.append(f"checkpoint seq {b.seq}: owners {a.lease_owner} and {b.lease_owner} "
                       f"share fence {b.fence}")
    lines += bad
    if bad:
        return CheckResult(CheckId.LEASE_EXCLUSIVE, False, bad[0], tuple(lines))
    return CheckResult(CheckId.LEASE_EXCLUSIVE, True,
                       f"{len(leased)} leased write(s); fences rise with every new holder",
                       tuple(lines))


def _live_takeovers(ev: Evidence) -> tuple[list[str], list[str]]:
    """Workers that took a lease another worker still held: at worker W's start the case's
    lease belonged to another owner and was live on the story's (simulated) clock, W ended
    holding it, and a worker of that owner, started before W, exited only after W did (in
    the order the harness reaped them: its ``worker_exit`` events) — so both held the case
    at once. Returns ``(problems, evidence lines)``; no lines when no
    lease record was read (a loop without a readable ``leases`` table: not judged here)."""
    exits = {e.worker: e.seq for e in ev.events if e.kind == EventKind.WORKER_EXIT}
    problems: list[str] = []
    lines = [f"worker {w.index} ({w.owner}): lease at start "
             + (w.lease_before.line() if w.lease_before else "none")
             + "; at exit " + (w.lease_after.line() if w.lease_after else "none")
             for w in ev.workers if w.lease_before is not None or w.lease_after is not None]
    for w in ev.workers:
        was, now = w.lease_before, w.lease_after
        if (w.owner is None or was is None or now is None or was.owner == w.owner
                or not was.live or now.owner != w.owner or w.index not in exits):
            continue
        holders = [h for h in ev.workers if h.owner == was.owner and h.index < w.index
                   and exits.get(h.index, exits[w.index] + 1) > exits[w.index]]
        if holders:
            problems.append(
                f"worker {w.index} ({w.owner}) took the lease {holders[0].owner} held "
                f"(fence {was.fence} -> {now.fence}, {was.expires_at - was.read_at:.1f} s "
                f"before it expired) while worker {holders[0].index} still ran: two holders "
                "at once")
    return problems, lines


def rejection_respected(ev: Evidence) -> CheckResult:
    """A rejected draft is never sent, and a rejected case never parks forever: after a
    plain rejection the case ends ``rejected``; after a rejection with feedback the loop
    drafts again — the feedback visible in a later checkpointed draft, its revision
    (``draft_revision``, where recorded) higher than the rejected draft's — and asks for a
    new approval, or ends ``rejected``. Judged when a worker ran after the human's decision."""
    done, problems = writes(ev)
    rejected = [r for r in ev.approval_requests if r.status == RequestStatus.REJECTED]
    if not rejected:
        return CheckResult(CheckId.REJECTION_RESPECTED, True, "nothing was rejected")
    final = done[-1] if done else None
    digests = [(w.seq, w.draft) for w in done if w.draft is not None]
    lines = [f"request {r.request_id}: rejected"
             + (f" with feedback {r.feedback!r}" if r.feedback else "")
             for r in rejected]
    lines.append(f"final checkpoint: {final.phase if final else 'none'}")
    bad = []
    for d in ev.gateway.deliveries_for(ev.case_id):
        if any(draft_digest(d.to, d.subject, d.body) == r.draft_digest for r in rejected):
            bad.append(f"delivery {d.delivery_id} sent a rejected draft")
    decided = [e.seq for e in ev.events if e.kind == EventKind.HUMAN and "rejected" in e.detail]
    ran_after = [w for w in ev.workers if decided and any(
        e.kind == EventKind.WORKER_START and e.worker == w.index and e.seq > decided[0]
        for e in ev.events)]
    requests_after = {r.draft_digest for r in ev.approval_requests} - {
        r.draft_digest for r in rejected}
    for r in rejected:
        feedback = r.feedback
        if final is not None and final.phase == Phase.REJECTED:
            continue
        if not ran_after:
            lines.append("no worker ran after the rejection: not judged")
            continue
        if not feedback:
            bad.append(f"request {r.request_id} was rejected but the case is "
                       f"{final.phase if final else 'without a checkpoint'}, not rejected")
        elif not any(feedback in draft.body for _, draft in digests
                     if draft.digest != r.draft_digest):
            bad.append(f"no later draft answers the feedback on {r.request_id}")
        elif not requests_after and final is not None and final.phase == PARKED:
            bad.append(f"the redraft after {r.request_id} was never sent for approval")
    if final is not None and final.phase == PARKED and final.draft is not None and any(
            final.draft.digest == r.draft_digest for r in rejected) and ran_after:
        bad.append("the case is parked on a draft the human rejected: it waits forever")
    bad += _revisions_not_raised(done)
    lines += bad
    if problems:
        return CheckResult(CheckId.REJECTION_RESPECTED, False, problems[0], tuple(lines + problems))
    if bad:
        return CheckResult(CheckId.REJECTION_RESPECTED, False, bad[0], tuple(lines))
    return CheckResult(CheckId.REJECTION_RESPECTED, True,
                       "every rejection ended the case or was answered by a redraft",
                       tuple(lines))


#: Roles that run the loop on the case (a migrator or a decision's delivery do not pick it up).
_PICKUPS = frozenset({WorkerRole.START, WorkerRole.RECHECK, WorkerRole.RESUME,
                      WorkerRole.TAKEOVER})


def _hits(ev: Evidence, index: int) -> list[str]:
    return [str(e.label) for e in ev.events if e.kind == EventKind.HIT and e.worker == index]


def _revisions_not_raised(done: list[Any]) -> list[str]:
    """Each redraft raises the draft's revision (``draft_revision``, where the history
    records it): a write whose draft differs from the previous draft's must carry a higher
    revision, or a reviewer's approval of revision 1 and of revision 2 cannot be told
    apart (issue 26)."""
    drafted = [w for w in done if w.draft is not None and w.revision is not None]
    return [f"checkpoint seq {b.seq}: a new draft with revision {b.revision}, not more than "
            f"the previous draft's {a.revision} (seq {a.seq})"
            for a, b in zip(drafted, drafted[1:], strict=False)
            if b.draft.digest != a.draft.digest and b.revision <= a.revision]


def _recoveries(ev: Evidence) -> list[int]:
    """Every worker that picked the case up in flight, whatever it saved (issue 26): it
    started from a checkpoint that was neither parked nor terminal (read by the harness
    before it started) and reported a labelled point — a worker refused before it loaded
    anything (another owner's lease) reports none. Not counted: a worker killed at the
    commit of its very first save (``ckpt.before_commit`` as its first point), whose
    attempt could not be durable yet."""
    out = []
    for w in ev.workers:
        if (w.role not in _PICKUPS or w.phase_before is None or w.phase_before == PARKED
                or w.phase_before in TERMINAL):
            continue
        labels = _hits(ev, w.index)
        if not labels or (labels == [SAVE_COMMIT] and w.killed_by_harness):
            continue
        out.append(w.index)
    return out


def _maybe_recoveries(ev: Evidence) -> list[int]:
    """The pickups a loop may count as recoveries: those of ``_recoveries`` (and one killed
    at its first commit), and a pickup of a parked checkpoint right after a worker that did
    not stop on its own (its last write may be an ``awaiting_approval`` write before the
    park). A pickup of the checkpoint a worker parked and exited on is never one."""
    by_index = {w.index: w for w in ev.workers}
    out = []
    for w in ev.workers:
        if w.role not in _PICKUPS or w.phase_before is None or w.phase_before in TERMINAL:
            continue
        before = by_index.get(w.index - 1)
        if w.phase_before == PARKED and (before is None or before.expected_exit
                                         and not before.killed_by_harness):
            continue
        out.append(w.index)
    return out


def attempts_bounded(ev: Evidence) -> CheckResult:
    """The loop's recovery-attempt counter agrees with the harness's own count of
    recoveries and never goes down, and a case recovered more often than the maximum ends
    ``dead_lettered`` — it is not tried again — and not before (Chapter 8: workers and
    dead-letter queues at fleet scale). The harness counts every worker that picked the
    case up in flight (``_recoveries``: from its trace and its reading of the checkpoint
    before each worker, not from the loop's counter), so a loop that crashes before saving
    its attempt is still counted; a pickup of a parked checkpoint is not a recovery, and a
    counter that counts one is a ``fail``. The maximum is the scenario's
    ``sut.max_attempts``; without one only the counter is judged; a history that does not
    report the counter is judged on its dead-lettering alone."""
    done, problems = writes(ev)
    counts = [(w.seq, w.attempts) for w in done if w.attempts is not None]
    lines = [f"checkpoint seq {seq}: {n} recovery attempt(s)" for seq, n in counts
             if n or seq == counts[-1][0]]
    bad = [f"checkpoint seq {b}: the attempt counter went down from {n} to {m}"
           for (a, n), (b, m) in zip(counts, counts[1:], strict=False) if m < n]
    maximum = ev.max_attempts
    recovered, maybe = _recoveries(ev), _maybe_recoveries(ev)
    lines.append(f"workers that recovered the case in flight: {recovered or 'none'}; "
                 f"maximum {maximum if maximum is not None else 'not set'}")
    final = done[-1].phase if done else None
    counter = max((n for _, n in counts), default=None)
    if counter is not None and not ev.cut_short:
        if counter < len(recovered):
            bad.append(f"the loop counted {counter} recovery attempt(s), the harness saw "
                       f"{len(recovered)} (workers {recovered})")
        elif counter > len(maybe):
            bad.append(f"the loop counted {counter} recovery attempt(s), but only "
                       f"{len(maybe)} pickup(s) could be recoveries (workers {maybe or 'none'}):"
                       " a parked or finished case picked up is not one")
    if maximum is not None and len(recovered) > maximum and final != Phase.DEAD_LETTERED:
        bad.append(f"{len(recovered)} recoveries, more than the maximum {maximum}, but the "
                   f"case ended {final}, not dead_lettered")
    if maximum is not None and final == Phase.DEAD_LETTERED and len(maybe) <= maximum:
        bad.append(f"dead-lettered after {len(maybe)} possible recoveries, not more than "
                   f"the maximum {maximum}")
    lines += bad
    if problems:
        return CheckResult(CheckId.ATTEMPTS_BOUNDED, False, problems[0], tuple(lines + problems))
    if bad:
        return CheckResult(CheckId.ATTEMPTS_BOUNDED, False, bad[0], tuple(lines))
    return CheckResult(CheckId.ATTEMPTS_BOUNDED, True,
                       "dead-lettered past the maximum" if final == Phase.DEAD_LETTERED
                       else "the attempt counter agrees with the recoveries the harness saw",
                       tuple(lines))


def history_not_replaced(ev: Evidence) -> CheckResult:
    """The checkpoint history is one history: the file the harness read at the end is the
    file it read when the human approved, and it still begins with the rows it read then,
    byte for byte (``check_support.history_replaced``). A loop that deletes its checkpoint
    file and starts it again, or rewrites old rows, leaves a history whose ``seq`` numbers
    cannot be set against the approval; the checks that do so
    (``parked_until_approval``, ``not_sent_before_approval``) leave those comparisons to
    this one.

    A target's history (its own ``history`` function) is one history the same way: read
    after each worker (``Evidence.history_reads``), each read begins with the objects of
    the read before it but its newest (``check_support.reads_departed``). A target whose
    ``resume`` deletes its storage and starts over leaves a final history that looks like
    one clean run; the read after a worker that had not caught up again shows it. Not
    applicable for a target without ``history``."""
    if ev.history.source is HistorySource.TARGET_HISTORY:
        return _target_reads(ev)
    mark = ev.history_at_approval
    if mark is None:
        return CheckResult(CheckId.HISTORY_NOT_REPLACED, True,
                           "no approval, or the history could not be read at it: nothing to "
                           "compare", ())
    lines = [f"at approval: {mark.rows} row(s) up to seq {mark.seq}, digest "
             f"{mark.digest[:12]}, file "
             + (f"dev {mark.file_id[0]} inode {mark.file_id[1]}" if mark.file_id else "none")]
    now = ev.checkpoints_file
    lines.append(f"at the end: {len(ev.checkpoints)} row(s), file "
                 + (f"dev {now[0]} inode {now[1]}" if now else "none"))
    replaced = history_replaced(ev)
    if replaced is not None:
        return CheckResult(CheckId.HISTORY_NOT_REPLACED, False, replaced, tuple(lines))
    return CheckResult(CheckId.HISTORY_NOT_REPLACED, True,
                       f"the history still begins with the {mark.rows} row(s) read at the "
                       "approval, in the same file", tuple(lines))


def commits_durable(ev: Evidence) -> CheckResult:
    """Every checkpoint the loop had committed before a power cut is still there after it,
    byte for byte (``Evidence.power_cuts``; ``harness.launch.power`` models the cut: only
    what was fsynced survives). A loop that commits without syncing — SQLite with
    ``synchronous=OFF``, WAL with ``NORMAL`` — loses them, and after the cut re-does work
    it had promised was done (re-asks the human, re-sends with a key it never kept).
    A store that cannot be read after the cut lost every row it had; one that could not be
    read before it (a target's own storage, or damaged by the loop) leaves nothing to
    compare: the check says so and fails, as no loss can be ruled out. Without a power cut
    the check is not applicable (nothing was put to the test; the verdict ignores it, and a
    rubric item of it alone scores 0 of 0, never full marks)."""
    if not ev.power_cuts:  # nothing was put to the test: never a pass (a rubric item of
        # this check over plain kills scored full marks on a loop that loses every commit)
        return CheckResult(CheckId.COMMITS_DURABLE, False,
                           "not applicable: no power cut in this execution", (),
                           applicable=False)
    lines: list[str] = []
    bad: list[str] = []
    for cut in ev.power_cuts:
        where = f"power cut at {cut.point} (worker {cut.worker})"
        if cut.unread is not None:
            bad.append(f"{where}: the checkpoints could not be read: {cut.unread}")
            continue
        lines.append(f"{where}: {len(cut.committed)} committed checkpoint(s) before, "
                     f"{len(cut.lost)} lost; files lost or rolled back: "
                     f"{', '.join(cut.files_lost) or 'none'}")
        if cut.lost:
            bad.append(f"{where} lost committed checkpoint(s) seq "
                       f"{', '.join(map(str, cut.lost))}: they were never made durable "
                       "(fsync; SQLite: synchronous=FULL, or NORMAL only without WAL)")
    if bad:
        return CheckResult(CheckId.COMMITS_DURABLE, False, bad[0], tuple(lines + bad))
    return CheckResult(CheckId.COMMITS_DURABLE, True,
                       f"every committed checkpoint survived {len(ev.power_cuts)} power cut(s)",
                       tuple(lines))


def _target_reads(ev: Evidence) -> CheckResult:
    """``history_not_replaced`` for a target: its reads after each worker
    (``HistoryRead``), judged by ``check_support.history_replaced``."""
    reads = ev.history_reads
    if not reads:
        return CheckResult(CheckId.HISTORY_NOT_REPLACED, False,
                           "not applicable: the target's history was never read (it has no "
                           "history function)", (), applicable=False)
    lines = [f"read {r.after()}: " + (f"unreadable, not compared ({r.unreadable})"
                                      if r.unreadable is not None
                                      else f"{len(r.items)} object(s)") for r in reads]
    replaced = history_replaced(ev)
    if replaced is not None:
        return CheckResult(CheckId.HISTORY_NOT_REPLACED, False, replaced, tuple(lines))
    readable = sum(r.unreadable is None for r in reads)
    return CheckResult(CheckId.HISTORY_NOT_REPLACED, True,
                       f"each of the {readable} read(s) of the target's history begins with "
                       "the one before (its newest object aside)" if readable > 1 else
                       "the target's history was read once: nothing to compare",
                       tuple(lines))
