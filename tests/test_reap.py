"""Reaping a worker that is the harness's own child (``PopenWorker._reap``): a wait with a
limit sleeps on a pidfd until the child exits, instead of ``Popen.wait(timeout=...)``'s
polling, whose sleeps grow to 50 ms (so a spawned worker was reaped up to 50 ms late)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.launch.processes import PopenWorker, spawn

#: waits for one byte on stdin, then exits with the status it was given
_WAITER = [sys.executable, "-c", "import os, sys; os.read(0, 1); sys.exit(int(sys.argv[1]))"]


def _waiter(tmp_path: Path, status: int) -> tuple[PopenWorker, int]:
    """A worker that exits with ``status`` once a byte is written to the returned fd."""
    r, w = os.pipe()
    popen = subprocess.Popen([*_WAITER, str(status)], stdin=r, stdout=subprocess.DEVNULL,
                             start_new_session=True)
    os.close(r)
    return PopenWorker(popen, 0), w


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The timeouts ``Popen.wait`` was called with."""
    seen: list[float | None] = []
    real = subprocess.Popen.wait

    def wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        seen.append(timeout)
        return real(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    return seen


def test_a_wait_with_a_limit_sleeps_on_the_pidfd_not_in_popens_poll_loop(
        tmp_path: Path, waits: list[float | None]) -> None:
    worker, go = _waiter(tmp_path, 3)
    try:
        assert worker._reap(0.05) is None  # still running: the limit passes, nothing reaped
        assert worker.popen.returncode is None
        os.write(go, b"x")
        assert worker._reap(60.0) == 3  # returns when it exits, long before the minute
    finally:
        os.close(go)
        worker.popen.kill()
        worker.popen.wait()
    # Popen.wait was only used to collect an exit already known, never to poll with a limit
    assert waits and all(t is None for t in waits[:-1])


def test_without_pidfds_the_wait_falls_back_to_popen(
        tmp_path: Path, waits: list[float | None], monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", refused)
    worker, go = _waiter(tmp_path, 0)
    try:
        assert worker._reap(0.05) is None
        os.write(go, b"x")
        assert worker._reap(60.0) == 0
    finally:
        os.close(go)
    assert 0.05 in waits and 60.0 in waits


def test_a_killed_spawned_worker_is_reaped_with_its_signal(tmp_path: Path) -> None:
    worker = spawn([sys.executable, "-c", "import time; time.sleep(600)"], env={},
                   cwd=str(tmp_path), stdout=str(tmp_path / "out"), stderr=str(tmp_path / "err"),
                   index=0)
    assert not worker.exited()
    worker.kill()
    info = worker.wait(60.0)
    assert info.returncode == -9 and info.killed_by_harness and not info.timed_out
    assert worker.exited()
