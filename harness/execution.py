"""One execution: a scenario under one crash schedule, in real processes, then judged.

``execute`` wires the parts: the failpoint channel and the harness's own mock gateway both
report hits to the ``KillController`` (``harness.controller``), the ``Story``
(``harness.story``) drives the workers and the human, then the evidence is read back from
the files (``harness.evidence``), checked (``harness.checks``) and judged
(``harness.verdict``).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from harness.channel import FailpointChannel
from harness.checks import CheckResult, run_checks
from harness.controller import KillController
from harness.evidence import EventLog, Evidence, read_approvals, read_checkpoints, read_gateway
from harness.launcher import Launcher, SpawnLauncher
from harness.mock_gateway import Delivery, MockGateway
from harness.processes import HarnessStopping
from harness.scenario import Scenario
from harness.schedule import CrashSchedule, KillPoint
from harness.storage_faults import migrations
from harness.story import Story
from harness.sut import REFERENCE, Sut
from harness.verdict import judge


@dataclass(frozen=True)
class ExecutionPlan:
    """A scenario and one crash schedule, run against an implementation (``sut``, the
    reference by default); ``id`` is ``name[schedule]``, stable across runs."""

    scenario: Scenario
    schedule: CrashSchedule
    sut: Sut = REFERENCE

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
        sut = f" --sut {shlex.quote(str(self.sut.path))}" if self.sut.path else ""
        if self.sut.path and self.sut.module != "shopops":
            sut += f" --module {shlex.quote(self.sut.module)}"
        return (f"shopops-chaos run {shlex.quote(str(self.scenario.path))} "
                f"--schedule {shlex.quote(self.schedule.id)}{sut}")


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
    events = EventLog()
    controller = KillController(plan.schedule.kills, events)
    gateway = MockGateway(workdir / "gateway.db")
    gateway.on_accepted = lambda delivery: controller.on_gateway_accepted(
        delivery, _sender_pid(gateway, delivery))
    gateway.set_faults(plan.scenario.gateway_faults)
    with FailpointChannel(controller.on_hit) as channel, gateway:
        story = Story(plan.scenario, workdir, launcher or SpawnLauncher(), controller, events,
                      sut=plan.sut,
                      gateway_url=gateway.url, channel=channel.path,
                      worker_timeout_s=worker_timeout_s,
                      max_workers=len(plan.schedule.kills) + plan.scenario.resumers + 4)
        try:
            story.run()
        except (HarnessStopping, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # judged unknown with the reason; the run goes on
            story.errors.append(f"harness error during the story: {type(exc).__name__}: "
                                f"{exc}")
    evidence = _collect(plan, story, controller, events)
    checks = run_checks(evidence)
    verdict, reasons = judge(evidence, checks, plan)
    return ExecutionResult(plan, evidence, checks, verdict, reasons,
                           round(time.monotonic() - started, 4))


def _collect(plan: ExecutionPlan, story: Story, controller: KillController,
             events: EventLog) -> Evidence:
    s = plan.scenario
    checkpoints, e1 = read_checkpoints(story.ckpt_db, s.case_id)
    requests, tickets, e2 = read_approvals(story.appr_db, s.case_id)
    gateway_log, e3 = read_gateway(story.gw_db)
    errors = story.errors + [e for e in (e1, e2, e3) if e]
    return Evidence(
        execution_id=plan.id, case_id=s.case_id, events=events.snapshot(),
        workers=tuple(story.runs), checkpoints=checkpoints, approval_requests=requests,
        tickets=tickets, gateway=gateway_log, approval_event=story.approval_event,
        checkpoint_seq_at_approval=story.checkpoint_seq_at_approval,
        unreached=tuple(controller.pending) + _unreached_hooks(s, controller),
        errors=tuple(errors), workdir=str(story.workdir),
        expected_deliveries=s.expect_deliveries, injected=tuple(story.injected),
        v1_rows=story.v1_rows, migrations=migrations(story.ckpt_db),
    )


def _sender_pid(gateway: MockGateway, delivery: Delivery) -> int | None:
    """The worker pid the gateway logged for the request that made ``delivery``."""
    record = next((r for r in gateway.log().requests if r.seq == delivery.request_seq), None)
    return record.worker_pid if record is not None else None


def _unreached_hooks(s: Scenario, controller: KillController) -> tuple[KillPoint, ...]:
    """Scenario points (approve_at, lock_at, takeover_at) no worker ever reached."""
    missed = [p for p in controller.hooks]  # a hook is removed when it fires
    missed += [h.point for h in controller.holds.values() if not h.held.is_set()]
    return tuple(missed)
