"""Reading a rubric TOML file into ``harness.grading.rubric.RubricItem``s, refusing a bad one.

A rubric file is ``[[tests]]`` tables with ``name``, ``points``, ``scenarios``, ``checks``
(check ids, or ``"all"``: every check must hold) and optionally ``visibility``
(Gradescope's values) and ``explain``; it replaces
``DEFAULT_RUBRIC``. Every field is checked before anything runs: a bad rubric is one clear
error naming the file and the field (issue 10: non-finite or absurd points, duplicate
names; issue 24: an item without ``checks`` gave full points to executions that all
failed, so ``checks`` is required).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from harness.grading.rubric import ALL_CHECKS, RubricItem
from harness.model import CheckId
from harness.model.input_files import (
    MAX_TOML_BYTES,
    MAX_TOML_NESTING,
    InputFileError,
    check_nesting,
    read_input,
)
from harness.plan.catalogue import CATALOGUE
from shopops.errors import ShopOpsError

__all__ = ["MAX_POINTS", "SCENARIOS_DIR", "VISIBILITIES", "RubricError", "load_rubric"]

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
SCENARIOS_DIR = CATALOGUE  # the shipped catalogue (harness.plan.catalogue)
#: The most points one rubric item may carry; more is a typo, not a rubric.
MAX_POINTS = 1000.0


class RubricError(ShopOpsError, ValueError):
    """A bad rubric file (fields: ``path``, ``field``, ``reason``)."""


def load_rubric(path: str | Path) -> tuple[RubricItem, ...]:
    """Read a rubric TOML file: ``[[tests]]`` tables with ``name``, ``points``,
    ``scenarios``, ``checks`` (a non-empty list of check ids, or ``"all"``: every check of
    ``harness.model.CheckId`` must hold) and optionally ``visibility``, ``explain``.

    Raises:
        RubricError: unreadable, syntax error, unknown field, wrong type, unknown check id,
            unknown visibility, unknown scenario, no tests, no ``checks`` (or an empty
            list), points that are not finite or over ``MAX_POINTS``, a duplicate name.
    """
    path = Path(path)

    def fail(fld: str, reason: str) -> RubricError:
        return RubricError(f"{path}: field '{fld}': {reason}", path=str(path), field=fld,
                           reason=reason)

    try:  # a regular file, bounded in size and nesting before tomllib sees it
        text = read_input(path, MAX_TOML_BYTES)
        check_nesting(text, path, MAX_TOML_NESTING, toml=True)
        data = tomllib.loads(text)
    except InputFileError as exc:
        raise RubricError(str(exc), path=str(path), field=None, reason="unreadable") from None
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{path}: cannot read the rubric: {exc}", path=str(path),
                          field=None, reason="unreadable") from exc
    tests = data.get("tests")
    if set(data) - {"tests"} or not isinstance(tests, list) or not tests:
        raise fail("tests", "a rubric is a non-empty list of [[tests]] tables, nothing else")
    known = {p.stem for p in SCENARIOS_DIR.glob("*.toml")}
    items: list[RubricItem] = []
    for i, raw in enumerate(tests):
        where = f"tests[{i}]"
        if not isinstance(raw, dict):
            raise fail(where, "must be a table")
        extra = set(raw) - {"name", "points", "scenarios", "checks", "visibility", "explain"}
        if extra:
            raise fail(f"{where}.{sorted(extra)[0]}", "unknown field; allowed: name, points, "
                       "scenarios, checks, visibility, explain")
        name, points = raw.get("name"), raw.get("points")
        scenarios, checks = raw.get("scenarios"), raw.get("checks")
        if not isinstance(name, str) or not name:
            raise fail(f"{where}.name", "a non-empty string is required")
        if (isinstance(points, bool) or not isinstance(points, int | float)
                or not math.isfinite(points) or not 0 <= points <= MAX_POINTS):
            raise fail(f"{where}.points", f"{points!r}: a finite number from 0 to "
                       f"{MAX_POINTS:g} is required")
        if any(item.name == name for item in items):
            raise fail(f"{where}.name", f"{name!r} is already the name of an earlier test; "
                       "names must be unique (Gradescope shows tests by name)")
        if not isinstance(scenarios, list) or not scenarios or any(
                s not in known for s in scenarios):
            raise fail(f"{where}.scenarios", "a non-empty list of scenario names; known: "
                       + ", ".join(sorted(known)))
        if checks is None:
            raise fail(f"{where}.checks", f"test {name!r} names no checks: every test must "
                       "say which checks it is about (a list of check ids) or checks = \"all\" "
                       f"(every check must hold); check ids: {', '.join(CheckId)}")
        if checks == "all":
            checks = list(ALL_CHECKS)
        if (not isinstance(checks, list) or not checks
                or any(c not in set(CheckId) for c in checks)):
            raise fail(f"{where}.checks", f"test {name!r}: a non-empty list of check ids "
                       f"from: {', '.join(CheckId)}; or \"all\"")
        visibility = raw.get("visibility", "visible")
        if visibility not in VISIBILITIES:
            raise fail(f"{where}.visibility", f"{visibility!r}; allowed: "
                       + ", ".join(VISIBILITIES))
        items.append(RubricItem(name, float(points), tuple(scenarios),
                                tuple(CheckId(c) for c in checks),
                                visibility, str(raw.get("explain", ""))))
    return tuple(items)
