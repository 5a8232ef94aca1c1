"""Grading an implementation against a rubric: the grade (``grade``), the rubric as data
and from a file (``rubric``, ``rubric_file``), the preflight, the three files a grade
writes (``output``) through a write path that cannot be redirected (``safe_io``), re-runs
of noise (``retry``) and grading through a target (``targets``).

A face: it may import ``run``, ``plan``, ``judge``, ``reports``, ``launch``, ``sandbox``,
``services``, ``targets`` and ``model``; never ``cli``, ``plugin`` or ``explore``.
"""
