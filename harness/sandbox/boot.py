"""Start an untrusted implementation's worker under resource limits, as its own user.

``python -m harness.sandbox.boot MEMORY_MIB FILE_SIZE_MIB CPU_S NPROC UID CODE_DIR MODULE ARGS...``
sets ``RLIMIT_AS``, ``RLIMIT_FSIZE``, ``RLIMIT_CPU`` and (when sealed) ``RLIMIT_NPROC``
(``resource``, POSIX setrlimit), then — when ``UID`` is not ``-1`` — imports the libraries
the contract (``docs/contract.md``) lets an implementation use (the standard library's ``sqlite3``,
``json``, ``socket``, ``http``; ``requests``) while still root, drops every privilege
(``setgroups([])``, ``setresgid``, ``setresuid`` to ``UID``, see ``credentials(7)``) and
puts ``CODE_DIR`` (``-`` for none) first on ``sys.path``; then runs ``MODULE`` as
``python -m MODULE ARGS`` would. The process is first titled from ``$HARNESS_WORKER_TITLE``
(``name_process``).

The interpreter's own library may sit where the new user cannot go (pyenv under root's
0700 home, a venv in a private checkout). Each ``sys.path`` folder is therefore opened as a
directory while still root and replaced by ``/proc/self/fd/N``: a path through that magic
link needs permission on the folder itself (world-readable), not on its ancestors
(``proc(5)``). For ``/proc/self`` to stay the process's own after the uid change the
process is made dumpable again (``prctl(PR_SET_DUMPABLE, 1)``, ``prctl(2)``) — it holds no
secret of root's, only read-only handles on library folders; packages already imported are
pointed at those handles too (``repoint_packages``). Before the uid changes, the process
gets a mount namespace and a ``/proc`` of its own with ``hidepid=2`` where the host allows
it (``hide_processes``): it then sees only its own uid's processes. Nothing of the
implementation is imported before that, and nothing of the harness or of the reference loop
is imported at all (a target's worker, ``harness.targets.worker``, is the harness's module
that imports the target).
"""

from __future__ import annotations

import ctypes
import os
import resource
import runpy
import sys

import setproctitle

__all__ = ["TITLE_ENV", "can_hide_processes", "drop_privileges", "hide_processes", "limit",
           "main", "name_process", "pin_path", "preload", "repoint_packages", "seal"]

#: The harness names each worker for ``ps``/``top`` through this variable of its env
#: (``shopops-worker ROLE EXECUTION``); read and removed here and by the fork server's child
#: (not ``SHOPOPS_*``: a spawned reference worker would refuse it as an unknown setting).
TITLE_ENV = "HARNESS_WORKER_TITLE"


def name_process(env: dict[str, str] | os._Environ[str]) -> None:
    """Set this process's title (``/proc/PID/cmdline``, what ``ps`` shows) to
    ``env[TITLE_ENV]`` when the harness gave one (``setproctitle``, which rewrites the argv
    area in place; no-op when the variable is absent or empty), and remove the variable from
    ``env``: it is the harness's, and the loop refuses unknown settings. The title holds
    the role and the execution folder's name only — opaque for sealed executions, so it
    tells an untrusted implementation nothing of its crash schedule."""
    title = env.pop(TITLE_ENV, None)
    if title:
        setproctitle.setproctitle(title)


def preload() -> None:
    """Import, as the harness, what a sealed worker may use but could not read from the
    harness's own installation once it is another user (the venv may sit in a 0700 home)."""
    import http.client  # noqa: F401
    import json  # noqa: F401
    import socket  # noqa: F401
    import sqlite3  # noqa: F401

    try:
        import requests  # noqa: F401
    except ImportError:  # pragma: no cover - the harness depends on it
        pass


def pin_path(paths: list[str]) -> list[str]:
    """``paths`` with each existing folder replaced by ``/proc/self/fd/N`` of a directory
    descriptor opened now (see the module docstring); other entries unchanged. The
    packages imported so far are pointed there too (``repoint_packages``)."""
    pinned, moved = [], {}
    for entry in paths:
        if entry and os.path.isdir(entry):
            fd_path = f"/proc/self/fd/{os.open(entry, os.O_RDONLY | os.O_DIRECTORY)}"
            moved[os.path.abspath(entry)] = fd_path
            entry = fd_path
        pinned.append(entry)
    repoint_packages(moved)
    return pinned


def repoint_packages(moved: dict[str, str]) -> None:
    """Rewrite the ``__path__`` of every package imported so far whose folder lies under a
    key of ``moved`` (a folder → its pinned ``/proc/self/fd/N``; the longest match wins):
    a submodule imported later as the sealed uid (``ctypes.util``, which DBOS imports, of
    ``ctypes`` the boot imported) is then found through the pinned descriptor, not through
    a path the uid may not traverse (an interpreter in root's 0700 home). Namespace
    packages (``__path__`` not a list) recompute theirs from ``sys.path``."""
    roots = sorted(moved, key=len, reverse=True)
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if not isinstance(search, list):
            continue
        for i, folder in enumerate(search):
            if not isinstance(folder, str):
                continue
            root = next((r for r in roots if folder == r or folder.startswith(r + os.sep)),
                        None)
            if root is not None:
                search[i] = moved[root] + folder[len(root):]


def drop_privileges(uid: int) -> None:
    """Become ``uid``/``uid`` with no supplementary groups, for good (real, effective and
    saved ids), with a private umask."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    os.umask(0o077)
    ctypes.CDLL(None, use_errno=True).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE = 4


def limit(memory_mib: int, file_mib: int, cpu_s: int) -> None:
    """``RLIMIT_AS`` (MiB), ``RLIMIT_FSIZE`` (MiB), ``RLIMIT_CPU`` (seconds)."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_mib << 20, memory_mib << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mib << 20, file_mib << 20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))


_CLONE_NEWNS = 0x00020000  # sched.h
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18  # sys/mount.h


def hide_processes() -> bool:
    """As root, before the uid changes: give this process a mount namespace of its own
    (``unshare(CLONE_NEWNS)``, ``unshare(2)``), make every mount in it private (nothing
    propagates back to the host) and mount a fresh ``/proc`` there with ``hidepid=2``
    (``proc(5)``): once it is another user, the worker and its descendants see in ``/proc``
    only their own uid's processes — not the harness's command lines nor other executions'.
    The harness's own ``/proc`` is untouched. Returns ``False`` (nothing changed) where the
    platform does not allow it (no ``CAP_SYS_ADMIN``, a seccomp filter, not Linux); the
    worker then sees every process, as ``docs/security.md`` says."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNS) != 0:
            return False
        if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            return False
        return bool(libc.mount(b"proc", b"/proc", b"proc", 0, b"hidepid=2") == 0)
    except (OSError, AttributeError):
        return False


def can_hide_processes() -> bool:
    """Whether ``hide_processes`` works on this host (root, a mount namespace and a
    ``proc`` mount allowed): tried in a forked child, which exits at once; this process is
    unchanged."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if hide_processes() else 1)
    return os.waitpid(pid, 0)[1] == 0


def seal(limits: tuple[int, int, int, int], uid: int) -> None:
    """The limits ``(memory MiB, file MiB, CPU s, processes)``, other uids' processes
    hidden (``hide_processes``, where the platform allows), then become ``uid``."""
    hide_processes()
    limit(*limits[:3])
    resource.setrlimit(resource.RLIMIT_NPROC, (limits[3], limits[3]))
    drop_privileges(uid)


def main(argv: list[str]) -> None:
    """Apply the limits in ``argv[:4]``, drop to ``argv[4]``, run ``argv[6]`` with the rest
    as its argv."""
    memory_mib, file_mib, cpu_s, nproc, uid = (int(a) for a in argv[:5])
    code_dir, module, args = argv[5], argv[6], argv[7:]
    name_process(os.environ)
    if uid >= 0:
        preload()
        sys.path[:] = pin_path(sys.path)
        seal((memory_mib, file_mib, cpu_s, nproc), uid)
    else:
        limit(memory_mib, file_mib, cpu_s)
    if code_dir != "-":
        sys.path.insert(0, code_dir)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
