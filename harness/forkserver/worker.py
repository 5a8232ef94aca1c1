"""What a reference worker runs after the fork server forks it, and what the server
imports before any fork (``harness.forkserver.server``): the modules of ``python -m shopops run``
(``PRELOAD``), imported once so that a worker start costs a ``fork()`` instead of an
interpreter start, and ``run_module``, which resets everything process-wide a worker reads
(environment, failpoints, default services) and runs the module as ``python -m`` would."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import signal
import sys
import time
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import CodeType

__all__ = ["FRAMEWORKS", "PRELOAD", "TARGET_BASE", "TARGET_PRELOAD", "main_code", "preload",
           "run_main", "run_module",
           "shopops_root", "target_preload"]


#: What ``python -m shopops run`` imports, before or while it runs (``netrc`` and ``shlex``
#: are imported lazily by requests at the first request).
PRELOAD = (
    "argparse", "json", "sqlite3", "hashlib", "secrets", "netrc", "shlex", "runpy",
    "traceback", "requests", "shopops", "shopops.cli", "shopops.failpoints",
    "shopops.runtime", "shopops.worker", "shopops.loop", "shopops.checkpoint",
    "shopops.approvals", "shopops.gateway_client", "shopops.tools", "shopops.records",
    "shopops.policy", "shopops.state", "shopops.phases", "shopops.errors",
    "shopops.grant", "shopops.approval_client", "shopops.approval_store",
    "shopops.approval_records", "shopops_contract.labels", "shopops_contract.phases",
    "shopops_contract.digests", "shopops_contract.approvals", "shopops_contract.limits",
)


#: What a target worker (``python -m harness.targets.worker``) imports before the target's
#: own module: the harness's side, and the frameworks of the optional extras (LangGraph
#: ~6 s, DBOS ~3.5 s of imports on this machine), paid once per fork server instead of in
#: every worker. Neither starts a thread on import (``harness.forkserver.server`` checks). The
#: boundary points are installed in the child, after the fork and before the target is
#: imported (``harness.targets.boundaries.install`` wraps modules that are already imported).
TARGET_BASE = ("harness.targets.worker", "harness.targets.boundaries", "harness.targets.context")
#: Each framework a target may use, by its top-level package, and what preloading it means.
FRAMEWORKS = {
    "langgraph": ("langgraph.graph", "langgraph.types", "langgraph.checkpoint.sqlite"),
    "dbos": ("dbos",),
}
TARGET_PRELOAD = TARGET_BASE + tuple(m for mods in FRAMEWORKS.values() for m in mods)


def target_preload(frameworks: Sequence[str]) -> tuple[str, ...]:
    """What a target server preloads for targets using ``frameworks`` (names of
    ``FRAMEWORKS``; others are ignored): the harness's side and those frameworks only."""
    return TARGET_BASE + tuple(m for name in FRAMEWORKS if name in frameworks
                               for m in FRAMEWORKS[name])


def preload(extra: Sequence[str] = ()) -> None:
    """Import ``PRELOAD`` and ``extra`` (a module that cannot be imported — an extra not
    installed — is skipped: a worker that needs it fails as a spawned one would), disarm
    failpoints in the server itself (its environment may still name a channel), then
    freeze the heap so children copy fewer pages on write."""
    for name in PRELOAD:
        importlib.import_module(name)
    for name in extra:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    from shopops import failpoints, runtime

    failpoints.configure(None, None)
    runtime.set_default_services(None)
    _warm_up()
    # the code a child runs as __main__, read once here; and a module imported above and
    # run with -m (harness.targets.worker) must not go through runpy, which warns that it
    # "found it in sys.modules" (RuntimeWarning) in every worker: it runs as in a fresh
    # interpreter instead, its code in a fresh __main__
    for name in ("shopops", *(m for m in extra if m in sys.modules)):
        try:
            _MAINS[name] = main_code(name)
        except ImportError:
            pass  # no code to cache: each child's runpy says so, as a spawned one would
    gc.collect()
    gc.freeze()


def _warm_up() -> None:
    """Build and use ``shopops``'s argument parser once: its regular expressions are then
    compiled in the server (``re``'s cache), not again in every child (~10 ms each); and
    fill ``inspect``'s caches of the databases a worker inspects (each schema run in
    ``:memory:``; ~1.5 ms of a child's first ``inspect`` of each kind); and take the
    gateway client's path up to the socket (``_warm_gateway_client``)."""
    from shopops import cli
    from shopops.approval_store import APPROVAL_QUEUE
    from shopops.checkpoint import CHECKPOINT_DB
    from shopops.checkpoint_file import prime
    from shopops.errors import ShopOpsError
    from shopops.records import DEFAULT_FIXTURES, Records

    prime(CHECKPOINT_DB, APPROVAL_QUEUE)
    try:  # what a worker given the harness's fixtures reads (an implementation's own
        Records.load(DEFAULT_FIXTURES)  # tree may have none: its workers read as before)
    except ShopOpsError:
        pass

    parser = cli.build_parser()
    for command in ("run", "resume"):
        parser.parse_args([command, "--db", "c.db", "--approvals", "a.db", "--gateway",
                           "http://127.0.0.1:1", "--case", "case-O-1", "--order", "O-1",
                           "--run-id", "run-1", "--keys", "on", "--policy", "deterministic"])
    for _ in range(_WARM_CALLS):
        _warm_gateway_client()


#: Calls of each warmed-up path: CPython 3.11 specialises a function's bytecode in place
#: after a few calls (PEP 659), a write that would otherwise copy its page in every child.
_WARM_CALLS = 10


def _warm_gateway_client() -> None:
    """What every worker's gateway client does before its first byte leaves, without a
    connection: a ``requests`` session for a loopback gateway, a send prepared (JSON body,
    headers), its environment settings merged and its adapter chosen. ``requests`` and
    ``urllib`` fill their caches (URL parsing, compiled patterns) in the server; ~2 ms and
    ~170 page copies less per child. Opens no socket and starts no thread."""
    import requests

    from shopops.gateway_client import EmailGatewayClient

    client = EmailGatewayClient("http://127.0.0.1:1")
    try:
        session = client.session
        prepared = session.prepare_request(requests.Request(
            "POST", client.base_url + "/send", headers={"X-ShopOps-Worker-Pid": "1",
                                                       "Idempotency-Key": "warm-up"},
            json={"case_id": "case-O-1", "to": "a@example.com", "subject": "s", "body": "b"}))
        url = prepared.url or client.base_url
        session.merge_environment_settings(url, {}, None, None, None)
        session.get_adapter(url)
    finally:
        client.close()


def run_module(module: str, args: Sequence[str], env: dict[str, str], cwd: str) -> int:
    """Run ``python -m module args...`` in this (forked) process; returns the exit status.

    Everything process-wide a worker reads is reset from ``env`` first: the environment,
    the failpoints (``shopops.failpoints.configure_from_env``) and the default services
    (``shopops.runtime.set_default_services(None)``).
    """
    import runpy
    import traceback

    from shopops import failpoints, runtime

    os.chdir(cwd)
    _replace_environ(env)
    time.tzset()
    extra = [cwd] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in dict.fromkeys(extra) if p not in sys.path]
    sys.argv = ["-m", *args]
    try:
        failpoints.configure_from_env()
        runtime.set_default_services(None)
        if module in _MAINS:
            run_main(*_MAINS[module])
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        status = 130
    except BaseException:
        traceback.print_exc()
        status = 1
    _flush()
    return status


#: ``python -m NAME`` of a preloaded package: its ``__main__``'s spec and code, looked up
#: and unmarshalled once in the server instead of in every child (~0.6 ms of a fresh child).
_MAINS: dict[str, tuple[ModuleSpec, CodeType]] = {}


def main_code(module: str) -> tuple[ModuleSpec, CodeType]:
    """The spec and code ``runpy.run_module(module)`` runs — ``module.__main__``'s for a
    package, else the module's own — found as it finds them (``importlib.util.find_spec``,
    the loader's ``get_code``).

    Raises:
        ImportError: a package without ``__main__``, or code that cannot be read.
    """
    found = importlib.util.find_spec(module)
    package = found is not None and found.submodule_search_locations is not None
    name = f"{module}.__main__" if package else module
    spec = importlib.util.find_spec(name) if package else found
    get_code = getattr(spec.loader, "get_code", None) if spec is not None else None
    code = get_code(name) if get_code is not None else None
    if spec is None or code is None:
        raise ImportError(f"no code for {name}", name=name)
    return spec, code


def run_main(spec: ModuleSpec, code: CodeType) -> None:
    """Run ``code`` as ``runpy.run_module(..., run_name="__main__", alter_sys=True)`` does:
    in a fresh ``__main__`` module with the spec's ``__file__``, ``__cached__``,
    ``__loader__``, ``__package__`` and ``__spec__``, put in ``sys.modules["__main__"]``,
    with ``sys.argv[0]`` the module's file. The process exits afterwards, so nothing is
    restored. Raises whatever the code raises (``SystemExit`` included)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=spec.origin, __cached__=spec.cached, __doc__=None,
                         __loader__=spec.loader, __package__=spec.parent, __spec__=spec)
    sys.modules["__main__"] = main
    sys.argv[0] = spec.origin or sys.argv[0]
    exec(code, main.__dict__)


def _replace_environ(env: dict[str, str]) -> None:
    """Make ``os.environ`` exactly ``env``, touching only what differs: a worker's env is
    mostly the server's, and every ``putenv``/``unsetenv`` in a forked child copies pages
    of the server's heap on write: ``clear`` + ``update`` of ~35 variables cost a child
    ~2.2 ms of CPU here, setting only the difference ~0.9 ms (a bare child: ~2.3 ms). The
    result is the same environment, at the C level too (``putenv``/``unsetenv``)."""
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def shopops_root() -> str:
    """The folder holding the ``shopops`` package this server preloaded."""
    import shopops

    return os.path.dirname(os.path.dirname(os.path.realpath(shopops.__file__)))


def _exit_status(code: object) -> int:
    """What the interpreter makes of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
