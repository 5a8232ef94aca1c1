"""Grading and running through a target: ``--sut DIR --target KIND`` (issue 11).

A course hands out a skeleton on plain Python or on a framework; the student's folder
holds a small ``target.toml`` naming the functions::

    [target]
    start = "loop:start"        # module:function, required
    resume = "loop:resume"      # required
    decide = "loop:decide"      # optional
    history = "loop:history"    # optional: the durable state the checks read
    # folder = "."              # where the module is, relative to target.toml
    # options = { durability = "sync" }

``load_target_dir`` validates it (the ``[target]`` rules of ``harness.targets.spec``; a
``langgraph`` or ``dbos`` kind needs its extra). ``on_target`` puts every scenario on that
target, refusing one it cannot follow; ``adapt_rubric`` keeps, of each rubric item, the
scenarios the target can run and the checks it can feed — an item left with neither is
reported not applicable (0 of 0 points), never scored as held.

Not sealed: a target's worker runs ``harness.targets.worker`` as the harness's user (the
sandbox of ``harness.sandbox.users`` seals only a package run as ``python -m MODULE``). The
verdict still comes from the harness's own evidence (the gateway's ledger, the approval
records, its trace).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from harness.grading.rubric import RubricItem
from harness.model import PythonTarget, Scenario
from harness.model.input_files import (
    MAX_TOML_BYTES,
    MAX_TOML_NESTING,
    InputFileError,
    check_nesting,
    read_input,
)
from harness.plan.scenario import ScenarioError, impossible
from harness.targets.apps import FIELDS_OF
from harness.targets.extras import ExtraMissing, require
from harness.targets.spec import parse_target

__all__ = ["FILENAME", "GRADE_KINDS", "TARGET_HELP", "adapt_rubric", "all_on", "from_cli",
           "load_target_dir", "on_target"]

FILENAME = "target.toml"
#: ``--target`` values: the framework only says which extra the skeleton needs.
GRADE_KINDS = ("python", "langgraph", "dbos")
TARGET_HELP = ("run --sut DIR as a target, not a package: DIR/target.toml names its "
               "functions (python; langgraph, dbos: a skeleton on that framework, needing "
               "its extra)")


def load_target_dir(kind: str, folder: Path) -> PythonTarget:
    """The target ``folder/target.toml`` names, run as ``kind``.

    Raises:
        ScenarioError: no or an unreadable file, or a bad ``[target]`` table (the message
            names the file, the field and what is allowed); a missing extra names its
            install command.
        ValueError: ``kind`` is not one of ``GRADE_KINDS``.
    """
    if kind not in GRADE_KINDS:
        raise ValueError(f"--target {kind!r}: allowed: {', '.join(GRADE_KINDS)}")
    path = folder / FILENAME

    def fail(fld: str, reason: str) -> ScenarioError:
        return ScenarioError(f"{path}: field '{fld}': {reason}", path=str(path), field=fld,
                             line=None, reason=reason)

    try:  # a regular file, bounded in size and nesting before tomllib sees it
        text = read_input(path, MAX_TOML_BYTES)
        check_nesting(text, path, MAX_TOML_NESTING, toml=True)
        data = tomllib.loads(text)
    except (InputFileError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read the target file: {exc} (--target needs "
                            f"a {FILENAME} naming start and resume)", path=str(path),
                            field=None, line=None, reason="unreadable") from exc
    table = data.get("target")
    if set(data) != {"target"} or not isinstance(table, dict):
        raise fail("target", f"{FILENAME} holds exactly one [target] table")
    if "kind" in table:
        raise fail("target.kind", "given on the command line (--target), not here")
    # a framework app named by its graph or workflow (harness.targets.apps), else functions
    app = kind in FIELDS_OF and FIELDS_OF[kind][0] in table
    target = parse_target({"folder": ".", **table, "kind": kind if app else "python"},
                          path, fail)
    assert target is not None
    extra = None if kind == "python" else kind
    if extra is not None:
        try:
            require(extra, f"--target {kind}")
        except ExtraMissing as exc:
            raise fail("target", str(exc)) from None
    return replace(target, name=kind, extra=extra, source=folder.resolve())


def from_cli(kind: str | None, sut: str | None, module: str) -> PythonTarget | None:
    """The target ``--sut DIR --target KIND`` names (``None`` without ``--target``).

    Raises:
        ValueError: ``--target`` without ``--sut``, or with ``--module``; a bad
            ``DIR/target.toml`` (a ``ScenarioError`` naming the file and the field).
    """
    if kind is None:
        return None
    if sut is None:
        raise ValueError(f"--target {kind}: needs --sut DIR, the folder holding {FILENAME}")
    if module != "shopops":
        raise ValueError(f"--target: --module names a package run as python -m MODULE; a "
                         f"target names its functions in {FILENAME} instead")
    return load_target_dir(kind, Path(sut))


def all_on(scenarios: Sequence[Scenario], target: PythonTarget | None) -> list[Scenario]:
    """``scenarios`` on ``target`` (unchanged when it is ``None``), for ``run --target``.

    Raises:
        ValueError: a scenario the target cannot follow (named, with the field and why).
    """
    if target is None:
        return list(scenarios)
    kept, refused = on_target(scenarios, target)
    if refused:
        name, why = next(iter(refused.items()))
        raise ValueError(f"--target {target.name}: scenario {name!r} cannot run on a target: "
                         f"{why}")
    return kept


def on_target(scenarios: Sequence[Scenario], target: PythonTarget
              ) -> tuple[list[Scenario], dict[str, str]]:
    """Every scenario put on ``target``, and those it cannot follow, by name, with why
    (the first field ``harness.plan.scenario.impossible`` names). A scenario with its own
    ``[target]`` is refused too (one target per run)."""
    kept: list[Scenario] = []
    refused: dict[str, str] = {}
    for s in scenarios:
        if s.target is not None:
            refused[s.name] = f"it names its own target ({s.target.name})"
            continue
        moved = replace(s, target=target)
        problems = impossible(moved)
        if problems:
            refused[s.name] = f"{problems[0][0]}: {problems[0][1]}"
        else:
            kept.append(moved)
    return kept, refused


def adapt_rubric(rubric: Sequence[RubricItem], runnable: set[str], target: PythonTarget
                 ) -> tuple[list[RubricItem], list[tuple[RubricItem, str]]]:
    """The items a target can be graded on — each with only the scenarios in ``runnable`` —
    and the others with why they are not applicable. Which of an item's checks a target
    can feed is known once it ran (what its history shows, ``History.observes``): an item
    whose every check came out not applicable is scored 0 of 0 then
    (``harness.grading.grade.score_item``)."""
    kept: list[RubricItem] = []
    dropped: list[tuple[RubricItem, str]] = []
    for item in rubric:
        scenarios = tuple(s for s in item.scenarios if s in runnable)
        if not scenarios:
            dropped.append((item, "its scenarios need the reference loop's own features ("
                                  + ", ".join(item.scenarios) + ")"))
        else:
            kept.append(replace(item, scenarios=scenarios))
    return kept, dropped
