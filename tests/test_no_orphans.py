"""No orphans: interrupting or killing the harness itself leaves no worker, no gateway and
no temporary file behind (psutil-style: synchronise on output, one global deadline)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from process_helpers import end

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 120.0


def start_harness(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    scratch = tmp_path / "scratch"  # a harness killed with SIGKILL leaves its scratch area
    scratch.mkdir()  # (the next harness prunes it): keep it in the test's folder, not /dev/shm
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1",
               SHOPOPS_SCRATCH=str(scratch))
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(ROOT / "scenarios" / "o1001.toml"),
         "--report-dir", str(tmp_path / "reports"), "--jobs", "2"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    return proc, tmpdir


def communicate_or_dump(proc: subprocess.Popen[str], timeout_s: float,
                        where: Path | None = None) -> tuple[str, str]:
    """``proc.communicate`` within ``timeout_s``; past it, ask the harness for every
    thread's stack (SIGUSR1: ``faulthandler``, registered by ``harness.cli.main.main``), say
    whether it had exited (then a descendant holds its pipes) and which processes were
    left (its descendants and any under ``where``, with their state), kill them all, and
    fail with that: a rare hang after a signal was seen twice under load and never
    reproduced alone."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        status = proc.poll()
        left: dict[int, psutil.Process] = {}
        try:
            left.update((p.pid, p) for p in psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        if where is not None:
            left.update((p.pid, p) for p in processes_under(where))
        left.update((p.pid, p) for p in pipe_holders(proc))
        lines = []
        for p in left.values():
            try:
                lines.append(f"{p.pid} {p.status()} {' '.join(p.cmdline())[:200]}")
            except psutil.Error:
                continue
        if status is None:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            os.killpg(proc.pid, signal.SIGKILL)
        for p in left.values():
            try:
                p.kill()
            except psutil.Error:
                pass
        stdout, err = proc.communicate()
        pytest.fail(f"no exit {timeout_s:g} s after the signal (returncode {status!r}); "
                    f"left: {lines}; its threads:\n{err[-12000:]}\nstdout: {stdout[-2000:]}")


def pipe_holders(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    """Every process but this one holding the read end's pipe of ``proc``'s stdout or
    stderr (by inode, from ``/proc/PID/fd``): what keeps ``communicate`` waiting after
    ``proc`` itself has exited, whatever session it moved to."""
    pipes = {f"pipe:[{os.fstat(s.fileno()).st_ino}]" for s in (proc.stdout, proc.stderr)
             if s is not None and not s.closed}
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{p.pid}/fd")
            if any(os.readlink(f"/proc/{p.pid}/fd/{fd}") in pipes for fd in fds):
                found.append(p)
        except OSError:
            continue
    return found


def wait_for_progress(proc: subprocess.Popen[str], executions: int) -> None:
    """Block until the harness reported ``executions`` finished executions."""
    assert proc.stdout is not None
    start, seen = time.monotonic(), 0
    for line in proc.stdout:
        if line.startswith("["):
            seen += 1
            if seen >= executions:
                return
        if time.monotonic() - start > DEADLINE_S:
            break
    raise AssertionError(f"harness exited ({proc.poll()}) or stalled before {executions} "
                         f"executions; stderr: {proc.stderr.read() if proc.stderr else ''}")


def processes_under(path: Path) -> list[psutil.Process]:
    # by command line or working folder: a forked worker is retitled
    # ("shopops-worker start o1001--…", no path in it) but runs in its execution folder
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        try:
            if any(str(path) in arg for arg in (p.info["cmdline"] or [])) or \
                    str(p.info["cwd"] or "").startswith(str(path)):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [p for p in found if p.pid != os.getpid()]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_reaps_everything(tmp_path: Path, sig: signal.Signals) -> None:
    proc, tmpdir = start_harness(tmp_path)
    try:
        wait_for_progress(proc, 3)
        proc.send_signal(sig)
        _, err = communicate_or_dump(proc, 180, tmp_path)  # generous: a loaded CI machine
        assert proc.returncode == 2, err
        assert "interrupted" in err
        assert processes_under(tmp_path) == []
        assert list(tmpdir.iterdir()) == []  # no socket dir, no temp database
        latest = tmp_path / "reports" / "latest"
        summary = (latest / "summary.json").read_text()
        assert '"interrupted": true' in summary
        # every format says so
        assert '"interrupted": true' in (latest / "duplicates.json").read_text()
        assert "INTERRUPTED" in (latest / "report.md").read_text()
        assert "INTERRUPTED" in (latest / "report.html").read_text()
        assert "the run was interrupted" in (latest / "junit.xml").read_text()
    finally:
        end(proc)


def test_sigkill_of_the_harness_leaves_no_worker(tmp_path: Path) -> None:
    """SIGKILL cannot be caught: the workers notice their failpoint channel close and the
    gateway vanish, and exit on their own."""
    proc, _ = start_harness(tmp_path)
    try:
        wait_for_progress(proc, 3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        _, alive = psutil.wait_procs(processes_under(tmp_path), timeout=30)
        assert alive == []
    finally:
        end(proc)
        for p in processes_under(tmp_path):
            p.kill()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_an_interrupted_grade_scores_nothing_and_exits_2(tmp_path: Path, signum: int) -> None:
    """A grade cut short by SIGINT is not a grade: a partial matrix would read as full
    marks (found by a new user: 160/160 from 49 of 168 executions, exit 0). SIGTERM, as a
    cancelled CI job sends it, likewise (it used to end the grade with 143 and no
    results)."""
    out = tmp_path / "grade"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "grade", "--out", str(out), "--jobs", "2"],
        cwd=tmp_path, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_progress(proc, 3)
        proc.send_signal(signum)
        stdout, err = communicate_or_dump(proc, 180, tmp_path)  # generous: a busy machine
        assert proc.returncode == 2, stdout[-2000:] + err[-2000:]
        assert "INTERRUPTED: nothing was scored" in stdout
        results = json.loads((out / "results.json").read_text())
        assert results["score"] == 0 and "interrupted" in results["output"]
        assert all(t["score"] == 0 and "interrupted" in t["output"] for t in results["tests"])
        assert '"interrupted": true' in (out / "run" / "summary.json").read_text()
        assert processes_under(tmp_path) == []
    finally:
        end(proc)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_grade_interrupted_in_its_start_up_check_scores_nothing_and_exits_2(
        tmp_path: Path, signum: int) -> None:
    """A signal while the implementation's ``--help`` runs (here one that waits for it) is
    an interrupted grade too: it used to end with 130 and a traceback, or 143, and no
    ``results.json``."""
    impl = tmp_path / "impl"
    shutil.copytree(ROOT / "shopops", impl / "shopops",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shared = Path(tempfile.mkdtemp(prefix="shopops-test-ready-"))  # a sealed uid writes here
    shared.chmod(0o777)
    ready = shared / "ready"
    main = impl / "shopops" / "__main__.py"
    main.write_text(f"import sys, time\nif '--help' in sys.argv:\n"
                    f"    open({str(ready)!r}, 'w').close()\n    time.sleep(120)\n"
                    + main.read_text())
    out = tmp_path / "grade"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "grade", "--sut", str(impl), "--out", str(out)],
        cwd=tmp_path, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.poll()
        proc.send_signal(signum)
        stdout, err = communicate_or_dump(proc, 180, tmp_path)
        assert proc.returncode == 2, stdout[-2000:] + err[-2000:]
        assert "INTERRUPTED: nothing was scored" in stdout and "Traceback" not in err
        results = json.loads((out / "results.json").read_text())
        assert results["score"] == 0 and "interrupted" in results["output"]
        assert processes_under(tmp_path) == []
    finally:
        end(proc)
        shutil.rmtree(shared, ignore_errors=True)
