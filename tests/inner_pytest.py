"""Inner pytest sessions the tests start (``pytester`` runs, ``python -m pytest`` in a
scratch project or a copy of the checkout) start without the third-party plugins that
``pyproject.toml``'s addopts turn off: langsmith's (installed with langgraph),
hypothesis's and anyio's pytest plugins cost ~3.4 s of every pytest start on a quiet
machine (~6 s on a busy one) and none of those sessions uses them. A session outside this
checkout does not read our ``pyproject.toml``, so it gets them from ``PYTEST_ADDOPTS``."""

from __future__ import annotations

import os
import shlex

__all__ = ["INNER_ADDOPTS", "inner_env", "no_plugins"]

INNER_ADDOPTS = "-p no:langsmith_plugin -p no:hypothesispytest -p no:anyio"


def no_plugins() -> list[str]:
    """``INNER_ADDOPTS`` as command-line arguments (for a command line that pytest-xdist
    forwards to its workers)."""
    return shlex.split(INNER_ADDOPTS)


def inner_env(**extra: str) -> dict[str, str]:
    """This process's environment with ``PYTEST_ADDOPTS=INNER_ADDOPTS`` and ``extra``."""
    return {**os.environ, "PYTEST_ADDOPTS": INNER_ADDOPTS, **extra}
