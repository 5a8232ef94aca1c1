"""Paths, URLs and socket addresses as entry points accept them (issue 14: fail closed):
part of the one set of validators, ``shopops.validators``, which re-exports every name here.

Each takes the text of an option, a variable or a field and returns it, or raises
``ValueError`` whose message shows the value (shortened, ``show``) and says what is allowed.
A path is refused before anything uses it when it is empty or holds a NUL byte, is too long
for the file system (Linux ``NAME_MAX``/``PATH_MAX``), is a symlink loop or dangling
symlink, runs through a file, or is the wrong kind of thing (a folder for a file, a device).
"""

from __future__ import annotations

import errno
import os
import stat
import urllib.parse

#: Linux limits: one path component (NAME_MAX) and a whole path (PATH_MAX), in bytes.
NAME_MAX = 255
PATH_MAX = 4096
#: ``sockaddr_un.sun_path`` holds 108 bytes, the last a NUL.
MAX_SOCKET_PATH = 107


def show(value: object, limit: int = 60) -> str:
    """``repr(value)``, shortened so a 5000-character value still gives one short line
    (the count is of the value's own characters, not of its quotes); a boolean as TOML and
    JSON write it (``true``), since only a file gives one."""
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    size = len(value) if isinstance(value, (str, bytes)) else len(text)
    return text if len(text) <= limit else f"{text[:limit - 15]}...({size} chars)"


def _path_text(text: str) -> str:
    if not isinstance(text, str) or not text or "\0" in text:
        raise ValueError(f"{show(text)}: must be a non-empty path without NUL bytes")
    raw = os.fsencode(text)
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise ValueError(f"{show(text)}: too long for the file system (a path of at most "
                         f"{PATH_MAX} bytes, each name at most {NAME_MAX})")
    return text


def _lstat_chain(text: str) -> os.stat_result | None:
    """``os.stat(text)`` or ``None`` if nothing is there; ``ValueError`` for a symlink loop,
    a dangling symlink or a path through a file."""
    try:
        return os.stat(text)
    except FileNotFoundError:
        if os.path.islink(text):
            raise ValueError(f"{show(text)}: a symlink to nothing "
                             f"({os.readlink(text)!r})") from None
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{show(text)}: a symlink loop") from None
        if exc.errno == errno.ENOTDIR:
            raise ValueError(f"{show(text)}: a part of the path is a file, not a folder"
                             ) from None
        raise ValueError(f"{show(text)}: cannot be examined ({exc.strerror})") from None


def file_path(text: str) -> str:
    """A path for a file (a database, a log, results.json): not a folder, not a symlink
    loop, not a device or FIFO; if it does not exist yet, its folder must. Returns it.

    Raises:
        ValueError: naming the path and what was found.
    """
    _path_text(text)
    st = _lstat_chain(text)
    if st is None:
        parent = os.path.dirname(text) or "."
        pst = _lstat_chain(parent)
        if pst is None or not stat.S_ISDIR(pst.st_mode):
            raise ValueError(f"{show(text)}: its folder {show(parent)} does not exist")
        return text
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{show(text)}: is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{show(text)}: is not a regular file (a device, FIFO or socket)")
    return text


def output_file(text: str) -> str:
    """A file the command writes (its folder may be created): not a folder, not a symlink
    loop, not a device or FIFO."""
    _path_text(text)
    st = _lstat_chain(text)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{show(text)}: is a folder, not a file")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{show(text)}: is not a regular file (a device, FIFO or socket)")
    return text


def existing_file(text: str) -> str:
    """``file_path`` that must exist."""
    file_path(text)
    if not os.path.exists(text):
        raise ValueError(f"{show(text)}: no such file")
    return text


def folder_path(text: str) -> str:
    """A folder that may not exist yet (it is created): not a file, no symlink loop."""
    _path_text(text)
    st = _lstat_chain(text)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{show(text)}: is a file, not a folder")
    return text


def existing_folder(text: str) -> str:
    """``folder_path`` that must exist."""
    folder_path(text)
    if not os.path.isdir(text):
        raise ValueError(f"{show(text)}: no such folder")
    return text


def existing_path(text: str) -> str:
    """An existing regular file or folder (e.g. a summary.json or its run folder)."""
    _path_text(text)
    if os.path.isdir(text):
        return text
    return existing_file(text)


def url(text: str) -> str:
    """An ``http://`` or ``https://`` URL with a host and, if given, a port 0–65535."""
    if not isinstance(text, str) or len(text) > PATH_MAX or not text.isprintable():
        raise ValueError(f"{show(text)}: must be an http:// or https:// URL")
    parts = urllib.parse.urlsplit(text)
    try:
        port_ok = parts.port is None or 0 <= parts.port <= 65535
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ValueError(f"{show(text)}: must be an http:// or https:// URL with a host "
                         "(and a port 0-65535)")
    return text


def socket_path(text: str) -> str:
    """A Unix socket address: a path, or ``@name`` (Linux abstract namespace), at most
    107 bytes (``sun_path``)."""
    if not isinstance(text, str) or not text or "\0" in text or not text.isprintable():
        raise ValueError(f"{show(text)}: must be a socket path or @name")
    if len(os.fsencode(text)) > MAX_SOCKET_PATH:
        raise ValueError(f"{show(text)}: longer than {MAX_SOCKET_PATH} bytes (sun_path)")
    return text
