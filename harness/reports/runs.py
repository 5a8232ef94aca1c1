"""Run folders that stay complete: ``latest``, pruning old runs, dropping passing databases.

The life of ``reports/<run-id>/``:

1. the run creates it and its executions write into ``executions/``;
2. ``write_reports`` writes every report, each through a temp file and ``os.replace``,
   with ``summary.json`` LAST — a run folder holding ``summary.json`` is complete;
3. only then is ``reports/latest`` moved to it (a temp symlink, then ``os.replace``: a
   reader sees the old run or the new one, never none). A harness SIGKILLed at any moment
   leaves ``latest`` on the previous complete run;
4. ``prune_runs`` keeps the newest ``keep`` complete runs (and removes the incomplete
   folders of harness processes that are gone). A passing execution left no files behind
   in the first place (``harness.run.execution.execute``, ``keep_databases=False``), so a
   run costs kilobytes, not ~84 MB — the failures' and unknowns' files stay as evidence
   (``--keep-all`` keeps every one). Before it, ``keep_killed`` keeps the newest of those
   incomplete folders — a harness SIGKILLed mid-run, a second signal while reports were
   written — as ``incomplete-<run-id>`` (the executions that failed or were unknown, and
   those cut off, are evidence of what happened before the kill); ``prune_runs`` keeps
   only the newest such.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from harness.sandbox.code_copy import KILLED as _KILLED
from harness.sandbox.code_copy import RUN_ID as _RUN_ID

__all__ = ["COMPLETE_MARKS", "DEFAULT_KEEP_RUNS", "KILLED", "RUN_ID", "drop_older_killed",
           "is_complete", "keep_killed", "point_latest", "prune_runs"]

#: Run folders kept by default (``--keep-runs``).
DEFAULT_KEEP_RUNS = 10
#: The file whose presence says a run folder's reports are all written (each is written
#: last: ``summary.json`` by ``write_reports``, ``explore.json`` by an exploration).
COMPLETE_MARKS = ("summary.json", "explore.json")
#: A grade's folder (``reports/grade-<run-id>``, ``grade``'s default ``--out``) holds no
#: ``summary.json`` of its own (its run's is in ``run/``): it is complete once its
#: ``report.html``, which ``harness.grading.grade`` writes last, is there.
GRADE_PREFIX, GRADE_MARK = "grade-", "report.html"
#: A run id (``harness.run.runner.new_run_id``), optionally prefixed (``grade-``): the one
#: rule, which the sandbox also uses to leave a target folder's reports uncopied.
RUN_ID = _RUN_ID
#: The prefix of the one incomplete run folder kept as evidence (``keep_killed``).
KILLED = _KILLED


def point_latest(out_dir: Path) -> Path:
    """Make ``out_dir.parent / "latest"`` a relative symlink to ``out_dir``, replaced
    atomically (a temp symlink, then ``os.replace``), so a reader never finds it missing.
    Call it only once ``out_dir``'s reports are all written.

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


def is_complete(run_dir: Path) -> bool:
    """The folder's reports were all written (one of ``COMPLETE_MARKS`` exists; a grade's
    folder: ``GRADE_MARK``). A finished grade's folder read as incomplete was removed by the
    next run in the same report folder (found by a new-user trial)."""
    if run_dir.name.startswith(GRADE_PREFIX) and (run_dir / GRADE_MARK).is_file():
        return True
    return any((run_dir / mark).is_file() for mark in COMPLETE_MARKS)


def _owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _gone_incomplete(report_dir: Path, current: Path | None) -> list[tuple[str, str, Path]]:
    """``(stamp, name, folder)`` of the incomplete run folders (not ``KILLED`` ones) whose
    harness process is gone, newest first; never ``current``."""
    out = []
    for child in report_dir.iterdir() if report_dir.is_dir() else ():
        match = RUN_ID.fullmatch(child.name)
        if (not match or child.name.startswith(KILLED) or not child.is_dir()
                or child.is_symlink() or is_complete(child)
                or (current is not None and child.resolve() == current.resolve())):
            continue
        pid = int(match["pid"])
        if pid != os.getpid() and not _owner_alive(pid):
            out.append((match["stamp"], child.name, child))
    return sorted(out, reverse=True)


def drop_older_killed(report_dir: Path, *, current: Path | None = None) -> list[Path]:
    """At a run's start: of the incomplete folders of harnesses that are gone, remove all
    but the newest, which ``keep_killed`` keeps when this run ends. ``keep_killed`` and
    ``prune_runs`` run only at a run's end, so a loop of killed runs, none of which ends,
    left one partial folder per kill (found by a new user: five SIGKILLs, five folders).
    Returns the folders removed."""
    removed = []
    for _, _, folder in _gone_incomplete(report_dir, current)[1:]:
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def keep_killed(report_dir: Path, *, current: Path | None = None) -> Path | None:
    """Keep the newest incomplete run folder of a harness that is gone (SIGKILLed, or
    stopped by a second signal while it wrote its reports) as evidence: rename it
    ``incomplete-<run-id>`` in ``report_dir``, where ``prune_runs`` leaves the newest such
    one (older incomplete folders it removes, as before), without the empty folders of
    executions that were still running at the kill (found by a new user's trial). Never
    ``current``, never a running harness's folder.

    Returns:
        the kept folder's new path, or ``None`` (nothing to keep, or the rename failed:
        ``prune_runs`` then removes it as before).
    """
    gone = _gone_incomplete(report_dir, current)
    if not gone:
        return None
    _, name, folder = gone[0]
    kept = report_dir / f"{KILLED}{name}"
    try:
        if kept.exists() or kept.is_symlink():
            return None
        os.rename(folder, kept)
    except OSError:
        return None
    executions = kept / "executions"
    if executions.is_dir() and not executions.is_symlink():
        for child in executions.iterdir():  # an execution still running at the kill:
            with contextlib.suppress(OSError):  # its folder was made, nothing moved home
                if child.is_dir() and not child.is_symlink() and not any(child.iterdir()):
                    child.rmdir()
    return kept


def prune_runs(report_dir: Path, keep: int, *, current: Path | None = None) -> list[Path]:
    """Remove all but the newest ``keep`` complete run folders under ``report_dir``, and
    incomplete ones whose harness process is gone (its pid is in the run id), and all but
    the newest ``incomplete-<run-id>`` folder (``keep_killed``).

    Only folders named like a run id are touched; ``current`` and whatever ``latest``
    points at are never removed. Newest = the time stamp in the name, then the name.

    Args:
        report_dir: the ``--report-dir`` folder.
        keep: complete runs to keep (at least 1).
        current: the run just written.

    Returns:
        the folders removed.

    Raises:
        ValueError: ``keep`` < 1.
    """
    if keep < 1:
        raise ValueError(f"keep: {keep!r} must be at least 1")
    latest = report_dir / "latest"
    protected = {p.resolve() for p in (current, latest if latest.exists() else None) if p}
    runs, killed = [], []
    for child in report_dir.iterdir() if report_dir.is_dir() else ():
        if not child.is_dir() or child.is_symlink():
            continue
        evidence = child.name.startswith(KILLED) and RUN_ID.fullmatch(
            child.name[len(KILLED):])
        match = evidence or RUN_ID.fullmatch(child.name)
        if evidence:
            killed.append((evidence["stamp"], child.name, child))
        elif match:
            runs.append((match["stamp"], child.name, int(match["pid"]), child))
    runs.sort(reverse=True)
    removed, kept = [], 0
    for _, _, folder in sorted(killed, reverse=True)[1:]:
        shutil.rmtree(folder, ignore_errors=True)  # evidence of the newest kill only
        removed.append(folder)
    for _, _, pid, folder in runs:
        if folder.resolve() in protected:
            kept += is_complete(folder)
            continue
        if is_complete(folder):
            kept += 1
            if kept <= keep:
                continue
        elif pid == os.getpid() or _owner_alive(pid):
            continue  # a run still in progress (this process's or another's)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
