"""One service loop per harness process: it accepts the ``socketserver`` servers'
connections, serves the line servers' (``harness.services.lines``), and stops serving each
at once.

``serve_forever(poll_interval)`` only notices ``shutdown()`` at its next poll: every
execution paid up to one interval when its gateway (50 ms) and its failpoint channel
(10 ms) stopped. Here one loop per harness process waits on every socket and on a pipe,
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["MAX_SOCKET_PATH", "Ready", "ServiceLoop", "Serving", "open_socket", "socket_address",
           "the_loop"]


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


def open_socket(address: str, folder: Path | None) -> None:
    """A socket file of ``socket_address`` in ``folder`` connectable by whoever can enter
    the folder (mode 0666: the folder is the guard); nothing for an abstract socket
    (``address`` starting with NUL)."""
    if folder is not None and not address.startswith("\0"):
        os.chmod(address, 0o666)


#: What the loop calls when a watched file is ready: with the ``selectors`` event mask.
Ready = Callable[[int], None]


class ServiceLoop:
    """One daemon thread per harness process that waits on every service socket in one
    selector: the listening sockets of the ``socketserver`` servers (gateway; each
    connection it accepts is then handled as the server handles it, a thread of its own
    for a threading server) and of the line servers (``harness.services.lines``: failpoint
    channel, approval service), and every line-server connection, served here, inline. A
    thread, a selector and a pipe per server and execution cost ~1 ms of CPU an
    execution, a thread per line connection ~2 ms (issue 27). Only the loop's own thread
    changes the selector: others ask it through a queue and a pipe (``run``, ``post``)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)  # full: a wake-up is pending anyway
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._todo: deque[Callable[[], object]] = deque()
        self._watched: set[Any] = set()  # what ``watch`` registered, by object
        self._thread = threading.Thread(target=self._loop, name="service-loop",
                                        daemon=True)
        self._thread.start()

    @property
    def in_loop(self) -> bool:
        """Whether the caller is the loop's own thread."""
        return threading.current_thread() is self._thread

    def post(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` in the loop soon (FIFO); returns at once."""
        self._todo.append(fn)
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"x")

    def run(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` in the loop and return once it has run (at once when called from
        the loop itself). Returns without it when the loop is gone (the interpreter is
        ending: nothing is served any more)."""
        if self.in_loop:
            fn()
            return
        done = threading.Event()

        def call() -> None:
            try:
                fn()
            finally:
                done.set()

        self.post(call)
        while not done.wait(1.0):
            if not self._thread.is_alive():
                return

    def watch(self, fileobj: Any, events: int, ready: Ready) -> None:
        """Call ``ready(mask)`` whenever ``fileobj`` is ready for ``events`` (the loop's
        thread only); ``events`` 0: stop watching it.

        Whether it is watched already is looked up in the selector's map with ``in``, not
        with ``get_key``: that raises a ``KeyError`` whose message holds the socket's
        ``repr``, two ``getsockname``/``getpeername`` calls and two enum conversions, for
        every new connection (~0.1 ms each; issue 27)."""
        key = self._selector.get_map().get(fileobj) if fileobj in self._watched else None
        if key is None:
            if events:
                self._selector.register(fileobj, events, ready)
                self._watched.add(fileobj)
            return
        if not events:
            self._selector.unregister(fileobj)
            self._watched.discard(fileobj)
        elif key.events != events or key.data is not ready:
            self._selector.modify(fileobj, events, ready)

    def change(self, add: bool, server: socketserver.BaseServer) -> None:
        """Add (``add``) or remove a ``socketserver`` server; returns once the loop has
        done it, so that once a removal returns nothing accepts for the server."""
        def accept(mask: int) -> None:  # the selector said a connection waits: accept it
            server._handle_request_noblock()  # type: ignore[attr-defined]  # noqa: SLF001

        self.run(lambda: self.watch(server, selectors.EVENT_READ if add else 0, accept))

    def _loop(self) -> None:
        while True:
            for key, mask in self._selector.select():
                if key.data is None:
                    self._changes()
                    continue
                try:
                    key.data(mask)
                except Exception:  # noqa: BLE001 - one service's error must not stop the others
                    _log.exception("service loop: serving a socket failed")

    def _changes(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        for _ in range(len(self._todo)):  # what was asked so far: a call that asks again
            fn = self._todo.popleft()  # (a connection's next lines) waits for the next turn
            try:
                fn()
            except Exception:  # noqa: BLE001 - as above
                _log.exception("service loop: a queued call failed")


_loop: ServiceLoop | None = None
_loop_lock = threading.Lock()


def the_loop() -> ServiceLoop:
    """This process's service loop (a forked child starts its own: threads do not fork)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.pid != os.getpid():
            _loop = ServiceLoop()
        return _loop


class Serving:
    """Serve ``server`` (any ``socketserver.BaseServer``) until ``stop``: its connections
    are accepted by this process's service loop (``ServiceLoop``) with
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
        self._loop = the_loop()
        self._stopped = False
        self._loop.change(True, server)

    def stop(self) -> None:
        """Stop accepting now, close the server's socket."""
        if not self._stopped:
            self._stopped = True
            self._loop.change(False, self.server)
            self.server.server_close()
