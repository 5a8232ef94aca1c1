"""The fork server's sealed mode: fork an untrusted implementation's workers, fast.

A fresh interpreter per worker costs its start-up and the imports of ``requests`` and the
standard library (~0.3-1 s each on a busy machine): grading a foreign implementation took
7-14x the reference's time. ``python -m harness.forkserver.server --sealed`` pays that once: the
server (root, harness code only) imports ``PRELOAD`` — never a line of the implementation —
and pins its ``sys.path`` (``harness.sandbox.boot.pin_path``). Each child, after the server's
usual set-up (own session, descriptors, start gate), applies the request's limits, drops to
the request's uid (``harness.sandbox.boot.seal``), puts the implementation's root-owned copy
first on ``sys.path`` and runs its module as ``python -m`` would. The server runs no code of
the implementation, so its exit reports are as trustworthy as ``Popen.wait``; the harness
still sweeps the execution's uid itself (``harness.launch.sealed``).

Start request field (``harness.forkserver.server`` protocol): ``"sealed": {"uid": int,
"code_dir": str, "limits": [memory_mib, file_size_mib, cpu_s, nproc]}``.
"""

from __future__ import annotations

import gc
import importlib
import os
import runpy
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PRELOAD", "SealedStart", "preload", "run"]

#: What a worker may use under the contract (``docs/contract.md``), imported once by the server.
PRELOAD = ("argparse", "json", "sqlite3", "hashlib", "secrets", "netrc", "shlex", "runpy",
           "traceback", "http.client", "socket", "dataclasses", "enum", "datetime",
           "requests")


@dataclass(frozen=True)
class SealedStart:
    """A start request's sealed part: ``uid``, ``code_dir``, ``limits``
    (memory MiB, file size MiB, CPU s, processes)."""

    uid: int
    code_dir: str
    limits: tuple[int, int, int, int]

    @classmethod
    def from_request(cls, data: Any) -> SealedStart:
        """Validate ``req["sealed"]``.

        Raises:
            TypeError: a missing or mistyped field.
        """
        if not isinstance(data, dict):
            raise TypeError("sealed must be an object")
        uid, code_dir, limits = data.get("uid"), data.get("code_dir"), data.get("limits")
        if not (isinstance(uid, int) and uid > 0 and isinstance(code_dir, str)
                and isinstance(limits, list) and len(limits) == 4
                and all(isinstance(n, int) and n > 0 for n in limits)):
            raise TypeError("sealed needs uid > 0, code_dir and four positive limits")
        return cls(uid, code_dir, (limits[0], limits[1], limits[2], limits[3]))


def preload(extra: Sequence[str] = ()) -> None:
    """In the server: import ``PRELOAD`` and ``extra`` (a sealed target's frameworks and
    the harness's target worker, ``harness.forkserver.worker.target_preload``: never the
    implementation's code; one not installed is skipped), pin ``sys.path`` (and the
    imported packages' folders), freeze the heap."""
    from harness.sandbox import boot as sut_boot

    for name in PRELOAD:
        importlib.import_module(name)
    for name in extra:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # its workers fail as spawned ones would
    sys.path[:] = sut_boot.pin_path(sys.path)
    gc.collect()
    gc.freeze()


def run(start: SealedStart, module: str, args: list[str], env: dict[str, str],
        cwd: str) -> int:
    """In the forked child: limits, the uid, then ``python -m module args``; the exit
    status (``SystemExit``'s code, 1 with a traceback for an uncaught exception)."""
    from harness.sandbox import boot as sut_boot

    sut_boot.seal(start.limits, start.uid)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    time.tzset()
    # a target's server preloaded the harness's target worker, and with it the reference's
    # failpoints and default services, set up from the server's own environment: re-armed
    # from the worker's (as ``harness.forkserver.worker.run_module`` does)
    failpoints = sys.modules.get("shopops.failpoints")
    if failpoints is not None:
        failpoints.configure_from_env()
    runtime = sys.modules.get("shopops.runtime")
    if runtime is not None:
        runtime.set_default_services(None)
    # the harness's own module (a target's worker), preloaded by the server: its cached
    # code runs as __main__, as the unsealed server runs it (runpy would warn in every
    # worker's stderr that it "found it in sys.modules"); an implementation's module is
    # never preloaded, so runpy imports it from code_dir
    preloaded = module.startswith("harness.") and module in sys.modules
    sys.path.insert(0, start.code_dir)
    sys.argv = [module, *args]
    try:
        if preloaded:
            from harness.forkserver.worker import main_code, run_main

            run_main(*main_code(module))
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as exc:
        code = exc.code
        status = 0 if code is None else code & 0xFF if isinstance(code, int) else 1
        if not isinstance(code, int | None):
            print(code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status
