"""The fork server's spare child: the next worker is forked ahead of its request, while the
last one runs, so a start costs a message instead of a ``fork()`` of the preloaded server
(``docs/design.md``, "The fork server's spare child"). A spare holds nothing of the server
and dies with it; a spare that died unassigned is replaced, not handed out.

Conditions are polled with one generous deadline (a spare is forked when the server is idle,
and nothing tells the test when that is)."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from harness.launch.fork import ForkLauncher
from harness.launch.processes import Worker

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 60.0
PROBE = "import sys\nsys.exit(int(sys.argv[1]))\n"
#: prints the targets of its descriptors above 2 (but the one listing them), one a line
FDS = ("import os\nfor fd in sorted(os.listdir('/proc/self/fd'), key=int)[3:]:\n"
       "    try:\n        print(os.readlink(f'/proc/self/fd/{fd}'))\n"
       "    except OSError:\n        pass\n")


def until(what: str, check: Callable[[], object]) -> object:
    """``check()``'s first truthy value within the deadline, else fail naming ``what``."""
    deadline = time.monotonic() + DEADLINE_S
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {DEADLINE_S} s: {what}")
        time.sleep(0.005)
    return value


def exiting(launcher: ForkLauncher, cwd: Path, status: int, name: str) -> Worker:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    env["PYTHONPATH"] = str(cwd)
    return launcher.start([sys.executable, "-m", "spareprobe", str(status)], env=env,
                          cwd=str(cwd), stdout=str(cwd / f"{name}.out"),
                          stderr=str(cwd / f"{name}.err"), index=0)


def dead(proc: psutil.Process | int) -> bool:
    """Exited (a process, or a pid): a zombie, or reaped."""
    try:
        proc = psutil.Process(proc) if isinstance(proc, int) else proc
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def spares(launcher: ForkLauncher) -> list[int]:
    """The server's live children, when no worker of ours runs: its spare."""
    assert launcher.server_pid is not None
    return [c.pid for c in psutil.Process(launcher.server_pid).children() if not dead(c)]


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    (tmp_path / "spareprobe.py").write_text(PROBE)
    (tmp_path / "fdprobe.py").write_text(FDS)
    return tmp_path


def test_the_next_worker_is_the_child_forked_while_the_last_one_ran(cwd: Path) -> None:
    with ForkLauncher(modules=("spareprobe",), hold=True) as launcher:
        first = exiting(launcher, cwd, 3, "first")
        assert first.wait(DEADLINE_S).returncode == 3
        spare = until("a spare forked after the first worker was let go",
                      lambda: spares(launcher))
        assert isinstance(spare, list) and len(spare) == 1
        second = exiting(launcher, cwd, 4, "second")
        assert second.pid == spare[0]  # handed the spare: no fork on the way
        assert second.wait(DEADLINE_S).returncode == 4
        assert (cwd / "second.err").read_text() == ""


def test_a_spare_holds_only_its_own_socket(cwd: Path) -> None:
    with ForkLauncher(modules=("spareprobe",), hold=True) as launcher:
        assert exiting(launcher, cwd, 0, "w").wait(DEADLINE_S).returncode == 0
        pid = until("a spare", lambda: spares(launcher))[0]  # type: ignore[index]

        def held() -> list[str] | None:
            """Its descriptors' targets, once it left the server's (``None`` before)."""
            try:
                fds = sorted(os.listdir(f"/proc/{pid}/fd"), key=int)
                targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds]
            except FileNotFoundError:
                return None
            return targets if len(targets) == 4 and targets[:3] == [os.devnull] * 3 else None

        # the listener, the control connection, the other workers' gates and the server's
        # output pipe (a stopped spare would hold it past the server) are closed: stdio is
        # /dev/null, and the one descriptor more is its own socket
        targets = until("the spare left the server's descriptors", held)
        assert isinstance(targets, list) and targets[3].startswith("socket:")
        assert psutil.Process(pid).terminal() is None and os.getsid(pid) == pid


def test_a_spare_killed_before_its_request_is_replaced_not_handed_out(cwd: Path) -> None:
    with ForkLauncher(modules=("spareprobe",), hold=True) as launcher:
        assert exiting(launcher, cwd, 0, "w").wait(DEADLINE_S).returncode == 0
        killed = until("a spare", lambda: spares(launcher))[0]  # type: ignore[index]
        spare = psutil.Process(killed)
        os.kill(killed, signal.SIGKILL)  # ours: a child of the server this test started
        # dead, not only signalled (a start that reaches it while it dies gets a worker
        # killed from outside, -9, as a freshly forked child killed then would be)
        until("the spare dead", lambda: dead(spare))
        worker = exiting(launcher, cwd, 6, "after")
        assert worker.pid != killed
        assert worker.wait(DEADLINE_S).returncode == 6


def test_closing_the_launcher_kills_the_spare(cwd: Path) -> None:
    launcher = ForkLauncher(modules=("spareprobe",), hold=True)
    try:
        assert exiting(launcher, cwd, 0, "w").wait(DEADLINE_S).returncode == 0
        spare = psutil.Process(until("a spare", lambda: spares(launcher))[0])  # type: ignore[index]
    finally:
        launcher.close()
    until("the spare gone with its server", lambda: dead(spare))


def test_ready_starts_the_server_before_any_worker_and_refuses_once_closed() -> None:
    launcher = ForkLauncher(modules=("spareprobe",))
    try:
        assert launcher.server_pid is None  # started by the first worker, or by ready()
        pid = launcher.ready()
        assert pid == launcher.server_pid and psutil.pid_exists(pid)
        assert launcher.ready() == pid  # already running: the same server
    finally:
        launcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        launcher.ready()


@pytest.mark.parametrize("how", ["forked on demand", "three held back to back",
                                 "from the spare"])
def test_a_worker_holds_only_its_stdio_however_its_child_was_forked(cwd: Path,
                                                                     how: str) -> None:
    """Found by an attack: a child forked on demand (the server's first worker, starts back
    to back, a dead spare) inherited the server's descriptors of the request's output
    files, and kept them beside its own stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    env["PYTHONPATH"] = str(cwd)
    with ForkLauncher(modules=("fdprobe",), hold=True) as launcher:
        def start(i: int) -> Worker:
            return launcher.start([sys.executable, "-m", "fdprobe"], env=env, cwd=str(cwd),
                                  stdout=str(cwd / f"w{i}.out"),
                                  stderr=str(cwd / f"w{i}.err"), index=i)

        workers = [start(i) for i in range(3 if how == "three held back to back" else 1)]
        if how == "from the spare":
            assert workers[0].wait(DEADLINE_S).returncode == 0
            spare = until("a spare", lambda: spares(launcher))[0]  # type: ignore[index]
            workers.append(start(1))
            assert workers[1].pid == spare
        for worker in workers:
            assert worker.wait(DEADLINE_S).returncode == 0
    for i in range(len(workers)):
        held = (cwd / f"w{i}.out").read_text().splitlines()
        assert [h for h in held if not h.startswith("/proc/")] == [], held


def test_a_server_that_no_longer_listens_is_replaced_not_used_again(cwd: Path) -> None:
    """Found by a new user: right after the fork server was SIGKILLed, its socket was closed
    but the process not yet reapable, so ``alive()`` said yes and the next executions' starts
    failed at once with ``ConnectionRefusedError`` (8 in a row under load). Here nothing
    listens at the server's socket while it lives: the start replaces it."""
    import socket as sockets

    with ForkLauncher(modules=("spareprobe",), hold=True) as launcher:
        assert exiting(launcher, cwd, 0, "w").wait(DEADLINE_S).returncode == 0
        old = psutil.Process(launcher.ready())
        path = launcher.socket_path
        assert path is not None
        deaf = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
        deaf.bind(path + ".deaf")  # a socket file nobody listens at
        deaf.close()
        os.replace(path + ".deaf", path)
        worker = exiting(launcher, cwd, 5, "after")
        assert worker.wait(DEADLINE_S).returncode == 5
        assert launcher.server_pid != old.pid
        until("the old server gone", lambda: dead(old))


def test_begin_starts_the_server_without_waiting_and_the_first_worker_waits(cwd: Path) -> None:
    launcher = ForkLauncher(modules=("spareprobe",))
    try:
        launcher.begin()
        server = launcher.server_pid
        assert server is not None and psutil.pid_exists(server)  # started, not awaited
        launcher.begin()  # starting already: the same server
        assert launcher.server_pid == server
        assert exiting(launcher, cwd, 9, "w").wait(DEADLINE_S).returncode == 9
        assert launcher.ready() == server
        folder = Path(launcher.socket_path or "").parent
    finally:
        launcher.close()
    assert not folder.exists()
    with pytest.raises(RuntimeError, match="closed"):
        launcher.begin()


def test_a_server_begun_and_never_used_is_killed_at_close(cwd: Path) -> None:
    """A command that fails after it began the server (a bad scenario file) leaves no
    process and no socket folder, and does not wait for the server's imports."""
    launcher = ForkLauncher(modules=("spareprobe",))
    launcher.begin()
    assert launcher.server_pid is not None and launcher.socket_path is not None
    server = psutil.Process(launcher.server_pid)
    folder = Path(launcher.socket_path).parent
    launcher.close()
    assert dead(server) and not folder.exists()


def test_a_signal_while_the_server_is_greeted_leaves_no_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``begin`` runs on the command's main thread, where SIGINT raises: one that lands
    between the server's start and its greeting kills the server and removes its folder
    (before, only an ``OSError`` there did)."""
    import harness.launch.fork as fork_module

    def interrupted(path: str) -> None:
        raise KeyboardInterrupt

    before = {p.pid for p in psutil.Process().children()}
    folders = set(Path(tempfile.gettempdir()).glob("shopops-fs-*"))
    monkeypatch.setattr(fork_module, "Conn", interrupted)
    launcher = ForkLauncher(modules=("spareprobe",))
    try:
        with pytest.raises(KeyboardInterrupt):
            launcher.begin()
        assert launcher.server_pid is None
    finally:
        launcher.close()
    left = [p for p in psutil.Process().children() if p.pid not in before and not dead(p)]
    assert left == []
    assert set(Path(tempfile.gettempdir()).glob("shopops-fs-*")) <= folders


#: A harness that starts a fork server as ``_Server`` does, prints its pid and folder, and
#: dies before it greets it (SIGKILL between the start and the hello: found by a user)
_DIES_UNGREETING = """
import os, signal, socket, subprocess, sys, tempfile
folder = tempfile.mkdtemp(prefix="shopops-fs-")
path = os.path.join(folder, "fs.sock")
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(8)
server = subprocess.Popen(
    [sys.executable, "-m", "harness.forkserver.server", "--fd", str(listener.fileno()), path,
     "--parent", str(os.getpid())], pass_fds=(listener.fileno(),),
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
print(server.pid, folder, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_server_whose_harness_died_before_greeting_it_leaves(tmp_path: Path) -> None:
    """Within seconds, not at the hello timeout (60 s): its parent is gone, it removes its
    socket folder and exits."""
    import subprocess

    from harness.forkserver.server import HELLO_TIMEOUT_S

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _DIES_UNGREETING], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    pid_text, folder_text = proc.stdout.split()
    server, folder = int(pid_text), Path(folder_text)
    started = time.monotonic()
    try:
        until("the server gone", lambda: dead(server))
        until("its folder removed", lambda: not folder.exists())
        assert time.monotonic() - started < HELLO_TIMEOUT_S / 2
    finally:
        try:  # ours: started by the harness this test ran
            os.killpg(server, signal.SIGKILL)
        except ProcessLookupError:
            pass
