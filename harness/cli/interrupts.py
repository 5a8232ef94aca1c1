"""How ``run`` and ``merge`` end on SIGINT/SIGTERM (issue 24): as ``grade`` does — exit 2, one
line saying "interrupted", no traceback, reports that say so where a run folder exists, and
an incomplete folder (no ``summary.json``) left for the next command, which keeps the newest
such as ``incomplete-<run-id>`` (``harness.reports.runs.keep_killed``).

``harness.launch.processes.reaping_on_signals`` turns SIGINT into ``KeyboardInterrupt`` and
SIGTERM into ``SystemExit(143)``; the commands catch them around their whole body and hand
them here.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.launch.stop import ignore_further_signals

__all__ = ["Progress", "interrupted", "signal_exit"]


@dataclass
class Progress:
    """How far a ``run`` or ``merge`` got, for ``interrupted``: its output folder once made,
    and whether its final reports were being written."""

    out_dir: Path | None = None
    writing: bool = False


def interrupted(command: str, exc: BaseException, at: Progress, *,
                report: Callable[[Path], None] | None = None) -> int:
    """What SIGINT/SIGTERM (``KeyboardInterrupt``/``SystemExit`` from
    ``reaping_on_signals``) does to ``run`` and ``merge``: one line, exit 2, no traceback
    (issue 24: ``merge`` died with -15, ``run`` with a traceback and no reports). Before an
    output folder exists nothing was written; once it does and ``report`` is given (``run``),
    its reports are written saying "interrupted"; any further signal is ignored from here on
    (``harness.launch.stop``: three rapid signals ended a run with 143 and no reports); a
    folder whose final reports were being written, or a merge's, is left without
    ``summary.json`` — incomplete, so ``latest`` stays where it was and the next command
    keeps it as ``incomplete-<run-id>`` (``keep_killed``: its pid is gone; only the newest
    such folder is kept)."""
    name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
    where = ""
    ignore_further_signals()  # the command is stopping: nothing may cut this short
    if at.out_dir is not None and report is not None and not at.writing:
        try:
            report(at.out_dir)
            where = f"; its reports say interrupted: {at.out_dir}"
        except OSError as error:
            where = f"; its reports could not be written ({error}): {at.out_dir} is incomplete"
    elif at.out_dir is not None:
        where = (f"; {at.out_dir} is incomplete (no summary.json): latest was not moved and "
                 "the next run or merge keeps it as incomplete-<run-id>")
    elif command in ("run", "merge"):
        # before its folder existed: say that latest is not this run (found by a new user: an
        # earlier run's PASS read as the result of the run just stopped)
        where = ("; before its report folder existed: nothing was written, and latest, if "
                 "there is one, is an earlier run's")
    print(f"shopops-chaos{'' if command == 'run' else ' ' + command}: interrupted ({name})"
          f"{where}", file=sys.stderr)
    return 2


def signal_exit(exc: BaseException) -> bool:
    """``exc`` is what ``reaping_on_signals`` raises for SIGINT or SIGTERM."""
    return isinstance(exc, KeyboardInterrupt) or (
        isinstance(exc, SystemExit) and exc.code == 128 + signal.SIGTERM)
