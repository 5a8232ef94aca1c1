"""The harness end of the failpoint channel (``shopops.failpoints``, ``SHOPOPS_FAILPOINT_CHANNEL``).

A Unix stream socket server (``socketserver.ThreadingUnixStreamServer``): each worker
connects once and, at every labelled point, sends one JSON line and blocks for the reply.
The ``on_hit`` callback decides: it returns a reply (the worker continues) or ``None``
after it has SIGKILLed the worker, which then never reads a reply. The socket is in Linux's
abstract namespace (``unix(7)``): no file exists, so nothing is left behind even when the
harness itself is SIGKILLed. Its name travels in the environment as ``@name``. A sealed
execution's is a socket file in a folder only its uid (and root) can enter instead: an
abstract name is listed in ``/proc/net/unix`` and anyone may connect to it.

Who sent a hit is the kernel's word, not the message's: the connection's peer credentials
(``SO_PEERCRED``, ``unix(7)``: the pid and uid of the process that connected) are the hit's
``pid`` and ``uid``; the pid the message claims is kept as ``claimed_pid`` so that the
controller can refuse a hit made in another process's name and record it as tampering.
"""

from __future__ import annotations

import json
import socket
import socketserver
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.services.serving import Serving, open_socket, socket_address

__all__ = ["MAX_LINE", "FailpointChannel", "Hit", "OnHit", "peer_credentials"]

#: The longest hit line the channel reads, in bytes (a hit is ~100): a worker that sends a
#: longer one without a newline is dropped instead of buffered in the harness's memory.
MAX_LINE = 4096


@dataclass(frozen=True)
class Hit:
    """A failpoint hit: ``label``, ``pid`` (the sender, from ``SO_PEERCRED``; in a hit made
    by hand, whatever the caller says), ``occurrence`` (within that process, from 1), the
    local ``action`` its spec chose (``off`` when none), ``claimed_pid`` (the pid the
    message named; ``None``: the same as ``pid``) and ``uid`` (the sender's, from the
    kernel; ``None`` when not known)."""

    label: str
    pid: int
    occurrence: int
    action: str
    claimed_pid: int | None = None
    uid: int | None = None

    @property
    def forged(self) -> bool:
        """The message named another process than the one that sent it."""
        return self.claimed_pid is not None and self.claimed_pid != self.pid


_CRED = struct.Struct("3i")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a connected Unix socket, as
    the kernel recorded them when it connected (``SO_PEERCRED``, ``unix(7)``)."""
    pid, uid, gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                 _CRED.size))
    return pid, uid, gid


OnHit = Callable[[Hit], "dict[str, object] | None"]


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        try:
            self._serve_worker()
        except ConnectionError:
            pass  # a worker killed with unread data on its socket: a reset, like EOF

    def _serve_worker(self) -> None:
        pid, uid, _ = peer_credentials(self.request)
        while line := self.rfile.readline(MAX_LINE):
            if not line.endswith(b"\n"):  # dropped, never buffered whole
                if len(line) >= MAX_LINE and self.server.on_tamper is not None:
                    self.server.on_tamper(f"pid {pid} (uid {uid}) sent a failpoint-channel "
                                          f"line over {MAX_LINE} bytes: dropped")
                return
            try:
                data = json.loads(line)
                claimed = int(data["pid"])
                hit = Hit(str(data["label"]), pid, int(data["occurrence"]),
                          str(data.get("action", "off")),
                          claimed_pid=None if claimed == pid else claimed, uid=uid)
            except (ValueError, KeyError, TypeError):
                return  # a malformed line: drop the connection; the worker fails loudly
            reply = self.server.on_hit(hit)
            if reply is None:
                return  # the worker was killed at this point
            try:
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()
            except OSError:
                return


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, on_hit: OnHit,
                 on_tamper: Callable[[str], None] | None = None) -> None:
        self.on_hit = on_hit
        self.on_tamper = on_tamper
        super().__init__(path, _Handler)


class FailpointChannel:
    """Listen for failpoint hits; ``path`` goes into the worker's
    ``SHOPOPS_FAILPOINT_CHANNEL``.

    Args:
        on_hit: called in a server thread for every hit; returns the reply dict
            (``{"do": "continue"}``) or ``None`` if it killed the worker.
        on_tamper: called with one line when a sender sends what no hit is (a line over
            ``MAX_LINE`` bytes): the harness records it as tampering.
        folder: a sealed execution's ``Sandbox.shared``: the socket is a file there, which
            only that execution's uid can reach (``harness.services.serving.socket_address``);
            ``None``: an abstract socket.
    """

    def __init__(self, on_hit: OnHit, on_tamper: Callable[[str], None] | None = None,
                 folder: Path | None = None) -> None:
        self.path, bind = socket_address("shopops-ctl", folder)
        self._server = _Server(bind, on_hit, on_tamper)
        open_socket(self._server, folder)
        self._serving = Serving(self._server, "failpoint-channel")

    def close(self) -> None:
        """Stop serving (at once, not at a poll). Idempotent."""
        self._serving.stop()

    def __enter__(self) -> FailpointChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
