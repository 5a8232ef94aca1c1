"""The one SIGINT/SIGTERM handler of a harness command (issue 24 and its follow-up: a signal
in the first second of ``run`` or ``merge`` gave a traceback or a silent exit 143).

Standard library only: ``harness.cli.main`` installs it before importing anything heavy.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "DeferredSignals", "end_grace", "forget_signals", "graced",
           "ignore_further_signals", "signalled", "stop_on_signal", "stop_on_signals"]

# The handler's state: plain values, never a lock (a threading.Event's set() takes one, and a
# second signal handled inside the first handler's set() would wait for it for ever).
#: Set once a signal has been taken (until ``stop_on_signals`` arms the handler again).
_STOPPING = [False]
#: Signals taken but let through (``stop_on_signals(grace=...)``), and how many more may be.
_GRACED: list[int] = []
_grace = [0]
#: Set by any signal this handler saw, cleared only by ``forget_signals`` (a command's start).
_SIGNALLED = [False]

#: The signals that stop a harness command.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stop_on_signal(signum: int, frame: FrameType | None) -> None:
    """Start the shutdown: both signals are ignored from now on (the handler stays in place
    and returns: switching to ``SIG_IGN`` would let a signal already caught print "ignored
    due to race condition") (a second or third Ctrl-C
    must neither cut the cleanup short nor kill the process with no message), then raise
    ``KeyboardInterrupt`` (SIGINT) or ``SystemExit(128 + signum)`` (SIGTERM: 143) in the main
    thread. ``harness.launch.processes.reaping_on_signals`` re-arms it for a phase that a
    further signal may cut short (a run's final reports)."""
    _SIGNALLED[0] = True
    if _STOPPING[0]:  # a signal that was pending while the first was being taken
        return
    if _grace[0] > 0:  # let through (recorded): the phase finishes first
        _grace[0] -= 1
        _GRACED.append(signum)
        return
    _STOPPING[0] = True
    exc = KeyboardInterrupt() if signum == signal.SIGINT else SystemExit(128 + signum)
    exc.__dict__[_SIGNAL_ATTR] = signum  # known again if a finalizer swallows it (_unraisable)
    raise exc


_SIGNAL_ATTR = "shopops_stop_signal"


def _unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook`` while ``stop_on_signal`` is installed: the exception it raised
    landed in a finalizer (a ``__del__``, a weakref callback), where Python prints it as
    "Exception ignored" and goes on. Nothing was stopped, yet every later signal would be
    ignored (found by an attack: a second Ctrl-C while the reports were written was lost
    that way). The signal is sent again a moment later from a thread of its own (sent from
    here, its handler would run at once, inside this hook, and be lost again), to be taken
    once the finalizer has returned (should it land in another one, this happens again);
    anything else goes to the hook before."""
    signum = getattr(unraisable.exc_value, _SIGNAL_ATTR, None)
    if signum is not None and signal.getsignal(signum) is stop_on_signal:
        _STOPPING[0] = False
        again = threading.Timer(_AGAIN_AFTER_S, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()
        return
    _hook_before[0](unraisable)


#: Seconds before a signal a finalizer swallowed is sent again (``_unraisable``).
_AGAIN_AFTER_S = 0.005


_hook_before: list[Callable[[Any], object]] = [sys.unraisablehook]


def signalled() -> bool:
    """Whether this handler saw any signal since ``forget_signals`` (whether it stopped
    something, was let through or was ignored)."""
    return _SIGNALLED[0]


def forget_signals() -> None:
    """A command starts: no signal seen yet (``signalled``)."""
    _SIGNALLED[0] = False


def end_grace() -> None:
    """No more signals are let through (``stop_on_signals(grace=...)``'s phase is over);
    those already let through stay in ``graced``."""
    _grace[0] = 0


def graced() -> tuple[int, ...]:
    """The signals let through by ``stop_on_signals(grace=...)`` since it was called."""
    return tuple(_GRACED)


def ignore_further_signals() -> None:
    """The command is stopping: SIGINT and SIGTERM are ignored from now on (until
    ``stop_on_signals``), whatever handler was in place."""
    _STOPPING[0] = True
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not stop_on_signal:
            signal.signal(sig, stop_on_signal)


def stop_on_signals(grace: int = 0) -> None:
    """Install ``stop_on_signal`` for SIGINT and SIGTERM — explicitly, since a shell starts
    background jobs with SIGINT ignored. ``grace``: how many signals are let through first,
    only recorded (``graced``): a run's reports after a run no signal stopped are finished
    on the first signal (found by an attack: one SIGTERM while they were written threw a
    finished run away), and only a second stops the writing. Main thread only
    (``signal.signal`` raises ``ValueError`` elsewhere)."""
    _STOPPING[0] = False
    _grace[0] = grace
    _GRACED.clear()
    if sys.unraisablehook is not _unraisable:
        _hook_before[0] = sys.unraisablehook
        sys.unraisablehook = _unraisable
    for sig in STOP_SIGNALS:
        signal.signal(sig, stop_on_signal)


class DeferredSignals:
    """SIGINT and SIGTERM taken only where the main thread says it is safe: a context
    manager for a phase of the main thread that waits on threads (``harness.run.runner``).

    Why: a handler that raises (``stop_on_signal``, or Python's own
    ``default_int_handler``) raises at whatever bytecode the main thread is at. Inside
    ``concurrent.futures.wait`` that can be half-way through acquiring every future's lock
    (``_AcquireFutures.__enter__``, whose ``__exit__`` then never runs): a pool thread that
    finishes one of those futures blocks for ever in ``set_result``, and the run never
    ends (the CI run of stop 33: a harness still alive 180 s after SIGINT; reproduced by
    interrupting ``wait`` on 40 futures with a timer signal). Inside
    ``threading.Condition.wait`` it can raise ``RuntimeError: release unlocked lock``. Any
    ``lock.acquire()`` followed by ``try`` can leak the lock.

    Within the block, for each of the two signals whose handler is a Python callable, a
    handler is installed that only records the first signal and writes one byte to
    ``wake_fd`` (non-blocking; a full pipe already wakes its reader), so a ``select`` on
    its read end returns at once (PEP 475 retries the call after the handler; the byte
    ends it). ``take()`` at a safe point calls the handler that was replaced for the
    recorded signal, in the main thread, as if it had just arrived (so it raises what it
    always raised). Leaving the block puts the handlers back and returns. A signal
    recorded but never taken is taken by ``finish()``. Off the main thread, and for a
    signal set to ``SIG_DFL``/``SIG_IGN`` or outside Python, it does nothing.

    Args:
        wake_fd: a file descriptor to write one byte to when a signal is recorded.
    """

    def __init__(self, wake_fd: int) -> None:
        self._wake_fd = wake_fd
        self._previous: dict[int, Callable[[int, FrameType | None], object]] = {}
        self._recorded: int | None = None

    def __enter__(self) -> DeferredSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in STOP_SIGNALS:
            handler = signal.getsignal(sig)
            if callable(handler):
                self._previous[sig] = handler
                signal.signal(sig, self._record)
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self._recorded is None:
            self._recorded = signum
        try:
            os.write(self._wake_fd, b"s")
        except OSError:  # full (a byte is waiting already) or closed: nothing to wake
            pass

    @property
    def recorded(self) -> int | None:
        """The signal recorded and not yet taken, or ``None``."""
        return self._recorded

    def take(self) -> None:
        """At a safe point: if a signal was recorded, call the handler it would have reached
        (``handler(signum, None)``); whatever that raises propagates (``KeyboardInterrupt``,
        ``SystemExit``). The signal counts as taken even if the handler raises."""
        signum, self._recorded = self._recorded, None
        if signum is not None and signum in self._previous:
            self._previous[signum](signum, None)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def finish(self) -> bool:
        """After the block: take a signal recorded and never taken, catching the
        ``KeyboardInterrupt``/``SystemExit`` it raises (the caller reports what finished,
        marked interrupted); ``True`` if there was one."""
        recorded = self._recorded is not None
        try:
            self.take()
        except (KeyboardInterrupt, SystemExit):
            pass
        return recorded
