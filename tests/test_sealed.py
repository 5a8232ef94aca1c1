"""Sealed workers, started both ways (a fresh interpreter, the sealed fork server): they run
as the execution's own uid, reach the standard library through the pinned path, cannot
write the harness's folders, and a re-sessioned daemon they leave is found and killed."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from harness.launch.fork import ForkLauncher
from harness.launch.sealed import WORKER_ENV, SealedLauncher
from harness.model.plan import SRC, Sut
from harness.sandbox import users as sandbox
from harness.sandbox.boot import can_hide_processes

pytestmark = pytest.mark.skipif(not sandbox.available(),
                                reason="sealed workers get a uid of their own: needs root")

PROBE = '''
import json, os, sys, time
import fractions  # not preloaded: found through the pinned sys.path
out = {"uid": os.getuid(), "euid": os.geteuid(), "groups": os.getgroups(),
       "cwd": os.getcwd(), "argv": sys.argv[1:], "env": sorted(os.environ),
       # what the kernel shows: for a forked worker the server's start-up environment
       "proc_env": sorted(v.split(b"=")[0].decode()
                          for v in open("/proc/self/environ", "rb").read().split(b"\\0") if v),
       "others": [p for p in os.listdir("/proc") if p.isdigit()
                  and os.stat("/proc/" + p).st_uid != os.getuid()]}
for root in ("/dev/shm", "/tmp", "/var/tmp", "/run/lock"):  # left behind: removed with it
    if not os.access(root, os.W_OK):
        continue
    os.makedirs(f"{root}/probe-{os.getuid()}/inner", exist_ok=True)
    open(f"{root}/probe-{os.getuid()}.bin", "wb").write(b"x" * 4096)
try:
    open(sys.argv[1], "w").write("forged")
    out["wrote_outside"] = True
except OSError:
    out["wrote_outside"] = False
if os.fork() == 0:  # a daemon: a new session, the parent gone
    os.setsid()
    if os.fork() == 0:
        open("daemon.pid", "w").write(str(os.getpid()))
        time.sleep(60)
    os._exit(0)
while not os.path.exists("daemon.pid"):
    time.sleep(0.01)
print(json.dumps(out))
'''


@pytest.fixture(params=["spawn", "fork"])
def server(request: pytest.FixtureRequest) -> Iterator[ForkLauncher | None]:
    if request.param == "spawn":
        yield None
        return
    launcher = ForkLauncher(sealed=True, fallback=None)
    try:
        yield launcher
    finally:
        launcher.close()


def test_a_sealed_worker_runs_as_its_uid_and_its_daemon_is_killed(
        tmp_path: Path, server: ForkLauncher | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # the grader's own secret, in the harness's environment when the sealed server starts
    monkeypatch.setenv("GRADER_SECRET_TOKEN", "s3cret")
    code = tmp_path / "code"
    (code / "probe").mkdir(parents=True)
    (code / "probe" / "__init__.py").write_text("")
    (code / "probe" / "__main__.py").write_text(PROBE)
    outside = tmp_path / "evidence.txt"
    outside.write_text("harness's\n")
    tampered: list[str] = []
    with sandbox.Sandbox() as box:
        launcher = SealedLauncher(box, str(sandbox.install_code(code, "probe")),
                                  tampered.append, SRC, server)
        argv = Sut(path=code, module="probe").argv(str(outside))
        env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8",
               "GRADER_SECRET_TOKEN": "s3cret", "SHOPOPS_FAILPOINT_CHANNEL": "@x"}
        worker = launcher.start(argv, env=env,
                                cwd=str(tmp_path), stdout=str(tmp_path / "out"),
                                stderr=str(tmp_path / "err"), index=0)
        getattr(worker, "release", lambda: None)()
        info = worker.wait(60)
        assert info.returncode == 0, (tmp_path / "err").read_text()
        seen = json.loads((tmp_path / "out").read_text())
        assert (seen["uid"], seen["euid"], seen["groups"]) == (box.uid, box.uid, [])
        assert seen["cwd"] == str(box.path) and seen["argv"] == [str(outside)]
        assert seen["wrote_outside"] is False and outside.read_text() == "harness's\n"
        # the environment is an allow-list (issue 24): the contract's names, PATH, locale
        assert "GRADER_SECRET_TOKEN" not in seen["env"]
        assert {"LC_ALL", "PATH", "SHOPOPS_FAILPOINT_CHANNEL"} <= set(seen["env"])
        assert set(seen["env"]) <= WORKER_ENV | {"LC_ALL", "LC_CTYPE"}, seen["env"]
        # nor through /proc/self/environ: a forked worker's is the sealed server's, which
        # held the grader's whole environment (found by an attack, stop 36)
        assert "GRADER_SECRET_TOKEN" not in seen["proc_env"]
        assert set(seen["proc_env"]) <= WORKER_ENV | {"LC_ALL", "LC_CTYPE"}, seen["proc_env"]
        if can_hide_processes():  # other users' processes are hidden from it
            assert seen["others"] == [], seen["others"]
        uid = box.uid
        daemon = int((box.path / "daemon.pid").read_text())
        assert daemon in info.leftovers  # found by its uid, though in another session
        assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"
        assert box.processes() == []
    assert tampered == [] and not box.path.exists()
    # nothing of the uid is left in the temporary folders once the execution ends
    # (the roots listed here, not TEMP_ROOTS: /run/lock was missing from it, found by an attack)
    assert [p for root in ("/dev/shm", "/tmp", "/var/tmp", "/run/lock")
            for p in Path(root).glob(f"probe-{uid}*")] == []



def test_a_planted_symlink_is_removed_before_the_harness_writes(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("x")
    with sandbox.Sandbox() as box:
        (box.path / "approvals.db").symlink_to(target)
        (box.path / "checkpoints.db").write_text("")
        os.chown(box.path / "checkpoints.db", 0, 0)
        removed = box.sanitize()
        assert removed == ["approvals.db (symlink, links 1)"]
        assert not (box.path / "approvals.db").exists()
        assert (box.path / "checkpoints.db").stat().st_uid == box.uid  # handed to the worker
    assert target.read_text() == "x"


def test_an_output_path_that_is_a_symlink_is_refused_both_ways(
        tmp_path: Path, server: ForkLauncher | None) -> None:
    """Root opens a sealed worker's output files: never through a symlink, whether the
    worker is spawned (``O_NOFOLLOW`` there already) or forked by the sealed server (found
    by an attack, stop 36: that open followed one)."""
    code = tmp_path / "code"
    (code / "probe").mkdir(parents=True)
    (code / "probe" / "__init__.py").write_text("")
    (code / "probe" / "__main__.py").write_text("print('ran')\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("the grader's\n")
    (tmp_path / "out").symlink_to(victim)
    with sandbox.Sandbox() as box:
        launcher = SealedLauncher(box, str(sandbox.install_code(code, "probe")),
                                  lambda line: None, SRC, server)
        with pytest.raises(OSError) as info:
            launcher.start(Sut(path=code, module="probe").argv("x"),
                           env={"PATH": os.environ.get("PATH", "")}, cwd=str(tmp_path),
                           stdout=str(tmp_path / "out"), stderr=str(tmp_path / "err"),
                           index=0)
    assert info.value.errno == errno.ELOOP
    assert victim.read_text() == "the grader's\n"
