"""Property-based exploration of crash schedules with Hypothesis: the search space of one
scenario (``space``) and the search, its shrinking and the replay file (``explorer``).

A face: it may import ``run``, ``plan``, ``judge``, ``reports``, ``launch`` and ``model``;
never ``cli``, ``grading`` or ``plugin``.
"""
