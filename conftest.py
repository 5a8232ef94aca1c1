"""The project's own test configuration for the shipped scenario items (``scenarios/``,
collected by ``harness.plugin.hooks`` through pyproject's ``testpaths``).

In the default run (``pytest`` with no paths, so pyproject's ``testpaths``) a double-crash
matrix keeps a representative sample (``tests/crash_sample.py``: every single kill, and
pairs covering every first kill and every second-kill label); the rest is deselected. The
whole matrix runs with ``--crash-soak``, or when files or folders are named
(``pytest scenarios/o1001-double.toml``, ``pytest scenarios``), and always under
``shopops-chaos run``. And the items of a rubric scenario are deselected when a selected
test grades the reference over that scenario's whole kill matrix and asserts ``pass`` on
every execution (tests/test_mutants.py): each execution is run once. The plugin itself
collects every item as before: this file changes only what this project's default test
run selects (tests/README.md).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Generator, Iterable
from pathlib import Path

import pytest

# Bytecode caches are written, even where PYTHONDONTWRITEBYTECODE is set (it is on the CI
# machine): otherwise every interpreter the suite starts (the xdist workers, ~120 fork
# servers, ~70 ``shopops-chaos`` runs, the inner pytest sessions) compiles ``harness/`` and
# ``shopops/`` again, and pytest rewrites the asserts of every test module again in each
# xdist worker (~5 s of a worker's collection). The caches go to ``__pycache__`` folders,
# which git ignores. Set here, in the process that loads this file first, so the worker
# processes and their subprocesses inherit it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


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
    default = (not config.getoption("--crash-soak", False)
               and config.args_source is pytest.Config.ArgsSource.TESTPATHS)
    if default:
        _sample(config, items)
    result = yield
    if default:  # after -k/-m and the others: what is still selected
        _proven_elsewhere(config, items)
    return result


#: The tests that grade the reference over whole kill matrices and assert ``pass`` on every
#: execution (tests/test_mutants.py), and how each names the scenarios it covers.
_GRADES = {
    "test_the_reference_scores_full_marks": lambda item: item.module.part_scenarios(
        item.callspec.params["part"]),
    "test_the_reference_grade_is_deterministic": lambda item: item.module.DETERMINISM,
}


def _proven_elsewhere(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the scenario items whose every execution a selected grade of the reference
    runs and asserts ``pass`` on (``_GRADES``): in the default run each execution of a
    rubric scenario is one test, not two (~30 test-seconds). Only what such a grade still
    selected after ``-k``/``-m`` covers is dropped."""
    from harness.plugin.hooks import ExecutionItem

    covered: set[str] = set()
    for item in items:
        names = _GRADES.get(getattr(item, "originalname", ""))
        if names is not None and getattr(item, "module", None) is not None:
            covered |= set(names(item))
    dropped = [i for i in items if isinstance(i, ExecutionItem)
               and i.plan.scenario.name in covered and not i.plan.scenario.double]
    if dropped:
        gone = {id(i) for i in dropped}
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if id(i) not in gone]


def _sample(config: pytest.Config, items: list[pytest.Item]) -> None:
    from harness.plugin.hooks import ExecutionItem

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
