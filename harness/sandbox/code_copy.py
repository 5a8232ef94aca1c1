"""Copy an implementation's folder for the sandbox, as root, without trusting it.

The harness copies a student's package (``harness.sandbox.users.install_code``) before any of it
runs, as root: whatever the folder holds is the implementation's. ``shutil.copytree``
follows symlinks and opens whatever is there, so a symlink to ``/`` copied the whole
filesystem into RAM and hung, a symlink to a root-only file made its content readable to
the sandboxed uid, a FIFO blocked, a sparse file of gigabytes was copied in full.

``copy_tree`` walks with directory descriptors (``os.fwalk``, never following a symlink)
and opens each file relative to its folder with ``O_NOFOLLOW | O_NONBLOCK``, so a name
swapped for a symlink or a FIFO between the listing and the open is refused too (``open(2)``:
``ELOOP``; ``fstat`` of what was opened decides). Only folders and regular files with one
name (a hard link could be a root-only file where ``fs.protected_hardlinks`` is off) are
allowed, at most ``MAX_FILES`` entries (files and folders) and ``MAX_BYTES`` bytes in all;
anything else refuses the whole folder with ``CopyRefused``, naming the entry (quoted) and
what is allowed. The caller removes ``dst`` then: nothing of a refused folder is left.

One folder is left out instead: a target folder's top-level ``reports/`` when it is the
harness's own output (``harness_reports``) — what ``shopops-chaos run … --sut .``, the
replay command a grade prints, writes there, with its ``latest`` symlink. Left out, none of
it is opened, read or copied, so whatever it holds reaches no sandbox; a ``reports/`` laid
out any other way (a module, a symlink to anything but a run folder beside it) is the
implementation's and is copied, or refused, like every other entry.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

__all__ = ["KILLED", "MAX_BYTES", "MAX_FILES", "REPORTS", "RUN_ID", "CopyRefused",
           "copy_file", "copy_tree", "harness_reports"]

#: At most this many entries (files and folders) and bytes in an implementation's folder
#: (a package of Python sources is kilobytes; the reference's ``shopops/`` is ~0.4 MiB with
#: 40 files).
MAX_FILES, MAX_BYTES = 10_000, 64 << 20
_ALLOWED = ("only folders and regular files with one name each (no symlink, hard link, FIFO, "
            "socket or device)")
#: The harness's report folder (``--report-dir``'s default), relative to where it runs.
REPORTS = "reports"
#: A run folder's name (``harness.run.runner.new_run_id``), optionally prefixed (``grade-``);
#: ``harness.reports.runs`` uses this one. Defined here, the lowest layer that needs it.
RUN_ID = re.compile(r"(?:[a-z]+-)?(?P<stamp>\d{8}T\d{6}Z)-(?P<pid>\d+)")
#: The prefix of a killed run's folder kept as evidence (``harness.reports.runs.keep_killed``).
KILLED = "incomplete-"
#: ``latest``'s temporary name while it is moved (``harness.reports.runs.point_latest``).
_LATEST_TMP = re.compile(r"\.latest\.\d+\.tmp")


class CopyRefused(OSError):
    """The folder holds what an implementation may not: the message names the entry (its
    path inside the folder) and what is allowed."""


def harness_reports(src: Path) -> bool:
    """``src/reports`` is the harness's own output folder and nothing else: a real folder
    (not a symlink) whose every entry is a run folder (a real folder named like a run id,
    ``RUN_ID``, or a killed run's kept as ``incomplete-<run-id>``), ``latest`` or its
    temporary name — each a symlink to the bare name of a run folder beside it
    (``harness.reports.runs.point_latest``) — and nothing more. Only names and ``lstat``
    are looked at; nothing is opened or followed."""
    top = src / REPORTS
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            return False
        entries = {e.name: e for e in os.scandir(top)}
    except OSError:
        return False
    runs = {name for name, e in entries.items()
            if RUN_ID.fullmatch(name.removeprefix(KILLED)) and e.is_dir(follow_symlinks=False)}
    for name, entry in entries.items():
        if name in runs:
            continue
        if not ((name == "latest" or _LATEST_TMP.fullmatch(name))
                and entry.is_symlink()):
            return False
        try:
            if os.readlink(entry.path) not in runs:
                return False
        except OSError:
            return False
    return True


def copy_tree(src: Path, dst: Path, *, skip: Sequence[str] = (),
              leave_out: Sequence[str] = ()) -> None:
    """Copy the folder ``src`` to ``dst`` (created, must not exist): folders as 0o755
    folders, regular files' bytes as new files; names matching a pattern of ``skip``
    (``fnmatch``, e.g. ``__pycache__``, ``*.pyc``) are left out at every depth, the names
    in ``leave_out`` at the top only (never opened: e.g. ``REPORTS`` when
    ``harness_reports`` says it is the harness's output).

    Raises:
        CopyRefused: ``src`` is not a folder, or holds a symlink, a hard link, a FIFO, a
            socket or a device, or more than ``MAX_FILES`` entries or ``MAX_BYTES`` bytes.
        OSError: reading or writing failed.
    """
    if not stat.S_ISDIR(os.lstat(src).st_mode):
        raise CopyRefused(f"{src}: not a folder (a symlink or a file); {_ALLOWED}")
    dst.mkdir(mode=0o755)
    files = size = 0
    for root, dirs, names, root_fd in os.fwalk(src, follow_symlinks=False):
        here = Path(root).relative_to(src)
        top = here == Path(".")
        dirs[:] = [d for d in dirs if not _skipped(d, skip)
                   and not (top and d in leave_out)]
        for name in (*dirs, *names):
            if _skipped(name, skip) or (top and name in leave_out):
                continue
            st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            files += 1  # folders too: 200,000 empty ones took 41 s to copy
            if files > MAX_FILES:
                raise CopyRefused(f"{src}: more than {MAX_FILES} files and folders (at "
                                  f"{_quoted(here / name)})")
            if stat.S_ISDIR(st.st_mode):
                (dst / here / name).mkdir(mode=0o755)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise CopyRefused(f"{src}: {_quoted(here / name)} is {_kind(st.st_mode)}; "
                                  f"{_ALLOWED}")
            if st.st_nlink > 1:  # the same file under another name, maybe one root owns
                raise CopyRefused(f"{src}: {_quoted(here / name)} is a hard link "
                                  f"({st.st_nlink} names for one file); {_ALLOWED}")
            size += st.st_size
            if size > MAX_BYTES:
                raise CopyRefused(f"{src}: more than {MAX_BYTES >> 20} MiB (at "
                                  f"{_quoted(here / name)}, {st.st_size} bytes)")
            _copy_file(root_fd, name, dst / here / name, f"{src}: {_quoted(here / name)}")


def copy_file(src: Path, dst: Path) -> None:
    """Copy the one regular file ``src`` (a module ``name.py``) to ``dst``, as
    ``copy_tree`` copies each file: not through a symlink, not a FIFO, at most
    ``MAX_BYTES``.

    Raises:
        CopyRefused: ``src`` is not a regular file, or is larger than ``MAX_BYTES``.
    """
    parent = os.open(src.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _copy_file(parent, src.name, dst, str(src))
    finally:
        os.close(parent)


def _copy_file(root_fd: int, name: str, target: Path, shown: str) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=root_fd)
    except OSError as exc:  # ELOOP: swapped for a symlink since it was listed
        raise CopyRefused(f"{shown} cannot be opened as a regular file ({exc.strerror}); "
                          f"{_ALLOWED}") from None
    with os.fdopen(fd, "rb") as source:
        st = os.fstat(source.fileno())  # what was opened, not what was listed
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            raise CopyRefused(f"{shown} changed while it was copied; {_ALLOWED}")
        with open(target, "xb") as out:
            out.write(source.read(MAX_BYTES))  # a file still growing: no more than that


def _quoted(rel: Path) -> str:
    """An entry's name as the implementation wrote it, quoted (``repr``): a newline or an
    undecodable byte in it cannot make a reason read as something else."""
    return repr(str(rel))


def _skipped(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _kind(mode: int) -> str:
    return ("a symlink" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device")
