"""A short Markdown summary for CI: appended to ``$GITHUB_STEP_SUMMARY`` when it is set.

GitHub Actions shows the file named by ``GITHUB_STEP_SUMMARY`` on the job's summary page
and expects steps to *append* to it ("Adding a job summary", GitHub Actions docs); it
renders GitHub-flavoured Markdown and caps a step's summary at 1 MiB, so this stays short:
the verdict, one row per scenario that did not pass, and the first failures and unknowns
with their replay commands. Nothing is written when the variable is unset or empty.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from harness.model import Verdict
from harness.reports.text import visible_line
from harness.reports.view import ordered, scenario_rows

if TYPE_CHECKING:
    from harness.model import RunResult

__all__ = ["ENV", "check_target", "render", "write_step_summary"]

ENV = "GITHUB_STEP_SUMMARY"
#: Failures and unknowns listed with their replay command (the rest are in report.md).
MAX_LISTED = 10


def render(run: RunResult, report_dir: Path | None = None) -> str:
    """The summary as Markdown (a few lines for a green run)."""
    state = " (interrupted)" if run.interrupted else ""
    out = [f"### shopops-chaos: {run.verdict.upper()}{state}", "",
           f"{run.counts.sentence()} — "
           f"{len(run.results)} executions, {run.elapsed_s:.1f} s.", ""]
    if run.interrupted:
        out += ["The run was interrupted: its verdict is unknown.", ""]
    out += [f"**Not a full run:** {visible_line(line).replace('<', '&lt;')}.  "
            for line in run.shortfall()]
    out += [""] if run.shortfall() else []
    bad = [s for s in scenario_rows(run) if s.verdict is not Verdict.PASS]
    if bad:
        out += ["| scenario | verdict | fail | unknown | pass |", "|---|---|---|---|---|"]
        out += [f"| `{s.name}` | {s.verdict} | {s.counts.failed} | {s.counts.unknown} "
                f"| {s.counts.passed} |" for s in bad]
        out.append("")
    listed = [r for _, r in ordered(run.results) if r.verdict is not Verdict.PASS]
    for r in listed[:MAX_LISTED]:
        first = visible_line(r.reasons[0]).replace("<", "&lt;") if r.reasons else ""
        out.append(f"- **{r.verdict}** `{r.plan.id}`: {first}  ")
        out.append(f"  replay: `{visible_line(r.plan.replay)}`")
    if len(listed) > MAX_LISTED:
        out.append(f"- … and {len(listed) - MAX_LISTED} more")
    if report_dir is not None:
        out += ["", f"Reports: `{report_dir}` (report.html, report.md, junit.xml)."]
    return "\n".join(out).rstrip("\n") + "\n\n"


def check_target(env: Mapping[str, str] | None = None) -> None:
    """Refuse, before a run starts, a ``$GITHUB_STEP_SUMMARY`` the summary could not be
    appended to: a folder, a file in a folder that does not exist, a file not writable.
    Unset or empty is fine (no summary). GitHub Actions sets it to a file it created
    (its docs, "Adding a job summary").

    Raises:
        ValueError: naming the variable, its value and what is allowed.
    """
    target = (os.environ if env is None else env).get(ENV, "")
    if not target:
        return
    path = Path(target)
    why = ("is a folder" if path.is_dir() else
           "is not in an existing folder" if not path.parent.is_dir() else
           "is not writable" if path.exists() and not os.access(path, os.W_OK) else None)
    if why is not None:
        raise ValueError(f"environment variable {ENV}={target!r}: {why}; allowed: unset, "
                         "empty, or a file the run may append its summary to")


def write_step_summary(run: RunResult, report_dir: Path | None = None,
                       env: Mapping[str, str] | None = None) -> Path | None:
    """Append ``render(run)`` to the file ``$GITHUB_STEP_SUMMARY`` names.

    Returns:
        the file's path, or ``None`` when the variable is unset or empty.

    Raises:
        OSError: the file cannot be opened for appending.
    """
    target = (os.environ if env is None else env).get(ENV, "")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(render(run, report_dir))
    return path
