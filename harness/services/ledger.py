"""The durable ledgers of the harness's mock services, on one SQLite file: the email
gateway's (``POST /v1/messages``) and the order service's (``POST /v1/order-notes``, the
O-1001 story's second gated side effect), each with its own request log and its own
deliveries table, so that nothing reading one can take an entry of the other for its own.

Both dedupe by ``Idempotency-Key`` the same way (the IETF draft "The Idempotency-Key HTTP
Header Field": same key + same payload → the original answer, 200; same key + another
payload → 409; a new key → a new delivery, 201), in one ``BEGIN IMMEDIATE`` transaction.
``harness.services.gateway`` serves the HTTP side and calls these functions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.model.evidence import Delivery, GatewayLog, NoteDelivery, RequestRecord
from harness.model.input_files import InputFileError, check_nesting

__all__ = ["EMAIL", "FOREIGN_STATUS", "LEDGERS", "NOTES", "SCHEMA", "Ledger", "accept",
           "insert_request", "iso", "parse", "read", "read_log", "request_record", "sha256"]

_REQUESTS = """(
    seq INTEGER PRIMARY KEY AUTOINCREMENT, received_at TEXT NOT NULL,
    received_epoch REAL NOT NULL, idempotency_key TEXT, body_sha256 TEXT NOT NULL,
    case_id TEXT, status INTEGER NOT NULL, fault TEXT, worker_pid INTEGER,
    remote_port INTEGER, delivery_id TEXT, duplicate INTEGER NOT NULL DEFAULT 0,
    claimed_pid INTEGER, worker_uid INTEGER)"""
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS requests {_REQUESTS};
CREATE TABLE IF NOT EXISTS deliveries (
    n INTEGER PRIMARY KEY, delivery_id TEXT NOT NULL UNIQUE, request_seq INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE, body_sha256 TEXT NOT NULL, case_id TEXT NOT NULL,
    "to" TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL,
    delivered_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS note_requests {_REQUESTS};
CREATE TABLE IF NOT EXISTS notes (
    n INTEGER PRIMARY KEY, delivery_id TEXT NOT NULL UNIQUE, request_seq INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE, body_sha256 TEXT NOT NULL, case_id TEXT NOT NULL,
    order_id TEXT NOT NULL, body TEXT NOT NULL, delivered_at TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Ledger:
    """One mock service's ledger.

    Attributes:
        name: ``"email"`` or ``"note"`` (what a message is called in errors).
        path: the HTTP path it is served on.
        requests, deliveries: its two tables.
        id_prefix: a delivery id is ``<prefix>-<n:06d>``.
        fields: the JSON body's fields, all strings, all required.
        record: the frozen type of one of its deliveries.
    """

    name: str
    path: str
    requests: str
    deliveries: str
    id_prefix: str
    fields: tuple[str, ...]
    record: type[Delivery] | type[NoteDelivery]


#: The status the gateway logs a request with when another uid than the sealed
#: execution's sent it (``harness.services.gateway``): refused, never delivered, and read
#: apart (``GatewayLog.foreign``).
FOREIGN_STATUS = 403

EMAIL = Ledger("email", "/v1/messages", "requests", "deliveries", "dlv",
               ("case_id", "to", "subject", "body"), Delivery)
NOTES = Ledger("note", "/v1/order-notes", "note_requests", "notes", "nte",
               ("case_id", "order_id", "body"), NoteDelivery)
LEDGERS: tuple[Ledger, ...] = (EMAIL, NOTES)


def read_log(db_path: str | Path) -> GatewayLog:
    """Read both ledgers from the SQLite file, opened read-only; no server needed. A file
    from before the order service existed has no note tables: its note ledger is empty.

    Raises:
        sqlite3.OperationalError: the file does not exist or is not a gateway log.
    """
    uri = Path(db_path).resolve().as_uri() + "?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
        return read(conn)


def read(conn: sqlite3.Connection) -> GatewayLog:
    """Both ledgers through an open connection (see ``read_log``)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def select(cls: type, table: str) -> list[dict[str, Any]]:
        if table not in tables and table in (NOTES.requests, NOTES.deliveries):
            return []
        names = [f.name for f in dataclasses.fields(cls)]
        columns = ", ".join(f'"{name}"' for name in names)
        rows = conn.execute(f"SELECT {columns} FROM {table} ORDER BY rowid").fetchall()
        return [dict(zip(names, row, strict=True)) for row in rows]

    def requests(table: str) -> tuple[RequestRecord, ...]:
        return tuple(RequestRecord(**{**r, "duplicate": bool(r["duplicate"])})
                     for r in select(RequestRecord, table))

    return _log(requests(EMAIL.requests),
                tuple(Delivery(**r) for r in select(Delivery, EMAIL.deliveries)),
                requests(NOTES.requests),
                tuple(NoteDelivery(**r) for r in select(NoteDelivery, NOTES.deliveries)))


def _log(emails: tuple[RequestRecord, ...], deliveries: tuple[Delivery, ...],
         notes: tuple[RequestRecord, ...], note_deliveries: tuple[NoteDelivery, ...]
         ) -> GatewayLog:
    """The ``GatewayLog`` of both ledgers' rows: refused senders' requests apart."""
    foreign = tuple(r for r in emails + notes if r.status == FOREIGN_STATUS)
    return GatewayLog(tuple(r for r in emails if r.status != FOREIGN_STATUS), deliveries,
                      tuple(r for r in notes if r.status != FOREIGN_STATUS), note_deliveries,
                      foreign)


#: Characters of delivered message bodies one gateway holds at most: an execution's
#: ledger is in the harness's memory, so past it a new message is refused, 413 (found by an
#: attack: 219 one-megabyte messages in 10 s took the harness to 529 MiB). A loop's own
#: messages are a few KiB.
MAX_HELD_CHARS = 32 * 1024 * 1024


def request_record(conn: sqlite3.Connection, ledger: Ledger, seq: int) -> RequestRecord:
    """The logged request ``seq`` of ``ledger``."""
    names = [f.name for f in dataclasses.fields(RequestRecord)]
    row = conn.execute(f"SELECT {', '.join(names)} FROM {ledger.requests} WHERE seq = ?",
                       (seq,)).fetchone()
    record = dict(zip(names, row, strict=True))
    return RequestRecord(**{**record, "duplicate": bool(record["duplicate"])})


#: How deep a request body's arrays and objects may nest. A message is flat; ~200 KB of
#: ``[[[…]]]`` (under ``MAX_BODY``) made ``json.loads`` raise ``RecursionError`` — an HTML
#: 500 and a traceback instead of a refusal.
MAX_BODY_DEPTH = 32


def json_object(raw: bytes) -> tuple[dict[str, Any] | None, tuple[str, str] | None]:
    """``(object, None)`` for a request body that is a JSON object (UTF-8) nested at most
    ``MAX_BODY_DEPTH`` deep, else ``(None, ("body", why))`` — the nesting is counted
    (``harness.model.input_files.check_nesting``) before ``json.loads`` sees the text."""
    refused = None, ("body", "request body must be a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return refused
    try:
        check_nesting(text, "body", MAX_BODY_DEPTH, toml=False)
    except InputFileError:
        return None, ("body", f"nested more than {MAX_BODY_DEPTH} levels deep; allowed: at "
                      f"most {MAX_BODY_DEPTH}")
    try:
        data = json.loads(text)
    except ValueError:
        return refused
    return (data, None) if isinstance(data, dict) else refused


def parse(ledger: Ledger, raw: bytes) -> tuple[dict[str, str] | None, tuple[str, str] | None]:
    """``(message, None)`` or ``(None, (field, why))`` for a request body of ``ledger``."""
    data, problem = json_object(raw)
    if data is None:
        return None, problem
    for field in ledger.fields:
        if field not in data:
            return None, (field, "missing")
        if not isinstance(data[field], str):
            return None, (field, f"must be a string, got {type(data[field]).__name__}")
    return {field: data[field] for field in ledger.fields}, None


def insert_request(conn: sqlite3.Connection, ledger: Ledger, evidence: dict[str, Any],
                   status: int, delivery_id: str | None = None, *,
                   duplicate: bool = False) -> int:
    """Log one request of ``ledger``; returns its ``seq``."""
    row = {**evidence, "status": status, "delivery_id": delivery_id, "duplicate": int(duplicate)}
    return int(conn.execute(_insert_sql(ledger.requests, row), row).lastrowid or 0)


def accept(conn: sqlite3.Connection, ledger: Ledger, evidence: dict[str, Any],
           message: dict[str, str]
           ) -> tuple[int, dict[str, Any], Delivery | NoteDelivery | None, int]:
    """Check-and-insert inside the caller's ``BEGIN IMMEDIATE`` transaction: one delivery
    per key. Returns ``(status, reply, new delivery or None, request seq)``."""
    key, digest = evidence["idempotency_key"], evidence["body_sha256"]
    delivery = None
    row = None if key is None else conn.execute(
        f"SELECT delivery_id, body_sha256 FROM {ledger.deliveries} WHERE idempotency_key=?",
        (key,)).fetchone()
    if row is None:
        (n,) = conn.execute(f"SELECT COALESCE(MAX(n), 0) + 1 FROM {ledger.deliveries}"
                            ).fetchone()
        status, delivery_id = 201, f"{ledger.id_prefix}-{n:06d}"
    else:
        status, delivery_id = (200 if row[1] == digest else 409), row[0]
    seq = insert_request(conn, ledger, evidence, status, delivery_id if status != 409 else None,
                         duplicate=status == 200)
    if status == 201:
        # each ledger's record takes its own fields after the common four
        delivery = ledger.record(delivery_id, seq, key, digest,  # type: ignore[call-arg]
                                 *(message[f] for f in ledger.fields), iso(time.time()))
        record = {"n": n, **dataclasses.asdict(delivery)}
        conn.execute(_insert_sql(ledger.deliveries, record), record)
    if status == 409:
        return 409, {"error": "idempotency_key_reused", "idempotency_key": key,
                     "delivery_id": delivery_id, "detail": "the key was first used with a "
                     "different body; use a new key for a new "
                     + ("message" if ledger is EMAIL else ledger.name)}, None, seq
    return status, {"delivery_id": delivery_id, "status": "delivered",
                    "duplicate": status == 200}, delivery, seq


def _insert_sql(table: str, row: dict[str, Any]) -> str:
    columns = ", ".join(f'"{name}"' for name in row)
    return f"INSERT INTO {table} ({columns}) VALUES ({', '.join(':' + k for k in row)})"


def sha256(message: dict[str, str]) -> str:
    """SHA-256 hex of the message's canonical JSON (sorted keys, no spaces, UTF-8)."""
    canonical = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def iso(epoch: float) -> str:
    """ISO-8601 UTC with microseconds."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")
