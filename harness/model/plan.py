"""What to run: gateway faults, the scenario, the implementation under test and one
execution's plan — plain frozen data (kill points: ``harness.model.points``; story steps:
``harness.model.story``).

Parsing of scenario files lives in ``harness.plan.scenario``; these types only hold what was
validated.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from harness.model.kinds import (
    CheckId,
    CrashMode,
    FaultKind,
    GatewayDialect,
    HumanAction,
    StorageFault,
    TicketKind,
)
from harness.model.points import NO_KILL, CrashSchedule, KillPoint
from harness.model.story import Step
from harness.model.target import PythonTarget
from shopops_contract.limits import MAX_DIRNAME

__all__ = ["FAULT_KINDS", "MAX_FAULT_MS", "NO_KILL", "REFERENCE", "SRC", "CrashSchedule",
           "ExecutionPlan", "FaultSpec", "KillPoint", "Scenario", "Sut"]

FAULT_KINDS: tuple[str, ...] = tuple(FaultKind)
#: Longest ``ms`` a latency or delayed reply may have (a minute: a fault, not a hang).
MAX_FAULT_MS = 60_000


@dataclass(frozen=True)
class FaultSpec:
    """One planned misbehaviour of the mock gateway. ``kind`` is one of ``FAULT_KINDS``;
    ``ms`` (milliseconds, 0..``MAX_FAULT_MS``; ``latency`` and ``delay_after_accept`` only,
    required there) and ``status`` (500–599, ``error`` only)."""

    kind: FaultKind
    ms: int | None = None
    status: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, FaultKind):
            object.__setattr__(self, "kind", FaultKind(self.kind))

    @classmethod
    def from_dict(cls, data: Any) -> FaultSpec:
        """Validate a fault dict such as ``{"kind": "error", "status": 503}``.

        Raises:
            ValueError: not a dict, an unknown ``kind``, a missing/mistyped/out-of-range
                ``ms``/``status``, or an unexpected key; the message names the field and
                the allowed values.
        """
        if not isinstance(data, dict):
            raise ValueError(f"fault: expected an object, got {type(data).__name__}")
        kind = data.get("kind")
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault.kind: {kind!r} is not one of {', '.join(FAULT_KINDS)}")
        kind = FaultKind(kind)
        allowed = {"kind"} | ({"ms"} if kind.takes_ms else {"status"}
                              if kind is FaultKind.ERROR else set())
        for key in data:
            if key not in allowed:
                raise ValueError(f"fault.{key}: not allowed for kind {kind.value!r} "
                                 f"(allowed: {', '.join(sorted(allowed))})")
        ms, status = data.get("ms"), data.get("status")
        if kind.takes_ms and not (
                _is_int(ms) and 0 <= ms <= MAX_FAULT_MS):
            raise ValueError(f"fault.ms: {ms!r} must be an integer in 0..{MAX_FAULT_MS} "
                             "(milliseconds)")
        if kind is FaultKind.ERROR and not (_is_int(status) and 500 <= status <= 599):
            raise ValueError(f"fault.status: {status!r} must be an integer in 500..599")
        return cls(kind, ms, status)

    @property
    def label(self) -> str:
        """How the request log records it: ``latency:50ms``, ``error:503``, or the kind."""
        if self.kind.takes_ms:
            return f"{self.kind}:{self.ms}ms"
        return f"error:{self.status}" if self.kind is FaultKind.ERROR else str(self.kind)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Scenario:
    """A validated scenario (``scenarios/README.md`` documents each field).

    Attributes:
        name: the id prefix of its executions (``o1001``).
        path: the file it came from (``None`` when built in code).
        description: one line for reports.
        case_id, order_id: the case.
        policy: ``deterministic`` or ``varying``.
        idempotency_keys: SUT option; ``False`` demonstrates duplicates (exercise 3).
        read_timeout_s: SUT option ``--read-timeout``: seconds the gateway client waits for
            a reply per attempt (``None``: the SUT's default, 5 s for the reference).
        max_attempts: SUT option ``--max-attempts``: recovery attempts before the case is
            dead-lettered (``None``: the SUT's default, 5 for the reference).
        order_note: SUT option ``--order-note``: the case has a second gated side effect,
            an order note (gate ``add_order_note``, the harness's mock order service); the
            ``[human]`` shorthand's approval then approves both gates.
        points: kill points for single-kill executions; ``None``: every point the trace
            run reaches.
        schedules: extra multi-kill schedules.
        crash_mode: ``kill`` (SIGKILL) or ``power`` (SIGKILL, then a power cut:
            ``harness.launch.power``).
        power_points: with ``power``, the kill labels that are power cuts (their every
            occurrence); ``None``: every kill is one.
        baseline: also run the no-kill execution.
        double: also run every ordered pair (first kill, second kill reached during the
            recovery from the first), learned from the single-kill executions.
        human_action, approve_at, approve_delay_h, approve_twice, ticket: the ``[human]``
            table (approve or reject; approve mid-resume at a point; hours later on a
            simulated clock; twice; which ticket the resuming worker is offered).
        reject_feedback: with ``reject``: the reviewer's feedback; the loop must redraft
            answering it and park, then the human approves the redraft.
        gateway_faults: the mock gateway's fault plan, one per send request in order.
        gateway_dialect: the email wire the workers send with (``[gateway] dialect``): the
            gateway also serves SMTP for ``smtp``; every dialect's address is in the
            workers' environment (``MockGateway.worker_env``).
        resumers, leases, lease_ttl_s, takeover_at, same_owner: the ``[concurrency]``
            table (``same_owner``: every worker leases as ``worker-0``, a restarted worker
            reusing its identity).
        storage_fault, lock_at, lock_ms: the ``[storage]`` table.
        story: the story as steps (``[[story]]``); empty: the story the tables above
            describe (``harness.plan.story_plan.expand`` turns them into steps).
        expect_failing: check ids expected to fail in every killed execution.
        expect_deliveries: deliveries the case must end with (1; 0 when nothing may send).
        expect_worker_error: the error a resuming worker must stop with (exit 1), e.g.
            ``CheckpointCorrupt``; such an exit is then a declared outcome.
        target: the loop under test when it is not the reference (``[target]``,
            ``harness.targets.spec``); ``None`` is the reference loop (``sut``).
    """

    name: str
    path: Path | None = None
    description: str = ""
    case_id: str = "case-O-1001"
    order_id: str = "O-1001"
    policy: str = "deterministic"
    idempotency_keys: bool = True
    read_timeout_s: float | None = None
    max_attempts: int | None = None
    order_note: bool = False
    points: tuple[KillPoint, ...] | None = None
    schedules: tuple[CrashSchedule, ...] = ()
    crash_mode: CrashMode = CrashMode.KILL
    power_points: frozenset[str] | None = None
    baseline: bool = True
    double: bool = False
    human_action: HumanAction = HumanAction.APPROVE
    reject_feedback: str | None = None
    approve_at: KillPoint | None = None
    approve_delay_h: float = 0.0
    approve_twice: bool = False
    ticket: TicketKind = TicketKind.ISSUED
    gateway_faults: tuple[FaultSpec, ...] = ()
    gateway_dialect: GatewayDialect = GatewayDialect.NATIVE
    resumers: int = 1
    leases: bool = False
    lease_ttl_s: float = 30.0
    takeover_at: KillPoint | None = None
    same_owner: bool = False
    storage_fault: StorageFault = StorageFault.NONE
    lock_at: KillPoint | None = None
    lock_ms: int = 300
    story: tuple[Step, ...] = ()
    expect_failing: frozenset[CheckId] = field(default_factory=frozenset)
    expect_deliveries: int = 1
    expect_worker_error: str | None = None
    target: PythonTarget | None = None

    def __post_init__(self) -> None:
        # a scenario built in code may spell a closed set as its string: hold the enum
        for name, enum in (("human_action", HumanAction), ("ticket", TicketKind),
                           ("crash_mode", CrashMode),
                           ("storage_fault", StorageFault)):
            object.__setattr__(self, name, enum(getattr(self, name)))

    def is_power_cut(self, point: KillPoint) -> bool:
        """Whether the kill at ``point`` is a power cut (``crash_mode`` and
        ``power_points``: the one rule; the story engine and the reports read it here)."""
        return self.crash_mode is CrashMode.POWER and (self.power_points is None
                                                        or point.label in self.power_points)


def _origin(package: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ImportError(f"package {package} is not installed")
    return spec.origin


#: The folder that holds the reference ``shopops`` and ``harness`` packages (found, not
#: imported: the frozen types import nothing of the loop under test).
SRC = str(Path(_origin("shopops")).resolve().parent.parent)


@dataclass(frozen=True)
class Sut:
    """An implementation to run (what it must do: ``docs/contract.md``).

    Attributes:
        path: the folder holding the package (first on ``PYTHONPATH``), or ``None`` for the
            reference implementation.
        module: the package name run as ``python -m MODULE``.
        memory_mib, file_size_mib, cpu_s: limits for a foreign worker (address space in
            MiB, largest file it may write in MiB, CPU seconds).
        trusted: our own variant (a mutant): started like the reference, without limits,
            so a fork server preloaded from ``path`` may fork it.
        nproc: processes the sealed user may have at once (``RLIMIT_NPROC``; counts every
            process of that uid, so it bounds a fork bomb).
    """

    path: Path | None = None
    module: str = "shopops"
    memory_mib: int = 1024
    file_size_mib: int = 64
    cpu_s: int = 60
    trusted: bool = False
    nproc: int = 256

    @property
    def foreign(self) -> bool:
        """True for anything but the reference."""
        return self.path is not None

    @property
    def untrusted(self) -> bool:
        """A foreign implementation that is not our own variant: started through
        ``harness.sandbox.boot`` under limits, and sealed (``harness.sandbox.users``) when the
        harness can give it a user of its own."""
        return self.foreign and not self.trusted

    def argv(self, *args: str) -> list[str]:
        """The command line of one worker running ``MODULE ARGS``. For an untrusted
        implementation the boot's uid and code folder are placeholders (``-1``, ``-``:
        unsealed) that ``harness.launch.sealed.sealed_argv`` fills in per execution."""
        if not self.untrusted:
            return [sys.executable, "-m", self.module, *args]
        return [sys.executable, *BOOT, str(self.memory_mib), str(self.file_size_mib),
                str(self.cpu_s), str(self.nproc), "-1", "-", self.module, *args]

    def pythonpath(self, inherited: str | None) -> str:
        """``PYTHONPATH`` for a worker: the implementation's folder first, then the
        harness's (for ``harness.sandbox.boot``), then what was inherited."""
        first = [str(self.path.resolve())] if self.path is not None else []
        return os.pathsep.join(p for p in (*first, SRC, inherited) if p)

    def describe(self) -> str:
        """``reference`` or the folder."""
        return "reference" if self.path is None else str(self.path)


REFERENCE = Sut()

#: How an untrusted worker's interpreter starts the boot: ``-P`` keeps the cwd (the
#: worker's own writable folder) off ``sys.path`` while the boot still runs as root, ``-s``
#: keeps the user site out.
BOOT = ("-P", "-s", "-m", "harness.sandbox.boot")


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
    def dirname(self) -> str:
        """A filesystem-safe folder name (``o1001--t6.gateway_accepted``). A name longer
        than ``MAX_DIRNAME`` (eight long kill points) is cut and ends with 16 hex digits of
        the SHA-256 of the full name instead, so that two schedules that share a long prefix
        still get two folders (the reports keep the schedule itself)."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.scenario.name}--{self.schedule.id}")
        if len(name) <= MAX_DIRNAME:
            return name
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        return f"{name[:MAX_DIRNAME - 18]}--{digest}"

    @property
    def power_cuts(self) -> tuple[KillPoint, ...]:
        """The kills of this execution's schedule that are power cuts, in order."""
        return tuple(k for k in self.schedule.kills if self.scenario.is_power_cut(k))

    @property
    def expected_failing(self) -> frozenset[CheckId]:
        """The checks this execution is expected to fail: the scenario's
        ``expect.failing_checks`` when the schedule has kills, none on the no-kill baseline
        (which must be clean). The one rule: the verdict, the grade and the reports read it
        here."""
        return self.scenario.expect_failing if self.schedule.kills else frozenset()

    @property
    def replay(self) -> str:
        """One shell command that re-runs exactly this execution, with its paths as they
        were given (``replay_from`` writes them relative to a folder)."""
        return self.replay_from(None)

    def replay_from(self, cwd: Path | None, *, scenario_as: str | None = None,
                    sut_as: str | None = None) -> str:
        """The replay command, shell-quoted (``shlex.quote``: a path with a space still
        runs), with every path relative to ``cwd`` when ``cwd`` is given (what a reader
        types in that folder; a path on another drive stays as it is). ``scenario_as``
        names the scenario instead of its path (a shipped one, by its catalogue name) and
        ``sut_as`` the implementation's folder instead of its path (a student's ``.``:
        their own checkout) — what a student's page shows, with no path of the grader's
        machine."""

        def path(p: Path) -> str:
            if cwd is None:
                return shlex.quote(str(p))
            try:
                return shlex.quote(os.path.relpath(p, cwd))
            except ValueError:
                return shlex.quote(str(p))

        if self.scenario.path is None:
            return (f"(scenario {self.scenario.name!r} was built in code: re-run the test that "
                    f"built it; schedule {self.schedule.id})")
        sut = (f" --sut {shlex.quote(sut_as) if sut_as else path(self.sut.path)}"
               if self.sut.path else "")
        if self.sut.path and self.sut.module != "shopops":
            sut += f" --module {shlex.quote(self.sut.module)}"
        target = self.scenario.target
        if target is not None and target.source is not None:
            sut += (f" --sut {shlex.quote(sut_as) if sut_as else path(target.source)} "
                    f"--target {target.name}")
        scenario = shlex.quote(scenario_as) if scenario_as else path(self.scenario.path)
        return (f"shopops-chaos run {scenario} "
                f"--schedule {shlex.quote(self.schedule.id)}{sut}")
