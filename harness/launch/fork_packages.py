"""Where a package comes from, for the fork launcher: a forked worker runs the code the
fork server preloaded, so a run whose ``cwd`` or ``PYTHONPATH`` would make a fresh
``python -m`` import another copy of that package must not be forked
(``harness.launch.fork`` spawns it instead)."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["package_root", "shadowing_copy"]


def _holds(folder: str, package: str) -> bool:
    return (os.path.isfile(os.path.join(folder, package, "__init__.py"))
            or os.path.isfile(os.path.join(folder, package + ".py")))


def package_root(package: str, candidates: Sequence[str | None]) -> str | None:
    """The first of ``candidates`` that holds ``package`` (real path), else ``None``."""
    for folder in candidates:
        if folder and _holds(folder, package):
            return os.path.realpath(folder)
    return None


def shadowing_copy(module: str, env: dict[str, str], cwd: str,
                    root: str | None) -> str | None:
    """The folder a fresh ``python -m`` would import the preloaded package ``module`` from
    (``cwd``, then ``PYTHONPATH``) when it is not ``root``, the server's; ``None``
    otherwise. Only packages the server imported itself (``shopops``) can be shadowed."""
    top = module.split(".")[0]
    if top != "shopops":
        return None
    for entry in [cwd, *env.get("PYTHONPATH", "").split(os.pathsep)]:
        if entry and _holds(os.path.join(cwd, entry), top):
            return None if os.path.realpath(os.path.join(cwd, entry)) == root else entry
    return None
