"""Helpers shared by the scenario-file tests (``test_scenarios.py``,
``test_scenario_fields.py``): the shipped files, and how a refused file is inspected."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plan.scenario import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "scenarios").glob("*.toml"))


def refused(path: Path) -> ScenarioError:
    """The ``ScenarioError`` that loading ``path`` must raise."""
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return info.value


def assert_names(err: ScenarioError, path: Path, field: str | None,
                 line: int | None) -> None:
    """The structured fields, and a message that starts with the file (and line) and names
    the field."""
    message = str(err)
    assert err.path == str(path)
    assert err.field == field
    assert err.line == line
    assert message.startswith(str(path) if line is None else f"{path}:{line}: ")
    if field is not None:
        assert f"field '{field}'" in message
