"""The mock gateway's werkzeug server objects, kept between executions.

werkzeug's ``BaseWSGIServer.__init__`` looks its own version up in the installed
distributions' metadata each time a server is made (``importlib.metadata.version``: the
``METADATA`` file parsed with the ``email`` package), ~1 ms of CPU, about 6 % of the
harness's CPU an execution (issue 27). An execution's gateway (``MockGateway`` on port 0)
takes an idle server object here, binds it to a **new** listening socket and serves its
own WSGI app; once the gateway stops, the object is given back. Only the Python object is
reused: never a socket, a connection, a thread or an app.

Why that is safe: a request thread reads ``server.app`` when its request comes, so a
server object is kept only when none of its request threads is alive any more, after
``server_close`` (its listening socket closed, connections not yet accepted dropped by the
kernel, and the service loop accepts nothing for it: ``harness.services.serving.Serving.
stop``). werkzeug's request threads are daemon threads, which ``server_close`` does not
join; ``_KeptServer`` records them so that ``give_back`` can look. A server with a thread
still running is dropped, never kept: no request of one execution can reach the next one's
ledger.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from werkzeug.serving import BaseWSGIServer, ThreadedWSGIServer, WSGIRequestHandler

__all__ = ["give_back", "take"]

#: Idle server objects kept, per (host, handler class): one per lane is enough.
MAX_IDLE = 8
#: How long ``give_back`` waits, in seconds in all, for request threads still ending.
BUSY_WAIT_S = 1.0



class _KeptServer(ThreadedWSGIServer):
    """werkzeug's threaded server (what ``make_server(threaded=True)`` makes) that records
    its request threads (``threads``, the live ones and the newest)."""

    threads: list[threading.Thread]

    def process_request(self, request: Any, client_address: Any) -> None:
        """As ``socketserver.ThreadingMixIn.process_request``: a daemon thread per
        connection, recorded."""
        thread = threading.Thread(target=self.process_request_thread,
                                  args=(request, client_address), daemon=True)
        self.threads = [t for t in getattr(self, "threads", ()) if t.is_alive()] + [thread]
        thread.start()

    def busy(self, wait_s: float) -> bool:
        """Whether a request thread of it still runs after waiting up to ``wait_s``
        seconds in all for them to end (a thread whose worker is gone ends at once: its
        connection is closed)."""
        deadline = time.monotonic() + wait_s
        for thread in getattr(self, "threads", ()):
            thread.join(max(0.0, deadline - time.monotonic()))
        return any(t.is_alive() for t in getattr(self, "threads", ()))


_idle: dict[tuple[str, type[WSGIRequestHandler]], list[_KeptServer]] = {}
_lock = threading.Lock()


def take(host: str, app: Callable[..., Any], handler: type[WSGIRequestHandler]
         ) -> BaseWSGIServer:
    """A threaded werkzeug server listening on a new ephemeral port of ``host`` and
    serving ``app``: an idle one bound afresh, or a new one (as ``werkzeug.serving.
    make_server(host, 0, app, threaded=True, request_handler=handler)`` makes it).

    Raises:
        OSError: an idle server's new socket cannot be bound (a new server: werkzeug
            prints the error and raises ``SystemExit``, as ``make_server`` does).
    """
    with _lock:
        idle = _idle.get((host, handler))
        server = idle.pop() if idle else None
    if server is None:
        return _KeptServer(host, 0, app, handler)
    server.socket = socket.socket(server.address_family, server.socket_type)
    server.server_address = (host, 0)  # a new ephemeral port, not the last one it had
    try:
        server.server_bind()  # socketserver.TCPServer: bind, then server_address
        server.server_activate()  # listen
    except BaseException:
        server.socket.close()
        raise
    server.app = app
    server.port = server.server_address[1]
    return server


def give_back(server: BaseWSGIServer, host: str, handler: type[WSGIRequestHandler]) -> None:
    """Keep ``server`` for the next ``take`` of ``(host, handler)`` unless a request thread
    of it still runs after ``BUSY_WAIT_S`` (then it is dropped). Call it only once
    ``server.server_close()`` returned and nothing accepts for it (the module's docstring
    says why)."""
    if not isinstance(server, _KeptServer) or server.busy(BUSY_WAIT_S):
        return
    server.app = _closed_app
    with _lock:
        idle = _idle.setdefault((host, handler), [])
        if len(idle) < MAX_IDLE:
            idle.append(server)


def _closed_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """What an idle server serves: nothing (no socket reaches it; a guard, not a path)."""
    start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
    return [b"gateway closed\n"]
