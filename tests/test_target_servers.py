"""Target workers fork from a server that preloaded only the frameworks their code uses
(``harness.launch.target_servers``): which frameworks a target's folder imports, and which server
a worker's environment routes it to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.forkserver.worker import TARGET_BASE, TARGET_PRELOAD
from harness.launch.target_servers import FRAMEWORKS_ENV, TargetServers, frameworks_of

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("source", "found"), [
    ("import langgraph.graph\n", ("langgraph",)),
    ("from dbos import DBOS\nimport os\n", ("dbos",)),
    ("    from langgraph.types import interrupt\nfrom dbos import DBOS\n", ("dbos", "langgraph")),
    ("# this loop is like langgraph's, without it\nimport sqlite3\n", ()),
    ("import langgraphx\n", ()),
])
def test_the_frameworks_a_folder_imports(tmp_path: Path, source: str, found: tuple) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "loop.py").write_text(source)
    assert frameworks_of(tmp_path, None) == found


def test_a_shipped_example_preloads_its_extra_and_the_starter_nothing() -> None:
    assert frameworks_of(ROOT / "examples" / "langgraph_o1001", "langgraph") == ("langgraph",)
    assert frameworks_of(ROOT / "examples" / "python_starter", None) == ()


def test_workers_are_routed_to_the_server_of_their_frameworks() -> None:
    servers = TargetServers()
    try:
        assert servers.server(()).preload == TARGET_BASE
        assert set(servers.server(("dbos",)).preload) == set(TARGET_BASE) | {"dbos"}
        assert servers.server(()) is servers.server(())  # one server per set
        assert len(servers._servers) == 2
        # none started yet: a server starts at its first worker
        assert [s.server_pid for s in servers._servers.values()] == [None, None]
    finally:
        servers.close()


def test_a_worker_that_names_no_frameworks_gets_them_all(monkeypatch) -> None:
    servers = TargetServers()
    seen = []
    monkeypatch.setattr(TargetServers, "server", lambda self, fw: seen.append(fw) or _Stop())
    for env in ({}, {FRAMEWORKS_ENV: ""}, {FRAMEWORKS_ENV: "langgraph,nonsense"}):
        with pytest.raises(_Stopped):
            servers.start(["python"], env=env, cwd=".", stdout="o", stderr="e", index=0)
    assert seen == [("dbos", "langgraph"), (), ("langgraph",)]
    assert set(TARGET_PRELOAD) >= set(TARGET_BASE)


class _Stopped(Exception):
    pass


class _Stop:
    def start(self, *args: object, **kwargs: object) -> None:
        raise _Stopped


_PPID_TARGET = '''
import os


def start(ctx):
    pass


resume = start


def history(ctx):
    return [{"case": ctx.case_id, "ppid": os.getppid(), "steps": [1, 2, 3]}]
'''


def test_the_history_read_is_forked_from_the_preloaded_server(tmp_path: Path) -> None:
    """Given the execution's launcher, a target's ``history`` runs in a child of the fork
    server (not of the harness, not a fresh interpreter) and returns what a fresh
    interpreter's read returns (issue 25: the read was most of a small target's cost)."""
    from dataclasses import replace

    from harness.launch.fork import ForkLauncher
    from harness.model import PythonTarget, TargetRole
    from harness.plan.scenario import load_scenario
    from harness.targets.drive import TargetDriver

    app = tmp_path / "app"
    app.mkdir()
    (app / "loop.py").write_text(_PPID_TARGET, encoding="utf-8")
    target = PythonTarget(folder=app, functions={TargetRole.START: "loop:start",
                                                 TargetRole.RESUME: "loop:resume",
                                                 TargetRole.HISTORY: "loop:history"})
    scenario = replace(load_scenario(Path(__file__).resolve().parents[1]
                                     / "scenarios" / "targets" / "python-starter.toml"),
                       target=target)
    spawned_dir, forked_dir = tmp_path / "spawned", tmp_path / "forked"
    spawned = TargetDriver(scenario, spawned_dir, tmp_path / "a.db", "http://127.0.0.1:9")
    read, why = spawned.history()
    assert why is None and read is not None
    assert read[0]["ppid"] == os.getpid()  # type: ignore[index]
    with ForkLauncher(modules=("harness.targets.worker",), fallback=None,
                      preload=("harness.targets.worker",)) as launcher:
        forked = TargetDriver(scenario, forked_dir, tmp_path / "a.db", "http://127.0.0.1:9",
                              launcher=launcher, outdir=tmp_path)
        got, why = forked.history()
        server = launcher.server_pid
    assert why is None and got is not None
    assert server is not None and got[0]["ppid"] == server != os.getpid()  # type: ignore[index]
    strip = [{k: v for k, v in item.items() if k != "ppid"}  # type: ignore[union-attr]
             for item in (read[0], got[0])]
    assert strip[0] == strip[1] == {"case": scenario.case_id, "steps": [1, 2, 3]}
    # its output is kept beside the workers'
    assert (tmp_path / "history.out").read_text(encoding="utf-8").startswith("[")
