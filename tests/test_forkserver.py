"""The fork-server launcher: real processes, exact environments, exact exit statuses, no
orphans — and the same verdicts as a fresh interpreter per worker.

Synchronisation is on events (a file the child creates, a line the child harness prints,
the server's exit report), with one global deadline; never on sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from process_helpers import end

from harness.launch.fork import ForkLauncher, ForkServerError, ForkWorker
from harness.launch.launcher import Launcher, SpawnLauncher, make_launcher
from harness.launch.processes import PopenWorker, Worker
from harness.services.channel import FailpointChannel, Hit

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 60.0
PROBE = '''
import json, os, signal, sys
mode = sys.argv[1]
if mode == "describe":
    json.dump({"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
               "pgid": os.getpgid(0), "env": dict(os.environ), "cwd": os.getcwd(),
               "argv": sys.argv}, sys.stdout)
elif mode == "raise":
    raise RuntimeError("boom from the probe")
elif mode == "exit":
    sys.exit(int(sys.argv[2]))
elif mode == "hang":  # the ready file appears with its content (rename is atomic)
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    while True:
        signal.pause()
'''


@pytest.fixture(scope="module")
def fork() -> Iterator[ForkLauncher]:
    """One fork server for the module; it also forks the probe module."""
    with ForkLauncher(modules=("shopops", "fsprobe")) as launcher:
        yield launcher


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    (tmp_path / "fsprobe.py").write_text(PROBE)
    return tmp_path


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def start(launcher: Launcher, cwd: Path, argv: list[str], env: dict[str, str],
          name: str = "w") -> Worker:
    return launcher.start(argv, env=env, cwd=str(cwd), stdout=str(cwd / f"{name}.out"),
                          stderr=str(cwd / f"{name}.err"), index=0)


def probe(launcher: Launcher, cwd: Path, *args: str, env: dict[str, str] | None = None,
          name: str = "w") -> Worker:
    env = env if env is not None else base_env(PYTHONPATH=str(cwd))
    return start(launcher, cwd, [sys.executable, "-m", "fsprobe", *args], env, name)


def shopops_run(launcher: Launcher, cwd: Path, env: dict[str, str], name: str = "w",
                db: str = "c.db") -> Worker:
    return start(launcher, cwd, [sys.executable, "-m", "shopops", "run", "--db", str(cwd / db),
                                 "--approvals", str(cwd / "a.db")], env, name)


def wait_for_file(path: Path, worker: Worker) -> None:
    """Block until the child created ``path``; fail with its exit if it died instead."""
    start_t = time.monotonic()
    if isinstance(worker, ForkWorker):
        worker.release()
    while not path.exists():
        if not psutil.pid_exists(worker.pid) or time.monotonic() - start_t > DEADLINE_S:
            info = worker.wait(1)
            raise AssertionError(f"child never got ready: {info}")
        time.sleep(0.002)


def assert_gone(procs: list[psutil.Process]) -> None:
    """Within the deadline every process has exited (a zombie no longer runs; reaping one
    that is not our child is its parent's, or init's, business)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        alive = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"still running: {alive}")
        psutil.wait_procs(alive, timeout=0.05)


# ------------------------------------------------------------------------ a real process


def test_a_forked_worker_is_a_separate_process_in_its_own_session(
        fork: ForkLauncher, probe_dir: Path) -> None:
    worker = probe(fork, probe_dir, "describe")
    assert isinstance(worker, ForkWorker)
    info = worker.wait(DEADLINE_S)
    assert info.returncode == 0, (probe_dir / "w.err").read_text()
    seen = json.loads((probe_dir / "w.out").read_text())
    assert seen["pid"] == worker.pid != os.getpid()
    assert seen["sid"] == seen["pgid"] == worker.pid  # its own session and process group
    assert seen["ppid"] == fork.server_pid not in (None, os.getpid())
    assert os.getsid(fork.server_pid) == fork.server_pid  # the server has its own session
    assert seen["cwd"] == str(probe_dir)
    assert seen["argv"][0].endswith("fsprobe.py") and seen["argv"][1:] == ["describe"]


def test_the_worker_gets_exactly_the_env_passed(
        probe_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # set in the harness before the server starts, so the server itself has it too
    monkeypatch.setenv("FORKSERVER_CANARY", "from-the-harness")
    monkeypatch.setenv("SHOPOPS_FAILPOINTS", "t0.case_started=kill")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{probe_dir}{os.pathsep}{ROOT}",
           "ONLY_PASSED": "yes"}
    with ForkLauncher(modules=("shopops", "fsprobe")) as launcher:
        info = probe(launcher, probe_dir, "describe", env=env).wait(DEADLINE_S)
        assert info.returncode == 0, (probe_dir / "w.err").read_text()
        assert json.loads((probe_dir / "w.out").read_text())["env"] == env
        # the reference loop re-arms its failpoints from the passed env only: no kill at t0
        run = shopops_run(launcher, probe_dir, base_env(), "loop").wait(DEADLINE_S)
        assert run.returncode == 0, (probe_dir / "loop.err").read_text()
        armed = shopops_run(launcher, probe_dir, base_env(SHOPOPS_FAILPOINTS="t0.case_started="
                                                          "kill"), "armed", db="c2.db")
        assert armed.wait(DEADLINE_S).returncode == -signal.SIGKILL


def test_the_preload_and_its_warm_up_leave_no_descriptor_thread_or_file() -> None:
    """What the server does before its first fork (imports, the parser, inspect's caches,
    the gateway client's path up to the socket) opens nothing a child would inherit: the
    same descriptors after as before, one thread, no file left in the temp folder."""
    code = (
        "import os, sys, tempfile, threading\n"
        "before = sorted(os.listdir('/proc/self/fd'))\n"
        "from harness.forkserver.worker import preload\n"
        "preload()\n"
        "print(before == sorted(os.listdir('/proc/self/fd')), threading.active_count())\n")
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=DEADLINE_S, cwd=ROOT, env={**os.environ, "TMPDIR": tmp})
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["True", "1"], out
        assert os.listdir(tmp) == []


def test_a_forked_worker_environ_is_replaced_by_its_difference_exactly() -> None:
    """``run_module`` sets only what differs from the server's environment: the result is
    the given env, in ``os.environ`` and at the C level (what ``getenv`` and a program the
    worker starts see), for a variable removed, changed, added and kept."""
    import ctypes

    from harness.forkserver.worker import _replace_environ

    getenv = ctypes.CDLL(None).getenv
    getenv.restype = ctypes.c_char_p
    saved = dict(os.environ)
    target = {k: v for k, v in saved.items() if k != "PATH"}  # removed
    target |= {"HOME": saved.get("HOME", "") + "-changed", "REPLACE_ENV_NEW": "added"}
    try:
        os.environ["REPLACE_ENV_GONE"] = "x"
        _replace_environ(target)
        assert dict(os.environ) == target
        for name in ("PATH", "REPLACE_ENV_GONE"):
            assert getenv(name.encode()) is None
        assert getenv(b"HOME") == target["HOME"].encode()
        assert getenv(b"REPLACE_ENV_NEW") == b"added"
    finally:
        os.environ.clear()
        os.environ.update(saved)


MAIN_PROBE = """\
import json, sys
print(json.dumps({"name": __name__, "file": __file__, "cached": __cached__,
                  "package": __package__, "spec": __spec__.name, "doc": __doc__,
                  "loader": type(__loader__).__name__, "argv0": sys.argv[0],
                  "is_main": sys.modules["__main__"].__dict__ is globals()}))
"""


def test_the_preloaded_main_runs_as_runpy_would_run_it(tmp_path: Path) -> None:
    """A preloaded package's ``__main__`` (looked up once, ``main_code``) run by
    ``run_main`` sees the same module globals, ``sys.argv[0]`` and ``sys.modules`` entry as
    under ``runpy.run_module(..., run_name="__main__", alter_sys=True)``: what ``python -m``
    gives a spawned worker. Each runs in a child interpreter of its own."""
    pkg = tmp_path / "probepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(MAIN_PROBE)
    runs = {
        "runpy": "import runpy; runpy.run_module('probepkg', run_name='__main__', "
                 "alter_sys=True)",
        "cached": "from harness.forkserver.worker import main_code, run_main; "
                  "run_main(*main_code('probepkg'))",
    }
    seen = {}
    for how, code in runs.items():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=DEADLINE_S, cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
        assert out.returncode == 0, out.stderr
        seen[how] = json.loads(out.stdout)
    assert seen["cached"] == seen["runpy"]
    assert seen["cached"]["name"] == "__main__" and seen["cached"]["is_main"]
    assert seen["cached"]["argv0"] == str(pkg / "__main__.py")


def test_a_package_without_a_main_is_an_import_error() -> None:
    from harness.forkserver.worker import main_code

    with pytest.raises(ImportError, match="json.__main__"):
        main_code("json")


# -------------------------------------------------------------------------- exit statuses


@pytest.fixture(params=["fork", "spawn"])
def launcher(request: pytest.FixtureRequest, fork: ForkLauncher) -> Launcher:
    return fork if request.param == "fork" else SpawnLauncher()


def test_sigkill_from_another_thread_gives_exactly_minus_9(
        launcher: Launcher, probe_dir: Path) -> None:
    ready = probe_dir / "ready"
    worker = probe(launcher, probe_dir, "hang", str(ready))
    wait_for_file(ready, worker)
    killer = threading.Thread(target=worker.kill)
    killer.start()
    killer.join()
    info = worker.wait(DEADLINE_S)
    assert info.returncode == -signal.SIGKILL
    assert info.sigkilled and info.killed_by_harness and not info.timed_out
    assert info.leftovers == ()


def test_a_sigkill_from_outside_the_harness_is_not_ours(
        launcher: Launcher, probe_dir: Path) -> None:
    ready = probe_dir / "ready"
    worker = probe(launcher, probe_dir, "hang", str(ready))
    wait_for_file(ready, worker)
    os.kill(int(ready.read_text()), signal.SIGKILL)
    info = worker.wait(DEADLINE_S)
    assert (info.returncode, info.killed_by_harness) == (-signal.SIGKILL, False)


def test_the_deadline_kills_and_still_reports_the_status(
        launcher: Launcher, probe_dir: Path) -> None:
    ready = probe_dir / "ready"
    worker = probe(launcher, probe_dir, "hang", str(ready))
    wait_for_file(ready, worker)
    info = worker.wait(0.05)
    assert (info.returncode, info.timed_out, info.killed_by_harness) == (-9, True, False)


@pytest.mark.parametrize(("args", "status"), [(("exit", "0"), 0), (("exit", "3"), 3),
                                               (("describe",), 0)])
def test_a_normal_exit_gives_its_status(launcher: Launcher, probe_dir: Path,
                                        args: tuple[str, ...], status: int) -> None:
    info = probe(launcher, probe_dir, *args).wait(DEADLINE_S)
    assert (info.returncode, info.killed_by_harness, info.timed_out) == (status, False, False)


def test_the_reference_loop_exits_0_with_its_output(launcher: Launcher, tmp_path: Path) -> None:
    info = shopops_run(launcher, tmp_path, base_env()).wait(DEADLINE_S)
    assert info.returncode == 0, (tmp_path / "w.err").read_text()
    assert json.loads((tmp_path / "w.out").read_text())["stopped"] == "parked"


def test_an_exception_gives_1_and_the_traceback_on_stderr(
        launcher: Launcher, probe_dir: Path) -> None:
    info = probe(launcher, probe_dir, "raise").wait(DEADLINE_S)
    assert info.returncode == 1
    err = (probe_dir / "w.err").read_text()
    assert err.startswith("Traceback (most recent call last):")
    assert err.rstrip().endswith("RuntimeError: boom from the probe")


def test_a_bad_failpoint_spec_fails_the_start_like_an_import(
        launcher: Launcher, tmp_path: Path) -> None:
    info = shopops_run(launcher, tmp_path, base_env(SHOPOPS_FAILPOINTS="t0.nope=kill")).wait(
        DEADLINE_S)
    assert info.returncode == 1
    assert "FailpointSpecError" in (tmp_path / "w.err").read_text()


def test_a_missing_cwd_is_an_oserror_at_start(launcher: Launcher, tmp_path: Path) -> None:
    with pytest.raises(OSError) as excinfo:
        launcher.start([sys.executable, "-m", "shopops", "--help"], env=base_env(),
                       cwd=str(tmp_path / "missing"), stdout=str(tmp_path / "w.out"),
                       stderr=str(tmp_path / "w.err"), index=0)
    assert excinfo.value.errno == 2


# ------------------------------------------------------------------------------ isolation


def test_consecutive_workers_share_no_failpoint_counters(fork: ForkLauncher,
                                                         tmp_path: Path) -> None:
    # armed to let the first hit through and kill at the second: counters leaking from
    # one worker into the next would kill the second worker at its (first) t0
    spec = base_env(SHOPOPS_FAILPOINTS="t0.case_started=1*off->kill")
    for n in range(2):
        info = shopops_run(fork, tmp_path, spec, f"w{n}", db=f"c{n}.db").wait(DEADLINE_S)
        assert info.returncode == 0, (tmp_path / f"w{n}.err").read_text()
    # and over the channel: every worker reports its hits from occurrence 1
    hits: list[Hit] = []
    with FailpointChannel(lambda hit: hits.append(hit) or {"do": "continue"}) as channel:
        env = base_env(SHOPOPS_FAILPOINT_CHANNEL=channel.path)
        pids = []
        for n in range(2, 4):
            worker = shopops_run(fork, tmp_path, env, f"w{n}", db=f"c{n}.db")
            pids.append(worker.pid)
            assert worker.wait(DEADLINE_S).returncode == 0
    first, second = ([(h.label, h.occurrence) for h in hits if h.pid == pid] for pid in pids)
    assert first and first == second  # both numbered from 1, the same way
    assert first[0] == ("t0.case_started", 1)
    assert len(set(pids)) == 2


def test_parallel_starts_share_one_server(fork: ForkLauncher, probe_dir: Path) -> None:
    results: dict[int, Any] = {}

    def one(n: int) -> None:
        worker = probe(fork, probe_dir, "exit", str(n), name=f"p{n}")
        results[n] = (worker.pid, worker.wait(DEADLINE_S).returncode)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {n: rc for n, (_, rc) in results.items()} == {n: n for n in range(8)}
    assert len({pid for pid, _ in results.values()}) == 8


# ---------------------------------------------------------------------- choice and refusal


def test_only_the_reference_loop_is_forked(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "pass"]
    with ForkLauncher() as launcher:
        assert isinstance(start(launcher, tmp_path, argv, base_env()), PopenWorker)
        assert launcher.server_pid is None  # no server was needed
    with ForkLauncher(fallback=None) as strict, pytest.raises(ValueError, match="only python"):
        start(strict, tmp_path, argv, base_env())
    assert make_launcher("fork").name == "fork" and make_launcher("spawn").name == "spawn"
    with pytest.raises(ValueError, match="allowed: fork, spawn"):
        make_launcher("thread")


def test_another_shopops_first_on_the_path_is_never_forked(tmp_path: Path) -> None:
    student = tmp_path / "student"
    (student / "shopops").mkdir(parents=True)
    (student / "shopops" / "__init__.py").write_text("")
    (student / "shopops" / "__main__.py").write_text("raise SystemExit(7)\n")
    env = base_env(PYTHONPATH=f"{student}{os.pathsep}{ROOT}")
    argv = [sys.executable, "-m", "shopops", "run"]
    with ForkLauncher() as launcher:
        assert launcher.forks(argv, env, str(tmp_path)) == (
            f"shopops would be imported from {student}, not {ROOT}")
        worker = start(launcher, tmp_path, argv, env)
        assert isinstance(worker, PopenWorker)  # the student's code, in a fresh interpreter
        assert worker.wait(DEADLINE_S).returncode == 7
        assert launcher.forks(argv, base_env(), str(tmp_path)) is None
    with ForkLauncher(fallback=None) as strict, pytest.raises(ValueError, match="student"):
        start(strict, tmp_path, argv, env)
    # a trusted variant preloaded from its own folder is forked when that folder comes first
    with ForkLauncher(code_path=str(student)) as variant:
        assert variant.forks(argv, env, str(tmp_path)) is None
        assert variant.forks(argv, base_env(), str(tmp_path)) is not None  # the reference
        worker = start(variant, tmp_path, argv, env)
        assert isinstance(worker, ForkWorker)
        assert worker.wait(DEADLINE_S).returncode == 7


# ----------------------------------------------------------------------------- no orphans


def test_close_leaves_no_server_and_no_worker(probe_dir: Path) -> None:
    launcher = ForkLauncher(modules=("fsprobe",))
    ready = probe_dir / "ready"
    worker = probe(launcher, probe_dir, "hang", str(ready))
    wait_for_file(ready, worker)
    assert launcher.server_pid is not None
    server = psutil.Process(launcher.server_pid)
    child = psutil.Process(worker.pid)
    assert launcher.socket_path is not None
    socket_dir = Path(launcher.socket_path).parent
    launcher.close()
    assert not server.is_running()  # reaped by close()
    assert_gone([child])
    info = worker.wait(DEADLINE_S)  # the server reported the kill before it left
    assert (info.returncode, info.killed_by_harness) == (-signal.SIGKILL, False)
    assert not socket_dir.exists()
    launcher.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        probe(launcher, probe_dir, "exit", "0")


def test_a_held_worker_runs_nothing_until_released(probe_dir: Path) -> None:
    with ForkLauncher(modules=("fsprobe",), hold=True) as launcher:
        never = probe(launcher, probe_dir, "hang", str(probe_dir / "never"), name="never")
        never.kill()
        assert never.wait(DEADLINE_S).returncode == -signal.SIGKILL
        assert not (probe_dir / "never").exists()  # killed at the gate, before its code
        released = probe(launcher, probe_dir, "exit", "4")
        assert released.wait(DEADLINE_S).returncode == 4  # wait() opened the gate


@pytest.mark.parametrize("via", ["fork", "sut_boot"])
def test_a_live_worker_is_titled_by_role_and_execution(via: str, fork: ForkLauncher,
                                                       probe_dir: Path) -> None:
    # ps shows "shopops-worker ROLE EXECUTION", not "python3 -m harness.forkserver.server"; read
    # from the kernel (/proc/PID/cmdline via psutil) while the worker is alive and waiting
    title = "shopops-worker resume x-o1001-3fa2c0ffee"
    ready = probe_dir / "ready"
    env = base_env(PYTHONPATH=str(probe_dir), HARNESS_WORKER_TITLE=title)
    if via == "fork":
        worker = probe(fork, probe_dir, "hang", str(ready), env=env)
    else:  # a spawned untrusted worker's boot (uid -1: limits only, no privilege drop)
        env["PYTHONPATH"] += os.pathsep + str(ROOT)
        worker = start(SpawnLauncher(), probe_dir,
                       [sys.executable, "-P", "-s", "-m", "harness.sandbox.boot", "2048", "64",
                        "600", "64", "-1", str(probe_dir), "fsprobe", "hang", str(ready)],
                       env, "w")
    try:
        wait_for_file(ready, worker)
        shown = " ".join(psutil.Process(worker.pid).cmdline())
        assert shown.startswith("shopops-worker resume x-o1001-3fa2c0ffee"), shown
        assert "forkserver" not in shown and "sut_boot" not in shown
    finally:
        worker.kill()
        worker.wait(DEADLINE_S)


def test_the_harness_titles_each_worker_by_its_role_and_execution_folder(
        tmp_path: Path) -> None:
    """What a real execution asks for: each worker's env names its role and the execution
    folder (the name the fork server's child and sut_boot set as its title)."""
    from harness.model import CrashSchedule, WorkerRole
    from harness.plan.scenario import load_scenarios
    from harness.run.runner import run

    titles: list[str] = []

    class Recording:
        def __init__(self, inner: Launcher) -> None:
            self.inner = inner

        def start(self, argv: list[str], **kw: Any) -> Worker:
            titles.append(kw["env"]["HARNESS_WORKER_TITLE"])
            return self.inner.start(argv, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    with ForkLauncher() as inner:
        result = run(load_scenarios([ROOT / "scenarios" / "o1001.toml"]), tmp_path,
                     launcher=Recording(inner), jobs=1,  # type: ignore[arg-type]
                     schedule=CrashSchedule.parse("t6.gateway_accepted"))
    assert result.results and titles
    assert [r.verdict for r in result.results] == ["pass"], [r.reasons for r in result.results]
    folders = {p.name for p in tmp_path.rglob("*") if p.is_dir()}
    roles = {r.value for r in WorkerRole}
    for title in titles:
        word, role, execution = title.split(" ")
        assert word == "shopops-worker" and role in roles and execution in folders, title
    assert {t.split(" ")[1] for t in titles} >= {"start", "resume"}, titles


def test_a_dead_server_is_reported_and_replaced(probe_dir: Path) -> None:
    with ForkLauncher(modules=("fsprobe",)) as launcher:
        ready = probe_dir / "ready"
        worker = probe(launcher, probe_dir, "hang", str(ready))
        wait_for_file(ready, worker)
        assert launcher.server_pid is not None
        os.kill(launcher.server_pid, signal.SIGKILL)
        child = psutil.Process(worker.pid)
        with pytest.raises(ForkServerError, match="went away"):
            worker.wait(DEADLINE_S)
        assert_gone([child])  # its group was killed: no orphan
        assert probe(launcher, probe_dir, "exit", "0").wait(DEADLINE_S).returncode == 0


def test_sigterm_to_the_server_kills_and_reports_its_children(probe_dir: Path) -> None:
    with ForkLauncher(modules=("fsprobe",)) as launcher:
        ready = probe_dir / "ready"
        worker = probe(launcher, probe_dir, "hang", str(ready))
        wait_for_file(ready, worker)
        assert launcher.server_pid is not None
        os.kill(launcher.server_pid, signal.SIGTERM)
        info = worker.wait(DEADLINE_S)
        assert (info.returncode, info.killed_by_harness) == (-signal.SIGKILL, False)


CHILD_HARNESS = '''
import json, os, sys
from harness.launch.fork import ForkLauncher
cwd = sys.argv[1]
launcher = ForkLauncher(modules=("fsprobe",))
env = dict(os.environ, PYTHONPATH=cwd)
worker = launcher.start([sys.executable, "-m", "fsprobe", "hang", os.path.join(cwd, "ready")],
                        env=env, cwd=cwd, stdout=os.path.join(cwd, "w.out"),
                        stderr=os.path.join(cwd, "w.err"), index=0)
worker.release()
print(json.dumps({"server": launcher.server_pid, "worker": worker.pid}), flush=True)
sys.stdin.read()
'''


def test_sigkill_of_the_harness_leaves_no_server_and_no_worker(probe_dir: Path) -> None:
    tmp = probe_dir / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", CHILD_HARNESS, str(probe_dir)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"child harness died: {proc.wait()}"
        pids = json.loads(line)
        procs = [psutil.Process(pids["server"]), psutil.Process(pids["worker"])]
        wait_for_file(probe_dir / "ready", _Alive(pids["worker"]))
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(DEADLINE_S) == -signal.SIGKILL
        assert_gone(procs)
        assert list(tmp.iterdir()) == []  # the server removed its socket and folder
    finally:
        end(proc)


class _Alive:
    """Enough of a worker for ``wait_for_file`` (a process that is not our child)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def wait(self, _: float) -> str:
        return f"pid {self.pid} is gone"


# ------------------------------------------------------------------- the same verdicts


def _outcomes(result: Any) -> dict[str, tuple[str, tuple[tuple[str, bool], ...]]]:
    return {r.plan.id: (r.verdict, tuple((c.check_id, c.passed) for c in r.checks))
            for r in result.results}


def test_fork_and_spawn_agree_on_a_sample(tmp_path: Path) -> None:
    """The default run's sample: one scenario of each kind (the story, gateway faults,
    concurrent resumers, a lease takeover, a corrupt and a v1 checkpoint, a rejection)
    killed where the gateway accepted the send (the duplicate-send point; one that never
    gets there is unknown under both). The whole comparison is the slow test below
    (``--crash-soak``)."""
    from harness.model import CrashSchedule
    from harness.plan.scenario import load_scenarios
    from harness.run.runner import run

    sample = ("o1001", "gateway-5xx", "two-resumers", "lease-takeover",
              "checkpoint-corrupt-json", "v1-migration", "reply-lost-retry", "rejection")
    scenarios = load_scenarios([ROOT / "scenarios" / f"{n}.toml" for n in sample])
    outcomes = {}
    for name in ("fork", "spawn"):
        result = run(scenarios, tmp_path / name, jobs=2, launcher=name,
                     schedule=CrashSchedule.parse("t6.gateway_accepted"))
        assert result.launcher == name and not result.interrupted
        outcomes[name] = _outcomes(result)
    assert outcomes["fork"] == outcomes["spawn"]
    assert len(outcomes["fork"]) == len(scenarios)
    assert {v for v, _ in outcomes["fork"].values()} >= {"pass"}


@pytest.mark.slow
def test_fork_and_spawn_give_the_same_verdicts_and_checks(tmp_path: Path) -> None:
    from harness.plan.scenario import load_scenarios
    from harness.run.runner import run

    # Every shipped scenario but the double-crash matrix: its ~255 executions are pairs of
    # the single kills compared here, and with fresh interpreters they alone take minutes.
    scenarios = [s for s in load_scenarios([ROOT / "scenarios"]) if not s.double]
    assert len(scenarios) >= 20
    outcomes = {}
    for name in ("fork", "spawn"):
        result = run(scenarios, tmp_path / name, jobs=2, launcher=name)
        assert result.launcher == name and not result.interrupted
        outcomes[name] = _outcomes(result)
    assert outcomes["fork"] == outcomes["spawn"]
    assert len(outcomes["fork"]) > len(scenarios)  # every kill of every matrix


def test_the_launcher_options_exist(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--crash-launcher=*"])
    cli = subprocess.run([sys.executable, "-m", "harness", "run", "--help"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert "--launcher {fork,spawn}" in cli.stdout
