"""What to run, as data: scenario files (``scenario``, ``story_parse``, written back by
``scenario_toml``), today's tables as story steps (``story_plan``), the kill matrix learned
from a trace run (``matrix``) and its cut into shards (``shard``).

A plan is data: it may import ``targets`` (the ``[target]`` table) and ``model``; never
``run``, ``story``, ``judge``'s checks or a face.
"""
