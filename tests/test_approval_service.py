"""The harness-owned approval service (``harness.services.approvals``) and the queue's client
backend (``shopops.approval_client``): a worker's queue works as on its own file, the
records are the harness's, and nothing a worker can ask for deletes, rewrites, approves or
un-consumes them. Real Unix sockets and SQLite files, in process (each test well under a
second)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.judge.evidence import read_approvals
from harness.judge.observers.approvals import records_of
from harness.services.approvals import SERVICE_QUEUE, ApprovalService
from shopops.approvals import ENV_SOCKET, NOTE_GATE, ApprovalQueue
from shopops.errors import ApprovalRefused, ConfigError
from shopops.runtime import services_from_env
from shopops.validators import check_environment

CASE, DIGEST = "case-O-1001", "ab" * 32


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[ApprovalService, list[str]]]:
    tampering: list[str] = []
    with ApprovalService(tmp_path / "approvals.db", on_tamper=tampering.append) as svc:
        yield svc, tampering


def _raw(address: str, *messages: object) -> list[dict[str, object]]:
    """Send raw lines, as a hostile worker would; the replies."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect("\0" + address[1:] if address.startswith("@") else address)
        reader = sock.makefile("rb")
        replies = []
        for m in messages:
            sock.sendall((m if isinstance(m, bytes) else json.dumps(m).encode()) + b"\n")
            replies.append(json.loads(reader.readline()))
        return replies


def test_a_worker_queue_on_the_service_keeps_its_records_in_the_harness_file(
        service: tuple[ApprovalService, list[str]], tmp_path: Path) -> None:
    svc, tampering = service
    worker = ApprovalQueue(tmp_path / "never-created.db", service=svc.address)
    human = ApprovalQueue(svc.db_path, kind=SERVICE_QUEUE)  # the harness's own side, on its file
    request_id = worker.request(CASE, DIGEST)
    assert worker.request(CASE, DIGEST) == request_id  # idempotent, as on a file
    assert worker.ticket_for(CASE, DIGEST) is None
    ticket = human.approve(CASE, approver="maya")
    assert worker.latest_request(CASE).status == "approved"  # type: ignore[union-attr]
    assert worker.ticket_for(CASE, DIGEST) == ticket
    assert worker.verify(ticket.ticket_id, CASE, DIGEST) == ticket
    used = worker.consume(ticket.ticket_id, CASE, DIGEST, "key-1")
    assert used.consumed_by_key == "key-1"
    assert worker.consume(ticket.ticket_id, CASE, DIGEST, "key-1") == used  # same send
    with pytest.raises(ApprovalRefused) as refused:
        worker.consume(ticket.ticket_id, CASE, DIGEST, "key-2")
    assert refused.value.reason == "consumed"
    with pytest.raises(ApprovalRefused) as unknown:
        worker.verify("apr-forged-1", CASE, DIGEST)
    assert unknown.value.reason == "unknown_ticket"
    assert "approval service" in str(unknown.value)
    worker.close()
    human.close()
    requests, tickets, gap = read_approvals(svc.db_path, CASE)
    assert gap is None and [r.request_id for r in requests] == [request_id]
    assert [t.consumed_by_key for t in tickets] == ["key-1"]
    assert not (tmp_path / "never-created.db").exists() and tampering == []


def test_the_human_acts_are_not_a_workers(service: tuple[ApprovalService, list[str]],
                                          tmp_path: Path) -> None:
    svc, _ = service
    worker = ApprovalQueue(tmp_path / "x.db", service=svc.address)
    worker.request(CASE, DIGEST)
    for act in (lambda: worker.approve(CASE, approver="me"),
                lambda: worker.reject(CASE, approver="me")):
        with pytest.raises(ApprovalRefused) as refused:
            act()
        assert refused.value.reason == "not_a_worker_operation"
    assert worker.latest_request(CASE).status == "pending"  # type: ignore[union-attr]
    worker.close()


def test_asking_the_service_to_rewrite_or_approve_is_refused_and_reported(
        service: tuple[ApprovalService, list[str]]) -> None:
    svc, tampering = service
    human = ApprovalQueue(svc.db_path, kind=SERVICE_QUEUE)
    human.request(CASE, DIGEST)
    human.reject(CASE, approver="maya")
    replies = _raw(svc.address,
                   {"op": "approve", "case_id": CASE, "approver": "me"},
                   {"op": "delete_request", "request_id": f"req-{CASE}-{DIGEST[:12]}"},
                   {"op": "add_request", "request": {  # the same id again, "pending"
                       "request_id": f"req-{CASE}-{DIGEST[:12]}", "case_id": CASE,
                       "draft_digest": DIGEST, "requested_at": "x", "status": "pending"}})
    assert [r["ok"] for r in replies] == [False, False, True]
    assert len(tampering) == 2 and "'approve'" in tampering[0]
    assert "delete_request" in tampering[1] and f"pid {os.getpid()}" in tampering[1]
    requests, tickets, _ = read_approvals(svc.db_path, CASE)
    assert [r.status for r in requests] == ["rejected"] and tickets == ()
    human.close()


def test_a_consumed_ticket_cannot_be_unconsumed_or_rebound(
        service: tuple[ApprovalService, list[str]]) -> None:
    """Strict (issue 24): consuming a consumed ticket under another key used to answer ok;
    it is refused and reported as tampering. The same key again is a resumed send: ok."""
    svc, tampering = service
    human = ApprovalQueue(svc.db_path, kind=SERVICE_QUEUE)
    human.request(CASE, DIGEST)
    ticket = human.approve(CASE, approver="maya")
    human.consume(ticket.ticket_id, CASE, DIGEST, "key-1")
    replies = _raw(svc.address,
                   {"op": "mark_consumed", "ticket_id": ticket.ticket_id, "key": "key-2",
                    "at": "now"},
                   {"op": "mark_consumed", "ticket_id": ticket.ticket_id, "key": None,
                    "at": "now"},
                   {"op": "unconsume", "ticket_id": ticket.ticket_id},
                   {"op": "mark_consumed", "ticket_id": ticket.ticket_id, "key": "key-1",
                    "at": "now"})
    assert [r["ok"] for r in replies] == [False, False, False, True]
    assert "consumed under key 'key-1'" in str(replies[0]["error"])
    assert len(tampering) == 2 and "key-2" in tampering[0], tampering
    human.close()
    (kept,) = read_approvals(svc.db_path, CASE)[1]
    assert kept.consumed_by_key == "key-1"


def test_consuming_a_ticket_the_queue_never_issued_is_refused_and_reported(
        service: tuple[ApprovalService, list[str]]) -> None:
    svc, tampering = service
    (reply,) = _raw(svc.address, {"op": "mark_consumed", "ticket_id": "T-made-up",
                                  "key": "k", "at": "now"})
    assert reply["ok"] is False and "never issued" in str(reply["error"])
    assert len(tampering) == 1 and "T-made-up" in tampering[0]
    calls = _service_calls(svc.db_path)
    assert calls[-1][:3] == ("mark_consumed", "T-made-up", 0)


def _service_calls(db: Path) -> list[tuple[str | None, str | None, int]]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT op, ticket_id, ok FROM service_calls ORDER BY seq"))


def test_requests_past_the_cap_are_refused_the_connection_closed_and_reported(
        service: tuple[ApprovalService, list[str]]) -> None:
    from harness.services.approvals import MAX_REQUESTS_PER_WORKER

    svc, tampering = service
    ask = json.dumps({"op": "requests", "case_id": CASE}).encode() + b"\n"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect("\0" + svc.address[1:])
        reader = sock.makefile("rb")
        for _ in range(MAX_REQUESTS_PER_WORKER):
            sock.sendall(ask)
            assert json.loads(reader.readline())["ok"] is True
        sock.sendall(ask)
        over = json.loads(reader.readline())
        assert over["ok"] is False and "over the cap" in str(over["error"])
        assert reader.readline() == b""  # closed by the service
    (again,) = _raw(svc.address, {"op": "requests", "case_id": CASE})  # a new connection:
    assert again["ok"] is False  # the same pid, still over its cap
    assert len(tampering) == 1 and "flooded" in tampering[0]


def test_connections_past_the_cap_are_closed_and_reported(
        service: tuple[ApprovalService, list[str]]) -> None:
    from harness.services.approvals import MAX_CONNECTIONS_PER_WORKER

    svc, tampering = service
    held = []
    try:
        for _ in range(MAX_CONNECTIONS_PER_WORKER):  # each answered: admitted
            sock = socket.socket(socket.AF_UNIX)
            held.append(sock)
            sock.connect("\0" + svc.address[1:])
            sock.sendall(json.dumps({"op": "requests", "case_id": CASE}).encode() + b"\n")
            with sock.makefile("rb") as answer:
                assert json.loads(answer.readline())["ok"] is True
        extra = socket.socket(socket.AF_UNIX)
        held.append(extra)
        extra.connect("\0" + svc.address[1:])  # the kernel accepts; the service closes it
        try:  # closed before or after our line arrived: end of file, or a reset
            extra.sendall(json.dumps({"op": "requests", "case_id": CASE}).encode() + b"\n")
            with extra.makefile("rb") as answer:
                got = answer.readline()
        except (ConnectionResetError, BrokenPipeError):
            got = b""
        assert got == b""
        assert len(tampering) == 1 and "connection of pid" in tampering[0]
    finally:
        for sock in held:
            sock.close()


def test_malformed_calls_get_an_error_naming_the_field(
        service: tuple[ApprovalService, list[str]]) -> None:
    svc, tampering = service
    replies = _raw(svc.address, b"not json", {"no": "op"},
                   {"op": "add_request", "request": {"request_id": "r", "case_id": CASE}},
                   {"op": "ticket", "ticket_id": "x" * 5000},
                   {"op": "requests", "case_id": None})
    assert [r["ok"] for r in replies] == [False, False, False, False, True]
    assert "JSON" in str(replies[0]["error"]) and "draft_digest" in str(replies[2]["error"])
    assert "1-1000" in str(replies[3]["error"]) and tampering == []


def test_another_uid_is_refused_and_logged_but_is_no_tampering(tmp_path: Path) -> None:
    """Another execution's process is not this implementation's doing (issue 24): refused
    and logged in the call log, never handed to ``on_tamper`` (which would fail the
    victim's ``no_tampering``)."""
    tampering: list[str] = []
    with ApprovalService(tmp_path / "a.db", allowed_uid=os.getuid() + 4170000,
                         on_tamper=tampering.append) as svc:
        (reply,) = _raw(svc.address, {"op": "requests", "case_id": CASE})
        queue = ApprovalQueue(tmp_path / "b.db", service=svc.address)
        with pytest.raises(ApprovalRefused) as refused:
            queue.request(CASE, DIGEST)
        queue.close()
    assert reply["ok"] is False and refused.value.reason == "service_refused"
    assert tampering == []
    assert read_approvals(tmp_path / "a.db", CASE)[0] == ()
    with sqlite3.connect(tmp_path / "a.db") as conn:
        logged = conn.execute("SELECT worker_uid, ok, detail FROM service_calls").fetchall()
    assert [(uid, ok) for uid, ok, _ in logged] == [(os.getuid(), 0)] * 2
    assert "is not this execution's worker" in logged[0][2]


def test_the_environment_selects_the_service_and_plain_runs_keep_the_file(
        service: tuple[ApprovalService, list[str]], tmp_path: Path) -> None:
    svc, _ = service
    remote = services_from_env({ENV_SOCKET: svc.address,
                                "SHOPOPS_APPROVALS_DB": str(tmp_path / "local.db")})
    remote.approvals.request(CASE, DIGEST)
    remote.approvals.close()
    assert [r.case_id for r in read_approvals(svc.db_path, CASE)[0]] == [CASE]
    assert not (tmp_path / "local.db").exists()
    local = services_from_env({"SHOPOPS_APPROVALS_DB": str(tmp_path / "local.db")})
    local.approvals.request(CASE, DIGEST)
    local.approvals.close()
    assert (tmp_path / "local.db").exists()
    check_environment({ENV_SOCKET: svc.address})
    with pytest.raises(ConfigError, match=ENV_SOCKET):
        check_environment({ENV_SOCKET: "@" + "x" * 200})


def test_a_service_that_is_gone_is_an_os_error(tmp_path: Path) -> None:
    queue = ApprovalQueue(tmp_path / "a.db", service="@shopops-apr-nobody-listens")
    with pytest.raises(OSError):
        queue.request(CASE, DIGEST)
    queue.close()


def test_gates_travel_through_the_service(service: tuple[ApprovalService, list[str]],
                                          tmp_path: Path) -> None:
    svc, _ = service
    worker = ApprovalQueue(tmp_path / "x.db", service=svc.address)
    human = ApprovalQueue(svc.db_path, kind=SERVICE_QUEUE)
    note_request = worker.request(CASE, DIGEST, gate=NOTE_GATE)
    worker.request(CASE, DIGEST)
    note = human.approve(CASE, approver="maya", gate=NOTE_GATE)
    assert worker.latest_request(CASE, gate=NOTE_GATE).request_id == note_request  # type: ignore[union-attr]
    assert worker.ticket_for(CASE, DIGEST) is None  # the note's ticket grants no email
    assert worker.ticket_for(CASE, DIGEST, gate=NOTE_GATE) == note
    with pytest.raises(ApprovalRefused) as refused:
        worker.verify(note.ticket_id, CASE, DIGEST)
    assert refused.value.reason == "wrong_gate"
    (reply,) = _raw(svc.address, {"op": "add_request", "request": {
        "request_id": "r", "case_id": CASE, "draft_digest": DIGEST, "requested_at": "x",
        "gate": "wire_money"}})
    assert reply["ok"] is False and "gate" in str(reply["error"])
    worker.close()
    human.close()


def test_close_ends_a_connection_still_open_and_its_sqlite_connections(
        tmp_path: Path) -> None:
    """A worker SIGKILLed mid-call, or a stray process of a sealed execution, can hold its
    connection open: ``close`` ends it and waits, so no SQLite connection of the service is
    left to checkpoint the WAL and remove ``-wal``/``-shm`` while the harness moves the
    execution's files (seen once as a failed move of ``approvals.db-shm``)."""
    svc = ApprovalService(tmp_path / "approvals.db")
    wal = tmp_path / "approvals.db-wal"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(60)  # a connection left open fails the test, not hangs it
        sock.connect("\0" + svc.address[1:])
        reader = sock.makefile("rb")
        sock.sendall(json.dumps({"op": "requests", "case_id": CASE}).encode() + b"\n")
        assert json.loads(reader.readline())["ok"] is True  # served: its store is open
        assert wal.exists()
        svc.close()  # the client is still connected
        assert reader.readline() == b""  # the service ended the connection
        assert not wal.exists()  # and closed its SQLite connections before returning
    svc.close()  # idempotent


def test_a_sealed_executions_service_is_a_socket_file_in_its_folder(tmp_path: Path) -> None:
    """With ``folder`` (a sealed execution's ``Sandbox.shared``) the service is a socket file
    there, not an abstract name listed in ``/proc/net/unix``; a folder too deep for
    ``sun_path`` falls back to an abstract name (the peer-uid check still guards it)."""
    from harness.services.serving import MAX_SOCKET_PATH

    with ApprovalService(tmp_path / "a.db", folder=tmp_path) as svc:
        assert svc.address == str(tmp_path / "shopops-apr.sock")
        assert (tmp_path / "shopops-apr.sock").is_socket()
        (reply,) = _raw(svc.address, {"op": "requests", "case_id": CASE})
        assert reply == {"ok": True, "result": []}
        with open("/proc/net/unix") as table:
            assert not [row for row in table if "@shopops-apr-" in row
                        and f"-{os.getpid()}-" in row]
    deep = tmp_path / ("d" * (MAX_SOCKET_PATH - len(str(tmp_path))))
    deep.mkdir()
    with ApprovalService(tmp_path / "b.db", folder=deep) as svc:
        assert svc.address.startswith("@shopops-apr-")


def test_the_service_reports_each_ticket_it_binds_once(tmp_path: Path) -> None:
    """Issue 26: the service's own record of a consumption (``on_consumed``, the trace's
    ``consumed`` event), made before the worker has its answer: once, for the first binding
    only; a second ``mark_consumed`` of the same ticket (another key: refused; or the same)
    and one of a ticket that does not exist (refused) report nothing."""
    seen: list[tuple[int, str, str]] = []
    with ApprovalService(tmp_path / "approvals.db",
                         on_consumed=lambda *a: seen.append(a)) as svc:
        human = ApprovalQueue(svc.db_path, kind=SERVICE_QUEUE)
        human.request(CASE, DIGEST)
        ticket = human.approve(CASE, approver="maya")
        replies = _raw(svc.address, *[{"op": "mark_consumed", "ticket_id": t, "key": k,
                                       "at": "now"}
                                      for t, k in ((ticket.ticket_id, "key-1"),
                                                   (ticket.ticket_id, "key-2"),
                                                   (ticket.ticket_id, "key-1"),
                                                   ("apr-nope", "key-1"))])
        assert [r["ok"] for r in replies] == [True, False, True, False]
        assert seen == [(os.getpid(), ticket.ticket_id, "key-1")]
        human.close()


def test_an_executions_records_in_memory_are_no_file_until_saved(tmp_path: Path) -> None:
    """``memory=True`` (an execution's service): a worker's request and the human's
    approval (through ``queue``) are held in memory, no file exists while it serves (a
    worker has nothing to change or truncate), the records stay readable after ``close``,
    and ``save`` writes them over whatever a worker put at the path."""
    db = tmp_path / "approvals.db"
    svc = ApprovalService(db, memory=True)
    with svc:
        worker = ApprovalQueue(tmp_path / "never-created.db", service=svc.address)
        worker.request(CASE, DIGEST)
        with svc.queue() as human:
            ticket = human.approve(CASE, approver="maya")
        assert worker.ticket_for(CASE, DIGEST) == ticket
        worker.close()
        assert not db.exists()
    requests, tickets = svc.read(lambda conn: records_of(conn, CASE))
    assert [r.status for r in requests] == ["approved"] and len(tickets) == 1
    with pytest.raises(RuntimeError):  # no human act once closed
        with svc.queue():
            pass
    db.write_bytes(b"a worker's file")
    svc.save()
    assert read_approvals(db, CASE)[:2] == (requests, tickets)


def test_a_line_over_the_limit_is_refused_closed_and_reported_once(
        service: tuple[ApprovalService, list[str]]) -> None:
    """A request line over ``MAX_LINE`` bytes is never buffered whole: the connection is
    closed, the call logged as refused and the flood recorded as tampering (once)."""
    from harness.services.approvals import MAX_LINE

    svc, tampering = service
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect("\0" + svc.address[1:])
        try:
            sock.sendall(b"x" * (MAX_LINE + 10))
            got = sock.makefile("rb").readline()
        except (ConnectionResetError, BrokenPipeError):
            got = b""
    assert got == b""  # closed unanswered
    assert len(tampering) == 1 and f"over {MAX_LINE} bytes" in tampering[0]
    logged = svc.read(lambda c: c.execute(
        "SELECT ok, detail FROM service_calls").fetchall())
    assert logged and logged[-1][0] == 0 and "over" in logged[-1][1]


def test_a_worker_that_reads_no_answers_does_not_stop_the_service(
        service: tuple[ApprovalService, list[str]]) -> None:
    """One loop serves every connection of the process: a sender that pipelines thousands
    of requests and never reads an answer fills its own socket, and only its own
    connection stops being read; another connection is answered meanwhile, and the
    service closes at once."""
    svc, _ = service
    ask = json.dumps({"op": "requests", "case_id": CASE}).encode() + b"\n"
    with socket.socket(socket.AF_UNIX) as flood:
        flood.connect("\0" + svc.address[1:])
        flood.setblocking(False)
        sent = 0
        try:
            while sent < 50 * 1024 * 1024:
                sent += flood.send(ask * 500)
        except BlockingIOError:
            pass  # the kernel's buffers are full both ways: the service stopped reading
        assert sent < 50 * 1024 * 1024
        with socket.socket(socket.AF_UNIX) as other:
            other.settimeout(10.0)  # a loop stuck on the flood would never answer
            other.connect("\0" + svc.address[1:])
            other.sendall(ask)
            assert json.loads(other.makefile("rb").readline())["ok"] is True
        svc.close()  # returns with the flooding connection closed by the service
        flood.setblocking(True)
        flood.settimeout(10)
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            while True:
                flood.sendall(ask * 500)


def test_a_story_act_on_the_records_does_not_stop_the_other_services(tmp_path: Path) -> None:
    """The human's act holds the records (``queue``; it may wait for a database lock): a
    worker's call that comes meanwhile is answered once it is done, from a thread of its
    own, and the process's other services (here a failpoint channel) are answered
    meanwhile. Found by an attack: the service loop waited for the records, every service
    of the process with it."""
    import threading

    from harness.services.channel import FailpointChannel

    acting, done = threading.Event(), threading.Event()
    with ApprovalService(tmp_path / "a.db", memory=True) as svc, \
            FailpointChannel(lambda hit: {"do": "continue"}) as channel:
        def act() -> None:
            with svc.queue():
                acting.set()
                assert done.wait(30)

        story = threading.Thread(target=act)
        story.start()
        assert acting.wait(30)
        with socket.socket(socket.AF_UNIX) as worker, socket.socket(socket.AF_UNIX) as hit:
            worker.connect("\0" + svc.address[1:])
            worker.settimeout(30)
            worker.sendall(json.dumps({"op": "requests", "case_id": CASE}).encode() + b"\n")
            hit.connect("\0" + channel.path[1:])
            hit.settimeout(10)  # a loop waiting for the records would never answer
            hit.sendall(json.dumps({"label": "t1.get_order", "pid": os.getpid(),
                                    "occurrence": 1}).encode() + b"\n")
            assert json.loads(hit.makefile("rb").readline()) == {"do": "continue"}
            done.set()
            story.join(30)
            assert json.loads(worker.makefile("rb").readline())["ok"] is True


def test_a_line_nested_past_the_parser_is_refused_not_a_traceback(
        service: tuple[ApprovalService, list[str]], caplog: pytest.LogCaptureFixture) -> None:
    svc, _ = service
    (reply,) = _raw(svc.address, b"[" * 30_000 + b"]" * 30_000)
    assert reply == {"ok": False, "error": "a JSON line nested too deeply"}
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_a_hit_with_an_absurd_number_drops_the_connection_quietly(
        caplog: pytest.LogCaptureFixture) -> None:
    from harness.services.channel import FailpointChannel

    hits: list[object] = []
    with FailpointChannel(lambda hit: hits.append(hit) or {"do": "continue"}) as channel, \
            socket.socket(socket.AF_UNIX) as sock:
        sock.connect("\0" + channel.path[1:])
        sock.settimeout(30)
        sock.sendall(b'{"label": "t1.get_order", "pid": 1, "occurrence": 1e999}\n')
        assert sock.recv(1) == b""  # dropped unanswered, as any malformed hit
    assert hits == [] and not [r for r in caplog.records if r.levelname == "ERROR"]
