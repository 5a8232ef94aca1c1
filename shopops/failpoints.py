"""Labelled failpoints: where the crash harness stops, kills or traces the loop.

``failpoint("t6.request_leaving")`` marks a moment of the crash timeline
(``shopops_contract.labels``). Disarmed it costs one global lookup. Two ways to arm it, read from
the environment at import (a malformed spec is reported by the entry point before anything
runs, ``shopops.validators.check_environment``, and raised by the first failpoint — never
ignored silently):

``SHOPOPS_FAILPOINTS`` — local actions, in the grammar of fail-rs / gofail
(https://docs.rs/fail/latest/fail/ , https://github.com/etcd-io/gofail)::

    spec   := entry (";" entry)*
    entry  := label "=" chain
    chain  := term ("->" term)*
    term   := [count "*"] action
    action := "off" | "pause" | "kill" | "raise" | "sleep(" ms ")"

A term with a count applies to that many hits, then the chain moves on; a term without a
count applies to every later hit. ``t6.request_leaving=1*off->kill`` lets the first send
attempt through and SIGKILLs the process at the second. ``kill`` is ``SIGKILL`` to self,
``raise`` raises ``FailpointRaised``, ``sleep(ms)`` sleeps ms milliseconds, ``pause``
reports the hit to the controller and blocks until released or killed.

``SHOPOPS_FAILPOINT_CHANNEL`` — path of a Unix stream socket the controlling process
(the harness) listens on (``@name`` for a Linux abstract-namespace socket). With it set
every hit is reported, synchronously, as one JSON line ``{"label", "pid", "occurrence",
"action"}`` and the worker blocks for a one-line reply ``{"do": "continue" | "raise" |
"kill" | "sleep", "ms": int}``. The controller can therefore trace every hit, or SIGKILL
the worker from outside while it waits: the kill lands exactly at the labelled point.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from dataclasses import dataclass

from shopops.errors import FailpointRaised, FailpointSpecError, ShopOpsError
from shopops_contract import labels
from shopops_contract.limits import MAX_OCCURRENCE, MAX_SLEEP_MS

ENV_SPEC = "SHOPOPS_FAILPOINTS"
ENV_CHANNEL = "SHOPOPS_FAILPOINT_CHANNEL"
#: Bounds of a spec (``shopops.validators``): a sleep of at most a day, counts up to 1000.
MAX_COUNT = MAX_OCCURRENCE

_TERM = re.compile(
    r"^(?:(?P<count>[0-9]+)\*)?(?P<kind>off|pause|kill|raise|sleep)(?:\((?P<arg>[0-9]+)\))?$"
)


class FailpointChannelError(ShopOpsError):
    """The controller's channel could not be reached or answered nonsense (fields: ``path``,
    ``label``). The worker stops rather than run past a point it was told to report."""


@dataclass(frozen=True)
class Term:
    """One step of a chain: ``kind`` (off/pause/kill/raise/sleep), ``count`` (hits it applies
    to, ``None`` = all later hits), ``ms`` (for sleep, milliseconds)."""

    kind: str
    count: int | None = None
    ms: int = 0


def parse_spec(spec: str) -> dict[str, tuple[Term, ...]]:
    """Parse a ``SHOPOPS_FAILPOINTS`` value into ``{label: (Term, ...)}``.

    Raises:
        FailpointSpecError: empty entry, missing ``=``, unknown label (the message lists the
            catalogue), malformed term (the message lists the allowed actions), ``sleep``
            without a duration or another action with one, a count outside 1..``MAX_COUNT``,
            a sleep over ``MAX_SLEEP_MS`` (a day), or a term after an unbounded one (it could
            never apply).
    """
    result: dict[str, tuple[Term, ...]] = {}
    for raw in spec.split(";"):
        entry = raw.strip()
        if not entry:
            continue
        label, sep, chain = entry.partition("=")
        label = label.strip()

        def fail(reason: str, _entry: str = entry) -> FailpointSpecError:
            return FailpointSpecError(
                f"{ENV_SPEC}: bad entry {_entry!r}: {reason}", spec=spec, entry=_entry,
                reason=reason,
            )

        if not sep:
            raise fail("expected label=action")
        if label not in labels.BY_NAME:
            raise fail(f"unknown label {label!r}; known: {', '.join(labels.BY_NAME)}")
        if label in result:
            raise fail(f"label {label!r} given twice")
        terms: list[Term] = []
        for text in chain.split("->"):
            match = _TERM.match(text.strip())
            if not match:
                raise fail(
                    f"bad action {text.strip()!r}; allowed: off, pause, kill, raise, sleep(ms), "
                    "each optionally prefixed by a count N*"
                )
            kind, arg, count = match["kind"], match["arg"], match["count"]
            if (kind == "sleep") != (arg is not None):
                raise fail("sleep takes a duration in milliseconds, sleep(ms); others take none")
            if count is not None and not 1 <= int(count) <= MAX_COUNT:
                raise fail(f"a count must be from 1 to {MAX_COUNT}")
            if arg is not None and int(arg) > MAX_SLEEP_MS:
                raise fail(f"sleep({arg}): at most {MAX_SLEEP_MS} ms (a day)")
            if terms and terms[-1].count is None:
                raise fail(f"{text.strip()!r} follows an unbounded term and could never apply")
            terms.append(Term(kind, int(count) if count else None, int(arg or 0)))
        result[label] = tuple(terms)
    return result


class _Armed:
    """Per-process failpoint state: parsed spec, hit counters, the channel connection."""

    def __init__(self, spec: dict[str, tuple[Term, ...]], channel: str | None) -> None:
        self.spec = spec
        self.channel = channel
        self.hits: dict[str, int] = {}
        self.sock: socket.socket | None = None
        self.reader: object = None
        self.lock = threading.Lock()

    def local_action(self, label: str, occurrence: int) -> Term:
        seen = 0
        for term in self.spec.get(label, ()):
            if term.count is None or occurrence <= seen + term.count:
                return term
            seen += term.count
        return Term("off")

    def ask(self, label: str, occurrence: int, action: str) -> dict[str, object]:
        assert self.channel is not None
        try:
            if self.sock is None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                # "@name" is a Linux abstract socket (no file): see harness/services/channel.py
                address = "\0" + self.channel[1:] if self.channel.startswith("@") else self.channel
                self.sock.connect(address)
                self.reader = self.sock.makefile("rb")
            message = {"label": label, "pid": os.getpid(), "occurrence": occurrence,
                       "action": action}
            self.sock.sendall(json.dumps(message).encode() + b"\n")
            line = self.reader.readline()  # type: ignore[attr-defined]
            reply = json.loads(line) if line else None
        except (OSError, ValueError) as exc:
            raise FailpointChannelError(
                f"failpoint channel {self.channel} failed at {label}: {exc}",
                path=self.channel, label=label,
            ) from exc
        if not isinstance(reply, dict) or reply.get("do") not in _REPLIES:
            raise FailpointChannelError(
                f"failpoint channel {self.channel} gave no valid reply at {label}: {line!r}",
                path=self.channel, label=label,
            )
        return reply


_REPLIES = frozenset({"continue", "raise", "kill", "sleep"})
_armed: _Armed | None = None
#: A malformed spec found at import: raised at the first failpoint (never run past it
#: silently), and reported before anything runs by ``shopops.validators.check_environment``.
_spec_error: FailpointSpecError | None = None


def configure(spec: str | None = None, channel: str | None = None) -> None:
    """(Re)arm failpoints for this process, dropping counters and any channel connection.

    Called at import from the environment; a fork server calls it in each forked child so
    nothing of one execution leaks into the next.

    Args:
        spec: a ``SHOPOPS_FAILPOINTS`` value or ``None``/empty for no local actions.
        channel: a Unix socket path or ``None``.

    Raises:
        FailpointSpecError: see ``parse_spec``.
    """
    global _armed, _spec_error
    _spec_error = None
    parsed = parse_spec(spec) if spec else {}
    if _armed is not None and _armed.sock is not None:
        try:
            _armed.sock.close()
        except OSError:
            pass
    _armed = _Armed(parsed, channel) if (parsed or channel) else None


def configure_from_env() -> None:
    """``configure`` from ``SHOPOPS_FAILPOINTS`` and ``SHOPOPS_FAILPOINT_CHANNEL``.

    Raises:
        FailpointSpecError: see ``parse_spec``.
    """
    configure(os.environ.get(ENV_SPEC) or None, os.environ.get(ENV_CHANNEL) or None)


def _configure_at_import() -> None:
    """Arm from the environment at import without a traceback for a bad spec: the error is
    kept and raised by the first ``failpoint`` call (so nothing runs past a point it was
    told to act on), and entry points report it first (``check_environment``)."""
    global _spec_error
    try:
        configure_from_env()
    except FailpointSpecError as exc:
        configure(None, None)
        _spec_error = exc


def failpoint(label: str) -> None:
    """Mark the labelled point ``label``; act on it if armed.

    Args:
        label: a name from ``shopops_contract.labels.CATALOGUE``.

    Raises:
        ValueError: ``label`` is not in the catalogue (only checked while armed).
        FailpointRaised: the armed action is ``raise``.
        FailpointChannelError: the controller's channel failed.
        FailpointSpecError: ``SHOPOPS_FAILPOINTS`` was malformed at import.
    """
    if _spec_error is not None:
        raise _spec_error
    armed = _armed
    if armed is None:
        return
    if label not in labels.BY_NAME:
        raise ValueError(f"failpoint({label!r}): not in shopops_contract.labels.CATALOGUE")
    with armed.lock:
        occurrence = armed.hits.get(label, 0) + 1
        armed.hits[label] = occurrence
        term = armed.local_action(label, occurrence)
        kind, ms = term.kind, term.ms
        if armed.channel is not None:
            reply = armed.ask(label, occurrence, kind)
            if kind in ("off", "pause"):  # the controller decides, or releases a pause
                kind = str(reply["do"]).replace("continue", "off")
                ms = int(reply.get("ms", 0))  # type: ignore[call-overload]
        elif kind == "pause":
            while True:  # no controller: block until killed from outside
                signal.pause()
    _act(label, kind, ms)


def _act(label: str, kind: str, ms: int) -> None:
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "raise":
        raise FailpointRaised(f"failpoint {label} armed to raise", label=label)
    elif kind == "sleep":
        time.sleep(ms / 1000.0)


_configure_at_import()
