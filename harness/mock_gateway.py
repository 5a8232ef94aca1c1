"""The harness-owned mock email gateway: a real HTTP server on loopback with a durable log.

It is the authority on what was delivered (``docs/design.md``): a duplicate is two
deliveries for one logical send, whatever the worker believes. It dedupes by
``Idempotency-Key`` as the IETF draft "The Idempotency-Key HTTP Header Field" describes
(same key + same payload → the original answer; same key + another payload → refused), and
can be told to misbehave.

Endpoints:
    ``POST /v1/messages`` — JSON ``{"case_id", "to", "subject", "body"}`` (all strings),
    optional headers ``Idempotency-Key`` and ``X-ShopOps-Worker-Pid``. 201 new delivery,
    200 ``duplicate: true`` with the original ``delivery_id``, 409 key reused with another
    body, 400 a missing/mistyped field (named in ``field``), 403 a sender of another uid
    than ``allowed_uid`` (sealed executions).

Control apart from data: ``POST /_control/faults`` (JSON list of fault dicts, replaces the
plan), ``GET /_control/faults``, ``GET /_log/requests``, ``GET /_log/deliveries`` are served
only on ``control_path``, a Unix socket in a folder only the harness can open (``control``
argument), never on the data address a worker is given.

The sender of a request is the kernel's answer (``harness.peers``: the owner of the TCP
connection), logged as ``worker_pid``/``worker_uid``; the ``X-ShopOps-Worker-Pid`` header is
only logged (``claimed_pid``) so that a claim for another process can be shown as tampering.

Faults (``FaultSpec``) are consumed one per ``POST /v1/messages`` in FIFO order; an empty
plan means normal behaviour. ``latency`` sleeps ``ms`` then answers normally; ``error`` answers
``status`` (5xx) and delivers nothing; ``drop_after_accept`` delivers, commits, then closes
the TCP connection with no reply; ``delay_after_accept`` delivers, commits, then holds the
reply ``ms`` milliseconds — longer than the client's read timeout, the client has given up
(requests raises ``ReadTimeout``) before the answer comes, so only a retry with the *same*
key is safe; ``pause_after_accept`` answers normally and marks, in the request log, the
request at which the harness's ``on_accepted`` hook (called for every new delivery) is meant
to act.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import sqlite3
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from harness.model.evidence import Delivery, GatewayLog, RequestRecord
from harness.model.plan import FAULT_KINDS, MAX_FAULT_MS, FaultSpec
from harness.peers import tcp_peer
from harness.serving import ServerThread

_log = logging.getLogger(__name__)

__all__ = ["FAULT_KINDS", "MAX_FAULT_MS", "MESSAGE_FIELDS", "Delivery", "FaultSpec",
           "GatewayLog", "MockGateway", "RequestRecord", "read_log", "serve"]

MESSAGE_FIELDS = ("case_id", "to", "subject", "body")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, received_at TEXT NOT NULL,
    received_epoch REAL NOT NULL, idempotency_key TEXT, body_sha256 TEXT NOT NULL,
    case_id TEXT, status INTEGER NOT NULL, fault TEXT, worker_pid INTEGER,
    remote_port INTEGER, delivery_id TEXT, duplicate INTEGER NOT NULL DEFAULT 0,
    claimed_pid INTEGER, worker_uid INTEGER);
CREATE TABLE IF NOT EXISTS deliveries (
    n INTEGER PRIMARY KEY, delivery_id TEXT NOT NULL UNIQUE, request_seq INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE, body_sha256 TEXT NOT NULL, case_id TEXT NOT NULL,
    "to" TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL,
    delivered_at TEXT NOT NULL);
"""


def read_log(db_path: str | Path) -> GatewayLog:
    """Read the gateway log from its SQLite file, opened read-only; no server needed.

    Raises:
        sqlite3.OperationalError: the file does not exist or is not a gateway log.
    """
    uri = Path(db_path).resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
        return _read(conn)


def _read(conn: sqlite3.Connection) -> GatewayLog:
    def select(cls: type, table: str) -> list[dict[str, Any]]:
        names = [f.name for f in dataclasses.fields(cls)]
        columns = ", ".join(f'"{name}"' for name in names)
        rows = conn.execute(f"SELECT {columns} FROM {table} ORDER BY rowid").fetchall()
        return [dict(zip(names, row, strict=True)) for row in rows]

    requests = tuple(RequestRecord(**{**r, "duplicate": bool(r["duplicate"])})
                     for r in select(RequestRecord, "requests"))
    return GatewayLog(requests, tuple(Delivery(**r) for r in select(Delivery, "deliveries")))


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        _log.debug("%s %s", self.requestline, code)


class MockGateway:
    """The mock email gateway on ``host:port`` (port 0 = ephemeral), logging to ``db_path``.

    Args:
        db_path: its own SQLite file (WAL, ``synchronous=FULL``); reused if it exists, so
            keys seen before a restart still dedupe.
        on_request: called in the request thread with every request's ``RequestRecord``
            once it is logged (before ``on_accepted``): the harness puts each request into
            its trace, so a request after the case was done shows even when deduplicated.
        on_accepted: called in the request thread right after a new delivery is committed
            and before the reply is written (the harness SIGKILLs the sender there: label
            ``t6.gateway_accepted``). Exceptions propagate: werkzeug answers 500, the
            delivery stays committed.
        control: also serve the control and log endpoints on ``control_path``.
        allowed_uid: refuse (403, logged) a request whose connection another uid owns.
        candidates: pids that may own a connection, looked at first (default: this
            process); then every process of the connection's uid when ``allowed_uid`` is
            set, else every process. Keeps the kernel look-up cheap.
    """

    def __init__(self, db_path: str | Path, *, host: str = "127.0.0.1", port: int = 0,
                 on_accepted: Callable[[Delivery], None] | None = None,
                 on_request: Callable[[RequestRecord], None] | None = None,
                 control: bool = False, allowed_uid: int | None = None,
                 candidates: Callable[[], Iterable[int]] | None = None) -> None:
        self.db_path = Path(db_path)
        self.host, self.port = host, port
        self.on_accepted = on_accepted
        self.on_request = on_request
        self.allowed_uid = allowed_uid
        self.candidates = candidates or (lambda: [os.getpid()])
        self._control = control
        self._control_dir: str | None = None
        self._control_serving: ServerThread | None = None
        self._faults: deque[FaultSpec] = deque()
        self._faults_lock = threading.Lock()
        self._stopping = threading.Event()  # wakes a reply held by delay_after_accept
        self._server: BaseWSGIServer | None = None
        self._serving: ServerThread | None = None
        with contextlib.closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> MockGateway:
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._server is not None:
            raise RuntimeError("MockGateway already started")
        self._stopping.clear()
        self._server = make_server(self.host, self.port, self._wsgi, threaded=True,
                                   request_handler=_QuietHandler)
        self._serving = ServerThread(self._server, f"mock-gateway:{self._server.server_port}")
        if self._control:
            self._control_dir = tempfile.mkdtemp(prefix="shopops-gw-control-")
            control = make_server("unix://" + os.path.join(self._control_dir, "control.sock"),
                                  0, self._control_wsgi, threaded=True,
                                  request_handler=_QuietHandler)
            self._control_serving = ServerThread(control, "mock-gateway-control")
        return self

    def _others(self) -> Iterable[int] | None:
        """Where else a connection's owner may be: the allowed uid's processes, or all."""
        if self.allowed_uid is None:
            return None
        return [p.pid for p in psutil.process_iter(["uids"])
                if p.info["uids"] is not None and p.info["uids"].real == self.allowed_uid]

    @property
    def control_path(self) -> str:
        """The control socket's path (``control=True``), in a 0700 folder of the harness."""
        if self._control_dir is None:
            raise RuntimeError("MockGateway has no control socket (control=False)")
        return os.path.join(self._control_dir, "control.sock")

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, the actual bound port."""
        if self._server is None:
            raise RuntimeError("MockGateway not started")
        return f"http://{self.host}:{self._server.server_port}"

    def stop(self) -> None:
        """Stop serving (at once, not at a poll), join the thread, close the socket.
        Idempotent."""
        serving, self._server, self._serving = self._serving, None, None
        self._stopping.set()
        if serving is not None:
            serving.stop()
        control, self._control_serving = self._control_serving, None
        if control is not None:
            control.stop()
        if self._control_dir is not None:
            shutil.rmtree(self._control_dir, ignore_errors=True)
            self._control_dir = None

    def __enter__(self) -> MockGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults and log -----------------------------------------------------------------
    def set_faults(self, faults: Iterable[FaultSpec | dict[str, Any]]) -> None:
        """Replace the fault plan (validated first; nothing changes on error).

        Raises:
            ValueError: see ``FaultSpec.from_dict``.
        """
        plan = [f if isinstance(f, FaultSpec) else FaultSpec.from_dict(f) for f in faults]
        with self._faults_lock:
            self._faults = deque(plan)

    def pending_faults(self) -> tuple[FaultSpec, ...]:
        """Faults not yet consumed, in order."""
        with self._faults_lock:
            return tuple(self._faults)

    def log(self) -> GatewayLog:
        """The durable log as it is now."""
        with contextlib.closing(self._connect()) as conn:
            return _read(conn)

    def _take_fault(self) -> FaultSpec | None:
        with self._faults_lock:
            return self._faults.popleft() if self._faults else None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    # -- HTTP ---------------------------------------------------------------------------
    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        if (request.method, request.path) == ("POST", "/v1/messages"):
            response = self._post_message(request)
        else:
            response = _json({"error": "not_found", "path": request.path}, 404)
        return response(environ, start_response)

    def _control_wsgi(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        route = (request.method, request.path)
        if route == ("POST", "/_control/faults"):
            response = self._post_faults(request)
        elif route == ("GET", "/_control/faults"):
            response = _json([dataclasses.asdict(f) for f in self.pending_faults()])
        elif route in (("GET", "/_log/requests"), ("GET", "/_log/deliveries")):
            log = self.log()
            records = log.requests if request.path.endswith("requests") else log.deliveries
            response = _json([dataclasses.asdict(r) for r in records])
        else:
            response = _json({"error": "not_found", "path": request.path}, 404)
        return response(environ, start_response)

    def _post_faults(self, request: Request) -> Response:
        data = request.get_json(silent=True)
        if not isinstance(data, list):
            return _json({"error": "invalid_faults", "field": "faults",
                          "detail": "expected a JSON list of fault objects"}, 400)
        try:
            self.set_faults(data)
        except ValueError as exc:
            field = str(exc).split(":", 1)[0]
            return _json({"error": "invalid_faults", "field": field, "detail": str(exc)}, 400)
        return _json({"pending": len(data)})

    def _post_message(self, request: Request) -> Response:
        """Consume a fault, validate, check-and-deliver, log; every request is logged."""
        received = time.time()
        port = request.environ.get("REMOTE_PORT")
        peer = (tcp_peer(int(port), int(request.environ["SERVER_PORT"]), self.candidates(),
                         self._others) if port is not None else None)
        refused = self.allowed_uid is not None and (peer is None
                                                    or peer.uid != self.allowed_uid)
        fault = None if refused else self._take_fault()
        if fault is not None and fault.kind == "latency":
            time.sleep((fault.ms or 0) / 1000.0)
        raw = request.get_data()
        message, problem = _parse_message(raw)
        key = request.headers.get("Idempotency-Key")
        if key is not None and not key.strip():
            problem = ("Idempotency-Key", "must be a non-empty string when present")
        claimed = request.headers.get("X-ShopOps-Worker-Pid", "")
        evidence = {
            "received_at": _iso(received), "received_epoch": received, "idempotency_key": key,
            "body_sha256": _sha256(message) if message else hashlib.sha256(raw).hexdigest(),
            "case_id": message.get("case_id") if message else None,
            "fault": fault.label if fault else None,
            "worker_pid": peer.pid if peer else None,
            "worker_uid": peer.uid if peer else None,
            "claimed_pid": int(claimed) if claimed.isdigit() else None,
            "remote_port": port,
        }
        if refused:
            with self._transaction() as conn:
                _insert_request(conn, evidence, 403)
            return _json({"error": "forbidden", "detail": "not this execution's worker"}, 403)
        if fault is not None and fault.kind == "error":
            status = fault.status or 500
            with self._transaction() as conn:
                seq = _insert_request(conn, evidence, status)
            self._report(seq)
            return _json({"error": "injected_fault", "status": status}, status)
        if problem is not None:
            with self._transaction() as conn:
                seq = _insert_request(conn, evidence, 400)
            self._report(seq)
            field, why = problem
            return _json({"error": "invalid_request", "field": field,
                          "detail": f"{field}: {why}"}, 400)
        assert message is not None
        status, reply, delivery, seq = self._accept(evidence, message)
        self._report(seq)
        if delivery is not None and self.on_accepted is not None:
            self.on_accepted(delivery)
        if fault is not None and fault.kind == "drop_after_accept":
            return _drop_connection(request.environ)
        if fault is not None and fault.kind == "delay_after_accept":
            self._stopping.wait((fault.ms or 0) / 1000.0)
        return _json(reply, status)

    def _report(self, seq: int) -> None:
        """Hand the logged request ``seq`` to ``on_request``."""
        if self.on_request is None:
            return
        with contextlib.closing(self._connect()) as conn:
            names = [f.name for f in dataclasses.fields(RequestRecord)]
            row = conn.execute(f"SELECT {', '.join(names)} FROM requests WHERE seq = ?",
                               (seq,)).fetchone()
        record = dict(zip(names, row, strict=True))
        self.on_request(RequestRecord(**{**record, "duplicate": bool(record["duplicate"])}))

    def _accept(self, evidence: dict[str, Any], message: dict[str, str]
                ) -> tuple[int, dict[str, Any], Delivery | None, int]:
        """Check-and-insert in one ``BEGIN IMMEDIATE`` transaction: one delivery per key."""
        key, digest = evidence["idempotency_key"], evidence["body_sha256"]
        delivery = None
        with self._transaction() as conn:
            row = None if key is None else conn.execute(
                "SELECT delivery_id, body_sha256 FROM deliveries WHERE idempotency_key=?",
                (key,)).fetchone()
            if row is None:
                (n,) = conn.execute("SELECT COALESCE(MAX(n), 0) + 1 FROM deliveries").fetchone()
                status, delivery_id = 201, f"dlv-{n:06d}"
            else:
                status, delivery_id = (200 if row[1] == digest else 409), row[0]
            seq = _insert_request(conn, evidence, status, delivery_id if status != 409 else None,
                                  duplicate=status == 200)
            if status == 201:
                delivery = Delivery(delivery_id, seq, key, digest, message["case_id"],
                                    message["to"], message["subject"], message["body"],
                                    _iso(time.time()))
                row = {"n": n, **dataclasses.asdict(delivery)}
                conn.execute(_insert_sql("deliveries", row), row)
        if status == 409:
            return 409, {"error": "idempotency_key_reused", "idempotency_key": key,
                         "delivery_id": delivery_id, "detail": "the key was first used with a "
                         "different body; use a new key for a new message"}, None, seq
        return status, {"delivery_id": delivery_id, "status": "delivered",
                        "duplicate": status == 200}, delivery, seq

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with contextlib.closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")


def _insert_request(conn: sqlite3.Connection, evidence: dict[str, Any], status: int,
                    delivery_id: str | None = None, *, duplicate: bool = False) -> int:
    row = {**evidence, "status": status, "delivery_id": delivery_id, "duplicate": int(duplicate)}
    return int(conn.execute(_insert_sql("requests", row), row).lastrowid or 0)


def _insert_sql(table: str, row: dict[str, Any]) -> str:
    columns = ", ".join(f'"{name}"' for name in row)
    return f"INSERT INTO {table} ({columns}) VALUES ({', '.join(':' + k for k in row)})"

def serve(db_path: str | Path, host: str = "127.0.0.1", port: int = 0) -> None:
    """Run the gateway in the foreground until SIGINT/SIGTERM (for ``shopops-chaos gateway serve``).

    Prints one line, ``gateway listening on URL (log: DB)``, flushed, once it accepts
    connections. Must be called from the main thread (it installs signal handlers).
    """
    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with MockGateway(db_path, host=host, port=port) as gateway:
            print(f"gateway listening on {gateway.url} (log: {db_path})", flush=True)
            while not stopping.wait(0.2):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _parse_message(raw: bytes) -> tuple[dict[str, str] | None, tuple[str, str] | None]:
    try:
        data = json.loads(raw)
    except ValueError:
        return None, ("body", "request body must be a JSON object")
    if not isinstance(data, dict):
        return None, ("body", "request body must be a JSON object")
    for field in MESSAGE_FIELDS:
        if field not in data:
            return None, (field, "missing")
        if not isinstance(data[field], str):
            return None, (field, f"must be a string, got {type(data[field]).__name__}")
    return {field: data[field] for field in MESSAGE_FIELDS}, None


def _drop_connection(environ: dict[str, Any]) -> Response:
    """Close the TCP connection without a reply: the message is delivered, the answer lost.

    ``environ["werkzeug.socket"]`` is the connection's socket (werkzeug.serving). After the
    shutdown werkzeug's own write of the (empty) response fails with ``BrokenPipeError``,
    which its handler treats as a dropped connection and ignores.
    """
    with contextlib.suppress(OSError):
        environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
    return Response(b"", status=204)


def _sha256(message: dict[str, str]) -> str:
    canonical = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status=status, mimetype="application/json")

