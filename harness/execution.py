"""One execution: run the story under a crash schedule in real processes, collect evidence.

The story (DESIGN.md, Chapter 8's timeline for O-1001), driven by the harness:

1. a ``start`` worker runs the case until it parks;
2. while the last worker was killed before the human approved: a ``recheck`` worker resumes
   without approval (it must park again and send nothing);
3. the human approves through the approval queue (t5; the harness plays the human);
4. ``resume`` workers run until one finishes without being killed.

Every failpoint hit reaches the ``KillController`` over the failpoint channel (worker side)
or from the harness's own mock gateway (``t6.gateway_accepted``). When the hit is the next
kill of the schedule, the controller SIGKILLs the worker's process group while the worker
blocks at that exact point.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import shopops
from harness.channel import FailpointChannel, Hit
from harness.checks import CheckResult, run_checks
from harness.evidence import (
    Event,
    EventLog,
    Evidence,
    WorkerRun,
    read_approvals,
    read_checkpoints,
    read_gateway,
)
from harness.launcher import Launcher, SpawnLauncher
from harness.mock_gateway import Delivery, MockGateway
from harness.processes import Worker
from harness.scenario import Scenario
from harness.schedule import CrashSchedule, KillPoint
from harness.verdict import judge
from shopops.approvals import ApprovalQueue
from shopops.errors import ShopOpsError

RUN_ID = "run-1"
APPROVER = "maya"
_CONTINUE = {"do": "continue"}


@dataclass(frozen=True)
class ExecutionPlan:
    """A scenario and one crash schedule; ``id`` is ``name[schedule]``, stable across runs."""

    scenario: Scenario
    schedule: CrashSchedule

    @property
    def id(self) -> str:
        """E.g. ``o1001[t6.gateway_accepted]``."""
        return f"{self.scenario.name}[{self.schedule.id}]"

    @property
    def replay(self) -> str:
        """One shell command that re-runs exactly this execution."""
        if self.scenario.path is None:
            return (f"(scenario {self.scenario.name!r} was built in code: re-run the test that "
                    f"built it; schedule {self.schedule.id})")
        return (f"shopops-chaos run {shlex.quote(str(self.scenario.path))} "
                f"--schedule {shlex.quote(self.schedule.id)}")


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one execution: its ``evidence``, the ``checks``, the ``verdict``
    (``pass``/``fail``/``unknown``), the ``reasons`` behind it and ``elapsed_s`` (seconds)."""

    plan: ExecutionPlan
    evidence: Evidence
    checks: tuple[CheckResult, ...]
    verdict: str
    reasons: tuple[str, ...]
    elapsed_s: float


class KillController:
    """Counts hits and fires the schedule's kills, in order, at the exact hit.

    Hits are counted per label across all workers since the execution started or since the
    previous kill fired (``harness.schedule``).
    """

    def __init__(self, kills: tuple[KillPoint, ...], events: EventLog) -> None:
        self.pending = list(kills)
        self.events = events
        self.counts: dict[str, int] = {}
        self.current: Worker | None = None
        self.by_pid: dict[int, Worker] = {}
        self.fired: list[Event] = []
        self._lock = threading.Lock()

    def attach(self, worker: Worker) -> None:
        """Make ``worker`` the current one (the sender, for gateway-side points)."""
        with self._lock:
            self.current = worker
            self.by_pid[worker.pid] = worker

    def on_hit(self, hit: Hit) -> dict[str, object] | None:
        """Channel callback: record the hit; kill and return ``None``, or continue."""
        with self._lock:
            worker = self.by_pid.get(hit.pid)
            index = worker.index if worker else None
            self.events.add("hit", hit.label, hit.pid, index, f"occurrence {hit.occurrence}")
            if worker is None:  # counted like the trace counts it, but never killed
                self.counts[hit.label] = self.counts.get(hit.label, 0) + 1
                self.events.add("error", hit.label, hit.pid, None, "hit from an unknown pid")
                return dict(_CONTINUE)
            return None if self._maybe_kill(hit.label, worker) else dict(_CONTINUE)

    def on_gateway_accepted(self, delivery: Delivery) -> None:
        """Mock-gateway callback, after a new delivery is committed, before the reply."""
        with self._lock:
            worker = self.current
            pid, index = (worker.pid, worker.index) if worker else (None, None)
            self.events.add("delivery", "t6.gateway_accepted", pid, index,
                            f"{delivery.delivery_id} key {delivery.idempotency_key}",
                            ref=delivery.delivery_id)
            if worker is not None:
                self._maybe_kill("t6.gateway_accepted", worker)

    def _maybe_kill(self, label: str, worker: Worker) -> bool:
        self.counts[label] = self.counts.get(label, 0) + 1
        if not self.pending or self.pending[0].label != label:
            return False
        if self.counts[label] != self.pending[0].occurrence:
            return False
        point = self.pending.pop(0)
        self.counts.clear()
        worker.kill()
        self.fired.append(self.events.add("kill", label, worker.pid, worker.index,
                                          f"SIGKILL at {point}", ref=str(point)))
        return True


class _Story:
    """The mutable bits of one execution while it runs."""

    def __init__(self, plan: ExecutionPlan, workdir: Path, launcher: Launcher,
                 worker_timeout_s: float) -> None:
        self.plan = plan
        self.workdir = workdir
        self.launcher = launcher
        self.timeout = worker_timeout_s
        self.events = EventLog()
        self.controller = KillController(plan.schedule.kills, self.events)
        self.runs: list[WorkerRun] = []
        self.errors: list[str] = []
        self.approval_event: int | None = None
        self.checkpoint_seq_at_approval: int | None = None
        self.ckpt_db = workdir / "checkpoints.db"
        self.appr_db = workdir / "approvals.db"
        self.gw_db = workdir / "gateway.db"

    def env(self, channel: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
        src = str(Path(shopops.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        env["SHOPOPS_FAILPOINT_CHANNEL"] = channel
        return env

    def argv(self, gateway_url: str) -> list[str]:
        s = self.plan.scenario
        return [sys.executable, "-m", "shopops", "run", "--db", str(self.ckpt_db),
                "--approvals", str(self.appr_db), "--gateway", gateway_url,
                "--case", s.case_id, "--order", s.order_id, "--run-id", RUN_ID,
                "--keys", "on" if s.idempotency_keys else "off", "--policy", s.policy]

    def run_worker(self, role: str, argv: list[str], env: dict[str, str]) -> WorkerRun:
        index = len(self.runs)
        phase_before = self.latest_phase()
        out, err = self.workdir / f"worker-{index}.out", self.workdir / f"worker-{index}.err"
        worker = self.launcher.start(argv, env=env, cwd=str(self.workdir), stdout=str(out),
                                     stderr=str(err), index=index)
        self.controller.attach(worker)
        self.events.add("worker_start", None, worker.pid, index, role)
        info = worker.wait(self.timeout)
        self.events.add("worker_exit", None, worker.pid, index,
                        f"returncode {info.returncode}"
                        + (" (deadline passed)" if info.timed_out else ""))
        if info.timed_out:
            self.errors.append(f"worker {index} ({role}) passed its {self.timeout:g} s deadline")
        run = WorkerRun(index, role, worker.pid, info.returncode, info.killed_by_harness,
                        info.timed_out, info.leftovers, _tail(out), _tail(err),
                        round(info.elapsed_s, 4), self.latest_phase(), phase_before)
        self.runs.append(run)
        return run

    def latest_phase(self) -> str | None:
        rows, _ = read_checkpoints(self.ckpt_db, self.plan.scenario.case_id)
        try:
            return rows[-1].state().phase if rows else None
        except ShopOpsError:
            return None

    def approve(self) -> None:
        rows, _ = read_checkpoints(self.ckpt_db, self.plan.scenario.case_id)
        self.checkpoint_seq_at_approval = rows[-1].seq if rows else 0
        try:
            with ApprovalQueue(self.appr_db) as queue:
                ticket = queue.approve(self.plan.scenario.case_id, approver=APPROVER)
            event = self.events.add("approve", "t5.approved", None, None,
                                    f"{ticket.ticket_id} by {APPROVER}", ref=ticket.ticket_id)
        except ShopOpsError as exc:
            event = self.events.add("approve", "t5.approved", None, None, f"refused: {exc}")
            self.errors.append(f"the human could not approve: {exc}")
        self.approval_event = event.seq


def execute(plan: ExecutionPlan, workdir: Path, *, launcher: Launcher | None = None,
            worker_timeout_s: float = 30.0) -> ExecutionResult:
    """Run one execution in ``workdir`` (created; its files are the evidence) and judge it.

    Args:
        plan: the scenario and crash schedule.
        workdir: a fresh folder for the execution's databases and worker output.
        launcher: how workers start (default: a fresh interpreter each).
        worker_timeout_s: seconds each worker may run before the harness kills it (then
            the verdict is ``unknown``).

    Returns:
        ``ExecutionResult``. Never leaves a process running: every worker is reaped before
        this returns or raises.
    """
    started = time.monotonic()
    workdir = workdir.resolve()  # workers run with the workdir as cwd
    workdir.mkdir(parents=True, exist_ok=True)
    story = _Story(plan, workdir, launcher or SpawnLauncher(), worker_timeout_s)
    max_workers = len(plan.schedule.kills) + 4
    gateway = MockGateway(story.gw_db, on_accepted=story.controller.on_gateway_accepted)
    with FailpointChannel(story.controller.on_hit) as channel, gateway:
        argv, env = story.argv(gateway.url), story.env(channel.path)
        run = story.run_worker("start", argv, env)
        while run.killed_by_harness and len(story.runs) < max_workers:
            run = story.run_worker("recheck", argv, env)
        story.approve()
        run = story.run_worker("resume", argv, env)
        while run.killed_by_harness and len(story.runs) < max_workers:
            run = story.run_worker("resume", argv, env)
    evidence = _collect(story)
    checks = run_checks(evidence)
    verdict, reasons = judge(evidence, checks, plan)
    return ExecutionResult(plan, evidence, checks, verdict, reasons,
                           round(time.monotonic() - started, 4))


def _collect(story: _Story) -> Evidence:
    case_id = story.plan.scenario.case_id
    checkpoints, e1 = read_checkpoints(story.ckpt_db, case_id)
    requests, tickets, e2 = read_approvals(story.appr_db, case_id)
    gateway_log, e3 = read_gateway(story.gw_db)
    errors = story.errors + [e for e in (e1, e2, e3) if e]
    return Evidence(
        execution_id=story.plan.id, case_id=case_id, events=story.events.snapshot(),
        workers=tuple(story.runs), checkpoints=checkpoints, approval_requests=requests,
        tickets=tickets, gateway=gateway_log, approval_event=story.approval_event,
        checkpoint_seq_at_approval=story.checkpoint_seq_at_approval,
        unreached=tuple(story.controller.pending), errors=tuple(errors),
        workdir=str(story.workdir), kills=tuple(story.controller.fired),
    )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
