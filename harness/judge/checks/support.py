"""What every check module shares: the readings of the evidence that several checks need
(the loop's durable writes with the problems that make any of them unreadable, a
delivery's digest, the redrafts a human asked for, the tickets of a gate). Pure functions
over ``Evidence`` and its neutral observations (``harness.model.observations``); the check
modules import this, never each other, and nothing of a loop under test."""

from __future__ import annotations

from harness.model import (
    DEFAULT_GATE,
    CheckResult,
    DurableWrite,
    Evidence,
    HistoryRead,
    HistorySource,
    TicketRecord,
)
from harness.model.observations import rows_digest
from shopops_contract.approvals import RequestStatus
from shopops_contract.digests import draft_digest

__all__ = ["CheckResult", "absent", "draft_digest", "gate_tickets", "history_replaced",
           "reads_departed", "redrafts_owed", "writes"]


def writes(ev: Evidence) -> tuple[list[DurableWrite], list[str]]:
    """``(writes, problems)``: the durable writes the loop made (the harness's injected
    rows left out), oldest first, that can be read, and one line for each that cannot —
    or for the whole source, when it does not meet the contract (``History.problem``).
    Checks never pass over a problem: an unreadable write may hold what they look for."""
    if ev.history.problem is not None:
        return [], [ev.history.problem]
    good, problems = [], []
    for w in ev.loop_writes:
        if w.problem is None:
            good.append(w)
        else:
            problems.append(w.problem)
    return good, problems


def redrafts_owed(ev: Evidence) -> set[str]:
    """Digests of drafts a human rejected WITH feedback: the loop must replace each once."""
    return {r.draft_digest for r in ev.approval_requests
            if r.status == RequestStatus.REJECTED and r.feedback and r.gate == DEFAULT_GATE}


def gate_tickets(ev: Evidence, gate: str = DEFAULT_GATE) -> tuple[TicketRecord, ...]:
    """The tickets the queue issued on ``gate`` (default the email's), in issue order: a
    check about the email never takes an order note's approval for the email's."""
    return tuple(t for t in ev.tickets if t.gate == gate)


def absent(ev: Evidence, result: CheckResult) -> CheckResult:
    """A failure that says something did *not* happen proves nothing when the story was cut
    short (``Evidence.cut_short``): it may simply not have had the chance. Then the check is
    undecided (``docs/design.md``, "Verdict precedence")."""
    why = ev.cut_short_by
    if why is None:
        return result
    return CheckResult(result.check_id, False, result.detail, result.evidence,
                       undecided=f"the story was cut short ({why}): {result.detail}")


def history_replaced(ev: Evidence) -> str | None:
    """How the loop's history no longer begins with what the harness read of it earlier, or
    ``None`` when it still does or nothing was recorded earlier. A target's: its history as
    read after each worker (``Evidence.history_reads``, ``reads_departed``). The checkpoint
    store's: the history at the end against what the harness read when the human approved
    (``Evidence.history_at_approval``). Replaced: the file the harness read at the end is
    another one than at the approval (``(st_dev, st_ino)``, ``Evidence.checkpoints_file``:
    deleted and created again, or another file moved there); rewritten: the rows with
    ``seq`` up to the approval's are not the same rows, byte for byte (missing, changed or
    added under an old ``seq``). Then a ``seq`` of the end's history says nothing about
    when it was written relative to the approval, and the checks that compare with
    ``checkpoint_seq_at_approval`` do not (``docs/design.md``, "The checklist")."""
    if ev.history.source is HistorySource.TARGET_HISTORY:
        return reads_departed(ev.history_reads)
    mark = ev.history_at_approval
    if mark is None:
        return None
    if mark.unreadable is not None:
        return ("the checkpoint history could not be read when the human approved "
                f"({mark.unreadable}) but could at the end: it was hidden, replaced or "
                "repaired in between, and no row of it can be set against the approval")
    kept = [r for r in ev.checkpoints if r.seq <= mark.seq]
    digest = rows_digest(kept)
    now = ev.checkpoints_file
    other_file = mark.file_id is not None and now is not None and now != mark.file_id
    if not other_file and len(kept) == mark.rows and digest == mark.digest:
        return None

    def where(file: tuple[int, int] | None) -> str:
        return "no file" if file is None else f"file dev {file[0]} inode {file[1]}"

    return ("the checkpoint history was replaced or rewritten during the execution: "
            f"{where(mark.file_id)} with {mark.rows} row(s) up to seq {mark.seq} "
            f"(digest {mark.digest[:12]}) seen at approval, {where(now)} with {len(kept)} "
            f"row(s) up to seq {mark.seq} (digest {digest[:12]}) at the end")


def reads_departed(reads: tuple[HistoryRead, ...]) -> str | None:
    """How a target's history, read after one worker, does not begin with what was read
    after an earlier one (``HistoryRead``; items compared by the digest of their canonical
    JSON), or ``None``: each readable read begins with the readable read before it. The
    rule of ``docs/contract.md`` ("A target's history"): the history is append-only — one
    object per durable write, oldest first — except its newest object, the frontier, which
    may still be completed in place (a framework app's ``awaiting_approval`` describes the
    wait going on; DBOS records a ``recv``'s answer under a function ID before its durable
    timeout's). So every object of a read but its last must begin every later read. A
    read that failed is not compared (a target killed before its storage existed may
    fail to read it); the history at the end is judged by every check regardless."""
    readable = [r for r in reads if r.unreadable is None]
    for before, now in zip(readable, readable[1:], strict=False):
        kept = before.items[:-1]
        if now.items[:len(kept)] == kept:
            continue
        at = next((i for i, (a, b) in enumerate(zip(kept, now.items, strict=False))
                   if a != b), len(now.items))
        what = ("is missing" if at >= len(now.items) else "is another object")
        return (f"the history read {now.after()} does not begin with the history read "
                f"{before.after()}: of the {len(before.items)} object(s) read then, object "
                f"{at + 1} (1 = the oldest) {what} in the {len(now.items)} read now — the "
                "target's history was deleted, restarted or rewritten between the two reads")
    return None
