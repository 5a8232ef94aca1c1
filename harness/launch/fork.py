"""``ForkLauncher``: workers forked by a pre-imported fork server (``harness.forkserver.server``).

One fork server per launcher, started lazily at the first ``start`` in its own session
(``docs/design.md``, "Speed"): a worker start costs a ``fork()`` instead of an interpreter start and
the imports. Each worker is still a real OS process in its own session; ``kill()``
SIGKILLs its process group straight from the harness, from any thread, exactly as for a
spawned worker.

Each ``start`` opens a connection of its own to the server, so parallel executions share
the server without sharing a socket: the connection carries the request, the ``started``
reply and, later, the ``exit`` report that ``wait`` blocks on. Only the server reaps the
child (``waitpid``), and reports ``os.waitstatus_to_exitcode`` (-9 exactly for SIGKILL).

The server always goes away with the harness: ``close()``, interpreter exit (``atexit``)
and SIGINT/SIGTERM (the runner's and pytest plugin's ``finally``) close the launcher; a
harness killed with SIGKILL closes the control connection implicitly, and the server then
SIGKILLs its children and exits.

Only the reference loop (``[sys.executable, "-m", "shopops", ...]``, importing the
``shopops`` the server preloaded) is forked; anything else — a foreign implementation —
goes to ``fallback`` (a fresh interpreter by default) or, with ``fallback=None``, is
refused with ``ValueError`` saying why.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from harness.forkserver.server import kill_worker
from harness.launch import power
from harness.launch.fork_conn import Conn, ForkServerError
from harness.launch.fork_packages import package_root as _package_root
from harness.launch.fork_packages import shadowing_copy as _shadowing_copy
from harness.launch.processes import REGISTRY, STOPPING, HarnessStopping, Worker
from harness.launch.sealed_env import sealed_env
from harness.launch.spawn import SpawnLauncher

__all__ = ["DEFAULT_MODULES", "ForkLauncher", "ForkWorker"]

#: Modules ``ForkLauncher`` forks by default: the reference loop only.
DEFAULT_MODULES = ("shopops",)
_SRC = str(Path(__file__).resolve().parents[2])
_DEFAULT: Any = object()


class ForkWorker(Worker):
    """A worker forked by the fork server; its exit status arrives on ``conn``.

    Started by a ``ForkLauncher(hold=True)``, the child waits at a start gate until
    ``release()`` (or the first ``wait()``): a driver attaches the pid to its kill
    controller first, then releases it.
    """

    def __init__(self, pid: int, index: int, conn: Conn, *, held: bool = False) -> None:
        super().__init__(pid, index)
        self._conn = conn
        self._read_lock = threading.Lock()
        self._returncode: int | None = None
        self._released = not held
        self._release_lock = threading.Lock()

    def release(self) -> None:
        """Let the child run its code (idempotent; ``wait`` calls it)."""
        with self._release_lock:
            if self._released:
                return
            self._released = True
            try:
                self._conn.send({"op": "go"})
            except OSError:
                pass  # the server is gone: the next read says so

    def kill(self) -> None:
        """SIGKILL the worker's process group (or the worker, right after the fork); a no-op
        once the server reported its exit (the pid may have been reused since)."""
        self._killed.set()
        if self._returncode is None and self._exit is None:
            kill_worker(self.pid)

    def _reap(self, timeout_s: float | None) -> int | None:
        self.release()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        # another thread (``REGISTRY.reap_all``) may be reading the same report
        if not self._read_lock.acquire(timeout=-1 if timeout_s is None else timeout_s):
            return None
        try:
            while self._returncode is None:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    message = self._conn.read(remaining)
                except TimeoutError:
                    return None
                except (OSError, ValueError):
                    message = None
                if message is None:
                    self._lost()
                if message.get("op") == "exit" and message.get("pid") == self.pid:
                    self._returncode = int(message["returncode"])
                    self._conn.close()
            return self._returncode
        finally:
            self._read_lock.release()

    def _lost(self) -> NoReturn:
        self.kill()
        self._conn.close()
        REGISTRY.discard(self)
        raise ForkServerError(f"the fork server went away before it reported the exit of "
                              f"worker {self.index} (pid {self.pid}); its group was SIGKILLed")


def _with_power_shim(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the power-cut shim preloaded (``harness.launch.power``): a forked worker
    never execs, so the shim must be in the server already; it stays inert in every worker
    whose environment does not name a state folder. Without a C compiler the server starts
    without it, and a power-cut execution fails to start its workers with the reason."""
    try:
        shim = str(power.shim_path())
    except power.PowerUnavailable:
        return env
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p != shim]
    return {**env, "LD_PRELOAD": ":".join([shim, *preload])}


class _Server:
    """The fork server process, its socket folder and the control connection."""

    def __init__(self, code_path: str | None = None, sealed: bool = False,
                 preload: Sequence[str] = ()) -> None:
        """Start the server and greet it, without waiting for its answer (``handshake``).

        Raises:
            OSError: the process or its socket could not be made.
            ForkServerError: it could not be greeted.
        """
        self.dir = tempfile.mkdtemp(prefix="shopops-fs-")
        self.path = os.path.join(self.dir, "fs.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.path)
            listener.listen(128)
            # a sealed server holds nothing of the grader's environment a worker may not see:
            # its children's /proc/self/environ is the server's (harness.launch.sealed_env)
            env = {k: v for k, v in (sealed_env(os.environ) if sealed else os.environ).items()
                   if not k.startswith("SHOPOPS_")}
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (code_path, _SRC, env.get("PYTHONPATH")) if p)
            env = _with_power_shim(env)
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.forkserver.server", "--fd", str(listener.fileno()),
                 self.path, "--parent", str(os.getpid()), *(["--sealed"] if sealed else []),
                 *(["--preload", ",".join(preload)] if preload else [])],
                pass_fds=(listener.fileno(),), env=env, cwd=code_path or _SRC,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            )
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        finally:
            listener.close()
        self.pid = self.proc.pid
        self.root: str | None = None
        self.ready = False  # answered its hello: preloaded, serving
        try:
            # the listener was bound before the server started: the hello waits in its
            # backlog until the server, done with its imports, accepts it
            self.control = Conn(self.path)
            self.control.send({"op": "hello"})
        except BaseException as exc:  # a signal too (begin() runs on the main thread)
            why = self._stop()
            if isinstance(exc, OSError):
                raise ForkServerError(f"the fork server did not start: {exc}\n{why}") from None
            raise

    def handshake(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the answer to the hello; idempotent.

        Raises:
            ForkServerError: it did not answer ``ready`` (its stderr is in the message);
                the server is stopped.
        """
        if self.ready:
            return
        try:
            reply = self.control.read(timeout_s)
            if reply is None or reply.get("op") != "ready" or reply.get("pid") != self.pid:
                raise ForkServerError(f"fork server answered {reply!r} to hello")
        except (OSError, ValueError) as exc:
            why = self._stop()
            raise ForkServerError(f"the fork server did not start: {exc}\n{why}") from None
        self.root = str(reply.get("root"))
        self.ready = True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _stop(self) -> str:
        """Stop the server (kill after 10 s) and clean up; returns its stderr."""
        control = getattr(self, "control", None)
        if control is not None:
            control.close()  # end of file: the server kills its children and exits
        if not self.ready:  # still importing: it has no children yet,
            try:  # and would read the end of file only once done
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        err = b""
        if self.proc.stderr is not None:
            err = self.proc.stderr.read()
            self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return err.decode("utf-8", "replace")

    def close(self) -> None:
        self._stop()


class ForkLauncher:
    """Workers forked from one pre-imported fork server (``name = "fork"``).

    Args:
        modules: the ``python -m MODULE`` argvs that are forked (default: ``shopops``).
        fallback: the launcher for any other argv (default: a ``SpawnLauncher``); ``None``
            refuses it with ``ValueError``.
        start_timeout_s: seconds the server may take to start (its imports).
        code_path: a folder put first on the server's path, so that the loop it preloads
            and forks is the one in that folder (a trusted variant such as a mutant; a
            foreign implementation is never forked: its argv goes to ``fallback``).
        degrade: if the server cannot start (a preloaded module started a thread, a
            start-up error), say why in ``unavailable`` and start every worker through
            ``fallback`` instead of failing (for the target server: spawning is slower,
            never different).
        preload: more modules the server imports before it forks (``harness.forkserver.worker
            .TARGET_PRELOAD`` for target workers); one that is not installed is skipped.
        hold: each child waits until ``ForkWorker.release()`` or its first ``wait()``
            before it runs any of the module's code (default), so the driver can attach
            its pid to the kill controller first (``harness.story.engine`` does: attach, then
            release); ``False``: it runs at once, like a spawned worker.
    """

    name = "fork"

    def __init__(self, *, modules: Sequence[str] = DEFAULT_MODULES,
                 fallback: SpawnLauncher | ForkLauncher | None = _DEFAULT,
                 start_timeout_s: float = 60.0, hold: bool = True,
                 code_path: str | None = None, sealed: bool = False,
                 preload: Sequence[str] = (), degrade: bool = False) -> None:
        self.code_path = code_path
        self.sealed = sealed
        self.preload = tuple(preload)
        #: where the server imports ``shopops`` from: the first of its path that has it
        self.root = None if sealed else _package_root("shopops", (code_path, _SRC))
        self.modules = tuple(modules)
        self.hold = hold
        self.fallback: SpawnLauncher | ForkLauncher | None = (
            SpawnLauncher() if fallback is _DEFAULT else fallback)
        self.degrade = degrade
        self.unavailable: str | None = None  # degrade: why the server could not start
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._closed = False
        with _LIVE_LOCK:
            _LIVE.add(self)

    def forks(self, argv: Sequence[str], env: dict[str, str] | None = None,
              cwd: str | None = None) -> str | None:
        """Why ``argv`` is not forked here, or ``None`` if it is: it must be
        ``[sys.executable, "-m", MODULE, ...]`` for one of ``modules``, and with ``env`` and
        ``cwd`` a fresh interpreter must import the same ``shopops`` the server preloaded
        (not another one first on ``PYTHONPATH`` or in ``cwd``, e.g. a student's)."""
        if not (len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m"
                and argv[2] in self.modules):
            return (f"only python -m {'/'.join(self.modules)} with {sys.executable} is "
                    f"forked; got {list(argv)!r}")
        shadow = _shadowing_copy(argv[2], env or {}, cwd or os.getcwd(), self.root)
        return (f"{argv[2]} would be imported from {shadow}, not {self.root}"
                if shadow else None)

    def ready(self) -> int:
        """Start the fork server now if none runs (otherwise the first worker starts it),
        and return its pid: a benchmark times executions without the one-time start-up.

        Raises:
            ForkServerError: the server could not start (its imports failed, or it imported
                another ``shopops`` than ``root``).
            RuntimeError: the launcher is closed.
        """
        return self._ensure_server().pid

    @property
    def server_pid(self) -> int | None:
        """The fork server's pid, or ``None`` before the first start and after ``close``."""
        server = self._server
        return server.pid if server is not None else None

    @property
    def socket_path(self) -> str | None:
        """The server's Unix socket (in a private folder removed with the server), or
        ``None`` while no server runs."""
        server = self._server
        return server.path if server is not None else None

    def start(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str, index: int) -> Worker:
        """See ``harness.launch.launcher.Launcher.start``.

        Raises:
            ValueError: ``argv`` is not forked here and there is no fallback.
            HarnessStopping: ``harness.launch.processes.STOPPING`` is set.
            ForkServerError: the server could not be started or refused the request;
                an ``OSError`` with the ``errno`` of a missing ``cwd`` or an output file that
                cannot be opened.
        """
        why_not = self.forks(argv, env, cwd)
        if why_not is not None:
            if self.fallback is None:
                raise ValueError(f"the fork launcher cannot start this worker: {why_not}")
            return self.fallback.start(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr,
                                       index=index)
        if STOPPING.is_set():
            raise HarnessStopping("the harness is stopping; no new worker is started")
        if self.degrade and self.fallback is not None:
            if self.unavailable is None:
                try:
                    self._ensure_server()
                except ForkServerError as exc:
                    self.unavailable = str(exc)
            if self.unavailable is not None:
                return self.fallback.start(argv, env=env, cwd=cwd, stdout=stdout,
                                           stderr=stderr, index=index)
        return self._request({"module": argv[2], "args": list(argv[3:])}, env=env, cwd=cwd,
                             stdout=stdout, stderr=stderr, index=index)

    def start_sealed(self, boot: Sequence[str], *, uid: int, code_dir: str,
                     env: dict[str, str], cwd: str, stdout: str, stderr: str, index: int,
                     worker: type[ForkWorker]) -> ForkWorker:
        """Fork an untrusted worker (``sealed=True`` only; ``harness.forkserver.sealed``) from
        ``boot``, the worker's ``harness.sandbox.boot`` command line (``Sut.argv``): its
        limits and module, run as ``uid`` with ``code_dir`` first on its path. The worker
        object is made by ``worker``.

        Raises:
            ValueError: not a sealed launcher, or ``boot`` is not a boot command line.
            HarnessStopping, ForkServerError: as ``start``.
        """
        if not self.sealed or list(boot[1:5]) != ["-P", "-s", "-m", "harness.sandbox.boot"]:
            raise ValueError(f"not a sealed worker for this launcher: {list(boot[:5])}")
        if STOPPING.is_set():
            raise HarnessStopping("the harness is stopping; no new worker is started")
        limits = [int(n) for n in boot[5:9]]
        return self._request({"module": boot[11], "args": list(boot[12:]),
                              "sealed": {"uid": uid, "code_dir": code_dir,
                                         "limits": limits}},
                             env=env, cwd=cwd, stdout=stdout, stderr=stderr, index=index,
                             worker=worker)

    def _request(self, what: dict[str, Any], *, env: dict[str, str], cwd: str, stdout: str,
                 stderr: str, index: int, worker: type[ForkWorker] | None = None
                 ) -> ForkWorker:
        server = self._ensure_server()
        try:
            conn = Conn(server.path)
        except (ConnectionRefusedError, FileNotFoundError):
            # nothing listens: the server is dying (a SIGKILLed process closes its socket
            # before it can be reaped, so alive() still said yes) — replace it, once
            self._replace(server)
            conn = Conn(self._ensure_server().path)
        try:
            conn.send({"op": "start", **what,
                       "env": dict(env), "cwd": os.path.abspath(cwd), "hold": self.hold,
                       "stdout": os.path.abspath(stdout), "stderr": os.path.abspath(stderr)})
            reply = conn.read(30.0)
        except BaseException:
            conn.close()
            raise
        if reply is None or reply.get("op") != "started":
            conn.close()
            if reply is not None and reply.get("op") == "error":
                raise ForkServerError(int(reply.get("errno") or 0), str(reply.get("error")))
            raise ForkServerError(f"the fork server did not start the worker: {reply!r}")
        made = (worker or ForkWorker)(int(reply["pid"]), index, conn, held=self.hold)
        REGISTRY.add(made)
        return made

    def _ensure_server(self) -> _Server:
        with self._lock:
            if self._closed:
                raise RuntimeError("ForkLauncher is closed")
            if self._server is not None and not self._server.alive():
                self._server.close()  # died (killed from outside): start a fresh one
                self._server = None
            if self._server is None:
                self._server = self._new_server()
            server = self._server
            if not server.ready:
                try:
                    server.handshake(self.start_timeout_s)
                except ForkServerError:
                    self._server = None
                    raise
                if self.root is not None and server.root != self.root:
                    self._server = None
                    server.close()  # it would fork another loop than forks() vetted
                    raise ForkServerError(f"the fork server imported shopops from "
                                          f"{server.root}, not {self.root}")
            return server

    def begin(self) -> None:
        """Start the fork server now without waiting for it: its imports run beside the
        caller's own work (``shopops-chaos run`` loads and plans meanwhile); the first
        worker, or ``ready()``, waits for it. Nothing happens if one runs or is starting,
        and a server that cannot start says why at the first worker, not here.

        Raises:
            RuntimeError: the launcher is closed.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("ForkLauncher is closed")
            if self._server is None:
                try:
                    self._server = self._new_server()
                except (OSError, ForkServerError):
                    pass  # the first worker tries again, and says why

    def _new_server(self) -> _Server:
        """This launcher's server, started and greeted, not yet waited for."""
        return _Server(self.code_path, self.sealed, self.preload)

    def _replace(self, server: _Server) -> None:
        """Stop ``server`` (if it is still this launcher's) so that the next
        ``_ensure_server`` starts another: it waits for the dying server's exit (at most
        ``_Server._stop``'s 10 s, then SIGKILL)."""
        with self._lock:
            if self._server is server:
                self._server = None
                server.close()

    def close(self) -> None:
        """Stop the fork server (it SIGKILLs and reaps any worker still running). Idempotent."""
        with self._lock:
            self._closed = True
            server, self._server = self._server, None
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if server is not None:
            server.close()
        if self.fallback is not None:
            self.fallback.close()

    def __enter__(self) -> ForkLauncher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Launchers not yet closed; whatever is left is closed at interpreter exit.
_LIVE: set[ForkLauncher] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _close_all() -> None:
    with _LIVE_LOCK:
        launchers = list(_LIVE)
    for launcher in launchers:
        launcher.close()
