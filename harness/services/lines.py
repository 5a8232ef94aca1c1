"""JSON-lines services on a Unix stream socket, served inline by the process's service loop.

The failpoint channel and the approval service speak the same shape of protocol: a worker
connects, sends one line, waits for the one-line answer, sends the next. Each used to be a
``socketserver.ThreadingUnixStreamServer``: a thread per connection, started by the
acceptor, woken for every line. Their connections are now served by the one service loop
(``harness.services.serving.the_loop``) itself, with non-blocking sockets: measured on a
micro-benchmark of 3 connections of 7 lines each, 5.3–5.9 ms of the server's CPU with a
thread per connection against 3.1–3.8 ms here (issue 27).

A handler's answer must not block the loop, which serves every execution of the process:
an answer that may wait (a worker held at a failpoint until the story releases it, a story
act at a hit that takes a database lock) is handed back as a ``Deferred`` call, run in a
thread of its own while the connection reads nothing more. What a sender can cost the
harness is bounded: at most ``max_line`` bytes of an unfinished line are buffered (more is
``LineHandler.too_long``, and the connection is closed), and nothing more is read from a
connection while an answer to it is unsent (a worker that does not read its answers stops
being read; the kernel's socket buffers hold the rest).

Who sent a line is the kernel's word: each connection's ``pid``, ``uid`` and ``gid`` are
its peer credentials when it connected (``SO_PEERCRED``, ``unix(7)``).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from harness.services.serving import the_loop

__all__ = ["Answer", "Deferred", "LineConnection", "LineHandler", "LineServer",
           "peer_credentials"]

_log = logging.getLogger(__name__)

_CRED = struct.Struct("3i")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }
_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
#: Bytes read from a connection at a time.
_CHUNK = 65536
#: Connections accepted in one turn of the loop before it serves the others again.
_ACCEPTS_PER_TURN = 64
#: Lines of one connection answered in one turn of the loop before the others' turn: a
#: sender that pipelines (a flood) waits for everyone else between each few lines (found by
#: an attack: answering a whole 64 KiB chunk, ~1,000 hits, at once delayed another
#: execution's hits by up to 4 s).
_LINES_PER_TURN = 4


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a connected Unix socket, as
    the kernel recorded them when it connected (``SO_PEERCRED``, ``unix(7)``).

    Raises:
        OSError: the socket is not a connected Unix socket (or is closed).
    """
    pid, uid, gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                 _CRED.size))
    return pid, uid, gid


@dataclass(frozen=True)
class Answer:
    """What the connection gets for a line: ``data`` (bytes, written whole, maybe empty),
    then, with ``close``, the connection is closed."""

    data: bytes = b""
    close: bool = False


#: An answer that may wait: called in a thread of its own, its ``Answer`` sent after.
Deferred = Callable[[], Answer]


@dataclass(eq=False)
class LineConnection:
    """One accepted connection: its socket and the kernel's ``pid``/``uid``/``gid`` of the
    process that connected. ``closed`` once the loop closed it."""

    server: LineServer
    sock: socket.socket
    pid: int
    uid: int
    gid: int
    closed: bool = False


class LineHandler(Protocol):
    """A line service's logic; every method is called in the service loop's thread."""

    def admit(self, conn: LineConnection) -> bool:
        """Whether to serve a new connection (``False``: it is closed at once)."""

    def line(self, conn: LineConnection, line: bytes) -> Answer | Deferred:
        """The answer to one ``line`` (its ``\\n`` included), or a ``Deferred`` one."""

    def too_long(self, conn: LineConnection, size: int) -> None:
        """``conn`` sent ``size`` bytes (at least the server's ``max_line``) with no line
        end: the connection is closed after this."""

    def closed(self, conn: LineConnection) -> None:
        """``conn`` was closed (by either side, or by ``LineServer.stop``)."""


class _Served:
    """The loop's state of one connection (touched only in the loop's thread)."""

    def __init__(self, conn: LineConnection) -> None:
        self.conn = conn
        self.server = conn.server  # its handler, max_line and loop
        self.buf = bytearray()
        self.out = b""
        self.close_after = False
        self.waiting = False  # a Deferred answer runs
        self.events = 0

    def ready(self, mask: int) -> None:
        if self.conn.closed:
            return  # closed earlier in the same turn of the loop
        if mask & _WRITE:
            if self._send():
                self._lines()  # lines that came with the last one, then read on
            return
        try:
            data = self.conn.sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset: a worker killed with unread data on its socket
            self.close()
            return
        if not data:  # end of file: an unfinished line is dropped
            self.close()
            return
        self.buf += data
        self._lines()

    def _lines(self) -> None:
        """Answer the complete lines buffered, one at a time (a loop, not a recursion: a
        sender may pipeline thousands of lines in one chunk), at most ``_LINES_PER_TURN``
        before the loop's other work comes first, then read on."""
        for _ in range(_LINES_PER_TURN):
            if self.conn.closed or self.waiting:
                return
            end = self.buf.find(b"\n", 0, self.server.max_line)
            if end < 0:
                if len(self.buf) >= self.server.max_line:
                    self.server.handler.too_long(self.conn, len(self.buf))
                    self.close()
                else:
                    self._want(_READ)
                return
            line = bytes(self.buf[:end + 1])
            del self.buf[:end + 1]
            try:
                answer = self.server.handler.line(self.conn, line)
            except Exception:  # noqa: BLE001 - as a handler thread dying: this connection ends
                _log.exception("%s: serving a line failed", self.server.name)
                self.close()
                return
            if not isinstance(answer, Answer):
                self._defer(answer)
                return
            if not self._send(answer):
                return
        self._want(0)  # more lines are buffered: after everyone else's turn
        self.server.loop.post(self._lines)

    def _defer(self, deferred: Deferred) -> None:
        self.waiting = True
        self._want(0)  # nothing is read while the answer is made
        loop = self.server.loop

        def run() -> None:
            try:
                answer = deferred()
            except Exception:  # noqa: BLE001
                _log.exception("%s: a deferred answer failed", self.server.name)
                answer = Answer(close=True)
            loop.post(lambda: self._resume(answer))

        threading.Thread(target=run, name=f"{self.server.name}-deferred",
                         daemon=True).start()

    def _resume(self, answer: Answer) -> None:
        self.waiting = False
        if not self.conn.closed and self._send(answer):
            self._lines()

    def _send(self, answer: Answer | None = None) -> bool:
        """Write ``answer`` (``None``: the rest of the last one); ``True`` once all of it is
        sent and the connection stays open (else it waits to be writable, or is closed)."""
        if answer is not None:
            self.out, self.close_after = answer.data, answer.close
        while self.out:
            try:
                sent = self.conn.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                self._want(_WRITE)  # the rest once the worker reads
                return False
            except OSError:
                self.close()
                return False
            self.out = self.out[sent:]
        if self.close_after:
            self.close()
            return False
        return True

    def _want(self, events: int) -> None:
        if events != self.events and not self.conn.closed:
            self.server.loop.watch(self.conn.sock, events, self.ready)
            self.events = events

    def close(self) -> None:
        if self.conn.closed:
            return
        self._want(0)
        self.conn.closed = True
        with contextlib.suppress(OSError):
            self.conn.sock.close()
        self.server.forget(self)
        try:
            self.server.handler.closed(self.conn)
        except Exception:  # noqa: BLE001
            _log.exception("%s: closing a connection failed", self.server.name)


class LineServer:
    """Serve ``handler`` on a Unix stream socket bound at ``bind`` (``socket.bind``'s
    form: a path, or ``"\\0name"`` in Linux's abstract namespace) from this process's
    service loop until ``stop``.

    Args:
        bind: where to listen.
        handler: the service's logic (``LineHandler``).
        name: names the service in log messages and threads.
        max_line: the longest line read, in bytes, its ``\\n`` included.

    Raises:
        OSError: the socket cannot be bound.
    """

    def __init__(self, bind: str, handler: LineHandler, *, name: str, max_line: int) -> None:
        self.name = name
        self.handler = handler
        self.max_line = max_line
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.bind(bind)
            self.sock.listen(128)
        except OSError:
            self.sock.close()
            raise
        # a connection reset before it is accepted leaves nothing: accept must not wait
        self.sock.setblocking(False)
        self._served: set[_Served] = set()
        self._stopped = False
        self.loop = the_loop()
        self.loop.run(lambda: self.loop.watch(self.sock, _READ, self._accept))

    def _accept(self, mask: int) -> None:
        for _ in range(_ACCEPTS_PER_TURN):
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the listening socket is closed, or out of fds
                return
            sock.setblocking(False)
            try:
                pid, uid, gid = peer_credentials(sock)
            except OSError:
                sock.close()
                continue
            conn = LineConnection(self, sock, pid, uid, gid)
            if not self.handler.admit(conn):
                sock.close()
                continue
            served = _Served(conn)
            self._served.add(served)
            served._want(_READ)  # noqa: SLF001

    def forget(self, served: _Served) -> None:
        """Drop a closed connection (the loop's thread)."""
        self._served.discard(served)

    def stop(self) -> None:
        """Stop accepting, close every open connection (``LineHandler.closed`` is called for
        each) and the listening socket; returns once done, so that no line of this server
        is served after it (a ``Deferred`` answer still running is dropped when it ends).
        Idempotent."""
        if self._stopped:
            return
        self._stopped = True

        def stop_in_loop() -> None:
            self.loop.watch(self.sock, 0, self._accept)
            for served in list(self._served):
                served.close()
            self.sock.close()

        self.loop.run(stop_in_loop)
