"""The harness end of the failpoint channel (``shopops.failpoints``, ``SHOPOPS_FAILPOINT_CHANNEL``).

A Unix stream socket served by the harness process's service loop
(``harness.services.lines``): each worker connects once and, at every labelled point, sends
one JSON line and blocks for the reply. The ``on_hit`` callback decides, in the loop's
thread: it returns a reply (the worker continues), ``None`` after it has SIGKILLed the
worker, which then never reads a reply, or a call that makes the reply and may wait (a
worker held at the point; a story act there), which runs in a thread of its own. The
socket is in Linux's abstract namespace (``unix(7)``): no file exists, so nothing is left
behind even when the harness itself is SIGKILLed. Its name travels in the environment as
``@name``. A sealed execution's is a socket file in a folder only its uid (and root) can
enter instead: an abstract name is listed in ``/proc/net/unix`` and anyone may connect to
it.

Who sent a hit is the kernel's word, not the message's: the connection's peer credentials
(``SO_PEERCRED``, ``unix(7)``: the pid and uid of the process that connected) are the hit's
``pid`` and ``uid``; the pid the message claims is kept as ``claimed_pid`` so that the
controller can refuse a hit made in another process's name and record it as tampering.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.services.lines import (
    Answer,
    Deferred,
    LineConnection,
    LineServer,
    peer_credentials,
)
from harness.services.serving import open_socket, socket_address

__all__ = ["MAX_LINE", "FailpointChannel", "Hit", "HitAnswer", "HitReply", "OnHit",
           "peer_credentials"]

#: The longest hit line the channel reads, in bytes (a hit is ~100): a worker that sends a
#: longer one without a newline is dropped instead of buffered in the harness's memory.
MAX_LINE = 4096


@dataclass(frozen=True)
class Hit:
    """A failpoint hit: ``label``, ``pid`` (the sender, from ``SO_PEERCRED``; in a hit made
    by hand, whatever the caller says), ``occurrence`` (within that process, from 1), the
    local ``action`` its spec chose (``off`` when none), ``claimed_pid`` (the pid the
    message named; ``None``: the same as ``pid``) and ``uid`` (the sender's, from the
    kernel; ``None`` when not known)."""

    label: str
    pid: int
    occurrence: int
    action: str
    claimed_pid: int | None = None
    uid: int | None = None

    @property
    def forged(self) -> bool:
        """The message named another process than the one that sent it."""
        return self.claimed_pid is not None and self.claimed_pid != self.pid


#: A hit's reply: ``{"do": "continue"}``-like, or ``None`` when the worker was killed there.
HitReply = dict[str, object] | None
#: What ``on_hit`` gives: the reply, or a call that makes it and may wait (run off the loop).
HitAnswer = HitReply | Callable[[], HitReply]
OnHit = Callable[[Hit], HitAnswer]


class _Channel:
    """The channel's ``LineHandler``: a hit per line, answered by ``on_hit``."""

    def __init__(self, on_hit: OnHit, on_tamper: Callable[[str], None] | None) -> None:
        self.on_hit = on_hit
        self.on_tamper = on_tamper

    def admit(self, conn: LineConnection) -> bool:
        return True

    def line(self, conn: LineConnection, line: bytes) -> Answer | Deferred:
        try:
            data = json.loads(line)
            claimed = int(data["pid"])
            hit = Hit(str(data["label"]), conn.pid, int(data["occurrence"]),
                      str(data.get("action", "off")),
                      claimed_pid=None if claimed == conn.pid else claimed, uid=conn.uid)
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            # a malformed line (an occurrence of 1e999, JSON nested past the parser's
            # depth): drop the connection; the worker fails loudly
            return _DROP
        reply = self.on_hit(hit)
        if callable(reply):
            wait = reply
            return lambda: _answer(wait())
        return _answer(reply)

    def too_long(self, conn: LineConnection, size: int) -> None:
        if self.on_tamper is not None:  # dropped, never buffered whole
            self.on_tamper(f"pid {conn.pid} (uid {conn.uid}) sent a failpoint-channel line "
                           f"over {MAX_LINE} bytes: dropped")

    def closed(self, conn: LineConnection) -> None:
        pass


#: The answer that closes the connection unanswered.
_DROP = Answer(close=True)


def _answer(reply: HitReply) -> Answer:
    """``None``: the worker was killed at this point (no reply; the connection closes)."""
    return _DROP if reply is None else Answer(json.dumps(reply).encode() + b"\n")


class FailpointChannel:
    """Listen for failpoint hits; ``path`` goes into the worker's
    ``SHOPOPS_FAILPOINT_CHANNEL``.

    Args:
        on_hit: called in the service loop's thread for every hit; returns the reply
            dict (``{"do": "continue"}``), ``None`` if it killed the worker, or a call that
            returns one of those and may wait (run in a thread of its own; the loop must
            never wait).
        on_tamper: called with one line when a sender sends what no hit is (a line over
            ``MAX_LINE`` bytes): the harness records it as tampering.
        folder: a sealed execution's ``Sandbox.shared``: the socket is a file there, which
            only that execution's uid can reach (``harness.services.serving.socket_address``);
            ``None``: an abstract socket.
    """

    def __init__(self, on_hit: OnHit, on_tamper: Callable[[str], None] | None = None,
                 folder: Path | None = None) -> None:
        self.path, bind = socket_address("shopops-ctl", folder)
        self._server = LineServer(bind, _Channel(on_hit, on_tamper), name="failpoint-channel",
                                  max_line=MAX_LINE)
        open_socket(bind, folder)

    def close(self) -> None:
        """Stop serving (at once, not at a poll): every connection is closed. Idempotent."""
        self._server.stop()

    def __enter__(self) -> FailpointChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
