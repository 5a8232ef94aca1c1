"""Asked once: the human is asked once per decision — per case, gate and draft — however
often the loop crashed and came back (Chapter 8: "the human was asked twice" is a failure
of a durable loop, as much as a second email). Counted by the harness from the approval
records it holds, so it judges every loop that asks through the harness's approval
service, whatever it is built on.
"""

from __future__ import annotations

from collections import defaultdict

from harness.model import CheckId, CheckResult, Evidence

__all__ = ["asked_once"]


def asked_once(ev: Evidence) -> CheckResult:
    """Each (gate, digest) of the case was asked for once: the approval records hold one
    request for it (a loop asking again after a crash, with a new request, leaves two —
    one the human may already have decided). A new draft (a redraft after a rejection
    with feedback) is a new decision and is asked anew.

    Args:
        ev: the execution's evidence (reads the approval records only).

    Returns:
        ``CheckResult(CheckId.ASKED_ONCE, ...)``, listing each decision asked more than
        once with its requests and their statuses.
    """
    asks: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in ev.approval_requests:
        asks[(r.gate, r.draft_digest)].append(f"{r.request_id} ({r.status})")
    lines = [f"{gate}: draft {digest[:12]} asked {len(ids)} time(s): {', '.join(ids)}"
             for (gate, digest), ids in asks.items()]
    twice = [(key, ids) for key, ids in asks.items() if len(ids) > 1]
    if twice:
        (gate, digest), ids = twice[0]
        return CheckResult(CheckId.ASKED_ONCE, False,
                           f"the human was asked {len(ids)} times for one decision (gate "
                           f"{gate}, draft {digest[:12]}): {', '.join(ids)}", tuple(lines))
    return CheckResult(CheckId.ASKED_ONCE, True,
                       f"{len(asks)} decision(s), each asked once" if asks
                       else "the human was never asked", tuple(lines))
