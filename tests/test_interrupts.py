"""``run`` and ``merge`` interrupted by SIGINT or SIGTERM end as ``grade`` does (issue 24):
exit 2, one line saying "interrupted", no traceback, reports that say so where a run
folder exists, ``latest`` never moved to an incomplete folder, and an incomplete folder
kept by the next command as ``incomplete-<run-id>``, the newest only.

Each test is a real ``shopops-chaos`` process sent a real signal. To hit a moment exactly
(no sleeps), the command runs with one slow step replaced by a stand-in that prints a line
and waits for a signal (``signal.pause``): the test reads the line, then signals. Only the
waiting is stood in; what handles the signal is the command's own code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import end

pytestmark = pytest.mark.processes

SCENARIO = 'name = "ok"\n[crash]\npoints = ["t4.parked"]\nbaseline = false\n'
READY = "READY-FOR-THE-SIGNAL"
#: Runs ``shopops-chaos`` with ``MODULE.NAME`` replaced by a function that (optionally
#: creating the folder it is given, with a file in it) prints READY and waits for a signal;
#: the names in ``NOOPS`` (comma-separated, same module) return ``[]`` at once.
_STAND_IN = """
import importlib, os, signal, sys
module, name, makes = sys.argv[1], sys.argv[2], sys.argv[3] == "makes-folder"
for noop in filter(None, sys.argv[4].split(",")):
    setattr(importlib.import_module(module), noop, lambda *args, **kwargs: [])
def waiting(*args, **kwargs):
    if makes:
        out = next(a for a in args if isinstance(a, os.PathLike))
        os.makedirs(out, exist_ok=True)
        open(os.path.join(out, "half-written.md"), "w").close()
    print(READY, flush=True)
    while True:
        signal.pause()
setattr(importlib.import_module(module), name, waiting)
from harness.cli.main import main
sys.exit(main(sys.argv[5:]))
""".replace("READY", repr(READY))


def _start(tmp_path: Path, stand_in: tuple[str, str, bool], *argv: str, noops: str = ""
           ) -> subprocess.Popen[str]:
    module, name, makes = stand_in
    env = dict(os.environ, PYTHONUNBUFFERED="1", SHOPOPS_SCRATCH="off")
    return subprocess.Popen(
        [sys.executable, "-c", _STAND_IN, module, name,
         "makes-folder" if makes else "-", noops, *argv],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def _signal_when_ready(proc: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # the event: the stand-in says the command is waiting there
        seen.append(line)
        if line.strip() == READY:
            proc.send_signal(signum)
            break
    else:
        raise AssertionError(f"exited ({proc.wait()}) before {READY}: {seen} "
                             f"{proc.stderr.read() if proc.stderr else ''}")
    out, err = proc.communicate(timeout=180)  # generous: a loaded 2-core machine
    return "".join(seen) + out, err


def _assert_interrupted(proc: subprocess.Popen[str], err: str, signum: int) -> None:
    assert proc.returncode == 2, err
    assert "Traceback" not in err, err
    name = "SIGINT" if signum == signal.SIGINT else "SIGTERM"
    assert f"interrupted ({name})" in err, err


SIGNALS = pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM],
                                  ids=["INT", "TERM"])


@SIGNALS
def test_a_run_interrupted_while_starting_its_workers_reports_interrupted(
        tmp_path: Path, signum: int) -> None:
    """The signal lands in ``run`` before its own handling starts (the launcher starting:
    where a SIGINT ended in a ``KeyboardInterrupt`` traceback and no reports). With
    ``--launcher spawn``: a forking run is given its launcher by the command, which began
    its server already (stop 36), so ``run`` makes none."""
    (tmp_path / "ok.toml").write_text(SCENARIO)
    proc = _start(tmp_path, ("harness.run.runner", "make_launcher", False),
                  "run", "ok.toml", "--report-dir", "reports", "--launcher", "spawn")
    try:
        _, err = _signal_when_ready(proc, signum)
        _assert_interrupted(proc, err, signum)
        latest = tmp_path / "reports" / "latest"
        assert '"interrupted": true' in (latest / "summary.json").read_text()
        assert "INTERRUPTED" in (latest / "report.md").read_text()
    finally:
        end(proc)


@SIGNALS
def test_a_run_interrupted_while_loading_writes_nothing(tmp_path: Path, signum: int) -> None:
    (tmp_path / "ok.toml").write_text(SCENARIO)
    (tmp_path / "reports").mkdir()
    proc = _start(tmp_path, ("harness.plan.scenario", "load_scenarios", False),
                  "run", "ok.toml", "--report-dir", "reports")
    try:
        _, err = _signal_when_ready(proc, signum)
        _assert_interrupted(proc, err, signum)
        assert list((tmp_path / "reports").iterdir()) == []
        # found by a new user: an earlier run's latest read as this run's result
        assert "nothing was written, and latest, if there is one, is an earlier run's" in err
    finally:
        end(proc)


@SIGNALS
def test_a_merge_interrupted_while_reading_writes_nothing(tmp_path: Path,
                                                          signum: int) -> None:
    """``merge`` had no SIGTERM handler (exit -15)."""
    for shard in ("a", "b"):
        (tmp_path / shard).mkdir()
    (tmp_path / "reports").mkdir()
    proc = _start(tmp_path, ("harness.cli.merge", "load_shards", False),
                  "merge", "a", "b", "--report-dir", "reports")
    try:
        _, err = _signal_when_ready(proc, signum)
        _assert_interrupted(proc, err, signum)
        assert list((tmp_path / "reports").iterdir()) == []
    finally:
        end(proc)


def test_an_interrupted_merge_leaves_an_incomplete_folder_the_next_command_removes(
        tmp_path: Path) -> None:
    """Interrupted while writing its folder: no ``summary.json`` (incomplete), ``latest``
    not moved to it; the next ``run`` in the same report folder keeps it, renamed
    ``incomplete-<run-id>``, as the evidence of what happened."""
    reports = tmp_path / "reports"
    for folder in (reports, tmp_path / "a", tmp_path / "b"):
        folder.mkdir()
    proc = _start(tmp_path, ("harness.cli.merge", "merge_runs", True),
                  "merge", "a", "b", "--report-dir", "reports", noops="load_shards")
    try:
        _, err = _signal_when_ready(proc, signal.SIGTERM)
        _assert_interrupted(proc, err, signal.SIGTERM)
        assert "is incomplete" in err, err
    finally:
        end(proc)
    (left,) = list(reports.iterdir())
    assert (left / "half-written.md").exists() and not (left / "summary.json").exists()
    assert not (reports / "latest").exists()
    (tmp_path / "ok.toml").write_text(SCENARIO)
    done = subprocess.run([sys.executable, "-m", "harness", "run", "ok.toml",
                           "--report-dir", "reports"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, SHOPOPS_SCRATCH="off"))
    assert done.returncode == 0, done.stderr
    assert not left.exists()  # incomplete, and the process named in it is gone: kept as
    assert (reports / f"incomplete-{left.name}" / "half-written.md").exists()  # evidence
    assert (reports / "latest" / "summary.json").exists()


#: Runs ``shopops-chaos`` with the import of module ``sys.argv[1]`` held: when it is first
#: imported, READY is printed and the import waits for a signal — a signal during the heavy
#: imports of the first second, hit exactly.
_HELD_IMPORT = """
import importlib.abc, signal, sys
held = sys.argv[1]
class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == held:
            sys.meta_path.remove(self)
            print(READY, flush=True)
            while True:
                signal.pause()
        return None
sys.meta_path.insert(0, Hold())
from harness.cli.main import main
sys.exit(main(sys.argv[2:]))
""".replace("READY", repr(READY))


@SIGNALS
@pytest.mark.parametrize("command, held", [
    ("run", "harness.cli.commands"), ("run", "harness.reports.write"),
    ("merge", "harness.cli.commands"), ("merge", "harness.cli.merge")])
def test_a_signal_during_the_first_imports_ends_with_one_line_and_exit_2(
        tmp_path: Path, signum: int, command: str, held: str) -> None:
    """A signal in the first second, while the commands are being imported (SIGINT gave a
    ``KeyboardInterrupt`` traceback and 130, SIGTERM 143 with no message): exit 2, one line,
    nothing written."""
    (tmp_path / "ok.toml").write_text(SCENARIO)
    for folder in ("reports", "a", "b"):
        (tmp_path / folder).mkdir()
    argv = (["run", "ok.toml"] if command == "run" else ["merge", "a", "b"])
    env = dict(os.environ, PYTHONUNBUFFERED="1", SHOPOPS_SCRATCH="off")
    proc = subprocess.Popen([sys.executable, "-c", _HELD_IMPORT, held, *argv,
                             "--report-dir", "reports"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = _signal_when_ready(proc, signum)
        _assert_interrupted(proc, err, signum)
        assert len(err.strip().splitlines()) == 1, err
        assert list((tmp_path / "reports").iterdir()) == []
    finally:
        end(proc)


def test_further_signals_once_a_run_is_stopping_are_ignored(tmp_path: Path) -> None:
    """SIGINT, SIGINT, SIGTERM back to back (the second and third ended the process with
    143 and a folder without ``summary.json``): the first stops the run, the others are
    ignored; exit 2, the reports written saying interrupted."""
    (tmp_path / "ok.toml").write_text(SCENARIO)
    proc = _start(tmp_path, ("harness.run.runner", "make_launcher", False),  # as above
                  "run", "ok.toml", "--report-dir", "reports", "--launcher", "spawn")
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == READY:
                break
        for signum in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=180)
        _assert_interrupted(proc, err, signal.SIGINT)
        latest = tmp_path / "reports" / "latest"
        assert '"interrupted": true' in (latest / "summary.json").read_text()
    finally:
        end(proc)


def test_a_signal_during_the_runs_teardown_keeps_what_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user: SIGTERM just after the last execution finished landed in
    ``run``'s teardown, and every report said 0 executions ("every execution passed every
    check") although two had failed. A real SIGINT sent in the middle of the teardown (to
    this process, whose handler raises as ``stop_on_signal`` does) cuts nothing short: the
    teardown step it lands in goes on, and what finished is kept, marked interrupted."""
    import harness.run.runner as runner
    from harness.model import CrashSchedule, Verdict
    from harness.plan.scenario import load_scenario

    real, steps = runner.sandbox.sweep_strays, []

    def signalled_mid_step() -> object:
        steps.append("before")
        os.kill(os.getpid(), signal.SIGINT)  # Python runs a handler at the next bytecode
        steps.append("after")
        return real()

    def raising(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.sandbox, "sweep_strays", signalled_mid_step)
    previous = signal.signal(signal.SIGINT, raising)
    try:
        scenario = load_scenario(Path(__file__).resolve().parent.parent / "scenarios"
                                 / "o1001.toml")
        result = runner.run([scenario], tmp_path / "r", jobs=1,
                            schedule=CrashSchedule.parse("t6.gateway_accepted"))
        assert signal.getsignal(signal.SIGINT) is raising  # put back after the run
    finally:
        signal.signal(signal.SIGINT, previous)
    assert steps == ["before", "after"]  # the signal did not cut the step short
    assert result.interrupted
    assert [r.verdict for r in result.results] == [Verdict.PASS]
    assert result.verdict is not Verdict.PASS
