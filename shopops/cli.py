"""``shopops``: run, approve, reject, resume and inspect ShopOps cases.

Exit status: 0 success; 1 the system refused (bad ticket, lease held, corrupt or
unsupported checkpoint, a file that is not a database of ours of the kind expected, a
missing queue for approve/reject, gateway error) or a bad ``SHOPOPS_*`` variable
(``ConfigError``); 2 bad usage (an option argparse refuses, with the bounds of
``shopops.validators``, or an ``--order`` that is not in the fixtures). Errors go to stderr,
one line, naming the file and field. Everything is checked before any file is created.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from shopops import validators as v
from shopops.errors import ConfigError, InputError, ShopOpsError

if TYPE_CHECKING:  # imported lazily at run time (the CLI starts fast)
    from shopops.checkpoint import CheckpointStore

_DB = v.argtype(v.file_path, "path")
_ID = v.IDENT


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default="shopops.db", type=_DB,
                   help="checkpoint database (SQLite file)")
    p.add_argument("--approvals", default=None, type=_DB,
                   help="approval queue database (default $SHOPOPS_APPROVALS_DB or "
                        "shopops-approvals.db)")


def _case(p: argparse.ArgumentParser) -> None:
    p.add_argument("--case", default="case-O-1001", type=_ID, help="case id")
    p.add_argument("--run-id", default="run-1", type=_ID, help="checkpoint run id")


def _gate(p: argparse.ArgumentParser) -> None:
    from shopops.approvals import DEFAULT_GATE, GATES

    p.add_argument("--gate", choices=GATES, default=DEFAULT_GATE,
                   help=f"the gated action decided (default {DEFAULT_GATE})")


@functools.cache
def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``shopops --help``). Built once per process and reused
    (``parse_args`` does not change a parser): building it costs ~10 ms of argparse's
    ``gettext`` look-ups, paid once in the harness's fork server instead of in every
    forked worker."""
    parser = argparse.ArgumentParser(prog="shopops", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("run", "start a case, or continue it from its checkpoint"),
                           ("resume", "continue a case from its checkpoint (must exist)")):
        p = sub.add_parser(name, help=helptext)
        _common(p)
        _case(p)
        p.add_argument("--order", default=None, type=_ID,
                       help="order id (default: from the case id)")
        p.add_argument("--gateway", default=None, type=v.argtype(v.url, "URL"),
                       help="gateway URL ($SHOPOPS_GATEWAY_URL)")
        p.add_argument("--keys", choices=("on", "off"), default=None,
                       help="idempotency keys ($SHOPOPS_IDEMPOTENCY_KEYS, default on)")
        p.add_argument("--policy", choices=("deterministic", "varying"), default=None)
        p.add_argument("--owner", default=None, type=_ID, help="take a lease as this owner")
        p.add_argument("--lease-ttl", type=v.LEASE_TTL_S, default=60.0,
                       help=f"lease seconds ({v.LEASE_TTL_S.allowed})")
        p.add_argument("--ticket", default=None, type=_ID,
                       help="ticket to grant (default: the queue's)")
        p.add_argument("--read-timeout", type=v.READ_TIMEOUT_S, default=None, metavar="SECONDS",
                       help="seconds to wait for the gateway's reply per attempt "
                            "($SHOPOPS_READ_TIMEOUT_S, default 5; at most 3600)")
        p.add_argument("--max-attempts", default=None, metavar="N", type=v.MAX_ATTEMPTS,
                       help="recovery attempts before the case is dead-lettered "
                            f"($SHOPOPS_MAX_ATTEMPTS, default 5; {v.MAX_ATTEMPTS.allowed})")
        p.add_argument("--note-ticket", default=None, type=_ID,
                       help="ticket to grant on the order note's gate (default: the queue's)")
        p.add_argument("--from-seq", default=None, metavar="N", type=v.FROM_SEQ,
                       help="resume from the case's checkpoint with seq N instead of the "
                            "latest (time travel): it must exist and load; work recorded "
                            "after it is not redone, so the case goes on from the latest")
        p.add_argument("--order-note", action="store_true",
                       help="a case started now also adds an order note saying the customer "
                            "was emailed: a second gated action (gate add_order_note)")
    p = sub.add_parser("approve", help="a human approves the case's pending send (t5)")
    _common(p)
    p.add_argument("--case", default="case-O-1001", type=_ID)
    p.add_argument("--approver", default="maya", type=_ID)
    p.add_argument("--ticket", default=None, type=_ID,
                   help="ticket id to issue (default apr-desk-N)")
    _gate(p)
    p = sub.add_parser("reject", help="a human rejects the case's pending send")
    _common(p)
    p.add_argument("--case", default="case-O-1001", type=_ID)
    p.add_argument("--approver", default="maya", type=_ID)
    p.add_argument("--feedback", default=None, type=v.FREE_TEXT,
                   help="what to change: the loop drafts again and asks anew (without it "
                        "the case ends rejected)")
    _gate(p)
    p = sub.add_parser("history", help="print a case's checkpoint history as JSON lines")
    _common(p)
    p.add_argument("--case", default="case-O-1001", type=_ID)
    p.add_argument("--run-id", default=None, type=_ID)
    p = sub.add_parser("migrate", help="apply the explicit v1->v2 checkpoint migration")
    p.add_argument("db", type=_DB, help="checkpoint database")
    return parser


#: The mock gateway is the harness's, not the loop's: ``shopops`` never imports the harness.
MOVED = {"gateway": "the mock gateway moved to the harness: run `shopops-chaos gateway serve "
                    "[--db FILE] [--port N]`"}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``shopops``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in MOVED:
        print(f"shopops: error: {MOVED[argv[0]]}", file=sys.stderr)
        return 2
    args = v.parse_args(build_parser(), argv)
    try:
        v.check_environment()  # every SHOPOPS_* variable, before any file or process
        return _dispatch(args)
    except InputError as exc:
        if isinstance(exc, ConfigError):
            print(f"shopops: error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        print(f"shopops {args.command}: error: {exc}", file=sys.stderr)  # as argparse does
        return 2
    except ShopOpsError as exc:
        print(f"shopops: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except (OSError, sqlite3.Error) as exc:  # a missing or unreadable database file
        files = [f"{name} {getattr(args, attr)}" for name, attr in
                 (("--db", "db"), ("--approvals", "approvals")) if getattr(args, attr, None)]
        print(f"shopops: error: {type(exc).__name__}: {exc} ({', '.join(files)})",
              file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    from shopops.approvals import ApprovalQueue
    from shopops.checkpoint import CheckpointStore

    approvals = args.approvals if "approvals" in args else None
    approvals = approvals or os.environ.get("SHOPOPS_APPROVALS_DB", "shopops-approvals.db")
    if args.command in ("run", "resume"):
        return _work(args, approvals)
    if args.command == "approve":
        with ApprovalQueue(approvals, create=False) as queue:
            t = queue.approve(args.case, approver=args.approver, ticket_id=args.ticket,
                              gate=args.gate)
        print(json.dumps({"ticket_id": t.ticket_id, "case_id": t.case_id,
                          "draft_digest": t.draft_digest, "issued_at": t.issued_at,
                          "gate": t.gate}))
        return 0
    if args.command == "reject":
        with ApprovalQueue(approvals, create=False) as queue:
            r = queue.reject(args.case, approver=args.approver, feedback=args.feedback,
                             gate=args.gate)
        print(json.dumps({"request_id": r.request_id, "status": r.status,
                          "feedback": r.feedback, "gate": r.gate}))
        return 0
    if args.command == "history":
        from shopops.checkpoint import read_history

        for row in read_history(args.db, args.case, args.run_id):
            text = row.state_json.decode("utf-8", "replace") if row.state_json else None
            print(json.dumps({"seq": row.seq, "run_id": row.run_id,
                              "schema_version": row.schema_version,
                              "created_at": row.created_at, "state_json": text}))
        return 0
    if args.command == "migrate":
        with CheckpointStore(args.db, create=False) as store:
            print(json.dumps({"migrated_rows": store.migrate_v1_to_v2()}))
        return 0
    raise AssertionError(args.command)  # pragma: no cover


def _work(args: argparse.Namespace, approvals: str) -> int:
    from shopops.checkpoint import CheckpointStore
    from shopops.errors import CheckpointNotFound
    from shopops.runtime import (
        clock_from_env,
        max_attempts_from_env,
        services_from_env,
        set_default_services,
    )
    from shopops.worker import DEFAULT_MAX_ATTEMPTS, work

    env = dict(os.environ, SHOPOPS_APPROVALS_DB=approvals)
    for flag, var in ((args.gateway, "SHOPOPS_GATEWAY_URL"), (args.keys,
                      "SHOPOPS_IDEMPOTENCY_KEYS"), (args.policy, "SHOPOPS_POLICY"),
                      (args.read_timeout, "SHOPOPS_READ_TIMEOUT_S"),
                      (args.max_attempts, "SHOPOPS_MAX_ATTEMPTS")):
        if flag is not None:
            env[var] = str(flag)
    max_attempts = max_attempts_from_env(env, DEFAULT_MAX_ATTEMPTS)
    order = args.order or args.case.removeprefix("case-")
    if args.command == "resume" and not os.path.lexists(args.db):
        raise CheckpointNotFound(f"no checkpoint database {args.db}: nothing to resume for "
                                 f"case_id={args.case!r} run_id={args.run_id!r}",
                                 path=args.db, case_id=args.case, run_id=args.run_id)
    # Fail closed first (issue 14): both files must be ours (only `run` creates a checkpoint
    # database; the worker creates its queue) and a new case's order must exist, before any
    # file is created; the latest checkpoint must load before the queue is opened.
    _preflight(args, approvals, order, env)
    with CheckpointStore(args.db, clock=clock_from_env(env),
                         create=args.command == "run") as store:
        (store.load if args.command == "resume" else store.find)(args.case, args.run_id)
        if args.from_seq is not None:
            _chosen_checkpoint(store, args.case, args.run_id, args.from_seq)
        services = services_from_env(env)
        set_default_services(services)
        result = work(args.case, order, store=store, services=services, run_id=args.run_id,
                      owner=args.owner, lease_ttl_s=args.lease_ttl, ticket=args.ticket,
                      note_ticket=args.note_ticket,
                      require_checkpoint=args.command == "resume", max_attempts=max_attempts,
                      order_note=args.order_note)
    s = result.state
    print(json.dumps({"stopped": result.stopped, "phase": s.phase, "step": s.step,
                      **({"from_seq": args.from_seq} if args.from_seq is not None else {}),
                      "email_sent": s.email_sent, "delivery_id": s.delivery_id,
                      "idempotency_key": s.send_idempotency_key,
                      **({"note_sent": s.note_sent, "note_id": s.note_delivery_id}
                         if s.order_note else {})}))
    return 0


def _chosen_checkpoint(store: CheckpointStore, case_id: str, run_id: str, seq: int) -> None:
    """``--from-seq N``: the case's checkpoint ``N`` must exist in this run and load. A
    replay from it finds every effect recorded after it in the later rows (the history is
    the loop's effect log, Chapter 8) and redoes none: the case goes on from the latest row,
    never behind recorded progress (no second intake, draft, request or send).

    Raises:
        CheckpointNotFound: no row ``N`` of this case and run.
        CheckpointCorrupt, UnsupportedSchemaVersion: row ``N`` does not load.
    """
    from shopops.errors import CheckpointNotFound

    row = next((r for r in store.history(case_id, run_id) if r.seq == seq), None)
    if row is None:
        raise CheckpointNotFound(f"checkpoint {store.path}: no row seq={seq} for "
                                 f"case_id={case_id!r} run_id={run_id!r}", path=store.path,
                                 case_id=case_id, run_id=run_id, seq=seq)
    row.state()


def _preflight(args: argparse.Namespace, approvals: str, order: str,
               env: dict[str, str]) -> None:
    """Refuse, read-only, what ``run``/``resume`` would otherwise find only after creating a
    file: an approval queue that is not ours, and (``run`` of a case with no checkpoint
    yet: the only time the order is read) an order not in the fixtures.

    Raises:
        NotOurDatabase, NotACheckpointDatabase: ``checkpoint_file.inspect``.
        InputError: the order (``--order``, or the one ``--case`` names) is unknown.
    """
    from shopops.approval_store import APPROVAL_QUEUE
    from shopops.approvals import ENV_SOCKET
    from shopops.checkpoint import CHECKPOINT_DB
    from shopops.checkpoint_file import FileState, inspect
    from shopops.checkpoint_rows import read_history  # the file was just inspected: ours
    from shopops.records import Records

    if not env.get(ENV_SOCKET):  # with the harness's approval service the file is unused
        inspect(approvals, APPROVAL_QUEUE, create=True)
    if args.command != "run":
        return
    if inspect(args.db, CHECKPOINT_DB, create=True) is FileState.OURS and read_history(
            args.db, args.case, args.run_id):
        return
    records = Records.load(env.get("SHOPOPS_FIXTURES") or None)
    if order not in records.orders:
        flag = "--order" if args.order else "--case"
        given = args.order or args.case
        raise InputError(f"argument {flag}: {given!r}: no order {order!r} in "
                         f"{records.source}/orders.json; allowed: "
                         f"{', '.join(sorted(records.orders))}",
                         input=flag, value=given, allowed=sorted(records.orders))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
