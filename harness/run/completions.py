"""Futures' completions, waited for by a main thread that holds no lock while it waits.

``concurrent.futures.wait`` takes every future's lock in turn before it waits; a signal
handler that raises there leaves some of them held by the main thread for ever, and the pool
thread that finishes such a future hangs in ``set_result`` (``harness.launch.stop
.DeferredSignals`` says how that was found). Here a pool thread's done-callback appends the
future to a deque (atomic in CPython) and writes one byte to a pipe; the main thread waits in
``select.poll`` on the pipe's read end, a system call that holds nothing, so whatever a signal
raises there leaves nothing behind. The same pipe is ``wake_fd``: a signal handler writes to
it to end the wait.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any

__all__ = ["Completions"]


class Completions:
    """A queue of finished (or cancelled) futures, in the order they finished.

    ``watch(future)`` for every future; ``wait(timeout_s)`` blocks until one is queued or
    something wrote to ``wake_fd``; ``pop()`` takes the oldest. ``close()`` closes the pipe
    (idempotent); a done-callback after that queues the future and writes nothing.
    """

    def __init__(self) -> None:
        self._read, self._write = os.pipe()  # close-on-exec: no worker inherits them
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._poll = select.poll()
        self._poll.register(self._read, select.POLLIN)
        self._done: deque[Future[Any]] = deque()
        self._closed = False
        # a future is done() before its callbacks run: close() may come between the two,
        # and a write to the closed (perhaps reused) descriptor must not follow it
        self._lock = threading.Lock()

    @property
    def wake_fd(self) -> int:
        """The pipe's write end: one byte written there ends a ``wait``."""
        return self._write

    def watch(self, future: Future[Any]) -> None:
        """Queue ``future`` once it is done (at once if it already is)."""
        future.add_done_callback(self._finished)

    def _finished(self, future: Future[Any]) -> None:
        self._done.append(future)
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):  # full: a byte is waiting already
                    os.write(self._write, b"f")

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until a future is queued or ``wake_fd`` was written to, at most
        ``timeout_s`` seconds (``None``: no limit); ``True`` if a future is queued. The
        pipe is emptied, so the next call blocks again until something new happens."""
        if not self._done:
            self._poll.poll(None if timeout_s is None else max(0, int(timeout_s * 1000)))
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass
        return bool(self._done)

    def pop(self) -> Future[Any] | None:
        """The oldest queued future (removed from the queue), or ``None``."""
        try:
            return self._done.popleft()
        except IndexError:
            return None

    def clear(self) -> None:
        """Forget every queued future."""
        self._done.clear()

    def close(self) -> None:
        """Close the pipe (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)
