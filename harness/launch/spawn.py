"""``SpawnLauncher``: a fresh interpreter per worker (``subprocess.Popen`` in a new
session) — full isolation, the only choice for a foreign implementation. One of the
implementations of ``harness.launch.launcher.Launcher``."""

from __future__ import annotations

from harness.launch.processes import Worker, spawn

__all__ = ["SpawnLauncher"]


class SpawnLauncher:
    """A fresh ``python`` per worker (``subprocess.Popen``, new session)."""

    name = "spawn"

    def start(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str, index: int) -> Worker:
        """See ``harness.launch.launcher.Launcher.start``."""
        return spawn(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr, index=index)

    def close(self) -> None:
        """Nothing to release."""
