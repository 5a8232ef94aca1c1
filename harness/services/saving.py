"""Write a database the harness holds in memory to a file in an execution folder that a
worker (unsealed: the same uid) may have prepared for it.

Whatever a worker left at the name or at SQLite's companion names (``-journal``, ``-wal``,
``-shm``: a folder, a symlink out of the folder, a FIFO, a hot journal for the next reader
to replay) is removed without being followed; the copy is written by SQLite's online backup
(``sqlite3.Connection.backup``, Python's docs) into a new file of an unpredictable name
made with ``O_EXCL`` (``tempfile.mkstemp``), whose own journal no worker can have
prepared, and renamed over the name (``rename(2)`` replaces a symlink, never follows it).
Found by an attack: a folder at ``gateway.db-journal`` made the backup raise out of
``execute``; a symlink at ``gateway.db`` was followed out of the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
import tempfile
from pathlib import Path

__all__ = ["COMPANIONS", "save_copy"]

#: SQLite's files beside a database (``https://sqlite.org/tempfiles.html``).
COMPANIONS = ("-journal", "-wal", "-shm")


def _remove(path: Path) -> None:
    """Remove what is at ``path`` without following it (a real folder with its tree)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def save_copy(source: sqlite3.Connection, path: Path) -> None:
    """Write ``source``'s database to ``path`` (see the module docstring), replacing what
    is there.

    Raises:
        OSError: what is at ``path`` or its companions cannot be removed, or the folder
            cannot take a new file.
        sqlite3.Error: the copy cannot be written.
    """
    for name in (path.name, *(path.name + s for s in COMPANIONS)):
        _remove(path.with_name(name))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(tmp)) as target:
            source.backup(target)
        os.replace(tmp, path)
    finally:
        for name in (tmp, *(tmp + s for s in COMPANIONS)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
