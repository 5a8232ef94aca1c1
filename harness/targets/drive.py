"""What the story needs from a scenario's target (``harness.story.workers``): each worker's
command line with its ``TargetContext`` written beside it, and the target's durable state
read back through the target's own API (its ``history`` function: LangGraph's
``get_state_history``, DBOS's ``list_workflow_steps``) after each worker and at the end
(``harness.story.workers.Workers.read_history``).

The ``history`` worker runs outside the kill controller (no failpoint channel in its
environment, so nothing it passes is a kill point), in a session of its own with a
deadline, and is reaped with its whole process group whatever happens. Given the
execution's launcher (the story's), it is started like the execution's own workers:
forked from the fork server that preloaded the target's frameworks
(``harness.launch.target_servers``; a fresh interpreter cost ~0.4-1.4 s a read, most of a
small target's execution), or, sealed, from the sealed server as the execution's uid
(``harness.launch.sealed.SealedLauncher``). Each fork is a new process with the context
file of its own execution: no state passes from one execution's read to another's.

A sealed execution (``TargetSeal``, an untrusted target graded as root) runs the target from
its root-owned copy, writes the context files where its uid can read and not change them,
and reads ``history`` as that uid too, under the same limits, in its sandbox, every process
of the uid killed after it; the output is read back bounded (``_MAX_OUTPUT``) and parsed
as untrusted JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Protocol

from harness.model import SRC, PythonTarget, Scenario, TargetRole, WorkerRole
from harness.targets.context import TargetContext

__all__ = ["HISTORY_DEADLINE_S", "HistoryLauncher", "TargetDriver", "TargetSeal",
           "target_role"]

#: Seconds the ``history`` worker may take (a framework import on a busy machine).
HISTORY_DEADLINE_S = 120.0

_ROLES = {WorkerRole.START: TargetRole.START, WorkerRole.RECHECK: TargetRole.RESUME,
          WorkerRole.RESUME: TargetRole.RESUME, WorkerRole.DECIDE: TargetRole.DECIDE}


def target_role(role: WorkerRole) -> TargetRole:
    """The target function a story worker of ``role`` calls: ``start`` → start,
    ``recheck`` and ``resume`` → resume (a recheck gets no ticket), ``decide`` → decide.

    Raises:
        ValueError: a role only the reference loop has (``takeover``, ``migrate``; the
            scenario's validation refuses them first).
    """
    if role not in _ROLES:
        raise ValueError(f"worker role {role!r} has no target function; allowed: "
                         + ", ".join(_ROLES))
    return _ROLES[role]


@dataclass(frozen=True)
class TargetSeal:
    """How a sealed execution runs its target (made by ``harness.run.execution``).

    Attributes:
        folder: the root-owned copy of the target's folder (``install_target``).
        fixtures: the root-owned copy of the fixtures (``TargetContext.fixtures``).
        share: ``(name, text) -> path``: a file the execution's uid can read, not change
            (``harness.sandbox.users.Sandbox.share``).
        argv: a target worker's command line → the same run as the execution's uid under
            its limits (``harness.launch.sealed.sealed_target_argv``).
        env: the environment a worker gets → the sealed one (``worker_env``).
        sweep: kill every process of the uid (after ``history``); returns their pids.
    """

    folder: Path
    fixtures: str
    share: Callable[[str, str], Path]
    argv: Callable[[list[str]], list[str]]
    env: Callable[[dict[str, str]], dict[str, str]]
    sweep: Callable[[], tuple[int, ...]]


class HistoryLauncher(Protocol):
    """What ``TargetDriver.history`` needs of a launcher (``harness.launch.launcher.Launcher``,
    which this package may not import): ``start`` returns a worker whose ``wait(deadline_s)``
    kills it at the deadline and returns its ``ExitInfo``."""

    def start(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str, index: int) -> Any:
        """Start ``argv``; see ``harness.launch.launcher.Launcher.start``."""


class TargetDriver:
    """The target of one execution.

    Args:
        scenario: a scenario whose ``target`` is set.
        workdir: the execution's folder (context files go there; the target's own durable
            state in ``workdir / "target"``).
        approvals_db: the approval queue's file the harness approves in.
        gateway_url: the harness's mock gateway.
        approvals_service: the harness's approval service the target's workers reach the
            records through (``TargetContext.approval_queue``), or ``None``.
        launcher: the execution's launcher; given, ``history`` starts its worker through
            it (forked from the preloaded server), its output in ``outdir``
            (``history.out``/``history.err``). ``None``: a fresh interpreter.
        launch_env: added to the ``history`` worker's environment with a ``launcher``
            (which fork server: ``harness.launch.target_servers.FRAMEWORKS_ENV``).
        outdir: where the ``history`` worker's output goes with a ``launcher`` (the
            execution's folder; default ``workdir``).

    Attributes:
        ticket: the ticket id the human's approval issued (set by the story), handed to
            every later ``resume``/``decide`` worker in ``TargetContext.ticket``.
        seal: a sealed execution's (see ``TargetSeal``), or ``None``.
    """

    def __init__(self, scenario: Scenario, workdir: Path, approvals_db: Path,
                 gateway_url: str, approvals_service: str | None = None,
                 seal: TargetSeal | None = None,
                 launcher: HistoryLauncher | None = None,
                 launch_env: dict[str, str] | None = None, outdir: Path | None = None
                 ) -> None:
        if scenario.target is None:
            raise ValueError(f"scenario {scenario.name!r} has no [target]")
        self.seal = seal
        self.launcher = launcher
        self.launch_env = dict(launch_env or {})
        self.outdir = outdir or workdir
        self.target: PythonTarget = (scenario.target if seal is None
                                     else replace(scenario.target, folder=seal.folder))
        self.workdir = workdir
        (workdir / "target").mkdir(parents=True, exist_ok=True)
        self.base = TargetContext(
            case_id=scenario.case_id, order_id=scenario.order_id, run_id="run-1",
            workdir=str(workdir / "target"), gateway_url=gateway_url,
            approvals_db=str(approvals_db), keys=scenario.idempotency_keys,
            options=dict(self.target.options), approvals_service=approvals_service)
        if seal is not None:  # the harness's fixtures, where the sealed uid may read them
            self.base = replace(self.base, fixtures=seal.fixtures)
        self.ticket: str | None = None
        #: the files the harness wrote into the workdir (contexts), oldest first: a power
        #: cut keeps them (``harness.story.workers``: written as if synced)
        self.written: list[Path] = []

    def has(self, role: TargetRole) -> bool:
        """Whether the target implements ``role``."""
        return self.target.has(role)

    def _context_file(self, name: str, ticket: str | None, from_seq: int | None = None
                      ) -> Path:
        text = replace(self.base, ticket=ticket, from_seq=from_seq).to_json()
        if self.seal is not None:  # never written as root into the uid's own folder
            return self.seal.share(f"{name}.context.json", text)
        path = self.workdir / f"{name}.context.json"
        path.write_text(text, encoding="utf-8")
        self.written.append(path)
        return path

    def argv(self, role: WorkerRole, index: int, from_seq: int | None = None) -> list[str]:
        """The command line of story worker ``index`` playing ``role`` (its context in
        ``worker-INDEX.context.json``; a ``recheck`` or ``start`` gets no ticket);
        ``from_seq``: resume from the ``from_seq``-th item of the target's history
        (``TargetContext.from_seq``).

        Raises:
            ValueError: see ``target_role``.
        """
        ticket = self.ticket if role in (WorkerRole.RESUME, WorkerRole.DECIDE) else None
        return self.target.argv(target_role(role),
                                self._context_file(f"worker-{index}", ticket, from_seq))

    def history(self, name: str = "history") -> tuple[tuple[object, ...] | None, str | None]:
        """The objects the target's ``history`` returned (its durable writes through its
        own API, oldest first; ``harness.judge.observers.target`` reads them), and why they
        could not be read (``None``: read). ``(None, None)``: the target has no
        ``history``. ``name``: of this read's context file and, with a launcher, its
        output (``NAME.out``/``NAME.err``); the story reads after each worker
        (``history-after-N``) and, if need be, once after the story (``history``), each
        read under a name of its own (a sealed context file is written once).

        Never raises for the target's failure: a non-zero exit, a deadline or malformed
        JSON becomes the reason. The process group is killed and reaped before return.
        """
        if not self.has(TargetRole.HISTORY):
            return None, None
        argv = self.target.argv(TargetRole.HISTORY, self._context_file(name, self.ticket))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
        if self.launcher is not None:
            out, err, late, returncode = self._forked(argv, env, name)
        else:
            out, err, late, returncode = self._spawned(argv, env)
        if late is not None:
            out, err = "", late
        if returncode != 0:
            last = err.strip().splitlines()[-1:] or [f"(no stderr; exit {returncode})"]
            return (), f"the target's history could not be read: {last[0]}"
        try:
            data = json.loads(out)
            if not isinstance(data, list):
                raise ValueError("expected a JSON list of snapshots")
            return tuple(data), None
        except ValueError as exc:
            return (), f"the target's history is malformed: {exc}"

    def _forked(self, argv: list[str], env: dict[str, str], name: str
                ) -> tuple[str, str, str | None, int]:
        """Run the ``history`` worker through ``launcher``, its output in ``NAME.out`` and
        ``NAME.err``: (stdout, stderr, why late or ``None``, return code)."""
        assert self.launcher is not None
        env |= self.launch_env
        out_path, err_path = self.outdir / f"{name}.out", self.outdir / f"{name}.err"
        try:
            worker = self.launcher.start(argv, env=env, cwd=str(self.workdir),
                                         stdout=str(out_path), stderr=str(err_path),
                                         index=_HISTORY_INDEX)
        except (OSError, ValueError) as exc:  # ForkServerError is an OSError
            return "", f"could not start: {exc}", None, 1
        info = worker.wait(HISTORY_DEADLINE_S)
        if info.leftovers:  # its group still has members, so its id is not reused yet
            _kill_group(worker.pid)
        if self.seal is not None:
            self.seal.sweep()  # anything of its uid that left the session
        late = f"passed its {HISTORY_DEADLINE_S:g} s deadline" if info.timed_out else None
        out, err = (_read_path(p) for p in (out_path, err_path))
        return out, err, late, info.returncode

    def _spawned(self, argv: list[str], env: dict[str, str]
                 ) -> tuple[str, str, str | None, int]:
        """Run the ``history`` worker as a fresh interpreter (no launcher given)."""
        if self.seal is not None:
            argv, env = self.seal.argv(argv), self.seal.env(env)
        # output to anonymous files, not pipes: a descendant that keeps a pipe open (a
        # daemon) would hold the read until the deadline; the exit is what is waited for
        with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
            proc = subprocess.Popen(argv, env=env, cwd=self.workdir, stdin=subprocess.DEVNULL,
                                    stdout=stdout, stderr=stderr, start_new_session=True)
            late = None
            try:
                proc.wait(timeout=HISTORY_DEADLINE_S)
            except subprocess.TimeoutExpired:
                late = f"passed its {HISTORY_DEADLINE_S:g} s deadline"
            finally:
                _kill_group(proc.pid)  # anything it left behind in its session
                proc.wait()
                if self.seal is not None:
                    self.seal.sweep()  # and anything of its uid that left the session
            out, err = (_read(f) for f in (stdout, stderr))
        return out, err, late, proc.returncode


#: Bytes of the ``history`` worker's output read at most (its JSON and its stderr).
_MAX_OUTPUT = 64 << 20


#: The launcher index of a ``history`` worker (story workers count up from 0).
_HISTORY_INDEX = 10_000


def _read(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read(_MAX_OUTPUT).decode("utf-8", errors="replace")


def _read_path(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return _read(f)
    except OSError:
        return ""


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
