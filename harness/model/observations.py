"""What any durable loop leaves behind, as the judge reads it — neutral observations,
independent of how the loop stores them (``docs/contract.md``; ``docs/design.md``, "One
judge"). Observers (``harness.judge.observers``) turn each source into these: the SQLite
checkpoint store of the contract, a target's ``history``, the approval records the harness
holds. The checks read only these types, never a loop's own classes.

A field a source cannot show is ``None`` in every write, and its ``Observable`` is missing
from ``History.observes``: a check that needs it is not applicable for that source, never
passed and never failed on its absence.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from shopops_contract.approvals import DEFAULT_GATE, ApprovalRequest, Ticket
from shopops_contract.digests import draft_digest
from shopops_contract.phases import Phase

__all__ = ["ApprovalRecord", "Draft", "DurableWrite", "GateState", "History", "HistorySource",
           "LeaseSeen", "Observable", "StoredRow", "TicketRecord", "rows_digest"]


@dataclass(frozen=True)
class LeaseSeen:
    """A case's lease record as the harness read it at one moment (the reference's
    ``leases`` table: one row per case, replaced by each grant), so that a history of
    holders is the sequence of such reads before and after each worker (``WorkerRun``).

    Attributes:
        owner: the holder's owner id.
        fence: its fencing token.
        expires_at: when it expires, epoch seconds on the loop's (simulated) clock; ``0``
            or less: released.
        read_at: the story's simulated clock when the harness read it (epoch seconds plus
            ``SHOPOPS_CLOCK_OFFSET_S``, the same clock the workers then ran on).
    """

    owner: str
    fence: int
    expires_at: float
    read_at: float

    @property
    def live(self) -> bool:
        """Not expired nor released when it was read."""
        return self.expires_at > self.read_at

    def line(self) -> str:
        """``owner X fence N, live for S s`` / ``... expired``: for evidence lines."""
        left = self.expires_at - self.read_at
        return (f"owner {self.owner} fence {self.fence}, "
                + (f"live for {left:.1f} s" if self.live else "expired or released"))


class Observable(StrEnum):
    """A kind of fact a source of durable writes can show (``History.observes``)."""

    PHASE = "phase"  # the case's phase (shopops_contract.phases)
    STEP = "step"  # the step counter
    DRAFT = "draft"  # the email draft's text
    TICKET = "ticket"  # the ticket held, per gate
    KEY = "key"  # the idempotency key made durable, per gate
    SENT = "sent"  # the action acknowledged as done, per gate, and its delivery id
    ATTEMPTS = "attempts"  # the loop's recovery-attempt counter
    LEASE = "lease"  # the writer's lease owner, fence and pid
    ROWS = "rows"  # the stored rows byte for byte, in one file the harness can identify


class HistorySource(StrEnum):
    """Where a ``History`` was observed."""

    CHECKPOINT_STORE = "checkpoint_store"  # the contract's SQLite checkpoint database
    TARGET_HISTORY = "target_history"  # a target's ``history`` function (contract-shaped)


@dataclass(frozen=True)
class StoredRow:
    """One row of the ``checkpoints`` table as stored, every column the harness reads
    (``docs/contract.md``, "The checkpoint database"); ``state_json`` as its bytes, the
    optional lease columns ``None`` where the table has none."""

    seq: int
    case_id: str
    run_id: str
    schema_version: int | None
    state_json: bytes | None
    created_at: str
    lease_owner: str | None = None
    fence: int | None = None
    writer_pid: int | None = None


def rows_digest(rows: Iterable[StoredRow]) -> str:
    """SHA-256 over every column of ``rows``, in the order given (``state_json`` as its
    stored bytes): two readings of a history digest alike only if they hold the same rows,
    byte for byte. The one definition the story engine (at the approval) and the checks
    (at the end) both use."""
    h = hashlib.sha256()
    for r in rows:
        state = r.state_json.hex() if r.state_json is not None else None
        h.update(json.dumps([r.seq, r.case_id, r.run_id, r.schema_version, state,
                             r.created_at, r.lease_owner, r.fence, r.writer_pid]).encode())
        h.update(b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class Draft:
    """An email draft as a write holds it: recipient, subject, body (``str``)."""

    to: str
    subject: str
    body: str

    @property
    def digest(self) -> str:
        """What an approval of it binds to (``shopops_contract.digests.draft_digest``)."""
        return draft_digest(self.to, self.subject, self.body)


@dataclass(frozen=True)
class GateState:
    """One gated action as a write records it (``None``: not recorded, or not observable).

    Attributes:
        gate: the approval gate (``send_email``, ``add_order_note``).
        request_id: the approval request the loop asked for.
        ticket: the ticket it holds for the action.
        key: the action's idempotency key, once durable.
        sent: the action is acknowledged as done.
        delivery_id: the id the service gave the done action.
        content_digest: the digest of the content approved for it (the note's; the email's
            is its draft's).
    """

    gate: str
    request_id: str | None = None
    ticket: str | None = None
    key: str | None = None
    sent: bool | None = None
    delivery_id: str | None = None
    content_digest: str | None = None


@dataclass(frozen=True)
class DurableWrite:
    """One durable write of a case, oldest first by ``seq``.

    Attributes:
        seq: its place in the history (the row's ``seq``; a target's index from 1).
        phase: the case's phase (``None``: not observable here).
        step: the step counter.
        draft: the email draft, or ``None`` (none yet, or not observable: see ``observes``).
        gates: the gated actions it records, the email's (``send_email``) first.
        attempts: the loop's recovery-attempt counter.
        lease_owner, fence, writer_pid: the writer's lease and process, where recorded.
        created_at: when it was written, as the loop says.
        problem: why the write cannot be read as the contract says (invalid JSON, a required
            field missing, another schema version), naming it; then every other field is
            ``None`` and no check passes over it.
        revision: the draft's revision (``draft_revision``: 0 for the first draft, one more
            per redraft), or ``None``: not recorded.
    """

    seq: int
    phase: Phase | None = None
    step: int | None = None
    draft: Draft | None = None
    gates: tuple[GateState, ...] = ()
    attempts: int | None = None
    lease_owner: str | None = None
    fence: int | None = None
    writer_pid: int | None = None
    created_at: str | None = None
    problem: str | None = None
    revision: int | None = None

    def gate(self, name: str = DEFAULT_GATE) -> GateState:
        """The action on gate ``name`` (an empty ``GateState`` when not recorded)."""
        return next((g for g in self.gates if g.gate == name), GateState(name))

    @property
    def email(self) -> GateState:
        """The email's action (gate ``send_email``)."""
        return self.gate(DEFAULT_GATE)


@dataclass(frozen=True)
class History:
    """A case's durable writes as one observer read them.

    Attributes:
        source: where they were read.
        writes: every write of the case, oldest first (the harness's injected rows among
            them, as the loop's readers see them; ``Evidence.loop_writes`` leaves them out).
        observes: what this source can show; a check needing anything else is not
            applicable.
        cannot: one line saying what the source cannot show and why (for the reports).
        problem: why the source as a whole does not meet the contract (no ``checkpoints``
            table with the required columns), or ``None``; then ``writes`` is empty and
            every check over the history fails, naming it.
    """

    source: HistorySource
    writes: tuple[DurableWrite, ...] = ()
    observes: frozenset[Observable] = frozenset(Observable)
    cannot: str = ""
    problem: str | None = None


#: A request as the harness's approval service holds it: the contract's record.
ApprovalRecord = ApprovalRequest
#: A ticket the harness's queue issued: the contract's record.
TicketRecord = Ticket
