"""How workers are started. ``Launcher`` is the protocol; one module per implementation
(like pytest-xdist's ``scheduler/``): ``harness.launch.spawn.SpawnLauncher`` starts a
fresh interpreter per worker (full isolation, the only choice for a foreign
implementation); ``harness.launch.fork.ForkLauncher`` forks the reference loop from a
pre-imported server. ``make_launcher``, the factory, lives here with the protocol: the
implementations never import this module back, so there is no import cycle."""

from __future__ import annotations

from typing import Protocol

from harness.launch.processes import Worker
from harness.launch.spawn import SpawnLauncher

__all__ = ["LAUNCHERS", "Launcher", "SpawnLauncher", "make_launcher"]

#: Launcher names, the default first.
LAUNCHERS = ("fork", "spawn")


class Launcher(Protocol):
    """Starts one worker process in its own process group.

    ``start`` returns a ``harness.launch.processes.Worker`` that the caller waits for (and may
    kill); it raises ``OSError`` if the process cannot be started. ``close`` releases what
    the launcher holds (a fork server); whoever made the launcher closes it.
    """

    name: str

    def start(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str, index: int) -> Worker:
        """Start ``argv`` with exactly ``env``; output to the files ``stdout``/``stderr``."""
        ...

    def close(self) -> None:
        """Release the launcher's resources; workers still running are killed. Idempotent."""
        ...


def make_launcher(name: str, *, begin: bool = False) -> Launcher:
    """A new launcher by name: ``"fork"`` or ``"spawn"`` (``LAUNCHERS``). ``begin``: the
    fork launcher's server starts now, without waiting for it (``ForkLauncher.begin``), so
    that its imports run beside the caller's own work; otherwise at the first worker.

    Raises:
        ValueError: an unknown name.
    """
    if name == "spawn":
        return SpawnLauncher()
    if name == "fork":
        from harness.launch.fork import ForkLauncher
        from harness.launch.target_servers import TargetServers

        # target workers (python -m harness.targets.worker) fork from servers that preload
        # the frameworks their code uses, started at their first worker; the rest spawns
        launcher = ForkLauncher(fallback=TargetServers())  # type: ignore[arg-type]
        if begin:
            launcher.begin()
        return launcher
    raise ValueError(f"unknown launcher {name!r}; allowed: {', '.join(LAUNCHERS)}")
