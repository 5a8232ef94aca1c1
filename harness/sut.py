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

from harness.model.plan import REFERENCE, SRC, Sut

__all__ = ["REFERENCE", "SRC", "Sut"]
