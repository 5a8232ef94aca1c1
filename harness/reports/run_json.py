"""``run.json``: a shard's whole ``RunResult`` (``harness.reports.codec``) with what must match
before shards merge: the harness's version and code, and the scenario set.

Written by ``shopops-chaos run --shard`` next to the other reports, read by
``shopops-chaos merge`` (``harness.cli.merge``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.model import RunResult, Scenario
from harness.model.input_files import (
    MAX_JSON_BYTES,
    MAX_JSON_NESTING,
    InputFileError,
    check_nesting,
    read_input,
)
from harness.reports.base import write_atomic
from harness.reports.codec import CodecError, decode, encode

__all__ = ["FILENAME", "FORMAT", "RunFile", "RunFileError", "code_digest", "harness_version",
           "read_run_json", "scenario_digests", "write_run_json"]

FILENAME = "run.json"
FORMAT = "shopops-chaos-run/1"
_ROOT = Path(__file__).resolve().parents[2]


class RunFileError(ValueError):
    """A folder whose ``run.json`` is missing or unreadable; names the file and why."""


@dataclass(frozen=True)
class RunFile:
    """One ``run.json``: ``run`` (the ``RunResult``), ``version`` (the package's),
    ``code`` (SHA-256 of the harness's and the loop's sources), ``scenarios``
    (``(name, SHA-256 of its file)`` in run order), ``path`` (the file)."""

    run: RunResult
    version: str
    code: str
    scenarios: tuple[tuple[str, str], ...]
    path: Path


def harness_version() -> str:
    """The installed ``shopops-chaos`` version (``unknown`` when run from a bare tree)."""
    try:
        return metadata.version("shopops-chaos")
    except metadata.PackageNotFoundError:
        return "unknown"


def code_digest() -> str:
    """SHA-256 over every ``*.py`` of ``harness/``, ``shopops/`` and ``shopops_contract/``
    and the contract's schema files (path and bytes, in path order): equal on two machines
    iff they run the same harness, loop and contract."""
    h = hashlib.sha256()
    for package in ("harness", "shopops", "shopops_contract"):
        files = [*(_ROOT / package).rglob("*.py"), *(_ROOT / package).rglob("*.json")]
        for file in sorted(files):
            h.update(file.relative_to(_ROOT).as_posix().encode() + b"\0")
            h.update(file.read_bytes() + b"\0")
    return h.hexdigest()


def scenario_digests(scenarios: Sequence[Scenario]) -> tuple[tuple[str, str], ...]:
    """``(name, SHA-256)`` of each scenario: of its file's bytes, or of the scenario's own
    ``repr`` when it was built in code."""
    out = []
    for s in scenarios:
        data = s.path.read_bytes() if s.path is not None and s.path.is_file() \
            else repr(s).encode()
        out.append((s.name, hashlib.sha256(data).hexdigest()))
    return tuple(out)


def write_run_json(run: RunResult, out_dir: Path, scenarios: Sequence[Scenario]) -> Path:
    """Write ``out_dir/run.json`` (atomically); return its path.

    Raises:
        CodecError: the run holds a value the codec cannot carry (a harness bug).
    """
    doc = {"format": FORMAT, "version": harness_version(), "code": code_digest(),
           "scenarios": [list(p) for p in scenario_digests(scenarios)], "run": encode(run)}
    return write_atomic(out_dir / FILENAME, json.dumps(doc, ensure_ascii=False) + "\n")


def read_run_json(folder: Path) -> RunFile:
    """Read ``folder/run.json``.

    Raises:
        RunFileError: no such file (a folder of an unsharded run, or not a run folder),
            not a regular file, over ``MAX_JSON_BYTES`` or nested deeper than
            ``MAX_JSON_NESTING`` (``harness.model.input_files``),
            another format, or content that is not a run; the message names the file.
    """
    path = folder / FILENAME
    if not os.path.lexists(path):
        raise RunFileError(f"{path}: no such file; merge reads the run folders that "
                           "'shopops-chaos run --shard I/N' writes")
    try:  # a regular file, bounded in size and nesting before json and the codec see it
        text = read_input(path, MAX_JSON_BYTES)
        check_nesting(text, path, MAX_JSON_NESTING, toml=False)
    except InputFileError as exc:
        raise RunFileError(str(exc)) from None
    try:
        doc: Any = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise RunFileError(f"{path}: format {got!r}; allowed: {FORMAT!r}")
        run = decode(doc["run"], "run")
        if not isinstance(run, RunResult):
            raise RunFileError(f"{path}: 'run' is not a RunResult")
        scenarios = tuple((str(n), str(d)) for n, d in doc["scenarios"])
        return RunFile(run, str(doc["version"]), str(doc["code"]), scenarios, path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError,
            ValueError, CodecError) as exc:
        if isinstance(exc, RunFileError):
            raise
        raise RunFileError(f"{path}: not a readable run.json: {type(exc).__name__}: "
                           f"{exc}") from None
