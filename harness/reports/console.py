"""The console of ``shopops-chaos``: lines that are safe to print, a closed stdout that
ends quietly, and progress with an estimate of what is left.

- Every line goes through ``harness.reports.text.visible``: an implementation's terminal
  escape sequences (a worker's stderr quoted in a reason) are shown, never acted on.
- A reader that goes away (``shopops-chaos run | head``) is not an error of the run: on
  ``BrokenPipeError`` stdout is pointed at ``/dev/null`` (the Python documentation's "Note
  on SIGPIPE", ``signal`` module) and the run goes on to write its reports and exit with its
  real status, without a traceback.
- ``ProgressLine`` formats ``[ 12/27+ ]`` while trace runs may still add executions and
  ``[ 120/418]  eta 35 s`` once the total is known.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from harness.reports.text import visible

__all__ = ["Console", "ProgressLine", "console", "quiet_closed_stdout"]


def quiet_closed_stdout(stream: TextIO | None = None) -> None:
    """Point ``stream``'s (default stdout's) file descriptor at ``/dev/null`` after its
    reader went away, so later writes and the interpreter's final flush are silent."""
    stream = stream or sys.stdout
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a StringIO in a test)
        pass


class Console:
    """Writes whole lines to ``stream`` (stdout by default, looked up at each write so
    pytest's ``capsys`` sees them); after a closed pipe, writes nothing.

    Attributes:
        closed: the reader went away (``BrokenPipeError``); nothing more is written.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self.closed = False

    @property
    def stream(self) -> TextIO:
        """Where lines go."""
        return self._stream or sys.stdout

    def line(self, *parts: object, sep: str = " ") -> None:
        """Print ``parts`` joined by ``sep`` as one or more lines, control characters
        made visible, flushed at once."""
        if self.closed:
            return
        text = visible(sep.join(str(p) for p in parts))
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except BrokenPipeError:
            self.closed = True
            quiet_closed_stdout(self.stream)


_CONSOLE = Console()


def console() -> Console:
    """The process's stdout console."""
    return _CONSOLE


class ProgressLine:
    """Formats a progress prefix with an estimate of the time left.

    ``started`` is ``time.monotonic()`` at the start of the work; ``estimate`` extrapolates
    the average wall time per finished item over the remaining ones (parallel executions
    included, since it is wall time), and only once the total is final.
    """

    def __init__(self, started: float | None = None) -> None:
        self.started = time.monotonic() if started is None else started

    def prefix(self, done: int, total: int, final: bool, now: float | None = None) -> str:
        """``[  3/27+]`` (more may come) or ``[ 12/418] eta 1m05s`` (total final)."""
        width = max(3, len(str(total)))
        if not final:
            return f"[{done:>{width}}/{total}+]"
        left = self.estimate(done, total, now)
        eta = f" eta {_duration(left)}" if left is not None and done < total else ""
        return f"[{done:>{width}}/{total}]{eta}"

    def estimate(self, done: int, total: int, now: float | None = None) -> float | None:
        """Seconds left, or ``None`` before the first item finished."""
        if done <= 0:
            return None
        elapsed = (time.monotonic() if now is None else now) - self.started
        return max(0.0, elapsed / done * (total - done))


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
