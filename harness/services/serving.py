"""Serve a ``socketserver`` server in a daemon thread that stops at once.

``serve_forever(poll_interval)`` only notices ``shutdown()`` at its next poll: every
execution paid up to one interval when its gateway (50 ms) and its failpoint channel
(10 ms) stopped. Here the loop also waits on a pipe, and ``stop()`` writes to it.
"""

from __future__ import annotations

import os
import selectors
import socketserver
import threading
import uuid
from pathlib import Path

__all__ = ["MAX_SOCKET_PATH", "ServerThread", "open_socket", "socket_address"]


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


class ServerThread:
    """Run ``server`` (any ``socketserver.BaseServer``) in a daemon thread named ``name``.

    A connection the loop's selector reports is handled with ``socketserver``'s
    ``_handle_request_noblock`` (what ``handle_request`` calls once its own, per-call
    selector reports it; that selector cost an ``epoll`` file a request); ``stop()`` wakes
    the loop through a pipe, joins the thread and closes the server. Idempotent.
    """

    def __init__(self, server: socketserver.BaseServer, name: str) -> None:
        self.server = server
        # a connection reset before it is accepted leaves nothing to accept: the accept
        # must then fail (BlockingIOError, ignored), not wait (accepted sockets block)
        server.socket.setblocking(False)  # type: ignore[attr-defined]
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.server, selectors.EVENT_READ)  # type: ignore[arg-type]
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is self.server and not self._stopping.is_set():
                        # the selector said a connection waits: accept it at once, without
                        # ``handle_request``'s second wait on a selector it makes per call
                        self.server._handle_request_noblock()  # type: ignore[attr-defined]  # noqa: SLF001

    def stop(self) -> None:
        """Stop serving now, join the thread, close the server's socket."""
        if not self._stopping.is_set():
            self._stopping.set()
            os.write(self._wake_w, b"x")
            self._thread.join()
            self.server.server_close()
            os.close(self._wake_r)
            os.close(self._wake_w)
