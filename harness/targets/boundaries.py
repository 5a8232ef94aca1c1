"""Kill points at a target's durability boundaries, installed before its code is imported.

A loop that never calls ``failpoint()`` still crosses the boundaries where a crash changes
what recovery must do. ``install(gateway_url)`` puts a labelled point (``shopops_contract.labels``,
``b.*``) at each, through the hooks each layer offers; each point is an ordinary
``failpoint()`` hit, reported over the harness's channel, so it appears in the trace, the
matrix, the reports and the scenario grammar like any other:

- SQLite (the stdlib ``sqlite3``, hence also SQLAlchemy's pysqlite dialect, LangGraph's
  ``SqliteSaver`` and DBOS's SQLite system database): ``sqlite3.connect`` (and
  ``sqlite3.dbapi2.connect``) hand out a ``Connection`` subclass (the documented
  ``factory=`` argument) whose ``commit()``, ``with conn:`` exit and ``execute("COMMIT")``
  pass ``b.sqlite.before_commit`` / ``b.sqlite.after_commit`` while a transaction is open.
  Not covered: autocommit connections (``isolation_level=None``), whose statements commit
  one by one, and a ``COMMIT`` issued through a cursor.
- HTTP to the gateway (URLs under ``gateway_url``): ``requests.Session.send``,
  ``httpx.Client.send`` and ``urllib.request.OpenerDirector.open`` pass
  ``b.http.before_request`` / ``b.http.after_response``.
- LangGraph nodes: a LangChain callback handler registered with
  ``langchain_core.tracers.context.register_configure_hook`` (LangChain's own hook for
  handlers on every run) passes ``b.langgraph.node_start`` / ``b.langgraph.node_end`` for
  each node run (``metadata["langgraph_node"]``), and ``b.langgraph.task_start`` /
  ``b.langgraph.task_end`` for each ``@task`` run.
- DBOS steps: DBOS has no public step hook, so ``DBOS.step`` is wrapped: each step
  function passes ``b.dbos.step_start`` / ``b.dbos.step_end`` inside DBOS's own step
  wrapper (after the step is claimed, before its output is recorded).

A layer that is not installed is skipped; the framework hooks are installed lazily, when
the framework is first imported (an import hook), so installing costs nothing for a target
that does not use it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sqlite3
import sqlite3.dbapi2
import sys
from collections.abc import Callable
from typing import Any

from shopops.failpoints import failpoint

__all__ = ["HookedConnection", "install"]

_installed: dict[str, bool] = {}
_gateway: list[str] = []


def _commit_statement(sql: object) -> bool:
    return isinstance(sql, str) and sql.lstrip()[:6].upper() in ("COMMIT", "END")


class HookedConnection(sqlite3.Connection):
    """A ``sqlite3.Connection`` whose commits pass the ``b.sqlite.*`` points."""

    def commit(self) -> None:
        """Commit, passing ``b.sqlite.before_commit`` and ``b.sqlite.after_commit`` when a
        transaction is open (a commit with none is a no-op and passes nothing)."""
        if not self.in_transaction:
            return super().commit()
        failpoint("b.sqlite.before_commit")
        super().commit()
        failpoint("b.sqlite.after_commit")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:  # type: ignore[override]
        if exc_type is None and self.in_transaction:
            self.commit()
        return super().__exit__(exc_type, exc, tb)  # type: ignore[no-any-return,unused-ignore]

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
        """As ``sqlite3.Connection.execute``; a ``COMMIT``/``END`` statement is a commit."""
        if _commit_statement(sql) and self.in_transaction:
            failpoint("b.sqlite.before_commit")
            cursor = super().execute(sql, *args, **kwargs)
            failpoint("b.sqlite.after_commit")
            return cursor
        return super().execute(sql, *args, **kwargs)


_real_connect = sqlite3.connect


def _connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    factory = kwargs.get("factory", sqlite3.Connection)
    if not issubclass(factory, HookedConnection):
        kwargs["factory"] = (HookedConnection if factory is sqlite3.Connection else
                             type(f"Hooked{factory.__name__}", (HookedConnection, factory), {}))
    return _real_connect(*args, **kwargs)


def _to_gateway(url: object) -> bool:
    text = str(url)
    return any(text.startswith(prefix) for prefix in _gateway)


def _around_request(send: Callable[..., Any], url_of: Callable[..., object]) -> Any:
    @functools.wraps(send)
    def wrapper(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if not _to_gateway(url_of(request)):
            return send(self, request, *args, **kwargs)
        failpoint("b.http.before_request")
        response = send(self, request, *args, **kwargs)
        failpoint("b.http.after_response")
        return response
    return wrapper


def _install_requests(module: Any) -> None:
    session = module.sessions.Session
    session.send = _around_request(session.send, lambda r: r.url)


def _install_httpx(module: Any) -> None:
    module.Client.send = _around_request(module.Client.send, lambda r: r.url)


def _install_urllib() -> None:
    import urllib.request

    opener = urllib.request.OpenerDirector
    opener.open = _around_request(  # type: ignore[method-assign]
        opener.open, lambda r: r if isinstance(r, str) else r.full_url)


def _install_langgraph(context: Any) -> None:
    from contextvars import ContextVar

    from langchain_core.callbacks import BaseCallbackHandler

    class NodeBoundaries(BaseCallbackHandler):  # type: ignore[misc,unused-ignore]
        """Passes ``b.langgraph.node_*`` around every graph node's run, and
        ``b.langgraph.task_*`` around every ``@task``'s (a functional-API call, whose
        ``langgraph_path`` is ``(PUSH, parent path, index, call)``): a node's numbers do
        not move when a node calls a task."""

        run_inline = True  # called in the node's own thread, before/after it runs
        raise_error = True  # a failpoint's FailpointRaised reaches the graph
        _nodes: dict[Any, str] = {}  # run id -> "node" or "task"

        def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
            node = (metadata or {}).get("langgraph_node")
            if node is not None and kwargs.get("name") == node:
                path: tuple[Any, ...] = tuple((metadata or {}).get("langgraph_path") or ())
                kind = ("task" if len(path) >= 4 and path[0] == "__pregel_push"
                        and isinstance(path[1], tuple) else "node")
                self._nodes[run_id] = kind
                failpoint(f"b.langgraph.{kind}_start")

        def on_chain_end(self, outputs: Any, *, run_id: Any, **kwargs: Any) -> None:
            kind = self._nodes.pop(run_id, None)
            if kind is not None:
                failpoint(f"b.langgraph.{kind}_end")

    handler = NodeBoundaries()
    var: ContextVar[Any] = ContextVar("shopops_chaos_boundaries", default=handler)
    context.register_configure_hook(var, True)


def _install_dbos(module: Any) -> None:
    dbos_class = module.DBOS
    original = dbos_class.__dict__["step"].__func__

    def step(cls: Any, *args: Any, **kwargs: Any) -> Any:
        decorate = original(cls, *args, **kwargs)

        def wrap(function: Callable[..., Any]) -> Any:
            @functools.wraps(function)
            def bounded(*a: Any, **k: Any) -> Any:
                failpoint("b.dbos.step_start")
                result = function(*a, **k)
                failpoint("b.dbos.step_end")
                return result
            return decorate(bounded)
        return wrap

    dbos_class.step = classmethod(step)


_LAZY: dict[str, Callable[[Any], None]] = {
    "requests": _install_requests,
    "httpx": _install_httpx,
    "langchain_core.tracers.context": _install_langgraph,
    "dbos": _install_dbos,
}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs an installer right after its module is first imported (PEP 451 finder that
    wraps the real loader's ``exec_module``)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _LAZY or _installed.get(name):
            return None
        _installed[name] = True  # do not find ourselves again
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            _installed[name] = False
            return None
        loader, installer = spec.loader, _LAZY[name]
        real_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            real_exec(module)
            installer(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(gateway_url: str | None) -> None:
    """Install every boundary point in this process; idempotent.

    Args:
        gateway_url: requests to URLs starting with it pass the ``b.http.*`` points
            (``None``: no HTTP points).
    """
    if gateway_url:
        _gateway[:] = [gateway_url.rstrip("/") + "/"]
    if _installed.get("sqlite3"):
        return
    _installed["sqlite3"] = True
    sqlite3.connect = _connect  # type: ignore[assignment]
    sqlite3.dbapi2.connect = _connect  # type: ignore[assignment]
    _install_urllib()
    for name in list(_LAZY):
        if name in sys.modules:  # already imported (a fork server preloaded it)
            _installed[name] = True
            _LAZY[name](sys.modules[name])
    sys.meta_path.insert(0, _AfterImport())
