"""The project's own test configuration for the shipped scenario items (``scenarios/``,
collected by ``harness.pytest_plugin`` through pyproject's ``testpaths``).

In the default run (``pytest`` with no paths, so pyproject's ``testpaths``) a double-crash
matrix keeps a representative sample (``tests/crash_sample.py``: every single kill, and
pairs covering every first kill and every second-kill label); the rest is deselected. The
whole matrix runs with ``--crash-soak``, or when files or folders are named
(``pytest scenarios/o1001-double.toml``, ``pytest scenarios``), and always under
``shopops-chaos run``. The plugin itself collects every item as before: this file changes
only what this project's default test run selects (tests/README.md).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Generator, Iterable
from pathlib import Path

import pytest


def _load_double_sample() -> Callable[[Iterable[str]], list[str]]:
    """``tests/crash_sample.py``'s ``double_sample``, loaded by its path: ``tests`` is no
    package, and an installed distribution that ships a top-level ``tests`` package would
    shadow ``import tests.crash_sample``."""
    name = "_shopops_crash_sample"
    module = sys.modules.get(name)
    if module is None:
        path = Path(__file__).resolve().parent / "tests" / "crash_sample.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module.double_sample


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> Generator[None, None, None]:
    """Deselect the double-crash pairs outside the sample, in the default run only; before
    any other plugin's hook (a wrapper), so the items are still in plan order."""
    if (not config.getoption("--crash-soak", False)
            and config.args_source is pytest.Config.ArgsSource.TESTPATHS):
        _sample(config, items)
    return (yield)


def _sample(config: pytest.Config, items: list[pytest.Item]) -> None:
    from harness.pytest_plugin import ExecutionItem

    by_file: dict[str, list[ExecutionItem]] = {}
    for item in items:
        if isinstance(item, ExecutionItem) and item.plan.scenario.double:
            by_file.setdefault(str(item.path), []).append(item)
    double_sample = _load_double_sample()
    dropped: set[int] = set()
    for file_items in by_file.values():
        keep = set(double_sample(i.plan.schedule.id for i in file_items))
        dropped |= {id(i) for i in file_items if i.plan.schedule.id not in keep}
    if dropped:
        config.hook.pytest_deselected(items=[i for i in items if id(i) in dropped])
        items[:] = [i for i in items if id(i) not in dropped]
