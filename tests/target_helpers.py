"""Drive a target's workers by hand against a real mock gateway (tests only).

Every worker is a real process in its own session, started with a deadline; on a timeout
or a failing test its whole process group is SIGKILLed and reaped. It is a fresh interpreter
(``python -m harness.targets.worker``), or, given a launcher, forked from a server that
preloaded the frameworks, as ``shopops-chaos run``'s default fork launcher starts target
workers (``harness.forkserver.worker.TARGET_PRELOAD``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.judge.observers.target import history_of
from harness.launch.launcher import Launcher
from harness.model import DurableWrite
from harness.services.gateway import MockGateway, read_log
from harness.targets.base import Role
from harness.targets.context import TargetContext
from harness.targets.extras import missing
from harness.targets.python import PythonTarget
from shopops.approvals import ApprovalQueue

DEADLINE_S = 240.0  # a framework import on a loaded 2-core machine is slow


class TargetCase:
    """One O-1001 case of ``target`` in ``workdir``, with its own mock gateway."""

    def __init__(self, target: PythonTarget, workdir: Path, *, keys: bool = True,
                 options: dict[str, str] | None = None,
                 launcher: Launcher | None = None) -> None:
        self.target = target
        self.workdir = workdir
        self.launcher = launcher
        self.gateway = MockGateway(workdir / "gateway.db").start()
        self.ctx = TargetContext("case-O-1001", "O-1001", "run-1", str(workdir / "target"),
                                 self.gateway.url, str(workdir / "approvals.db"), keys=keys,
                                 options=dict(options or {}))
        self.runs = 0

    def close(self) -> None:
        self.gateway.stop()

    def run(self, role: Role, failpoints: str = "") -> subprocess.CompletedProcess[str]:
        """Run one worker to its end; ``failpoints`` is a ``SHOPOPS_FAILPOINTS`` spec."""
        self.runs += 1
        ctx_file = self.workdir / f"ctx-{self.runs}.json"
        ctx_file.write_text(self.ctx.to_json(), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
        if failpoints:
            env["SHOPOPS_FAILPOINTS"] = failpoints
        if self.launcher is not None:
            return self._forked(self.target.argv(role, ctx_file), env)
        proc = subprocess.Popen(self.target.argv(role, ctx_file), env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, cwd=self.workdir)
        try:
            out, err = proc.communicate(timeout=DEADLINE_S)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # descendants too, if any are left
            except ProcessLookupError:
                pass
            proc.wait()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def _forked(self, argv: list[str], env: dict[str, str]
                ) -> subprocess.CompletedProcess[str]:
        assert self.launcher is not None
        out, err = (self.workdir / f"worker-{self.runs}.{n}" for n in ("out", "err"))
        worker = self.launcher.start(argv, env=env, cwd=str(self.workdir), stdout=str(out),
                                     stderr=str(err), index=self.runs)
        info = worker.wait(DEADLINE_S)  # past it: the process group SIGKILLed and reaped
        assert not info.timed_out, f"{argv} passed its {DEADLINE_S:g} s deadline"
        return subprocess.CompletedProcess(argv, info.returncode, out.read_text("utf-8"),
                                           err.read_text("utf-8"))

    def approve(self) -> str:
        """The human approves through the queue; the ticket goes into the context."""
        with ApprovalQueue(self.workdir / "approvals.db") as queue:
            ticket = queue.approve(self.ctx.case_id, approver="maya").ticket_id
        self.ctx = replace(self.ctx, ticket=ticket)
        return ticket

    def history(self) -> list[DurableWrite]:
        """The target's history as the judge observes it (``observers.target``); every
        write readable."""
        done = self.run(Role.HISTORY)
        assert done.returncode == 0, done.stderr
        data: Any = json.loads(done.stdout)
        writes = list(history_of(tuple(data)).writes)
        assert all(w.problem is None for w in writes), [w.problem for w in writes]
        return writes

    def deliveries(self) -> int:
        return len(read_log(self.workdir / "gateway.db").deliveries_for(self.ctx.case_id))


def needs_extra(extra: str) -> pytest.MarkDecorator:
    """Skip a test, saying why and how to install it, when the optional ``extra`` is
    missing (``harness.targets.extras``)."""
    absent = missing(extra)
    return pytest.mark.skipif(bool(absent), reason=(
        f"needs the optional extra {extra!r} (missing: {', '.join(absent)}): "
        f"pip install -e '.[{extra}]'"))


NEEDS_LANGGRAPH = needs_extra("langgraph")
NEEDS_DBOS = needs_extra("dbos")


#: The starter example every hand-made target variant of the tests is copied from.
STARTER = Path(__file__).resolve().parent.parent / "examples" / "python_starter"


def starter_variant(tmp_path: Path, anchor: str, insert: str) -> Path:
    """A copy of the python starter in ``tmp_path/forge`` with ``insert`` put after
    ``anchor`` (which its ``loop.py`` must hold once), and a scenario running it
    (``tmp_path/forge.toml``, no kills of its own); the scenario's path."""
    shutil.copytree(STARTER, tmp_path / "forge", ignore=shutil.ignore_patterns("__pycache__"))
    loop = tmp_path / "forge" / "loop.py"
    text = loop.read_text()
    assert text.count(anchor) == 1, anchor
    loop.write_text(text.replace(anchor, anchor + insert))
    scenario = tmp_path / "forge.toml"
    scenario.write_text('name = "forge"\n[target]\nkind = "python"\nfolder = "forge"\n'
                        'start = "loop:start"\nresume = "loop:resume"\n'
                        'history = "loop:history"\n')
    return scenario
