"""The one file inspector (``shopops.checkpoint_file.inspect``) under Hypothesis (issue 14):
SQLite files with drawn layouts — our tables with columns dropped, added, reordered or
declared otherwise, our other databases' tables, foreign tables — for each kind of database
of ours. For every file: ``inspect`` leaves its bytes as they were, and either refuses it
(``NotOurDatabase``) or accepts it, and then the store of that kind really works on it
(accepted ⇒ usable: a file the inspector lets through must not fail later with a raw
``sqlite3`` error). A small derandomised budget by default, many more with ``--crash-soak``.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.services.gateway import GATEWAY_LOG, MockGateway
from shopops.approval_store import APPROVAL_QUEUE
from shopops.approvals import ApprovalQueue
from shopops.checkpoint import CHECKPOINT_DB, CheckpointStore
from shopops.checkpoint_file import FileState, OurSchema, _layout_of, inspect
from shopops.errors import NotOurDatabase
from shopops.state import State

DEFAULT_EXAMPLES = 30
SOAK_EXAMPLES = 500


def fuzz(config: pytest.Config) -> settings:
    soak = bool(config.getoption("--crash-soak", False))
    return settings(max_examples=SOAK_EXAMPLES if soak else DEFAULT_EXAMPLES, deadline=None,
                    derandomize=not soak, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _use_checkpoints(db: Path) -> None:
    with CheckpointStore(db) as store:
        store.save(State(case_id="case-O-1001", order_id="O-1001"), "run-1")
        assert store.load("case-O-1001", "run-1").case_id == "case-O-1001"
        store.acquire_lease("case-O-1001", "w1", 30.0)


def _use_queue(db: Path) -> None:
    with ApprovalQueue(db) as q:
        q.request("case-O-1001", "ab" * 32)
        ticket = q.approve("case-O-1001", approver="maya")
        assert q.ticket_for("case-O-1001") == ticket


def _use_gateway(db: Path) -> None:
    MockGateway(db).log()


KINDS: dict[str, tuple[OurSchema, Callable[[Path], None]]] = {
    "checkpoints": (CHECKPOINT_DB, _use_checkpoints),
    "queue": (APPROVAL_QUEUE, _use_queue),
    "gateway": (GATEWAY_LOG, _use_gateway),
}
#: Every table of every kind, with its columns: what a drawn file is made of.
OUR_TABLES = {t: cols for ours, _ in KINDS.values() for t, cols in _layout_of(ours.schema)[0]
              .items()}
DECLS = ["", "TEXT", "INTEGER", "REAL", "BLOB", "TEXT NOT NULL", "INTEGER PRIMARY KEY"]


@st.composite
def table(draw: st.DrawFn, name: str) -> str:
    """``CREATE TABLE name (...)``: ours as created, or with columns dropped, reordered,
    added or declared otherwise."""
    want = list(OUR_TABLES.get(name, ("id", "value")))
    how = draw(st.sampled_from(["as-is", "drop", "shuffle", "extra", "redeclare"]))
    if how == "as-is" and name in OUR_TABLES:
        with contextlib.closing(sqlite3.connect(":memory:")) as conn:
            for ours, _ in KINDS.values():
                schema = ours.schema if isinstance(ours.schema, str) else ";".join(ours.schema)
                conn.executescript(schema)
            (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?",
                                  (name,)).fetchone()
        return str(sql)
    cols = [(c, "") for c in want]
    if how == "drop" and len(cols) > 1:
        del cols[draw(st.integers(0, len(cols) - 1))]
    elif how == "shuffle":
        cols = draw(st.permutations(cols))
    elif how == "extra":
        cols.insert(draw(st.integers(0, len(cols))), ("zz_extra", "TEXT"))
    else:
        cols = [(c, draw(st.sampled_from(DECLS[:-1]))) for c, _ in cols]
    body = ", ".join(f'"{c}" {d}'.strip() for c, d in cols)
    return f'CREATE TABLE "{name}" ({body})'


@st.composite
def layout(draw: st.DrawFn, kind: str) -> list[str]:
    ours = KINDS[kind][0]
    names = draw(st.lists(st.sampled_from(sorted(OUR_TABLES) + ["users", "notes_x"]),
                          max_size=3, unique=True))
    if draw(st.booleans()) and ours.anchor not in names:
        names.insert(0, ours.anchor)
    return [draw(table(name)) for name in names]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_inspect_writes_nothing_and_what_it_accepts_works(pytestconfig: pytest.Config,
                                                          kind: str) -> None:
    ours, use = KINDS[kind]

    @fuzz(pytestconfig)
    @given(statements=layout(kind))
    def run(statements: list[str]) -> None:
        with tempfile.TemporaryDirectory() as folder:
            db = Path(folder, "x.db")
            with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
                for s in statements:
                    conn.execute(s)
            before = sorted(Path(folder).iterdir()), db.read_bytes()
            try:
                found = inspect(db, ours, create=True)
            except NotOurDatabase:
                found = None
            assert (sorted(Path(folder).iterdir()), db.read_bytes()) == before
            if found is not None:
                assert found in (FileState.NEW, FileState.OURS)
                use(db)  # accepted ⇒ usable: no raw sqlite3 error later

    run()
