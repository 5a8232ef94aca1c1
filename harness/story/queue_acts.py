"""What the harness does in the approval queue on the story's behalf besides the human's
decisions (``harness.story.engine``): the migrated case's request, and what it reads of the
history when the human approves (``docs/design.md``, "The story engine")."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

from harness.judge.evidence import latest_checkpoint
from harness.judge.observers import store
from harness.model import HistoryMark, StoredRow
from harness.services.approvals import SERVICE_QUEUE, ApprovalService
from shopops.approval_records import ApprovalRequest, iso
from shopops.approvals import ApprovalQueue
from shopops.errors import ShopOpsError
from shopops_contract.approvals import RequestStatus

__all__ = ["draft_not_durable", "human_queue", "other_case_ticket", "request_migrated"]


@contextlib.contextmanager
def human_queue(service: ApprovalService | None, appr_db: Path,
                clock: Callable[[], float] = time.time) -> Iterator[ApprovalQueue]:
    """The approval queue the story's human acts on: the harness's approval service's own
    records (``ApprovalService.queue``: in memory for an execution), or, without a service,
    the file ``appr_db``."""
    if service is not None:
        with service.queue(clock) as queue:
            yield queue
    else:
        with ApprovalQueue(appr_db, clock=clock, kind=SERVICE_QUEUE) as queue:
            yield queue


def request_migrated(ckpt_db: Path, queue: Callable[[], AbstractContextManager[ApprovalQueue]],
                     case_id: str) -> tuple[bool, str | None]:
    """After a migration, the queue holds the parked case's request, as it did all along
    before the upgrade: under the request id the migrated state names (the v1 state's
    ``approval_request_id``), so a loop that finds its request by that id finds it (found by
    the implementation written from the contract alone). Called once a migrator committed
    (issue 26: at the end of a held migrator's step it read an unmigrated row).
    ``queue()``: the harness's approval queue (``harness.services.approvals.ApprovalService
    .queue``).

    Returns:
        ``(asked, error)``: whether the request is now in the queue, and why the migrated
        checkpoint could not be read (``None``: it could, or there is none).

    Raises:
        ShopOpsError: the queue refused the request.
    """
    latest = latest_checkpoint(ckpt_db, case_id)
    write = store.write_of(latest) if latest is not None else None
    if write is not None and write.problem is not None:
        return False, f"the migrated checkpoint cannot be read: {write.problem}"
    if write is None or write.draft is None:
        return False, None
    asked = write.email.request_id  # under the id the loop gave it (its v1 state's)
    with queue() as approvals:
        if asked is None:
            approvals.request(case_id, write.draft.digest)
        else:
            approvals.record(ApprovalRequest(asked, case_id, write.draft.digest,
                                             iso(time.time()), RequestStatus.PENDING))
    return True, None


def draft_not_durable(mark: HistoryMark, rows: tuple[StoredRow, ...],
                       approved: str) -> HistoryMark:
    """``mark`` (read as the human approved a request the loop made for the draft digest
    ``approved``) with ``unreadable`` set when none of its ``rows`` holds that draft: a loop
    makes its draft durable before it asks for approval (Chapter 8; the reference saves it
    at ``t1.draft_email``), so a history without it then was hidden or swapped (found by
    attacks: an empty decoy database at the approval, or the rows after the first moved
    away and back, passed with rows rewritten meanwhile). Rows that do not parse are
    skipped: the checks over the history judge them."""
    if mark.unreadable is not None:
        return mark
    for row in rows:
        draft = store.write_of(row).draft  # a row that cannot be read holds no draft
        if draft is not None and draft.digest == approved:
            return mark
    return replace(mark, unreadable=(
        f"no checkpoint of the case holds the approved draft ({approved[:12]}), although "
        "the loop had asked for this approval (the queue held its request)"))



def other_case_ticket(queue: ApprovalQueue, case_id: str, other: str, gate: str,
                      approver: str, *, same_draft: bool) -> str:
    """A real ticket the queue issues to ``approver`` for the case ``other`` on ``gate``:
    over a digest of its own, or (``same_draft``, issue 26) over the digest of
    ``case_id``'s newest pending request on that gate, so that only the ticket's case
    binding can refuse it.

    Raises:
        ShopOpsError: ``same_draft`` and the case asked for nothing on ``gate``.
    """
    digest = "0" * 64
    if same_draft:
        asked = [r for r in queue.requests(case_id)
                 if r.status == RequestStatus.PENDING and r.gate == gate]
        if not asked:
            raise ShopOpsError(f"{case_id} asked for no approval on {gate}: no draft digest "
                               "to issue another case's ticket over", case_id=case_id)
        digest = asked[-1].draft_digest
    queue.request(other, digest, gate=gate)
    return queue.approve(other, approver=approver, gate=gate).ticket_id
