"""Cost markers for the test modules (one place): ``pure``, ``io``, ``processes``; a test
that carries one of them itself keeps it, a module not listed counts as ``processes``.
Select with ``-m pure`` / ``-m "not processes"``; ``slow`` tests run only with
``--crash-soak`` (``harness.plugin.hooks``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from inner_pytest import INNER_ADDOPTS

from harness.launch.launcher import Launcher
from harness.services.gateway import MockGateway
from shopops import failpoints
from shopops.approvals import ApprovalQueue
from shopops.checkpoint import CheckpointStore
from shopops.gateway_client import EmailGatewayClient
from shopops.policy import DeterministicPolicy
from shopops.records import Records
from shopops.runtime import Services

COSTS = ("pure", "io", "processes")
MODULES = {
    "pure": {"test_state_phases", "test_checks", "test_verdict", "test_matrix",
             "test_scenario_fields", "test_scenario_loop_fields",
             "test_approvals", "test_gateway_client",
             "test_shard", "test_crash_sample",  # their real runs are marked processes
             "test_layering", "test_story_steps", "test_action_checks", "test_bench_args"},
    "io": {"test_checkpoint", "test_mock_gateway", "test_loop",  # test_merge: processes
           "test_inputs", "test_inputs_fuzz", "test_store_files",  # in this process
           "test_peers", "test_inspect_fast_path", "test_evidence_files",
           "test_output_tail"},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test of ``tests/`` its module's cost marker unless it has one."""
    for item in items:
        if any(item.get_closest_marker(c) for c in COSTS):
            continue
        module = getattr(item, "module", None)
        name = module.__name__.rpartition(".")[2] if module is not None else ""
        cost = next((c for c, names in MODULES.items() if name in names), "processes")
        item.add_marker(cost)


@pytest.fixture(scope="session")
def forked_launcher() -> Iterator[Launcher]:
    """The launcher ``run`` uses by default (``make_launcher("fork")``), one per pytest
    process: the reference forks from its fork server, a target's workers from a server
    that preloaded its framework (``harness.launch.target_servers``). The framework-app
    tests execute through it: with fresh interpreters each LangGraph or DBOS worker
    imported its framework again (~1.5 s each), and those tests were most of the suite."""
    from harness.launch.launcher import make_launcher
    launcher = make_launcher("fork")
    yield launcher
    launcher.close()


@pytest.fixture(scope="session")
def inner_pyc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder where inner pytest sessions cache their bytecode (``inner_pytest``): one
    per pytest process, so each compiles ``harness/`` and ``shopops/`` once."""
    return tmp_path_factory.mktemp("pyc")


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
             inner_pyc: Path) -> pytest.Pytester:
    """pytest's ``pytester``, whose inner runs start without the unused plugins and with
    their bytecode cached (``inner_pytest.inner_env``; ``pytester`` itself clears
    ``PYTEST_ADDOPTS`` first)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(inner_pyc))
    return pytester


# -- the reference loop in process (test_loop_recovery, test_order_note; a module that
# wants others defines its own): failpoints disarmed and the test's folder as the working
# directory (``pytestmark = pytest.mark.usefixtures("disarmed")``), a real mock gateway on
# 127.0.0.1, the loop's services on it, and a checkpoint store.

@pytest.fixture
def disarmed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    failpoints.configure(None, None)
    yield
    failpoints.configure(None, None)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[MockGateway]:
    with MockGateway(tmp_path / "gateway.db") as gw:
        yield gw


@pytest.fixture
def svc(tmp_path: Path, gateway: MockGateway) -> Iterator[Services]:
    services = Services(ApprovalQueue(tmp_path / "approvals.db"),
                        EmailGatewayClient(gateway.url, backoff_s=0.0), DeterministicPolicy(),
                        Records.load())
    yield services
    services.approvals.close()
    assert services.gateway is not None
    services.gateway.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CheckpointStore]:
    with CheckpointStore(tmp_path / "shopops.db") as s:
        yield s
