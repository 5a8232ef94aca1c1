"""The representative sample of a double-crash matrix that the project's default test run
keeps (the root ``conftest.py``; the whole matrix with ``--crash-soak``, by naming the file,
or with ``shopops-chaos run``, which always runs it whole).

A double-crash matrix (``double = true``, ``harness.plan.matrix.double_kill_plans``) is every
single kill — the rows — and, for each, a second kill at every point its recovery reaches:
the columns are the second kill's labels. Its executions repeat one another exhaustively
(O-1001's is about 265). The sample keeps

- every single kill (each row's first kill on its own), and
- pairs that cover every row (each first kill, with its hit count) and every column (each
  second kill's label) at least once: for each row in plan order, the pair whose second
  label has been covered least so far (ties: plan order); then, for any column still
  uncovered, its first pair in plan order.

So a loop that breaks only after some first kill, or only when killed again at some label
during a recovery, still fails a sampled item — unless it breaks only for one particular
pair, which is what the whole matrix (``--crash-soak``) is for. Pure and deterministic:
every pytest-xdist worker computes the same sample from the same collection.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

__all__ = ["double_sample"]


def double_sample(schedule_ids: Iterable[str]) -> list[str]:
    """The sampled schedule ids of one double-crash matrix, in plan order.

    Args:
        schedule_ids: the matrix's schedule ids as the plan lists them (``"no-kill"``, a
            single kill ``"t4.parked"`` or ``"t6.request_leaving#2"``, a pair
            ``"t3.checkpoint_saved>t6.gateway_accepted"``); a schedule of three or more
            kills counts as a pair of its first kill and its last.

    Returns:
        the ids kept: every id without ``>``, and the covering pairs (see the module).
    """
    ids = list(dict.fromkeys(schedule_ids))
    rows: dict[str, list[str]] = {}
    for sid in ids:
        if ">" in sid:
            rows.setdefault(sid.split(">", 1)[0], []).append(sid)
    covered: Counter[str] = Counter()
    chosen: set[str] = set()
    for pairs in rows.values():
        pick = min(pairs, key=lambda sid: covered[_column(sid)])  # min keeps the first
        chosen.add(pick)
        covered[_column(pick)] += 1
    for sid in ids:
        if ">" in sid and covered[_column(sid)] == 0:
            chosen.add(sid)
            covered[_column(sid)] += 1
    return [sid for sid in ids if ">" not in sid or sid in chosen]


def _column(schedule_id: str) -> str:
    """The second (last) kill's label, without its hit count."""
    return schedule_id.rsplit(">", 1)[1].split("#", 1)[0]
