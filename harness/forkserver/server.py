"""The fork server: one pre-imported, single-threaded process that forks ShopOps workers.

``harness.launch.fork.ForkLauncher`` starts it as ``python -m harness.forkserver.server --fd N
SOCKET_PATH`` in its own session, handing it the already listening Unix socket (fd ``N``,
bound at ``SOCKET_PATH``). It imports everything a worker needs (``PRELOAD``) before it
accepts a connection, never starts a thread, and then gives each request a child of its
own: the interpreter start-up and the imports are paid once, a worker start costs a
``fork()`` (``docs/design.md``, "Speed") — made ahead of the request: the *spare* child,
forked while the last worker runs, waits on a socket pair for its request and output files
(``docs/design.md``, "The fork server's spare child"). The worker is still a real OS
process in its own session, SIGKILLed from outside by the harness.

Protocol: JSON lines over the socket.

- The launcher's first connection is the *control* connection: ``{"op": "hello"}`` →
  ``{"op": "ready", "pid": ..., "root": ...}`` (``root``: the folder it imported
  ``shopops`` from). Its end of file (the launcher closed, or the harness
  died, even by SIGKILL) makes the server SIGKILL every child's process group, reap them
  and exit; so do SIGTERM and SIGINT.
- Every worker gets a connection of its own: ``{"op": "start", "module": "shopops", "args":
  [...], "env": {...}, "cwd": ..., "stdout": PATH, "stderr": PATH}`` → ``{"op": "started",
  "pid": ...}`` once the spare child has its request (until the child's ``setsid`` there is no
  group ``pid``: ``kill_worker`` then signals the pid) or ``{"op": "error", "errno": ...,
  "error": ...}`` (like ``Popen``: a missing ``cwd``, an output file that cannot be opened).
  With ``"hold": true`` the child waits at a start gate until ``{"op": "go"}`` arrives on the
  same connection (so a driver can route the worker's failpoint hits by pid before the first
  one: a forked child reaches its first labelled point ~15 ms after the fork, a fresh
  interpreter only after its imports); without it the gate opens at once. Later ``{"op": "exit",
  "pid": ..., "returncode": ...}`` with ``os.waitstatus_to_exitcode`` of the status the server
  reaped (-9 for SIGKILL). If that connection closes before the exit, the child's process group
  is SIGKILLed.

The child (``_become_worker``): ``os.setsid()``; drops every descriptor and signal handler
of the server; waits for its request; stdin from ``/dev/null``, stdout/stderr onto the given
files; ``chdir``; replaces ``os.environ`` entirely with the given env (and ``sys.path``
starts with ``cwd`` and the env's ``PYTHONPATH``, as in a fresh ``python -m``); re-arms
failpoints from that env (fresh counters, no channel connection), drops the default
services; runs the module as ``__main__`` (``runpy``, what ``python -m`` does) and leaves
with ``os._exit`` after flushing stdio: ``SystemExit`` gives its code, an uncaught exception
a traceback on stderr and 1.

Not shared with a fresh interpreter, by construction: the hash seed (``PYTHONHASHSEED``) and
other start-up-only settings of the env (``-X`` options, ``PYTHON*`` flags) are the server's.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from harness.forkserver import sealed as sealed_fork
from harness.forkserver.worker import preload, run_module, shopops_root
from harness.sandbox.boot import name_process

__all__ = ["HELLO_TIMEOUT_S", "ForkServer", "kill_worker", "main"]

#: Seconds the server waits for its control connection before it gives up and exits.
HELLO_TIMEOUT_S = 60.0
#: Seconds between two looks, until the hello arrives, at whether the harness still lives.
_PARENT_POLL_S = 0.1
_KILL_WAIT_S = 10.0


class _Conn:
    """One accepted connection: its socket, unread bytes, and the child it asked for."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.control = False
        self.child: int | None = None
        self.gate: int | None = None  # write end of the child's start gate
        self.open = True

    def send(self, message: dict[str, Any]) -> None:
        if not self.open:
            return
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            self.open = False  # the peer went away; its EOF is handled by the loop


class ForkServer:
    """The server loop over the listening socket ``listener`` (single thread)."""

    def __init__(self, listener: socket.socket, path: str | None = None,
                 sealed: bool = False, parent: int | None = None) -> None:
        self.sealed = sealed  # harness.forkserver.sealed: untrusted workers, shopops not loaded
        #: the harness that started it: until its hello arrives, the server leaves once it is
        #: no longer its parent (a harness killed between the start and the hello)
        self.parent = parent
        self.listener = listener
        self.path = path
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.conns: dict[int, _Conn] = {}
        self.children: dict[int, _Conn | None] = {}
        self.stopping = False
        self.controlled = False
        self.started = time.monotonic()
        #: the child forked ahead of the next request: (pid, the server's end of its socket)
        self.spare: tuple[int, socket.socket] | None = None
        self.want_spare = False  # fork one when nothing else waits
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.defaults = {sig: signal.getsignal(sig)
                         for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT)}
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _ignore)  # a Python handler, so the wakeup fd is written
        signal.signal(signal.SIGTERM, _exit_on_signal)
        signal.signal(signal.SIGINT, _exit_on_signal)
        self.selector.register(self.listener, selectors.EVENT_READ, self._accept)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self._reap)

    # -- the loop -----------------------------------------------------------------------
    def serve(self) -> int:
        """Serve until the control connection closes (or SIGTERM/SIGINT); returns 0."""
        try:
            while not self.stopping:
                timeout = None
                if not self.controlled:
                    timeout = self.started + HELLO_TIMEOUT_S - time.monotonic()
                    if timeout <= 0 or (self.parent is not None
                                        and os.getppid() != self.parent):
                        break  # nobody will greet it: its harness is gone (found by a user)
                    timeout = min(timeout, _PARENT_POLL_S)
                if self.want_spare and self.spare is None:
                    timeout = 0  # a spare is wanted: forked as soon as nothing waits
                events = self.selector.select(timeout)
                for key, _ in events:
                    key.data(key.fileobj)
                if not events and self.want_spare and not self.stopping:
                    self.want_spare = False
                    if self.spare is None:
                        self._fork_spare()
        finally:
            self.shutdown()
        return 0

    def shutdown(self) -> None:
        """SIGKILL every child's process group, reap them, report, close everything."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut this short
        for pid in list(self.children):
            kill_worker(pid)
        deadline = time.monotonic() + _KILL_WAIT_S
        while self.children and time.monotonic() < deadline:
            if not self._reap_once():
                time.sleep(0.002)  # SIGKILLed: gone within a few ms (unless stuck in D state)
        for conn in list(self.conns.values()):
            self._close(conn)
        if self.spare is not None:
            self.spare[1].close()
            self.spare = None
        self.selector.close()
        self.listener.close()
        if self.path:
            for remove in (os.unlink, os.rmdir):  # rmdir only succeeds on an empty folder
                try:
                    remove(self.path)
                except OSError:
                    break
                self.path = os.path.dirname(self.path)

    # -- callbacks ----------------------------------------------------------------------
    def _accept(self, _: object) -> None:
        try:
            sock, _addr = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.settimeout(5.0)  # replies are tiny; a peer that stops reading is dropped
        conn = _Conn(sock)
        self.conns[sock.fileno()] = conn
        self.selector.register(sock, selectors.EVENT_READ, self._readable)

    def _readable(self, sock: socket.socket) -> None:
        conn = self.conns[sock.fileno()]
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            data = b""
        if not data:
            self._eof(conn)
            return
        conn.buf += data
        while b"\n" in conn.buf and conn.open:
            line, _, rest = bytes(conn.buf).partition(b"\n")
            conn.buf = bytearray(rest)
            try:
                message = json.loads(line)
                op = message["op"]
            except (ValueError, KeyError, TypeError):
                conn.send({"op": "error", "errno": errno.EINVAL, "error": "bad request"})
                continue
            if op == "hello":
                conn.control = self.controlled = True
                conn.send({"op": "ready", "pid": os.getpid(),
                           "root": None if self.sealed else shopops_root()})
            elif op == "start":
                self._start(conn, message)
            elif op == "go":
                self._release(conn)
            else:
                conn.send({"op": "error", "errno": errno.EINVAL, "error": f"unknown op {op!r}"})

    def _eof(self, conn: _Conn) -> None:
        if conn.control:
            self.stopping = True
        if conn.child is not None and conn.child in self.children:
            kill_worker(conn.child)  # nobody waits for it any more: no orphan
            self.children[conn.child] = None
        self._close(conn)

    def _release(self, conn: _Conn) -> None:
        """Open the child's start gate (``b"g"``); closing it unopened makes the child exit.
        The next spare is forked once nothing else waits: while this worker runs, not on its
        way."""
        gate, conn.gate = conn.gate, None
        if gate is not None:
            self.want_spare = True
            try:
                os.write(gate, b"g")
            except OSError:
                pass
            os.close(gate)

    def _close(self, conn: _Conn) -> None:
        conn.open = False
        if conn.gate is not None:
            os.close(conn.gate)
            conn.gate = None
        fd = conn.sock.fileno()
        if fd >= 0:
            self.selector.unregister(conn.sock)
            self.conns.pop(fd, None)
        conn.sock.close()

    def _reap(self, _: object) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass
        while self._reap_once():
            pass

    def _reap_once(self) -> bool:
        """Reap one exited child and report it; False when there is none (yet)."""
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return False
        conn = self.children.pop(pid, None)
        if self.spare is not None and self.spare[0] == pid:  # died unassigned
            self.spare[1].close()
            self.spare = None
        if conn is not None:
            if conn.gate is not None:
                os.close(conn.gate)
                conn.gate = None
            conn.send({"op": "exit", "pid": pid,
                       "returncode": os.waitstatus_to_exitcode(status)})
        return True

    # -- forking ------------------------------------------------------------------------
    def _start(self, conn: _Conn, req: dict[str, Any]) -> None:
        try:
            args, env, cwd = req["args"], req["env"], req["cwd"]
            module = req.get("module", "shopops")
            if self.sealed:  # validated here, so that a bad one is this request's error
                sealed_fork.SealedStart.from_request(req["sealed"])
            if not (isinstance(args, list) and all(isinstance(a, str) for a in args)
                    and isinstance(env, dict) and isinstance(module, str)
                    and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
                raise TypeError("args must be a list of str, env a dict of str")
            if conn.child is not None:
                raise ValueError("one worker per connection")
            if not os.path.isdir(cwd):
                raise FileNotFoundError(errno.ENOENT, "no such directory", cwd)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            if self.sealed:  # root opens them: never through a symlink, as a spawn does
                flags |= os.O_NOFOLLOW
            out = os.open(req["stdout"], flags, 0o666)
            try:
                err = os.open(req["stderr"], flags, 0o666)
            except OSError:
                os.close(out)
                raise
        except OSError as exc:
            conn.send({"op": "error", "errno": exc.errno, "error": str(exc)})
            return
        except (KeyError, TypeError, ValueError) as exc:
            conn.send({"op": "error", "errno": errno.EINVAL, "error": f"bad request: {exc}"})
            return
        assignment = {"module": module, "args": args, "env": env, "cwd": cwd,
                      "sealed": req["sealed"] if self.sealed else None}
        try:
            pid, gate = self._assign(assignment, out, err)
        except OSError as exc:
            conn.send({"op": "error", "errno": exc.errno, "error": f"no child: {exc}"})
            return
        finally:
            os.close(out)
            os.close(err)
        self.children[pid] = conn
        conn.child, conn.gate = pid, gate
        if not req.get("hold"):
            self._release(conn)
        conn.send({"op": "started", "pid": pid})

    # -- the spare child ----------------------------------------------------------------
    def _assign(self, assignment: dict[str, Any], out: int, err: int) -> tuple[int, int]:
        """Hand the spare child (forked now if there is none) its worker's request and
        output files; its pid and the server's end of its socket, the start gate.

        Raises:
            OSError: no child could be forked, or two spares in a row died unassigned.
        """
        payload = json.dumps(assignment).encode() + b"\n"
        for attempt in (1, 2):
            if self.spare is None:
                self._fork_spare(leave=(out, err))
            assert self.spare is not None
            pid, sock = self.spare
            self.spare = None
            try:
                socket.send_fds(sock, [b"A"], [out, err])
                sock.sendall(payload)
            except OSError:
                sock.close()  # it died unassigned (its exit is reaped and not reported)
                if attempt == 2:
                    raise
                continue
            return pid, sock.detach()
        raise AssertionError("unreachable")

    def _fork_spare(self, leave: tuple[int, ...] = ()) -> None:
        """Fork the next worker ahead of its request (``docs/design.md``, "The fork
        server's spare child"): it leaves the server's descriptors and signals and waits
        on a socket of its own for its assignment. ``leave``: descriptors the server holds
        for the request being served (its output files, forked on demand), which the child
        also closes: it gets its own copies with the assignment."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sys.stdout.flush()
        sys.stderr.flush()
        # SIGTERM/SIGINT raise SystemExit: not between the fork and the bookkeeping that
        # lets shutdown() find the child
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM, signal.SIGINT])
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child, which leaves by os._exit
                try:
                    ours.close()
                    for fd in leave:
                        os.close(fd)
                    self._become_worker(theirs)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    os._exit(127)
            self.children[pid] = None
            self.spare = (pid, ours)
        except BaseException:
            ours.close()
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
            theirs.close()

    def _become_worker(self, sock: socket.socket) -> None:
        """In the child: a session of its own, none of the server's descriptors; then wait
        for the assignment and the start gate on ``sock``, and run."""
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig, handler in self.defaults.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        self.selector.close()  # no epoll_ctl: the server's registrations are untouched
        for other in [c.sock for c in self.conns.values()] + [self.listener]:
            if other.fileno() >= 0:
                os.close(other.detach())
        for conn in self.conns.values():
            if conn.gate is not None:
                os.close(conn.gate)
        os.close(self.wake_r)
        os.close(self.wake_w)
        # nor the server's output: a spare that outlives a killed server (stopped, say) must
        # not hold the pipe the launcher reads the server's stderr from to its end
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        first, fds, _flags, _addr = socket.recv_fds(sock, 1, 2)
        if first != b"A" or len(fds) != 2:
            os._exit(1)  # the server went away before it had a worker for this child
        buf = b""
        while b"\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                os._exit(1)
            buf += chunk
        line, _, rest = buf.partition(b"\n")
        job = json.loads(line)
        for fd, target in ((fds[0], 1), (fds[1], 2)):
            os.dup2(fd, target)
            os.close(fd)
        released = (rest[:1] or sock.recv(1)) == b"g"
        sock.close()
        if not released:
            os.write(2, b"fork server: worker never released (the harness went away)\n")
            os._exit(1)
        module, args, env, cwd = job["module"], job["args"], job["env"], job["cwd"]
        name_process(env)  # "shopops-worker ROLE EXECUTION" in ps, not the server's argv
        if job["sealed"] is not None:
            seal = sealed_fork.SealedStart.from_request(job["sealed"])
            os._exit(sealed_fork.run(seal, module, args, env, cwd))
        os._exit(run_module(module, args, env, cwd))


def kill_worker(pid: int) -> None:
    """SIGKILL a fork-server child's process group, or the child itself if it has not
    reached its ``setsid()`` yet (no group ``pid`` exists then, and it has no children).
    Only for a child not yet reaped, whose pid cannot have been reused."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _ignore(signum: int, frame: object) -> None:
    pass


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.forkserver.server --fd N SOCKET_PATH``: preload, then serve."""
    parser = argparse.ArgumentParser(prog="python -m harness.forkserver.server",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True,
                        help="descriptor of the listening Unix socket (inherited)")
    parser.add_argument("path", help="where that socket is bound (unlinked at exit)")
    parser.add_argument("--parent", type=int, default=None, metavar="PID",
                        help="the harness that starts it: leave, ungreeted, once it is gone")
    parser.add_argument("--sealed", action="store_true",
                        help="fork untrusted workers (harness.forkserver.sealed)")
    parser.add_argument("--preload", default="", metavar="MODULE,...",
                        help="more modules to import before serving (skipped if missing)")
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.fd)
    extra = [m for m in args.preload.split(",") if m]
    if args.sealed:
        sealed_fork.preload(extra)
    else:
        preload(extra)
    if threading.active_count() != 1:  # forking a threaded process copies held locks
        raise RuntimeError(f"fork server has {threading.active_count()} threads after preload")
    return ForkServer(listener, args.path, sealed=args.sealed, parent=args.parent).serve()


if __name__ == "__main__":
    sys.exit(main())
