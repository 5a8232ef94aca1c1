"""The catalogue of labelled points on the crash timeline — the one place labels live.

Chapter 8's crash timeline for O-1001 (t0 … t7), refined into dotted sub-labels so that
every moment where a crash changes what recovery must do has a name. ``shopops.failpoints``
accepts only these labels; ``shopops-chaos points`` prints this table; the harness learns
which of them a run actually passes through from a trace run, so adding a label here and a
``failpoint()`` call in the loop is all it takes to add a kill point.

``side`` says who reaches the point: ``worker`` (a ``failpoint()`` call in the loop, where
the harness SIGKILLs the worker), ``gateway`` (the harness-owned mock gateway reaches it and
the harness kills the sender), ``queue`` (the human's action through the approval queue,
not a kill point).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Label:
    """One labelled point: ``name`` (``"t6.gateway_accepted"``), ``moment`` (one line of
    prose), ``side`` (``"worker"``, ``"gateway"`` or ``"queue"``)."""

    name: str
    moment: str
    side: str = "worker"


CATALOGUE: tuple[Label, ...] = (
    Label("t0.case_started", "case started: state initialised, before any tool"),
    Label("t1.get_customer", "Intake read the customer (in memory, not yet checkpointed)"),
    Label("t1.get_order", "Intake read the order (in memory, not yet checkpointed)"),
    Label("t1.draft_email", "draft written (in memory, not yet checkpointed)"),
    Label("t2.send_proposed", "send proposed, phase awaiting_approval in memory, not durable"),
    Label("t3.checkpoint_saved", "the awaiting_approval checkpoint is committed"),
    Label("t4.parked", "worker parked: idle after the park, about to exit"),
    Label("t5.approved", "a human approved: the queue issued a ticket", side="queue"),
    Label("t6.checkpoint_loaded", "resume: the latest checkpoint was loaded"),
    Label("t6.approval_granted", "resume: grant_approval accepted the server-issued ticket"),
    Label("t6.send_key_persisted", "resume: phase sending and the idempotency key committed"),
    Label("t6.request_leaving", "resume: the send request is about to leave the worker"),
    Label(
        "t6.gateway_accepted",
        "the gateway delivered the email; its reply has not reached the worker",
        side="gateway",
    ),
    Label("t6.reply_received", "the gateway's reply arrived; not yet checkpointed"),
    # The order note (the second gated action, ``sut.order_note``): after the email.
    Label("t6.email_sent_saved",
          "order note on: the checkpoint acknowledging the email is committed, no note yet"),
    Label("t6.note_request_leaving", "the order-note request is about to leave the worker"),
    Label(
        "t6.note_accepted",
        "the mock order service added the note; its reply has not reached the worker",
        side="gateway",
    ),
    Label("t6.note_reply_received", "the order service's reply arrived; not yet checkpointed"),
    Label("t7.completed_saved", "the completed checkpoint is committed"),
    Label(
        "ckpt.before_commit",
        "inside CheckpointStore.save: the row is written, the transaction not committed",
    ),
    # Boundaries the harness installs in a target's worker (harness.targets.boundaries), so a loop
    # that never calls failpoint() still has kill points at its durability boundaries.
    Label("b.sqlite.before_commit", "target: an SQLite transaction is about to commit"),
    Label("b.sqlite.after_commit", "target: an SQLite transaction has committed"),
    Label("b.http.before_request", "target: a request to the gateway is about to leave"),
    Label("b.http.after_response", "target: the gateway's reply arrived; nothing of it durable"),
    Label("b.langgraph.node_start", "target: a LangGraph node is about to run"),
    Label("b.langgraph.node_end", "target: a LangGraph node returned; its writes not yet saved"),
    Label("b.langgraph.task_start", "target: a LangGraph @task is about to run"),
    Label("b.langgraph.task_end", "target: a LangGraph @task returned; its result not yet saved"),
    Label("b.dbos.step_start", "target: a DBOS step is about to run"),
    Label("b.dbos.step_end", "target: a DBOS step returned; its output not yet recorded"),
    Label(
        "ckpt.migration_started",
        "the v1->v2 migration: rows checked, about to take the write lock (a second migrator "
        "waits there for the first)",
    ),
    Label(
        "ckpt.migration_before_commit",
        "inside the v1->v2 migration: every row rewritten, the transaction not committed",
    ),
)

BY_NAME: dict[str, Label] = {label.name: label for label in CATALOGUE}

#: Labels only the harness's own components reach (the gateway's, the queue's): a worker that
#: reports one is refused and the report recorded as tampering (``harness.story.controller``).
HARNESS_OWNED = frozenset(lab.name for lab in CATALOGUE if lab.side != "worker")
#: Labels a worker can be killed at (every side but the human's ``queue``), in order.
KILLABLE: tuple[str, ...] = tuple(lab.name for lab in CATALOGUE if lab.side != "queue")

# -- groups of labels (the one place they are listed; the harness reads them from here) --
#: Intake's reads: not repeated once a checkpoint past ``intake`` exists (Chapter 8).
INTAKE_READS = frozenset({"t1.get_customer", "t1.get_order"})
#: Drafting: not repeated once the parked draft is checkpointed.
DRAFTING = frozenset({"t1.draft_email"})
#: Points a worker resuming an approved case reaches (where a slow one can be held).
RESUMER_POINTS = frozenset({"t6.checkpoint_loaded", "t6.approval_granted",
                            "t6.send_key_persisted", "t6.request_leaving",
                            "t6.reply_received", "ckpt.before_commit", "t6.email_sent_saved",
                            "t6.note_request_leaving", "t6.note_reply_received"})
#: Points a worker can only reach once the case was approved.
AFTER_APPROVAL = frozenset({"t6.approval_granted", "t6.send_key_persisted",
                            "t6.request_leaving", "t6.gateway_accepted", "t6.reply_received",
                            "t6.email_sent_saved", "t6.note_request_leaving",
                            "t6.note_accepted", "t6.note_reply_received",
                            "t7.completed_saved"})
#: Points a worker reaches only once a checkpoint of its case is committed (or, loaded, read
#: back): past one of them the checkpoint file cannot be missing unless something removed it.
AFTER_A_CHECKPOINT = frozenset({"t3.checkpoint_saved", "t6.checkpoint_loaded",
                                "t6.send_key_persisted", "t6.email_sent_saved",
                                "t7.completed_saved"})
#: The point every resuming worker passes first (concurrent resumers are held there).
CHECKPOINT_LOADED = "t6.checkpoint_loaded"
#: The point every migrator passes before it takes the write lock (overlapping migrators:
#: the held one is released once the others got there, ``harness.story.engine``).
MIGRATION_STARTED = "ckpt.migration_started"
#: The point inside the migration's transaction (a migrator held there holds the lock).
MIGRATION_BEFORE_COMMIT = "ckpt.migration_before_commit"
#: The point a fresh case start passes (a case started over after a fault passes it again).
CASE_STARTED = "t0.case_started"
#: Every checkpoint save passes it once, in row order.
SAVE_COMMIT = "ckpt.before_commit"
#: The harness's gateway reaches it when it commits a delivery.
GATEWAY_ACCEPTED = "t6.gateway_accepted"
#: The harness's gateway reaches it when it commits an order note (``/v1/order-notes``).
NOTE_ACCEPTED = "t6.note_accepted"
#: The human's approval (the queue issues a ticket).
APPROVED = "t5.approved"
#: The completed checkpoint is committed: the case is done.
COMPLETED_SAVED = "t7.completed_saved"
#: The checkpoint acknowledging the email is committed (a case with the order note).
EMAIL_SENT_SAVED = "t6.email_sent_saved"

