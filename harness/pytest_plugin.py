"""pytest plugin of the crash harness (entry point ``pytest11``).

- Scenario files (``*.toml`` in a folder named ``scenarios``) are collected: the file's
  trace run happens at collection, and every execution of its kill matrix becomes an item
  with a stable id such as ``scenarios/o1001.toml::o1001[t6.gateway_accepted]``, so
  ``pytest -n auto`` (pytest-xdist) spreads them over cores and ``--junitxml`` works. A bad
  scenario file is a collection error, which stops the session before anything runs.
- Fixtures for writing your own kill test in a few lines: ``crash_runner``,
  ``mock_gateway``, ``checkpoint_db``.
- Options (group ``crash``): ``--crash-timeout``, ``--crash-keep``, ``--crash-launcher``
  (``fork``, the default: one fork server per pytest process, closed at the end).

A failing execution raises ``harness.checks.CheckFailed`` (an ``AssertionError``); an
``unknown`` one raises ``VerdictUnknown``: neither is ever a pass.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

_RESULTS_KEY = pytest.StashKey[dict[str, Any]]()
_TMP_KEY = pytest.StashKey[Path]()
_LAUNCHER_KEY = pytest.StashKey[Any]()


class VerdictUnknown(Exception):
    """The execution could not be judged (a kill point not reached, an unexpected exit, a
    deadline): not a pass."""


def _worker_timeout(text: str) -> float:
    """``--crash-timeout``: the shared bound (``shopops.validators.WORKER_TIMEOUT_S``),
    imported here so that loading the plugin imports nothing of the loop."""
    from shopops.validators import WORKER_TIMEOUT_S

    return float(WORKER_TIMEOUT_S(text))


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``--crash-*`` options."""
    group = parser.getgroup("crash", "ShopOps crash harness")
    group.addoption("--crash-timeout", type=_worker_timeout, default=30.0,
                    help="seconds one worker may run before it is killed (default 30; "
                         "0.001 to 86400)")
    group.addoption("--crash-keep", default=None, metavar="DIR",
                    help="keep every execution's evidence (databases, worker output) in DIR "
                         "instead of a temporary folder removed at the end")
    group.addoption("--crash-launcher", choices=("fork", "spawn"), default="fork",
                    help="how workers start: forked from a pre-imported server (default) or "
                         "a fresh interpreter each")
    group.addoption("--crash-soak", action="store_true", default=False,
                    help="also run the tests marked slow (exhaustive comparisons, soaks), and "
                         "give tests that draw examples (the bad-input fuzz) a soak budget; "
                         "without it slow tests are skipped")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``slow`` tests unless ``--crash-soak``; mark scenario items ``processes``
    (the cost markers are in pyproject.toml)."""
    soak = config.getoption("--crash-soak", False)
    skip = pytest.mark.skip(reason="slow (soak): run with --crash-soak")
    for item in items:
        if isinstance(item, ExecutionItem):
            item.add_marker("processes")
        if not soak and item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    """Create the folder executions run in."""
    keep = config.getoption("--crash-keep", None)
    if keep:
        base = Path(keep)
        base.mkdir(parents=True, exist_ok=True)
    else:
        _remove_orphaned_temp_dirs()
        base = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-"))
    config.stash[_TMP_KEY] = base
    config.stash[_RESULTS_KEY] = {}


_TMP_PREFIX = "shopops-chaos-"


def _remove_orphaned_temp_dirs() -> None:
    """Remove execution folders of pytest processes that died without cleaning up (a
    SIGKILLed run cannot): their names carry the owner's pid, which is gone."""
    import psutil

    for folder in Path(tempfile.gettempdir()).glob(f"{_TMP_PREFIX}*-*"):
        owner = folder.name[len(_TMP_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the temporary execution folder (not a ``--crash-keep`` one) and reap."""
    from harness.processes import REGISTRY

    REGISTRY.reap_all()
    launcher = config.stash.get(_LAUNCHER_KEY, None)
    if launcher is not None:
        launcher.close()
    base = config.stash.get(_TMP_KEY, None)
    if base is not None and not config.getoption("--crash-keep", None):
        shutil.rmtree(base, ignore_errors=True)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect ``scenarios/*.toml``."""
    if file_path.suffix == ".toml" and file_path.parent.name == "scenarios":
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


def _execute(config: pytest.Config, plan: Any) -> Any:
    from harness.execution import execute

    base = config.stash[_TMP_KEY]
    workdir = Path(tempfile.mkdtemp(prefix=plan.dirname[:40] + "-", dir=base))
    return execute(plan, workdir, launcher=_launcher(config),
                   worker_timeout_s=config.getoption("--crash-timeout"))


def _launcher(config: pytest.Config) -> Any:
    """The session's launcher, made at first use (a fork server starts lazily)."""
    from harness.launcher import make_launcher

    launcher = config.stash.get(_LAUNCHER_KEY, None)
    if launcher is None:
        launcher = make_launcher(config.getoption("--crash-launcher"))
        config.stash[_LAUNCHER_KEY] = launcher
    return launcher


class ScenarioFile(pytest.File):
    """A scenario file: trace run, then one item per execution of its kill matrix."""

    def collect(self) -> Iterator[pytest.Item]:
        """Validate the file (``ScenarioError`` becomes a collection error), trace it,
        yield the items."""
        from harness.matrix import double_kill_plans, points_from_trace, single_kill_plans
        from harness.model import CrashSchedule, ExecutionPlan
        from harness.scenario import load_scenario

        scenario = load_scenario(self.path)
        trace = _execute(self.config, ExecutionPlan(scenario, CrashSchedule()))
        if scenario.baseline:
            yield ExecutionItem.from_parent(self, name=trace.plan.id, plan=trace.plan,
                                            done=trace)
        singles = single_kill_plans(scenario, points_from_trace(trace.evidence))
        if not scenario.double:
            for plan in singles:
                yield ExecutionItem.from_parent(self, name=plan.id, plan=plan, done=None)
            return
        # The double matrix is learned from each single-kill execution's own trace, so the
        # singles run here, at collection (their items then report those results).
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = list(pool.map(lambda p: _execute(self.config, p), singles))
        seen = {plan.id for plan in singles}
        for plan, result in zip(singles, results, strict=True):
            yield ExecutionItem.from_parent(self, name=plan.id, plan=plan, done=result)
        for plan, result in zip(singles, results, strict=True):
            for second in double_kill_plans(plan, result.evidence):
                if second.id not in seen:
                    seen.add(second.id)
                    yield ExecutionItem.from_parent(self, name=second.id, plan=second,
                                                    done=None)


class ExecutionItem(pytest.Item):
    """One execution of a crash schedule."""

    def __init__(self, *, plan: Any, done: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.done = done
        self.result: Any = None

    def runtest(self) -> None:
        """Run the execution (unless the trace run already was it) and raise unless pass."""
        self.result = self.done or _execute(self.config, self.plan)
        self.config.stash[_RESULTS_KEY][self.plan.id] = self.result
        self.user_properties.append(("replay", self.plan.replay))
        self.user_properties.append(("deliveries", self.result.evidence.deliveries))
        _raise_unless_pass(self.result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        """The verdict, reasons, failing checks with evidence, timeline and replay."""
        if isinstance(excinfo.value, (VerdictUnknown, AssertionError)) and self.result:
            return explain(self.result)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the item comes from, for pytest's report headers."""
        return self.path, None, self.plan.id


def _raise_unless_pass(result: Any) -> None:
    from harness.checks import CheckFailed

    if result.verdict == "fail":
        raise CheckFailed(f"{result.plan.id}: " + "; ".join(result.reasons))
    if result.verdict == "unknown":
        raise VerdictUnknown(f"{result.plan.id}: " + "; ".join(result.reasons))


def explain(result: Any) -> str:
    """A human explanation of one execution's verdict (used in pytest failure reports)."""
    lines = [f"{result.plan.id}: verdict {result.verdict.upper()}"]
    lines += [f"  reason: {r}" for r in result.reasons]
    for check in result.checks:
        if not check.passed:
            lines.append(f"  check {check.check_id} FAILED: {check.detail}")
            lines += [f"      {e}" for e in check.evidence]
    lines.append("  timeline:")
    for e in result.evidence.events:
        who = f"w{e.worker}" if e.worker is not None else "  "
        lines.append(f"    {e.t_ms:9.1f} ms {who} {e.kind:<12} {e.label or '':<22} {e.detail}")
    lines.append(f"  evidence: {result.evidence.workdir}")
    lines.append(f"  replay:   {result.plan.replay}")
    return "\n".join(lines)


@pytest.fixture
def crash_runner(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Run one execution of a crash schedule on a scenario.

    Usage::

        def test_kill_after_accept(crash_runner):
            result = crash_runner("t3.checkpoint_saved>t6.gateway_accepted")
            assert result.verdict == "pass"
            assert result.evidence.deliveries == 1

    Call as ``crash_runner(schedule, scenario=None, **scenario_fields)``: ``schedule`` is a
    schedule id (``"no-kill"``, ``"t4.parked"``, ``"a>b"``); ``scenario`` a
    ``harness.scenario.Scenario`` or a path to a scenario file; extra keyword arguments
    override its fields (``idempotency_keys=False``). Returns the
    ``harness.model.ExecutionResult``; ``harness.pytest_plugin.explain(result)`` turns
    it into the text a failing scenario item prints.
    """
    from dataclasses import replace

    from harness.model import CrashSchedule, ExecutionPlan, Scenario
    from harness.scenario import load_scenario

    def runner(schedule: str = "no-kill", scenario: Any = None, **fields: Any) -> Any:
        if scenario is None:
            scenario = Scenario(name="o1001")
        elif not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        if fields:
            scenario = replace(scenario, **fields)
        return _execute(request.config, ExecutionPlan(scenario, CrashSchedule.parse(schedule)))

    return runner


@pytest.fixture
def mock_gateway(tmp_path: Path) -> Iterator[Any]:
    """A running ``harness.mock_gateway.MockGateway`` on 127.0.0.1 (ephemeral port) logging
    to ``tmp_path/gateway.db``; stopped after the test."""
    from harness.mock_gateway import MockGateway

    with MockGateway(tmp_path / "gateway.db") as gateway:
        yield gateway


@pytest.fixture
def checkpoint_db(tmp_path: Path) -> Iterator[Any]:
    """An open ``shopops.checkpoint.CheckpointStore`` on ``tmp_path/checkpoints.db``."""
    from shopops.checkpoint import CheckpointStore

    with CheckpointStore(tmp_path / "checkpoints.db") as store:
        yield store
