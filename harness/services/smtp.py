"""The mock gateway's SMTP dialect: an aiosmtpd server on loopback whose every ``DATA`` goes
through ``MockGateway.submit`` into the email ledger, like an HTTP request
(``harness.services.dialects``: the message, its key, the answer line).

The sender is the kernel's owner of the SMTP connection (``MockGateway.peer_of``), looked
up while the connection is open. Faults apply as over HTTP: ``latency`` before the answer,
``error`` a 451 answer and no delivery, ``drop_after_accept`` the connection closed with no
answer after the delivery, ``delay_after_accept`` the answer held.

Needs the ``email`` extra (``aiosmtpd``); without it ``SmtpFront`` raises ``RuntimeError``
naming the package.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from harness.model.kinds import FaultKind
from harness.services import dialects
from harness.services.ledger import EMAIL

__all__ = ["SmtpFront"]


class SmtpFront:
    """SMTP on ``host``, an ephemeral port, in front of ``gateway`` (``start``/``stop``):
    a ``harness.services.gateway.MockGateway`` (typed loosely: the gateway imports this
    module, not the other way round).

    Raises:
        RuntimeError: ``aiosmtpd`` is not installed (``pip install '.[email]'``).
    """

    def __init__(self, gateway: Any, host: str = "127.0.0.1") -> None:
        try:
            from aiosmtpd.controller import Controller
        except ImportError as exc:  # pragma: no cover - the test extra installs it
            raise RuntimeError("the gateway's smtp dialect needs aiosmtpd: "
                               "pip install 'shopops[email]'") from exc
        self._sock = socket.create_server((host, 0))
        self.host, self.port = host, self._sock.getsockname()[1]
        sock = self._sock

        class _Bound(Controller):
            def _create_server(self) -> Any:  # the socket bound above: no port race
                return self.loop.create_server(self._factory_invoker, sock=sock)

        # a larger message is answered 552 and never read whole, as HTTP's 413
        self._controller = _Bound(_Handler(gateway, self), hostname=host, port=self.port,
                                  data_size_limit=dialects.MAX_BODY)

    def start(self) -> SmtpFront:
        """Serve in aiosmtpd's thread; returns ``self`` once it answers."""
        self._controller.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._controller.stop(no_assert=True)
        self._sock.close()


class _Handler:
    def __init__(self, gateway: Any, front: SmtpFront) -> None:
        self.gateway, self.front = gateway, front

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        received = time.time()
        host, port = session.peer[0], session.peer[1]
        content = envelope.original_content or envelope.content or b""
        loop = asyncio.get_running_loop()

        def submit() -> Any:  # blocking: the kernel look-up, SQLite, the on_accepted hook
            peer = self.gateway.peer_of(port, self.front.port, host)
            message, problem, key = dialects.parse_smtp(content, list(envelope.rcpt_tos),
                                                        self.gateway.case_id)
            return self.gateway.submit(EMAIL, received=received, message=message,
                                       problem=problem, key=key, peer=peer,
                                       remote_port=port, raw=content)

        outcome = await loop.run_in_executor(None, submit)
        if outcome.fault is FaultKind.DROP_AFTER_ACCEPT:
            server.transport.abort()  # delivered; the answer is lost
            return "250 OK"
        if outcome.fault is FaultKind.DELAY_AFTER_ACCEPT:
            await loop.run_in_executor(None, self.gateway.stopping.wait, outcome.hold_s)
        return dialects.smtp_reply(outcome.status, outcome.reply)
