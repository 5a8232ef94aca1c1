"""An app that sends with its own email client — the real ``resend`` SDK or the real
``smtplib`` — run under the harness with ``[gateway] dialect`` and nothing else: the
harness points the client at its gateway through the environment (``RESEND_API_URL``,
``SMTP_HOST``/``SMTP_PORT``), and the ledger judges the sends as it does the native API's.
The app is the shipped python starter with its ``requests.post`` to the native API replaced
by the client's own call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scenario_helpers import ROOT

from harness.model import CrashSchedule, ExecutionPlan, KillPoint, Verdict
from harness.plan.scenario import ScenarioError, load_scenario
from harness.run.execution import execute

pytest.importorskip("resend")
pytest.importorskip("aiosmtpd")

NATIVE_SEND = '''        reply = requests.post(f"{ctx.gateway_url}/v1/messages", timeout=(2, 5),
                              headers=headers, json={"case_id": ctx.case_id, **state["draft"]})
        reply.raise_for_status()
        state.update(email_sent=True, phase="completed",
                     delivery_id=reply.json()["delivery_id"])
'''
SENDS = {
    "resend": '''        import resend
        draft = state["draft"]
        sent = resend.Emails.send(
            {"from": "shop@example.com", "to": draft["to"], "subject": draft["subject"],
             "text": draft["body"]},
            {"idempotency_key": state["send_idempotency_key"]} if ctx.keys else None)
        state.update(email_sent=True, phase="completed", delivery_id=sent["id"])
''',
    "smtp": '''        import smtplib
        from email.message import EmailMessage
        draft, msg = state["draft"], EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = "shop@example.com", draft["to"], draft["subject"]
        if ctx.keys:
            msg["Resend-Idempotency-Key"] = state["send_idempotency_key"]
        msg.set_content(draft["body"])
        with smtplib.SMTP(os.environ["SMTP_HOST"], int(os.environ["SMTP_PORT"]), timeout=30) as s:
            s.ehlo()
            s.mail("shop@example.com")
            s.rcpt(draft["to"])
            code, reply = s.data(msg.as_bytes())  # "OK: queued as <id>"
        if code != 250:
            raise RuntimeError(f"SMTP {code} {reply!r}")
        state.update(email_sent=True, phase="completed", delivery_id=reply.split()[-1].decode())
''',
}


@pytest.fixture(scope="module")
def forked() -> Iterator[object]:
    """One fork server for the module's executions (the harness's side preloaded; the
    email client is imported by the app, after its environment is set)."""
    from harness.launch.fork import ForkLauncher

    with ForkLauncher(modules=("harness.targets.worker",), fallback=None,
                      preload=("harness.targets.worker", "harness.targets.boundaries")) as launcher:
        yield launcher


def _app(tmp_path: Path, dialect: str, keys: bool) -> Path:
    folder = tmp_path / f"app-{dialect}"
    folder.mkdir()
    loop = (ROOT / "examples" / "python_starter" / "loop.py").read_text(encoding="utf-8")
    assert NATIVE_SEND in loop  # the starter still sends this way
    (folder / "loop.py").write_text(loop.replace(NATIVE_SEND, SENDS[dialect]),
                                    encoding="utf-8")
    toml = tmp_path / f"{dialect}.toml"
    toml.write_text(f'name = "{dialect}-app"\n[sut]\nidempotency_keys = {str(keys).lower()}\n'
                    f'[gateway]\ndialect = "{dialect}"\n[target]\nkind = "python"\n'
                    f'folder = "{folder}"\nstart = "loop:start"\nresume = "loop:resume"\n'
                    'history = "loop:history"\n', encoding="utf-8")
    return toml


@pytest.mark.parametrize("dialect", ["resend", "smtp"])
@pytest.mark.parametrize("keys", [True, False])
def test_the_app_s_own_client_is_judged_by_the_ledger(tmp_path: Path, forked: object,
                                                      dialect: str, keys: bool) -> None:
    s = load_scenario(_app(tmp_path, dialect, keys))
    r = execute(ExecutionPlan(s, CrashSchedule((KillPoint("t6.gateway_accepted", 1),))),
                tmp_path / "x", launcher=forked, worker_timeout_s=120)
    # the kill at the delivery: with the key the replay is the same delivery, without it
    # a second one
    assert [k.label for k in r.evidence.kills] == ["t6.gateway_accepted"], r.reasons
    assert r.evidence.deliveries == (1 if keys else 2), r.reasons
    assert r.verdict is (Verdict.PASS if keys else Verdict.FAIL), r.reasons
    pids = {w.pid for w in r.evidence.workers}
    assert {q.worker_pid for q in r.evidence.gateway.requests} <= pids  # the kernel's sender


def test_an_unknown_dialect_is_refused_with_the_allowed_ones(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\n[gateway]\ndialect = "sendgrid"\n', encoding="utf-8")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "gateway.dialect" in str(err.value)
    assert "native, resend, smtp" in str(err.value)
