"""``shopops-chaos``'s entry point, kept light: SIGINT/SIGTERM are handled from its first
line, before the commands (``harness.cli.commands``, about a second of imports) are loaded —
a signal then ends the command with exit 2 and one line saying "interrupted", no traceback
(``harness.cli.interrupts``). Exit statuses: ``harness.cli.commands``.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.launch.stop import (
    STOP_SIGNALS,
    forget_signals,
    ignore_further_signals,
    signalled,
    stop_on_signals,
)

if TYPE_CHECKING:
    import argparse

__all__ = ["build_parser", "entry", "main"]

#: The commands ``interrupted`` names in its line (``run`` is the default command).
_COMMANDS = frozenset({"run", "merge", "explore", "grade", "points", "gateway"})


def build_parser() -> argparse.ArgumentParser:
    """``harness.cli.args.build_parser`` (imported on use, to keep this module light)."""
    from harness.cli.args import build_parser as build

    return build()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``shopops-chaos``; returns the exit status (``harness.cli.commands.main``).

    On the main thread SIGINT/SIGTERM are handled (``harness.launch.stop``) before anything
    heavy is imported: a signal that reaches here — before any run folder exists, or from a
    command without its own handling — ends it with exit 2 and one line; once a signal has
    been taken further ones are ignored. The handlers in place before are put back on return
    (a caller in the same process), unless a signal ended the command.
    """
    return _main(argv, process=False)


def _main(argv: Sequence[str] | None, process: bool) -> int:
    """``main``; ``process``: the whole process ends after it (``entry``)."""
    armed = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if armed else {}
    if armed:
        stop_on_signals()
        forget_signals()
    by_signal = False
    try:
        from harness.cli import commands

        return commands.main(argv)
    except (KeyboardInterrupt, SystemExit) as exc:
        # imported here, not at the top: the handlers are installed before anything else
        from harness.cli.interrupts import Progress, interrupted, signal_exit

        if not signal_exit(exc):
            raise
        by_signal = True
        ignore_further_signals()
        words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
        command = words[0] if words and words[0] in _COMMANDS else "run"
        return interrupted(command, exc, Progress())
    finally:
        if armed and (process or by_signal or signalled()):
            _end_process()
        elif armed:
            for sig, handler in previous.items():
                if handler is not None:  # None: set outside Python
                    signal.signal(sig, handler)


def entry() -> int:
    """The ``shopops-chaos`` and ``python -m harness`` process: ``main``, then nothing of
    Python runs but the interpreter's shutdown, during which SIGINT and SIGTERM are ignored
    (``SIG_IGN``): ``main`` put the handlers before it back, and a signal in the ~150 ms the
    shutdown takes killed a command whose reports were complete (-15 or -2 for a passing
    run; found by an attack). A caller of ``main`` in its own process keeps its handlers."""
    return _main(None, process=True)


def _end_process() -> None:
    """The command is about to return its exit status and a signal reached it (wherever it
    was caught), or the process ends after it (``entry``): make sure the interpreter ends
    with that status (found by attacks).

    - A ``KeyboardInterrupt`` raised inside ``exec`` of a string (a dataclass being made
      during a lazy import) sets CPython's "unhandled KeyboardInterrupt" flag though it was
      caught, and the interpreter then ends by killing itself with SIGINT (-2 after it had
      said "interrupted"); running any code string resets the flag (``Python/pythonrun.c``,
      ``run_eval_code_obj``).
    - The handler that ignores further signals is a Python function, and the interpreter's
      shutdown puts ``SIG_DFL`` back in its place, so one more signal then killed the command
      (-15); and once the handlers before it were put back, a signal in the ~150 ms of the
      shutdown killed a command whose reports were complete (-15 or -2 for a passing run).
      Nothing of the command runs after this, so they are ignored for real (``SIG_IGN``).
    """
    exec("None")  # noqa: S102 - a constant string
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
