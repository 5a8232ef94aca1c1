"""The mock gateway's werkzeug server objects are kept between executions
(``harness.services.http_servers``, issue 27) — and no request of one gateway ever reaches
the next one's ledger: a server is bound to a new socket each time, and one whose request
thread still runs is never kept."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import requests

from harness.services import http_servers
from harness.services.gateway import MockGateway
from harness.services.serving import Serving

MESSAGE = {"case_id": "O-1", "to": "a@b", "subject": "s", "body": "b"}


def test_the_next_gateway_takes_the_server_object_and_keeps_its_own_ledger(
        tmp_path: Path) -> None:
    first = MockGateway(tmp_path / "one.db", memory=True)
    with first:
        server, url = first._server, first.url  # noqa: SLF001
        assert requests.post(f"{url}/v1/messages", json=MESSAGE, timeout=30).status_code == 201
    second = MockGateway(tmp_path / "two.db", memory=True)
    with second:
        assert second._server is server  # noqa: SLF001 - the same object, kept
        for key in ("k1", "k2"):
            reply = requests.post(f"{second.url}/v1/messages", json=MESSAGE, timeout=30,
                                  headers={"Idempotency-Key": key})
            assert reply.status_code == 201
    assert len(first.log().deliveries) == 1
    assert len(second.log().deliveries) == 2


def test_a_gateway_on_a_fixed_port_is_never_kept(tmp_path: Path) -> None:
    probe = MockGateway(tmp_path / "probe.db", memory=True)
    with probe:
        port = int(probe.url.rsplit(":", 1)[1])
    fixed = MockGateway(tmp_path / "fixed.db", memory=True, port=port)
    with fixed:
        server = fixed._server  # noqa: SLF001
    after = MockGateway(tmp_path / "after.db", memory=True)
    with after:
        assert after._server is not server  # noqa: SLF001


def test_a_server_whose_request_thread_still_runs_is_dropped_not_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_servers, "BUSY_WAIT_S", 0.2)
    entered, leave = threading.Event(), threading.Event()

    def slow(environ, start_response):  # a request that outlives its server's stop
        entered.set()
        leave.wait(60.0)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"late\n"]

    server = http_servers.take("127.0.0.1", slow, http_servers.WSGIRequestHandler)
    serving = Serving(server, "test-slow")
    url = f"http://127.0.0.1:{server.server_port}/"
    answers: list[int] = []
    client = threading.Thread(target=lambda: answers.append(
        requests.get(url, timeout=60).status_code))
    client.start()
    try:
        assert entered.wait(60.0)
        serving.stop()
        http_servers.give_back(server, "127.0.0.1", http_servers.WSGIRequestHandler)
        again = http_servers.take("127.0.0.1", slow, http_servers.WSGIRequestHandler)
        assert again is not server, "a server with a request in flight was handed out"
        again.server_close()
    finally:
        leave.set()
        client.join(60.0)
    assert answers == [200]  # the request in flight was answered by its own app


def test_an_idle_server_is_bound_to_a_new_socket_each_time(tmp_path: Path) -> None:
    first = MockGateway(tmp_path / "one.db", memory=True)
    with first:
        old = first._server.socket  # noqa: SLF001
    second = MockGateway(tmp_path / "two.db", memory=True)
    with second:
        assert second._server.socket is not old  # noqa: SLF001
        assert old.fileno() == -1  # the first one's socket was closed
        url = second.url
    with pytest.raises(requests.ConnectionError):  # stopped: nothing listens there
        requests.post(f"{url}/v1/messages", json=MESSAGE, timeout=30)


def test_a_kept_server_listens_on_a_new_port_and_the_old_url_reaches_nobody(
        tmp_path: Path) -> None:
    """Found by an attack: a kept server was bound again to its last port, so a request
    sent to one execution's gateway after it stopped was logged by the next one's."""
    first = MockGateway(tmp_path / "one.db", memory=True)
    with first:
        url1 = first.url
    ports = set()
    for i in range(4):
        gateway = MockGateway(tmp_path / f"g{i}.db", memory=True)
        with gateway:
            ports.add(gateway.url)
            if gateway.url != url1:  # the kernel may hand out a port again, rarely
                with pytest.raises(requests.ConnectionError):
                    requests.post(f"{url1}/v1/messages", json=MESSAGE, timeout=30)
        assert gateway.log().requests == ()
    assert ports - {url1}, "every kept server was bound to the first one's port again"
