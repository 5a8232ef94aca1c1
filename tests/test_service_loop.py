"""The harness's service loop (``harness.services.serving.ServiceLoop``): what it watches
it serves, what it stops watching it leaves, and looking up whether it watches a socket
costs no ``repr`` of it (issue 27: the ``KeyError`` that ``selectors.get_key`` raises
formats the socket, two system calls and two enum conversions a new connection)."""

from __future__ import annotations

import socket
import threading

import pytest

from harness.services.serving import the_loop


class _Sock(socket.socket):
    """A socket that records every ``repr`` taken of it."""

    reprs = 0

    def __repr__(self) -> str:
        type(self).reprs += 1
        return super().__repr__()


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    watched = _Sock(fileno=a.detach())
    _Sock.reprs = 0
    yield watched, b
    watched.close()
    b.close()


def test_a_watched_socket_is_served_until_unwatched_and_again_once_rewatched(pair) -> None:
    watched, other = pair
    loop = the_loop()
    got: list[bytes] = []
    arrived = threading.Event()

    def ready(mask: int) -> None:
        got.append(watched.recv(100))
        arrived.set()

    loop.run(lambda: loop.watch(watched, 1, ready))  # selectors.EVENT_READ
    other.send(b"one")
    assert arrived.wait(30.0)
    assert got == [b"one"]

    loop.run(lambda: loop.watch(watched, 0, ready))  # no longer watched
    arrived.clear()
    other.send(b"two")
    loop.run(lambda: None)  # a whole turn of the loop went by with the data waiting
    assert not arrived.is_set()

    loop.run(lambda: loop.watch(watched, 1, ready))  # the same object, registered again
    assert arrived.wait(30.0)
    assert got == [b"one", b"two"]
    loop.run(lambda: loop.watch(watched, 0, ready))
    assert _Sock.reprs == 0, "watching a socket formatted its repr"


def test_watching_twice_with_the_same_events_changes_nothing(pair) -> None:
    watched, other = pair
    loop = the_loop()
    calls: list[int] = []
    arrived = threading.Event()

    def ready(mask: int) -> None:
        calls.append(len(watched.recv(100)))
        arrived.set()

    loop.run(lambda: (loop.watch(watched, 1, ready), loop.watch(watched, 1, ready)))
    other.send(b"abc")
    assert arrived.wait(30.0)
    loop.run(lambda: loop.watch(watched, 0, ready))
    assert calls == [3]
    assert _Sock.reprs == 0
