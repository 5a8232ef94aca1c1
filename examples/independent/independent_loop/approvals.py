"""The approval queue: the harness's service over a JSON-lines stream, or a local file.

Only the five operations of docs/contract.md are ever sent: add_request, requests,
tickets, ticket, mark_consumed. Approving and rejecting are the human's acts.
"""

import json
import os
import socket

from .failpoints import unix_address


class QueueError(Exception):
    """The queue answered {"ok": false, "error": ...}."""


class SocketQueue:
    """One stream connection per process, one JSON object per line each way."""

    def __init__(self, spec: str):
        self.spec = spec
        self._conn: socket.socket | None = None
        self._buffer = b""

    def _connection(self) -> socket.socket:
        if self._conn is None:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(unix_address(self.spec))
            self._conn = conn
        return self._conn

    def call(self, op: str, **arguments):
        conn = self._connection()
        conn.sendall((json.dumps({"op": op, **arguments}) + "\n").encode())
        while b"\n" not in self._buffer:
            piece = conn.recv(65536)
            if not piece:
                raise QueueError(f"the approval service closed the connection during {op}")
            self._buffer += piece
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer = json.loads(line)
        if not answer.get("ok"):
            raise QueueError(str(answer.get("error")))
        return answer.get("result")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class FileQueue:
    """A local stand-in (--approvals FILE) for running without the harness.

    The file is {"requests": [...], "tickets": [...]}; a human edits it to approve.
    """

    def __init__(self, path: str):
        self.path = path

    def _load(self) -> dict:
        if not os.path.exists(self.path):
            return {"requests": [], "tickets": []}
        with open(self.path, encoding="utf-8") as handle:
            return json.load(handle)

    def _store(self, data: dict) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        os.replace(tmp, self.path)

    def call(self, op: str, **a):
        data = self._load()
        if op == "add_request":
            req = dict(a["request"])
            if not any(r["request_id"] == req["request_id"] for r in data["requests"]):
                req.setdefault("status", "pending")
                req.setdefault("feedback", None)
                data["requests"].append(req)
                self._store(data)
            return None
        if op == "requests":
            return [r for r in data["requests"] if a.get("case_id") in (None, r["case_id"])]
        if op == "tickets":
            return [t for t in data["tickets"] if a.get("case_id") in (None, t["case_id"])]
        if op == "ticket":
            return next((t for t in data["tickets"] if t["ticket_id"] == a["ticket_id"]), None)
        if op == "mark_consumed":
            for t in data["tickets"]:
                if t["ticket_id"] == a["ticket_id"]:
                    if t.get("consumed_by_key") not in (None, a["key"]):
                        raise QueueError("ticket already consumed by another key")
                    t["consumed_by_key"], t["consumed_at"] = a["key"], a["at"]
                    self._store(data)
                    return None
            raise QueueError("unknown ticket")
        raise QueueError(f"unknown op {op}")

    def close(self) -> None:
        pass


def open_queue(approvals_file: str | None):
    spec = os.environ.get("SHOPOPS_APPROVALS_SOCKET")
    if spec:
        return SocketQueue(spec)
    return FileQueue(approvals_file or "approvals.json")
