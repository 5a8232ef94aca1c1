"""The SQLite checkpoint ledger: append-only rows, a lease table, the v1->v2 migration.

Tables this module creates:

  checkpoints(seq INTEGER PRIMARY KEY AUTOINCREMENT, case_id, run_id, schema_version,
              state_json, created_at, lease_owner, fence, writer_pid)
      one row per durable write; triggers refuse UPDATE and DELETE
  case_leases(case_id PRIMARY KEY, holder, token, until, granted_at)
      one row per case ever leased; `token` is the fencing token and only ever rises
"""

import json
import os
import sqlite3

from . import clock
from .errors import CheckpointCorrupt, FencedOff, LeaseHeld, UnsupportedSchemaVersion

SCHEMA_VERSION = 2
PHASES = ("intake", "drafting", "awaiting_approval", "approved", "sending", "completed",
          "rejected", "dead_lettered")
BUSY_MS = 30000
MIGRATION_NAME = "v1_to_v2_preferred_channel"

_CHECKPOINTS_DDL = """
CREATE TABLE IF NOT EXISTS checkpoints(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    state_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    lease_owner TEXT,
    fence INTEGER,
    writer_pid INTEGER
)"""
_GUARDS_DDL = [
    "CREATE TRIGGER IF NOT EXISTS ckpt_append_only_update BEFORE UPDATE ON checkpoints "
    "BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS ckpt_append_only_delete BEFORE DELETE ON checkpoints "
    "BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END",
]
_LEASES_DDL = """
CREATE TABLE IF NOT EXISTS case_leases(
    case_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token INTEGER NOT NULL,
    until REAL NOT NULL,
    granted_at TEXT NOT NULL
)"""


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=BUSY_MS / 1000.0, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={BUSY_MS}")
    return conn


def _tables(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


class Lease:
    def __init__(self, holder: str, token: int):
        self.holder = holder
        self.token = token


class Ledger:
    def __init__(self, path: str, case_id: str, run_id: str, mark):
        self.path = path
        self.case_id = case_id
        self.run_id = run_id
        self.mark = mark
        self.conn = connect(path)
        self.lease: Lease | None = None
        self._ensure_checkpoints()

    def _ensure_checkpoints(self) -> None:
        if "checkpoints" in _tables(self.conn):
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute(_CHECKPOINTS_DDL)
            for ddl in _GUARDS_DDL:
                self.conn.execute(ddl)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    # ---- leases -------------------------------------------------------------------
    def acquire(self, holder: str, ttl: float) -> Lease:
        if "case_leases" not in _tables(self.conn):
            self.conn.execute(_LEASES_DDL)
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            row = self.conn.execute(
                "SELECT holder, token, until FROM case_leases WHERE case_id=?",
                (self.case_id,)).fetchone()
            now = clock.epoch()
            if row is not None and row[2] > now and row[0] != holder:
                raise LeaseHeld(f"{self.case_id} is leased to {row[0]} (fence {row[1]}) "
                                f"for {row[2] - now:.1f}s more")
            # every grant is a new holder: the token rises even under the same name
            token = (row[1] if row else 0) + 1
            self.conn.execute(
                "INSERT INTO case_leases(case_id, holder, token, until, granted_at) "
                "VALUES(?,?,?,?,?) ON CONFLICT(case_id) DO UPDATE SET holder=excluded.holder,"
                " token=excluded.token, until=excluded.until, granted_at=excluded.granted_at",
                (self.case_id, holder, token, now + ttl, clock.iso()))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.lease = Lease(holder, token)
        return self.lease

    def _check_fence(self) -> None:
        if self.lease is None:
            return
        row = self.conn.execute("SELECT holder, token FROM case_leases WHERE case_id=?",
                                (self.case_id,)).fetchone()
        if row is None or row[0] != self.lease.holder or row[1] != self.lease.token:
            current = f"{row[0]} with fence {row[1]}" if row else "nobody"
            raise FencedOff(f"lease of {self.lease.holder} (fence {self.lease.token}) was "
                            f"taken over: now held by {current}")

    def guard(self) -> None:
        """Called before every send attempt: do we still hold the lease with our fence?"""
        self._check_fence()

    def release(self) -> None:
        if self.lease is None:
            return
        try:
            self.conn.execute("UPDATE case_leases SET until=0 WHERE case_id=? AND holder=? "
                              "AND token=?", (self.case_id, self.lease.holder, self.lease.token))
        except sqlite3.Error:
            pass
        self.lease = None

    # ---- checkpoints ----------------------------------------------------------------
    def latest(self) -> dict | None:
        """The latest row of the case, validated; None when the case has no row."""
        row = self.conn.execute(
            "SELECT seq, schema_version, CAST(state_json AS BLOB) FROM checkpoints "
            "WHERE case_id=? ORDER BY seq DESC LIMIT 1", (self.case_id,)).fetchone()
        if row is None:
            return None
        seq, version, raw = row
        try:
            version_number = int(version)
        except (TypeError, ValueError):
            raise UnsupportedSchemaVersion(f"checkpoint seq {seq} has schema_version "
                                           f"{version!r}") from None
        if version_number != SCHEMA_VERSION:
            hint = " (run `migrate` first)" if version_number == 1 else ""
            raise UnsupportedSchemaVersion(
                f"checkpoint seq {seq} has schema_version {version_number}; this code reads "
                f"{SCHEMA_VERSION}{hint}")
        if raw is None:
            raise CheckpointCorrupt(f"checkpoint seq {seq}: state_json is NULL")
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CheckpointCorrupt(f"checkpoint seq {seq}: state_json is not UTF-8 "
                                    f"({exc})") from None
        try:
            state = json.loads(text)
        except ValueError as exc:
            raise CheckpointCorrupt(f"checkpoint seq {seq}: state_json is not JSON "
                                    f"({exc})") from None
        problem = validate_state(state)
        if problem:
            raise CheckpointCorrupt(f"checkpoint seq {seq}: {problem}")
        state["_seq"] = seq
        return state

    def append(self, state: dict) -> int:
        """One durable write: a new row, fenced, committed before we go on."""
        body = {k: v for k, v in state.items() if not k.startswith("_")}
        payload = json.dumps(body, sort_keys=True, ensure_ascii=False)
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self._check_fence()
            cursor = self.conn.execute(
                "INSERT INTO checkpoints(case_id, run_id, schema_version, state_json, "
                "created_at, lease_owner, fence, writer_pid) VALUES(?,?,?,?,?,?,?,?)",
                (self.case_id, self.run_id, SCHEMA_VERSION, payload, clock.iso(),
                 self.lease.holder if self.lease else None,
                 self.lease.token if self.lease else None, os.getpid()))
            self.mark("ckpt.before_commit")
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        state["_seq"] = cursor.lastrowid
        return cursor.lastrowid

    def close(self) -> None:
        self.conn.close()


def _nullable_str(v) -> bool:
    return v is None or isinstance(v, str)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_state(state) -> str | None:
    """What makes a state incomplete, or None. Never fills anything in."""
    if not isinstance(state, dict):
        return f"state_json is a {type(state).__name__}, not an object"
    for field in ("phase", "step", "draft", "approval_ticket", "send_idempotency_key",
                  "email_sent", "delivery_id"):
        if field not in state:
            return f"state_json lacks the field {field!r}"
    if state["phase"] not in PHASES:
        return f"phase {state['phase']!r} is not a phase"
    if not _is_int(state["step"]) or state["step"] < 0:
        return "step is not a non-negative integer"
    draft = state["draft"]
    if draft is not None:
        if not isinstance(draft, dict) or any(not isinstance(draft.get(k), str)
                                              for k in ("to", "subject", "body")):
            return "draft is neither null nor {to, subject, body} strings"
    for field in ("approval_ticket", "send_idempotency_key", "delivery_id"):
        if not _nullable_str(state[field]):
            return f"{field} is neither a string nor null"
    if not isinstance(state["email_sent"], bool):
        return "email_sent is not a boolean"
    if "recovery_attempts" in state and (not _is_int(state["recovery_attempts"])
                                         or state["recovery_attempts"] < 0):
        return "recovery_attempts is not a non-negative integer"
    if state.get("order_note") is True:
        for field in ("note_text", "note_request_id", "note_ticket", "note_idempotency_key",
                      "note_delivery_id"):
            if field not in state or not _nullable_str(state[field]):
                return f"order note field {field!r} missing or not a string/null"
        if not isinstance(state.get("note_sent"), bool):
            return "note_sent missing or not a boolean"
    # the checkpoint must hold what its phase relies on
    if state["phase"] in ("awaiting_approval", "approved", "sending") and draft is None:
        return f"phase {state['phase']} without a draft"
    if state["phase"] == "sending" and not state["send_idempotency_key"]:
        return "phase sending without an idempotency key"
    if state["phase"] in ("approved", "sending") and not state["approval_ticket"]:
        return f"phase {state['phase']} without a ticket"
    return None


def migrate(path: str, mark) -> int:
    """Rewrite every schema_version 1 row as version 2 in place, atomically.

    Returns how many rows were migrated (0 when run again).
    """
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    conn = connect(path)
    try:
        mark("ckpt.migration_started")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations("
                         "name TEXT PRIMARY KEY, applied_at TEXT, \"rows\" INTEGER)")
            rows = conn.execute("SELECT seq, CAST(state_json AS BLOB) FROM checkpoints "
                                "WHERE schema_version=1 ORDER BY seq").fetchall()
            if not rows:
                conn.execute("ROLLBACK")
                return 0
            # the append-only triggers would refuse the one sanctioned rewrite: lift them
            # inside this transaction and put them back before it commits
            triggers = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type='trigger' "
                "AND tbl_name='checkpoints'").fetchall()
            for name, _sql in triggers:
                conn.execute(f'DROP TRIGGER "{name}"')
            for seq, raw in rows:
                state = json.loads(bytes(raw).decode("utf-8"))
                state["preferred_channel"] = "email"
                conn.execute("UPDATE checkpoints SET schema_version=2, state_json=? "
                             "WHERE seq=?",
                             (json.dumps(state, sort_keys=True, ensure_ascii=False), seq))
            for _name, sql in triggers:
                conn.execute(sql)
            already = conn.execute("SELECT \"rows\" FROM schema_migrations WHERE name=?",
                                   (MIGRATION_NAME,)).fetchone()
            if already is None:
                conn.execute("INSERT INTO schema_migrations(name, applied_at, \"rows\") "
                             "VALUES(?,?,?)", (MIGRATION_NAME, clock.iso(), len(rows)))
            else:
                conn.execute("UPDATE schema_migrations SET \"rows\"=\"rows\"+?, applied_at=? "
                             "WHERE name=?", (len(rows), clock.iso(), MIGRATION_NAME))
            mark("ckpt.migration_before_commit")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return len(rows)
    finally:
        conn.close()
