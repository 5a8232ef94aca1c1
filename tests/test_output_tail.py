"""``harness.launch.processes.output_tail``: what the harness reads back of a worker's output file,
which the worker may have replaced or filled (never trust the code under test)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from harness.launch.processes import OUTPUT_TAIL_BYTES, output_tail


def test_the_last_lines_of_a_regular_file(tmp_path: Path) -> None:
    f = tmp_path / "worker-0.err"
    f.write_bytes(b"".join(b"line %d\n" % i for i in range(40)) + b"bad \xff byte\n")
    assert output_tail(f, 2) == "line 39\nbad \ufffd byte"
    assert output_tail(f).startswith("line 0\n")


def test_a_huge_file_is_read_only_at_its_end(tmp_path: Path) -> None:
    f = tmp_path / "worker-0.err"
    with open(f, "wb") as out:  # 1 GiB, sparse: a worker without a file-size limit
        out.truncate(1 << 30)
        out.seek(0, os.SEEK_END)
        out.write(b"Traceback (most recent call last):\nValueError: the end\n")
    text = output_tail(f)
    assert len(text.encode()) <= OUTPUT_TAIL_BYTES
    assert text.endswith("ValueError: the end\n")
    assert output_tail(f, 1) == "ValueError: the end"


def test_a_fifo_symlink_folder_or_missing_file_reads_as_nothing_without_blocking(
        tmp_path: Path) -> None:
    real = tmp_path / "real.err"
    real.write_text("secret of another file\n")
    os.mkfifo(tmp_path / "fifo.err")
    os.symlink(real, tmp_path / "link.err")
    (tmp_path / "dir.err").mkdir()
    got: dict[str, str] = {}

    def read_all() -> None:
        for name in ("fifo.err", "link.err", "dir.err", "missing.err"):
            got[name] = output_tail(tmp_path / name, 15)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), f"output_tail blocked after {sorted(got)}"
    assert got == {"fifo.err": "", "link.err": "", "dir.err": "", "missing.err": ""}
