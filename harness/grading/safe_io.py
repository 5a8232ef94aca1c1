"""Grading's outputs: checked before anything runs, written so they cannot be redirected.

An implementation under test may plant a symlink where the grader writes (``results.json``,
``results.json.tmp``) to make it write through it. So every file is first written into a
folder the harness has just created for this run (``mkdtemp``, mode 0700, next to the
target), opened with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (``open(2)``: never an existing file,
never through a link), then moved into place with ``rename(2)``, which replaces a planted
link itself instead of following it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["OutputPathError", "check_outputs", "write_sealed"]


class OutputPathError(ValueError):
    """A ``--results``/``--out`` path the grader cannot use (fields: ``option``, ``path``,
    ``reason``)."""

    def __init__(self, option: str, path: Path, reason: str) -> None:
        super().__init__(f"{option} {path}: {reason}")
        self.option, self.path, self.reason = option, str(path), reason


def _usable_folder(option: str, path: Path, folder: Path) -> None:
    """Create ``folder`` if missing and prove a file can be created in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputPathError(option, path, f"cannot write in {folder}: "
                              f"{exc.strerror or exc}") from exc


def check_outputs(out_dir: Path, results_path: Path | None) -> None:
    """Refuse unusable output paths before anything runs.

    Args:
        out_dir: the report folder (``--out``): absent or an existing folder; created here,
            and a file must be creatable in it.
        results_path: ``results.json``'s path (``--results``): not a folder, not a
            symlink, in a folder created here if missing, where a file can be created.

    Raises:
        OutputPathError: naming the option, the path and what is wrong.
    """
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise OutputPathError("--out", out_dir, "exists and is not a folder; give a folder "
                              "(created if missing)")
    if results_path is not None:
        if results_path.is_dir():
            raise OutputPathError("--results", results_path, "is a folder; give the file "
                                  "path, e.g. /autograder/results/results.json")
        if results_path.is_symlink():
            raise OutputPathError("--results", results_path, "is a symbolic link; refusing "
                                  "to write through it")
        if results_path.parent.exists() and not results_path.parent.is_dir():
            raise OutputPathError("--results", results_path, f"{results_path.parent} is not "
                                  "a folder")
        _usable_folder("--results", results_path, results_path.parent)
    _usable_folder("--out", out_dir, out_dir)


def write_sealed(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8; a character that has none, such as a file name's undecodable
    byte ``surrogateescape`` kept, is written as a backslash escape) to ``path`` as
    described in the module docstring.

    Raises:
        OSError: the folder cannot be created or written, or ``path`` is a folder.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        staged = os.path.join(stage, path.name)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staged, path)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return path
