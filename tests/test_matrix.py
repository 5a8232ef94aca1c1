"""The kill matrix: kill points learnt from a hand-built trace, and one plan per point."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.judge.evidence import Event, EventLog, Evidence
from harness.model import CrashSchedule, KillPoint
from harness.plan.matrix import points_from_trace, single_kill_plans
from harness.plan.scenario import Scenario, ScenarioError, load_scenario
from harness.run.execution import ExecutionPlan, KillController
from harness.services.channel import Hit
from harness.services.gateway import GatewayLog

CASE = "case-O-1001"
O1001 = Scenario(name="o1001", path=Path("scenarios/o1001.toml"))


def trace(specs: list[tuple[str, str | None, int | None]]) -> Evidence:
    """A no-kill execution's evidence whose trace is ``(kind, label, worker)`` in order."""
    events = tuple(Event(seq=i, t_ms=float(i), kind=kind, label=label, worker=w,
                         pid=None if w is None else 100 + w)
                   for i, (kind, label, w) in enumerate(specs))
    return Evidence(execution_id="o1001[no-kill]", case_id=CASE, events=events, workers=(),
                    checkpoints=(), approval_requests=(), tickets=(), gateway=GatewayLog((), ()),
                    approval_event=None, checkpoint_seq_at_approval=None, unreached=())


def hits(worker: int, *labels: str) -> list[tuple[str, str | None, int | None]]:
    return [("hit", label, worker) for label in labels]


# The o1001 trace run: the start worker parks, the human approves, the resume completes.
O1001_TRACE = trace([
    ("worker_start", None, 0),
    *hits(0, "t0.case_started", "t1.get_customer", "t1.get_order", "ckpt.before_commit",
          "t1.draft_email", "ckpt.before_commit", "t2.send_proposed", "ckpt.before_commit",
          "t3.checkpoint_saved", "t4.parked"),
    ("worker_exit", None, 0),
    ("approve", "t5.approved", None),
    ("worker_start", None, 1),
    *hits(1, "t6.checkpoint_loaded", "t6.approval_granted", "ckpt.before_commit",
          "ckpt.before_commit", "t6.send_key_persisted", "t6.request_leaving"),
    ("delivery", "t6.gateway_accepted", 1),
    *hits(1, "t6.reply_received", "ckpt.before_commit", "t7.completed_saved"),
    ("worker_exit", None, 1),
])
O1001_POINTS = (
    "t0.case_started", "t1.get_customer", "t1.get_order", "ckpt.before_commit",
    "t1.draft_email", "ckpt.before_commit#2", "t2.send_proposed", "ckpt.before_commit#3",
    "t3.checkpoint_saved", "t4.parked", "t6.checkpoint_loaded", "t6.approval_granted",
    "ckpt.before_commit#4", "ckpt.before_commit#5", "t6.send_key_persisted",
    "t6.request_leaving", "t6.gateway_accepted", "t6.reply_received", "ckpt.before_commit#6",
    "t7.completed_saved",
)


def ids(plans: list[ExecutionPlan]) -> list[str]:
    return [p.id for p in plans]


# --------------------------------------------------------------------------- points_from_trace


def test_points_from_trace_in_order_with_repeats_numbered() -> None:
    points = points_from_trace(O1001_TRACE)
    assert [str(p) for p in points] == list(O1001_POINTS)
    assert KillPoint("ckpt.before_commit", 2) in points
    assert KillPoint("ckpt.before_commit", 3) in points


def test_points_from_trace_counts_repeats_across_workers() -> None:
    # A second resume after a lost reply reaches the same labels again: #2, #3 ...
    ev = trace([*hits(0, "t6.request_leaving"), ("delivery", "t6.gateway_accepted", 0),
                *hits(1, "t6.request_leaving"), ("delivery", "t6.gateway_accepted", 1),
                *hits(2, "t6.request_leaving")])
    assert [str(p) for p in points_from_trace(ev)] == [
        "t6.request_leaving", "t6.gateway_accepted", "t6.request_leaving#2",
        "t6.gateway_accepted#2", "t6.request_leaving#3"]


def test_points_from_trace_includes_gateway_deliveries_as_gateway_accepted() -> None:
    points = points_from_trace(O1001_TRACE)
    assert points.count(KillPoint("t6.gateway_accepted")) == 1
    at = points.index(KillPoint("t6.gateway_accepted"))
    assert points[at - 1] == KillPoint("t6.request_leaving")
    assert points[at + 1] == KillPoint("t6.reply_received")


def test_points_from_trace_skips_every_other_kind_of_event() -> None:
    ev = trace([("worker_start", None, 0), ("approve", "t5.approved", None),
                ("kill", "t4.parked", 0), ("worker_exit", None, 0),
                ("error", "t4.parked", None), ("hit", None, 0)])
    assert points_from_trace(ev) == ()
    assert KillPoint("t5.approved") not in points_from_trace(O1001_TRACE)


@dataclass
class FakeWorker:
    """What ``KillController`` needs of a worker: ``pid``, ``index`` and ``kill()``."""

    pid: int
    index: int
    kills: list[int] = field(default_factory=list)

    def kill(self) -> None:
        self.kills.append(self.pid)


def test_trace_numbering_matches_the_kill_controller() -> None:
    # The same hits, counted by the trace (matrix) and by the controller (execution),
    # give the same occurrence: the planned point fires at the hit it names.
    log = EventLog()
    first, second = FakeWorker(100, 0), FakeWorker(101, 1)
    ctl = KillController((KillPoint("t6.request_leaving", 2),), log)
    ctl.attach(first)
    assert ctl.on_hit(Hit("t6.request_leaving", 100, 1, "off")) == {"do": "continue"}
    ctl.attach(second)
    assert ctl.on_hit(Hit("t6.request_leaving", 101, 1, "off")) is None
    assert (first.kills, second.kills) == ([], [101])
    traced = trace([(e.kind, e.label, e.worker) for e in log.snapshot()])
    assert points_from_trace(traced)[:2] == (KillPoint("t6.request_leaving"),
                                             KillPoint("t6.request_leaving", 2))


def test_a_hit_from_an_unknown_pid_is_numbered_the_same_by_trace_and_controller() -> None:
    log = EventLog()
    worker = FakeWorker(100, 0)
    ctl = KillController((KillPoint("t4.parked", 2),), log)
    ctl.attach(worker)
    ctl.on_hit(Hit("t4.parked", 555, 1, "off"))  # e.g. a child process of the worker
    ctl.on_hit(Hit("t4.parked", 100, 1, "off"))
    traced = trace([(e.kind, e.label, e.worker) for e in log.snapshot()])
    planned = KillPoint("t4.parked", 2) in points_from_trace(traced)
    assert planned == bool(worker.kills)


# --------------------------------------------------------------------------- single_kill_plans


def test_every_reached_point_when_the_scenario_says_all() -> None:
    plans = single_kill_plans(O1001, points_from_trace(O1001_TRACE))
    assert ids(plans) == [f"o1001[{p}]" for p in O1001_POINTS]
    assert all(p.scenario is O1001 and len(p.schedule.kills) == 1 for p in plans)


def test_the_scenario_list_wins_even_for_unreached_points() -> None:
    listed = (KillPoint("t6.gateway_accepted"), KillPoint("t6.request_leaving", 3))
    scenario = Scenario(name="picky", points=listed)
    plans = single_kill_plans(scenario, points_from_trace(O1001_TRACE))
    # t6.request_leaving#3 is never reached by the trace; it still runs (and is unknown).
    assert ids(plans) == ["picky[t6.gateway_accepted]", "picky[t6.request_leaving#3]"]


def test_an_empty_trace_plans_only_the_listed_points() -> None:
    scenario = Scenario(name="picky", points=(KillPoint("t4.parked"),))
    assert ids(single_kill_plans(scenario, ())) == ["picky[t4.parked]"]
    assert single_kill_plans(Scenario(name="all"), ()) == []


def test_extra_schedules_come_after_the_single_kills() -> None:
    multi = (CrashSchedule.parse("t3.checkpoint_saved>t6.gateway_accepted"),
             CrashSchedule.parse("t4.parked>t6.checkpoint_loaded>t6.gateway_accepted#2"))
    scenario = Scenario(name="o1001", points=(KillPoint("t4.parked"),), schedules=multi)
    plans = single_kill_plans(scenario, points_from_trace(O1001_TRACE))
    assert ids(plans) == ["o1001[t4.parked]",
                          "o1001[t3.checkpoint_saved>t6.gateway_accepted]",
                          "o1001[t4.parked>t6.checkpoint_loaded>t6.gateway_accepted#2]"]
    assert [p.schedule for p in plans[1:]] == list(multi)


def test_plan_ids_are_stable() -> None:
    reached = points_from_trace(O1001_TRACE)
    once = ids(single_kill_plans(O1001, reached))
    again = ids(single_kill_plans(O1001, points_from_trace(O1001_TRACE)))
    assert once == again
    assert "o1001[t6.gateway_accepted]" in once
    assert "o1001[ckpt.before_commit#2]" in once
    assert ExecutionPlan(O1001, CrashSchedule()).id == "o1001[no-kill]"
    plan = ExecutionPlan(O1001, CrashSchedule.parse("t6.gateway_accepted"))
    assert plan.id == "o1001[t6.gateway_accepted]"
    assert CrashSchedule.parse(plan.id[len("o1001["):-1]) == plan.schedule


def test_replay_names_the_file_and_the_schedule() -> None:
    plan = ExecutionPlan(O1001, CrashSchedule.parse("t3.checkpoint_saved>t6.gateway_accepted"))
    assert plan.replay == ("shopops-chaos run scenarios/o1001.toml "
                           "--schedule 't3.checkpoint_saved>t6.gateway_accepted'")


@pytest.mark.parametrize("crash", [
    'points = ["t4.parked", "t4.parked#1"]',
    'points = ["t4.parked"]\nschedules = ["t4.parked"]',
    'schedules = ["no-kill"]',
], ids=["point-twice", "schedule-repeats-a-point", "schedule-repeats-the-baseline"])
def test_a_schedule_is_planned_once(tmp_path: Path, crash: str) -> None:
    path = tmp_path / "dup.toml"
    path.write_text(f'name = "dup"\n[crash]\n{crash}\n', encoding="utf-8")
    try:
        scenario = load_scenario(path)
    except ScenarioError:
        return  # refusing the file is a fix too
    planned = ["dup[no-kill]"] + ids(single_kill_plans(scenario, points_from_trace(O1001_TRACE)))
    assert len(planned) == len(set(planned))


def test_a_loaded_scenario_plans_the_ids_of_one_built_in_code(tmp_path: Path) -> None:
    # Loading from a file gives the same ids as building the scenario in code.
    path = tmp_path / "o1001.toml"
    path.write_text('name = "o1001"\n[crash]\npoints = ["t6.gateway_accepted"]\n',
                    encoding="utf-8")
    loaded = single_kill_plans(load_scenario(path), ())
    built = single_kill_plans(Scenario(name="o1001", points=(KillPoint("t6.gateway_accepted"),)),
                              ())
    assert ids(loaded) == ids(built) == ["o1001[t6.gateway_accepted]"]



def _delivery(n: int = 1):
    from harness.model import Delivery

    return Delivery(f"dlv-{n:06d}", n, f"k-{n}", "0" * 64, "case-O-1001", "to", "s", "b",
                    "2026-12-01T00:00:00+00:00")


@pytest.mark.processes  # a real child process stands for a worker's
def test_a_delivery_from_a_process_no_worker_started_kills_and_credits_nobody() -> None:
    """The gateway's sender is the kernel's; a live process that is neither a worker nor a
    descendant of one (pid 1 here) is refused as tampering: no kill, no hit counted, no
    worker credited. A child of the worker stands for the worker; a sender that is gone
    falls back to the current worker."""
    import os
    import subprocess
    import sys

    from harness.model import EventKind

    log = EventLog()
    me = FakeWorker(os.getpid(), 0)  # this process plays the worker: its child descends
    ctl = KillController((KillPoint("t6.gateway_accepted"),), log)
    ctl.attach(me)
    ctl.on_gateway_accepted(_delivery(1), sender_pid=1)
    (event,) = log.snapshot()
    assert event.kind is EventKind.TAMPERING and event.pid == 1 and event.worker is None
    assert me.kills == [] and ctl.pending == [KillPoint("t6.gateway_accepted")]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ctl.on_gateway_accepted(_delivery(2), sender_pid=child.pid)
    finally:
        child.kill()
        child.wait()
    assert me.kills == [os.getpid()]  # the kill point fired, on the worker it descends from
    delivered = [e for e in log.snapshot() if e.kind is EventKind.DELIVERY]
    assert [(e.pid, e.worker) for e in delivered] == [(os.getpid(), 0)]
    gone = child.pid  # reaped: nothing to look up
    ctl.on_gateway_accepted(_delivery(3), sender_pid=gone)
    assert [e.pid for e in log.snapshot() if e.kind is EventKind.DELIVERY][-1] == os.getpid()


def test_a_story_hook_and_a_kill_at_one_hit_run_hook_first() -> None:
    """The module's order: hooks due at a hit, then the kill. A human who approves "when a
    worker gets there" has approved even when the schedule kills the worker there (the
    kill used to win: the approval never came and the reference was judged a lost send)."""
    log = EventLog()
    worker = FakeWorker(100, 0)
    ctl = KillController((KillPoint("t6.checkpoint_loaded"),), log)
    ctl.attach(worker)
    acted: list[int] = []
    ctl.add_hook(KillPoint("t6.checkpoint_loaded"), lambda w: acted.append(w.pid))
    rest = ctl.on_hit(Hit("t6.checkpoint_loaded", 100, 1, "off"))
    # a hook may wait (a database lock): it runs off the service loop, kill after it
    assert callable(rest) and acted == [] and worker.kills == []
    assert rest() is None  # killed
    assert acted == [100] and worker.kills == [100] and not ctl.hooks


def test_hits_that_come_while_a_hook_runs_are_counted_after_its_kill() -> None:
    """While the story acts at a hit (a hook, run off the service loop), other workers' hits
    wait for it, as they waited for the controller's lock when each hit had a thread: the
    kill the hook's hit fires comes first, then they are counted afresh. Found by an
    attack: counted meanwhile, they were wiped by that kill, and the schedule's next kill
    (here worker 1's first ``t6.request_leaving`` after the first kill) never fired."""
    import threading

    log = EventLog()
    w0, w1 = FakeWorker(100, 0), FakeWorker(101, 1)
    ctl = KillController((KillPoint("t6.checkpoint_loaded"),
                          KillPoint("t6.request_leaving")), log)
    ctl.attach(w0)
    ctl.attach(w1)
    in_hook, go_on = threading.Event(), threading.Event()

    def hook(worker: object) -> None:
        in_hook.set()
        assert go_on.wait(30)

    ctl.add_hook(KillPoint("t6.checkpoint_loaded"), hook)
    act = ctl.on_hit(Hit("t6.checkpoint_loaded", 100, 1, "off"))
    assert callable(act)
    acting = threading.Thread(target=lambda: results.append(act()))
    results: list[object] = []
    acting.start()
    assert in_hook.wait(30)
    waits = ctl.on_hit(Hit("t6.request_leaving", 101, 1, "off"))  # during the hook
    assert callable(waits) and w1.kills == []  # not counted yet
    later = threading.Thread(target=lambda: results.append(waits()))
    later.start()
    go_on.set()
    acting.join(30)
    later.join(30)
    assert sorted(results, key=str) == [None, None]  # both killed, in the schedule's order
    assert w0.kills == [100] and w1.kills == [101] and ctl.pending == []
    kinds = [(e.kind, e.label) for e in log.snapshot() if e.kind in ("hit", "kill")]
    assert kinds == [("hit", "t6.checkpoint_loaded"), ("kill", "t6.checkpoint_loaded"),
                     ("hit", "t6.request_leaving"), ("kill", "t6.request_leaving")]


@pytest.mark.processes  # a real child process stands for a worker's
def test_which_senders_stand_for_a_worker() -> None:
    """Whose gateway requests take the scenario's faults: a worker, its descendants, and a
    pid that cannot be told; not a live process outside every worker's tree (pid 1)."""
    import os
    import subprocess
    import sys

    ctl = KillController((), EventLog())
    ctl.attach(FakeWorker(os.getpid(), 0))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert ctl.stands_for_a_worker(child.pid)
    finally:
        child.kill()
        child.wait()
    assert ctl.stands_for_a_worker(os.getpid()) and ctl.stands_for_a_worker(None)
    assert ctl.stands_for_a_worker(child.pid)  # gone: cannot be told
    assert not ctl.stands_for_a_worker(1)


def test_a_hit_from_another_uid_is_refused_as_foreign_and_fails_no_check() -> None:
    """Another execution's process reaching this execution's channel (issue 24) is refused
    — not counted, no kill — and recorded as ``foreign``: not the implementation's doing,
    so ``no_tampering`` holds; a forged hit of the execution's own uid still fails it."""
    from dataclasses import replace as replaced

    from harness.judge.checks.safety import no_tampering
    from harness.model import EventKind

    log = EventLog()
    worker = FakeWorker(100, 0)
    ctl = KillController((KillPoint("t6.gateway_accepted"),), log, allowed_uid=4170001)
    ctl.attach(worker)
    assert ctl.on_hit(Hit("t6.gateway_accepted", 100, 1, "off", uid=4170002)) \
        == {"do": "continue"}
    assert worker.kills == [] and ctl.pending  # not counted: the point is still due
    (event,) = log.snapshot()
    assert event.kind == EventKind.FOREIGN and "from uid 4170002" in event.detail
    ev = replaced(trace([]), events=log.snapshot())
    assert no_tampering(ev).passed
    ctl.on_hit(Hit("t4.parked", 100, 1, "off", claimed_pid=101, uid=4170001))
    assert log.snapshot()[-1].kind == EventKind.TAMPERING
    assert not no_tampering(replaced(ev, events=log.snapshot())).passed
