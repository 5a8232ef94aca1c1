"""Judging one execution from evidence the harness holds: gathering it (``evidence``: the
trace and read-only readers of the files), the checks (``checks``), the verdict
(``verdict``) and the one call that goes evidence → checks → verdict (``assess``).

It may import ``services`` (to read the gateway's ledger) and ``model``; never ``run``,
``story``, ``plan`` or a face.
"""
