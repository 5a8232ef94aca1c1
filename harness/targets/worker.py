"""Run one function of a target in this (worker) process.

``python -m harness.targets.worker ROLE FOLDER MODULE:FUNCTION CONTEXT_FILE`` puts FOLDER
first on ``sys.path``, installs the harness's kill points at the process's durability
boundaries (``harness.targets.boundaries``: SQLite commits, HTTP requests, LangGraph nodes, DBOS
steps) BEFORE the target's module is imported, then calls ``FUNCTION(ctx)`` with the
``TargetContext`` read from CONTEXT_FILE. ``history`` prints the function's result as JSON
on stdout. Exit status: 0 done, 1 the target raised (last stderr line
``target: error: <ErrorName>: message``), 2 bad arguments.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.targets.context import TargetContext

__all__ = ["ROLES", "load", "main"]

ROLES = ("start", "resume", "decide", "history")


def load(folder: str, ref: str) -> Callable[[TargetContext], Any]:
    """Import ``MODULE:FUNCTION`` with ``folder`` first on ``sys.path``.

    Raises:
        ValueError: ``ref`` is not ``module:function``.
        ImportError, AttributeError: as the import raises them.
    """
    module, sep, name = ref.partition(":")
    if not (module and sep and name):
        raise ValueError(f"{ref!r}: expected module:function")
    if folder and folder not in sys.path:
        sys.path.insert(0, folder)
    function = getattr(importlib.import_module(module), name)
    if not callable(function):
        raise ValueError(f"{ref!r}: {name} is not callable")
    return function  # type: ignore[no-any-return,unused-ignore]


def main(argv: list[str]) -> int:
    """Run ``argv = [ROLE, FOLDER, MODULE:FUNCTION, CONTEXT_FILE]``; returns the exit
    status (see the module docstring)."""
    if len(argv) != 4 or argv[0] not in ROLES:
        print(f"usage: python -m harness.targets.worker {{{','.join(ROLES)}}} FOLDER "
              "MODULE:FUNCTION CONTEXT_FILE", file=sys.stderr)
        return 2
    role, folder, ref, context_file = argv
    from harness.targets import boundaries  # the failpoint channel is armed from the environment

    try:
        ctx = TargetContext.from_json(Path(context_file).read_text(encoding="utf-8"))
        boundaries.install(ctx.gateway_url)  # before a line of the target is imported
        result = load(folder, ref)(ctx)
    except Exception as exc:  # the target's error, reported as one line
        print(f"target: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if role == "history":
        json.dump(result, sys.stdout, sort_keys=True, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
