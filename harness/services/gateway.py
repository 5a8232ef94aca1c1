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
    ``POST /v1/order-notes`` — the mock order service (the O-1001 story's second gated
    side effect, an order note): JSON ``{"case_id", "order_id", "body"}``, the same headers
    and answers (note ids ``nte-000001``), logged in a ledger of its own
    (``harness.services.ledger``: tables ``note_requests`` and ``notes``). Faults apply to
    messages only.

Control apart from data: ``POST /_control/faults`` (JSON list of fault dicts, replaces the
plan), ``GET /_control/faults``, ``GET /_log/requests``, ``GET /_log/deliveries``,
``GET /_log/note-requests``, ``GET /_log/notes`` are served
only on ``control_path``, a Unix socket in a folder only the harness can open (``control``
argument), never on the data address a worker is given.

The sender of a request is the kernel's answer (``harness.services.peers``: the owner of the TCP
connection), logged as ``worker_pid``/``worker_uid``; the ``X-ShopOps-Worker-Pid`` header is
only logged (``claimed_pid``) so that a claim for another process can be shown as tampering.

Faults (``FaultSpec``) are consumed one per well-formed ``POST /v1/messages`` in FIFO order
(of the execution's case, from one of its workers, when ``fault_case``/``faults_for`` are
set: a dummy request cannot spend the fault the loop's send was meant to meet); an empty
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
import socket
import sqlite3
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import psutil
from werkzeug.exceptions import ClientDisconnected, RequestEntityTooLarge
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from harness.model.evidence import Delivery, GatewayLog, NoteDelivery, RequestRecord
from harness.model.kinds import FaultKind
from harness.model.plan import FAULT_KINDS, MAX_FAULT_MS, FaultSpec
from harness.services import dialects, http_servers
from harness.services import ledger as ledgers
from harness.services.dialects import MOCK_RESEND_KEY, RESEND_PATH, Outcome
from harness.services.ledger import EMAIL, MAX_HELD_CHARS, Ledger, read_log
from harness.services.ledger_db import LedgerDatabase
from harness.services.peers import Peer, tcp_peer
from harness.services.serving import Serving
from harness.services.smtp import SmtpFront
from shopops.checkpoint_file import OurSchema

_log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["FAULT_KINDS", "GATEWAY_LOG", "MAX_FAULT_MS", "MESSAGE_FIELDS", "Delivery", "FaultSpec",
           "GatewayLog", "MockGateway", "RequestRecord", "read_log"]

#: The gateway log as ``shopops.checkpoint_file.inspect`` accepts it (fail closed on the
#: file); a log from before the order service lacks its tables (created on open).
GATEWAY_LOG = OurSchema("gateway log", ledgers.SCHEMA, "requests")

MESSAGE_FIELDS = EMAIL.fields


#: The largest request body the gateway reads, in bytes (a message is a few KiB). A larger
#: one is not read (werkzeug's ``Request.max_content_length``): the request is logged, with
#: status 413 and the digest of an empty body, and answered 413.
MAX_BODY = dialects.MAX_BODY


class _Request(Request):
    max_content_length = MAX_BODY


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        _log.debug("%s %s", self.requestline, code)


class MockGateway:
    """The mock email gateway on ``host:port`` (port 0 = ephemeral), logging to ``db_path``.

    Args:
        db_path: its own SQLite file (WAL, ``synchronous=FULL``); reused if it exists, so
            keys seen before a restart still dedupe. A file that is not a gateway log
            (another application's tables, a checkpoint database, not SQLite ...) raises
            ``shopops.errors.NotOurDatabase`` before anything writes to it.
        on_request: called in the request thread with every request's ``RequestRecord``
            once it is logged (before ``on_accepted``): the harness puts each request into
            its trace, so a request after the case was done shows even when deduplicated.
        on_accepted: called in the request thread right after a new delivery is committed
            and before the reply is written (the harness SIGKILLs the sender there: label
            ``t6.gateway_accepted``). Exceptions propagate: werkzeug answers 500, the
            delivery stays committed.
        on_note_request, on_note_accepted: the same for the order service's ledger (label
            ``t6.note_accepted``).
        control: also serve the control and log endpoints on ``control_path``.
        allowed_uid: refuse (403, logged) a request whose connection another uid owns.
        candidates: pids that may own a connection, looked at first (default: this
            process); then every process of the connection's uid when ``allowed_uid`` is
            set, else every process. Keeps the kernel look-up cheap.
        smtp: also serve SMTP on an ephemeral loopback port (``smtp_port``;
            ``harness.services.smtp``, needs ``aiosmtpd``).
        memory: keep the ledger in this process's memory (SQLite ``:memory:``, the same
            tables) and write ``db_path`` only when ``save`` is called: an execution's
            gateway (``harness.run.execution``). No file exists while workers run, so none
            can change it, and a passing execution, whose databases a run drops, writes
            none (issue 27: the file's SQLite work was ~3 ms of the harness's CPU an
            execution).

    Resend's ``POST /emails`` is always served beside the native API
    (``harness.services.dialects``); a Resend or SMTP message belongs to ``case_id``.
    """

    def __init__(self, db_path: str | Path, *, host: str = "127.0.0.1", port: int = 0,
                 on_accepted: Callable[[Delivery], None] | None = None,
                 on_request: Callable[[RequestRecord], None] | None = None,
                 on_note_accepted: Callable[[NoteDelivery], None] | None = None,
                 on_note_request: Callable[[RequestRecord], None] | None = None,
                 control: bool = False, allowed_uid: int | None = None,
                 candidates: Callable[[], Iterable[int]] | None = None,
                 smtp: bool = False, memory: bool = False) -> None:
        self.db_path = Path(db_path)
        self.host, self.port = host, port
        self.on_accepted = on_accepted
        self.on_request = on_request
        self.on_note_accepted = on_note_accepted
        self.on_note_request = on_note_request
        self.allowed_uid = allowed_uid
        self.candidates = candidates or (lambda: [os.getpid()])
        #: only a message of this case takes a fault (``None``: any case)
        self.fault_case: str | None = None
        #: the case a Resend or SMTP message belongs to (``None``: the message says it;
        #: ``harness.services.dialects``)
        self.case_id: str | None = None
        #: only a message whose sender's pid (``None``: unknown) this accepts takes a fault
        #: (``None``: any sender); the execution gives its kill controller's ``stands_for``
        self.faults_for: Callable[[int | None], bool] | None = None
        self._control = control
        self._control_dir: str | None = None
        self._control_serving: Serving | None = None
        self._faults: deque[FaultSpec] = deque()
        self._faults_lock = threading.Lock()
        self._stopping = threading.Event()  # wakes a reply held by delay_after_accept
        self._server: BaseWSGIServer | None = None
        self._serving: Serving | None = None
        self._smtp_wanted = smtp
        self._smtp: SmtpFront | None = None
        self._body_chars = 0  # of the messages it delivered (MAX_HELD_CHARS bounds them)
        self._ledger = LedgerDatabase(self.db_path, GATEWAY_LOG, memory=memory)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> MockGateway:
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._server is not None:
            raise RuntimeError("MockGateway already started")
        self._stopping.clear()
        self._server = (http_servers.take(self.host, self._wsgi, _QuietHandler)
                        if self.port == 0 else  # a fixed port: its own, never kept
                        make_server(self.host, self.port, self._wsgi, threaded=True,
                                    request_handler=_QuietHandler))
        self._serving = Serving(self._server, f"mock-gateway:{self._server.server_port}")
        if self._control:
            self._control_dir = tempfile.mkdtemp(prefix="shopops-gw-control-")
            control = make_server("unix://" + os.path.join(self._control_dir, "control.sock"),
                                  0, self._control_wsgi, threaded=True,
                                  request_handler=_QuietHandler)
            self._control_serving = Serving(control, "mock-gateway-control")
        if self._smtp_wanted:
            self._smtp = SmtpFront(self, self.host).start()
        return self

    @property
    def smtp_port(self) -> int:
        """The SMTP port (``smtp=True``, started)."""
        if self._smtp is None:
            raise RuntimeError("MockGateway serves no SMTP (smtp=False, or not started)")
        return self._smtp.port

    def worker_env(self) -> dict[str, str]:
        """The environment that points an app's own email client at this gateway
        (``docs/contract.md``, "Email"): ``RESEND_API_URL`` (read by the ``resend`` SDK at
        import) and a placeholder ``RESEND_API_KEY``; with SMTP, ``SMTP_HOST`` and
        ``SMTP_PORT``. The native API's URL is handed to a worker apart (``--gateway``,
        ``TargetContext.gateway_url``)."""
        env = {"RESEND_API_URL": self.url, "RESEND_API_KEY": MOCK_RESEND_KEY}
        if self._smtp is not None:
            env |= {"SMTP_HOST": self.host, "SMTP_PORT": str(self._smtp.port)}
        return env

    @property
    def stopping(self) -> threading.Event:
        """Set once ``stop`` is called (wakes a reply held by ``delay_after_accept``)."""
        return self._stopping

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
            serving.stop()  # its socket closed; give_back waits for its request threads
            if self.port == 0:
                http_servers.give_back(serving.server, self.host, _QuietHandler)  # type: ignore[arg-type]
        smtp, self._smtp = self._smtp, None
        if smtp is not None:
            smtp.stop()
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
        """The log as it is now, in the shape ``ledger.read_log`` reads from a file
        (requests by ``seq``, deliveries by id, refused senders' requests in ``foreign``):
        the file's, or the in-memory ledger's, which no worker can reach — an execution's
        evidence (``harness.run.execution.collect``)."""
        return self._ledger.read(ledgers.read)

    def read_ledger(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """``read(connection)`` on the ledger (``LedgerDatabase.read``); its result."""
        return self._ledger.read(read)

    def save(self) -> None:
        """Write an in-memory ledger (``memory=True``) to ``db_path``, replacing what is
        there; call it after ``stop``. Nothing for a ledger that is its file
        (``LedgerDatabase.save``, whose errors it raises)."""
        self._ledger.save()

    def _take_fault(self) -> FaultSpec | None:
        with self._faults_lock:
            return self._faults.popleft() if self._faults else None

    # -- HTTP ---------------------------------------------------------------------------
    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = _Request(environ)
        ledger = next((led for led in ledgers.LEDGERS if led.path == request.path), None)
        if request.method == "POST" and ledger is not None:
            response = self._post(request, ledger)
        elif request.method == "POST" and request.path == RESEND_PATH:
            response = self._post(request, EMAIL, resend=True)
        else:
            response = _json({"error": "not_found", "path": request.path}, 404)
        return response(environ, start_response)

    def _control_wsgi(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = _Request(environ)
        route = (request.method, request.path)
        if route == ("POST", "/_control/faults"):
            response = self._post_faults(request)
        elif route == ("GET", "/_control/faults"):
            response = _json([dataclasses.asdict(f) for f in self.pending_faults()])
        elif request.method == "GET" and request.path in _LOGS:
            records = getattr(self.log(), _LOGS[request.path])
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

    def _post(self, request: Request, ledger: Ledger, resend: bool = False) -> Response:
        """One HTTP request of ``ledger``: the native API's, or (``resend``) Resend's
        ``POST /emails`` translated by ``harness.services.dialects``."""
        received = time.time()
        port = request.environ.get("REMOTE_PORT")
        peer = (self.peer_of(int(port), int(request.environ["SERVER_PORT"]),
                             request.environ.get("REMOTE_ADDR", self.host))
                if port is not None else None)
        try:
            raw, too_large = request.get_data(), False
        except RequestEntityTooLarge:
            raw, too_large = b"", True
        except ClientDisconnected:
            # the sender went away before its body arrived (a worker killed mid-request): no
            # message, nobody to answer; werkzeug printed a traceback on the harness's
            # stderr for it (found by an attack)
            _log.debug("%s %s: the client left before its body arrived", request.method,
                       request.path)
            return _json({"error": "client_disconnected"}, 400)
        message, problem = ((None, ("body", f"larger than {MAX_BODY} bytes")) if too_large
                            else dialects.parse_resend(raw, self.case_id) if resend
                            else ledgers.parse(ledger, raw))
        outcome = self.submit(ledger, received=received, message=message, problem=problem,
                              key=request.headers.get("Idempotency-Key"), peer=peer,
                              remote_port=port, raw=raw, too_large=too_large,
                              claimed=request.headers.get("X-ShopOps-Worker-Pid", ""))
        if outcome.fault is FaultKind.DROP_AFTER_ACCEPT:
            return _drop_connection(request.environ)
        if outcome.fault is FaultKind.DELAY_AFTER_ACCEPT:
            self._stopping.wait(outcome.hold_s)
        if resend:
            return _json(*reversed(dialects.resend_reply(outcome.status, outcome.reply)))
        return _json(outcome.reply, outcome.status)

    def peer_of(self, client_port: int, server_port: int, client_host: str) -> Peer | None:
        """The kernel's owner of the loopback connection ``client_port`` → ``server_port``
        (``harness.services.peers.tcp_peer``), looked for among ``candidates`` first."""
        return tcp_peer(client_port, server_port, self.candidates(), self._others,
                        host=client_host, server_host=self.host)

    def submit(self, ledger: Ledger, *, received: float, message: dict[str, str] | None,
               problem: tuple[str, str] | None, key: str | None, peer: Peer | None,
               remote_port: int | str | None, raw: bytes, too_large: bool = False,
               claimed: str = "") -> Outcome:
        """Consume a fault (messages only), validate, check-and-deliver, log — the same for
        every dialect: every request is logged, in ``ledger``, and a new delivery calls
        ``on_accepted`` before this returns. The caller writes the answer, and carries out
        a ``drop_after_accept``/``delay_after_accept`` fault (``Outcome.fault``)."""
        refused = self.allowed_uid is not None and (peer is None
                                                    or peer.uid != self.allowed_uid)
        if key is not None and not key.strip():
            problem = ("Idempotency-Key", "must be a non-empty string when present")
        elif key is not None and any(ord(c) < 32 or ord(c) == 127 for c in key):
            problem = ("Idempotency-Key", "contains a control character (NUL, newline, ...); "
                       "allowed: printable characters")
        elif message and self._body_chars + len(message.get("body", "")) > MAX_HELD_CHARS:
            problem, too_large = ("body", f"the gateway holds at most {MAX_HELD_CHARS} "
                                  "characters of delivered messages an execution"), True
        fault = (self._take_fault() if not refused and ledger is EMAIL
                 and self._faultable(message, problem, peer) else None)
        if fault is not None and fault.kind is FaultKind.LATENCY:
            time.sleep((fault.ms or 0) / 1000.0)
        evidence = {
            "received_at": ledgers.iso(received), "received_epoch": received,
            "idempotency_key": key,
            "body_sha256": ledgers.sha256(message) if message else hashlib.sha256(raw).hexdigest(),
            "case_id": message.get("case_id") if message else None,
            "fault": fault.label if fault else None,
            "worker_pid": peer.pid if peer else None,
            "worker_uid": peer.uid if peer else None,
            # what the request says about itself: recorded, never believed (and bounded:
            # int() refuses more than 4300 digits, which would end the request unlogged)
            "claimed_pid": int(claimed) if claimed.isdigit() and len(claimed) <= 12 else None,
            "remote_port": remote_port,
        }
        if refused:  # logged, but no hook hears of it: not the execution's
            self._log_only(ledger, evidence, ledgers.FOREIGN_STATUS)
            return Outcome(ledgers.FOREIGN_STATUS,
                           {"error": "forbidden", "detail": "not this execution's worker"})
        if fault is not None and fault.kind is FaultKind.ERROR:
            status = fault.status or 500
            self._report(ledger, self._log_only(ledger, evidence, status))
            return Outcome(status, {"error": "injected_fault", "status": status})
        if problem is not None:
            code = 413 if too_large else 400
            self._report(ledger, self._log_only(ledger, evidence, code))
            field, why = problem
            return Outcome(code, {"error": "invalid_request", "field": field,
                                  "detail": f"{field}: {why}"})
        assert message is not None
        with self._ledger.transaction() as conn:
            status, reply, delivery, seq = ledgers.accept(conn, ledger, evidence, message)
            record = ledgers.request_record(conn, ledger, seq)
            if delivery is not None:
                self._body_chars += len(delivery.body)
        self._report(ledger, record)
        accepted = self.on_accepted if ledger is EMAIL else self.on_note_accepted
        if delivery is not None and accepted is not None:
            accepted(delivery)  # type: ignore[arg-type]
        kind = fault.kind if fault is not None else None
        return Outcome(status, reply, kind, (fault.ms or 0) / 1000.0 if fault else 0.0)

    def _faultable(self, message: dict[str, str] | None, problem: object,
                   peer: object) -> bool:
        """Whether a request takes the next fault: a well-formed message, of ``fault_case``
        when set, from a sender ``faults_for`` accepts (when set). So a dummy request — a
        junk body, another case, a process outside the execution — cannot spend a fault
        that the loop's own send was meant to meet."""
        if message is None or problem is not None:
            return False
        if self.fault_case is not None and message.get("case_id") != self.fault_case:
            return False
        pid = getattr(peer, "pid", None)
        return self.faults_for is None or self.faults_for(pid)

    def _log_only(self, ledger: Ledger, evidence: dict[str, Any], status: int
                  ) -> RequestRecord:
        """Log a request that delivers nothing, answered ``status``; its record."""
        with self._ledger.transaction() as conn:
            return ledgers.request_record(
                conn, ledger, ledgers.insert_request(conn, ledger, evidence, status))

    def _report(self, ledger: Ledger, record: RequestRecord) -> None:
        """Hand a committed request's record to ``ledger``'s ``on_request`` hook."""
        hook = self.on_request if ledger is EMAIL else self.on_note_request
        if hook is not None:
            hook(record)


#: The log endpoints of the control socket and the ``GatewayLog`` field each serves.
_LOGS = {"/_log/requests": "requests", "/_log/deliveries": "deliveries",
         "/_log/note-requests": "note_requests", "/_log/notes": "notes"}


def _drop_connection(environ: dict[str, Any]) -> Response:
    """Close the TCP connection without a reply: the message is delivered, the answer lost.

    ``environ["werkzeug.socket"]`` is the connection's socket (werkzeug.serving). After the
    shutdown werkzeug's own write of the (empty) response fails with ``BrokenPipeError``,
    which its handler treats as a dropped connection and ignores.
    """
    with contextlib.suppress(OSError):
        environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
    return Response(b"", status=204)


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status=status, mimetype="application/json")

