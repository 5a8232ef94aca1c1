"""The mock gateway's real email dialects (``harness.services.dialects``): the real
``resend`` SDK and the real ``smtplib`` against a real gateway on 127.0.0.1, and the same
ledger evidence as the native API (request, delivery, key, body digest, the kernel's
sender)."""

from __future__ import annotations

import os
import signal
import smtplib
import subprocess
import sys
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest
import requests

from harness.services.gateway import MockGateway, read_log
from harness.services.ledger import sha256

resend = pytest.importorskip("resend")

CASE = "case-O-1001"
PARAMS = {"from": "Shop <shop@example.com>", "to": ["jordan@example.com"],
          "subject": "Your order O-1001", "text": "Hi Jordan, your refund is on its way."}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[MockGateway]:
    gw = MockGateway(tmp_path / "gateway.db")
    gw.case_id = CASE
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def sdk(gateway: MockGateway, monkeypatch: pytest.MonkeyPatch) -> object:
    """The real SDK, its base URL pointed at the gateway (what ``RESEND_API_URL`` sets)."""
    monkeypatch.setattr(resend, "api_url", gateway.url)
    monkeypatch.setattr(resend, "api_key", "re_test_harness")
    return resend


def test_resend_sdk_replay_with_the_same_key_is_one_delivery(gateway: MockGateway,
                                                             sdk: object) -> None:
    first = resend.Emails.send(PARAMS, {"idempotency_key": "welcome/O-1001"})
    again = resend.Emails.send(PARAMS, {"idempotency_key": "welcome/O-1001"})
    assert first["id"] == again["id"]
    log = gateway.log()
    assert len(log.deliveries) == 1
    assert [r.duplicate for r in log.requests] == [False, True]
    d = log.deliveries[0]
    assert (d.case_id, d.to, d.subject, d.body, d.idempotency_key) == (
        CASE, "jordan@example.com", PARAMS["subject"], PARAMS["text"], "welcome/O-1001")
    assert d.delivery_id == first["id"]
    # the same evidence as the native API: digest of the normalised message, the sender
    # the kernel names (this process), the logged key
    assert d.body_sha256 == sha256({"case_id": CASE, "to": d.to, "subject": d.subject,
                                    "body": d.body})
    assert {r.worker_pid for r in log.requests} == {os.getpid()}
    assert {r.idempotency_key for r in log.requests} == {"welcome/O-1001"}


def test_resend_sdk_a_different_key_or_none_is_another_delivery(gateway: MockGateway,
                                                                sdk: object) -> None:
    a = resend.Emails.send(PARAMS, {"idempotency_key": "k-1"})
    b = resend.Emails.send(PARAMS, {"idempotency_key": "k-2"})
    c = resend.Emails.send(PARAMS)
    assert len({a["id"], b["id"], c["id"]}) == 3
    assert len(gateway.log().deliveries) == 3


def test_resend_sdk_errors_are_resends_own(gateway: MockGateway, sdk: object) -> None:
    resend.Emails.send(PARAMS, {"idempotency_key": "k"})
    with pytest.raises(resend.exceptions.ResendError) as reused:
        resend.Emails.send({**PARAMS, "text": "another body"}, {"idempotency_key": "k"})
    assert reused.value.code in (409, "409")
    with pytest.raises(resend.exceptions.MissingRequiredFieldsError):
        resend.Emails.send({"from": "a@example.com", "to": "b@example.com"})  # no subject
    log = gateway.log()
    assert len(log.deliveries) == 1
    assert [r.status for r in log.requests] == [201, 409, 400]


def test_resend_wire_shape(gateway: MockGateway) -> None:
    """The raw answer: 200 ``{"id"}`` for a send, ``{"statusCode", "name", "message"}``
    for an error, as Resend's API reference shows."""
    ok = requests.post(gateway.url + "/emails", json=PARAMS, timeout=5,
                       headers={"Idempotency-Key": "x"})
    assert (ok.status_code, set(ok.json())) == (200, {"id"})
    bad = requests.post(gateway.url + "/emails", json={**PARAMS, "to": 3}, timeout=5)
    assert bad.status_code == 422
    assert bad.json()["name"] == "validation_error" and "to" in bad.json()["message"]


def test_a_gateway_of_no_case_takes_the_case_tag(tmp_path: Path) -> None:
    with MockGateway(tmp_path / "g.db") as gw:
        untagged = requests.post(gw.url + "/emails", json=PARAMS, timeout=5)
        tagged = requests.post(gw.url + "/emails", timeout=5, json={
            **PARAMS, "tags": [{"name": "case_id", "value": "case-X"}]})
        assert (untagged.status_code, tagged.status_code) == (422, 200)
        assert [d.case_id for d in gw.log().deliveries] == ["case-X"]


def test_resend_sdk_in_another_process_is_pointed_by_its_environment_alone(
        gateway: MockGateway) -> None:
    """An app that only does ``import resend; resend.Emails.send(...)`` reaches the gateway
    through ``RESEND_API_URL``/``RESEND_API_KEY`` (what the harness sets for a worker); the
    ledger names that process as the sender, by the kernel."""
    app = ("import resend, sys\n"
           f"params = {PARAMS!r}\n"
           "for _ in range(2):\n"
           "    print(resend.Emails.send(params, {'idempotency_key': 'same'})['id'])\n")
    env = {**os.environ, "RESEND_API_URL": gateway.url, "RESEND_API_KEY": "re_test"}
    proc = subprocess.Popen([sys.executable, "-c", app], env=env, stdout=subprocess.PIPE,
                            text=True)
    gateway.candidates = lambda: [proc.pid]
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    ids = out.split()
    assert len(ids) == 2 and ids[0] == ids[1]
    log = read_log(gateway.db_path)
    assert len(log.deliveries) == 1
    assert {r.worker_pid for r in log.requests} == {proc.pid}


# -- SMTP ---------------------------------------------------------------------------------
pytest.importorskip("aiosmtpd")


@pytest.fixture
def smtp_gateway(tmp_path: Path) -> Iterator[MockGateway]:
    gw = MockGateway(tmp_path / "gateway.db", smtp=True)
    gw.case_id = CASE
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def _mail(**headers: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "shop@example.com", "jordan@example.com", "Hi"
    for name, value in headers.items():
        msg[name.replace("_", "-")] = value
    msg.set_content("your refund is on its way")
    return msg


def _send(gw: MockGateway, msg: EmailMessage) -> None:
    with smtplib.SMTP("127.0.0.1", gw.smtp_port, timeout=30) as smtp:
        smtp.send_message(msg)


def test_smtp_replay_with_resends_key_header_is_one_delivery(smtp_gateway: MockGateway
                                                             ) -> None:
    for _ in range(2):
        _send(smtp_gateway, _mail(Resend_Idempotency_Key="welcome/O-1001"))
    log = smtp_gateway.log()
    assert len(log.deliveries) == 1
    assert [(r.status, r.duplicate) for r in log.requests] == [(201, False), (200, True)]
    d = log.deliveries[0]
    assert (d.case_id, d.to, d.subject, d.idempotency_key) == (
        CASE, "jordan@example.com", "Hi", "welcome/O-1001")
    assert d.body == "your refund is on its way"
    assert d.body_sha256 == sha256({"case_id": CASE, "to": d.to, "subject": d.subject,
                                    "body": d.body})
    assert {r.worker_pid for r in log.requests} == {os.getpid()}


def test_smtp_message_id_is_the_key_and_another_is_another_delivery(
        smtp_gateway: MockGateway) -> None:
    _send(smtp_gateway, _mail(Message_ID="<a@example.com>"))
    _send(smtp_gateway, _mail(Message_ID="<a@example.com>"))
    _send(smtp_gateway, _mail(Message_ID="<b@example.com>"))
    log = smtp_gateway.log()
    assert [d.idempotency_key for d in log.deliveries] == ["<a@example.com>",
                                                           "<b@example.com>"]
    with pytest.raises(smtplib.SMTPDataError) as reused:  # same key, another message
        msg = _mail(Message_ID="<a@example.com>")
        msg.replace_header("Subject", "changed")
        _send(smtp_gateway, msg)
    assert reused.value.smtp_code == 554
    assert len(smtp_gateway.log().deliveries) == 2


def test_smtp_injected_error_delivers_nothing(smtp_gateway: MockGateway) -> None:
    smtp_gateway.set_faults([{"kind": "error", "status": 503}])
    with pytest.raises(smtplib.SMTPDataError) as refused:
        _send(smtp_gateway, _mail(Message_ID="<c@example.com>"))
    assert refused.value.smtp_code == 451
    _send(smtp_gateway, _mail(Message_ID="<c@example.com>"))  # the retry is delivered
    log = smtp_gateway.log()
    assert [r.status for r in log.requests] == [503, 201]
    assert len(log.deliveries) == 1


def test_serve_with_smtp_prints_both_addresses(tmp_path: Path) -> None:
    """``shopops-chaos gateway serve --smtp``: the SMTP address on a second line; a message
    names its case with ``X-ShopOps-Case`` (the served gateway has no one case)."""
    db = tmp_path / "gateway.db"
    argv = [sys.executable, "-m", "harness", "gateway", "serve", "--db", str(db), "--smtp"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("gateway listening on http://")
            line = proc.stdout.readline()
            assert line.startswith("smtp listening on 127.0.0.1:"), line
            port = int(line.rsplit(":", 1)[1])
            with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
                smtp.send_message(_mail(X_ShopOps_Case="case-S", Message_ID="<s@x>"))
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [(d.case_id, d.idempotency_key) for d in read_log(db).deliveries] == [
        ("case-S", "<s@x>")]


def test_smtp_drop_after_accept_delivers_and_loses_the_answer(smtp_gateway: MockGateway
                                                              ) -> None:
    """The window the harness's own API has too: delivered, the answer lost; a retry with
    the same key is the same delivery."""
    smtp_gateway.set_faults([{"kind": "drop_after_accept"}])
    with pytest.raises(smtplib.SMTPServerDisconnected):
        _send(smtp_gateway, _mail(Resend_Idempotency_Key="k-drop"))
    assert len(smtp_gateway.log().deliveries) == 1
    _send(smtp_gateway, _mail(Resend_Idempotency_Key="k-drop"))
    log = smtp_gateway.log()
    assert len(log.deliveries) == 1
    assert [(r.status, r.fault) for r in log.requests] == [(201, "drop_after_accept"),
                                                           (200, None)]


def test_no_fork_server_preloads_the_resend_sdk() -> None:
    """``resend`` reads ``RESEND_API_URL`` at its first import: a preloaded copy would keep
    the fork server's (unset) base URL in every worker (docs/contract.md, "Email APIs")."""
    from harness.forkserver.worker import FRAMEWORKS, PRELOAD, TARGET_PRELOAD

    preloaded = [*PRELOAD, *TARGET_PRELOAD, *(m for ms in FRAMEWORKS.values() for m in ms)]
    assert not [m for m in preloaded if m.split(".")[0] == "resend"]


def _resend_raw(gw: MockGateway, body: bytes, key: str | None = None) -> tuple[int, str, str]:
    """``(status, content type, text)`` of a raw ``POST /emails`` (http.client: requests
    refuses a header with a control character, which is what is being tested)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]), timeout=30)
    try:
        conn.putrequest("POST", "/emails")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        if key is not None:
            conn.putheader("Idempotency-Key", key)
        conn.endheaders(body)
        reply = conn.getresponse()
        return reply.status, reply.getheader("Content-Type", ""), reply.read().decode()
    finally:
        conn.close()


def test_resend_a_deeply_nested_body_is_a_422_not_a_500(gateway: MockGateway) -> None:
    """~200 KB of ``[[[…]]]`` (under the 1 MiB cap) made ``json.loads`` raise
    ``RecursionError``: an HTML 500. Refused like any bad body, logged, nothing delivered."""
    import json

    for body in (b"[" * 100_000 + b"]" * 100_000,
                 json.dumps({**PARAMS, "tags": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]
                                                                   ]]]]]]]]]]]]]]]]]]]]]]]]}
                            ).encode()):
        status, kind, text = _resend_raw(gateway, body)
        assert (status, kind) == (422, "application/json"), text
        assert "nested more than" in json.loads(text)["message"]
    log = gateway.log()
    assert len(log.requests) == 2 and log.deliveries == ()


@pytest.mark.parametrize("key", ["welcome\x00O-1001", "welcome\x01", "tab\there"])
def test_resend_a_key_with_a_control_character_is_refused(gateway: MockGateway,
                                                          key: str) -> None:
    import json

    status, _, text = _resend_raw(gateway, json.dumps(PARAMS).encode(), key=key)
    assert status == 422, text
    assert "Idempotency-Key" in json.loads(text)["message"]
    assert gateway.log().deliveries == ()


def test_resend_two_case_tags_of_different_values_are_refused(tmp_path: Path) -> None:
    import json

    gw = MockGateway(tmp_path / "gateway.db").start()  # no case of its own: the tag decides
    try:
        tags = [{"name": "case_id", "value": "case-A"}, {"name": "case_id", "value": "case-B"}]
        status, _, text = _resend_raw(gw, json.dumps({**PARAMS, "tags": tags}).encode())
        assert status == 422, text
        assert "case_id" in json.loads(text)["message"]
        same = [{"name": "case_id", "value": "case-A"}] * 2  # the same case twice: one case
        status, _, text = _resend_raw(gw, json.dumps({**PARAMS, "tags": same}).encode())
        assert status == 200, text
        assert [d.case_id for d in gw.log().deliveries] == ["case-A"]
    finally:
        gw.stop()


def test_smtp_a_message_over_the_http_cap_is_552(smtp_gateway: MockGateway) -> None:
    """HTTP takes at most 1 MiB; SMTP took 3 MB. Now the same cap, answered 552."""
    from harness.services.gateway import MAX_BODY

    msg = _mail(Resend_Idempotency_Key="big")
    msg.set_content(("x" * 75 + "\n") * (3 * MAX_BODY // 76))
    with pytest.raises(smtplib.SMTPException) as caught:
        _send(smtp_gateway, msg)
    assert "552" in str(caught.value)
    assert smtp_gateway.log().deliveries == ()
    _send(smtp_gateway, _mail(Resend_Idempotency_Key="small"))  # still serving
    assert len(smtp_gateway.log().deliveries) == 1


def test_smtp_a_key_with_a_control_character_is_refused(smtp_gateway: MockGateway) -> None:
    raw = (b"From: shop@example.com\r\nTo: jordan@example.com\r\nSubject: Hi\r\n"
           b"Resend-Idempotency-Key: a\x01b\r\n\r\nyour refund\r\n")
    with smtplib.SMTP("127.0.0.1", smtp_gateway.smtp_port, timeout=30) as smtp:
        code, reply = smtp.data(raw) if smtp.ehlo() and smtp.mail("shop@example.com")[0] == 250 \
            and smtp.rcpt("jordan@example.com")[0] == 250 else (0, b"")
    assert 500 <= code < 600 and b"Idempotency-Key" in reply, (code, reply)
    assert smtp_gateway.log().deliveries == ()
