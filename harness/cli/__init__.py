"""The ``shopops-chaos`` command line: ``main`` (every sub-command), ``args`` (its parser
and option types), ``merge`` (shard folders back into one run).

A face at the top: it may import every other package of the harness — ``plugin``,
``explore``, ``grading``, ``reports``, ``run``, ``story``, ``plan``, ``judge``, ``targets``,
``launch``, ``forkserver``, ``services``, ``sandbox`` and ``model``; nothing imports it but
``harness.__main__``.
"""
