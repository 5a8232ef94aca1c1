"""The default rubric as data: ``RubricItem`` and ``DEFAULT_RUBRIC`` (what ``harness.grading.grade``
scores; a rubric TOML file replaces it, ``harness.grading.rubric_file.load_rubric``). Each item
names the scenarios whose executions count and the checks (``harness.judge.checks.registry``) it is
about.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.model import CheckId

__all__ = ["ALL_CHECKS", "DEFAULT_RUBRIC", "RubricItem"]

#: What ``checks = "all"`` in a rubric file means: every check of the registry must hold.
ALL_CHECKS: tuple[CheckId, ...] = tuple(CheckId)


@dataclass(frozen=True)
class RubricItem:
    """One graded test.

    Attributes:
        name: the Gradescope test name.
        points: its ``max_score``.
        scenarios: scenario names (files under ``scenarios/``) whose executions count.
        checks: the check ids this item is about (at least one; ``ALL_CHECKS`` for every
            one — an item about no check would give full points to failing executions, so
            ``__post_init__`` refuses it with ``ValueError``): in every one of those
            executions each must come out as its scenario expects (pass, or fail for a
            teaching demo's expected failure). Always, a scenario's expected worker error must have
            happened and the verdict must be definite (not ``unknown``); other checks do
            not count here, so one bug costs the items about it, not every item.
        visibility: Gradescope visibility.
        explain: one line for the student: what the item means.
    """

    name: str
    points: float
    scenarios: tuple[str, ...]
    checks: tuple[CheckId, ...] = ()
    visibility: str = "visible"
    explain: str = ""

    def __post_init__(self) -> None:
        if not self.checks:
            raise ValueError(f"rubric item {self.name!r} names no check: give its check ids "
                             "or ALL_CHECKS (every check must hold)")


DEFAULT_RUBRIC: tuple[RubricItem, ...] = (
    RubricItem("Checklist 1: the draft after resume is the pre-crash draft", 10,
               ("o1001", "nondeterministic-policy"),
               (CheckId.DRAFT_IDENTICAL, CheckId.INTAKE_NOT_REPEATED),
               explain="Checkpoint the draft; never re-draft on resume."),
    RubricItem("Checklist 2: phase stays awaiting_approval until grant_approval", 10,
               ("o1001", "rejection"), (CheckId.PARKED_UNTIL_APPROVAL,),
               explain="A resume without an approval must park again and send nothing."),
    RubricItem("Checklist 3: email_sent is false until the post-approval send", 10,
               ("o1001",), (CheckId.NOT_SENT_BEFORE_APPROVAL,),
               explain="Record the send only after the gateway confirmed it."),
    RubricItem("Checklist 4: step continues across resume", 10, ("o1001",),
               (CheckId.STEP_CONTINUES,), explain="Load step from the checkpoint; never reset it."),
    RubricItem("Checklist 5: the same idempotency key after a crash; one delivery", 10,
               ("o1001", "reply-lost-first-attempt", "gateway-5xx", "reply-after-timeout"),
               (CheckId.SAME_KEY_ONE_DELIVERY,),
               explain="Persist the key before the first attempt; every retry reuses it."),
    RubricItem("Exactly one delivery at every kill point", 10, ("o1001",),
               (CheckId.EXACTLY_ONE_DELIVERY,),
               explain="The gateway's own log must show one delivery, and the case done."),
    RubricItem("No send without a server-issued ticket", 10,
               ("o1001", "forged-ticket", "forged-ticket-in-state", "ticket-other-case",
                "ticket-stale-draft", "ticket-consumed"),
               (CheckId.TICKET_SERVER_ISSUED, CheckId.TICKET_CONSUMED_FIRST),
               explain="Tickets are server-side facts: verify them with the queue, and bind "
                       "the ticket to the send before the send leaves."),
    RubricItem("Exercise 1: a corrupt state_json raises a clear error", 10,
               ("checkpoint-corrupt-json", "checkpoint-truncated-json",
                "checkpoint-invalid-utf8", "checkpoint-unknown-version"),
               (CheckId.STORAGE_SAFE,),
               explain="Fail closed: a typed error, the row untouched, never a fresh start."),
    RubricItem("Exercise 2: v1->v2 migration adds preferred_channel = \"email\"", 10,
               ("v1-migration",), (CheckId.STORAGE_SAFE,),
               explain="Explicit, recorded, safe to run twice and to kill half-way."),
    RubricItem("Exercise 3: without keys a double resume duplicates; with keys it does not",
               10, ("demo-keys-off", "reply-lost-first-attempt"),
               (CheckId.SAME_KEY_ONE_DELIVERY,),
               explain="The keys-off switch must really send without a key."),
    RubricItem("Exercise 4: a lease owner rejects resume from another owner", 10,
               ("two-resumers", "lease-takeover", "lease-same-owner"), (CheckId.LEASE_EXCLUSIVE,),
               explain="Leases with an owner and an expiry; fence a taken-over worker."),
    RubricItem("History: nothing is sent or written once the case is done", 10,
               ("o1001", "lease-takeover", "lease-same-owner", "two-resumers", "rejection",
                "dead-letter", "order-note"),
               (CheckId.NO_REQUEST_AFTER_DONE, CheckId.PHASE_PATH, CheckId.HISTORY_NOT_REPLACED),
               explain="No gateway call after completion, even a deduplicated one; phases "
                       "follow the FSM and stop at a terminal one; the checkpoint history "
                       "is kept, never deleted and started again."),
    RubricItem("Leases: one writer at a time, fences only rise", 10,
               ("two-resumers", "lease-takeover", "lease-same-owner", "lease-live-takeover"),
               (CheckId.LEASE_EXCLUSIVE,),
               explain="A new holder gets a higher fence; a taken-over worker never writes; "
                       "nobody takes a live lease from a running holder."),
    RubricItem("Rejections end the case or are answered by a redraft", 10,
               ("rejection", "rejection-feedback", "reject-twice-then-approve"),
               (CheckId.REJECTION_RESPECTED,),
               explain="Never park forever on a rejected draft; answer the feedback."),
    RubricItem("Recovery attempts are counted; dead-lettered past the maximum", 10,
               ("dead-letter", "o1001"), (CheckId.ATTEMPTS_BOUNDED,),
               explain="Count every pick-up in flight durably; stop retrying at the maximum."),
    RubricItem("Per action: each gated side effect at most once, exactly as approved", 10,
               ("o1001", "rejection", "reject-twice-then-approve", "order-note"),
               (CheckId.PER_ACTION,),
               explain="Send what the human approved, byte for byte, once; nothing rejected."),
    RubricItem("No process left behind: nothing outlives its worker", 10, ("o1001",),
               (CheckId.NO_PROCESS_LEFT,),
               explain="A process the worker started (a helper, a daemon, a pool) ends with "
                       "it, killed at any point or not: one that lives on can still act."),
)
