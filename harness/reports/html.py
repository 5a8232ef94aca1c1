"""``report.html``: the page a person opens — one self-contained file.

Rendered with jinja2 (autoescape on for every template: any text an implementation or a
scenario controls is HTML-escaped by the engine, never by string concatenation, and its
control characters are made visible by the ``visible`` filter). The CSS and the small
filter script are inlined from package data (``templates/``), nothing is fetched from the
network, and a Content-Security-Policy lets only that script run (by its SHA-256, CSP
Level 2 ``'sha256-…'`` source), so even markup that slipped through could not execute.
The page works from ``file://`` and as a CI artefact.

Layout: the verdict first; per-scenario summary; a grid of scenarios × kill points
coloured by verdict (and one first × second kill grid per double-crash scenario); every
execution, failures and unknowns first, with reasons, failing checks with their evidence,
the replay command and the trace drawn as worker lanes; deliveries other than one.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import markupsafe

from harness.model import EventKind, ItemScore
from harness.reports.base import (
    case_keys,
    failing_checks,
    is_expected,
    power_note,
    undecided_checks,
    workdir_text,
    write_atomic,
)
from harness.reports.text import visible
from harness.reports.view import (
    NO_KEY,
    OUTCOME_TEXT,
    DeliveryOutcome,
    delivery_outcome,
    double_grids,
    lanes,
    multi_kills,
    ordered,
    scenario_rows,
    single_grid,
)

if TYPE_CHECKING:
    from harness.model import ExecutionResult, RunResult

__all__ = ["Html", "environment", "render", "render_grade", "render_page", "write_grade_page"]


@functools.cache
def environment() -> jinja2.Environment:
    """The jinja2 environment over the package's ``templates/`` (autoescape on for every
    template, undefined names are errors, a ``visible`` filter)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("harness.reports", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["visible"] = _visible
    return env


def _visible(value: Any) -> Any:
    """The ``visible`` filter: keeps already-escaped ``Markup`` as markup (the escapes it
    adds are plain ASCII letters and backslashes), so nothing is escaped twice."""
    if isinstance(value, markupsafe.Markup):
        return markupsafe.Markup(visible(str.__str__(value)))
    return visible(value)


def _asset(name: str) -> str:
    loader = environment().loader
    assert loader is not None
    source, _, _ = loader.get_source(environment(), name)
    return source


def render_page(template: str, **context: Any) -> str:
    """Render one of the package's page templates (``report.html.j2``, ``grade.html.j2``)
    with the shared CSS, script and Content-Security-Policy.

    Raises:
        jinja2.TemplateError: a template or a context name is wrong (a harness bug).
    """
    js = _asset("report.js")
    digest = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    return environment().get_template(template).render(
        css=_asset("report.css"), js=markupsafe.Markup(js),
        script_hash=f"sha256-{digest}", **context)


def _who(e: Any, roles: Mapping[int, str]) -> str:
    if e.worker is not None:
        return f"w{e.worker} {roles.get(e.worker, '?')}"
    return "human" if e.kind in (EventKind.APPROVE, EventKind.HUMAN) else "harness"


def _execution(index: int, r: ExecutionResult) -> dict[str, Any]:
    ev = r.evidence
    roles = {w.index: w.role for w in ev.workers}
    total, lane_list = lanes(r)
    return {
        "index": index, "id": r.plan.id, "scenario": r.plan.scenario.name,
        "description": r.plan.scenario.description, "verdict": r.verdict,
        "reasons": list(r.reasons), "replay": r.plan.replay, "elapsed_s": r.elapsed_s,
        "power": power_note(r).strip(),
        "failing": [{"check_id": c.check_id, "detail": c.detail, "evidence": list(c.evidence),
                     "expected": is_expected(r, c.check_id)} for c in failing_checks(r)],
        "undecided": [(c.check_id, c.undecided) for c in undecided_checks(r)],
        "deliveries": ev.deliveries, "outcome": OUTCOME_TEXT[delivery_outcome(r)],
        "idem_keys": [NO_KEY if k is None else k for k in case_keys(r)] or ["none sent"],
        "workdir": workdir_text(r), "workers": ev.workers, "total_ms": total, "lanes": lane_list,
        "equivalent_to": r.equivalent_to,
        "events": [{"t_ms": e.t_ms, "who": _who(e, roles), "kind": e.kind,
                    "label": e.label, "detail": e.detail} for e in ev.events],
    }


_DELIVERY_SECTIONS = (
    ("Duplicate sends (two or more deliveries)", DeliveryOutcome.DUPLICATE),
    ("Lost sends (no delivery where one was expected)", DeliveryOutcome.LOST),
    ("No delivery, not known to be lost (the execution was cut short or its evidence has "
     "gaps)", DeliveryOutcome.UNKNOWN),
    ("Sent although the scenario expects no delivery", DeliveryOutcome.UNEXPECTED),
    ("No delivery, as the scenario expects (rejections, refusals)",
     DeliveryOutcome.NONE_EXPECTED),
)


def render(run: RunResult) -> str:
    """The whole page as HTML text (deterministic for a given run)."""
    verdict = run.verdict  # an interrupted run is never a pass (RunResult.verdict)
    indexed = list(enumerate(run.results))
    deliveries = [(title, [(i, r) for i, r in indexed if delivery_outcome(r) is kind])
                  for title, kind in _DELIVERY_SECTIONS]
    return render_page(
        "report.html.j2", run=run, verdict=verdict, counts=run.counts.as_dict(),
        scenarios=scenario_rows(run), single=single_grid(run), doubles=double_grids(run),
        multi=multi_kills(run), executions=[_execution(i, r) for i, r in ordered(run.results)],
        deliveries=deliveries)


def render_grade(*, title: str, score: float, max_score: float, implementation: str,
                 output: str, tests: Sequence[Any], run_report: str | None = None) -> str:
    """The student-facing grading page, in the same style as ``report.html``.

    Args:
        title: the page's heading (``"Grade: 95 / 110"``).
        score, max_score: the totals.
        implementation: what was graded (``Sut.describe()``).
        output: the top-level message.
        tests: rubric items with ``name``, ``score``, ``max_score``, ``output`` (attributes
            or mapping keys: ``harness.grading.grade.GradedTest`` or dicts).
        run_report: a relative link to the run's ``report.html``, if any.
    """
    def item(t: Any) -> dict[str, Any]:
        def get(key: str) -> Any:
            return t[key] if isinstance(t, Mapping) else getattr(t, key)

        return {"name": get("name"), "output": get("output"),
                "points": ItemScore(float(get("score")), float(get("max_score")))}

    return render_page("grade.html.j2", title=title, score=score, max_score=max_score,
                       implementation=implementation, output=output,
                       tests=[item(t) for t in tests], run_report=run_report)


def write_grade_page(path: Path, **fields: Any) -> Path:
    """Write ``render_grade(**fields)`` to ``path`` atomically; return ``path``."""
    return write_atomic(path, render_grade(**fields))


class Html:
    """Writes ``report.html``."""

    name = "html"
    filename = "report.html"

    def write(self, run: RunResult, out_dir: Path) -> Path:
        """Write ``out_dir/report.html``; return its path."""
        return write_atomic(out_dir / self.filename, render(run))
