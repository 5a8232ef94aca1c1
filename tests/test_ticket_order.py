"""``ticket_consumed_first`` (issue 26): a ticket's consumption, as the approval service
recorded it into the trace, precedes the gateway request that delivered under it, as the
gateway recorded it. Pure: the good story of ``test_checks`` with the two services' events
placed around the delivering request."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from test_checks import KEY, TICKET_ID, evidence, good_specs

from harness.judge.checks.checklist import ticket_consumed_first
from harness.judge.checks.registry import run_checks
from harness.model import CheckId

CONSUMED = ("consumed", None, 2, f"key {KEY}")
REQUEST = ("request", None, 2, "status 201")


def ordered(*around: tuple[str, str | None, int | None, str]) -> Any:
    """The good story with ``around`` put just before worker 2's request leaves."""
    specs = good_specs()
    at = specs.index(("hit", "t6.request_leaving", 2, ""))
    specs[at + 1:at + 1] = list(around)
    evs = evidence(specs=specs).events
    fixed = tuple(replace(e, ref=TICKET_ID if e.kind == "consumed" else "1"
                          if e.kind == "request" else e.ref) for e in evs)
    return evidence(events=fixed)


def test_a_ticket_consumed_before_the_request_passes() -> None:
    res = ticket_consumed_first(ordered(CONSUMED, REQUEST))
    assert res.passed, res
    (line,) = res.evidence
    assert line.startswith(f"delivery dlv-000001: ticket {TICKET_ID} consumed at trace seq ")
    results = {r.check_id: r for r in run_checks(ordered(CONSUMED, REQUEST))}
    assert results[CheckId.TICKET_CONSUMED_FIRST].passed


def test_a_ticket_consumed_after_the_send_fails() -> None:
    res = ticket_consumed_first(ordered(REQUEST, CONSUMED))
    assert not res.passed
    assert "its request 1 reached the gateway at trace seq" in res.detail
    assert res.detail.endswith(f"ticket {TICKET_ID} was consumed only at trace seq "
                               f"{int(res.detail.split('trace seq ')[1].split(',')[0]) + 1}")


def test_a_ticket_the_service_never_saw_consumed_fails() -> None:
    """The ticket record says consumed (the store's file), but the service never bound it:
    a consumption the service did not see is no consumption before the send."""
    res = ticket_consumed_first(ordered(REQUEST))
    assert not res.passed
    assert res.detail.endswith("was consumed never, as the approval service saw it")
