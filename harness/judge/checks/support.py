"""What every check module shares: the readings of the evidence that
several checks need (the parsed checkpoint states, a draft's digest, the redrafts a human
asked for). Pure functions; the check modules import this, never each other."""

from __future__ import annotations

import weakref

from harness.model import DEFAULT_GATE, CheckResult, Evidence, rows_digest
from shopops.approval_records import RequestStatus
from shopops.approvals import Ticket
from shopops.errors import ShopOpsError
from shopops.state import Draft, State

__all__ = ["CheckResult", "absent", "draft_digest", "gate_tickets", "history_replaced",
           "parsed_states", "redrafts_owed"]


#: ``id(evidence)`` -> its parsed states, while that evidence lives: five checks read them,
#: and parsing every row again was a tenth of an execution's harness-side time.
_PARSED: dict[int, tuple[tuple[tuple[int, State], ...], tuple[str, ...]]] = {}


def parsed_states(ev: Evidence) -> tuple[list[tuple[int, State]], list[str]]:
    """``([(seq, state)], [problem])`` for the rows the loop wrote, in ``seq`` order; a row
    that does not parse is a problem line (checks never pass over an unreadable row).

    Parsed once per evidence object (the lists are new on every call; the ``State``
    objects are shared, and checks only read them)."""
    key = id(ev)
    memo = _PARSED.get(key)
    if memo is None:
        parsed, problems = [], []
        for row in ev.loop_checkpoints:
            try:
                parsed.append((row.seq, row.state()))
            except ShopOpsError as exc:
                problems.append(f"checkpoint seq {row.seq}: {exc}")
        memo = (tuple(parsed), tuple(problems))
        _PARSED[key] = memo
        weakref.finalize(ev, _PARSED.pop, key, None)
    return list(memo[0]), list(memo[1])


def draft_digest(to: str, subject: str, body: str) -> str:
    """The SHA-256 digest approvals bind to, of a draft (or of a delivered email)."""
    return Draft(to, subject, body).digest()


def redrafts_owed(ev: Evidence) -> set[str]:
    """Digests of drafts a human rejected WITH feedback: the loop must replace each once."""
    return {r.draft_digest for r in ev.approval_requests if r.status == RequestStatus.REJECTED
            and getattr(r, "feedback", None) and r.gate == DEFAULT_GATE}


def gate_tickets(ev: Evidence, gate: str = DEFAULT_GATE) -> tuple[Ticket, ...]:
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
    """How the checkpoint history at the end no longer begins with what the harness read
    when the human approved (``Evidence.history_at_approval``), or ``None`` when it still
    does or nothing was recorded then. Replaced: the file the harness read at the end is
    another one than at the approval (``(st_dev, st_ino)``, ``Evidence.checkpoints_file``:
    deleted and created again, or another file moved there); rewritten: the rows with
    ``seq`` up to the approval's are not the same rows, byte for byte (missing, changed or
    added under an old ``seq``). Then a ``seq`` of the end's history says nothing about
    when it was written relative to the approval, and the checks that compare with
    ``checkpoint_seq_at_approval`` do not (``docs/design.md``, "The checklist")."""
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
