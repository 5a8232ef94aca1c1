"""The harness-owned approval service: the approval records the checks read are the harness's.

A worker of an execution reaches the approval queue's records only through this service
(``SHOPOPS_APPROVALS_SOCKET``; the client is ``shopops.approval_client.RemoteStore``, whose
docstring is the protocol). The records are an ordinary approval database
(``shopops.approval_store``): an execution's is in the harness's memory (``memory=True``,
SQLite ``:memory:``; ``approvals.db`` is written in the execution folder only after the
verdict, by ``save``), a file otherwise, which a sealed worker cannot open; so a worker can
add a pending request and bind an unconsumed ticket to its send, and nothing else: no
request is deleted or changed, no consumption undone, no ticket issued. Approving and
rejecting are the human's acts, done by the harness on the same records
(``ApprovalService.queue``, ``harness.story.engine``).

Who asks is the kernel's word (``SO_PEERCRED``, ``unix(7)``), as on the failpoint channel:
with ``allowed_uid`` set (a sealed execution) a call of another uid is refused and logged,
and no more: another execution's process is not this implementation's doing (a sealed
execution's socket is a file only its uid can reach anyway). Every call is logged in the
table ``service_calls`` (who, what, answer); an operation that is not a worker's
(``approve``, ``reject``, ``delete``...) is handed to ``on_tamper`` (the execution records
a ``tampering`` event, which fails ``no_tampering``).

Strict (issue 24): ``mark_consumed`` of a ticket the queue never issued, or of one already
consumed under another key, is refused and handed to ``on_tamper`` (it used to answer ok,
so a worker could believe it held a ticket); the same key again is ok (a resumed worker
repeating its send). Caps per worker process (the kernel's pid) and per execution bound
what a flood costs the harness: ``MAX_CONNECTIONS_PER_WORKER`` open connections
(``MAX_CONNECTIONS`` in all) and ``MAX_REQUESTS_PER_WORKER`` requests
(``MAX_REQUESTS`` in all); past one, the connection is closed and the first refusal per
pid recorded as tampering.

Transport: JSON lines on a Linux abstract socket, or, for a sealed execution, a socket file
in a folder only its uid can enter (``harness.services.serving.socket_address``), served
by the harness process's service loop (``harness.services.lines``), the same shape as the
failpoint channel (``harness.services.channel``). A request line over ``MAX_LINE`` bytes
is refused, its connection closed, and recorded as tampering.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from harness.services.lines import Answer, Deferred, LineConnection, LineServer
from harness.services.saving import save_copy
from harness.services.serving import open_socket, socket_address
from shopops.approval_records import (
    ApprovalRequest,
    iso,
    to_wire,
)
from shopops.approval_store import APPROVAL_QUEUE, SqliteStore
from shopops.approvals import ApprovalQueue
from shopops.errors import ShopOpsError
from shopops_contract.approvals import DEFAULT_GATE, GATES, RequestStatus

__all__ = ["MAX_CONNECTIONS", "MAX_CONNECTIONS_PER_WORKER", "MAX_FIELD", "MAX_LINE",
           "MAX_REQUESTS", "MAX_REQUESTS_PER_WORKER", "WORKER_OPS", "ApprovalService"]

T = TypeVar("T")

#: The operations a worker may ask for (``shopops.approval_client``).
WORKER_OPS = ("add_request", "requests", "tickets", "ticket", "mark_consumed")
#: Longest text field accepted, in characters (ids, digests, keys, timestamps).
MAX_FIELD = 1000
#: The longest request line read, in bytes: a longer one is refused and its connection closed.
MAX_LINE = 64 * 1024
#: Connections one worker process (the kernel's pid) may hold open at once: the client
#: (``shopops.approval_client.RemoteStore``) holds one; a flood is refused (closed at once)
#: and recorded as tampering.
MAX_CONNECTIONS_PER_WORKER = 4
#: Connections open at once from all of an execution's processes (a fork spray: each child
#: is a new pid).
MAX_CONNECTIONS = 32
#: Requests one worker process may make in an execution: a reference worker makes a few
#: (measured: at most 6 over the 26 executions of ``o1001``, ``two-resumers`` and
#: ``reject-twice-then-approve``); past it every request
#: is refused, its connection closed, and the first refusal recorded as tampering.
MAX_REQUESTS_PER_WORKER = 1000
#: Requests all of an execution's processes may make together.
MAX_REQUESTS = 10_000

_LOG_SCHEMA = """
CREATE TABLE IF NOT EXISTS service_calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, worker_pid INTEGER,
    worker_uid INTEGER, op TEXT, case_id TEXT, ticket_id TEXT, ok INTEGER NOT NULL,
    detail TEXT);
"""

#: The service's file as ``checkpoint_file.inspect`` accepts it: an approval queue plus the
#: service's call log. The harness opens its queue file with it (``kind=SERVICE_QUEUE``).
SERVICE_QUEUE = dataclasses.replace(APPROVAL_QUEUE, schema=(
    *((APPROVAL_QUEUE.schema,) if isinstance(APPROVAL_QUEUE.schema, str)
      else APPROVAL_QUEUE.schema), _LOG_SCHEMA))


class _Refused(Exception):
    """A call answered ``ok: false``; ``tampering`` when it was not a worker's to make."""

    def __init__(self, detail: str, *, tampering: bool = False) -> None:
        super().__init__(detail)
        self.tampering = tampering


def _text(args: dict[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = args.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_FIELD:
        raise _Refused(f"{name}: must be a string of 1-{MAX_FIELD} characters"
                       + (" or null" if optional else ""))
    return value


def _dispatch(store: SqliteStore, op: str, args: dict[str, Any]) -> Any:
    """Run one worker operation on the harness's store; its JSON result."""
    if op == "add_request":
        req = args.get("request")
        if not isinstance(req, dict):
            raise _Refused("request: must be an object")
        gate = req.get("gate", DEFAULT_GATE)
        if gate not in GATES:
            raise _Refused(f"gate: must be one of {', '.join(GATES)}")
        store.add_request(ApprovalRequest(
            _text(req, "request_id") or "", _text(req, "case_id") or "",
            _text(req, "draft_digest") or "", _text(req, "requested_at") or "",
            RequestStatus.PENDING,
            gate=gate))
        return None
    if op == "requests":
        return [to_wire(r) for r in store.requests(_text(args, "case_id", optional=True))]
    if op == "tickets":
        return [to_wire(t) for t in store.tickets(_text(args, "case_id", optional=True))]
    if op == "ticket":
        found = store.ticket(_text(args, "ticket_id") or "")
        return None if found is None else to_wire(found)
    if op == "mark_consumed":  # strict: only an issued, unconsumed ticket (or the same key)
        ticket_id, key = _text(args, "ticket_id") or "", _text(args, "key") or ""
        at = _text(args, "at") or ""
        found = store.ticket(ticket_id)
        if found is None:
            raise _Refused(f"mark_consumed of ticket {ticket_id!r}, which the queue never "
                           "issued: refused", tampering=True)
        if found.consumed_by_key not in (None, key):
            raise _Refused(f"mark_consumed of ticket {ticket_id} under key {key!r}: it was "
                           f"consumed under key {found.consumed_by_key!r}: refused",
                           tampering=True)
        store.mark_consumed(ticket_id, key, at)
        return None
    raise _Refused(f"{op!r} is not a worker's operation (allowed: {', '.join(WORKER_OPS)})",
                   tampering=True)


def _answer(reply: dict[str, Any] | None) -> Answer:
    """A reply on the wire; one marked ``capped`` closes the connection."""
    assert reply is not None  # serve(wait=True) always answers
    return Answer(json.dumps(reply).encode() + b"\n", close=bool(reply.get("capped")))


class _Lines:
    """The service's ``LineHandler`` (in the service loop's thread): admits a connection
    unless its process already holds ``MAX_CONNECTIONS_PER_WORKER`` or the service
    ``MAX_CONNECTIONS`` (a refused one is closed and recorded), and answers each line with
    ``ApprovalService.serve``; a reply marked ``capped`` closes the connection."""

    def __init__(self, service: ApprovalService) -> None:
        self.service = service
        self._by_pid: dict[int, int] = {}  # open connections per worker pid

    def admit(self, conn: LineConnection) -> bool:
        mine = self._by_pid.get(conn.pid, 0)
        if mine >= MAX_CONNECTIONS_PER_WORKER or sum(self._by_pid.values()) >= MAX_CONNECTIONS:
            self.service.refuse_connection(conn.pid, conn.uid, mine)
            return False
        self._by_pid[conn.pid] = mine + 1
        return True

    def line(self, conn: LineConnection, line: bytes) -> Answer | Deferred:
        service, pid, uid = self.service, conn.pid, conn.uid
        reply = service.serve(pid, uid, line, wait=False)
        if reply is None:  # the records are busy (the story acts): answered once free
            return lambda: _answer(service.serve(pid, uid, line))
        return _answer(reply)

    def too_long(self, conn: LineConnection, size: int) -> None:
        self.service.refuse_line(conn.pid, conn.uid, size)

    def closed(self, conn: LineConnection) -> None:
        left = self._by_pid.get(conn.pid, 0) - 1
        if left > 0:
            self._by_pid[conn.pid] = left
        else:
            self._by_pid.pop(conn.pid, None)


class ApprovalService:
    """Serve the approval records in ``db_path`` to an execution's workers.

    Args:
        db_path: the harness's approval database (created if missing; ``approvals.db`` in
            the execution folder).
        allowed_uid: the only uid whose connections are served (a sealed execution's);
            ``None``: any.
        on_tamper: called (in a server thread) with one line for every call that is not a
            worker's to make.
        folder: a sealed execution's ``Sandbox.shared``: the socket is a file there that
            only the execution's uid can reach (``harness.services.serving.socket_address``);
            ``None``: an abstract socket.
        on_consumed: called (in a server thread, before the worker has its answer) with
            ``(pid, ticket_id, key)`` when a worker's ``mark_consumed`` bound a ticket that
            was unconsumed: the service's own record of when each ticket was consumed
            (``ticket_consumed_first`` sets it against the gateway's requests).
        memory: keep the records (and the call log) in this process's memory, one SQLite
            ``:memory:`` connection, and write ``db_path`` only when ``save`` is called: an
            execution's service (``harness.run.execution``; issue 27: opening, syncing and
            reading back the file was ~3 ms of the harness's CPU an execution). No file
            exists while the workers run, so none can change or truncate it.

    ``address`` (``@name``) goes into the workers' ``SHOPOPS_APPROVALS_SOCKET``.
    """

    def __init__(self, db_path: str | Path, *, allowed_uid: int | None = None,
                 on_tamper: Callable[[str], object] | None = None,
                 folder: Path | None = None,
                 on_consumed: Callable[[int, str, str], object] | None = None,
                 memory: bool = False) -> None:
        self.db_path = Path(db_path)
        self.allowed_uid = allowed_uid
        self.on_tamper = on_tamper or (lambda line: None)
        self.on_consumed = on_consumed or (lambda pid, ticket_id, key: None)
        self.memory = memory
        # the schema exists before any worker asks; one store and one log connection serve
        # every connection's calls, one call at a time (opening them per worker connection
        # cost ~1.5 ms each); in memory both are the one connection to the database
        if memory:
            self._log = sqlite3.connect(":memory:", isolation_level=None,
                                        check_same_thread=False)
            self._store = SqliteStore(self.db_path, kind=SERVICE_QUEUE, threads=True,
                                      connection=self._log)
        else:
            self._store = SqliteStore(self.db_path, busy_timeout_s=30.0, kind=SERVICE_QUEUE,
                                      threads=True)
            self._log = sqlite3.connect(self.db_path, timeout=30, isolation_level=None,
                                        check_same_thread=False)
        self._log.executescript(_LOG_SCHEMA)
        self._closed = False
        self._calls = threading.Lock()
        self._requests: dict[int, int] = {}  # requests per worker pid
        self._total = 0  # requests from all pids
        self._capped: set[int] = set()  # pids already recorded past a cap
        self._capped_lock = threading.Lock()  # for _capped alone: held for no wait
        #: refusals the service loop could not log at once (``_calls`` was held): logged
        #: at the next call, before anything reads the log
        self._unlogged: deque[tuple[int, int, str, str]] = deque()
        self.address, bind = socket_address("shopops-apr", folder)
        self._server = LineServer(bind, _Lines(self), name="approval-service",
                                  max_line=MAX_LINE)
        open_socket(bind, folder)

    @contextlib.contextmanager
    def _calling(self) -> Iterator[None]:
        """Hold ``_calls`` (one call at a time on the records), the refusals noted
        meanwhile logged first."""
        with self._calls:
            self._log_refusals()
            yield

    def _log_refusals(self) -> None:
        """Log the refusals noted while ``_calls`` was held (the caller holds it)."""
        while self._unlogged:
            pid, uid, why, at = self._unlogged.popleft()
            _log(self._log, pid, uid, None, {}, False, why, at=at)

    def serve(self, pid: int, uid: int, line: bytes, *, wait: bool = True
              ) -> dict[str, Any] | None:
        """The reply to one request ``line`` from ``pid``/``uid``, on the service's own store
        (calls from all connections run one at a time); ``None`` when ``wait`` is false and
        another call, or the story's act (``queue``), holds the records: the service loop
        never waits for them (an act may wait for a database lock; found by an attack)."""
        if not self._calls.acquire(blocking=wait):
            return None
        try:
            self._log_refusals()
            if self._closed:
                return {"ok": False, "error": "the approval service is closed"}
            count = self._requests[pid] = self._requests.get(pid, 0) + 1
            self._total += 1
            if count > MAX_REQUESTS_PER_WORKER or self._total > MAX_REQUESTS:
                return self._over_cap(pid, uid, count)
            return self._answer(pid, uid, line)
        finally:
            self._calls.release()

    def _refuse(self, pid: int, uid: int, why: str, said: str) -> None:
        """A refusal of ``pid``: logged (now, or before the next call or read when
        ``_calls`` is held: the service loop never waits for it), and the first of each
        pid handed to ``on_tamper`` as ``said``."""
        self._unlogged.append((pid, uid, why, iso(time.time())))
        if self._calls.acquire(blocking=False):
            try:
                self._log_refusals()
            finally:
                self._calls.release()
        with self._capped_lock:
            first = pid not in self._capped
            self._capped.add(pid)
        if first:
            self.on_tamper(said)

    def _over_cap(self, pid: int, uid: int, count: int) -> dict[str, Any]:
        """Refuse a request past ``MAX_REQUESTS_PER_WORKER``/``MAX_REQUESTS`` (the caller
        holds ``_calls``): logged, recorded as tampering once per pid, connection closed."""
        why = (f"request {count} of pid {pid}: over the cap of {MAX_REQUESTS_PER_WORKER} "
               f"per worker and {MAX_REQUESTS} per execution")
        self._refuse(pid, uid, why, f"pid {pid} (uid {uid}) flooded the approval service: "
                                    f"{why}; refused")
        return {"ok": False, "error": why, "capped": True}

    def refuse_line(self, pid: int, uid: int, size: int) -> None:
        """A request line over ``MAX_LINE`` bytes (its connection is closed): logged, not
        answered, recorded as tampering once per pid."""
        why = f"a request line of pid {pid} over {MAX_LINE} bytes ({size} read): refused"
        self._refuse(pid, uid, why, f"pid {pid} (uid {uid}) sent the approval service {why}")

    def refuse_connection(self, pid: int, uid: int, open_now: int) -> None:
        """A connection refused at admission: logged, recorded as tampering once per
        pid."""
        why = (f"connection of pid {pid} refused: it holds {open_now} (at most "
               f"{MAX_CONNECTIONS_PER_WORKER} per worker, {MAX_CONNECTIONS} in all)")
        self._refuse(pid, uid, why, f"pid {pid} (uid {uid}) flooded the approval service: "
                                    f"{why}")

    def _answer(self, pid: int, uid: int, line: bytes) -> dict[str, Any]:
        """The reply to one request ``line`` from ``pid``/``uid`` (the kernel's), run on the
        service's store and logged in its call log (the caller holds ``_calls``)."""
        store, log = self._store, self._log
        op: str | None = None
        args: dict[str, Any] = {}
        try:
            try:
                data = json.loads(line)
            except ValueError:
                raise _Refused("not a JSON line") from None
            except RecursionError:  # a worker's line nested past the parser's depth
                raise _Refused("a JSON line nested too deeply") from None
            if not isinstance(data, dict) or not isinstance(data.get("op"), str):
                raise _Refused("expected a JSON object with a string op")
            op, args = data["op"][:100], data
            if self.allowed_uid is not None and uid != self.allowed_uid:
                # another execution's process: refused and logged, not this one's doing
                raise _Refused(f"uid {uid} is not this execution's worker")
            binding = op == "mark_consumed" and _unconsumed(store, args)
            result = _dispatch(store, op, args)
        except _Refused as refused:
            _log(log, pid, uid, op, args, False, str(refused))
            if refused.tampering:
                self.on_tamper(f"pid {pid} (uid {uid}) asked the approval service for "
                               f"{op!r}: {refused}")
            return {"ok": False, "error": str(refused)}
        except (sqlite3.Error, ShopOpsError) as exc:
            _log(log, pid, uid, op, args, False, str(exc))
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        _log(log, pid, uid, op, args, True, None)
        if binding:
            self.on_consumed(pid, str(args["ticket_id"]), str(args.get("key")))
        return {"ok": True, "result": result}

    @contextlib.contextmanager
    def queue(self, clock: Callable[[], float] = time.time) -> Iterator[ApprovalQueue]:
        """The approval queue on the service's own records, for the human's acts (the
        harness's story: approve, reject, a forged ticket): one call at a time with the
        workers' calls, no second connection to open.

        Raises:
            RuntimeError: the service is closed.
        """
        with self._calling():
            if self._closed:
                raise RuntimeError("the approval service is closed")
            yield ApprovalQueue(self.db_path, clock=clock, store=self._store)

    def read(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """``read(connection)`` on the records (between two calls; after ``close`` too,
        in memory, until ``save``); its result.

        Raises:
            sqlite3.Error: as ``read`` raises it; ``sqlite3.ProgrammingError`` on a file's
                service once closed.
        """
        with self._calling():
            return read(self._log)

    def save(self) -> None:
        """Write records kept in memory (``memory=True``) to ``db_path``
        (``harness.services.saving.save_copy``: SQLite's online backup into a new file
        renamed over whatever a worker put there; the caller has recorded it). Call it
        after ``close``; nothing for a service whose records are its file.

        Raises:
            OSError: what is at ``db_path`` cannot be removed.
            sqlite3.Error: the file cannot be written.
        """
        if not self.memory:
            return
        with self._calling():
            save_copy(self._log, self.db_path)

    def close(self) -> None:
        """Stop serving (at once) and close the connections still open (no call of theirs
        runs once it returns: calls run in the service loop), then close the service's
        SQLite connections (records in memory stay readable, ``read``, and savable,
        ``save``, until the object is freed). Idempotent."""
        self._server.stop()
        with self._calling():
            self._closed = True
            if not self.memory:
                self._store.close()
                self._log.close()

    def __enter__(self) -> ApprovalService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unconsumed(store: SqliteStore, args: dict[str, Any]) -> bool:
    """Whether ``args`` names a ticket that exists and is not yet consumed (so that a
    ``mark_consumed`` with them binds it)."""
    ticket_id = args.get("ticket_id")
    found = store.ticket(ticket_id) if isinstance(ticket_id, str) else None
    return found is not None and found.consumed_by_key is None


def _log(conn: sqlite3.Connection, pid: int, uid: int, op: str | None, args: dict[str, Any],
         ok: bool, detail: str | None, *, at: str | None = None) -> None:
    """One row of ``service_calls``: who asked (the kernel's pid/uid), what, the answer;
    a worker's texts at most ``MAX_FIELD`` characters each (found by an attack: a refused
    call's 60 KB ``case_id`` was logged whole, ~600 MB of harness memory from ten workers)."""
    req = args.get("request")
    case = args.get("case_id") or (req.get("case_id") if isinstance(req, dict) else None)
    ticket = args.get("ticket_id")
    def cut(value: object, most: int = MAX_FIELD) -> str | None:  # a worker's text, bounded
        return value[:most] if isinstance(value, str) else None

    conn.execute(
        "INSERT INTO service_calls(at, worker_pid, worker_uid, op, case_id, ticket_id, ok,"
        " detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (at or iso(time.time()), pid, uid, cut(op), cut(case), cut(ticket), int(ok),
         cut(detail, 4 * MAX_FIELD)))
