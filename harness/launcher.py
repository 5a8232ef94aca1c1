"""How workers are started. ``Launcher`` is the protocol; ``SpawnLauncher`` starts a fresh
interpreter per worker (full isolation, the only choice for a foreign implementation)."""

from __future__ import annotations

from typing import Protocol

from harness.processes import Worker, spawn


class Launcher(Protocol):
    """Starts one worker process in its own process group.

    ``start`` returns a ``harness.processes.Worker`` that the caller waits for (and may
    kill); it raises ``OSError`` if the process cannot be started.
    """

    name: str

    def start(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str, index: int) -> Worker:
        """Start ``argv`` with exactly ``env``; output to the files ``stdout``/``stderr``."""
        ...


class SpawnLauncher:
    """A fresh ``python`` per worker (``subprocess.Popen``, new session)."""

    name = "spawn"

    def start(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str, index: int) -> Worker:
        """See ``Launcher.start``."""
        return spawn(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr, index=index)
