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

from harness.model.plan import BOOT, REFERENCE, SRC, Sut

__all__ = ["BOOT", "REFERENCE", "SRC", "Sut", "sealed_argv"]


def sealed_argv(argv: list[str], uid: int, code_dir: str) -> list[str]:
    """``argv`` from ``Sut.argv`` with the boot's uid and code folder filled in.

    Raises:
        ValueError: ``argv`` is not an untrusted worker's command line.
    """
    n = 1 + len(BOOT)
    if tuple(argv[1:n]) != BOOT or argv[n + 4:n + 6] != ["-1", "-"]:
        raise ValueError(f"not an untrusted worker's command line: {argv[:n + 6]}")
    return [*argv[:n + 4], str(uid), code_dir, *argv[n + 6:]]
