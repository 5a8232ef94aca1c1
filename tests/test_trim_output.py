"""A reaped worker's output file is bounded on disk (``harness.launch.processes.trim_output``):
its beginning and end are kept, with a line saying what was cut."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.launch.processes import output_tail, trim_output

pytestmark = pytest.mark.io


def test_a_long_output_keeps_its_beginning_and_its_end(tmp_path: Path) -> None:
    path = tmp_path / "worker-0.err"
    body = b"".join(f"line {i:07d}\n".encode() for i in range(300_000))  # 3.6 MB
    path.write_bytes(b"FIRST\n" + body + b"Traceback: the last line\n")
    before = output_tail(path, 15)
    cut = trim_output(path, keep=64 * 1024)
    data = path.read_bytes()
    assert cut > 3_000_000 and len(data) < 64 * 1024 + 200
    assert data.startswith(b"FIRST\n") and data.endswith(b"Traceback: the last line\n")
    assert f"[... {cut} bytes cut by the harness".encode() in data
    assert output_tail(path, 15) == before  # the reports read the same tail


def test_a_short_output_and_what_is_no_file_are_left_alone(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_bytes(b"ok\n")
    assert trim_output(short, keep=1024) == 0 and short.read_bytes() == b"ok\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert trim_output(fifo, keep=1) == 0  # not opened for reading: no hang
    target = tmp_path / "target"
    target.write_bytes(b"x" * 4096)
    (tmp_path / "link").symlink_to(target)
    assert trim_output(tmp_path / "link", keep=10) == 0 and target.stat().st_size == 4096
