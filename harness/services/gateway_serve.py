"""``shopops-chaos gateway serve``: the harness's mock email gateway in the foreground, for
running the loop by hand (README, "Running the loop by hand")."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from harness.services.gateway import MockGateway
from shopops.errors import NotOurDatabase

__all__ = ["serve", "serve_command"]


def serve(db_path: str | Path, host: str = "127.0.0.1", port: int = 0,
          smtp: bool = False) -> None:
    """Run the gateway in the foreground until SIGINT/SIGTERM (for ``shopops-chaos gateway serve``).

    Prints one line, ``gateway listening on URL (log: DB)``, flushed, once it accepts
    connections; with ``smtp`` a second, ``smtp listening on HOST:PORT``. A Resend or SMTP
    message names its case itself (``harness.services.dialects``). Must be called from the
    main thread (it installs signal handlers).
    """
    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with MockGateway(db_path, host=host, port=port, smtp=smtp) as gateway:
            print(f"gateway listening on {gateway.url} (log: {db_path})", flush=True)
            if smtp:
                print(f"smtp listening on {host}:{gateway.smtp_port}", flush=True)
            while not stopping.wait(0.2):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_command(db_path: str, port: int, smtp: bool = False) -> int:
    """``shopops-chaos gateway serve``: ``serve`` and its exit status — 0 once stopped, 2
    when ``db_path`` is not a gateway log (refused read-only, unchanged; one error line)."""
    try:
        serve(db_path, port=port, smtp=smtp)
    except NotOurDatabase as exc:
        print(f"shopops-chaos gateway serve: error: argument --db: {exc}", file=sys.stderr)
        return 2
    return 0
