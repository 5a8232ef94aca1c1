"""A signal is taken only where the run's main thread holds no lock (CI of stop 33: a
harness still running 180 s after SIGINT). ``concurrent.futures.wait`` interrupted by a
raising handler can leave futures' locks held by the main thread, and the pool thread that
finishes one of them then hangs for ever in ``set_result``. The run now waits through
``harness.run.completions.Completions`` and takes signals through
``harness.launch.stop.DeferredSignals``."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from process_helpers import end

from harness.launch.stop import DeferredSignals
from harness.run.completions import Completions

ROOT = Path(__file__).resolve().parent.parent


def _raising(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@pytest.fixture
def raising_sigint():
    """SIGINT raises ``KeyboardInterrupt`` in the main thread (as ``stop_on_signal`` and
    Python's own handler do) for the test; the handler before it is put back after."""
    previous = signal.signal(signal.SIGINT, _raising)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def kept_handlers():
    """The test changes this process's SIGINT/SIGTERM handlers (``harness.launch.stop``, a
    command run in-process): the ones before it are put back after, and no signal counts
    as seen."""
    from harness.launch import stop

    previous = {s: signal.getsignal(s) for s in stop.STOP_SIGNALS}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    stop.forget_signals()


def _run_in_process(tmp_path: Path) -> int:
    """``shopops-chaos run`` of one o1001 execution in this process (``main``); its exit
    status."""
    from harness.cli.main import main

    return main(["run", str(ROOT / "scenarios" / "o1001.toml"), "--schedule",
                 "t6.gateway_accepted", "--report-dir", str(tmp_path / "r"), "--jobs", "1"])


def test_completions_come_in_the_order_they_finished() -> None:
    done = Completions()
    try:
        a, b, c = Future(), Future(), Future()
        for f in (a, b, c):
            done.watch(f)
        assert done.wait(0.01) is False and done.pop() is None
        b.set_result(2)
        a.set_result(1)
        assert done.wait(5) is True
        assert (done.pop(), done.pop(), done.pop()) == (b, a, None)
        c.cancel()  # a cancelled future is queued too: the runner skips what it no longer waits for
        assert done.wait(5) and done.pop() is c
    finally:
        done.close()
        done.close()  # idempotent


def test_a_completion_from_a_pool_thread_ends_the_wait() -> None:
    done = Completions()
    gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(gate.wait, 60)
        done.watch(fut)
        assert done.wait(0.05) is False  # nothing finished yet: it timed out
        gate.set()
        assert done.wait(60) is True and done.pop() is fut
    done.close()


def test_a_byte_on_wake_fd_ends_the_wait_without_a_completion() -> None:
    done = Completions()
    os.write(done.wake_fd, b"s")
    assert done.wait(60) is False  # woken (not 60 s later), and nothing is queued
    assert done.wait(0.01) is False  # the byte was consumed: the next wait blocks again
    done.close()


def test_a_callback_after_close_writes_nowhere() -> None:
    done = Completions()
    fut: Future[int] = Future()
    done.watch(fut)
    done.close()
    spare_r, spare_w = os.pipe()  # would reuse the closed descriptors' numbers
    try:
        fut.set_result(1)
        os.set_blocking(spare_r, False)
        with pytest.raises(BlockingIOError):
            os.read(spare_r, 1)
    finally:
        os.close(spare_r)
        os.close(spare_w)


@pytest.mark.usefixtures("raising_sigint")
def test_a_deferred_signal_is_recorded_then_taken_where_the_caller_says() -> None:
    done = Completions()
    deferred = DeferredSignals(done.wake_fd)
    with deferred:
        steps = ["before"]
        os.kill(os.getpid(), signal.SIGINT)
        steps.append("after")  # a raising handler would have stopped before this line
        assert deferred.recorded == signal.SIGINT
        assert done.wait(60) is False  # the signal woke the wait
        with pytest.raises(KeyboardInterrupt):
            deferred.take()  # the replaced handler, called here
        assert deferred.recorded is None
        deferred.take()  # nothing left: nothing raised
    assert steps == ["before", "after"]
    assert signal.getsignal(signal.SIGINT) is _raising  # put back
    assert deferred.finish() is False
    done.close()


@pytest.mark.usefixtures("raising_sigint")
def test_a_signal_never_taken_is_finished_after_the_block() -> None:
    done = Completions()
    deferred = DeferredSignals(done.wake_fd)
    with deferred:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # a second one: the first is what counts
    assert deferred.finish() is True  # the handler's KeyboardInterrupt was caught
    assert deferred.finish() is False
    done.close()


def test_off_the_main_thread_and_for_default_handlers_nothing_is_replaced() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    seen: list[object] = []

    def elsewhere() -> None:
        with DeferredSignals(-1):
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join(60)
    assert seen == [before[signal.SIGINT]]
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with DeferredSignals(-1):
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.usefixtures("raising_sigint")
def test_a_signal_in_the_runs_main_thread_is_taken_where_it_waits(tmp_path: Path) -> None:
    """SIGINT while the main thread reports an execution (its progress callback) does not
    raise there, in the middle of the main thread's work, but at its next wait: the run
    ends interrupted with what finished, and the callback ran to its end."""
    from harness.model import Verdict
    from harness.plan.scenario import load_scenario
    from harness.run.runner import run

    steps: list[str] = []

    def progress(done: int, total: int, result: object) -> None:
        steps.append("before")
        if len(steps) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        steps.append("after")

    scenario = load_scenario(ROOT / "scenarios" / "o1001.toml")
    result = run([scenario], tmp_path / "r", jobs=1, progress=progress)
    assert result.interrupted
    assert steps[:2] == ["before", "after"]
    assert 1 <= len(result.results) < 10 and result.not_run > 0
    assert result.results[0].verdict is Verdict.PASS
    assert signal.getsignal(signal.SIGINT) is _raising


@pytest.mark.usefixtures("raising_sigint")
def test_a_run_interrupted_in_its_trace_run_says_its_matrix_was_never_learned(
        tmp_path: Path) -> None:
    """Interrupted before the trace run returned, a run used to say only "1 planned
    execution(s) not run", as if the matrix were one execution: it names the scenario whose
    kill matrix was never learned."""
    from harness.plan.scenario import load_scenario
    from harness.reports.summary_json import summary
    from harness.run.runner import run

    scenario = load_scenario(ROOT / "scenarios" / "o1001.toml")
    result = run([scenario], tmp_path / "r", jobs=1,
                 on_repeat=lambda rep: os.kill(os.getpid(), signal.SIGINT))
    assert result.interrupted and result.results == ()
    assert result.unlearned == ("o1001",)
    assert result.shortfall()[0].startswith("kill matrix never learned for o1001")
    assert summary(result)["unlearned"] == ["o1001"]


@pytest.mark.usefixtures("kept_handlers")
def test_a_grace_lets_the_first_signal_through_and_the_next_one_stops() -> None:
    """``stop_on_signals(grace=1)``: the first signal is only recorded, the second raises
    as always; the handlers before are put back after."""
    from harness.launch import stop

    stop.stop_on_signals(grace=1)
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.graced() == (signal.SIGTERM,) and stop.signalled()
    with pytest.raises(SystemExit) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs at the next bytecode
            pass
    assert info.value.code == 128 + signal.SIGTERM
    os.kill(os.getpid(), signal.SIGTERM)  # once stopping, further ones are ignored


@pytest.mark.usefixtures("kept_handlers")
def test_a_signal_while_a_finished_runs_reports_are_written_lets_them_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an attack: one SIGTERM while the reports of a run that had finished every
    execution were written left the folder without ``summary.json`` and ``latest`` unmoved
    (as only a second signal should). The reports are finished; the run keeps its status."""
    import json

    import harness.reports.write as write

    real = write.finish_run

    def signalled_while_writing(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(write, "finish_run", signalled_while_writing)
    assert _run_in_process(tmp_path) == 0
    summary = json.loads((tmp_path / "r" / "latest" / "summary.json").read_text())
    assert summary["interrupted"] is False and summary["verdict"] == "pass"


_STOPPED = """
import signal, sys, time
from harness.cli.main import _end_process
try:
    exec("raise KeyboardInterrupt")  # as a dataclass made during an interrupted import
except KeyboardInterrupt:
    pass
signal.signal(signal.SIGTERM, lambda *a: None)  # "further signals are ignored"
if sys.argv[1] == "fixed":
    _end_process()

class Slow:  # the interpreter's shutdown takes a while: a signal lands in it
    def __del__(self):
        print("shutting down", flush=True)
        time.sleep(3)

keep = Slow()
sys.exit(2)
"""


@pytest.mark.parametrize("fixed", [False, True], ids=["as-before", "end-stopped"])
def test_a_command_stopped_by_a_signal_exits_with_its_status(tmp_path: Path,
                                                             fixed: bool) -> None:
    """Found by an attack: a command that said "interrupted" died by a signal instead of
    exiting 2: -2 when the KeyboardInterrupt had been raised inside ``exec`` of a string
    (CPython's unhandled-KeyboardInterrupt flag, under ``python -m``), -15 when one more
    SIGTERM came while the interpreter shut down (its Python handler replaced by SIG_DFL).
    ``_end_process`` ends both; the other case shows the test sees them."""
    import subprocess
    import sys

    (tmp_path / "stopped_probe.py").write_text(_STOPPED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.Popen([sys.executable, "-m", "stopped_probe",
                             "fixed" if fixed else "before"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "shutting down\n"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if fixed:
        assert proc.returncode == 2
    else:
        assert proc.returncode in (-signal.SIGTERM, -signal.SIGINT)


@pytest.mark.usefixtures("kept_handlers")
def test_a_signal_swallowed_by_a_finalizer_is_taken_after_it() -> None:
    """Found by an attack: the exception a signal raised inside a finalizer (a weakref
    callback) was printed as "Exception ignored" and lost, and every later signal was then
    ignored. It is sent again and taken once the finalizer has returned."""
    from harness.launch import stop

    ran: list[str] = []

    class Finalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs inside this __del__
            for _ in range(1000):
                pass
            ran.append("finalizer")  # not reached: the KeyboardInterrupt ended it

    stop.stop_on_signals()
    with pytest.raises(KeyboardInterrupt):
        doomed = Finalized()
        del doomed  # the finalizer runs here, swallows the KeyboardInterrupt
        time.sleep(60)  # ... which comes again a moment later, out here
    assert ran == []


def test_a_signal_as_a_passing_run_exits_leaves_its_exit_status(tmp_path: Path) -> None:
    """Found by an attack: SIGTERM or SIGINT in the ~150 ms of the interpreter's shutdown,
    after the last report of a passing run was written, ended it with -15 or -2."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(ROOT / "scenarios" / "o1001.toml"),
         "--schedule", "t6.gateway_accepted", "--report-dir", str(tmp_path / "r"),
         "--jobs", "1"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.split()[:1] == ["summary"]:  # the last line the command prints
                time.sleep(0.03)  # into the interpreter's shutdown (~150 ms)
                proc.send_signal(signal.SIGTERM)
                break
        _, err = proc.communicate(timeout=120)
    finally:
        end(proc)
    assert proc.returncode == 0, err
    assert (tmp_path / "r" / "latest" / "summary.json").is_file()


@pytest.mark.usefixtures("kept_handlers")
def test_a_signal_once_the_reports_are_complete_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a new user: a SIGTERM just after a passing run's last line (its reports
    complete, latest moved) ended it with 2 and "… is incomplete (no summary.json)"."""
    import harness.cli.commands as commands

    real = commands._summary

    def signalled_while_printing(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs at the next bytecode
            pass
        real(*args, **kwargs)

    monkeypatch.setattr(commands, "_summary", signalled_while_printing)
    status = _run_in_process(tmp_path)
    err = capsys.readouterr().err
    assert status == 0 and "incomplete" not in err and "interrupted" not in err, err
    assert (tmp_path / "r" / "latest" / "summary.json").is_file()
