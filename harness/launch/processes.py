"""Worker processes: start, SIGKILL from outside, reap — and prove nothing is left.

Every worker runs in its own session (``start_new_session=True``, or ``os.setsid()`` in a
fork-server child), so its process group id is its pid and one ``killpg`` reaches it and
anything it spawned. A worker is reaped through one API only — ``Popen.wait`` for our own
children, the fork server's ``waitpid`` for its children (psutil's notes: reaping through
two APIs loses the exit status). ``REGISTRY`` holds every live worker of this harness
process, so that a failing check, a timeout, SIGINT/SIGTERM or interpreter exit all end in
the same ``reap_all``. A worker started for a run (``REGISTRY.within``) is filed under it,
and the end of that run reaps its own workers only: two runs in one process (two grades at
once) never kill each other's.
"""

from __future__ import annotations

import atexit
import contextvars
import math
import os
import select
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psutil

from harness.launch.stop import end_grace, stop_on_signals

__all__ = ["OUTPUT_KEEP_BYTES", "OUTPUT_TAIL_BYTES", "REGISTRY", "STOPPING", "ExitInfo",
           "HarnessStopping", "PopenWorker", "Worker", "output_tail", "reaping_on_signals",
           "spawn", "trim_output"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class ExitInfo:
    """How a worker ended: ``returncode`` (negative = killed by that signal),
    ``killed_by_harness`` (we sent the SIGKILL), ``timed_out`` (its deadline passed and the
    harness killed it), ``leftovers`` (pids of its process group still alive after it was
    reaped, which were then killed), ``elapsed_s`` (seconds)."""

    returncode: int
    killed_by_harness: bool
    timed_out: bool
    leftovers: tuple[int, ...]
    elapsed_s: float

    @property
    def sigkilled(self) -> bool:
        """Exactly ``-SIGKILL``, as psutil's tests assert it."""
        return self.returncode == -signal.SIGKILL


class Worker:
    """One started worker process, in its own process group (its pid is the group id).

    The base of every launcher's worker: ``kill()`` may be called from any thread (the
    failpoint channel calls it while the worker blocks at its labelled point);
    ``wait(deadline_s)`` reaps it. A subclass says how the exit status is collected
    (``_reap``): ``PopenWorker`` reaps its own child, a fork-server worker is told.
    """

    def __init__(self, pid: int, index: int) -> None:
        self.pid = pid
        self.index = index
        self.started = time.monotonic()
        self._killed = threading.Event()
        self._exit: ExitInfo | None = None

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (no-op if it is already gone or was
        already reaped: its pid may have been reused since)."""
        self._killed.set()
        if self._exit is not None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    @property
    def killed_by_harness(self) -> bool:
        """True once ``kill()`` was called."""
        return self._killed.is_set()

    def wait(self, deadline_s: float) -> ExitInfo:
        """Wait for the worker to exit, at most ``deadline_s`` seconds, then kill and reap.

        Returns:
            ``ExitInfo``; ``timed_out`` is true if the deadline passed.
        """
        if self._exit is not None:
            return self._exit
        returncode = self._reap(deadline_s)
        timed_out = returncode is None
        if returncode is None:
            self.kill()
            returncode = self._reap(None)
            assert returncode is not None
        leftovers = _group_leftovers(self.pid)
        self._exit = ExitInfo(
            returncode=returncode,
            killed_by_harness=self.killed_by_harness and not timed_out,
            timed_out=timed_out,
            leftovers=leftovers,
            elapsed_s=time.monotonic() - self.started,
        )
        REGISTRY.discard(self)
        return self._exit

    def exited(self) -> bool:
        """Whether the worker is known to have exited, after a look of at most 1 ms (nothing
        is killed; ``wait`` still reaps it and reports as usual)."""
        return self._exit is not None or self._reap(0.001) is not None

    def _reap(self, timeout_s: float | None) -> int | None:
        """Block until the worker has exited and was reaped, at most ``timeout_s`` seconds
        (``None``: no limit); its return code (negative: killed by that signal), or
        ``None`` if it is still running."""
        raise NotImplementedError


class PopenWorker(Worker):
    """A worker that is this process's own child (``subprocess.Popen``), reaped through
    ``Popen.wait`` only."""

    def __init__(self, popen: subprocess.Popen[bytes], index: int) -> None:
        super().__init__(popen.pid, index)
        self.popen = popen

    def _reap(self, timeout_s: float | None) -> int | None:
        """``Popen.wait``, but a wait with a limit sleeps on a pidfd (Linux 5.3,
        ``os.pidfd_open``) until the child exits: ``Popen.wait(timeout=...)`` polls with
        sleeps growing to 50 ms (CPython's ``subprocess._wait``), so it reaped a worker up to
        50 ms after its exit. Where no pidfd can be had, ``Popen.wait`` as before."""
        if timeout_s is not None and self.popen.returncode is None:
            try:
                fd = os.pidfd_open(self.popen.pid)
            except (AttributeError, OSError):  # no pidfd here: Popen's own polling
                pass
            else:
                try:
                    poller = select.poll()
                    poller.register(fd, select.POLLIN)
                    if not poller.poll(max(0, math.ceil(timeout_s * 1000))):
                        return None
                finally:
                    os.close(fd)
                return self.popen.wait()  # it has exited: reaps at once
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None


def _group_leftovers(pgid: int) -> tuple[int, ...]:
    """Pids still in process group ``pgid``; each is SIGKILLed and waited for (psutil)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return ()
    except PermissionError:  # pragma: no cover - not ours
        return ()
    survivors = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                survivors.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    for proc in survivors:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(survivors, timeout=5)
    return tuple(p.pid for p in survivors)


#: The run the current thread starts workers for (``_Registry.within``), or ``None``.
_RUN: contextvars.ContextVar[object | None] = contextvars.ContextVar("harness_run",
                                                                     default=None)


class _Registry:
    """Live workers of this harness process, each filed under the run it was started for
    (``within``; ``None`` outside any run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[Worker, object | None] = {}

    def add(self, worker: Worker) -> None:
        with self._lock:
            self._live[worker] = _RUN.get()

    def discard(self, worker: Worker) -> None:
        with self._lock:
            self._live.pop(worker, None)

    def live(self, run: object | None = None) -> list[Worker]:
        """The live workers (``run`` given: those started for it only)."""
        with self._lock:
            return [w for w, of in self._live.items() if run is None or of is run]

    def within(self, run: object, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` with every worker it starts in this thread filed under ``run`` (any
        object naming one run: ``harness.run.runner.run`` makes one per call), which
        ``reap_all(run)`` then reaps; the thread's previous run is restored after."""
        token = _RUN.set(run)
        try:
            return fn(*args)
        finally:
            _RUN.reset(token)

    def reap_all(self, run: object | None = None) -> int:
        """SIGKILL and reap every live worker — with ``run``, only those started for it
        (``within``): the end of one run must not kill the workers of another run going on
        in the same process (seen: a grade's end SIGKILLed a concurrent grade's target
        ``history`` read, and lost its evidence). Returns how many there were."""
        workers = self.live(run)
        for worker in workers:
            worker.kill()
        for worker in workers:
            worker.wait(deadline_s=10)
        return len(workers)


REGISTRY = _Registry()
atexit.register(REGISTRY.reap_all)

#: Set when the harness is being stopped (SIGINT/SIGTERM): no new worker may start.
STOPPING = threading.Event()


class HarnessStopping(RuntimeError):
    """A worker was about to start after the harness was told to stop."""


def spawn(argv: list[str], *, env: dict[str, str], cwd: str, stdout: str, stderr: str,
          index: int) -> Worker:
    """Start ``argv`` as a worker in a new session, output to the files ``stdout``/``stderr``.

    Raises:
        OSError: the executable could not be started.
        HarnessStopping: ``STOPPING`` is set.
    """
    if STOPPING.is_set():
        raise HarnessStopping("the harness is stopping; no new worker is started")
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        popen = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True, close_fds=True,
        )
    worker = PopenWorker(popen, index)
    REGISTRY.add(worker)
    return worker


@contextmanager
def reaping_on_signals(grace: int = 0) -> Iterator[None]:
    """Within the block SIGTERM raises ``SystemExit(143)`` and SIGINT ``KeyboardInterrupt``
    (``stop_on_signal``: the first one; later ones are ignored) so ``finally`` blocks run; on
    the way out every live worker is reaped, whatever happened. ``grace``: that many signals
    are only recorded first (``harness.launch.stop.graced``), the next one stops. The
    previous handlers are put back unless the block ends by a signal (then both stay
    ignored: the command is shutting down). Main thread only (``signal.signal``)."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stop_on_signals(grace)
    by_signal = False
    try:
        yield
    except KeyboardInterrupt:
        by_signal = True
        raise
    except SystemExit as exc:
        by_signal = exc.code == 128 + signal.SIGTERM
        raise
    finally:
        end_grace()  # a grace unused here is not carried into what follows
        try:
            REGISTRY.reap_all()
        finally:
            if not by_signal:
                for sig, handler in previous.items():
                    if handler is not None:  # None: set outside Python
                        signal.signal(sig, handler)


def _open_output(path: str | os.PathLike[str], mode: int) -> tuple[int, os.stat_result] | None:
    """A worker's output file opened (``mode``: ``O_RDONLY``/``O_RDWR``) without following a
    symlink and without blocking, and its ``fstat``; ``None`` (nothing left open) when it
    cannot be opened or what was opened is not a regular file. The one rule for both
    readers below: the worker may have replaced the file the harness gave it."""
    try:
        fd = os.open(path, mode | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


#: How much of a worker's output file the harness reads back: its last 64 KiB.
OUTPUT_TAIL_BYTES = 64 * 1024


def output_tail(path: str | os.PathLike[str], lines: int | None = None,
                limit: int = OUTPUT_TAIL_BYTES) -> str:
    """The end of a worker's output file as text (UTF-8, undecodable bytes replaced): at
    most its last ``limit`` bytes, and of those the last ``lines`` lines (all with
    ``None``). ``""`` when it cannot be opened or is not a regular file.

    The worker may have replaced the file the harness gave it (``/proc/self/fd/2`` names
    it): it is opened without following a symlink and without blocking (a FIFO would block
    the harness until a writer came), and never read whole (a worker without a file-size
    limit can write gigabytes).
    """
    opened = _open_output(path, os.O_RDONLY)
    if opened is None:
        return ""
    fd, size = opened
    try:
        os.lseek(fd, max(0, size.st_size - limit), os.SEEK_SET)
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return ""
    finally:
        os.close(fd)
    text = b"".join(chunks).decode("utf-8", "replace")
    return text if lines is None else "\n".join(text.splitlines()[-lines:])


#: What is kept of a worker's output file once it is reaped: its first quarter and its
#: last three quarters of this many bytes (a worker that printed 50 MB to each stream kept
#: 6 GB for 21 executions; the reports read only the last ``OUTPUT_TAIL_BYTES``).
OUTPUT_KEEP_BYTES = 1 << 20


def trim_output(path: str | os.PathLike[str], keep: int = OUTPUT_KEEP_BYTES) -> int:
    """Cut a reaped worker's output file to about ``keep`` bytes in place: its beginning,
    one line saying how many bytes were cut, its end. Opened as ``output_tail`` opens it
    (not through a symlink, not blocking, only a regular file); returns the bytes cut
    (0: nothing to do or not a regular file)."""
    opened = _open_output(path, os.O_RDWR)
    if opened is None:
        return 0
    fd, size = opened
    try:
        if size.st_size <= keep:
            return 0
        head, tail = keep // 4, keep - keep // 4
        end = os.pread(fd, tail, size.st_size - tail)
        cut = size.st_size - head - len(end)
        marker = (f"\n[... {cut} bytes cut by the harness: a worker's output is kept to "
                  f"{keep} bytes ...]\n").encode()
        os.pwrite(fd, marker + end, head)
        os.ftruncate(fd, head + len(marker) + len(end))
        return cut
    except OSError:
        return 0
    finally:
        os.close(fd)
