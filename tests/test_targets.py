"""Targets driven in real processes against the real mock gateway: the plain-Python
starter, the LangGraph and the DBOS examples, and the boundary kill points the harness
installs in code that never calls ``failpoint()`` (issue 11).

The gateway's ledger is the judge of deliveries; the target's durable state is read
through its own API (``history``). A kill is a real SIGKILL to self at the labelled point
(``SHOPOPS_FAILPOINTS``), so returncode -9.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from target_helpers import NEEDS_DBOS, NEEDS_LANGGRAPH, TargetCase

from harness.forkserver.worker import TARGET_PRELOAD
from harness.launch.fork import ForkLauncher
from harness.targets.base import Role
from harness.targets.examples import DBOS, LANGGRAPH, STARTER
from harness.targets.python import PythonTarget

KILLED = -signal.SIGKILL


@pytest.fixture(scope="module")
def preloaded() -> Iterator[ForkLauncher]:
    """One server for the module that imported the frameworks (``TARGET_PRELOAD``), as the
    run's fork launcher has: each worker is forked from it instead of importing LangGraph
    or DBOS again (seconds each). Fresh interpreters run the starter in
    ``test_target_scenarios`` (forked and spawned give the same verdicts)."""
    with ForkLauncher(modules=("harness.targets.worker",), preload=TARGET_PRELOAD,
                      fallback=None, start_timeout_s=240.0) as launcher:
        yield launcher


@pytest.fixture
def case_of(tmp_path: Path, preloaded: ForkLauncher) -> Iterator[object]:
    made: list[TargetCase] = []

    def make(target: PythonTarget, **kw: object) -> TargetCase:
        kw["launcher"] = preloaded
        case = TargetCase(target, tmp_path, **kw)  # type: ignore[arg-type]
        made.append(case)
        return case

    yield make
    for case in made:
        case.close()


def _park_approve(case: TargetCase) -> None:
    start = case.run(Role.START)
    assert start.returncode == 0, start.stderr
    assert case.deliveries() == 0  # nothing is sent before the human decides
    case.approve()
    if case.target.has(Role.DECIDE):
        decided = case.run(Role.DECIDE)
        assert decided.returncode == 0, decided.stderr


# -- the plain-Python starter ----------------------------------------------------------------

def test_starter_parks_then_sends_once_with_the_key_committed_before_the_send(case_of) -> None:
    case = case_of(STARTER)
    _park_approve(case)
    assert case.history()[-1].phase == "awaiting_approval"
    done = case.run(Role.RESUME)
    assert done.returncode == 0, done.stderr
    assert case.deliveries() == 1
    phases = [s.phase for s in case.history()]
    assert phases[-2:] == ["sending", "completed"]
    key = case.history()[-2].email.key
    assert key is not None and key == case.history()[-1].email.key
    assert key.startswith("case-O-1001:send_email:")


@pytest.mark.parametrize(("label", "rows"), [("b.sqlite.before_commit", 0),
                                             ("b.sqlite.after_commit", 1)])
def test_sqlite_commit_points_sit_on_either_side_of_the_commit(case_of, label, rows) -> None:
    # the starter never calls failpoint(): these points come from harness.targets.boundaries
    case = case_of(STARTER)
    killed = case.run(Role.START, f"{label}=kill")
    assert killed.returncode == KILLED, killed.stderr
    assert len(case.history()) == rows


@pytest.mark.parametrize(("keys", "deliveries"), [(False, 2), (True, 1)])
def test_starter_killed_after_the_reply_duplicates_only_without_keys(case_of, keys,
                                                                    deliveries) -> None:
    case = case_of(STARTER, keys=keys)
    _park_approve(case)
    killed = case.run(Role.RESUME, "b.http.after_response=kill")
    assert killed.returncode == KILLED, killed.stderr
    assert case.deliveries() == 1  # delivered before the kill; the worker never knew
    again = case.run(Role.RESUME)
    assert again.returncode == 0, again.stderr
    assert case.deliveries() == deliveries


# -- LangGraph -------------------------------------------------------------------------------

@NEEDS_LANGGRAPH
def test_langgraph_parks_at_the_interrupt_and_resumes_with_the_ticket(case_of) -> None:
    case = case_of(LANGGRAPH, options={"durability": "sync"})
    _park_approve(case)
    assert case.history()[-1].phase == "awaiting_approval"
    done = case.run(Role.RESUME)
    assert done.returncode == 0, done.stderr
    assert case.deliveries() == 1
    last = case.history()[-1]
    assert (last.phase, last.email.sent) == ("completed", True)
    assert last.email.key is not None and last.email.key.startswith("case-O-1001:send_email:")


@NEEDS_LANGGRAPH
@pytest.mark.slow
@pytest.mark.parametrize(("keys", "deliveries"), [(False, 2), (True, 1)])
def test_langgraph_exit_mode_killed_after_the_reply(case_of, keys, deliveries) -> None:
    case = case_of(LANGGRAPH, keys=keys, options={"durability": "exit"})
    _park_approve(case)
    killed = case.run(Role.RESUME, "b.http.after_response=kill")
    assert killed.returncode == KILLED, killed.stderr
    again = case.run(Role.RESUME)
    assert again.returncode == 0, again.stderr
    assert case.deliveries() == deliveries  # the send node re-ran from the interrupt


@NEEDS_LANGGRAPH
@pytest.mark.slow
def test_langgraph_node_boundaries_are_kill_points(case_of) -> None:
    case = case_of(LANGGRAPH, options={"durability": "sync"})
    killed = case.run(Role.START, "b.langgraph.node_end=1*off->kill")  # 2nd: get_order
    assert killed.returncode == KILLED, killed.stderr
    last = case.history()[-1]
    # get_customer's checkpoint is durable, get_order's not: still intake, at step 1
    assert (last.phase, last.step) == ("intake", 1)
    recheck = case.run(Role.RESUME)
    assert recheck.returncode == 0, recheck.stderr
    assert case.history()[-1].phase == "awaiting_approval" and case.deliveries() == 0


@NEEDS_LANGGRAPH
@pytest.mark.slow
def test_a_bad_durability_option_names_the_field(case_of) -> None:
    case = case_of(LANGGRAPH, options={"durability": "never"})
    bad = case.run(Role.START)
    assert bad.returncode == 1
    assert "target.options.durability: 'never' is not one of sync, async, exit" in bad.stderr


# -- DBOS ------------------------------------------------------------------------------------

@NEEDS_DBOS
def test_dbos_parks_in_recv_and_completes_after_the_message(case_of) -> None:
    case = case_of(DBOS)
    _park_approve(case)
    phases = [s.phase for s in case.history()]
    assert phases[-1] == "awaiting_approval" and "completed" not in phases  # parked first
    done = case.run(Role.RESUME)
    assert done.returncode == 0, done.stderr
    assert case.deliveries() == 1
    assert case.history()[-1].email.sent is True


@NEEDS_DBOS
@pytest.mark.slow
@pytest.mark.parametrize(("keys", "deliveries"), [(False, 2), (True, 1)])
def test_dbos_step_killed_after_the_reply_is_rerun_on_recovery(case_of, keys,
                                                              deliveries) -> None:
    case = case_of(DBOS, keys=keys)
    _park_approve(case)
    killed = case.run(Role.RESUME, "b.dbos.step_end=1*off->kill")  # 2nd: send_email
    assert killed.returncode == KILLED, killed.stderr
    again = case.run(Role.RESUME)
    assert again.returncode == 0, again.stderr
    assert case.deliveries() == deliveries


_TASK_GRAPH = '''
import json
from typing import TypedDict

import harness.targets.boundaries as boundaries

hits = []
boundaries.failpoint = hits.append  # the labels passed, in order
boundaries.install(None)

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import task
from langgraph.graph import END, START, StateGraph


class S(TypedDict):
    x: int


@task
def double(x: int) -> int:
    return 2 * x


def a(s: S) -> S:
    return {"x": double(s["x"]).result()}


def b(s: S) -> S:
    return {"x": s["x"] + 1}


g = StateGraph(S)
g.add_node("a", a)
g.add_node("b", b)
g.add_edge(START, "a")
g.add_edge("a", "b")
g.add_edge("b", END)
out = g.compile(checkpointer=InMemorySaver()).invoke({"x": 1}, {"configurable": {"thread_id": "t"}})
assert out == {"x": 3}, out
print(json.dumps([h for h in hits if h.startswith("b.langgraph.")]))
'''


@NEEDS_LANGGRAPH
def test_a_task_is_a_point_of_its_own_and_node_numbers_stay(tmp_path: Path) -> None:
    """A ``@task`` called from a node passes ``b.langgraph.task_*``, not ``node_*``: the
    second node is still ``node_start#2`` (issue 25)."""
    script = tmp_path / "graph.py"
    script.write_text(_TASK_GRAPH, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "b.langgraph.node_start", "b.langgraph.task_start", "b.langgraph.task_end",
        "b.langgraph.node_end", "b.langgraph.node_start", "b.langgraph.node_end"]


def test_a_forked_target_worker_prints_no_runpy_warning(tmp_path: Path) -> None:
    """The fork server imported ``harness.targets.worker``; a worker run from it with
    ``-m`` printed runpy's "found in sys.modules" ``RuntimeWarning`` on every start
    (issue 25). It runs as a fresh interpreter's ``python -m`` would: silent."""
    with ForkLauncher(modules=("harness.targets.worker",), fallback=None,
                      preload=("harness.targets.worker", "harness.targets.boundaries")
                      ) as launcher:
        case = TargetCase(STARTER, tmp_path, launcher=launcher)  # type: ignore[arg-type]
        try:
            done = case.run(Role.START)
        finally:
            case.close()
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
