"""The harness's frozen types, at the bottom of the layering (``docs/design.md``).

Data flows one way — plan → story record → evidence → checks → verdict → reports — and
every stage hands the next one of these frozen dataclasses. This package imports nothing
of the harness outside itself (a test reads the import graph), so any module may use it:
reports, the explorer and the pytest plugin take their types from here, never from the
runner. It imports no other package of the harness and nothing of the loop under test: of
the project, only ``shopops_contract`` (labels, limits, phases, approval records).
"""

from harness.model.evidence import (
    NO_KEY,
    Delivery,
    Event,
    Evidence,
    Gap,
    GatewayLog,
    HistoryMark,
    HistoryRead,
    NoteDelivery,
    PowerCut,
    RequestRecord,
    WorkerRun,
    key_text,
    rows_digest,
)
from harness.model.hits import HIT_KINDS, HitCounter, number_trace
from harness.model.kinds import (
    CheckId,
    CheckStatus,
    CrashMode,
    EventKind,
    EvidenceSource,
    FaultKind,
    GatewayDialect,
    HumanAction,
    StorageFault,
    TicketKind,
    Verdict,
    WorkerRole,
)
from harness.model.observations import (
    ApprovalRecord,
    Draft,
    DurableWrite,
    GateState,
    History,
    HistorySource,
    LeaseSeen,
    Observable,
    StoredRow,
    TicketRecord,
)
from harness.model.plan import (
    FAULT_KINDS,
    MAX_FAULT_MS,
    REFERENCE,
    SRC,
    ExecutionPlan,
    FaultSpec,
    Scenario,
    Sut,
)
from harness.model.points import NO_KILL, CrashSchedule, KillPoint
from harness.model.results import (
    CheckResult,
    Counts,
    Equivalence,
    ExecutionResult,
    ItemScore,
    MatrixGap,
    RunResult,
    roll_up,
)
from harness.model.shard import Shard, ShardError, ShardPlan, Unit
from harness.model.story import (
    DEFAULT_GATE,
    DEFAULT_OWNER,
    NO_RECOVERY,
    NOTE_GATE,
    PAST_LEASE,
    ClockStep,
    HoldStep,
    HumanStep,
    ReleaseStep,
    Step,
    StepKind,
    StorageStep,
    StoryRecord,
    Wait,
    When,
    WorkersStep,
)
from harness.model.target import PythonTarget, TargetRole

__all__ = [
    "DEFAULT_GATE", "DEFAULT_OWNER", "FAULT_KINDS", "HIT_KINDS", "MAX_FAULT_MS", "NO_KEY",
    "NO_KILL", "NO_RECOVERY", "NOTE_GATE", "PAST_LEASE", "REFERENCE", "SRC", "ApprovalRecord",
    "CheckId", "CheckResult", "CheckStatus", "ClockStep", "Counts", "CrashMode", "CrashSchedule",
    "Delivery", "Equivalence",
    "Draft", "DurableWrite", "Event", "EventKind", "Evidence", "EvidenceSource", "ExecutionPlan",
    "ExecutionResult", "FaultKind", "FaultSpec", "GatewayDialect", "Gap", "GateState",
    "GatewayLog", "History", "HistoryMark", "HistoryRead", "HistorySource", "HitCounter",
    "HoldStep", "HumanAction", "HumanStep", "ItemScore", "key_text", "KillPoint", "LeaseSeen",
    "MatrixGap", "NoteDelivery", "PowerCut",
    "number_trace", "Observable", "PythonTarget",
    "ReleaseStep", "RequestRecord", "roll_up", "rows_digest", "RunResult", "Scenario", "Shard",
    "ShardError", "ShardPlan", "Step", "StepKind", "StorageFault", "StorageStep", "StoredRow",
    "StoryRecord", "Sut", "TargetRole", "TicketKind", "TicketRecord", "Unit", "Verdict", "Wait",
    "When", "WorkerRole", "WorkerRun", "WorkersStep",
]
