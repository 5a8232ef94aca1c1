"""The harness's side of one connection to the fork server (``harness.forkserver.server``):
JSON lines over a Unix stream socket, with its own read buffer."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

__all__ = ["Conn", "ForkServerError"]


class ForkServerError(OSError):
    """The fork server could not be started, refused a request, or went away (then the
    worker's exit status is unknown; its process group was SIGKILLed)."""


class Conn:
    """A blocking JSON-lines connection to the server, with its own read buffer (a
    ``makefile`` reader is unusable after a timeout)."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()
            raise
        self.buf = bytearray()

    def send(self, message: dict[str, Any]) -> None:
        self.sock.settimeout(30.0)
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The next message; ``None`` at end of file. Raises ``TimeoutError``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no message from the fork server")
                self.sock.settimeout(remaining)
            else:
                self.sock.settimeout(None)
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        message = json.loads(line)
        assert isinstance(message, dict)
        return message

    def close(self) -> None:
        self.sock.close()
