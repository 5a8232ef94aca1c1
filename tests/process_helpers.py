"""Helpers shared by the tests that start a harness (or a fork server) as a process of
their own: how such a test ends, whatever happened."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def end(proc: subprocess.Popen[Any]) -> None:
    """A test's last word on a process it started in a session of its own
    (``start_new_session=True``): SIGKILL its process group if it is still running, reap it,
    and close its pipes. Left open, the pipes are closed by the garbage collector during some
    later test, which pytest then fails with a ``ResourceWarning`` (the CI run of stop 33
    failed an unrelated test that way)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
