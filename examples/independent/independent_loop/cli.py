"""`python -m independent_loop run OPTIONS` and `python -m independent_loop migrate DB`."""

import argparse
import os
import sys

from . import PROG
from .approvals import open_queue
from .engine import Options, Worker
from .errors import Refusal
from .failpoints import Marker
from .ledger import Ledger, migrate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start or resume the case until it parks or ends")
    run.add_argument("--db", required=True)
    run.add_argument("--approvals", default=None)
    run.add_argument("--gateway", default="http://127.0.0.1:8025")
    run.add_argument("--case", default=None)
    run.add_argument("--order", default="O-1001")
    run.add_argument("--run-id", default="run-1")
    run.add_argument("--keys", choices=("on", "off"), default="on")
    run.add_argument("--policy", choices=("deterministic", "varying"), default="deterministic")
    run.add_argument("--owner", default=None)
    run.add_argument("--lease-ttl", type=float, default=30.0)
    run.add_argument("--ticket", default=None)
    run.add_argument("--read-timeout", type=float, default=5.0)
    run.add_argument("--max-attempts", type=int, default=5)
    run.add_argument("--order-note", action="store_true")
    mig = sub.add_parser("migrate", help="rewrite v1 checkpoints as v2, once, atomically")
    mig.add_argument("db")
    return parser


def _title() -> None:
    title = os.environ.get("HARNESS_WORKER_TITLE")
    if not title:
        return
    try:
        import setproctitle  # optional
    except ImportError:
        return
    setproctitle.setproctitle(title)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _title()
    mark = Marker(os.environ.get("SHOPOPS_FAILPOINT_CHANNEL"))
    try:
        if args.command == "migrate":
            count = migrate(args.db, mark)
            print(f"{PROG}: migrated {count} row(s) to schema_version 2")
            return 0
        opts = Options(db=args.db, case_id=args.case or f"case-{args.order}",
                       order_id=args.order, run_id=args.run_id, gateway_url=args.gateway,
                       keys_on=args.keys == "on", policy=args.policy, owner=args.owner,
                       lease_ttl=args.lease_ttl, offered_ticket=args.ticket,
                       read_timeout=args.read_timeout, max_attempts=args.max_attempts,
                       order_note=args.order_note)
        ledger = Ledger(opts.db, opts.case_id, opts.run_id, mark)
        queue = open_queue(args.approvals)
        try:
            outcome = Worker(opts, ledger, queue, mark).run()
        finally:
            ledger.release()
            queue.close()
            ledger.close()
        print(f"{PROG}: {opts.case_id}: {outcome}")
        return 0
    except Refusal as refusal:
        print(f"{PROG}: error: {refusal.name}: {refusal.message}", file=sys.stderr)
        return 1
