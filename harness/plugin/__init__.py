"""The pytest plugin (entry point ``pytest11``): scenario files as items (``hooks``) and
the kill matrix learned once and cached on disk (``plan_cache``).

A face: it may import ``run``, ``plan``, ``judge``, ``reports``, ``launch``, ``services``
and ``model``; never ``cli``, ``grading`` or ``explore``.
"""
