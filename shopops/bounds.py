"""Bounds shared by ``shopops.validators`` and ``shopops.failpoints``, in a leaf module so
that neither imports the other back (``docs/design.md``, "Layering": no import cycles).
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
