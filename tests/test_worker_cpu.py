"""``validators.parse_args``'s shortcut (issue 27, docs/speed.md: it walks the parser's
options only when some value is ``[]``) still refuses ``--`` as an option's value."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopops import cli
from shopops import validators as v

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 120.0


@pytest.mark.parametrize("argv", [
    ["run", "--lease-ttl=--"], ["run", "--db=--"], ["approve", "--approver=--"],
    ["migrate", "--", "x.db"]])
def test_the_shortcut_refuses_or_passes_as_the_walk_does(argv: list[str],
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """``parse_args`` walks the parser's options only when some value is ``[]``; the
    result is the walk's: ``--`` given as a one-value option's value is refused naming it
    (exit 2), ``--`` ending the options is not."""
    parser = cli.build_parser()
    if argv[0] == "migrate":
        assert v.parse_args(parser, argv).db == "x.db"
        return
    with pytest.raises(SystemExit) as exited:
        v.parse_args(parser, argv)
    assert exited.value.code == 2
    option = argv[1].split("=")[0]
    assert f"argument {option}: '--' is not a value" in capsys.readouterr().err
