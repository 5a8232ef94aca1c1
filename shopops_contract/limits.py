"""The contract's limits: the bounds the harness enforces on a loop under test and on its
own inputs, shared by the reference loop (``shopops.validators``, ``shopops.failpoints``)
and the harness (kill points, shards, the evidence it reads). Imports nothing.
"""

from __future__ import annotations

#: Seconds in a day: the longest worker timeout, lease, or failpoint sleep that means anything.
DAY_S = 86_400
#: ``#N`` of a kill point: a label hit more often than this in one execution is a loop bug.
MAX_OCCURRENCE = 1000
#: The longest failpoint ``sleep``, in milliseconds: a day.
MAX_SLEEP_MS = DAY_S * 1000

#: At most this many checkpoint rows of a case are read by the harness (as evidence, or to
#: corrupt the latest): the reference loop writes about ten; an implementation that wrote
#: 90,000 held a grade for minutes at ~1.9 GB. More is a gap: the checks over the history
#: cannot be decided (``shopops.errors.HistoryTooLong``).
MAX_HISTORY_ROWS = 10_000
#: Kills in one crash schedule: the explorer draws up to 3; a story may need more (a
#: recovery killed again and again). An execution folder named after eight of the longest
#: labels would pass NAME_MAX: ``ExecutionPlan.dirname`` shortens such a name with a digest.
MAX_KILLS = 8
#: The longest execution folder name the harness makes (``ExecutionPlan.dirname``): NAME_MAX
#: (255) less room for the prefixes the runner and the explorer add (``0001--``, ``replay--``).
MAX_DIRNAME = 200
#: Shards a run may be cut into (``--shard I/N``, ``SHOPOPS_SHARD``).
MAX_SHARDS = 1000

__all__ = ["DAY_S", "MAX_DIRNAME", "MAX_HISTORY_ROWS", "MAX_KILLS", "MAX_OCCURRENCE", "MAX_SHARDS",
           "MAX_SLEEP_MS"]
