"""The story engine: interprets a scenario's story, step by step, in real processes
(``docs/design.md``, "The story engine"; Chapter 8's timeline).

A story is an ordered list of steps (``harness.model.story``): start workers of a role, a
human decision on a named gate, hold or slow a worker at a labelled point, release it,
advance the simulated clock, inject a storage fault. A scenario writes them as
``[[story]]`` tables, or its tables expand into them (``harness.plan.story_plan``). Kill
schedules apply across the whole story: the kill controller counts every worker's hits.

``drive`` plays the story and returns a frozen ``StoryRecord``. The harness plays the
human and the approval queue's operator; it never writes the loop's state except for an
injected fault, which it records."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from harness.judge.evidence import EventLog, history_at, latest_checkpoint, read_checkpoints
from harness.judge.observers import store, target
from harness.launch.launcher import Launcher
from harness.launch.processes import HarnessStopping
from harness.model import (
    DEFAULT_GATE,
    PAST_LEASE,
    ClockStep,
    EventKind,
    ExecutionPlan,
    History,
    HistoryMark,
    HistorySource,
    HoldStep,
    HumanAction,
    HumanStep,
    KillPoint,
    ReleaseStep,
    Step,
    StorageStep,
    StoryRecord,
    TicketKind,
    Wait,
    When,
    WorkerRole,
    WorkerRun,
    WorkersStep,
)
from harness.plan.story_plan import story_of
from harness.services.approvals import ApprovalService
from harness.story import crash_state, queue_acts
from harness.story.controller import HOLD_LIMIT_S, Hold, KillController
from harness.story.storage_steps import FORGED_TICKET, StorageSteps
from harness.story.workers import Started, Workers
from harness.targets.drive import TargetSeal
from shopops.approvals import ApprovalQueue
from shopops.errors import ShopOpsError
from shopops.runtime import offset_clock
from shopops_contract import labels

__all__ = ["APPROVER", "drive"]

APPROVER = "maya"
OTHER_CASE = ("case-O-1002", "O-1002")


def drive(plan: ExecutionPlan, workdir: Path, launcher: Launcher, controller: KillController,
          events: EventLog, *, gateway_url: str, channel: str, worker_timeout_s: float,
          data_dir: Path | None = None, approvals: ApprovalService | None = None,
          email_env: Mapping[str, str] | None = None, seal: TargetSeal | None = None,
          pending_faults: Callable[[], tuple[object, ...]] | None = None,
          fingerprint: bool = False,
          held_databases: Mapping[str, Callable[[float], str]] | None = None) -> StoryRecord:
    """Play the story of ``plan`` in ``workdir`` and return what happened. ``data_dir``
    (default ``workdir``): the workers' cwd and databases, a sealed execution's sandbox;
    ``seal``: how that execution runs a target (``TargetSeal``). ``approvals``: the harness's
    approval service (its workers get its address; the human acts on its records through
    ``ApprovalService.queue``); ``None``: the workers and the human open
    ``workdir/approvals.db``. ``email_env``: what points an app's email client at the gateway.
    ``pending_faults``: the gateway faults not yet spent. ``fingerprint``: take the
    fingerprint of the state the first kill leaves (``StoryRecord.crash_state``; only where
    equivalence may use it: it costs a read of every file). ``held_databases``: by name,
    the digest at a simulated now (epoch seconds) of each database the harness holds in
    memory (the gateway's ledger), counted in that fingerprint.

    A harness error while the story runs cuts it short: it is recorded in
    ``StoryRecord.errors`` (the verdict can then only be ``fail`` or ``unknown``). So is a
    ``ShopOpsError`` raised while the harness acts on what the workers left (no checkpoint
    to forge a ticket into, a refused human act), as "the story could not go on": the
    implementation's doing, not the harness's (``harness.grading.retry`` runs again only the
    latter). Every worker is reaped before this returns.

    Raises:
        HarnessStopping, KeyboardInterrupt, SystemExit: the run is being stopped.
    """
    engine = _Engine(plan, workdir, launcher, controller, events, gateway_url=gateway_url,
                     channel=channel, worker_timeout_s=worker_timeout_s, data_dir=data_dir,
                     approvals=approvals, email_env=email_env, seal=seal)
    engine.pending_faults = pending_faults or tuple
    engine.fingerprint = fingerprint
    engine.held_databases = dict(held_databases or {})
    try:
        engine.play()
        engine.read_target()
    except (HarnessStopping, KeyboardInterrupt, SystemExit):
        raise
    except ShopOpsError as exc:  # what the implementation left could not be acted on
        engine.w.errors.append(f"the story could not go on: {type(exc).__name__}: {exc}")
    except Exception as exc:  # judged with the reason; the run goes on
        engine.w.errors.append(f"harness error during the story: {type(exc).__name__}: "
                               f"{exc}")
    finally:
        engine.close()
    return engine.record()


#: Seconds between checks, while the story waits for a hold, that its workers still live.
_HOLD_POLL_S = 0.05


class _CutShort(Exception):
    """A step could not happen (its reason is in the errors): the story stops there."""


class _Engine:
    def __init__(self, plan: ExecutionPlan, workdir: Path, launcher: Launcher,
                 controller: KillController, events: EventLog, *, gateway_url: str,
                 channel: str, worker_timeout_s: float, data_dir: Path | None = None,
                 approvals: ApprovalService | None = None,
                 email_env: Mapping[str, str] | None = None,
                 seal: TargetSeal | None = None) -> None:
        self.s = s = plan.scenario
        self.steps = story_of(s)
        self.controller = controller
        self.events = events
        workers = [st for st in self.steps if isinstance(st, WorkersStep)]
        holds = [st for st in self.steps if isinstance(st, HoldStep)]
        extra = max([HOLD_LIMIT_S if not h.ms else h.ms / 1000 for h in holds], default=0.0)
        self.w = Workers(s, plan.sut, workdir, launcher, controller, events,
                         gateway_url=gateway_url, channel=channel,
                         timeout_s=worker_timeout_s, extra_wait_s=extra, data_dir=data_dir,
                         approvals=approvals.address if approvals is not None else None,
                         email_env=email_env, seal=seal)
        self.service = approvals
        self.storage = StorageSteps(self.w, controller, events, s.case_id)
        # the budget of workers: one per kill, the largest group, and a margin
        self.max_workers = (len(plan.schedule.kills) + max((st.count for st in workers),
                                                           default=1) + 4)
        self.approval_event: int | None = None
        self.checkpoint_seq_at_approval: int | None = None
        self.history_at_approval: HistoryMark | None = None
        self._migrated_asked = False  # the migrated case's request is in the queue
        self.unrecovered = False  # the latest workers step left a harness kill behind
        self.holds: dict[KillPoint, Hold] = {}
        self.background: list[Started] = []
        self.target_history: History | None = None
        self.target_error: str | None = None
        self.pending_faults: Callable[[], tuple[object, ...]] = tuple
        self.fingerprint = False  # take crash_state at the first kill
        #: the digest, at a simulated now, of each database the harness holds in memory
        self.held_databases: dict[str, Callable[[float], str]] = {}
        self.step_index = 0  # the step being played
        self.crash_state: str | None = None  # the fingerprint after the first kill
        self._crashed = False  # a worker was killed by the harness (the first kill is past)

    def play(self) -> None:
        handlers: dict[type, Callable[[Step], None]] = {
            WorkersStep: self._workers, HumanStep: self._human, HoldStep: self._hold,
            ReleaseStep: self._release, ClockStep: self._clock, StorageStep: self._storage}
        try:
            for i, step in enumerate(self.steps):
                self.step_index = i
                if step.when is When.KILLED and not self.unrecovered:
                    continue
                handlers[type(step)](step)
                self._crashed = self._crashed or any(r.killed_by_harness for r in self.w.runs)
        except _CutShort:
            pass  # recorded in the errors; the steps after it cannot happen as written
        finally:
            for hold in self.holds.values():
                hold.release.set()
            migrators = any(st.role is WorkerRole.MIGRATE for st in self.background)
            while self.background:
                self.w.finish(self.background.pop(0))
            if migrators:  # a held migrator committed only now: the queue as it was
                self._request_migrated()
            self._crashed = True  # no fingerprint after this

    def _after_run(self, run: WorkerRun, step: WorkersStep, nth: int) -> None:
        """After a worker of a sequential step: if it is the execution's first kill, take the
        fingerprint of the state it left (``harness.story.crash_state``), unless another
        worker is alive or held, or the story already recorded an error: then none."""
        if self._crashed or not run.killed_by_harness:
            return
        self._crashed = True
        if self.fingerprint:
            self.crash_state = crash_state.after_first_kill(self, run, step, nth)

    def read_target(self) -> None:
        """A target's durable state through its own API, after every worker was reaped
        (outside the kill controller: ``TargetDriver.history``; the read after the last
        worker when none came since, ``Workers.final_history``)."""
        if self.w.target is None:
            return
        items, self.target_error = self.w.final_history()
        self.target_history = (History(HistorySource.TARGET_HISTORY, observes=frozenset(),
                                       cannot="the target has no history function")
                               if items is None else target.history_of(items))

    def close(self) -> None:
        self.storage.close()

    def record(self) -> StoryRecord:
        w = self.w
        return StoryRecord(self.steps, tuple(w.runs), tuple(w.errors), self.approval_event,
                           self.checkpoint_seq_at_approval, tuple(w.injected), self.storage.v1_rows,
                           w.ckpt_db, w.appr_db, w.gw_db, w.workdir, self.target_history,
                           self.target_error, self.history_at_approval, tuple(w.power_cuts),
                           self.crash_state, tuple(w.history_reads))

    def _workers(self, step: Step) -> None:
        assert isinstance(step, WorkersStep)
        if step.together and step.role is WorkerRole.MIGRATE:
            runs = self._migrators_together(step)
            self.unrecovered = any(r.killed_by_harness for r in runs)
        elif step.together:
            runs = self._together(step)
            self.unrecovered = any(r.killed_by_harness for r in runs)
        elif step.wait is Wait.HELD:
            self._until_held(step)
        else:
            self.unrecovered = False
            for nth in range(step.count):
                if not self._may_start(step.role):
                    break
                run = self.w.run(step.role, step.owner, self._from_seq(step))
                self._after_run(run, step, nth)
                while self._again(run) and step.recover and self._may_start(step.recover):
                    run = self.w.run(step.recover, step.owner)
                    self._after_run(run, step, nth)
                self.unrecovered = self.unrecovered or run.killed_by_harness
        self._reap_released()
        if step.role is WorkerRole.MIGRATE and not self._migration_pending():
            self._request_migrated()

    def _reap_released(self) -> None:
        """Reap the held workers a ``release`` with ``on`` let go during this step: they
        went on meanwhile (a held migrator commits while the next one waits for its lock)."""
        going = {id(h.worker) for h in self.holds.values()
                 if h.release.is_set() and h.worker is not None}
        for started in [st for st in self.background if id(st.worker) in going]:
            self.background.remove(started)
            self.w.finish(started)

    def _migration_pending(self) -> bool:
        """A migrator is still held: the case's request is made once one has committed."""
        return any(st.role is WorkerRole.MIGRATE for st in self.background)

    def _migrators_together(self, step: WorkersStep) -> list[WorkerRun]:
        """Start ``count`` migrators at once. The first inside its migration (it holds the
        database's write lock, ``ckpt.migration_before_commit``) is held there until every
        other one has reached ``ckpt.migration_started`` — about to wait for that lock — or
        exited, then released while they wait: they truly overlap, and none waits past its
        busy timeout for a migrator the harness holds."""
        inside, waiting = labels.MIGRATION_BEFORE_COMMIT, labels.MIGRATION_STARTED
        # not required: a kill scheduled at that very hit comes first (the others then
        # migrate unheld); a migrator that never got there at all is the story's error
        hold = self.controller.add_hold(KillPoint(inside, self.controller.totals.seen(inside)
                                                  + 1), required=False)
        arrived = self.controller.totals.seen(waiting) + step.count
        started = [self.w.start(step.role, step.owner) for _ in range(step.count)]
        held = self._held_or_gone(hold, started)
        others = [st for st in started if st.worker is not hold.worker]
        deadline = time.monotonic() + self.w.timeout
        while (held and self.controller.totals.seen(waiting) < arrived
               and not all(st.worker.exited() for st in others)
               and time.monotonic() < deadline):
            time.sleep(_HOLD_POLL_S)
        hold.release.set()
        runs = [self.w.finish(st) for st in started]
        if not held and not any(r.killed_by_harness for r in runs):
            self.w.errors.append(f"no concurrent migrator reached {inside}")
        return runs

    def _from_seq(self, step: WorkersStep) -> int | None:
        """The checkpoint a worker of ``step`` resumes from (``--from-seq``): the step's
        ``from_seq``, or the ``seq`` of the loop's newest checkpoint in ``from_phase`` now
        (the harness's injected rows left out; a target's history is its own: the step's
        ``from_seq`` only). Raises ``_CutShort`` when no checkpoint is in that phase."""
        if step.from_phase is None:
            return step.from_seq
        if self.w.target is not None:
            self.w.errors.append("from_phase: a target's history is read only once the story "
                                 "ends; choose its checkpoint with from_seq")
            raise _CutShort
        injected = {r.seq for r in self.w.injected}
        rows = read_checkpoints(self.w.ckpt_db, self.s.case_id)[0]
        seqs = [r.seq for r in rows if r.seq not in injected
                and store.write_of(r).phase == step.from_phase]
        if not seqs:
            self.w.errors.append(f"no checkpoint of the case in phase {step.from_phase} to "
                                 "resume from")
            raise _CutShort
        return seqs[-1]

    def _may_start(self, role: WorkerRole) -> bool:
        """A recheck is a resume before any approval: never once the human approved."""
        return role is not WorkerRole.RECHECK or self.approval_event is None

    def _again(self, run: WorkerRun) -> bool:
        """Another worker follows a killed one, within the budget."""
        if run.killed_by_harness and self.s.leases:
            self.w.clock_offset_s += self.s.lease_ttl_s + 1  # its lease expires meanwhile
        return run.killed_by_harness and len(self.w.runs) < self.max_workers

    def _together(self, step: WorkersStep) -> list[WorkerRun]:
        """Start ``count`` workers at once. The first to load the checkpoint (it holds the
        lease) is held there until every other one has stopped, so they truly overlap."""
        label = labels.CHECKPOINT_LOADED
        hold = self.controller.add_hold(KillPoint(label, self.controller.totals.seen(label)
                                                  + 1))
        started = [self.w.start(step.role, step.owner) for _ in range(step.count)]
        if not self._held_or_gone(hold, started):
            self.w.errors.append(f"no concurrent worker reached {label}")
        others = [st for st in started if st.worker is not hold.worker]
        runs = [self.w.finish(st) for st in others]
        hold.release.set()
        runs += [self.w.finish(st) for st in started if st.worker is hold.worker]
        return runs

    def _held_or_gone(self, hold: Hold, started: list[Started]) -> bool:
        """Wait until ``hold`` holds a worker (``True``), or until every worker of
        ``started`` has exited — none can reach the point any more — or the worker deadline
        passed (``False``). Checked every ``_HOLD_POLL_S``: a worker that exits at once (an
        implementation that does nothing) does not cost the story the whole deadline."""
        deadline = time.monotonic() + self.w.timeout
        while not hold.held.wait(_HOLD_POLL_S):
            if time.monotonic() >= deadline or all(st.worker.exited() for st in started):
                return hold.held.is_set()
        return True

    def _until_held(self, step: WorkersStep) -> None:
        """Start one worker in the background and wait until a pending hold holds it."""
        hold = next(h for h in reversed(self.holds.values()) if not h.release.is_set())
        started = self.w.start(step.role, step.owner, self._from_seq(step))
        self.unrecovered = False
        if not self._held_or_gone(hold, [started]):
            self.w.errors.append(f"no worker reached {hold.point} to be held")
            hold.release.set()
            self.w.finish(started)
            raise _CutShort
        self.background.append(started)

    def _hold(self, step: Step) -> None:
        assert isinstance(step, HoldStep)
        limit = step.ms / 1000 if step.ms else HOLD_LIMIT_S
        self.holds[step.at] = self.controller.add_hold(step.at, limit_s=limit,
                                                       required=not step.ms)

    def _release(self, step: Step) -> None:
        assert isinstance(step, ReleaseStep)
        if step.on is not None:  # in the middle of a later step, when a worker gets there
            release = self.holds[step.at].release
            self.controller.add_hook(step.on, lambda worker: release.set())
            return
        self.holds[step.at].release.set()
        migrators = any(st.role is WorkerRole.MIGRATE for st in self.background)
        while self.background:
            self.w.finish(self.background.pop(0))
        if migrators:  # a held migrator committed only now
            self._request_migrated()

    def _clock(self, step: Step) -> None:
        assert isinstance(step, ClockStep)
        by = self.s.lease_ttl_s + 1 if step.advance_s == PAST_LEASE else float(step.advance_s)
        self.w.clock_offset_s += by
        self.events.add(EventKind.CLOCK, None, None, None, f"clock +{by:g} s")

    def _human(self, step: Step) -> None:
        assert isinstance(step, HumanStep)
        if step.at is not None:  # mid-story: when a worker gets there
            self.controller.add_hook(step.at, lambda worker: self._decide(step))
        else:
            self._decide(step)

    def _decide(self, step: HumanStep) -> None:
        case = self.s.case_id
        if step.action is HumanAction.REJECT:
            extra = {"feedback": step.feedback} if step.feedback is not None else {}
            if step.gate != DEFAULT_GATE:
                extra["gate"] = step.gate
            self._as_queue(lambda q: q.reject(case, approver=APPROVER, **extra),
                           f"{step.gate} rejected" if extra else "rejected")
        elif step.ticket is TicketKind.ISSUED:
            self._approve(step.delay_hours, step.gate)
            if step.twice:
                self._as_queue(lambda q: q.approve(case, approver=APPROVER, gate=step.gate),
                               "second approval")
        else:
            self._bad_ticket(step.ticket, step.gate)

    def _approve(self, hours: float, gate: str = DEFAULT_GATE) -> None:
        """The human approves the case's pending request on ``gate``: the queue issues the
        ticket (t5). The first approval of the story is the one the checks date from: the
        harness reads the history then (injected rows too), its highest ``seq`` and what
        identifies it (``HistoryMark``: the file and the rows), so that the checks can tell
        a later row from one replaced or rewritten under the same ``seq``."""
        first = self.approval_event is None
        # a target keeps its own storage: no checkpoint file of ours to mark
        mark, rows = (history_at(self.w.ckpt_db, self.s.case_id, self.events.snapshot())
                      if first and self.w.target is None else (None, ()))
        seq_now = 0
        if mark is not None and mark.unreadable is None:
            seq_now = mark.seq
        elif first:  # unreadable, or a target's: the newest row, if any can be read
            latest = latest_checkpoint(self.w.ckpt_db, self.s.case_id)
            seq_now = latest.seq if latest is not None else 0
        try:
            with self._queue(offset_clock(hours * 3600)) as queue:
                ticket = queue.approve(self.s.case_id, approver=APPROVER, gate=gate)
            event = self.events.add(EventKind.APPROVE, labels.APPROVED, None, None,
                                    f"{ticket.ticket_id} by {APPROVER}"
                                    + (f" on gate {gate}" if gate != DEFAULT_GATE else "")
                                    + (f", {hours:g} h after the park" if hours else ""),
                                    ref=ticket.ticket_id)
            if self.w.target is not None and gate == DEFAULT_GATE:  # for its later workers
                self.w.target.ticket = ticket.ticket_id
            if mark is not None and gate == DEFAULT_GATE:
                mark = queue_acts.draft_not_durable(mark, rows, ticket.draft_digest)
        except ShopOpsError as exc:
            event = self.events.add(EventKind.APPROVE, labels.APPROVED, None, None,
                                    f"refused: {exc}")
            self.w.errors.append(f"the human could not approve: {exc}")
        self.w.clock_offset_s += hours * 3600
        if gate == DEFAULT_GATE:  # the approval withdraws a bad ticket offered on its gate
            self.w.offered_ticket = None
        else:
            self.w.offered_note_ticket = None
        if first:
            self.approval_event = event.seq
            self.checkpoint_seq_at_approval = seq_now
            self.history_at_approval = mark

    def _queue(self, clock: Callable[[], float] = time.time
               ) -> AbstractContextManager[ApprovalQueue]:
        return queue_acts.human_queue(self.service, self.w.appr_db, clock)

    def _as_queue(self, act: Callable[[ApprovalQueue], object], what: str) -> None:
        try:
            with self._queue() as queue:
                result = act(queue)
            self.events.add(EventKind.HUMAN, None, None, None, f"{what}: {result}")
        except ShopOpsError as exc:
            self.events.add(EventKind.HUMAN, None, None, None, f"{what} refused: {exc}")
        except TypeError as exc:  # the queue does not know a field the story gave it
            self.w.errors.append(f"the human could not act ({what}): {exc}")

    def _bad_ticket(self, kind: TicketKind, gate: str = DEFAULT_GATE) -> None:
        """Hand the next workers a ticket the queue must refuse, on ``gate`` (the email's,
        ``--ticket``, or the order note's, ``--note-ticket``)."""
        case = self.s.case_id
        with self._queue() as queue:
            if kind is TicketKind.FORGED:
                ticket: str | None = FORGED_TICKET
            elif kind in (TicketKind.FORGED_IN_STATE, TicketKind.FORGED_IN_PARKED_STATE):
                self.storage.forge_ticket(advance=kind is TicketKind.FORGED_IN_STATE)  # email's
                ticket = None
            elif kind in (TicketKind.OTHER_CASE, TicketKind.OTHER_CASE_SAME_DRAFT):
                ticket = queue_acts.other_case_ticket(queue, case, OTHER_CASE[0], gate, APPROVER,
                                           same_draft=kind is TicketKind.OTHER_CASE_SAME_DRAFT)
            elif kind is TicketKind.STALE_DRAFT:
                queue.request(case, "f" * 64, gate=gate)  # an older draft's digest
                ticket = queue.approve(case, approver=APPROVER, gate=gate).ticket_id
            else:  # consumed: approved, then used by another send
                approved = queue.approve(case, approver=APPROVER, gate=gate)
                queue.consume(approved.ticket_id, case, approved.draft_digest,
                              f"{case}:{gate}:another-send", gate=gate)
                ticket = approved.ticket_id
        if gate == DEFAULT_GATE:
            self.w.offered_ticket = ticket
        else:
            self.w.offered_note_ticket = ticket
        self.events.add(EventKind.HUMAN, None, None, None,
                        f"{kind} ticket offered: {ticket}"
                        + (f" on gate {gate}" if gate != DEFAULT_GATE else ""), ref=ticket)

    def _storage(self, step: Step) -> None:
        assert isinstance(step, StorageStep)
        self.storage.play(step)

    def _request_migrated(self) -> None:
        """After a migration the queue holds the parked case's request once; an unreadable
        migrated checkpoint is an error of the story (``queue_acts.request_migrated``)."""
        if self._migrated_asked:  # once: a second migrator migrates nothing
            return
        self._migrated_asked, error = queue_acts.request_migrated(self.w.ckpt_db, self._queue,
                                                       self.s.case_id)
        if error is not None:
            self.w.errors.append(error)
