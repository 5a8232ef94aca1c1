"""A catalogue of deliberately broken variants of the reference loop (mutants).

Each is one small, readable change to a copy of ``shopops/``; ``tests/test_mutants.py``
grades every one and asserts that it loses the points of the rubric item it breaks, with
``fail`` verdicts (never ``unknown``), while the reference scores full marks.
``docs/grading.md`` keeps this catalogue as a table (mutant -> what catches it -> the
smallest schedule).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    """``name``; ``edits``: ``(file under shopops/, old text, new text)``, each ``old`` found
    exactly once; ``breaks``: rubric item name prefixes that must score 0; ``shown_by``:
    an execution id that comes out ``fail``."""

    name: str
    edits: tuple[tuple[str, str, str], ...]
    breaks: tuple[str, ...]
    shown_by: str

    def build(self, into: Path, *, fixtures: bool = True) -> Path:
        """Copy ``shopops/`` (and ``fixtures/`` unless told not to: the harness brings its
        own) into ``into`` and apply the edits."""
        shutil.copytree(ROOT / "shopops", into / "shopops",
                        ignore=shutil.ignore_patterns("__pycache__"))
        if fixtures:
            shutil.copytree(ROOT / "fixtures", into / "fixtures")
        for file, old, new in self.edits:
            path = into / "shopops" / file
            text = path.read_text(encoding="utf-8")
            assert text.count(old) == 1, f"{self.name}: {file} has {text.count(old)} x {old!r}"
            changed = text.replace(old, new)
            compile(changed, str(path), "exec")  # a mutant is a loop with a bug, not a
            path.write_text(changed, encoding="utf-8")  # SyntaxError (scores 0 for nothing)
        return into


#: The resumer's edit that deletes the checkpoint file and creates it again once the human
#: approved (``seq`` starts over at 1): shared by the mutants that replace the history.
RECREATED_ONCE_APPROVED = ("worker.py", "        failpoint(\"t6.checkpoint_loaded\")\n",
    "        failpoint(\"t6.checkpoint_loaded\")\n"
    "        if (state.phase == Phase.AWAITING_APPROVAL and state.draft is not None\n"
    "                and services.approvals.ticket_for(\n"
    "                    case_id, state.draft.digest()) is not None):\n"
    "            import os  # delete the file and create it again: seq starts over\n"
    "            store.close()\n"
    "            for name in (store.path, store.path + \"-wal\", store.path + \"-shm\"):\n"
    "                if os.path.exists(name):\n"
    "                    os.remove(name)\n"
    "            store.__init__(store.path)\n")


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "fresh-key-per-send",
        (("tools.py", "idempotency_key=state.send_idempotency_key,",
          "idempotency_key=__import__('uuid').uuid4().hex,"),),
        ("Checklist 5", "Exactly one delivery"),
        "o1001[t6.gateway_accepted]",
    ),
    Mutant(
        "key-from-pid",
        (("tools.py", 'return f"{state.case_id}:send_email:{_require_draft(state).digest()[:16]}"',
          'return f"{state.case_id}:send_email:{__import__(\'os\').getpid()}"'),
         ("tools.py", "idempotency_key=state.send_idempotency_key,",
          "idempotency_key=send_key(state),")),
        ("Checklist 5", "Exactly one delivery"),
        "o1001[t6.gateway_accepted]",
    ),
    Mutant(
        "retries-with-fresh-key",
        (("gateway_client.py", "            failpoint(points[0])\n",
          "            failpoint(points[0])\n"
          "            if attempt > 1 and \"Idempotency-Key\" in headers:\n"
          "                headers[\"Idempotency-Key\"] = f\"{idempotency_key}-retry{attempt}\"\n"),),
        ("Checklist 5",),
        "reply-lost-first-attempt[no-kill]",
    ),
    Mutant(
        "keys-never-sent",
        (("gateway_client.py", "        if self.use_idempotency_keys:\n",
          "        if False:\n"),),
        ("Checklist 5", "Exactly one delivery"),
        "o1001[t6.gateway_accepted]",
    ),
    Mutant(
        "step-reset-on-resume",
        (("worker.py", "TERMINAL:\n        state.max_steps = state.step + STEP_BUDGET\n",
          "TERMINAL:\n        state.step = 0\n"
          "        state.max_steps = state.step + STEP_BUDGET\n"),),
        ("Checklist 4",),
        "o1001[t4.parked]",
    ),
    Mutant(
        "redraft-on-resume",
        (("worker.py", "        failpoint(\"t6.checkpoint_loaded\")\n",
          "        failpoint(\"t6.checkpoint_loaded\")\n"
          "        if state.phase == Phase.AWAITING_APPROVAL and state.customer and state.order:\n"
          "            from shopops.tools import draft_email\n"
          "            state.draft = None\n"
          "            draft_email(state, services)\n"),),
        ("Checklist 1",),
        "o1001[t4.parked]",
    ),
    Mutant(
        "email-sent-before-send",
        (("loop.py", "            if not state.email_sent:\n"
                     "                tools.send_email(state, svc, guard=fence_check)\n",
          "            if not state.email_sent:\n"
          "                state.email_sent = True  # recorded before the send happens\n"
          "                save()\n"
          "                tools.send_email(state, svc, guard=fence_check)\n"),),
        ("Checklist 3", "Exactly one delivery"),
        "o1001[t6.request_leaving]",
    ),
    Mutant(
        "checkpoint-only-at-end",
        (("loop.py", "        if store is not None:\n            store.save(",
          "        if store is not None and state.phase == Phase.COMPLETED:\n"
          "            store.save("),),
        ("Exactly one delivery",),
        # not no-kill: with no park checkpoint the next worker re-proposes the same draft and
        # takes the approval already given (worker.py), so an unkilled story still sends once
        "o1001[t6.gateway_accepted]",
    ),
    Mutant(
        "load-ignores-schema-version",
        (("state.py", "        if data[\"schema_version\"] != SCHEMA_VERSION:",
          "        if False:"),
         ("checkpoint_rows.py", "        version = self.schema_version\n        if version != SCHEMA_VERSION:",
          "        version = self.schema_version\n        if False:")),
        ("Exercise 1",),
        "checkpoint-unknown-version[no-kill]",
    ),
    Mutant(
        "missing-fields-defaulted",
        (("state.py", """        missing = sorted(known - set(data))
        if missing:""", """        missing = sorted(known - set(data))
        defaults = cls(case_id=str(data.get("case_id", "")),
                       order_id=str(data.get("order_id", ""))).to_dict()
        data = {**defaults, **data}
        missing = []
        if missing:"""),),
        ("Exercise 1",),
        "checkpoint-corrupt-json[no-kill]",
    ),
    Mutant(
        "any-ticket-accepted",
        (("approvals.py", """        if found is None:
            raise ApprovalRefused(""", """        if found is None:  # whatever the caller says it holds
            return Ticket(ticket_id, "?", case_id, "?", "?", "", 0.0, None, None)
        if found is None:
            raise ApprovalRefused("""),
         ("approvals.py", """    def _check_binding(ticket: Ticket, case_id: str, draft_digest: str,
                       gate: str = DEFAULT_GATE) -> None:
""", """    def _check_binding(ticket: Ticket, case_id: str, draft_digest: str,
                       gate: str = DEFAULT_GATE) -> None:
        return
""")),
        ("No send without a server-issued ticket",),
        "forged-ticket[no-kill]",
    ),
    Mutant(
        "ticket-not-bound-to-case",
        (("approvals.py", """    def _check_binding(ticket: Ticket, case_id: str, draft_digest: str,
                       gate: str = DEFAULT_GATE) -> None:
""", """    def _check_binding(ticket: Ticket, case_id: str, draft_digest: str,
                       gate: str = DEFAULT_GATE) -> None:
        return
"""),),
        ("No send without a server-issued ticket",),
        "ticket-other-case[no-kill]",
    ),
    Mutant(
        # Shown where the story holds a worker on its live lease while another starts: on
        # two-resumers, released together, about one execution in 30 the second resumer
        # took the lease before the first wrote anything, the first was fenced off before
        # it sent, and with one delivery and a worker error the verdict was unknown
        # (measured, stop 36, before and after the fork server's spare child)
        "lease-ignored",
        (("checkpoint.py", "            if old is not None and old.owner != owner and old.expires_at > now:",
          "            if False:"),),
        ("Exercise 4",),
        "lease-live-takeover[no-kill]",
    ),
    Mutant(
        # Two holders at once with no stale write (issue 26): a lease with less than one
        # TTL left counts as free (a renewal "grace" misapplied to takeovers), so a second
        # resumer takes the live lease of a held one; the held one is fenced off later and
        # writes nothing. Only the lease records read around each worker show it.
        "takes-live-lease-within-ttl",
        (("checkpoint.py", "            if old is not None and old.owner != owner and old.expires_at > now:",
          "            if old is not None and old.owner != owner and old.expires_at > now + ttl_s:"),),
        ("Leases",),
        "lease-live-takeover[no-kill]",
    ),
    Mutant(
        "corrupt-checkpoint-is-a-fresh-start",
        (("checkpoint.py", "        return None if row is None else CheckpointRow._from_sql(row, self.path).state()",
          "        try:\n"
          "            return None if row is None else CheckpointRow._from_sql(row, self.path).state()\n"
          "        except Exception:\n"
          "            return None  # \"no checkpoint yet\""),),
        ("Exercise 1",),
        "checkpoint-truncated-json[no-kill]",
    ),
    Mutant(
        "same-owner-keeps-fence",
        (("checkpoint.py", "            if old is not None and old.owner == owner and old.expires_at > now:",
          "            if old is not None and old.owner == owner:"),),
        ("Exercise 4",),
        "lease-same-owner[no-kill]",
    ),
    Mutant(
        "fresh-key-after-timeout",
        (("gateway_client.py", """            except _RETRYABLE as exc:
                last_error = f"{type(exc).__name__}: {exc}"
""", """            except _RETRYABLE as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, requests.ReadTimeout) and "Idempotency-Key" in headers:
                    headers["Idempotency-Key"] = f"{idempotency_key}-after-timeout-{attempt}"
"""),),
        ("Checklist 5",),
        "reply-after-timeout[no-kill]",
    ),
    Mutant(
        # Verdict precedence (issue 9, D): two deliveries in the gateway's own log, then the
        # worker exits 1 with a typed refusal. The refusal must not turn the proven
        # duplicate into ``unknown``.
        "double-send-then-refusal",
        (("tools.py", """    state.email_sent = True
    state.delivery_id = result.delivery_id
""", """    again = f"{state.send_idempotency_key}:confirm"  # a second "confirmation" send
    svc.require_gateway().send(case_id=state.case_id, to=draft.to, subject=draft.subject,
                               body=draft.body, idempotency_key=again)
    svc.approvals.consume(state.approval_ticket, state.case_id, draft.digest(), again)
    state.email_sent = True
    state.delivery_id = result.delivery_id
"""),),
        ("Checklist 5", "Exactly one delivery"),
        "o1001[no-kill]",
    ),
    Mutant(
        # Shown only by a story the tables could not tell (issue 9, A): resumes after the
        # case completed. A worker that "makes sure it went out" sends again.
        "completed-case-sent-again",
        (("worker.py", """    if Phase(state.phase) not in TERMINAL:
        state.max_steps""", """    if state.phase == Phase.COMPLETED and state.draft is not None:  # "make sure"
        services.require_gateway().send(
            case_id=state.case_id, to=state.draft.to, subject=state.draft.subject,
            body=state.draft.body, idempotency_key=f"{state.send_idempotency_key}:again")
    if Phase(state.phase) not in TERMINAL:
        state.max_steps"""),),
        ("Exactly one delivery",),
        "resume-after-completion[no-kill]",
    ),
    Mutant(
        "no-fence-check-before-send",
        (("loop.py", "tools.send_email(state, svc, guard=fence_check)",
          "tools.send_email(state, svc)"),),
        ("History",),
        "lease-takeover[no-kill]",
    ),
    Mutant(
        "fenced-off-ignored",
        (("checkpoint.py", "    def _check_lease(self, lease: Lease, case_id: str, run_id: str | None) -> None:\n",
          "    def _check_lease(self, lease: Lease, case_id: str, run_id: str | None) -> None:\n"
          "        return\n"),),
        ("Leases", "History"),
        "lease-takeover[no-kill]",
    ),
    Mutant(
        "saves-again-when-done",
        (("loop.py", """    if Phase(state.phase) in TERMINAL:
        state.done = True
        return LoopResult(state, Stopped(state.phase), 0)""", """    if Phase(state.phase) in TERMINAL:
        state.done = True
        save()  # "touch" the finished case
        return LoopResult(state, Stopped(state.phase), 0)"""),),
        ("History",),
        "o1001[t7.completed_saved]",
    ),
    Mutant(
        "rejection-ignored",
        (("worker.py", """    elif latest is not None and latest.status == RequestStatus.REJECTED and (""",
          """    elif False and latest is not None and latest.status == RequestStatus.REJECTED and ("""),),
        ("Rejections",),
        "rejection[no-kill]",
    ),
    Mutant(
        "feedback-ignored",
        (("policy.py", """(f"(Revised after review: {feedback[-1]})\\n\\n" if feedback else "")""",
          """("(Revised after review.)\\n\\n" if feedback else "")"""),),
        ("Rejections",),
        "rejection-feedback[no-kill]",
    ),
    Mutant(
        "attempts-not-counted",
        (("worker.py", "            state.recovery_attempts += 1\n",
          "            state.recovery_attempts += 0\n"),),
        ("Recovery attempts",),
        "dead-letter[t6.request_leaving>t6.request_leaving>t6.request_leaving]",
    ),
    Mutant(  # a loop that "polishes" the approved draft on the way out
        "signature-added-at-send",
        (("tools.py", "subject=draft.subject, body=draft.body,",
          "subject=draft.subject, body=draft.body + \"\\n\\nSent by ShopOps\","),),
        ("Per action",),
        "o1001[no-kill]",
    ),
    Mutant(  # the order note (second gated action) gets a new key on every send
        "note-fresh-key-per-send",
        (("tools.py", "idempotency_key=state.note_idempotency_key, before_attempt=guard)",
          "idempotency_key=__import__('uuid').uuid4().hex, before_attempt=guard)"),),
        ("Per action",),
        "order-note-send[t6.note_accepted]",
    ),
    Mutant(  # the note added is not the note approved on its gate
        "note-changed-at-send",
        (("tools.py", "case_id=state.case_id, order_id=state.order_id, body=body,",
          "case_id=state.case_id, order_id=state.order_id, body=body + \" (ShopOps)\","),),
        ("Per action",),
        "order-note-send[no-kill]",
    ),
    Mutant(  # the resumer starts the checkpoint file afresh once the human approved
        "checkpoints-recreated-after-approval",
        (RECREATED_ONCE_APPROVED,),
        ("History",),
        "o1001[no-kill]",
    ),
    Mutant(  # the history is hidden while the human decides, then started afresh
        "checkpoints-hidden-at-approval",
        (("cli.py", "    _preflight(args, approvals, order, env)\n",
          "    for ext in (\"\", \"-wal\", \"-shm\"):  # put the hidden history back\n"
          "        if os.path.exists(args.db + ext + \".hidden\"):\n"
          "            os.rename(args.db + ext + \".hidden\", args.db + ext)\n"
          "    _preflight(args, approvals, order, env)\n"),
         ("cli.py", "    s = result.state\n",
          "    s = result.state\n"
          "    if s.phase == \"awaiting_approval\":  # hide the history from the approval\n"
          "        for ext in (\"\", \"-wal\", \"-shm\"):\n"
          "            if os.path.exists(args.db + ext):\n"
          "                os.rename(args.db + ext, args.db + ext + \".hidden\")\n"),
         RECREATED_ONCE_APPROVED,),
        ("History",),
        "o1001[no-kill]",
    ),
    Mutant(  # an empty decoy history while the human decides; the real rows copied back
        "decoy-history-at-approval",
        (("cli.py", "    _preflight(args, approvals, order, env)\n",
          "    if os.path.exists(args.db + \".hid\"):  # the real rows back, into the decoy\n"
          "        import sqlite3\n"
          "        conn = sqlite3.connect(args.db)\n"
          "        conn.execute(\"ATTACH DATABASE ? AS h\", (args.db + \".hid\",))\n"
          "        conn.execute(\"INSERT INTO checkpoints SELECT * FROM h.checkpoints\")\n"
          "        conn.commit()\n"
          "        conn.execute(\"DETACH DATABASE h\")\n"
          "        conn.close()\n"
          "        os.remove(args.db + \".hid\")\n"
          "    _preflight(args, approvals, order, env)\n"),
         ("cli.py", "    s = result.state\n",
          "    s = result.state\n"
          "    if s.phase == \"awaiting_approval\":  # the approval sees an empty decoy\n"
          "        os.rename(args.db, args.db + \".hid\")\n"
          "        CheckpointStore(args.db, create=True).close()\n"),),
        ("History",),
        "o1001[no-kill]",
    ),
    Mutant(  # a resumed worker sends the email again though a checkpoint acknowledged it
        "email-resent-after-ack",
        (("loop.py", "            if not state.email_sent:\n", "            if True:\n"),),
        ("History",),
        "order-note-send[t6.email_sent_saved]",
    ),
    Mutant(  # the attempt made durable only after the first point past load (issue 26)
        "attempt-saved-after-load",
        (("worker.py", "    else:\n        if state.phase in (Phase.APPROVED, Phase.SENDING)",
          "    else:\n        failpoint(\"t6.checkpoint_loaded\")\n"
          "        if state.phase in (Phase.APPROVED, Phase.SENDING)"),
         ("worker.py", "        # after the attempt is durable: a worker killed here was still "
          "counted (issue 26)\n        failpoint(\"t6.checkpoint_loaded\")\n", "")),
        ("Recovery attempts",),
        "crash-at-load[t6.request_leaving>t6.checkpoint_loaded>t6.checkpoint_loaded]",
    ),
    Mutant(  # the ticket is bound to the send only after the gateway took it (issue 26)
        "ticket-consumed-after-send",
        (("tools.py", "    svc.approvals.consume(\n"
          "        state.approval_ticket, state.case_id, draft.digest(), state.send_idempotency_key\n"
          "    )\n    result = svc.require_gateway().send(\n"
          "        case_id=state.case_id, to=draft.to, subject=draft.subject, body=draft.body,\n"
          "        idempotency_key=state.send_idempotency_key, before_attempt=guard,\n    )\n",
          "    result = svc.require_gateway().send(\n"
          "        case_id=state.case_id, to=draft.to, subject=draft.subject, body=draft.body,\n"
          "        idempotency_key=state.send_idempotency_key, before_attempt=guard,\n    )\n"
          "    svc.approvals.consume(\n"
          "        state.approval_ticket, state.case_id, draft.digest(), state.send_idempotency_key\n"
          "    )\n"),),
        ("No send without",),
        "o1001[no-kill]",
    ),
    Mutant(  # the binding to the case is not checked: only the digest is (issue 26)
        "ticket-case-not-checked",
        (("approvals.py", "        if ticket.case_id != case_id:\n            raise ApprovalRefused(",
          "        if False:\n            raise ApprovalRefused("),),
        ("No send without",),
        "ticket-other-case-same-draft[no-kill]",
    ),
    Mutant(  # a ticket found in a parked checkpoint is taken for the approval (issue 26)
        "parked-checkpoint-ticket-trusted",
        (("worker.py", "    case_id, digest = state.case_id, state.draft.digest()\n    if ticket is None:\n",
          "    case_id, digest = state.case_id, state.draft.digest()\n"
          "    if ticket is None and state.approval_ticket is not None:  # the state says so\n"
          "        state.transition(Phase.APPROVED)\n"
          "        store.save(state, run_id=run_id, lease=lease)\n"
          "        return\n"
          "    if ticket is None:\n"),),
        ("No send without",),
        "forged-ticket-in-parked-state[no-kill]",
    ),
    Mutant(  # a rejected order note drops the note, and the approved email still goes out
        "email-sent-despite-rejected-note",
        (("worker.py", "    if note == RequestStatus.REJECTED:  # the note was refused: nothing of the "
          "case is done\n        state.transition(Phase.REJECTED)\n",
          "    if note == RequestStatus.REJECTED:  # the note was refused: nothing of the "
          "case is done\n"
          "        if ticket is not None:  # but the email was approved: send it first\n"
          "            from shopops import tools\n"
          "            state.approval_ticket = ticket\n"
          "            state.send_idempotency_key = tools.send_key(state)\n"
          "            tools.send_email(state, services)\n"
          "        state.transition(Phase.REJECTED)\n"),),
        ("Per action",),
        "order-note-rejected[no-kill]",
    ),
    Mutant(  # the redraft keeps the first draft's revision (issue 26)
        "redraft-keeps-revision",
        (("worker.py", "    state.draft_revision += 1\n", ""),),
        ("Rejections",),
        "rejection-feedback[no-kill]",
    ),
    Mutant(  # a worker that finds the case parked counts a recovery attempt (issue 26)
        "parked-pickup-counted",
        (("worker.py", "        if not state.done and Phase(state.phase) not in TERMINAL:",
          "        if Phase(state.phase) not in TERMINAL:"),),
        ("Recovery attempts",),
        "o1001[no-kill]",
    ),
    Mutant(  # a helper process forked by the worker outlives it (killed by the harness)
        "helper-left-behind",
        (("cli.py", "    argv = list(sys.argv[1:] if argv is None else argv)\n",
          "    argv = list(sys.argv[1:] if argv is None else argv)\n"
          "    if os.fork() == 0:  # a \"keep-alive helper\" nobody stops\n"
          "        import time\n"
          "        devnull = os.open(os.devnull, os.O_RDWR)\n"
          "        for fd in (0, 1, 2):\n"
          "            os.dup2(devnull, fd)\n"
          "        time.sleep(60)\n"
          "        os._exit(0)\n"),),
        ("No process left behind",),
        "o1001[no-kill]",
    ),
)


#: Mutants only a power cut shows (``[crash] mode = "power"``, ``harness.launch.power``):
#: under SIGKILL alone the page cache keeps every write, so they pass every other scenario
#: and lose no rubric point; ``tests/test_power.py`` runs each on ``shown_by`` and asserts
#: ``fail`` on ``commits_durable``, the check that names the lost checkpoints.
POWER_MUTANTS: tuple[Mutant, ...] = (
    Mutant(  # commits reach the page cache only: SQLite never fsyncs
        "synchronous-off",
        (("checkpoint.py", "PRAGMA synchronous = FULL", "PRAGMA synchronous = OFF"),),
        (),
        "o1001-power[t4.parked]",
    ),
    Mutant(  # WAL with NORMAL: a commit is not synced (only checkpoints of the WAL are)
        "wal-synchronous-normal",
        (("checkpoint.py", "PRAGMA synchronous = FULL", "PRAGMA synchronous = NORMAL"),),
        (),
        "o1001-power[t6.send_key_persisted]",
    ),
)
