"""Target workers fork from a server that preloaded the frameworks their code uses, and
only those (``harness.forkserver.worker.target_preload``): importing LangGraph and DBOS costs
~2.5 s of CPU per server start on this machine, which a plain-Python target never needs.

The story driver names the frameworks in the worker's environment (``FRAMEWORKS_ENV``:
comma-separated, e.g. ``langgraph``; empty for none); ``TargetServers`` keeps one fork
server per set, started at its first worker. Which frameworks a target uses is read from
its code (``frameworks_of``): a shipped example's extra (``langgraph``, ``dbos``), or every
package of ``FRAMEWORKS`` its folder's Python files import. A miss only costs speed: the worker
then imports the framework itself, as a spawned worker would.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from harness.forkserver.worker import FRAMEWORKS, target_preload
from harness.launch.fork import ForkLauncher
from harness.launch.processes import Worker

__all__ = ["FRAMEWORKS_ENV", "TargetServers", "frameworks_of", "sealed_server"]

#: The worker environment variable naming the frameworks its target's code uses.
FRAMEWORKS_ENV = "HARNESS_TARGET_FRAMEWORKS"
#: Files read per folder at most, and bytes per file: a scan, not a parse.
_MAX_FILES, _MAX_BYTES = 500, 1_000_000


@lru_cache(maxsize=64)
def frameworks_of(folder: Path, extra: str | None) -> tuple[str, ...]:
    """The ``FRAMEWORKS`` a target in ``folder`` with extra ``extra`` uses: its extra, for
    a shipped example (``harness.targets.examples``); otherwise every one imported
    (``import X`` / ``from X``) by a ``.py`` file under ``folder`` (the first ``_MAX_FILES``
    files, unreadable ones skipped). Sorted."""
    if extra in FRAMEWORKS:
        return (extra,)
    found: set[str] = set()
    pattern = re.compile(rb"^\s*(?:from|import)\s+(" + b"|".join(
        re.escape(n.encode()) for n in FRAMEWORKS) + rb")\b", re.MULTILINE)
    for n, path in enumerate(sorted(folder.rglob("*.py"))):
        if n >= _MAX_FILES or found == set(FRAMEWORKS):
            break
        try:
            with open(path, "rb") as f:
                found |= {m.decode() for m in pattern.findall(f.read(_MAX_BYTES))}
        except OSError:
            continue
    return tuple(sorted(found))


def sealed_server(folder: Path, extra: str | None) -> ForkLauncher:
    """A sealed fork server (``harness.forkserver.sealed``) for an untrusted target's
    workers: preloaded with the contract's libraries, the harness's target worker and the
    frameworks ``folder``'s code imports (``frameworks_of``), never with its code; each
    child drops to its execution's uid before the target is imported. Importing LangGraph
    once instead of per worker: a sealed LangGraph execution took 40 s spawned, one
    measurement on a busy machine. Started at its first worker."""
    return ForkLauncher(sealed=True, fallback=None, start_timeout_s=120.0,
                        preload=target_preload(frameworks_of(folder, extra)))


class TargetServers:
    """A launcher (``harness.launch.launcher.Launcher``) for ``python -m harness.targets.worker``
    argvs: one ``ForkLauncher`` per framework set named in the worker's environment
    (``FRAMEWORKS_ENV``), each preloading that set, started at its first worker and
    falling back to fresh interpreters if it cannot start (``degrade``)."""

    name = "fork"

    def __init__(self, start_timeout_s: float = 120.0) -> None:
        self.start_timeout_s = start_timeout_s
        self._servers: dict[tuple[str, ...], ForkLauncher] = {}

    def server(self, frameworks: tuple[str, ...]) -> ForkLauncher:
        """The server for ``frameworks`` (created on first use)."""
        if frameworks not in self._servers:
            self._servers[frameworks] = ForkLauncher(
                modules=("harness.targets.worker",), preload=target_preload(frameworks),
                start_timeout_s=self.start_timeout_s, degrade=True)
        return self._servers[frameworks]

    def start(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str, index: int) -> Worker:
        """Start ``argv`` from the server of the frameworks ``env`` names (every known one
        when it names none: a caller that did not say)."""
        named = env.get(FRAMEWORKS_ENV)
        frameworks = (tuple(sorted(FRAMEWORKS)) if named is None
                      else tuple(sorted({n for n in named.split(",") if n in FRAMEWORKS})))
        return self.server(frameworks).start(argv, env=env, cwd=cwd, stdout=stdout,
                                             stderr=stderr, index=index)

    def close(self) -> None:
        """Stop every server (their running workers are killed). Idempotent."""
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.close()
