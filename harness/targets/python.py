"""The Python target: a hand-written loop given as functions ``module:function``.

Each function takes a ``TargetContext`` and is run by ``harness.targets.worker`` in a fresh
worker process, with the target's folder first on ``sys.path`` and the harness's boundary
kill points installed before the module is imported. ``start`` and ``resume`` are
required; ``decide`` (deliver the human's decision) and ``history`` (report durable state)
are optional: without ``history`` every check needing the target's state is not
applicable. The type itself is frozen data in ``harness.model.target``.
"""

from __future__ import annotations

from harness.model.target import PythonTarget

__all__ = ["PythonTarget"]
