"""The optional extras of framework targets: found when installed, a clear refusal when not."""

from __future__ import annotations

import sys

import pytest

from harness.targets import extras
from shopops.errors import InputError


def test_installed_extras_are_found() -> None:
    # .ci/run and the README install .[test,langgraph,dbos]: both must be importable here
    assert extras.missing("langgraph") == ()
    assert extras.missing("dbos") == ()
    extras.require("langgraph", "scenarios/x.toml: target.extra")


def test_a_missing_extra_is_refused_naming_who_needs_it_and_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dbos", None)  # import dbos now raises ImportError
    monkeypatch.setitem(extras.EXTRAS, "dbos", ("dbos", "dbos._sys_db"))
    with pytest.raises(extras.ExtraMissing) as info:
        extras.require("dbos", "scenarios/dbos-o1001.toml: target.extra")
    message = str(info.value)
    assert "scenarios/dbos-o1001.toml: target.extra" in message
    assert "pip install -e '.[dbos]'" in message
    assert info.value.value == "dbos"


def test_an_unknown_extra_is_bad_input() -> None:
    with pytest.raises(InputError, match="not one of langgraph, dbos"):
        extras.missing("temporal")
