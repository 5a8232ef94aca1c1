"""pytest plugin of the crash harness (entry point ``pytest11``).

- **Scenario files** are collected: every ``*.toml`` directly inside a folder named by the
  ``crash_scenarios`` ini option (default ``scenarios``, relative to the ini file) or by
  ``--crash-scenarios DIR``, and any ``.toml`` file named on the command line. Each
  execution of the file's kill matrix is an item whose id has a real parameter part in
  characters ``-k`` accepts: ``scenarios/o1001.toml::o1001[t6.gateway_accepted]``,
  ``o1001-double[t3.checkpoint_saved+t6.request_leaving:2]`` (``>`` is ``+``, ``#N`` is
  ``:N``; ``harness.plugin.plan_cache.pytest_param``). So ``--lf``, ``--ff``, ``-k`` and node ids
  work as for any parametrised test, ``pytest -n auto`` (pytest-xdist) spreads the items
  over cores and ``--junitxml`` carries each execution's real time and its replay command
  (``record_property`` style). A bad scenario file is a collection error naming the file,
  the field and what is allowed, which stops the session before anything runs.
- **Collection runs no worker** for a scenario that lists its points; one that learns them
  from a trace run (``points = "all"``, ``double = true``) learns them once and caches the
  plan on disk keyed by the scenario's and the code's content, once per session across
  xdist workers (``harness.plugin.plan_cache``); ``--crash-replan`` learns again.
- **Fixtures** for writing your own kill test in a few lines: ``crash_runner``,
  ``mock_gateway``, ``checkpoint_db``.
- **Options** (group ``crash``, see ``pytest --help``): ``--crash-timeout``,
  ``--crash-keep``, ``--crash-launcher`` (``fork``, the default: one fork server per pytest
  process, closed at the end), ``--crash-scenarios``, ``--crash-replan``.

A failing execution raises ``harness.judge.checks.registry.CheckFailed`` (an ``AssertionError``); an
``unknown`` one raises ``VerdictUnknown``: neither is ever a pass.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.model import Verdict

__all__ = ["ExecutionItem", "ScenarioFile", "VerdictUnknown", "checkpoint_db", "crash_runner",
           "explain", "mock_gateway", "pytest_addoption", "pytest_collect_file",
           "pytest_collection_modifyitems", "pytest_configure", "pytest_runtest_makereport",
           "pytest_unconfigure"]

_RESULTS_KEY = pytest.StashKey[dict[str, Any]]()
_TMP_KEY = pytest.StashKey[Path]()
_LAUNCHER_KEY = pytest.StashKey[Any]()
_LEARNED_KEY = pytest.StashKey[dict[str, Any]]()  # plan id -> result run while planning
_DIRS_KEY = pytest.StashKey[frozenset[Path]]()


class VerdictUnknown(Exception):
    """The execution could not be judged (a kill point not reached, an unexpected exit, a
    deadline): not a pass."""


def _worker_timeout(text: str) -> float:
    """``--crash-timeout``: the shared bound (``shopops.validators.WORKER_TIMEOUT_S``),
    imported here so that loading the plugin imports nothing of the loop."""
    from shopops.validators import WORKER_TIMEOUT_S

    return float(WORKER_TIMEOUT_S(text))


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``--crash-*`` options and the ``crash_scenarios`` ini option."""
    group = parser.getgroup("crash", "ShopOps crash harness (scenario files as test items)")
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
    group.addoption("--crash-scenarios", action="append", default=[], metavar="DIR",
                    help="collect every *.toml in DIR as a scenario file (repeatable; added "
                         "to the folders of the crash_scenarios ini option and collected "
                         "even when not under testpaths)")
    group.addoption("--crash-replan", action="store_true", default=False,
                    help="learn every kill matrix again instead of using the plans cached "
                         "in .pytest_cache (they are keyed by the scenario's and the code's "
                         "content, so a change is picked up without this)")
    parser.addini("crash_scenarios", type="paths", default=[],
                  help="folders whose *.toml files are scenario files (default: scenarios "
                       "next to the ini file)")


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
    """Register the markers the plugin uses (``processes`` on every scenario item, ``slow``
    for ``--crash-soak``: a project without them in its ini would warn ``Unknown
    pytest.mark``); create the folder executions run in; resolve the scenario folders."""
    config.addinivalue_line("markers", "processes: real worker processes and SIGKILL "
                                       "(every scenario item)")
    config.addinivalue_line("markers", "slow: long-running (soak) tests, only with "
                                       "--crash-soak")
    keep = config.getoption("--crash-keep", None)
    if keep:
        base = Path(keep)
        base.mkdir(parents=True, exist_ok=True)
    else:
        _remove_orphaned_temp_dirs()
        base = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-"))
    config.stash[_TMP_KEY] = base
    config.stash[_RESULTS_KEY] = {}
    config.stash[_LEARNED_KEY] = {}
    folders = [Path(p) for p in config.getini("crash_scenarios")]
    if not folders:
        root = config.inipath.parent if config.inipath else config.rootpath
        folders = [root / "scenarios"]
    extra = [Path(p) for p in config.getoption("--crash-scenarios", [])]
    for folder in extra:
        if not folder.is_dir():
            raise pytest.UsageError(f"--crash-scenarios {folder}: no such folder")
        if str(folder) not in config.args:
            config.args.append(str(folder))  # collected even outside testpaths
    config.stash[_DIRS_KEY] = frozenset(f.resolve() for f in [*folders, *extra])


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
    from harness.launch.processes import REGISTRY

    REGISTRY.reap_all()
    launcher = config.stash.get(_LAUNCHER_KEY, None)
    if launcher is not None:
        launcher.close()
    base = config.stash.get(_TMP_KEY, None)
    if base is not None and not config.getoption("--crash-keep", None):
        shutil.rmtree(base, ignore_errors=True)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect a ``.toml`` file inside a scenario folder, or named on the command line."""
    if file_path.suffix != ".toml":
        return None
    folders = parent.config.stash.get(_DIRS_KEY, frozenset())
    if file_path.parent.resolve() in folders or parent.session.isinitpath(file_path):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


def _execute(config: pytest.Config, plan: Any) -> Any:
    from harness.run.execution import execute

    base = config.stash[_TMP_KEY]
    workdir = Path(tempfile.mkdtemp(prefix=plan.dirname[:40] + "-", dir=base))
    return execute(plan, workdir, launcher=_launcher(config),
                   worker_timeout_s=config.getoption("--crash-timeout"))


def _launcher(config: pytest.Config) -> Any:
    """The session's launcher, made at first use (a fork server starts lazily)."""
    from harness.launch.launcher import make_launcher

    launcher = config.stash.get(_LAUNCHER_KEY, None)
    if launcher is None:
        launcher = make_launcher(config.getoption("--crash-launcher"))
        config.stash[_LAUNCHER_KEY] = launcher
    return launcher


def _plan_cache(config: pytest.Config) -> Path:
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("shopops-chaos-plans"))
    return config.stash[_TMP_KEY] / "plans"  # -p no:cacheprovider: this session only


class ScenarioFile(pytest.File):
    """A scenario file: one item per execution of its kill matrix."""

    def collect(self) -> Iterator[pytest.Item]:
        """Validate the file (``ScenarioError`` becomes a collection error), get its plan
        (static, cached, or learned once), yield the items."""
        from harness.model import CrashSchedule, ExecutionPlan
        from harness.plan.scenario import load_scenario
        from harness.plugin.plan_cache import learn_plan, pytest_param

        scenario = load_scenario(self.path)
        ids, done = learn_plan(scenario, _plan_cache(self.config),
                               lambda plan: _execute(self.config, plan),
                               replan=self.config.getoption("--crash-replan"))
        learned = self.config.stash[_LEARNED_KEY]
        for schedule_id in ids:
            plan = ExecutionPlan(scenario, CrashSchedule.parse(schedule_id))
            if schedule_id in done:
                learned[plan.id] = done[schedule_id]
            param = pytest_param(schedule_id)
            yield ExecutionItem.from_parent(self, name=f"{scenario.name}[{param}]",
                                            nodeid=_nodeid(self, scenario.name, param),
                                            plan=plan)


def _nodeid(parent: pytest.Collector, name: str, param: str) -> Any:
    """``parent::name[param]`` with ``param`` as the id's real parameter part (pytest 9's
    structured ``NodeId``, which ``--lf``/``--ff`` compare); ``None`` lets older pytest
    build the same string itself."""
    node_id = getattr(parent, "id", None)
    if node_id is None or not hasattr(node_id, "with_params"):
        return None
    return node_id.child(name).with_params(param)


class ExecutionItem(pytest.Item):
    """One execution of a crash schedule."""

    def __init__(self, *, plan: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.result: Any = None
        self.ran_while_planning = False

    def runtest(self) -> None:
        """Run the execution (or take the one this process ran while learning the plan)
        and raise unless it passed."""
        done = self.config.stash[_LEARNED_KEY].pop(self.plan.id, None)
        self.ran_while_planning = done is not None
        self.result = done or _execute(self.config, self.plan)
        self.config.stash[_RESULTS_KEY][self.plan.id] = self.result
        self.user_properties.append(("replay", self.plan.replay))
        self.user_properties.append(("verdict", str(getattr(self.result.verdict, "value",
                                                            self.result.verdict))))
        self.user_properties.append(("deliveries", self.result.evidence.deliveries))
        _raise_unless_pass(self.result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        """The verdict, reasons, failing checks with evidence, timeline and replay."""
        if isinstance(excinfo.value, (VerdictUnknown, AssertionError)) and self.result:
            text = explain(self.result)
            if not self.config.getoption("--crash-keep", None):  # found by a new user
                text += ("\n  (the evidence folder is removed when the session ends; "
                         "--crash-keep DIR keeps it)")
            return text
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the item comes from, for pytest's report headers."""
        return self.path, None, self.plan.id


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """An execution run while learning the plan keeps its own wall time as the item's
    duration (so ``--junitxml`` and ``--durations`` show real times, not ~0 s)."""
    report = yield
    if (isinstance(item, ExecutionItem) and call.when == "call" and item.ran_while_planning
            and item.result is not None):
        report.duration = float(item.result.elapsed_s)
    return report


def _raise_unless_pass(result: Any) -> None:
    from harness.judge.checks.registry import CheckFailed

    if result.verdict is Verdict.FAIL:
        raise CheckFailed(f"{result.plan.id}: " + "; ".join(result.reasons))
    if result.verdict is Verdict.UNKNOWN:
        raise VerdictUnknown(f"{result.plan.id}: " + "; ".join(result.reasons))


def explain(result: Any) -> str:
    """A human explanation of one execution's verdict (used in pytest failure reports);
    control characters from the implementation are spelled out."""
    from harness.reports.text import visible

    return visible(_explain(result))


def _explain(result: Any) -> str:
    lines = [f"{result.plan.id}: verdict {result.verdict.upper()}"]
    lines += [f"  reason: {r}" for r in result.reasons]
    for check in result.checks:
        if not check.passed and check.applicable:
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
            assert result.verdict is Verdict.PASS
            assert result.evidence.deliveries == 1

    Call as ``crash_runner(schedule, scenario=None, **scenario_fields)``: ``schedule`` is a
    schedule id (``"no-kill"``, ``"t4.parked"``, ``"a>b"``); ``scenario`` a
    ``harness.plan.scenario.Scenario`` or a path to a scenario file; extra keyword arguments
    override its fields (``idempotency_keys=False``). Returns the
    ``harness.model.ExecutionResult``; ``harness.plugin.hooks.explain(result)`` turns
    it into the text a failing scenario item prints.
    """
    from dataclasses import replace

    from harness.model import CrashSchedule, ExecutionPlan, Scenario
    from harness.plan.scenario import load_scenario

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
    """A running ``harness.services.gateway.MockGateway`` on 127.0.0.1 (ephemeral port) logging
    to ``tmp_path/gateway.db``; stopped after the test."""
    from harness.services.gateway import MockGateway

    with MockGateway(tmp_path / "gateway.db") as gateway:
        yield gateway


@pytest.fixture
def checkpoint_db(tmp_path: Path) -> Iterator[Any]:
    """An open ``shopops.checkpoint.CheckpointStore`` on ``tmp_path/checkpoints.db``."""
    from shopops.checkpoint import CheckpointStore

    with CheckpointStore(tmp_path / "checkpoints.db") as store:
        yield store
