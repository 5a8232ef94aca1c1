"""Targets: the durable loops the harness can drive (issue 11).

A target is started, resumed and told the human's decision through Python functions
(``module:function``) that the harness calls in a fresh worker process
(``harness.target_worker``), handed a ``TargetContext``. The reference loop stays the
default target and keeps its own command line (``harness.sut``).

- ``harness.targets.context``: ``TargetContext`` (what a target is handed) and
  ``TargetSpec`` (a scenario's ``[target]`` table, validated).
- ``harness.targets.extras``: which optional extra a framework target needs, and the clear
  error when it is missing.
"""
