"""The implementation under test: the reference ``shopops`` or a student's.

The adapter contract (README, "Grading"): a folder that contains a package (``shopops`` by
default) runnable as ``python -m shopops`` with the reference CLI's ``run`` and ``migrate``
commands and options, exiting 0 on success and 1 with ``shopops: error: <ErrorName>: …``
as the last stderr line when it refuses (``CheckpointCorrupt``, ``ApprovalRefused``,
``LeaseHeld``, …). Calls to ``shopops.failpoints.failpoint(label)`` add kill points; without
them the harness still kills at the points it owns (the gateway's ``t6.gateway_accepted``).

A foreign implementation is untrusted: each worker starts through ``harness.sut_boot``,
which caps its memory, file size and CPU time before importing a line of it, in its own
process with the harness's deadline; the verdict only ever comes from evidence the
harness reads itself.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import shopops

#: The folder that holds the reference ``shopops`` and ``harness`` packages.
SRC = str(Path(shopops.__file__).resolve().parent.parent)


@dataclass(frozen=True)
class Sut:
    """An implementation to run.

    Attributes:
        path: the folder holding the package (first on ``PYTHONPATH``), or ``None`` for the
            reference implementation.
        module: the package name run as ``python -m MODULE``.
        memory_mib, file_size_mib, cpu_s: limits for a foreign worker (address space in
            MiB, largest file it may write in MiB, CPU seconds).
        trusted: our own variant (a mutant): started like the reference, without limits,
            so a fork server preloaded from ``path`` may fork it.
    """

    path: Path | None = None
    module: str = "shopops"
    memory_mib: int = 1024
    file_size_mib: int = 64
    cpu_s: int = 60
    trusted: bool = False

    @property
    def foreign(self) -> bool:
        """True for anything but the reference."""
        return self.path is not None

    def argv(self, *args: str) -> list[str]:
        """The command line of one worker running ``MODULE ARGS``."""
        if not self.foreign or self.trusted:
            return [sys.executable, "-m", self.module, *args]
        return [sys.executable, "-m", "harness.sut_boot", str(self.memory_mib),
                str(self.file_size_mib), str(self.cpu_s), self.module, *args]

    def pythonpath(self, inherited: str | None) -> str:
        """``PYTHONPATH`` for a worker: the implementation's folder first, then the
        harness's (for ``harness.sut_boot``), then what was inherited."""
        first = [str(self.path.resolve())] if self.path is not None else []
        return os.pathsep.join(p for p in (*first, SRC, inherited) if p)

    def describe(self) -> str:
        """``reference`` or the folder."""
        return "reference" if self.path is None else str(self.path)


REFERENCE = Sut()
