"""The kernel's answer to "who holds this loopback connection" (``harness.services.peers``): the
netlink ``sock_diag`` exact look-up agrees with ``/proc/net/tcp``, names the holding
process, knows nothing of a connection that never existed, and the ``/proc`` fallback
answers the same where netlink is refused."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from harness.services import peers


@pytest.fixture
def connection() -> Iterator[tuple[socket.socket, socket.socket, int, int]]:
    """A connected client and accepted server socket on 127.0.0.1: (client, server side,
    client port, server port)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        try:
            yield client, accepted, client.getsockname()[1], listener.getsockname()[1]
        finally:
            client.close()
            accepted.close()


def test_the_netlink_answer_is_the_client_sockets_uid_and_inode(connection) -> None:
    client, _, cport, sport = connection
    found = peers.socket_of(cport, sport)
    assert found == (os.geteuid(), os.fstat(client.fileno()).st_ino)
    assert found == peers._proc_socket_of(cport, sport)  # the two sources agree


def test_the_holder_is_this_process_and_a_foreign_pid_list_finds_none(connection) -> None:
    _, _, cport, sport = connection
    assert peers.tcp_peer(cport, sport, [os.getpid()]) == peers.Peer(os.geteuid(), os.getpid())
    assert peers.tcp_peer(cport, sport, [1]).pid is None  # init does not hold it


def test_a_connection_that_does_not_exist_has_no_peer(connection) -> None:
    _, _, cport, sport = connection
    assert peers.socket_of(cport, sport, server_host="127.0.0.2") is None
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        free = unused.getsockname()[1]
    assert peers.tcp_peer(free, sport, [os.getpid()]) is None


def test_another_loopback_address_is_looked_up_by_its_own_four_tuple() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.3", 0))
        listener.listen()
        with socket.socket() as client:
            client.bind(("127.0.0.2", 0))
            client.connect(listener.getsockname())
            accepted, _ = listener.accept()
            with accepted:
                cport, sport = client.getsockname()[1], listener.getsockname()[1]
                assert peers.socket_of(cport, sport, "127.0.0.2", "127.0.0.3") == (
                    os.geteuid(), os.fstat(client.fileno()).st_ino)
                assert peers.socket_of(cport, sport) is None  # not on 127.0.0.1


def test_where_netlink_is_refused_proc_answers_the_same(connection, monkeypatch) -> None:
    client, _, cport, sport = connection
    real = socket.socket

    def no_netlink(family: int = socket.AF_INET, *args: object, **kwargs: object):
        if family == socket.AF_NETLINK:
            raise PermissionError(1, "netlink refused")
        return real(family, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(peers.socket, "socket", no_netlink)
    assert peers.socket_of(cport, sport) == (os.geteuid(), os.fstat(client.fileno()).st_ino)


def test_an_address_netlink_cannot_be_asked_for_falls_back_to_proc(connection) -> None:
    _, _, cport, sport = connection
    assert peers.socket_of(cport, sport, "::1") == peers._proc_socket_of(cport, sport)
