"""``report.html`` and the views behind it, on real executions (the two runs of
``test_reports.py``'s fixture idea, built here once: ~2 s) and on hostile text."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.model import Counts, CrashSchedule, EvidenceSource, Gap
from harness.plan.scenario import Scenario
from harness.reports.html import render
from harness.reports.text import visible, visible_line
from harness.reports.view import (
    DeliveryOutcome,
    delivery_outcome,
    double_grids,
    lanes,
    ordered,
    scenario_rows,
    single_grid,
)
from harness.run.execution import ExecutionPlan, execute
from harness.run.runner import RunResult

HOSTILE = ('<script>document.documentElement.setAttribute("data-pwned","1")</script>'
           '<img src=x onerror="document.title=\'pwned\'">\x1b[31m')


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    work = tmp_path_factory.mktemp("html")
    keys_off = Scenario(name="keys-off", path=Path("scenarios/keys-off.toml"),
                        idempotency_keys=False, description=HOSTILE)
    base = execute(ExecutionPlan(Scenario(name="o1001"), CrashSchedule()), work / "a")
    dup = execute(ExecutionPlan(keys_off, CrashSchedule.parse("t6.gateway_accepted")),
                  work / "b")
    assert (base.verdict, dup.verdict) == ("pass", "fail"), (base.reasons, dup.reasons)
    worker = dataclasses.replace(dup.evidence.workers[-1], stderr_tail=HOSTILE)
    dup = dataclasses.replace(dup, evidence=dataclasses.replace(
        dup.evidence, workers=(*dup.evidence.workers[:-1], worker)),
        reasons=(*dup.reasons, f"stderr: {HOSTILE}"))
    double = dataclasses.replace(base, plan=ExecutionPlan(
        Scenario(name="o1001"), CrashSchedule.parse("t4.parked>t6.gateway_accepted")))
    unknown = dataclasses.replace(base, plan=ExecutionPlan(
        Scenario(name="o1001"), CrashSchedule.parse("t6.request_leaving#2")),
        verdict="unknown", reasons=("kill point t6.request_leaving#2 was never reached",))
    return RunResult("20260719T000000Z-1", work, results=[base, dup, double, unknown],
                     started_at="2026-07-19T00:00:00+00:00", elapsed_s=3.0)


class _Page(HTMLParser):
    """Elements and text of a page, as a browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def test_visible_spells_out_controls_and_keeps_text():
    assert visible("a\x1b[2Jb\tc\nd") == "a\\x1b[2Jb\tc\nd"
    assert visible("\u202eevil\x00\x7f\x9b") == "\\u202eevil\\x00\\x7f\\x9b"
    assert visible_line("a\nb\tc\r") == "a\\x0ab\\x09c\\x0d"
    assert visible("plain Grüße ✓") == "plain Grüße ✓"


def test_delivery_outcomes(run):
    base, dup, _, _ = run.results
    assert delivery_outcome(base) is DeliveryOutcome.AS_EXPECTED
    assert delivery_outcome(dup) is DeliveryOutcome.DUPLICATE
    none = dataclasses.replace(base, evidence=dataclasses.replace(
        base.evidence, gateway=dataclasses.replace(base.evidence.gateway, deliveries=()),
        expected_deliveries=0))
    assert delivery_outcome(none) is DeliveryOutcome.NONE_EXPECTED
    lost = dataclasses.replace(none, evidence=dataclasses.replace(none.evidence,
                                                                  expected_deliveries=1))
    assert delivery_outcome(lost) is DeliveryOutcome.LOST
    # cut short or with gaps, zero deliveries is not known to be a loss, unless it failed
    cut = dataclasses.replace(lost, evidence=dataclasses.replace(
        lost.evidence, errors=("worker 1 (resume) passed its 30 s deadline",)))
    gap = dataclasses.replace(lost, evidence=dataclasses.replace(
        lost.evidence, gaps=(Gap(EvidenceSource.GATEWAY, "gateway log unreadable"),)))
    for incomplete in (cut, gap, lost):
        assert delivery_outcome(dataclasses.replace(incomplete, verdict="unknown")) \
            is DeliveryOutcome.UNKNOWN
        assert delivery_outcome(dataclasses.replace(incomplete, verdict="fail")) \
            is DeliveryOutcome.LOST
    assert delivery_outcome(cut) is delivery_outcome(gap) is DeliveryOutcome.UNKNOWN
    assert delivery_outcome(dataclasses.replace(base, evidence=dataclasses.replace(
        base.evidence, expected_deliveries=0))) is DeliveryOutcome.UNEXPECTED


def test_views_order_and_grids(run):
    assert [i for i, _ in ordered(run.results)] == [1, 3, 0, 2]  # fail, unknown, passes
    rows = {s.name: s for s in scenario_rows(run)}
    assert rows["o1001"].counts == Counts(passed=2, failed=0, unknown=1)
    assert rows["o1001"].verdict == "unknown" and rows["keys-off"].verdict == "fail"
    assert rows["o1001"].bad == ((3, "t6.request_leaving#2", "unknown"),)
    grid = single_grid(run)
    assert grid.columns == ("no-kill", "t6.request_leaving#2", "t6.gateway_accepted")
    cells = dict(grid.rows)
    assert [c.verdict if c else None for c in cells["o1001"]] == ["pass", "unknown", None]
    assert [c.verdict if c else None for c in cells["keys-off"]] == [None, None, "fail"]
    [double] = double_grids(run)
    assert (double.scenario, double.columns) == ("o1001", ("t6.gateway_accepted",))
    assert double.rows[0][0] == "t4.parked" and double.rows[0][1][0].index == 2


def test_lanes_put_kills_and_deliveries_on_the_worker_that_had_them(run):
    dup = run.results[1]
    total, found = lanes(dup)
    assert total > 0
    names = [lane.name for lane in found]
    assert names[:3] == ["w0 start", "w1 resume", "w2 resume"] and "human" in names
    by_name = {lane.name: lane for lane in found}
    assert [m.kind for m in by_name["w1 resume"].marks].count("kill") == 1
    assert sum(m.kind == "delivery" for lane in found for m in lane.marks) == 2
    assert any(m.kind == "approve" for m in by_name["human"].marks)
    assert all(0 <= m.pct <= 100 for lane in found for m in lane.marks)


def test_page_is_self_contained_and_escapes_what_others_control(run):
    text = render(run)
    page = _parse(text)
    # verdict first: the first heading of the page is the run's verdict
    h1 = text.index("<h1>")
    assert text[h1:text.index("</h1>")].endswith("FAIL") and h1 < text.index("<table")
    # nothing from the network: no src/href to another place, no external stylesheet
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            value = attrs.get(name)
            assert value is None or value.startswith("#"), (tag, attrs)
        assert tag != "link", attrs
    csp = next(a["content"] for t, a in page.tags if a.get("http-equiv") ==
               "Content-Security-Policy")
    assert "default-src 'none'" in (csp or "") and "'sha256-" in (csp or "")
    # exactly the page's own script; the hostile markup is text, not elements
    assert len(page.scripts) == 1 and "data-pwned" not in page.scripts[0]
    assert not [a for t, a in page.tags if t == "img" or "onerror" in a]
    assert "data-pwned" in "".join(page.text)  # shown, as text
    assert "\x1b" not in text and "\\x1b[31m" in text
    # a failing cell links to its execution, which has a timeline and the replay command
    cell = re.search(r'<td class="c v-fail"[^>]*><a href="#x(\d+)"', text)
    assert cell and cell[1] == "1"
    section = text[text.index('id="x1"'):text.index('id="x3"')]
    assert 'class="tl"' in section and "shopops-chaos run scenarios/keys-off.toml" in section
    assert "exactly_one_delivery" in section


def test_interrupted_run_says_so(run):
    text = render(dataclasses.replace(run, interrupted=True, results=run.results[:1]))
    assert "UNKNOWN — INTERRUPTED" in text and "The run was interrupted" in text


def test_grade_page_renders_with_the_same_style():
    from harness.reports.html import render_grade

    text = render_grade(title="Grade: 5 / 10", score=5, max_score=10,
                        implementation="submission <b>x</b>", output="o",
                        tests=[{"name": "Checklist 1", "score": 0, "max_score": 5,
                                "output": "broke <script>x</script>"},
                               {"name": "Checklist 2", "score": 5, "max_score": 5,
                                "output": ""}])
    page = _parse(text)
    assert len(page.scripts) == 1 and "<script>x</script>" not in text
    assert "&lt;script&gt;x&lt;/script&gt;" in text and "Grade: 5 / 10" in text
    assert not [t for t, _ in page.tags if t == "b"]
