"""EmailGatewayClient against a mocked transport (one ``responses.RequestsMock`` per test)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest
import requests
import responses

from shopops import failpoints
from shopops.errors import FailpointRaised, GatewayRejected, GatewayUnavailable
from shopops.gateway_client import EmailGatewayClient, SendResult

BASE = "http://gateway.test"
URL = BASE + "/v1/messages"
MESSAGE = {"case_id": "case-O-1001", "to": "jordan@example.com", "subject": "Your order O-1001",
           "body": "Hi Jordan, ..."}
OK = {"delivery_id": "dlv-000001", "status": "delivered", "duplicate": False}


@pytest.fixture
def rsps() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


@pytest.fixture
def client() -> Iterator[EmailGatewayClient]:
    with EmailGatewayClient(BASE, backoff_s=0.0, worker_pid=4242) as gateway_client:
        yield gateway_client


@pytest.fixture
def armed() -> Iterator[None]:
    yield
    failpoints.configure(None, None)


def keys(mock: responses.RequestsMock) -> list[str | None]:
    return [call.request.headers.get("Idempotency-Key") for call in mock.calls]


def test_success_sends_key_pid_and_json(rsps: responses.RequestsMock,
                                        client: EmailGatewayClient) -> None:
    rsps.post(URL, json=OK, status=201)
    result = client.send(**MESSAGE, idempotency_key="case-O-1001:send:1")
    assert result == SendResult("dlv-000001", duplicate=False, attempts=1, status=201)
    request = rsps.calls[0].request
    assert request.headers["Idempotency-Key"] == "case-O-1001:send:1"
    assert request.headers["X-ShopOps-Worker-Pid"] == "4242"
    assert request.body is not None and b'"case_id": "case-O-1001"' in request.body


def test_5xx_then_success_retries_with_the_same_key(rsps: responses.RequestsMock,
                                                    client: EmailGatewayClient) -> None:
    rsps.post(URL, json={"error": "injected_fault"}, status=503)
    rsps.post(URL, json={**OK, "duplicate": True}, status=200)
    result = client.send(**MESSAGE, idempotency_key="k-1")
    assert (result.attempts, result.duplicate, result.status) == (2, True, 200)
    assert keys(rsps) == ["k-1", "k-1"]


@pytest.mark.parametrize("failure", [
    requests.ConnectTimeout("connect timed out"),
    requests.ReadTimeout("read timed out"),
    requests.ConnectionError(ConnectionResetError(104, "Connection reset by peer")),
    requests.exceptions.ChunkedEncodingError("reply cut off"),
], ids=["connect-timeout", "read-timeout", "reset", "cut-off"])
def test_transport_failure_then_success_reuses_the_key(
        rsps: responses.RequestsMock, client: EmailGatewayClient, failure: Exception) -> None:
    rsps.post(URL, body=failure)
    rsps.post(URL, json=OK, status=201)
    result = client.send(**MESSAGE, idempotency_key="k-2")
    assert result.attempts == 2
    assert keys(rsps) == ["k-2", "k-2"]


def test_timeouts_are_passed_as_connect_read_pair() -> None:
    seen: list[object] = []

    class Recording(requests.Session):
        def send(self, request: requests.PreparedRequest, **kwargs: object) -> requests.Response:
            seen.append(kwargs["timeout"])
            raise requests.ConnectTimeout("no")

    with Recording() as session:
        gateway_client = EmailGatewayClient(BASE, connect_timeout_s=0.5, read_timeout_s=7.0,
                                            max_attempts=1, session=session)
        with pytest.raises(GatewayUnavailable):
            gateway_client.send(**MESSAGE, idempotency_key="k")
    assert seen == [(0.5, 7.0)]


def test_exhausted_raises_unavailable_with_attempts(rsps: responses.RequestsMock) -> None:
    rsps.post(URL, json={"error": "boom"}, status=502)
    with EmailGatewayClient(BASE, max_attempts=4, backoff_s=0.0) as gateway_client:
        with pytest.raises(GatewayUnavailable) as info:
            gateway_client.send(**MESSAGE, idempotency_key="k-3")
    fields = info.value.fields
    assert fields["attempts"] == 4 == len(rsps.calls)
    assert "502" in fields["last_error"]
    assert set(keys(rsps)) == {"k-3"}
    assert pickle.loads(pickle.dumps(info.value)).fields == fields


def test_409_is_rejected_without_retry(rsps: responses.RequestsMock,
                                       client: EmailGatewayClient) -> None:
    refusal = {"error": "idempotency_key_reused", "idempotency_key": "k-4"}
    rsps.post(URL, json=refusal, status=409)
    rsps.post(URL, json=OK, status=201)
    with pytest.raises(GatewayRejected) as info:
        client.send(**MESSAGE, idempotency_key="k-4")
    assert info.value.fields == {"status": 409, "body": refusal}
    assert len(rsps.calls) == 1


def test_unreadable_2xx_is_retried_with_the_same_key(rsps: responses.RequestsMock,
                                                     client: EmailGatewayClient) -> None:
    rsps.post(URL, body="<html>proxy</html>", status=200)
    rsps.post(URL, json=OK, status=201)
    assert client.send(**MESSAGE, idempotency_key="k-5").attempts == 2
    assert keys(rsps) == ["k-5", "k-5"]


def test_keys_off_omits_the_header(rsps: responses.RequestsMock) -> None:
    rsps.post(URL, json=OK, status=201)
    with EmailGatewayClient(BASE, use_idempotency_keys=False) as gateway_client:
        gateway_client.send(**MESSAGE, idempotency_key="ignored")
    assert "Idempotency-Key" not in rsps.calls[0].request.headers


def test_keys_on_without_a_key_is_refused_before_sending(rsps: responses.RequestsMock,
                                                         client: EmailGatewayClient) -> None:
    with pytest.raises(ValueError, match="idempotency_key"):
        client.send(**MESSAGE, idempotency_key=None)
    assert len(rsps.calls) == 0


def test_request_leaving_failpoint_runs_before_every_attempt(
        rsps: responses.RequestsMock, client: EmailGatewayClient, armed: None) -> None:
    rsps.post(URL, json={"error": "boom"}, status=500)
    failpoints.configure("t6.request_leaving=1*off->raise")
    with pytest.raises(FailpointRaised):
        client.send(**MESSAGE, idempotency_key="k-6")
    assert len(rsps.calls) == 1  # the second attempt stopped at the failpoint, unsent


def test_reply_received_failpoint_runs_after_the_reply(
        rsps: responses.RequestsMock, client: EmailGatewayClient, armed: None) -> None:
    rsps.post(URL, json=OK, status=201)
    failpoints.configure("t6.reply_received=raise")
    with pytest.raises(FailpointRaised):
        client.send(**MESSAGE, idempotency_key="k-7")
    assert len(rsps.calls) == 1


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"read_timeout_s": 0},
                                    {"backoff_s": -1.0}])
def test_bad_configuration_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        EmailGatewayClient(BASE, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("base", "trusted"), [
    ("http://127.0.0.1:8080", False), ("http://127.0.0.2:1", False), ("http://localhost:9", False),
    ("http://[::1]:9", False), (BASE, True), ("http://10.0.0.1:80", True)])
def test_a_loopback_gateway_ignores_the_environments_proxy_settings(base: str,
                                                                   trusted: bool) -> None:
    with EmailGatewayClient(base) as gateway_client:
        assert gateway_client.session.trust_env is trusted


@pytest.mark.io  # a real gateway on loopback
def test_a_proxy_in_the_environment_does_not_stand_between_loop_and_gateway(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A real gateway on 127.0.0.1 and HTTP_PROXY naming a port nobody listens on: the send
    still reaches the gateway (requests would otherwise route it through the proxy)."""
    from harness.services.gateway import MockGateway

    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with MockGateway(tmp_path / "gw.db") as gateway, \
            EmailGatewayClient(gateway.url, backoff_s=0.0, max_attempts=1) as gateway_client:
        result = gateway_client.send(**MESSAGE, idempotency_key="k-1")
    assert result.delivery_id == "dlv-000001"
