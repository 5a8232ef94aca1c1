"""Closed sets of the harness as ``StrEnum`` (Python docs, ``enum.StrEnum``).

Each member *is* its string, so JSON, reports and scenario files keep writing ``pass``,
``kill`` or ``corrupt_json``, and a comparison with the plain string still holds. Imports
nothing of the harness (``docs/design.md``, "Layering").
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CheckId", "CheckStatus", "EventKind", "EvidenceSource", "FaultKind",
           "GatewayDialect", "HumanAction", "StorageFault", "TicketKind", "Verdict", "WorkerRole"]


class Verdict(StrEnum):
    """The verdict of an execution or a run (``docs/design.md``, "Verdict precedence").

    ``fail``: a check failed on evidence the harness gathered itself (or an expected
    failure did not happen). ``unknown``: evidence a check needs is missing, so it could
    not be decided; never a pass. ``pass``: every check decided and passed.
    """

    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"

    @property
    def exit_status(self) -> int:
        """Exit status of ``shopops-chaos run``: 0 pass, 1 fail, 2 unknown."""
        return _EXIT[self]


_EXIT = {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.UNKNOWN: 2}


class CheckStatus(StrEnum):
    """One check's outcome: decided ``pass``/``fail``, or ``undecided`` (its evidence is
    missing; the ``CheckResult`` says why)."""

    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "undecided"
    NOT_APPLICABLE = "not_applicable"  # the target does not expose the state it needs


class CheckId(StrEnum):
    """The checks of the checklist, in report order (``harness.judge.checks.registry``
    registers exactly one check per member; a test says so). Scenario files, rubric files and
    reports name checks by these strings."""

    DRAFT_IDENTICAL = "draft_identical"
    PARKED_UNTIL_APPROVAL = "parked_until_approval"
    NOT_SENT_BEFORE_APPROVAL = "not_sent_before_approval"
    STEP_CONTINUES = "step_continues"
    SAME_KEY_ONE_DELIVERY = "same_key_one_delivery"
    EXACTLY_ONE_DELIVERY = "exactly_one_delivery"
    TICKET_SERVER_ISSUED = "ticket_server_issued"
    INTAKE_NOT_REPEATED = "intake_not_repeated"
    STORAGE_SAFE = "storage_safe"
    NO_PROCESS_LEFT = "no_process_left"
    NO_TAMPERING = "no_tampering"
    NO_REQUEST_AFTER_DONE = "no_request_after_done"
    PHASE_PATH = "phase_path"
    LEASE_EXCLUSIVE = "lease_exclusive"
    REJECTION_RESPECTED = "rejection_respected"
    ATTEMPTS_BOUNDED = "attempts_bounded"
    HISTORY_NOT_REPLACED = "history_not_replaced"
    PER_ACTION = "per_action"
    ASKED_ONCE = "asked_once"
    COMMITS_DURABLE = "commits_durable"
    TICKET_CONSUMED_FIRST = "ticket_consumed_first"


class EventKind(StrEnum):
    """What one entry of the harness's trace (``Event.kind``) records."""

    WORKER_START = "worker_start"
    WORKER_EXIT = "worker_exit"
    HIT = "hit"  # a worker reached a labelled point (failpoint channel)
    KILL = "kill"  # the harness SIGKILLed a worker
    DELIVERY = "delivery"  # the harness's gateway committed a delivery
    REQUEST = "request"  # the gateway received a request (ref: its seq in the gateway log)
    CONSUMED = "consumed"  # the approval service bound a ticket to a send (ref: ticket id)
    APPROVE = "approve"  # the human approved (the queue issued a ticket)
    HUMAN = "human"  # any other human act: reject, a second approval, a bad ticket
    INJECT = "inject"  # the harness wrote a storage fault or a forged row
    LOCK = "lock"  # the harness took an exclusive SQLite lock
    HOLD = "hold"  # a worker is held at a point
    RELEASE = "release"  # a held worker goes on
    CLOCK = "clock"  # the simulated clock moved
    STEP = "step"  # a story step began
    ERROR = "error"  # a harness-side problem seen while the story ran
    TAMPERING = "tampering"  # a forged hit refused, a planted file removed (harness.sandbox.users)
    LEFTOVER = "leftover"  # a process of a sealed execution's uid found after its workers
    POWER_CUT = "power_cut"  # after a kill, the state folder went back to its last sync
    # a call from another uid than a sealed execution's (another execution's process),
    # refused; not the implementation's doing, so no check fails on it
    FOREIGN = "foreign"


class EvidenceSource(StrEnum):
    """Where a check's evidence comes from, so a ``Gap`` can say which checks it leaves
    undecided. The first three are files the harness reads; the last three are about the
    story as a whole and concern every check."""

    CHECKPOINTS = "checkpoints"  # the checkpoint database
    APPROVALS = "approvals"  # the approval queue's database
    GATEWAY = "gateway"  # the mock gateway's log
    SCHEDULE = "schedule"  # a scheduled kill point was never reached
    STORY = "story"  # the story was cut short (deadline, harness error, human refused)
    WORKERS = "workers"  # a worker ended in a way nobody declared
    TARGET = "target"  # a target's durable state, read through its own API (its history)

    @property
    def universal(self) -> bool:
        """The gap concerns every check, whatever it reads."""
        return self in (EvidenceSource.SCHEDULE, EvidenceSource.STORY, EvidenceSource.WORKERS)


class HumanAction(StrEnum):
    """What the human decides on a parked case's gate."""

    APPROVE = "approve"
    REJECT = "reject"


class TicketKind(StrEnum):
    """Which ticket the resuming worker is offered: the one the queue ``issued``, or a bad
    one the queue must refuse (Chapter 8, "Forged approval on resume")."""

    ISSUED = "issued"
    FORGED = "forged"
    FORGED_IN_STATE = "forged_in_state"
    OTHER_CASE = "other_case"
    STALE_DRAFT = "stale_draft"
    CONSUMED = "consumed"
    #: issued for another case over this case's own draft digest: only the case binds it
    OTHER_CASE_SAME_DRAFT = "other_case_same_draft"
    #: written into a checkpoint that stays ``awaiting_approval``: the queue never issued it
    FORGED_IN_PARKED_STATE = "forged_in_parked_state"


class CrashMode(StrEnum):
    """How a scheduled kill crashes the worker (``[crash] mode``): ``kill`` is a SIGKILL
    (the page cache survives: every write the worker made stays); ``power`` is a SIGKILL and
    then a power cut — the execution's state folder goes back to what was last synced
    (``harness.launch.power``)."""

    KILL = "kill"
    POWER = "power"


class StorageFault(StrEnum):
    """A fault the harness injects into the checkpoint database (``none``: no fault)."""

    NONE = "none"
    CORRUPT_JSON = "corrupt_json"
    TRUNCATED_JSON = "truncated_json"
    INVALID_UTF8 = "invalid_utf8"
    UNKNOWN_VERSION = "unknown_version"
    V1_CHECKPOINT = "v1_checkpoint"
    LOCK = "lock"

    @property
    def corrupts_row(self) -> bool:
        """The fault appends a bad row to the checkpoint history (the loop must fail
        closed on it)."""
        return self in _ROW_FAULTS


_ROW_FAULTS = frozenset({StorageFault.CORRUPT_JSON, StorageFault.TRUNCATED_JSON,
                         StorageFault.INVALID_UTF8, StorageFault.UNKNOWN_VERSION})


class FaultKind(StrEnum):
    """A planned misbehaviour of the mock gateway (``FaultSpec.kind``; ``docs/design.md``,
    "The mock email gateway")."""

    LATENCY = "latency"  # answer after ``ms``
    ERROR = "error"  # answer ``status`` (5xx) without delivering
    DROP_AFTER_ACCEPT = "drop_after_accept"  # deliver, then drop the connection
    PAUSE_AFTER_ACCEPT = "pause_after_accept"  # answer normally, mark the request for a hook
    DELAY_AFTER_ACCEPT = "delay_after_accept"  # deliver, answer only after ``ms``

    @property
    def takes_ms(self) -> bool:
        """The fault's ``ms`` is required (and allowed)."""
        return self in (FaultKind.LATENCY, FaultKind.DELAY_AFTER_ACCEPT)


class GatewayDialect(StrEnum):
    """The wire a scenario's or target's app sends email with (``[gateway] dialect``,
    ``docs/targets.md``). The ledger records the same evidence for each."""

    NATIVE = "native"  # the mock gateway's own ``POST /v1/messages``
    RESEND = "resend"  # Resend's ``POST /emails`` (its ``Idempotency-Key`` header)
    SMTP = "smtp"  # SMTP (``Resend-Idempotency-Key`` header, else ``Message-ID``, as key)


class WorkerRole(StrEnum):
    """Why a worker was started (``WorkerRun.role``)."""

    START = "start"  # the first run of the case
    RECHECK = "recheck"  # resumed before any approval: must park again and send nothing
    RESUME = "resume"  # resumed after the human decided
    TAKEOVER = "takeover"  # takes over a held worker's expired lease
    MIGRATE = "migrate"  # runs the explicit v1 -> v2 migration
    DECIDE = "decide"  # delivers the human's decision to a target (e.g. a DBOS message)
