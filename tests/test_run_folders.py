"""Run folders that stay complete, and a console that behaves: ``latest`` moves only to a
complete run (also when the harness is SIGKILLed), old runs are pruned, passing
executions' databases are dropped unless ``--keep-all``, a closed stdout ends quietly
with the run's real exit status, control characters never reach the console."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from process_helpers import end

from harness.reports.console import Console, ProgressLine
from harness.reports.runs import (
    KILLED,
    drop_older_killed,
    is_complete,
    keep_killed,
    prune_runs,
)

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 120.0
KEYS_OFF = """
name = "keys-off"
[sut]
idempotency_keys = false
[crash]
points = ["t6.gateway_accepted"]
baseline = false
"""
PARKED = """
name = "parked"
[crash]
points = ["t4.parked"]
baseline = false
"""


def chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _run_dir(root: Path, stamp: str, pid: int, complete: bool) -> Path:
    folder = root / f"{stamp}-{pid}"
    folder.mkdir(parents=True)
    if complete:
        (folder / "summary.json").write_text("{}")
    return folder


@contextlib.contextmanager
def _harness(cwd: Path, *args: str, env: dict[str, str] | None = None
             ) -> Iterator[subprocess.Popen[str]]:
    """``shopops-chaos run`` of o1001 into ``cwd/r`` in a session of its own, its stdout
    piped; afterwards its group is SIGKILLed if it still runs and its pipe closed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(ROOT / "scenarios" / "o1001.toml"),
         "--report-dir", "r", *args], cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, start_new_session=True, env=env)
    try:
        yield proc
    finally:
        end(proc)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_prune_keeps_the_newest_complete_runs_and_live_ones(tmp_path: Path) -> None:
    dead, me = _dead_pid(), os.getpid()
    old = [_run_dir(tmp_path, f"20260101T00000{i}Z", dead, True) for i in range(4)]
    broken = _run_dir(tmp_path, "20260102T000000Z", dead, False)  # a SIGKILLed harness
    running = _run_dir(tmp_path, "20260103T000000Z", me, False)   # this process, running
    other = tmp_path / "notes"  # not a run folder: never touched
    other.mkdir()
    os.symlink(old[0].name, tmp_path / "latest")
    removed = prune_runs(tmp_path, 2, current=running)
    assert sorted(p.name for p in removed) == sorted([old[1].name, broken.name])
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["latest", "notes", old[0].name, old[2].name, old[3].name,
                           running.name])  # old[0] is latest's
    with pytest.raises(ValueError, match="keep"):
        prune_runs(tmp_path, 0)


def test_the_newest_killed_run_is_kept_as_evidence_and_only_it(tmp_path: Path) -> None:
    """``keep_killed`` renames the newest incomplete folder of a harness that is gone to
    ``incomplete-<run-id>``; ``prune_runs`` removes the older incomplete ones and every
    ``incomplete-`` folder but the newest. A live harness's folder, the current run's and
    complete runs are left alone."""
    dead, me = _dead_pid(), os.getpid()
    older = _run_dir(tmp_path, "20260102T000000Z", dead, False)
    newer = _run_dir(tmp_path, "20260102T010000Z", dead, False)
    (newer / "executions" / "o1001--t4.parked").mkdir(parents=True)
    (newer / "executions" / "o1001--t4.parked" / "worker-0.out").write_text("kept")
    (newer / "executions" / "o1001--t6.gateway_accepted").mkdir()  # running at the kill
    running = _run_dir(tmp_path, "20260103T000000Z", me, False)
    done = _run_dir(tmp_path, "20260101T000000Z", dead, True)
    kept_before = tmp_path / f"{KILLED}20260101T120000Z-{dead}"
    kept_before.mkdir()
    graded = tmp_path / f"grade-20260101T130000Z-{dead}"  # a finished grade: report.html
    (graded / "run").mkdir(parents=True)
    (graded / "report.html").write_text("<html></html>")
    kept = keep_killed(tmp_path, current=running)
    assert kept == tmp_path / f"{KILLED}{newer.name}"
    assert (kept / "executions" / "o1001--t4.parked").is_dir() and not newer.exists()
    assert not (kept / "executions" / "o1001--t6.gateway_accepted").exists()  # empty: gone
    removed = prune_runs(tmp_path, 2, current=running)
    assert sorted(p.name for p in removed) == sorted([older.name, kept_before.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [kept.name, running.name, done.name, graded.name])
    assert keep_killed(tmp_path, current=running) is None  # nothing left to keep


def test_runs_killed_in_a_row_leave_one_partial_folder(tmp_path: Path) -> None:
    """Found by a new user: five runs SIGKILLed in a row left five partial folders, since
    only a run that ends kept the newest and pruned the rest. A run now drops the older
    ones as it starts (``drop_older_killed``); a live harness's folder and complete runs
    are never touched."""
    dead, me = _dead_pid(), os.getpid()
    reports = tmp_path / "r"
    killed = [_run_dir(reports, f"2026010{i}T000000Z", dead, False) for i in range(1, 4)]
    live = _run_dir(reports, "20260101T120000Z", me, False)
    done = _run_dir(reports, "20260101T130000Z", dead, True)
    with _harness(tmp_path, "--jobs", "1") as proc:  # one more run, killed at once
        assert proc.stdout is not None
        assert proc.stdout.readline(), "the harness ended before it was killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    left = sorted(p.name for p in reports.iterdir())
    assert len(left) == 4 and {killed[2].name, live.name, done.name} <= set(left), left
    # the next run keeps only the newest of the two killed ones left now
    (mine,) = set(left) - {killed[2].name, live.name, done.name}
    assert drop_older_killed(reports, current=live) == [killed[2]]
    assert (reports / mine).is_dir()


def test_the_next_run_keeps_a_sigkilled_runs_partial_folder(tmp_path: Path) -> None:
    """A harness SIGKILLed mid-run leaves its folder without ``summary.json``; the next
    run keeps it as ``incomplete-<run-id>`` with the executions that finished (it was
    removed: the evidence of what happened before the kill was lost) and says where. (With
    ``--keep-all``: without it a passing execution leaves no folder.)"""
    with _harness(tmp_path, "--jobs", "1", "--keep-all") as proc:
        assert proc.stdout is not None
        for _ in range(4):  # the header, then three executions finished
            assert proc.stdout.readline(), "the harness ended before it was killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    (partial,) = list((tmp_path / "r").iterdir())
    assert not is_complete(partial)
    # an execution still running at the kill has an empty folder: not kept
    finished = sorted(p.name for p in (partial / "executions").iterdir() if any(p.iterdir()))
    assert finished, "no execution had finished before the kill"
    nxt = chaos("run", str(ROOT / "scenarios" / "o1001.toml"), "--schedule", "t4.parked",
                "--report-dir", "r", cwd=tmp_path)
    assert nxt.returncode == 0, nxt.stderr
    kept = tmp_path / "r" / f"{KILLED}{partial.name}"
    assert kept.is_dir() and not partial.exists()
    assert sorted(p.name for p in (kept / "executions").iterdir()) == finished
    assert f"incomplete r/{kept.name}" in " ".join(nxt.stdout.split()), nxt.stdout


@pytest.mark.pure
def test_console_spells_out_controls_and_stops_on_a_closed_pipe() -> None:
    out = io.StringIO()
    Console(out).line("w1 stderr:", "\x1b[2J\x1b]0;title\x07\u202eok")
    assert out.getvalue() == "w1 stderr: \\x1b[2J\\x1b]0;title\\x07\\u202eok\n"

    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    console = Console(Closed())
    console.line("first")
    console.line("second")  # silently dropped
    assert console.closed


@pytest.mark.pure
def test_progress_estimate_once_the_total_is_known() -> None:
    line = ProgressLine(started=100.0)
    assert line.prefix(3, 27, False, now=103.0) == "[  3/27+]"
    assert line.prefix(10, 40, True, now=110.0) == "[ 10/40] eta 30s"
    assert line.prefix(100, 418, True, now=200.0) == "[100/418] eta 5m18s"
    assert line.prefix(40, 40, True, now=140.0) == "[ 40/40]"


def test_runs_keep_nothing_of_passing_executions_prune_and_move_latest(tmp_path: Path) -> None:
    scen = tmp_path / "scen"
    scen.mkdir()
    (scen / "keys-off.toml").write_text(KEYS_OFF)
    (scen / "parked.toml").write_text(PARKED)
    first = chaos("run", str(scen), "--report-dir", "r", "--keep-runs", "1", cwd=tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    latest = tmp_path / "r" / "latest"
    summary = json.loads((latest / "summary.json").read_text())
    by_id = {e["id"]: e for e in summary["executions"]}
    failed = Path(by_id["keys-off[t6.gateway_accepted]"]["workdir"])
    assert (by_id["parked[t4.parked]"]["verdict"],
            by_id["keys-off[t6.gateway_accepted]"]["verdict"]) == ("pass", "fail")
    # a passing execution keeps no folder: its workers' last lines are in the summary and
    # on the page (found by a new user: only stderr's were, on the page only)
    assert by_id["parked[t4.parked]"]["workdir"] is None
    tails = [w["stdout_tail"] for w in by_id["parked[t4.parked]"]["workers"]]
    assert any('"stopped": "parked"' in t for t in tails), tails
    assert "&#34;stopped&#34;: &#34;parked&#34;" in (latest / "report.html").read_text()
    # and no trace run that no report shows keeps one either (keys-off's no-kill run,
    # baseline = false, did not pass; found by a new user)
    assert sorted(p.name for p in (latest / "executions").iterdir()) == [failed.name]
    assert (failed / "gateway.db").is_file() and (failed / "worker-0.out").is_file()
    assert "not kept (a passing execution; --keep-all keeps its files)" in " ".join(
        (latest / "report.html").read_text().split())
    assert {p.name for p in latest.iterdir()} >= {"report.html", "report.md", "junit.xml",
                                                  "summary.json", "duplicates.json"}
    second = chaos("run", str(scen / "parked.toml"), "--report-dir", "r", "--keep-runs", "1",
                   "--keep-all", cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    runs = [p for p in (tmp_path / "r").iterdir() if p.name != "latest"]
    assert runs == [latest.resolve()]  # the first run was pruned
    (ex,) = json.loads((latest / "summary.json").read_text())["executions"]
    assert (Path(ex["workdir"]) / "gateway.db").is_file()  # --keep-all


def test_closed_stdout_ends_quietly_with_the_real_exit_status(tmp_path: Path) -> None:
    scen = tmp_path / "keys-off.toml"
    scen.write_text(KEYS_OFF)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scen),
                             "--report-dir", "r"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # like `| head -1`: read one line, then go away
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err  # the run's verdict (a failure), not a pipe error
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert is_complete((tmp_path / "r" / "latest").resolve())


def test_points_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "harness", "points"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"Traceback" not in err


@pytest.mark.parametrize("after_lines", [1, 4])
def test_sigkill_of_the_harness_leaves_latest_on_a_complete_run(
        tmp_path: Path, after_lines: int) -> None:
    first = chaos("run", str(ROOT / "scenarios" / "o1001.toml"), "--schedule", "t4.parked",
                  "--report-dir", "r", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = (tmp_path / "r" / "latest").resolve()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    try:
        with _harness(tmp_path, "--jobs", "2",  # its leftovers stay in scratch
                      env=dict(os.environ, SHOPOPS_SCRATCH=str(scratch))) as proc:
            assert proc.stdout is not None
            start = time.monotonic()
            for _ in range(after_lines):
                assert proc.stdout.readline(), "the harness ended before it was killed"
                assert time.monotonic() - start < DEADLINE_S
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            assert proc.returncode == -signal.SIGKILL
        latest = tmp_path / "r" / "latest"
        assert latest.resolve() == before and is_complete(latest)
        assert json.loads((latest / "summary.json").read_text())["verdict"] == "pass"
    finally:
        workers = [p for p in psutil.process_iter(["cwd"])
                   if (p.info["cwd"] or "").startswith(str(tmp_path))]
        _, alive = psutil.wait_procs(workers, timeout=30)
        for p in alive:
            p.kill()


def test_runner_progress_says_when_the_total_is_final(tmp_path: Path) -> None:
    from harness.model import CrashSchedule
    from harness.plan.scenario import load_scenario
    from harness.run.runner import run

    scenario = load_scenario(ROOT / "scenarios" / "late-approval.toml")
    seen: list[tuple[int, int, bool]] = []
    result = run([scenario], tmp_path / "r", jobs=2,
                 progress=lambda done, total, res, final: seen.append((done, total, final)))
    assert result.verdict == "pass" and len(seen) == len(result.results) == 5
    assert seen[-1] == (5, 5, True)
    first_final = next(i for i, (_, _, final) in enumerate(seen) if final)
    assert all(total == 5 for _, total, _ in seen[first_final:])
    three: list[int] = []
    run([scenario], tmp_path / "r2", jobs=2, schedule=CrashSchedule.parse("t4.parked"),
        progress=lambda done, total, res: three.append(done))  # three arguments still work
    assert three == [1]
