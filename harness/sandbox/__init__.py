"""Where executions' files live and who may touch them: a uid of its own per sealed
execution (``users``), the root-owned copy of an implementation (``code_copy``), the boot
of a sealed worker (``boot``) and the RAM-backed scratch area (``scratch``).

Plumbing at the bottom: it imports nothing of the harness outside itself.
"""
