"""The mock email gateway over real HTTP on loopback, and the client against it."""

from __future__ import annotations

import http.client as httplib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from harness.services.gateway import Delivery, FaultSpec, MockGateway, read_log
from shopops.errors import GatewayUnavailable
from shopops.gateway_client import EmailGatewayClient

MESSAGE = {"case_id": "case-O-1001", "to": "jordan@example.com", "subject": "Your order O-1001",
           "body": "Hi Jordan, your refund is on its way."}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "gateway.db"


@pytest.fixture
def gateway(db: Path) -> Iterator[MockGateway]:
    gw = MockGateway(db).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def post(http: requests.Session, gw: MockGateway, key: str | None = None,
         **overrides: object) -> requests.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return http.post(gw.url + "/v1/messages", json={**MESSAGE, **overrides}, headers=headers,
                     timeout=(2, 5))


class _UnixConnection(httplib.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=5)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(self.path)


def control(gw: MockGateway, method: str, path: str, body: object = None
            ) -> tuple[int, object]:
    """One request to the gateway's control socket (http.client over AF_UNIX)."""
    conn = _UnixConnection(gw.control_path)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def client(gw: MockGateway, **kwargs: object) -> EmailGatewayClient:
    return EmailGatewayClient(gw.url, backoff_s=0.0, **kwargs)  # type: ignore[arg-type]


def test_same_key_same_body_delivers_once(gateway: MockGateway, http: requests.Session,
                                          db: Path) -> None:
    first, second = post(http, gateway, "k-1"), post(http, gateway, "k-1")
    assert first.status_code == 201 and first.json()["duplicate"] is False
    assert second.status_code == 200 and second.json()["duplicate"] is True
    assert second.json()["delivery_id"] == first.json()["delivery_id"] == "dlv-000001"
    log = read_log(db)
    assert [d.delivery_id for d in log.deliveries] == ["dlv-000001"]
    assert [(r.status, r.duplicate) for r in log.requests] == [(201, False), (200, True)]


def test_same_key_other_body_is_409_without_delivery(gateway: MockGateway,
                                                     http: requests.Session, db: Path) -> None:
    post(http, gateway, "k-1")
    reused = post(http, gateway, "k-1", body="a different text")
    assert reused.status_code == 409
    assert reused.json()["error"] == "idempotency_key_reused"
    assert len(read_log(db).deliveries) == 1


def test_no_key_delivers_every_time(gateway: MockGateway, http: requests.Session,
                                    db: Path) -> None:
    ids = {post(http, gateway).json()["delivery_id"] for _ in range(2)}
    assert ids == {"dlv-000001", "dlv-000002"}
    assert [d.idempotency_key for d in read_log(db).deliveries] == [None, None]


@pytest.mark.parametrize(("overrides", "field"),
                         [({"to": 7}, "to"), ({"subject": None}, "subject")])
def test_mistyped_field_is_400_naming_it(gateway: MockGateway, http: requests.Session, db: Path,
                                         overrides: dict[str, object], field: str) -> None:
    reply = post(http, gateway, "k-1", **overrides)
    assert reply.status_code == 400 and reply.json()["field"] == field
    missing = http.post(gateway.url + "/v1/messages", json={"case_id": "c"}, timeout=5)
    assert missing.status_code == 400 and missing.json()["field"] == "to"
    log = read_log(db)
    assert log.deliveries == () and [r.status for r in log.requests] == [400, 400]


@pytest.mark.parametrize(("use_keys", "expected"), [(False, 2), (True, 1)],
                         ids=["keys-off-duplicates", "keys-on-single"])
def test_exercise_3_double_resume(gateway: MockGateway, db: Path, use_keys: bool,
                                  expected: int) -> None:
    """Chapter 8 exercise 3: two resumes re-issue the send; only keys keep it single."""
    for _resume in range(2):
        with client(gateway, use_idempotency_keys=use_keys) as resumed:
            resumed.send(**MESSAGE, idempotency_key="case-O-1001:send_email:1")
    assert len(read_log(db).deliveries_for("case-O-1001")) == expected


def test_error_fault_then_retry_delivers_once(gateway: MockGateway, db: Path) -> None:
    gateway.set_faults([{"kind": "error", "status": 503}])
    with client(gateway) as sender:
        result = sender.send(**MESSAGE, idempotency_key="k-1")
    assert (result.attempts, result.duplicate) == (2, False)
    log = read_log(db)
    assert [(r.status, r.fault) for r in log.requests] == [(503, "error:503"), (201, None)]
    assert len(log.deliveries) == 1


def test_drop_after_accept_converges_to_one_delivery(gateway: MockGateway, db: Path) -> None:
    gateway.set_faults([{"kind": "drop_after_accept"}])
    with client(gateway) as sender:
        result = sender.send(**MESSAGE, idempotency_key="k-1")
    assert (result.attempts, result.duplicate, result.delivery_id) == (2, True, "dlv-000001")
    log = read_log(db)
    assert len(log.deliveries) == 1
    assert [r.fault for r in log.requests] == ["drop_after_accept", None]
    assert {r.idempotency_key for r in log.requests} == {"k-1"}


def test_drop_after_accept_is_a_connection_error(gateway: MockGateway,
                                                 http: requests.Session) -> None:
    gateway.set_faults([FaultSpec("drop_after_accept")])
    with pytest.raises(requests.ConnectionError):
        post(http, gateway, "k-1")


def test_latency_fault_delays_the_reply(gateway: MockGateway, http: requests.Session) -> None:
    gateway.set_faults([{"kind": "latency", "ms": 150}])
    started = time.monotonic()
    assert post(http, gateway, "k-1").status_code == 201
    assert time.monotonic() - started >= 0.150
    assert gateway.pending_faults() == ()


def test_delay_after_accept_delivers_then_answers_after_the_read_timeout(
        gateway: MockGateway, db: Path) -> None:
    gateway.set_faults([{"kind": "delay_after_accept", "ms": 1200}])
    with client(gateway, read_timeout_s=0.3) as sender:
        started = time.monotonic()
        result = sender.send(**MESSAGE, idempotency_key="k-1")
    assert time.monotonic() - started < 1.2  # the client gave up on the first reply
    assert (result.attempts, result.duplicate, result.delivery_id) == (2, True, "dlv-000001")
    log = read_log(db)
    assert [(r.fault, r.status) for r in log.requests] == [
        ("delay_after_accept:1200ms", 201), (None, 200)]
    assert len(log.deliveries) == 1


def test_a_fresh_key_after_the_read_timeout_delivers_twice(gateway: MockGateway,
                                                          http: requests.Session) -> None:
    gateway.set_faults([{"kind": "delay_after_accept", "ms": 1200}])
    with pytest.raises(requests.ReadTimeout):
        http.post(gateway.url + "/v1/messages", json=MESSAGE,
                  headers={"Idempotency-Key": "k-1"}, timeout=(2, 0.3))
    assert post(http, gateway, "k-2").status_code == 201  # what a careless client does
    assert len(gateway.log().deliveries) == 2


def test_stop_wakes_a_delayed_reply(db: Path) -> None:
    gw = MockGateway(db).start()
    gw.set_faults([{"kind": "delay_after_accept", "ms": 60_000}])
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(requests.post, gw.url + "/v1/messages", json=MESSAGE,
                              timeout=(2, 30))
        deadline = time.monotonic() + 10
        while not read_log(db).deliveries and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        gw.stop()
        pending.result(timeout=20)  # answered at once, not after a minute
        assert time.monotonic() - started < 10


@pytest.mark.parametrize("fault", [{"kind": "delay_after_accept"},
                                   {"kind": "delay_after_accept", "ms": -1},
                                   {"kind": "delay_after_accept", "ms": 60_001},
                                   {"kind": "delay_after_accept", "ms": 1.5},
                                   {"kind": "latency", "ms": 10**9}])
def test_delays_are_bounded_whole_milliseconds(fault: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="fault.ms"):
        FaultSpec.from_dict(fault)


def test_on_accepted_called_once_with_the_delivery(db: Path, http: requests.Session) -> None:
    seen: list[tuple[Delivery, int]] = []
    gw = MockGateway(db, on_accepted=lambda d: seen.append((d, len(read_log(db).deliveries))))
    gw.set_faults([{"kind": "pause_after_accept"}])
    with gw:
        post(http, gw, "k-1")
        post(http, gw, "k-1")
    assert len(seen) == 1
    delivery, committed = seen[0]
    assert (delivery.delivery_id, delivery.idempotency_key, delivery.body) == (
        "dlv-000001", "k-1", MESSAGE["body"])
    assert committed == 1  # already in the durable log when the hook ran


def test_log_over_http_and_from_the_file_after_stop(db: Path, http: requests.Session) -> None:
    with MockGateway(db, control=True) as gw:
        http.post(gw.url + "/v1/messages", json=MESSAGE,
                  headers={"Idempotency-Key": "k-1", "X-ShopOps-Worker-Pid": "777"}, timeout=5)
        _, requests_log = control(gw, "GET", "/_log/requests")
        _, deliveries = control(gw, "GET", "/_log/deliveries")
    me = os.getpid()  # the connection's owner, from the kernel; the header is a claim
    assert [(r["worker_pid"], r["claimed_pid"], r["status"])  # type: ignore[index]
            for r in requests_log] == [(me, 777, 201)]  # type: ignore[union-attr]
    assert deliveries[0]["delivery_id"] == "dlv-000001"  # type: ignore[index]
    log = read_log(db)
    record = log.requests[0]
    assert (record.seq, record.worker_pid, record.case_id) == (1, me, "case-O-1001")
    assert record.forged and record.worker_uid == os.geteuid()
    assert record.received_at.endswith("+00:00") and record.received_epoch > 0
    assert isinstance(record.remote_port, int) and len(record.body_sha256) == 64
    assert log.deliveries[0].request_seq == 1
    gw.stop()  # idempotent


def test_concurrent_same_key_requests_deliver_once(gateway: MockGateway, db: Path) -> None:
    barrier = threading.Barrier(6)

    def send(_: int) -> tuple[int, str]:
        with requests.Session() as session:
            barrier.wait(timeout=5)
            reply = post(session, gateway, "k-race")
            return reply.status_code, reply.json()["delivery_id"]

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(send, range(6)))
    assert sorted(status for status, _ in results) == [200] * 5 + [201]
    assert {delivery_id for _, delivery_id in results} == {"dlv-000001"}
    assert len(read_log(db).deliveries) == 1


@pytest.mark.parametrize(("faults", "field"), [
    ([{"kind": "explode"}], "fault.kind"),
    ([{"kind": "error", "status": 404}], "fault.status"),
    ([{"kind": "latency", "ms": "5"}], "fault.ms"),
    ([{"kind": "latency", "ms": 5, "status": 500}], "fault.status"),
    ({"kind": "error"}, "faults"),
])
def test_bad_control_input_is_400(gateway: MockGateway, faults: object, field: str) -> None:
    gateway.stop()  # the fixture's gateway has no control socket
    gw = MockGateway(gateway.db_path, control=True).start()
    try:
        gw.set_faults([{"kind": "latency", "ms": 1}])
        status, reply = control(gw, "POST", "/_control/faults", faults)
        assert status == 400 and reply["field"] == field  # type: ignore[index]
        assert gw.pending_faults() == (FaultSpec("latency", ms=1),)  # plan untouched
    finally:
        gw.stop()


def test_control_socket_sets_the_plan_in_order(db: Path, http: requests.Session) -> None:
    plan = [{"kind": "error", "status": 500}, {"kind": "error", "status": 502}]
    with MockGateway(db, control=True) as gw:
        assert control(gw, "POST", "/_control/faults", plan)[0] == 200
        assert [post(http, gw, "k").status_code for _ in range(3)] == [500, 502, 201]
        assert oct(os.stat(os.path.dirname(gw.control_path)).st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("path", ["/_control/faults", "/_log/requests", "/_log/deliveries",
                                  "/_log/notes"])
def test_the_data_address_serves_no_control_and_no_log(gateway: MockGateway,
                                                       http: requests.Session,
                                                       path: str) -> None:
    gateway.set_faults([{"kind": "error", "status": 503}])
    assert http.post(gateway.url + path, json=[], timeout=5).status_code == 404
    assert http.get(gateway.url + path, timeout=5).status_code == 404
    assert gateway.pending_faults() == (FaultSpec("error", status=503),)


def test_a_sender_of_another_uid_is_refused_and_logged(db: Path,
                                                        http: requests.Session) -> None:
    with MockGateway(db, allowed_uid=os.geteuid() + 1) as gw:
        gw.set_faults([{"kind": "error", "status": 503}])
        reply = post(http, gw, "k-1")
        assert reply.status_code == 403
        assert gw.pending_faults() == (FaultSpec("error", status=503),)  # not consumed
    log = read_log(db)
    # kept apart (issue 24): no check of the execution counts another uid's request
    assert log.requests == () and log.deliveries == ()
    assert [(r.status, r.worker_uid) for r in log.foreign] == [(403, os.geteuid())]


def test_fault_spec_names_allowed_values() -> None:
    with pytest.raises(ValueError, match="latency, error, drop_after_accept"):
        FaultSpec.from_dict({"kind": "nope"})


def test_serve_prints_url_and_stops_on_sigterm(db: Path) -> None:
    """``shopops-chaos gateway serve`` (the harness's CLI: ``shopops`` never imports it)."""
    argv = [sys.executable, "-m", "harness", "gateway", "serve", "--db", str(db)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with subprocess.Popen(argv, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                assert proc.stderr is not None
                pytest.fail(f"serve exited with {proc.wait()}: {proc.stderr.read()}")
            assert line.startswith("gateway listening on http://127.0.0.1:")
            assert line.rstrip().endswith(f"(log: {db})")
            url = line.split()[3]
            with requests.Session() as session:
                reply = session.post(url + "/v1/messages", json=MESSAGE, timeout=5)
            assert reply.status_code == 201
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    # the whole log is in the one file: no -wal/-shm left that a copy of it would miss
    assert sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name)) == [
        db.name]
    assert len(read_log(db).deliveries) == 1


def test_client_against_a_stopped_gateway_is_unavailable(db: Path) -> None:
    gw = MockGateway(db).start()
    url = gw.url
    gw.stop()
    with EmailGatewayClient(url, max_attempts=2, backoff_s=0.0) as sender:
        with pytest.raises(GatewayUnavailable) as info:
            sender.send(**MESSAGE, idempotency_key="k-1")
    assert info.value.fields["attempts"] == 2
    assert "ConnectionError" in info.value.fields["last_error"]
    assert read_log(db).requests == ()


# -- the order service: /v1/order-notes, a ledger of its own (issue 9) -----------------------

NOTE = {"case_id": "case-O-1001", "order_id": "O-1001", "body": "Customer emailed."}


def post_note(http: requests.Session, gw: MockGateway, key: str | None = None,
              **overrides: object) -> requests.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return http.post(gw.url + "/v1/order-notes", json={**NOTE, **overrides}, headers=headers,
                     timeout=(2, 5))


def test_notes_dedupe_in_their_own_ledger(gateway: MockGateway, http: requests.Session,
                                          db: Path) -> None:
    seen: list[str] = []
    gateway.on_note_accepted = lambda note: seen.append(note.delivery_id)
    gateway.on_accepted = lambda d: seen.append("email " + d.delivery_id)
    first, again = post_note(http, gateway, "k-1"), post_note(http, gateway, "k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["delivery_id"] == again.json()["delivery_id"] == "nte-000001"
    assert post_note(http, gateway, "k-1", body="other").status_code == 409
    bad = post_note(http, gateway, "k-2", order_id=7)
    assert bad.status_code == 400 and bad.json()["field"] == "order_id"
    post(http, gateway, "k-1")  # the same key on the email gateway is another ledger's
    log = read_log(db)
    assert [n.delivery_id for n in log.notes] == ["nte-000001"]
    assert log.notes[0].body == NOTE["body"] and log.notes[0].order_id == "O-1001"
    assert [r.status for r in log.note_requests] == [201, 200, 409, 400]
    assert [(r.status, d.delivery_id) for r, d in zip(log.requests, log.deliveries,
                                                      strict=True)] == [(201, "dlv-000001")]
    assert seen == ["nte-000001", "email dlv-000001"]


def test_faults_apply_to_messages_only(gateway: MockGateway, http: requests.Session,
                                       db: Path) -> None:
    gateway.set_faults([{"kind": "error", "status": 503}])
    assert post_note(http, gateway, "n-1").status_code == 201
    assert post(http, gateway, "m-1").status_code == 503
    assert gateway.pending_faults() == ()


def test_a_log_from_before_the_order_service_reads(db: Path) -> None:
    import sqlite3
    from contextlib import closing

    MockGateway(db)  # a log made by this version, then the note tables dropped
    with closing(sqlite3.connect(db)) as conn:
        conn.executescript("DROP TABLE note_requests; DROP TABLE notes;")
    log = read_log(db)
    assert (log.note_requests, log.notes, log.requests) == ((), (), ())


def test_the_client_adds_a_note_with_its_key(gateway: MockGateway, db: Path) -> None:
    with client(gateway) as c:
        first = c.add_note(case_id="case-O-1001", order_id="O-1001", body="x",
                           idempotency_key="note-key")
        again = c.add_note(case_id="case-O-1001", order_id="O-1001", body="x",
                           idempotency_key="note-key")
    assert (first.delivery_id, first.duplicate, again.duplicate) == ("nte-000001", False, True)
    assert {r.idempotency_key for r in read_log(db).note_requests} == {"note-key"}


def test_only_a_well_formed_send_of_the_case_from_a_worker_takes_a_fault(
        gateway: MockGateway, http: requests.Session, db: Path) -> None:
    """A dummy request cannot spend the fault the loop's send was meant to meet: a junk
    body, a message of another case, or a sender the execution does not stand for is
    answered without the fault, which stays for the next well-formed send of the case."""
    senders: list[int | None] = []
    gateway.fault_case = MESSAGE["case_id"]
    gateway.faults_for = lambda pid: senders.append(pid) or pid != os.getpid()
    gateway.set_faults([{"kind": "error", "status": 503}])
    junk = http.post(gateway.url + "/v1/messages", data=b"not json", timeout=(2, 5))
    assert junk.status_code == 400
    assert post(http, gateway, "k-other", case_id="case-O-2").status_code == 201
    assert post(http, gateway, "k-mine").status_code == 201  # this process: refused
    assert gateway.pending_faults() == (FaultSpec("error", status=503),)
    assert senders == [os.getpid()]  # asked only for the well-formed send of the case
    gateway.faults_for = None  # any sender
    assert post(http, gateway, "k-2").status_code == 503
    assert gateway.pending_faults() == ()


# -- what a worker can send that the harness must not take whole (never trust the code) ---

def test_a_body_over_the_limit_is_logged_as_413_and_never_delivered(
        gateway: MockGateway, http: requests.Session) -> None:
    from harness.services.gateway import MAX_BODY

    big = post(http, gateway, "k-big", body="x" * (MAX_BODY + 1))
    assert big.status_code == 413, big.text
    assert big.json()["field"] == "body"
    ok = post(http, gateway, "k-ok")
    assert ok.status_code == 201, ok.text
    log = gateway.log()
    assert [r.status for r in log.requests] == [413, 201]
    assert [d.idempotency_key for d in log.deliveries] == ["k-ok"]


def test_a_sender_gone_before_its_body_arrived_is_no_message_and_no_traceback(
        gateway: MockGateway, http: requests.Session, caplog: pytest.LogCaptureFixture) -> None:
    """Found by an attack: a worker killed in the middle of a send (its body cut short)
    made werkzeug print "Error on request" and a ClientDisconnected traceback on the
    harness's stderr. It is no message: nothing recorded, nothing delivered."""
    import logging

    caplog.set_level(logging.DEBUG, logger="harness.services.gateway")
    port = int(gateway.url.rpartition(":")[2])
    with socket.create_connection((gateway.host, port)) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                     b'{"to":')
    deadline = time.monotonic() + 60
    while not any("left before its body" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.01)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert post(http, gateway, "k-ok").status_code == 201
    log = gateway.log()
    assert [r.status for r in log.requests] == [201]
    assert [d.idempotency_key for d in log.deliveries] == ["k-ok"]


def test_an_absurd_claimed_pid_is_logged_not_a_lost_request(gateway: MockGateway,
                                                            http: requests.Session) -> None:
    """``int()`` refuses over 4300 digits: the request used to end in a 500, unlogged."""
    reply = http.post(gateway.url + "/v1/messages", json=MESSAGE, timeout=(2, 5),
                      headers={"Idempotency-Key": "k-1", "X-ShopOps-Worker-Pid": "9" * 5000})
    assert reply.status_code == 201, reply.text
    (record,) = gateway.log().requests
    assert record.claimed_pid is None and record.status == 201


def test_the_failpoint_channel_drops_an_endless_line_instead_of_buffering_it() -> None:
    from harness.services.channel import MAX_LINE, FailpointChannel, Hit

    hits: list[Hit] = []
    tampered: list[str] = []
    with FailpointChannel(lambda hit: hits.append(hit) or {"do": "continue"},
                          tampered.append) as channel:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect("\0" + channel.path[1:])
            sock.settimeout(30)
            sock.sendall(b"{" + b" " * (4 * MAX_LINE))  # no newline, and the write side open
            try:  # the harness hangs up: an end of file, or a reset (our bytes left unread)
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:  # still serving
            sock.connect("\0" + channel.path[1:])
            sock.settimeout(30)
            sock.sendall(json.dumps({"label": "t0.case_started", "pid": os.getpid(),
                                     "occurrence": 1}).encode() + b"\n")
            assert json.loads(sock.makefile("rb").readline()) == {"do": "continue"}
    assert [h.label for h in hits] == ["t0.case_started"]
    assert tampered == [f"pid {os.getpid()} (uid {os.geteuid()}) sent a failpoint-channel line "
                        f"over {MAX_LINE} bytes: dropped"]


def test_a_hit_that_waits_does_not_stop_the_channel_for_other_workers() -> None:
    """The channel's lines are served by the process's one service loop: a hit whose
    answer waits (a held worker, a story act taking a lock) is answered from a thread of
    its own, and another connection's hit is answered meanwhile, pipelined lines in order."""
    import threading

    from harness.services.channel import FailpointChannel, Hit

    release = threading.Event()

    def on_hit(hit: Hit) -> object:
        if hit.label == "t4.parked":  # held until the test lets it go
            return lambda: {"do": "continue"} if release.wait(30) else None
        return {"do": "continue", "label": hit.label}

    def line(label: str) -> bytes:
        return json.dumps({"label": label, "pid": os.getpid(), "occurrence": 1}).encode() + b"\n"

    with FailpointChannel(on_hit) as channel:  # type: ignore[arg-type]
        with socket.socket(socket.AF_UNIX) as held, socket.socket(socket.AF_UNIX) as other:
            held.connect("\0" + channel.path[1:])
            other.connect("\0" + channel.path[1:])
            held.settimeout(30)
            other.settimeout(10)  # a loop waiting on the held hit would never answer
            held.sendall(line("t4.parked") + line("t6.request_leaving"))
            other.sendall(line("t1.get_customer") + line("t1.get_order"))
            answers = other.makefile("rb")
            assert [json.loads(answers.readline())["label"] for _ in range(2)] == [
                "t1.get_customer", "t1.get_order"]
            release.set()
            replies = held.makefile("rb")
            assert json.loads(replies.readline()) == {"do": "continue"}
            assert json.loads(replies.readline())["label"] == "t6.request_leaving"


def test_a_worker_that_floods_the_channel_waits_its_turn() -> None:
    """A flood of pipelined hits is answered a few lines at a time, everyone else's first
    in between: another worker's hit, sent in the middle of it, is answered after a few of
    the flood's, not after the rest of its 64 KiB chunk (~1,000 hits; found by an attack,
    another execution's hits waited up to 4 s and its workers passed their deadline)."""
    from harness.services.channel import FailpointChannel, Hit

    seen: list[str] = []
    flooding = threading.Event()

    def on_hit(hit: Hit) -> dict[str, object]:
        seen.append(hit.label)
        if len(seen) >= 50:
            flooding.set()
        return {"do": "continue"}

    def line(label: str) -> bytes:
        return json.dumps({"label": label, "pid": os.getpid(), "occurrence": 1}).encode() + b"\n"

    with FailpointChannel(on_hit) as channel, socket.socket(socket.AF_UNIX) as flood, \
            socket.socket(socket.AF_UNIX) as other:
        flood.connect("\0" + channel.path[1:])
        other.connect("\0" + channel.path[1:])
        flood.settimeout(60)
        other.settimeout(60)
        answers = flood.makefile("rb")
        drain = threading.Thread(target=lambda: [answers.readline() for _ in range(20_000)])
        drain.start()
        sender = threading.Thread(target=flood.sendall, args=(line("t1.get_order") * 20_000,))
        sender.start()
        assert flooding.wait(60)  # the flood is being answered
        other.sendall(line("t4.parked"))
        before = len(seen)  # read after the send: a late read only makes the count smaller
        assert json.loads(other.makefile("rb").readline()) == {"do": "continue"}
        after = seen.index("t4.parked")
        sender.join(60)
        drain.join(60)
    assert after - before < 100, (before, after)  # a loop without turns: ~300-2,300
    assert seen.count("t1.get_order") == 20_000


def test_a_deeply_nested_body_is_refused_as_json_not_a_500(gateway: MockGateway,
                                                           http: requests.Session) -> None:
    """~200 KB of ``[[[…]]]`` under the 1 MiB cap: ``json.loads`` raised ``RecursionError``
    (an HTML 500, a traceback on stderr). Refused like any bad body: 400 JSON, logged."""
    reply = http.post(gateway.url + "/v1/messages", data=b"[" * 100_000 + b"]" * 100_000,
                      headers={"Content-Type": "application/json"}, timeout=(2, 30))
    assert reply.status_code == 400, reply.text
    assert "nested more than" in reply.json()["detail"]
    log = gateway.log()
    assert [r.status for r in log.requests] == [400] and log.deliveries == ()
