"""Report writers: ``summary.json``, ``duplicates.json``, ``junit.xml``, ``report.md``.

One module per format, each a ``ReportWriter`` (``base.py``); ``write_reports`` writes them
all into a run folder and points ``<parent>/latest`` at it.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.model import RunResult
from harness.reports.base import ReportWriter
from harness.reports.duplicates_json import DuplicatesJson
from harness.reports.junit_xml import JunitXml
from harness.reports.markdown import Markdown
from harness.reports.summary_json import SummaryJson

__all__ = ["WRITERS", "ReportWriter", "point_latest", "write_reports"]

WRITERS: tuple[ReportWriter, ...] = (SummaryJson(), DuplicatesJson(), JunitXml(), Markdown())


def point_latest(out_dir: Path) -> Path:
    """Make ``out_dir.parent / "latest"`` a relative symlink to ``out_dir``, replaced
    atomically (a temp symlink, then ``os.replace``), so a reader never finds it missing.

    Raises:
        OSError: e.g. ``latest`` exists and is a real folder.
    """
    link = out_dir.parent / "latest"
    tmp = out_dir.parent / f".latest.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(out_dir, out_dir.parent), tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return link


def write_reports(run: RunResult, out_dir: Path) -> dict[str, Path]:
    """Write every report of ``WRITERS`` into ``out_dir`` (created if missing), then point
    ``out_dir.parent / "latest"`` at it.

    Returns:
        ``{writer.name: path}`` in ``WRITERS`` order (``summary``, ``duplicates``,
        ``junit``, ``markdown``).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {writer.name: writer.write(run, out_dir) for writer in WRITERS}
    point_latest(out_dir)
    return paths
