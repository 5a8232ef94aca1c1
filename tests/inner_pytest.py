"""How the tests start inner pytest sessions (``pytester`` runs, ``python -m pytest`` in a
scratch project or a copy of the checkout), one rule in one place:

- without the third-party plugins that ``pyproject.toml``'s addopts turn off: langsmith's
  (installed with langgraph), hypothesis's and anyio's pytest plugins cost ~3.4 s of every
  pytest start on a quiet machine (~6 s on a busy one) and none of those sessions uses
  them; a session outside this checkout does not read our ``pyproject.toml``, so it gets
  them from ``PYTEST_ADDOPTS`` (or, for pytest-xdist workers, from the command line);
- with their bytecode cached in a folder of the test session (``PYTHONPYCACHEPREFIX``,
  never next to the sources), also when the environment says ``PYTHONDONTWRITEBYTECODE``:
  every pytest start otherwise compiles and assertion-rewrites all of ``harness/`` and
  ``shopops/`` (the plugin's distribution) again, ~0.5 s of each start. Only sessions whose
  Python files do not change during the test session get it (not the mutants' copies).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

__all__ = ["INNER_ADDOPTS", "inner_env", "no_plugins"]

INNER_ADDOPTS = "-p no:langsmith_plugin -p no:hypothesispytest -p no:anyio"


def no_plugins() -> list[str]:
    """``INNER_ADDOPTS`` as command-line arguments (for a command line that pytest-xdist
    forwards to its workers)."""
    return shlex.split(INNER_ADDOPTS)


def inner_env(pyc: Path | None = None, **extra: str) -> dict[str, str]:
    """This process's environment with ``PYTEST_ADDOPTS=INNER_ADDOPTS``, bytecode cached
    under ``pyc`` when given (see the module), and ``extra``."""
    env = {**os.environ, "PYTEST_ADDOPTS": INNER_ADDOPTS}
    if pyc is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pyc)
    return {**env, **extra}
