"""Who is at the other end of a loopback TCP connection, from the kernel (Linux).

The mock gateway must not take a worker's word for who sent a request (a header is
whatever the sender writes). The kernel knows the uid that created the client socket and
its inode; the process holding it has ``socket:[INODE]`` among its ``/proc/PID/fd`` links.

The socket is looked up by its four-tuple with one netlink ``sock_diag`` request
(``sock_diag(7)``: ``SOCK_DIAG_BY_FAMILY`` without ``NLM_F_DUMP`` is an exact look-up in the
kernel's hash, the interface ``ss`` uses), so a request costs the same however many
sockets the machine has. ``/proc/net/tcp`` (``proc(5)``), the fallback where netlink is
refused, lists every IPv4 socket and grows with the ``TIME_WAIT`` entries a long run leaves
behind (a read took ~14 ms at 300 lines on this machine). Then a scan of a few processes'
descriptors finds the holder.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["Peer", "holders", "socket_of", "tcp_peer"]


@dataclass(frozen=True)
class Peer:
    """The owner of a connection: ``uid`` (of the socket, from ``/proc/net/tcp``) and
    ``pid`` (a process holding it; ``None`` if none of the candidates does)."""

    uid: int
    pid: int | None


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1], 16)


_NETLINK_SOCK_DIAG = 4  # linux/netlink.h
_SOCK_DIAG_BY_FAMILY = 20  # linux/sock_diag.h
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NLMSG = struct.Struct("=IHHII")  # struct nlmsghdr
# struct inet_diag_req_v2: family, protocol, ext, pad, states; then struct inet_diag_sockid:
# sport, dport (network order), src[4], dst[4] (network order), if, cookie[2]
_REQ = struct.Struct("=BBBxI")
_SOCKID = struct.Struct("!HH16s16s")
_TAIL = struct.Struct("=III")
_INET_DIAG_NOCOOKIE = 0xFFFFFFFF
# struct inet_diag_msg: family, state, timer, retrans, sockid (48 bytes), expires, rqueue,
# wqueue, uid, inode
_MSG_UID_INODE = struct.Struct("=II")
_MSG_UID_OFFSET = 4 + 48 + 12


class _Refused(Exception):
    """Netlink cannot answer here (no such family, not permitted): use ``/proc``."""


def _diag(client: tuple[str, int], server: tuple[str, int]) -> tuple[int, int] | None:
    """``(uid, inode)`` of the IPv4 TCP socket bound to ``client`` and connected to
    ``server``, by one exact ``sock_diag`` look-up; ``None`` if the kernel has no such
    socket. Raises ``_Refused`` when netlink cannot be used."""
    try:
        sockid = _SOCKID.pack(client[1], server[1],
                              socket.inet_aton(client[0]).ljust(16, b"\0"),
                              socket.inet_aton(server[0]).ljust(16, b"\0"))
    except (OSError, struct.error) as exc:  # not an IPv4 address or port
        raise _Refused(str(exc)) from exc
    body = (_REQ.pack(socket.AF_INET, socket.IPPROTO_TCP, 0, 0xFFFFFFFF) + sockid
            + _TAIL.pack(0, _INET_DIAG_NOCOOKIE, _INET_DIAG_NOCOOKIE))
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(5.0)
            nl.sendto(_NLMSG.pack(_NLMSG.size + len(body), _SOCK_DIAG_BY_FAMILY,
                                  _NLM_F_REQUEST, 1, 0) + body, (0, 0))
            reply = nl.recv(8192)
    except OSError as exc:
        raise _Refused(str(exc)) from exc
    if len(reply) < _NLMSG.size:
        raise _Refused("short netlink reply")
    kind = _NLMSG.unpack_from(reply)[1]
    if kind == _NLMSG_ERROR:
        code = -struct.unpack_from("=i", reply, _NLMSG.size)[0]
        if code == errno.ENOENT:
            return None
        raise _Refused(os.strerror(code))
    if kind != _SOCK_DIAG_BY_FAMILY or len(reply) < _NLMSG.size + _MSG_UID_OFFSET + 8:
        raise _Refused(f"unexpected netlink message type {kind}")
    uid, inode = _MSG_UID_INODE.unpack_from(reply, _NLMSG.size + _MSG_UID_OFFSET)
    return uid, inode


def socket_of(client_port: int, server_port: int, host: str = "127.0.0.1",
              server_host: str | None = None) -> tuple[int, int] | None:
    """``(uid, inode)`` of the client socket ``host:client_port`` connected to
    ``server_host:server_port`` (default the same host), from the kernel (``sock_diag``,
    else ``/proc/net/tcp``); ``None`` if there is no such socket (one already closed
    has uid and inode 0)."""
    try:
        found = _diag((host, client_port), (server_host or host, server_port))
    except _Refused:
        return _proc_socket_of(client_port, server_port)
    return found


def _proc_socket_of(client_port: int, server_port: int) -> tuple[int, int] | None:
    """``socket_of`` from ``/proc/net/tcp`` (ports only)."""
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
             then: Callable[[], Iterable[int] | None] | None = None, *,
             host: str = "127.0.0.1", server_host: str | None = None) -> Peer | None:
    """The owner of the loopback connection from ``client_port`` to ``server_port``:
    its uid and the lowest pid holding it (a forked child may hold it too), looked for
    among ``first`` (cheap: the workers the harness started), then, if none holds it,
    among ``then()`` (``None`` from it: every process; ``then`` omitted: nowhere else).
    ``None`` if the kernel does not list the connection (it is already closed).
    ``host``/``server_host``: the client's and the server's address (loopback)."""
    found = socket_of(client_port, server_port, host, server_host)
    if found is None:
        return None
    uid, inode = found
    pids = holders(inode, first)
    if not pids and then is not None:
        pids = holders(inode, then())
    return Peer(uid, pids[0] if pids else None)
