"""Optional extras a target may need (``pip install -e '.[langgraph]'``, ``'.[dbos]'``).

The harness's core imports none of them; a target that names an extra is refused, before
anything runs, with a message naming the extra and the install command.
"""

from __future__ import annotations

import importlib.util
import sys

from shopops.errors import InputError

__all__ = ["EXTRAS", "ExtraMissing", "missing", "require"]

#: extra name -> the modules it provides (pyproject ``[project.optional-dependencies]``).
EXTRAS: dict[str, tuple[str, ...]] = {
    "langgraph": ("langgraph.graph", "langgraph.checkpoint.sqlite"),
    "dbos": ("dbos",),
}


def missing(extra: str) -> tuple[str, ...]:
    """The modules of ``extra`` that cannot be imported here (empty when it is installed).

    Raises:
        InputError: ``extra`` is not one of ``EXTRAS``.
    """
    if extra not in EXTRAS:
        raise InputError(f"target.extra: {extra!r} is not one of {', '.join(EXTRAS)}",
                         input="target.extra", value=extra, allowed=", ".join(EXTRAS))
    absent = []
    for name in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package is missing, or blocked
            found = False
        if not found:
            absent.append(name)
    return tuple(absent)


class ExtraMissing(InputError):
    """A target needs an optional extra that is not installed (fields as ``InputError``:
    ``input`` names who needs it, ``value`` the extra, ``allowed`` the install command)."""


def require(extra: str, needed_by: str) -> None:
    """Refuse, before anything runs, a target whose extra is not installed.

    Args:
        extra: a key of ``EXTRAS``.
        needed_by: who needs it, for the message (a scenario file and its field).

    Raises:
        ExtraMissing: some module of the extra cannot be imported.
        InputError: ``extra`` is unknown.
    """
    absent = missing(extra)
    if absent:
        command = f"{sys.executable} -m pip install -e '.[{extra}]'"  # this interpreter's
        raise ExtraMissing(
            f"{needed_by}: needs the optional extra {extra!r}, which is not installed "
            f"(missing module(s): {', '.join(absent)}); install it with {command}",
            input=needed_by, value=extra, allowed=command)
