"""The story engine: a scenario's story interpreted step by step in real processes
(``engine``), its workers (``workers``), the kill controller (``controller``) and the
storage faults the harness injects (``storage_faults``).

It may import ``plan`` (today's tables as steps), ``judge`` (the trace and the read-only
readers of evidence), ``launch``, ``services``, ``sandbox``, ``targets`` and ``model``;
never ``run`` or a face.
"""
