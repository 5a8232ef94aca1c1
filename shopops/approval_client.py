"""The approval queue's records kept by a harness-owned approval service (issue 10).

When the harness runs the loop it holds the approval records itself, in a database the
worker cannot write, and names its service in ``SHOPOPS_APPROVALS_SOCKET`` (``@name``: a
Linux abstract Unix socket, ``unix(7)``; else a socket path). ``RemoteStore`` is then the
queue's store (``shopops.approvals.ApprovalQueue(..., service=...)``): the queue's rules
run in the worker as before, the rows live with the harness. Plain ``shopops run`` keeps the
local SQLite file (``shopops.approval_store``).

The protocol (documented for foreign implementations in ``docs/design.md``, "Approvals"):
one connection per process; per operation one JSON object on one line, answered by one
line ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``:

- ``{"op": "add_request", "request": {request_id, case_id, draft_digest, requested_at,
  gate}}`` → ``null`` (``gate`` one of ``GATES``, default ``send_email``; a new request is
  always ``pending``; an existing id is left as it is);
- ``{"op": "requests", "case_id": str | null}`` → a list of requests, oldest first;
- ``{"op": "tickets", "case_id": str | null}`` → a list of tickets, in issue order;
- ``{"op": "ticket", "ticket_id": str}`` → a ticket or ``null``;
- ``{"op": "mark_consumed", "ticket_id", "key", "at"}`` → ``null`` (binds an unconsumed
  ticket to the send with that idempotency key; a consumed ticket keeps its key).

Records are JSON objects with the fields of ``ApprovalRequest``/``Ticket``. Nothing can be
deleted, changed back or approved over it: approving and rejecting are the human's (the
harness's) acts, and asking the service for them is recorded as tampering. The service
knows who asks from the kernel (``SO_PEERCRED``), not from the message.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from shopops.approval_records import ApprovalRequest, Ticket, from_wire, to_wire
from shopops.errors import ApprovalRefused
from shopops_contract.approvals import DEFAULT_GATE


class RemoteStore:
    """The queue's rows at the approval service ``address`` (``@name`` or a path).

    The connection opens at the first operation (so a store built before a fork is not
    shared by two processes' requests) and is kept for the process's life.

    Args:
        address: the service's socket.
        timeout_s: seconds to wait for the service's answer.
    """

    def __init__(self, address: str, timeout_s: float = 30.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._reader: Any = None

    def where(self) -> str:
        """Where the records are, for messages."""
        return f"the approval service {self.address}"

    def close(self) -> None:
        """Close the connection (if open)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            self._reader.close()
            sock.close()

    def _call(self, op: str, **args: Any) -> Any:
        """One operation; its ``result``.

        Raises:
            OSError: the service cannot be reached or closed the connection.
            ApprovalRefused: reason ``service_refused``, the service's ``error``.
        """
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout_s)
            try:
                sock.connect("\0" + self.address[1:] if self.address.startswith("@")
                             else self.address)
            except OSError:
                sock.close()
                raise
            self._sock, self._reader = sock, sock.makefile("rb")
        self._sock.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
        line = self._reader.readline()
        if not line:
            self.close()
            raise ConnectionError(f"{self.where()} closed the connection during {op}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise ApprovalRefused(f"{self.where()} refused {op}: {reply.get('error')}",
                                  ticket_id=args.get("ticket_id"),
                                  case_id=args.get("case_id"), reason="service_refused")
        return reply.get("result")

    # -- the worker's side ------------------------------------------------------------
    def add_request(self, request: ApprovalRequest) -> None:
        """Record a new pending request (an existing id is left as it is)."""
        fields = to_wire(request)
        self._call("add_request", request={k: fields[k] for k in (
            "request_id", "case_id", "draft_digest", "requested_at", "gate")})

    def requests(self, case_id: str | None = None) -> list[ApprovalRequest]:
        """All requests (of one case), oldest first."""
        return [from_wire(ApprovalRequest, r) for r in self._call("requests", case_id=case_id)]

    def tickets(self, case_id: str | None = None) -> list[Ticket]:
        """All tickets (of one case), in issue order."""
        return [from_wire(Ticket, t) for t in self._call("tickets", case_id=case_id)]

    def ticket(self, ticket_id: str) -> Ticket | None:
        """The ticket ``ticket_id``, or ``None`` if the queue never issued it."""
        found = self._call("ticket", ticket_id=ticket_id)
        return None if found is None else from_wire(Ticket, found)

    def mark_consumed(self, ticket_id: str, key: str, at: str) -> None:
        """Bind an unconsumed ticket to the send with idempotency key ``key``."""
        self._call("mark_consumed", ticket_id=ticket_id, key=key, at=at)

    # -- the human's side: not a worker's -----------------------------------------------
    def approve(self, case_id: str, approver: str, ticket_id: str | None, epoch: float,
                at: str, gate: str = DEFAULT_GATE) -> Ticket:
        """Refused: approving is the human's act, done by the harness in its own records.

        Raises:
            ApprovalRefused: reason ``not_a_worker_operation``.
        """
        raise ApprovalRefused(f"approving {case_id} is the human's act; {self.where()} "
                              "does not take it from a worker", ticket_id=ticket_id,
                              case_id=case_id, reason="not_a_worker_operation")

    def reject(self, case_id: str, feedback: str | None,
               gate: str = DEFAULT_GATE) -> ApprovalRequest:
        """Refused, as ``approve``.

        Raises:
            ApprovalRefused: reason ``not_a_worker_operation``.
        """
        raise ApprovalRefused(f"rejecting {case_id} is the human's act; {self.where()} "
                              "does not take it from a worker", ticket_id=None,
                              case_id=case_id, reason="not_a_worker_operation")
