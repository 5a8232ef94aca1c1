"""Who is at the other end of a loopback TCP connection, from the kernel (Linux ``/proc``).

The mock gateway must not take a worker's word for who sent a request (a header is
whatever the sender writes). The kernel knows: ``/proc/net/tcp`` (``proc(5)``) lists every
IPv4 socket with its local and remote address, the uid that created it and its inode; the
process holding it has ``socket:[INODE]`` among its ``/proc/PID/fd`` links. This is what
``ss -tp`` and psutil's ``net_connections`` read; done here for one connection so that a
request costs one read of ``/proc/net/tcp`` and a scan of a few processes' descriptors.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    """The owner of a connection: ``uid`` (of the socket, from ``/proc/net/tcp``) and
    ``pid`` (a process holding it; ``None`` if none of the candidates does)."""

    uid: int
    pid: int | None


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1], 16)


def socket_of(client_port: int, server_port: int) -> tuple[int, int] | None:
    """``(uid, inode)`` of the client socket ``127.0.0.1:client_port`` connected to
    ``server_port``, from ``/proc/net/tcp``; ``None`` if there is no such socket."""
    try:
        with open("/proc/net/tcp", encoding="ascii") as table:
            next(table)
            for line in table:
                fields = line.split()
                if (len(fields) >= 10 and _port(fields[1]) == client_port
                        and _port(fields[2]) == server_port):
                    return int(fields[7]), int(fields[9])
    except OSError:
        return None
    return None


def holders(inode: int, candidates: Iterable[int] | None = None) -> list[int]:
    """Pids (ascending) among ``candidates`` (default: every process) that hold the socket
    ``inode`` open. Needs the privilege to read their ``/proc/PID/fd`` (root, or the same
    user)."""
    target = f"socket:[{inode}]"
    if candidates is None:
        candidates = (int(name) for name in os.listdir("/proc") if name.isdigit())
    found = []
    for pid in candidates:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    found.append(pid)
                    break
            except OSError:
                continue
    return sorted(found)


def tcp_peer(client_port: int, server_port: int, first: Iterable[int] = (),
             then: Callable[[], Iterable[int] | None] | None = None) -> Peer | None:
    """The owner of the loopback connection from ``client_port`` to ``server_port``:
    its uid and the lowest pid holding it (a forked child may hold it too), looked for
    among ``first`` (cheap: the workers the harness started), then, if none holds it,
    among ``then()`` (``None`` from it: every process; ``then`` omitted: nowhere else).
    ``None`` if the kernel does not list the connection (it is already closed)."""
    found = socket_of(client_port, server_port)
    if found is None:
        return None
    uid, inode = found
    pids = holders(inode, first)
    if not pids and then is not None:
        pids = holders(inode, then())
    return Peer(uid, pids[0] if pids else None)
