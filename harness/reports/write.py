"""Writing a run's reports: ``write_reports`` writes every ``ReportWriter`` of ``WRITERS``
into a run folder, ``summary.json`` last, then (only then) points ``<parent>/latest`` at it;
``finish_run`` is what a finished run does with its folder.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.model import RunResult
from harness.reports.base import ReportWriter
from harness.reports.duplicates_json import DuplicatesJson
from harness.reports.html import Html
from harness.reports.junit_xml import JunitXml
from harness.reports.markdown import Markdown
from harness.reports.runs import (
    DEFAULT_KEEP_RUNS,
    is_complete,
    keep_killed,
    point_latest,
    prune_runs,
)
from harness.reports.step_summary import ENV, write_step_summary
from harness.reports.summary_json import SummaryJson

if TYPE_CHECKING:
    from harness.model import RunResult

__all__ = ["DEFAULT_KEEP_RUNS", "WRITERS", "ReportWriter", "finish_run", "is_complete",
           "point_latest", "prune_runs", "write_reports"]

#: In writing order: ``summary.json`` last, so its presence means the folder is complete.
WRITERS: tuple[ReportWriter, ...] = (DuplicatesJson(), JunitXml(), Markdown(), Html(),
                                     SummaryJson())


def write_reports(run: RunResult, out_dir: Path, *, latest: bool = True) -> dict[str, Path]:
    """Write every report of ``WRITERS`` into ``out_dir`` (created if missing), each
    atomically, ``summary.json`` last; then point ``out_dir.parent / "latest"`` at it
    (unless ``latest`` is false).

    Returns:
        ``{writer.name: path}``: ``duplicates``, ``junit``, ``markdown``, ``html``,
        ``summary``.

    Raises:
        OSError: a report could not be written (``latest`` is then left where it was).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {writer.name: writer.write(run, out_dir) for writer in WRITERS}
    if latest:
        point_latest(out_dir)
    return paths


def finish_run(run: RunResult, out_dir: Path, *, keep_runs: int = DEFAULT_KEEP_RUNS
               ) -> dict[str, Path]:
    """What a finished (or interrupted) ``run`` does with its folder: write the reports,
    move ``latest``, prune old runs to ``keep_runs``, and append the CI step summary when
    ``$GITHUB_STEP_SUMMARY`` is set (what it keeps of each execution was settled when the
    execution ended: ``execute(keep_databases=...)``).

    Returns:
        ``write_reports``'s answer, and ``incomplete``: the partial folder of a killed run
        this one kept as evidence (``keep_killed``), if it kept one.
    """
    paths = write_reports(run, out_dir)
    killed = keep_killed(out_dir.parent, current=out_dir)
    if killed is not None:  # a killed run's partial folder, kept as evidence
        paths["incomplete"] = killed
    prune_runs(out_dir.parent, keep_runs, current=out_dir)
    try:
        write_step_summary(run, out_dir)
    except OSError as exc:  # checked before the run (step_summary.check_target); the
        # run's own reports and exit status stand when it fails after all (disk full)
        print(f"shopops-chaos: warning: {ENV}: the step summary was not written: {exc}",
              file=sys.stderr)
    return paths
