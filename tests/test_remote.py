"""Scenario items on other machines: pytest-xdist remote workers over execnet socket
servers, and pytest-split groups — the same verdicts as a local run.

Each "machine" is an execnet socket server (``python -m execnet.script.socketserver``), a
separate process on its own loopback address (127.0.0.2, 127.0.0.3) with its own copy of
the checkout as its working folder and import path, as a remote machine would have.
Nothing leaves the loopback range. Every server is killed and reaped, descendants
included, even when the test fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from inner_pytest import no_plugins
from junitparser import JUnitXml

ROOT = Path(__file__).resolve().parent.parent
BROKEN = """name = "broken"
[sut]
idempotency_keys = false
[crash]
points = ["t6.gateway_accepted", "t4.parked"]
"""
FILES = ["scenarios/demo-keys-off.toml", "scenarios/broken.toml"]  # a pass and two fails
BASE = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *FILES]
_SKIP = shutil.ignore_patterns(".venv", ".git", "reports", "__pycache__", ".hypothesis",
                               "*.egg-info", ".pytest_cache", ".mypy_cache", ".ruff_cache")


def checkout_copy(dest: Path) -> Path:
    """A copy of the checkout (what a remote machine would have cloned), plus the failing
    scenario the comparison needs."""
    shutil.copytree(ROOT, dest, ignore=_SKIP)
    (dest / "scenarios" / "broken.toml").write_text(BROKEN)
    return dest


def outcomes(junit: Path) -> dict[str, str]:
    """``{test name: passed|failure|error|skipped}`` of a junit file (junitparser)."""
    out = {}
    for suite in JUnitXml.fromfile(str(junit)):
        for case in suite:
            kinds = sorted(type(r).__name__.lower() for r in case.result)
            out[f"{case.classname}::{case.name}"] = ",".join(kinds) or "passed"
    return out


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def reap(proc: subprocess.Popen[str]) -> None:
    """Kill a server and everything it started, then wait for it."""
    try:
        family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = [proc.pid]
    for pid in family:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    psutil.wait_procs([p for p in map(_proc, family[1:]) if p], timeout=30)


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


@pytest.fixture
def socket_servers(tmp_path: Path) -> Iterator[list[tuple[str, int, Path]]]:
    """Two execnet socket servers on 127.0.0.2 and 127.0.0.3, each in its own checkout."""
    servers: list[subprocess.Popen[str]] = []
    watchers: list[threading.Thread] = []
    found = []
    try:
        for n, host in enumerate(("127.0.0.2", "127.0.0.3"), start=1):
            home = checkout_copy(tmp_path / f"machine-{n}")
            port = free_port(host)
            env = {**os.environ, "PYTHONPATH": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
            proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "execnet.script.socketserver", f"{host}:{port}"],
                cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, start_new_session=True)
            servers.append(proc)
            ready = threading.Event()

            def watch(p: subprocess.Popen[str] = proc, ev: threading.Event = ready) -> None:
                for line in p.stdout:  # type: ignore[union-attr]
                    if "Entering Accept loop" in line:
                        ev.set()
                ev.set()  # EOF: the server died; the check below says so

            watchers.append(threading.Thread(target=watch, daemon=True))
            watchers[-1].start()
            assert ready.wait(120) and proc.poll() is None, f"socket server {host} did not start"
            found.append((host, port, home))
        yield found
    finally:
        for proc in servers:
            reap(proc)
        for thread in watchers:
            thread.join(timeout=30)  # EOF once its server is gone
        for proc in servers:
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the checkout and the outcomes of a local run of ``FILES`` in it (one run
    for both tests: the verdicts the remote workers and the pytest-split groups must give)."""
    tmp = tmp_path_factory.mktemp("local")
    home = checkout_copy(tmp / "home")
    local = subprocess.run([*BASE, "-q", f"--junitxml={tmp / 'local.xml'}"], cwd=home,
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(home)})
    assert local.returncode == 1, local.stdout[-3000:]  # broken's items fail
    return home, outcomes(tmp / "local.xml")


@pytest.mark.processes
def test_xdist_socket_workers_give_the_local_verdicts(
        tmp_path: Path, socket_servers: list[tuple[str, int, Path]],
        local: tuple[Path, dict[str, str]]) -> None:
    tx = [f"--tx=socket={host}:{port}//chdir={home}" for host, port, home in socket_servers]
    # The controller runs where the files do not exist, so their relative paths are sent as
    # they are and each worker finds them in its own checkout.
    controller = tmp_path / "controller"
    controller.mkdir()
    # (-o addopts= empties the checkouts' addopts on the workers too: the unused plugins
    # are turned off on the command line, which xdist forwards to them)
    remote = subprocess.run([*BASE, "-v", "--dist=load", *tx,
                             f"--junitxml={tmp_path / 'remote.xml'}", "-o", "addopts=",
                             *no_plugins()], cwd=controller, capture_output=True, text=True,
                            timeout=600)
    assert remote.returncode == 1, remote.stdout[-3000:] + remote.stderr[-3000:]
    want, got = local[1], outcomes(tmp_path / "remote.xml")
    assert got == want
    assert {"passed", "failure"} <= set(want.values())
    # both machines ran items (-v: xdist names the worker that ran each item); in their own
    # checkouts, since the controller's folder has no scenario files
    for n in range(len(socket_servers)):
        assert re.search(rf"^\[gw{n}\] .*(PASSED|FAILED) ", remote.stdout, re.M), \
            remote.stdout[-3000:]


@pytest.mark.processes
def test_pytest_split_groups_cover_the_scenario_items(
        tmp_path: Path, local: tuple[Path, dict[str, str]]) -> None:
    pytest.importorskip("pytest_split")
    home, whole = local
    env = {**os.environ, "PYTHONPATH": str(home)}
    runs = []
    for group in (1, 2):
        junit = tmp_path / f"group-{group}.xml"
        proc = subprocess.run([*BASE, "-q", "--splits=2", f"--group={group}",
                               f"--junitxml={junit}"], cwd=home, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode in (0, 1), proc.stdout[-3000:]
        runs.append(outcomes(junit))
    assert runs[0] and runs[1]
    assert not set(runs[0]) & set(runs[1])
    assert {**runs[0], **runs[1]} == whole
