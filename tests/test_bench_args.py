"""The benchmarks refuse bad options with argparse's usage error (exit 2) naming the
option and what is allowed, before any execution runs (the project's rule for bad input)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "benchmarks" /
                                                  f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("argv", "names"), [
    (["--schedule", "t9.bogus"], ["--schedule", "t9.bogus", "allowed: t0.case_started"]),
    (["--schedule", "t4.parked>"], ["--schedule"]),
    (["--executions", "0"], ["--executions", "0 is not from 1 to 100000"]),
    (["--executions", "nan"], ["--executions", "'nan' is not an integer"]),
])
def test_cpu_bench_refuses_bad_options_before_running(argv: list[str], names: list[str],
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    bench = _load("cpu_bench")
    ran: list[object] = []
    monkeypatch.setattr(bench, "executions", lambda *a: ran.append(a))
    monkeypatch.setattr(sys, "argv", ["cpu_bench.py", *argv])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert all(n in err for n in names), err
    assert "Traceback" not in err and ran == []
