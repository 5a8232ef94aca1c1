"""The evidence readers fail closed on whatever a worker can put in place of a database
(issue 14's rule for the harness's own reading): each is a ``Gap`` with its reason, never a
harness error, never a hang, never "nothing was written"."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.evidence import read_approvals, read_checkpoints, read_gateway
from harness.model.kinds import EvidenceSource


def _garbage(p: Path) -> None:
    p.write_bytes(b"not SQLite at all " * 300)


def _folder(p: Path) -> None:
    p.mkdir()


def _loop(p: Path) -> None:
    os.symlink(p.name, p)


def _to_a_file(p: Path) -> None:
    os.symlink("/etc/passwd", p)


def _fifo(p: Path) -> None:
    os.mkfifo(p)


PLANTED: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbage": (_garbage, ""), "folder": (_folder, "is a folder"),
    "symlink-loop": (_loop, "is a symlink"), "symlink": (_to_a_file, "is a symlink"),
    "fifo": (_fifo, "is a FIFO"),
}
READERS = {
    "checkpoints.db": (lambda p: read_checkpoints(p, "case-O-1001")[-1],
                       EvidenceSource.CHECKPOINTS),
    "approvals.db": (lambda p: read_approvals(p, "case-O-1001")[-1], EvidenceSource.APPROVALS),
    "gateway.db": (lambda p: read_gateway(p)[-1], EvidenceSource.GATEWAY),
}


@pytest.mark.parametrize("planted", list(PLANTED))
@pytest.mark.parametrize("name", list(READERS))
def test_a_planted_file_is_a_gap_with_its_reason(name: str, planted: str,
                                                 tmp_path: Path) -> None:
    make, reason = PLANTED[planted]
    read, source = READERS[name]
    db = tmp_path / name
    make(db)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(read(db)), daemon=True)
    reader.start()
    reader.join(timeout=30)  # a FIFO opened for reading would block until a writer came
    assert not reader.is_alive(), f"reading a planted {planted} {name} hangs the harness"
    (gap,) = got
    assert gap is not None, f"a planted {planted} {name} read as nothing written"
    assert gap.source is source and str(db) in gap.reason and reason in gap.reason, gap
