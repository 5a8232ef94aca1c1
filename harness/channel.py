"""The harness end of the failpoint channel (``shopops.failpoints``, ``SHOPOPS_FAILPOINT_CHANNEL``).

A Unix stream socket server (``socketserver.ThreadingUnixStreamServer``): each worker
connects once and, at every labelled point, sends one JSON line and blocks for the reply.
The ``on_hit`` callback decides: it returns a reply (the worker continues) or ``None``
after it has SIGKILLed the worker, which then never reads a reply. The socket is in Linux's
abstract namespace (``unix(7)``): no file exists, so nothing is left behind even when the
harness itself is SIGKILLed. Its name travels in the environment as ``@name``.
"""

from __future__ import annotations

import json
import os
import socketserver
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from harness.serving import ServerThread


@dataclass(frozen=True)
class Hit:
    """A failpoint hit as the worker reported it: ``label``, ``pid``, ``occurrence`` (within
    that process, from 1) and the local ``action`` its spec chose (``off`` when none)."""

    label: str
    pid: int
    occurrence: int
    action: str


OnHit = Callable[[Hit], "dict[str, object] | None"]


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        try:
            self._serve_worker()
        except ConnectionError:
            pass  # a worker killed with unread data on its socket: a reset, like EOF

    def _serve_worker(self) -> None:
        for line in self.rfile:
            try:
                data = json.loads(line)
                hit = Hit(str(data["label"]), int(data["pid"]), int(data["occurrence"]),
                          str(data.get("action", "off")))
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

    def __init__(self, path: str, on_hit: OnHit) -> None:
        self.on_hit = on_hit
        super().__init__(path, _Handler)


class FailpointChannel:
    """Listen for failpoint hits; ``path`` goes into the worker's
    ``SHOPOPS_FAILPOINT_CHANNEL``.

    Args:
        on_hit: called in a server thread for every hit; returns the reply dict
            (``{"do": "continue"}``) or ``None`` if it killed the worker.
    """

    def __init__(self, on_hit: OnHit) -> None:
        self.path = f"@shopops-ctl-{os.getpid()}-{uuid.uuid4().hex[:16]}"
        self._server = _Server("\0" + self.path[1:], on_hit)
        self._serving = ServerThread(self._server, "failpoint-channel")

    def close(self) -> None:
        """Stop serving (at once, not at a poll). Idempotent."""
        self._serving.stop()

    def __enter__(self) -> FailpointChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
