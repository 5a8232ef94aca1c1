"""The one SIGINT/SIGTERM handler of a harness command (issue 24 and its follow-up: a signal
in the first second of ``run`` or ``merge`` gave a traceback or a silent exit 143).

Standard library only: ``harness.cli.main`` installs it before importing anything heavy.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

__all__ = ["STOP_SIGNALS", "ignore_further_signals", "stop_on_signal", "stop_on_signals"]

#: Set once a signal has been taken (until ``stop_on_signals`` arms the handler again).
_STOPPING = threading.Event()

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
    if _STOPPING.is_set():  # a signal that was pending while the first was being taken
        return
    _STOPPING.set()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def ignore_further_signals() -> None:
    """The command is stopping: SIGINT and SIGTERM are ignored from now on (until
    ``stop_on_signals``), whatever handler was in place."""
    _STOPPING.set()
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not stop_on_signal:
            signal.signal(sig, stop_on_signal)


def stop_on_signals() -> None:
    """Install ``stop_on_signal`` for SIGINT and SIGTERM — explicitly, since a shell starts
    background jobs with SIGINT ignored. Main thread only (``signal.signal`` raises
    ``ValueError`` elsewhere)."""
    _STOPPING.clear()
    for sig in STOP_SIGNALS:
        signal.signal(sig, stop_on_signal)
