"""Helpers for the bad-input tests (``test_inputs.py``, ``test_inputs_fuzz.py``,
``test_store_files.py``): run an entry point in this process on a bad input and collect what
it did — exit status, stderr, files changed, processes started."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import psutil

from harness.cli import main as chaos_cli
from shopops import cli as shopops_cli

#: The two entry points: ``shopops-chaos`` and ``shopops``.
ENTRY: dict[str, Callable[[Sequence[str] | None], int]] = {
    "shopops-chaos": chaos_cli.main, "shopops": shopops_cli.main}


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` (``lstat``-level: symlinks are not followed) with a digest
    of its bytes (files), its target (symlinks) or ``dir``."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                found[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                found[rel] = "dir"
            elif not p.is_file():  # a FIFO or a socket: never opened (it would block)
                found[rel] = "special"
            else:
                found[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


@dataclass(frozen=True)
class Outcome:
    """What one call of an entry point did."""

    code: int
    out: str
    err: str
    changed: dict[str, tuple[str | None, str | None]]
    new_processes: tuple[int, ...]

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if ": error: " in line]


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    with mock.patch.dict(os.environ, clean, clear=True):
        os.environ.update(env)
        yield


def call(entry: str, argv: Sequence[str], cwd: Path,
         env: Mapping[str, str] | None = None) -> Outcome:
    """Run ``entry`` (``shopops-chaos`` or ``shopops``) with ``argv`` in ``cwd`` and the given
    ``SHOPOPS_*`` variables (all others removed), capturing stdout/stderr, and compare the
    tree under ``cwd`` and this process's children before and after."""
    me = psutil.Process()
    before_children = {p.pid for p in me.children(recursive=True)}
    before = tree(cwd)
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with _environment(env or {}), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            try:
                code = ENTRY[entry](list(argv))
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(old)
    after = tree(cwd)
    changed = {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
               if before.get(k) != after.get(k)}
    started = tuple(sorted({p.pid for p in me.children(recursive=True)} - before_children))
    return Outcome(code, out.getvalue(), err.getvalue(), changed, started)


def assert_refused(o: Outcome, code: int, *names: str) -> None:
    """Exit ``code``, exactly one error line that names each of ``names``, no traceback,
    nothing on stdout, no file created or changed, no process started."""
    report = f"exit {o.code}\nstdout: {o.out!r}\nstderr: {o.err}\nchanged: {o.changed}"
    assert o.code == code, report
    assert "Traceback" not in o.err, report
    assert len(o.error_lines) == 1, report
    for name in names:
        assert name in o.error_lines[0], f"{name!r} not named\n{report}"
    assert o.out == "", report
    assert not o.changed, report
    assert not o.new_processes, report
