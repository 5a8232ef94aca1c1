"""Where the mock gateway's ledger lives: its SQLite file, or a database in the harness's
memory written to that file on demand (``harness.services.gateway.MockGateway``).

A file (``gateway serve``, the tests' gateways) is adopted only when it is a gateway log
(``shopops.checkpoint_file.inspect`` with ``GATEWAY_LOG``, read-only first: fail closed), in
WAL mode, each transaction on a connection of its own with ``synchronous=FULL``. In memory
(an execution's gateway, issue 27) the same tables are one ``:memory:`` connection used
under a lock: no file exists while the workers run, so none can change it, and a passing
execution, whose databases a run drops, writes none; ``save`` writes it with SQLite's
online backup (``sqlite3.Connection.backup``, Python's ``sqlite3`` docs).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from harness.services import ledger as ledgers
from harness.services.saving import save_copy
from shopops.checkpoint_file import OurSchema, inspect

__all__ = ["LedgerDatabase"]

T = TypeVar("T")


class LedgerDatabase:
    """The ledger's tables at ``path`` (a file) or in memory (``memory=True``).

    Raises (on construction, a file only):
        shopops.errors.NotOurDatabase: ``path`` is not a ``kind`` database.
    """

    def __init__(self, path: Path, kind: OurSchema, *, memory: bool = False) -> None:
        self.path = path
        self._memory: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        if memory:
            self._memory = sqlite3.connect(":memory:", isolation_level=None,
                                           check_same_thread=False)
            self._memory.executescript(ledgers.SCHEMA)
            return
        inspect(self.path, kind, create=True)  # fail closed: adopt no file
        with contextlib.closing(self._connect()) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(ledgers.SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    @contextlib.contextmanager
    def opened(self) -> Iterator[sqlite3.Connection]:
        """A connection to the ledger: a new one to the file (closed after), or the
        in-memory database's own, held under its lock."""
        if self._memory is None:
            with contextlib.closing(self._connect()) as conn:
                yield conn
        else:
            with self._lock:
                yield self._memory

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``opened`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an
        exception, which propagates)."""
        with self.opened() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def read(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """``read(connection)`` on the ledger (in memory: under its lock, so that nothing
        commits meanwhile); its result."""
        with self.opened() as conn:
            return read(conn)

    def save(self) -> None:
        """Write an in-memory ledger to ``path`` (``harness.services.saving.save_copy``:
        SQLite's online backup into a new file renamed over whatever is there, which a
        worker may have put there; the caller has recorded it). Nothing for a ledger that
        is its file.

        Raises:
            OSError: what is at ``path`` cannot be removed.
            sqlite3.Error: the file cannot be written.
        """
        if self._memory is None:
            return
        with self.opened() as conn:
            save_copy(conn, self.path)
