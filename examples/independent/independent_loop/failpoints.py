"""Marks the loop's own labelled points on SHOPOPS_FAILPOINT_CHANNEL.

Protocol (docs/contract.md, "Failpoints"): connect to the Unix stream socket, send one JSON
line {"label", "pid", "occurrence", "action": "off"}, wait for one reply line:
{"do": "continue"} or {"do": "sleep", "ms": N}. The harness may SIGKILL us while we wait.
"""

import json
import os
import socket
import time
from collections import Counter


def unix_address(spec: str) -> str:
    """'@name' is Linux's abstract namespace; anything else is a filesystem path."""
    return "\0" + spec[1:] if spec.startswith("@") else spec


class Marker:
    def __init__(self, channel: str | None):
        self.channel = channel or None
        self.hits: Counter[str] = Counter()

    def __call__(self, label: str) -> None:
        self.hits[label] += 1
        if not self.channel:
            return
        message = {"label": label, "pid": os.getpid(),
                   "occurrence": self.hits[label], "action": "off"}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(unix_address(self.channel))
            conn.sendall((json.dumps(message) + "\n").encode())
            reply = _read_line(conn)
        if not reply:
            return
        try:
            answer = json.loads(reply)
        except ValueError:
            return
        if isinstance(answer, dict) and answer.get("do") == "sleep":
            try:
                time.sleep(max(0.0, float(answer.get("ms", 0))) / 1000.0)
            except (TypeError, ValueError):
                pass


def _read_line(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        piece = conn.recv(4096)
        if not piece:
            break
        chunks.append(piece)
        if b"\n" in piece:
            break
    return b"".join(chunks).split(b"\n", 1)[0]
