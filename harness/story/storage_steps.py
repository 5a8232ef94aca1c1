"""The story's storage steps (``[[story]] storage``: ``docs/scenarios.md``), played on the
workers' checkpoint store by the harness: a v1 fixture installed, a row injected (corrupt
JSON, invalid UTF-8, …), a forged ticket written into the state, an exclusive lock taken
when a worker reaches a point. Every row the harness writes is recorded (``Workers.injected``
and an ``inject`` event) and counts as synced for a power cut: the harness is not the loop
under test (``docs/design.md``, "Power cuts").
"""

from __future__ import annotations

from harness.judge.evidence import EventLog
from harness.model import EventKind, StorageFault, StorageStep, StoredRow
from harness.story.controller import KillController
from harness.story.storage_faults import LockHolder, forge_ticket, inject_row, install_v1_fixture
from harness.story.workers import RUN_ID, Workers

__all__ = ["FORGED_TICKET", "StorageSteps"]

#: The ticket id the harness forges into a checkpoint (one the queue never issued).
FORGED_TICKET = "apr-forged-1"


class StorageSteps:
    """The storage faults of one story, on ``workers``' checkpoint store.

    Args:
        workers: the story's workers (their store, errors, injected rows and power shadow).
        controller: the kill controller (a lock is taken when a worker reaches a point).
        events: the execution's trace.
        case_id: the case whose rows are injected or forged.

    Attributes:
        v1_rows: the rows of the v1 fixture installed (0: none).
    """

    def __init__(self, workers: Workers, controller: KillController, events: EventLog,
                 case_id: str) -> None:
        self.w = workers
        self.controller = controller
        self.events = events
        self.case_id = case_id
        self.v1_rows = 0
        self.lock_holder: LockHolder | None = None

    def play(self, step: StorageStep) -> None:
        """Play one storage step (a lock: from the moment a worker reaches ``step.at``)."""
        if step.fault is StorageFault.V1_CHECKPOINT:
            self.v1_rows = install_v1_fixture(self.w.ckpt_db)
            self.w.synced()
            self.w.reset_phase()
        elif step.fault is StorageFault.LOCK:
            assert step.at is not None
            self.controller.add_hook(step.at, lambda worker: self._take_lock(step.ms))
        else:
            self._inject(step.fault)

    def forge_ticket(self, *, advance: bool = True) -> None:
        """The model writes an approval ticket into the state (Chapter 8, "Forged approval
        on resume"): the harness appends the loop's latest state with a ticket the queue
        never issued and phase ``approved`` (``advance`` false: the phase as it was) as a
        checkpoint (``storage_faults.forge_ticket``, in the contract's terms).

        Raises:
            ShopOpsError: the loop left no readable checkpoint to forge from.
        """
        row = forge_ticket(self.w.ckpt_db, self.case_id, FORGED_TICKET, advance=advance)
        self._injected(row, f"forged ticket written at seq {row.seq}")

    def close(self) -> None:
        """Let go of a lock still held."""
        if self.lock_holder is not None:
            self.lock_holder.close()

    def _inject(self, kind: StorageFault) -> None:
        row = inject_row(self.w.ckpt_db, self.case_id, RUN_ID, kind)
        if row is None:
            self.w.errors.append(f"storage fault {kind}: no checkpoint to corrupt")
            return
        self._injected(row, f"{kind} row at seq {row.seq}")

    def _injected(self, row: StoredRow, text: str) -> None:
        self.w.injected.append(row)
        self.w.synced()
        self.events.add(EventKind.INJECT, None, None, None, text, ref=str(row.seq))

    def _take_lock(self, ms: int) -> None:
        if self.lock_holder is None:
            self.lock_holder = LockHolder(self.w.ckpt_db, ms)
        self.lock_holder.take()
        self.events.add(EventKind.LOCK, None, None, None,
                        f"exclusive lock on checkpoints.db for {ms} ms")
