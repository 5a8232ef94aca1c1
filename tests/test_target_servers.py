"""Target workers fork from a server that preloaded only the frameworks their code uses
(``harness.launch.target_servers``): which frameworks a target's folder imports, and which server
a worker's environment routes it to."""

from __future__ import annotations

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
