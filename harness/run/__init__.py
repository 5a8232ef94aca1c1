"""Running executions: one execution, drive → collect → check → judge (``execution``),
and a whole run of many in parallel (``runner``).

It may import ``story``, ``plan``, ``judge``, ``launch``, ``services``, ``sandbox``,
``targets`` and ``model``; never a face (``cli``, ``plugin``, ``explore``, ``grading``) or
``reports``.
"""
