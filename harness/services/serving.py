"""Serve ``socketserver`` servers from one acceptor thread that stops serving each at once.

``serve_forever(poll_interval)`` only notices ``shutdown()`` at its next poll: every
execution paid up to one interval when its gateway (50 ms) and its failpoint channel
(10 ms) stopped. Here one loop per harness process waits on every server and on a pipe,
and ``Serving.stop()`` asks it through the pipe to drop the server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socketserver
import threading
import uuid
from collections import deque
from pathlib import Path

__all__ = ["MAX_SOCKET_PATH", "Serving", "open_socket", "socket_address"]


_log = logging.getLogger(__name__)

#: The longest socket file path ``bind(2)`` takes on Linux (``sun_path`` is 108 bytes with
#: its terminating NUL, ``unix(7)``).
MAX_SOCKET_PATH = 107


def socket_address(prefix: str, folder: Path | None) -> tuple[str, str]:
    """Where a service of the harness listens: ``(address, bind)``, ``address`` as the
    workers are told it (``SHOPOPS_*``), ``bind`` as ``socket.bind`` takes it.

    ``folder`` ``None``: a name in Linux's abstract namespace (``@prefix-PID-RANDOM``; no
    file to leave behind, but anyone on the host may connect, and ``/proc/net/unix`` lists
    it). A folder (a sealed execution's ``Sandbox.shared``: root's, entered only by the
    execution's uid and root): a socket file ``prefix.sock`` there, which no other
    execution can reach (``unix(7)``: connecting needs search permission on the folder).
    A path longer than ``MAX_SOCKET_PATH`` bytes (a deep ``SHOPOPS_SCRATCH``) cannot be
    bound: an abstract name then, guarded only by the service's peer-uid check.
    """
    path = str(folder / f"{prefix}.sock") if folder is not None else ""
    if folder is None or len(os.fsencode(path)) > MAX_SOCKET_PATH:
        address = f"@{prefix}-{os.getpid()}-{uuid.uuid4().hex[:16]}"
        return address, "\0" + address[1:]
    return path, path


def open_socket(server: socketserver.UnixStreamServer, folder: Path | None) -> None:
    """A socket file of ``socket_address`` in ``folder`` connectable by whoever can enter
    the folder (mode 0666: the folder is the guard); nothing for an abstract socket."""
    address = server.server_address
    if folder is not None and isinstance(address, str) and not address.startswith("\0"):
        os.chmod(address, 0o666)


class _Acceptor:
    """One daemon thread per harness process that accepts the connections of every
    service server (gateway, approval service, failpoint channel, of every execution) from
    one selector: a thread, a selector and a pipe per server and execution cost ~1 ms of
    CPU an execution (issue 27). A server is added and removed by the loop itself, on a
    request through a pipe, so that once ``remove`` returns nothing accepts for it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._todo: deque[tuple[bool, socketserver.BaseServer, threading.Event]] = deque()
        self._thread = threading.Thread(target=self._loop, name="service-acceptor",
                                        daemon=True)
        self._thread.start()

    def change(self, add: bool, server: socketserver.BaseServer) -> None:
        """Add (``add``) or remove ``server``; returns once the loop has done it (at once
        when called from the loop itself: a handler that is not a thread of its own)."""
        done = threading.Event()
        self._todo.append((add, server, done))
        if threading.current_thread() is self._thread:
            self._changes()
            return
        os.write(self._wake_w, b"x")
        while not done.wait(1.0):
            if not self._thread.is_alive():  # the interpreter is ending: nothing accepts
                return

    def _loop(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.fileobj == self._wake_r:
                    self._changes()
                    continue
                try:  # the selector said a connection waits: accept it at once
                    key.fileobj._handle_request_noblock()  # type: ignore[union-attr]  # noqa: SLF001
                except Exception:  # noqa: BLE001 - one server's error must not stop the others
                    _log.exception("service acceptor: accepting a connection failed")

    def _changes(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        while self._todo:
            add, server, done = self._todo.popleft()
            if add:
                self._selector.register(server, selectors.EVENT_READ)  # type: ignore[arg-type]
            else:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(server)  # type: ignore[arg-type]
            done.set()


_acceptor: _Acceptor | None = None
_acceptor_lock = threading.Lock()


def _the_acceptor() -> _Acceptor:
    """This process's acceptor (a forked child starts its own: threads do not fork)."""
    global _acceptor
    with _acceptor_lock:
        if _acceptor is None or _acceptor.pid != os.getpid():
            _acceptor = _Acceptor()
        return _acceptor


class Serving:
    """Serve ``server`` (any ``socketserver.BaseServer``) until ``stop``: its connections
    are accepted by this process's one acceptor thread (``_Acceptor``) with
    ``socketserver``'s ``_handle_request_noblock`` (what ``handle_request`` calls once its
    own, per-call selector reports a connection; that selector cost an ``epoll`` file a
    request); each connection is then handled as the server handles it (a thread of its
    own for a threading server). ``name`` names the service in messages. ``stop()``
    returns once nothing accepts for the server any more, then closes its socket.
    Idempotent.
    """

    def __init__(self, server: socketserver.BaseServer, name: str) -> None:
        self.server = server
        self.name = name
        # a connection reset before it is accepted leaves nothing to accept: the accept
        # must then fail (BlockingIOError, ignored), not wait (accepted sockets block)
        server.socket.setblocking(False)  # type: ignore[attr-defined]
        self._acceptor = _the_acceptor()
        self._stopped = False
        self._acceptor.change(True, server)

    def stop(self) -> None:
        """Stop accepting now, close the server's socket."""
        if not self._stopped:
            self._stopped = True
            self._acceptor.change(False, self.server)
            self.server.server_close()
