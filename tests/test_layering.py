"""The import graph of ``shopops/`` and ``harness/`` keeps the layering of
``docs/design.md``: no cycles, ``shopops`` never imports ``harness``, the frozen types at the
bottom import nothing of the harness, the judge does not import the run or the story,
report writers, the explorer and the pytest plugin do not import the runner, plumbing knows
no story and no verdict.

The graph is read the way ``/work/shared/tools/imports.py`` reads it: every ``import`` and
``from … import`` anywhere in a module (also inside functions and ``TYPE_CHECKING`` blocks:
a lazy import is still a dependency), resolved to the longest module name that exists.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import harness.model

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shopops", "harness")


def modules() -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the two packages."""
    found = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            rel = f.relative_to(ROOT).with_suffix("")
            found[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = f
    return found


def graph() -> dict[str, set[str]]:
    """``{module: modules it imports}``, inside the two packages only."""
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t)
                # a package importing its own submodules is not an edge back into it
                if r and r != m and not (m.startswith(r + ".") and r == m.split(".")[0]):
                    edges[m].add(r)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def closure(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or not."""
    seen, todo = set(), [start]
    while todo:
        for w in edges[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


EDGES = graph()


def test_the_graph_is_read_from_real_files() -> None:
    # a guard against a vacuous pass: the graph knows the arrows we rely on below
    assert "harness.model" in EDGES["harness.verdict"] or any(
        m.startswith("harness.model") for m in EDGES["harness.verdict"])
    assert "shopops.grant" in EDGES["shopops.worker"]


def test_no_import_cycles() -> None:
    assert cycles(EDGES) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_shopops_never_imports_harness() -> None:
    wrong = sorted(f"{m} -> {t}" for m, ts in EDGES.items() for t in ts
                   if m.startswith("shopops") and t.startswith("harness"))
    assert wrong == []


def test_the_frozen_types_import_nothing_of_the_harness_above_them() -> None:
    below = {m for m in EDGES if m.startswith("harness.model")}
    for m in below:
        above = sorted(t for t in EDGES[m] if t.startswith("harness") and t not in below)
        assert above == [], m


@pytest.mark.parametrize("module", ["harness.checks", "harness.verdict", "harness.evidence",
                                    "harness.assess"])
def test_the_judge_imports_neither_the_run_nor_the_story(module: str) -> None:
    forbidden = {"harness.execution", "harness.runner", "harness.story", "harness.controller"}
    assert closure(EDGES, module) & forbidden == set()


@pytest.mark.parametrize("module", sorted(
    [m for m in EDGES if m.startswith("harness.reports")]
    + ["harness.explore", "harness.pytest_plugin", "harness.matrix", "harness.scenario",
       "harness.merge", "harness.run_json", "harness.shard"]))
def test_reports_explore_plugin_and_plan_do_not_import_the_runner(module: str) -> None:
    assert "harness.runner" not in EDGES[module]


@pytest.mark.parametrize("module", ["harness.launcher", "harness.spawn_launcher",
                                    "harness.fork_launcher", "harness.forkserver",
                                    "harness.processes", "harness.channel", "harness.serving",
                                    "harness.approval_service"])
def test_plumbing_knows_no_story_and_no_verdict(module: str) -> None:
    forbidden = {"harness.story", "harness.verdict", "harness.checks", "harness.execution"}
    assert closure(EDGES, module) & forbidden == set()


def test_no_module_is_much_over_400_lines() -> None:
    # ~400 is the aim (docs/design.md); a little over is tolerated, far over is not
    sizes = {m: len(f.read_text(encoding="utf-8").splitlines()) for m, f in modules().items()}
    big = sorted(m for m, n in sizes.items() if n > 500)
    assert big == []


def test_model_exports_are_locked() -> None:
    """The public face of the frozen types (trio's ``test_exports.py``)."""
    exported = set(harness.model.__all__)
    public = {n for n in dir(harness.model) if not n.startswith(("_", "@"))}  # "@": pytest
    assert exported == public - {
        "evidence", "hits", "kinds", "plan", "points", "results", "shard", "story", "target",
        "annotations"}
    for name in exported:
        assert getattr(harness.model, name) is not None
