"""The story one execution drives, in real processes (DESIGN.md; Chapter 8's timeline).

1. before the approval: a ``start`` worker runs the case until it parks; while the last
   worker was killed before the human decided, a ``recheck`` worker resumes without approval
   (it must park again and send nothing). A v1-checkpoint scenario instead copies the v1
   fixture and runs ``migrate`` workers until the explicit migration commits;
2. a storage fault, if the scenario has one, is injected into the checkpoint database;
3. the human decides through the approval queue (t5): approve (possibly hours later on a
   simulated clock, possibly twice), reject, or hand the worker a bad ticket — or approves
   mid-resume, when a worker reaches ``approve_at``;
4. ``resume`` workers run until one finishes without being killed (several at once, or a
   slow one whose lease another worker takes over, when the scenario says so).

The harness plays the human and the approval queue's operator; it never writes the loop's
state except for an injected fault, which it records.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.controller import HOLD_LIMIT_S, KillController
from harness.evidence import EventLog, WorkerRun, read_checkpoints
from harness.launcher import Launcher
from harness.processes import Worker
from harness.scenario import Scenario
from harness.schedule import KillPoint
from harness.storage_faults import LockHolder, inject_row, install_v1_fixture
from harness.sut import REFERENCE, Sut
from shopops.approvals import ApprovalQueue
from shopops.checkpoint import CheckpointRow, CheckpointStore
from shopops.errors import ShopOpsError
from shopops.runtime import offset_clock

RUN_ID = "run-1"
APPROVER = "maya"
FORGED_TICKET = "apr-forged-1"
OTHER_CASE = ("case-O-1002", "O-1002")


class Story:
    """Runs the story of one execution; its attributes are the evidence it gathered."""

    def __init__(self, scenario: Scenario, workdir: Path, launcher: Launcher,
                 controller: KillController, events: EventLog, *, gateway_url: str,
                 channel: str, worker_timeout_s: float, max_workers: int,
                 sut: Sut = REFERENCE) -> None:
        self.s = scenario
        self.sut = sut
        self.workdir = workdir
        self.launcher = launcher
        self.controller = controller
        self.events = events
        self.gateway_url = gateway_url
        self.channel = channel
        self.timeout = worker_timeout_s
        self.max_workers = max_workers
        self.runs: list[WorkerRun] = []
        self.errors: list[str] = []
        self.approval_event: int | None = None
        self.checkpoint_seq_at_approval: int | None = None
        self.injected: list[CheckpointRow] = []
        self.v1_rows = 0
        self.offered_ticket: str | None = None
        self.clock_offset_s = 0.0
        self.ckpt_db = workdir / "checkpoints.db"
        self.appr_db = workdir / "approvals.db"
        self.gw_db = workdir / "gateway.db"
        self._lock_holder: LockHolder | None = None
        self._started = 0
        self._phase: str | None = None  # the loop's latest checkpointed phase, as last read

    # -- the story ----------------------------------------------------------------------
    def run(self) -> None:
        """Play the whole story (see the module docstring)."""
        s = self.s
        if s.approve_at is not None:
            self.controller.add_hook(s.approve_at, lambda worker: self.approve())
        if s.lock_at is not None:
            self.controller.add_hook(s.lock_at, lambda worker: self._take_lock())
        try:
            if s.storage_fault == "v1_checkpoint":
                self._before_approval_v1()
            else:
                self._before_approval()
            if s.storage_fault in ("corrupt_json", "truncated_json", "invalid_utf8",
                                   "unknown_version"):
                self._inject(s.storage_fault)
            if s.approve_at is None:
                self._human_decides()
            self._resume()
        finally:
            if self._lock_holder is not None:
                self._lock_holder.close()

    def _before_approval(self) -> None:
        run = self.worker("start")
        while self._again(run) and self.approval_event is None:
            run = self.worker("recheck")

    def _before_approval_v1(self) -> None:
        self.v1_rows = install_v1_fixture(self.ckpt_db)
        self._phase = self.latest_phase()
        migrate = self.sut.argv("migrate", str(self.ckpt_db))
        run = self.worker("migrate", migrate)
        while self._again(run):
            run = self.worker("migrate", migrate)
        rows, _ = read_checkpoints(self.ckpt_db, self.s.case_id)
        try:
            draft = rows[-1].state().draft if rows else None
        except ShopOpsError as exc:
            self.errors.append(f"the migrated checkpoint cannot be read: {exc}")
            return
        if draft is not None:  # the queue held the parked case's request all along
            with ApprovalQueue(self.appr_db) as queue:
                queue.request(self.s.case_id, draft.digest())

    def _human_decides(self) -> None:
        s = self.s
        if s.human_action == "reject":
            self._as_queue(lambda q: q.reject(s.case_id, approver=APPROVER), "rejected")
            return
        if s.ticket == "issued":
            self.approve()
            if s.approve_twice:
                self._as_queue(lambda q: q.approve(s.case_id, approver=APPROVER),
                               "second approval")
            return
        self._bad_ticket(s.ticket)

    def _resume(self) -> None:
        s = self.s
        if s.takeover_at is not None:
            self._takeover()
            return
        if s.resumers > 1:
            runs = self._together(s.resumers)
            if not any(r.killed_by_harness for r in runs):
                return
            self.clock_offset_s += s.lease_ttl_s + 1  # the killed holder's lease expires
        run = self.worker("resume")
        while self._again(run):
            run = self.worker("resume")

    def _again(self, run: WorkerRun) -> bool:
        """Another worker follows a killed one, within the budget."""
        if run.killed_by_harness and self.s.leases:
            self.clock_offset_s += self.s.lease_ttl_s + 1  # its lease expires meanwhile
        return run.killed_by_harness and len(self.runs) < self.max_workers

    def _takeover(self) -> None:
        """A slow resumer is held at ``takeover_at``; after its lease expired (simulated
        clock) a second worker takes the case over and finishes; then the slow one goes on
        and must be fenced off."""
        assert self.s.takeover_at is not None
        hold = self.controller.add_hold(self.s.takeover_at)
        slow = self.start_worker("resume")
        if not hold.held.wait(self.timeout):
            self.errors.append(f"no worker reached {self.s.takeover_at} to be held")
            hold.release.set()
            self.finish_worker(slow)
            return
        offset = self.clock_offset_s
        self.clock_offset_s += self.s.lease_ttl_s + 1
        run = self.worker("takeover")
        self.clock_offset_s = offset
        hold.release.set()
        self.finish_worker(slow)
        if run.killed_by_harness:  # the takeover worker died: the case goes on without it
            self.clock_offset_s += 2 * (self.s.lease_ttl_s + 1)
            run = self.worker("resume")
            while self._again(run):
                run = self.worker("resume")

    # -- the human and the queue --------------------------------------------------------
    def approve(self) -> None:
        """The human approves the case's pending send: the queue issues the ticket (t5)."""
        rows, _ = read_checkpoints(self.ckpt_db, self.s.case_id)
        self.checkpoint_seq_at_approval = rows[-1].seq if rows else 0
        hours = self.s.approve_delay_h
        try:
            with ApprovalQueue(self.appr_db, clock=offset_clock(hours * 3600)) as queue:
                ticket = queue.approve(self.s.case_id, approver=APPROVER)
            event = self.events.add("approve", "t5.approved", None, None,
                                    f"{ticket.ticket_id} by {APPROVER}"
                                    + (f", {hours:g} h after the park" if hours else ""),
                                    ref=ticket.ticket_id)
        except ShopOpsError as exc:
            event = self.events.add("approve", "t5.approved", None, None, f"refused: {exc}")
            self.errors.append(f"the human could not approve: {exc}")
        self.clock_offset_s += hours * 3600
        self.approval_event = event.seq

    def _as_queue(self, act: Callable[[ApprovalQueue], object], what: str) -> None:
        try:
            with ApprovalQueue(self.appr_db) as queue:
                result = act(queue)
            self.events.add("human", None, None, None, f"{what}: {result}")
        except ShopOpsError as exc:
            self.events.add("human", None, None, None, f"{what} refused: {exc}")

    def _bad_ticket(self, kind: str) -> None:
        """Hand the resuming worker a ticket the queue must refuse."""
        case = self.s.case_id
        with ApprovalQueue(self.appr_db) as queue:
            if kind == "forged":
                ticket = FORGED_TICKET
            elif kind == "forged_in_state":
                self._forge_into_state()
                ticket = None
            elif kind == "other_case":
                queue.request(OTHER_CASE[0], "0" * 64)
                ticket = queue.approve(OTHER_CASE[0], approver=APPROVER).ticket_id
            elif kind == "stale_draft":
                queue.request(case, "f" * 64)  # an older draft's digest
                ticket = queue.approve(case, approver=APPROVER).ticket_id
            else:  # consumed: approved, then used by another send
                approved = queue.approve(case, approver=APPROVER)
                queue.consume(approved.ticket_id, case, approved.draft_digest,
                              f"{case}:send_email:another-send")
                ticket = approved.ticket_id
        self.offered_ticket = ticket
        self.events.add("human", None, None, None, f"{kind} ticket offered: {ticket}",
                        ref=ticket)

    def _forge_into_state(self) -> None:
        """The model writes an approval ticket into the state (Chapter 8, "Forged approval
        on resume"): the harness appends that state as a checkpoint. Raises the store's
        error if the loop left no readable parked checkpoint to forge from."""
        with CheckpointStore(self.ckpt_db) as store:
            state = store.load(self.s.case_id, RUN_ID)
            state.approval_ticket = FORGED_TICKET
            state.transition("approved")
            state.done = False
            seq = store.save(state, run_id=RUN_ID)
            self.injected += [r for r in store.history(self.s.case_id, RUN_ID) if r.seq == seq]
        self.events.add("inject", None, None, None, f"forged ticket written at seq {seq}",
                        ref=str(seq))

    def _inject(self, kind: str) -> None:
        row = inject_row(self.ckpt_db, self.s.case_id, RUN_ID, kind)
        if row is None:
            self.errors.append(f"storage fault {kind}: no checkpoint to corrupt")
            return
        self.injected.append(row)
        self.events.add("inject", None, None, None, f"{kind} row at seq {row.seq}",
                        ref=str(row.seq))

    def _take_lock(self) -> None:
        self._lock_holder = LockHolder(self.ckpt_db, self.s.lock_ms)
        self._lock_holder.take()
        self.events.add("lock", None, None, None,
                        f"exclusive lock on checkpoints.db for {self.s.lock_ms} ms")

    # -- workers -------------------------------------------------------------------------
    def argv(self, index: int) -> list[str]:
        s = self.s
        argv = self.sut.argv(
            "run", "--db", str(self.ckpt_db), "--approvals", str(self.appr_db),
            "--gateway", self.gateway_url, "--case", s.case_id, "--order", s.order_id,
            "--run-id", RUN_ID, "--keys", "on" if s.idempotency_keys else "off",
            "--policy", s.policy)
        if s.read_timeout_s is not None:
            argv += ["--read-timeout", f"{s.read_timeout_s:g}"]
        if s.leases:
            owner = "worker-0" if s.same_owner else f"worker-{index}"  # a restart reuses it
            argv += ["--owner", owner, "--lease-ttl", f"{s.lease_ttl_s:g}"]
        if self.offered_ticket is not None:
            argv += ["--ticket", self.offered_ticket]
        return argv

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
        env["PYTHONPATH"] = self.sut.pythonpath(env.get("PYTHONPATH"))
        env["SHOPOPS_FAILPOINT_CHANNEL"] = self.channel
        if self.clock_offset_s:
            env["SHOPOPS_CLOCK_OFFSET_S"] = f"{self.clock_offset_s:.3f}"
        return env

    def worker(self, role: str, argv: list[str] | None = None) -> WorkerRun:
        """Start one worker and wait for it."""
        return self.finish_worker(self.start_worker(role, argv))

    def _together(self, n: int) -> list[WorkerRun]:
        """Start ``n`` resumers at once. The first to load the checkpoint (it holds the
        lease) is held there until every other one has stopped, so they truly overlap."""
        label = "t6.checkpoint_loaded"
        hold = self.controller.add_hold(KillPoint(label, self.controller.totals.get(label, 0)
                                                  + 1))
        started = [self.start_worker("resume") for _ in range(n)]
        if not hold.held.wait(self.timeout):
            self.errors.append(f"no concurrent resumer reached {label}")
        others = [st for st in started if st.worker is not hold.worker]
        runs = [self.finish_worker(st) for st in others]
        hold.release.set()
        runs += [self.finish_worker(st) for st in started if st.worker is hold.worker]
        return runs

    def start_worker(self, role: str, argv: list[str] | None = None) -> _Started:
        """Start one worker (index = launch order) without waiting for it."""
        # Only workers change the phase and it is read as each one ends; while another
        # worker still runs (a held or concurrent one), read it afresh.
        phase_before = self._phase if self._started == len(self.runs) else self.latest_phase()
        index = self._started
        self._started += 1
        out, err = self.workdir / f"worker-{index}.out", self.workdir / f"worker-{index}.err"
        worker = self.launcher.start(argv or self.argv(index), env=self.env(),
                                     cwd=str(self.workdir), stdout=str(out), stderr=str(err),
                                     index=index)
        self.controller.attach(worker)
        self.events.add("worker_start", None, worker.pid, index, role)
        release = getattr(worker, "release", None)
        if release is not None:  # a fork-server child held at its start gate until attached
            release()
        return _Started(worker, role, phase_before, index)

    def finish_worker(self, started: _Started) -> WorkerRun:
        """Wait for (reap) a started worker and record its run."""
        worker, role, phase_before, index = (started.worker, started.role,
                                             started.phase_before, started.index)
        info = worker.wait(self.timeout + (HOLD_LIMIT_S if self.s.takeover_at else 0))
        self.events.add("worker_exit", None, worker.pid, index,
                        f"returncode {info.returncode}"
                        + (" (deadline passed)" if info.timed_out else ""))
        if info.timed_out:
            self.errors.append(f"worker {index} ({role}) passed its {self.timeout:g} s deadline")
        out, err = self.workdir / f"worker-{index}.out", self.workdir / f"worker-{index}.err"
        run = WorkerRun(index, role, worker.pid, info.returncode, info.killed_by_harness,
                        info.timed_out, info.leftovers, _tail(out), _tail(err),
                        round(info.elapsed_s, 4), self._read_phase(), phase_before)
        self.runs.append(run)
        self.runs.sort(key=lambda r: r.index)
        return run

    def _read_phase(self) -> str | None:
        self._phase = self.latest_phase()
        return self._phase

    def latest_phase(self) -> str | None:
        """The phase of the latest checkpoint the loop wrote, read by the harness."""
        injected = {r.seq for r in self.injected}
        rows, _ = read_checkpoints(self.ckpt_db, self.s.case_id)
        rows = tuple(r for r in rows if r.seq not in injected)
        try:
            return rows[-1].state().phase if rows else None
        except ShopOpsError:
            return None


@dataclass(frozen=True)
class _Started:
    worker: Worker
    role: str
    phase_before: str | None
    index: int


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
