"""``SealedLauncher``: one execution's workers, started as the execution's own user.

Made per execution around a ``harness.sandbox.users.Sandbox``: every worker is a fresh
interpreter running ``harness.sandbox.boot`` (limits, then ``setresuid`` to the sandbox's uid,
then the implementation), in its own session, with the sandbox folder as its cwd, ``HOME``
and ``TMPDIR``. The harness is each worker's parent and reaps it itself (``Popen.wait``):
no report about an exit comes from anything the implementation could touch.

Whenever the last running worker of the execution has been reaped, every other process of
the uid — a double-forked, re-sessioned daemon included — is SIGKILLed and named in that
worker's ``leftovers`` (so ``no_process_left`` fails), and before the next worker starts
the sandbox folder is cleared of anything that could redirect a write of the harness
(``Sandbox.sanitize``; what it removes is reported as tampering).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
from collections.abc import Callable

from harness.launch.fork import ForkLauncher, ForkWorker
from harness.launch.fork_conn import ForkServerError
from harness.launch.processes import (
    REGISTRY,
    STOPPING,
    ExitInfo,
    HarnessStopping,
    PopenWorker,
    Worker,
)
from harness.launch.sealed_env import WORKER_ENV, sealed_env
from harness.model.plan import BOOT, SRC
from harness.sandbox.users import Sandbox

__all__ = ["TARGET_WORKER", "WORKER_ENV", "SealedForkWorker", "SealedLauncher", "SealedWorker",
           "Tamper", "sealed_argv", "sealed_env", "sealed_target_argv", "worker_env"]

#: The module a target's worker runs (``harness.model.target.PythonTarget.argv``).
TARGET_WORKER = "harness.targets.worker"


def worker_env(env: dict[str, str], sandbox: Sandbox, fixtures: str) -> dict[str, str]:
    """A sealed worker's whole environment: ``sealed_env(env)`` with ``PYTHONPATH`` the
    harness's folder, ``HOME``/``TMPDIR`` its sandbox and ``SHOPOPS_FIXTURES`` the
    root-owned copy of the fixtures."""
    home = str(sandbox.path)
    return {**sealed_env(env), "PYTHONPATH": SRC, "HOME": home, "TMPDIR": home,
            "SHOPOPS_FIXTURES": fixtures}


def sealed_target_argv(argv: list[str], uid: int, limits: tuple[int, int, int, int],
                       code_dir: str) -> list[str]:
    """A target worker's command line (``python -m harness.targets.worker ROLE FOLDER
    MODULE:FUNCTION CONTEXT``) run through ``harness.sandbox.boot`` under ``limits``
    (memory MiB, file MiB, CPU s, processes) as ``uid``.

    Raises:
        ValueError: not a target worker's command line, or its FOLDER is not ``code_dir``
            (the root-owned copy: the original is never run sealed).
    """
    if argv[1:3] != ["-m", TARGET_WORKER] or len(argv) != 7 or argv[4] != code_dir:
        raise ValueError(f"not a sealed target worker's command line: {argv}")
    return [argv[0], *BOOT, *(str(n) for n in limits), str(uid), "-", TARGET_WORKER,
            *argv[3:]]


def sealed_argv(argv: list[str], uid: int, code_dir: str) -> list[str]:
    """``argv`` from ``Sut.argv`` (``harness.model.plan``) with the boot's uid and code
    folder filled in.

    Raises:
        ValueError: ``argv`` is not an untrusted worker's command line.
    """
    n = 1 + len(BOOT)
    if tuple(argv[1:n]) != BOOT or argv[n + 4:n + 6] != ["-1", "-"]:
        raise ValueError(f"not an untrusted worker's command line: {argv[:n + 6]}")
    return [*argv[:n + 4], str(uid), code_dir, *argv[n + 6:]]


Tamper = Callable[[str], object]


class _Sweeping(Worker):
    """A worker of a sealed execution; ``wait`` also sweeps the uid (see the module)."""

    launcher: SealedLauncher

    def wait(self, deadline_s: float) -> ExitInfo:
        """``Worker.wait``, then, if no other worker of the execution runs, kill every
        other process of the uid and add it to ``leftovers``."""
        if self._exit is not None:
            return self._exit
        info = super().wait(deadline_s)
        extra = self.launcher._finished(self)
        if extra:
            info = dataclasses.replace(
                info, leftovers=tuple(dict.fromkeys((*info.leftovers, *extra))))
            self._exit = info
        return info


class SealedWorker(_Sweeping, PopenWorker):
    """A sealed worker started as a fresh interpreter, reaped by ``Popen.wait``."""


class SealedForkWorker(_Sweeping, ForkWorker):
    """A sealed worker forked by the sealed fork server (``harness.forkserver.sealed``)."""


class SealedLauncher:
    """Starts an untrusted implementation's workers inside ``sandbox``.

    Args:
        sandbox: the execution's sandbox (its owner closes it).
        code_dir: the root-owned copy of the implementation
        (``harness.sandbox.users.install_code``). fixtures: the root-owned copy of the harness's
        fixtures (``SHOPOPS_FIXTURES``). server: a ``ForkLauncher(sealed=True)`` shared by the
        implementation's executions:     workers are forked from it instead of started as fresh
        interpreters. on_tamper: called with one line for each thing found that the implementation
        had     no business doing (a symlink planted where the harness writes).
        limits: a target's (memory MiB, file MiB, CPU s, processes): given, ``argv`` is a
        target worker's (``sealed_target_argv``), forked from ``server`` (one preloaded with
        its frameworks) or, when there is none or it cannot start, a fresh interpreter.
    """

    name = "sealed"

    def __init__(self, sandbox: Sandbox, code_dir: str, on_tamper: Tamper,
                 fixtures: str, server: ForkLauncher | None = None,
                 limits: tuple[int, int, int, int] | None = None) -> None:
        self.server = server
        self.limits = limits
        self.sandbox = sandbox
        self.code_dir = code_dir
        self.fixtures = fixtures
        self.on_tamper = on_tamper
        self._lock = threading.Lock()
        self._live: set[Worker] = set()

    def start(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str, index: int) -> Worker:
        """See ``harness.launch.launcher.Launcher.start``; ``cwd`` is replaced by the sandbox.

        Raises:
            HarnessStopping: the harness is stopping.
            ValueError: ``argv`` is not an untrusted worker's (``harness.model.plan.Sut.argv``).
            OSError: the output files or the process could not be created.
        """
        if STOPPING.is_set():
            raise HarnessStopping("the harness is stopping; no new worker is started")
        home = str(self.sandbox.path)
        env = worker_env(env, self.sandbox, self.fixtures)
        with self._lock:
            if not self._live:
                for line in self.sandbox.sanitize():
                    self.on_tamper(f"removed from the sandbox before worker {index}: {line}")
            worker: _Sweeping
            self.sandbox.started()
            if self.limits is not None:  # a target's worker: through the boot
                argv = sealed_target_argv(argv, self.sandbox.uid, self.limits, self.code_dir)
            if self.server is not None:
                try:
                    worker = self.server.start_sealed(  # type: ignore[assignment]
                        argv, uid=self.sandbox.uid, code_dir=self.code_dir, env=env,
                        cwd=home, stdout=stdout, stderr=stderr, index=index,
                        worker=SealedForkWorker)
                except ForkServerError:
                    if self.limits is None:
                        raise
                    self.server = None  # a target's server would not start: spawn
                else:
                    worker.launcher = self
                    self._live.add(worker)
                    return worker
            if self.limits is None:
                argv = sealed_argv(argv, self.sandbox.uid, self.code_dir)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(stdout, flags, 0o644)
            try:
                err = os.open(stderr, flags, 0o644)
                try:
                    popen = subprocess.Popen(argv, env=env, cwd=home, stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=err, start_new_session=True,
                                             close_fds=True)
                finally:
                    os.close(err)
            finally:
                os.close(out)
            worker = SealedWorker(popen, index)
            worker.launcher = self
            self._live.add(worker)
        REGISTRY.add(worker)
        return worker

    def _finished(self, worker: Worker) -> tuple[int, ...]:
        with self._lock:
            self._live.discard(worker)
            if self._live:
                return ()
            return self.sandbox.kill_all()

    def close(self) -> None:
        """Nothing to release: the sandbox belongs to the execution."""
