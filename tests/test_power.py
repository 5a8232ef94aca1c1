"""Power cuts (``[crash] mode = "power"``, ``harness.launch.power``): the shim records what a
real process syncs, a cut puts the folder back to exactly that, the reference survives
(WAL, ``synchronous=FULL``) and the mutants that commit without syncing are caught by
``commits_durable`` — while a plain SIGKILL, which keeps the page cache, lets them pass."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mutants import POWER_MUTANTS, Mutant

from harness.launch import power
from harness.launch.fork import ForkLauncher
from harness.launch.spawn import SpawnLauncher
from harness.model import CheckId, CrashMode, CrashSchedule, ExecutionPlan, KillPoint
from harness.model.plan import Sut
from harness.plan.scenario import ScenarioError, load_scenario
from harness.run.execution import ExecutionResult, execute
from harness.sandbox import users as sandbox

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
#: Far longer than these executions take.
DEADLINE_S = 60.0


def _run_then_cut(tmp_path: Path, code: str) -> tuple[Path, power.Cut, list[str]]:
    """Run ``code`` in a real interpreter with the shim watching ``tmp_path/state``; it
    prints ``ready`` when done writing and is then SIGKILLed, and the folder is cut. Returns
    the folder, the cut and the lines ``code`` printed."""
    state, shadow = tmp_path / "state", tmp_path / "shadow"
    state.mkdir(parents=True)
    power.baseline(state, shadow)
    env = power.env_for(state, shadow, {k: v for k, v in os.environ.items()
                                        if not k.startswith("SHOPOPS_")})
    said: list[str] = []
    with subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)
                           + "\nprint('ready', flush=True)\nimport time\ntime.sleep(600)\n"],
                          cwd=state, env=env, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.strip() == "ready":
                    break
                said.append(line.strip())
            else:
                pytest.fail(f"the child ended before it was ready: {said}")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    return state, power.cut(state, shadow), said


def test_only_synced_content_survives_and_the_file_keeps_its_inode(tmp_path: Path) -> None:
    state, cut, said = _run_then_cut(tmp_path, """
        import os
        with open("kept", "wb") as f:
            f.write(b"synced"); f.flush(); os.fsync(f.fileno())
            f.write(b" and more, never synced")
        with open("never", "wb") as f:
            f.write(b"page cache only")
        print(os.stat("kept").st_ino)
    """)
    assert (state / "kept").read_bytes() == b"synced"
    assert said == [str((state / "kept").stat().st_ino)]  # rolled back in place
    assert not (state / "never").exists()
    assert cut.lost == ("kept", "never")


def test_a_rename_is_durable_only_once_its_directory_is_synced(tmp_path: Path) -> None:
    """The atomic-replace pattern: without the directory fsync the old name keeps its old
    content and the temporary comes back; with it, the new content is there."""
    code = """
        import os
        def put(name, data):
            with open(name, "wb") as f:
                f.write(data); f.flush(); os.fsync(f.fileno())
        put("ckpt.json", b"v1")
        put("ckpt.json.tmp", b"v2")
        os.replace("ckpt.json.tmp", "ckpt.json")
    """
    state, _, _ = _run_then_cut(tmp_path / "a", code)
    assert (state / "ckpt.json").read_bytes() == b"v1"
    assert (state / "ckpt.json.tmp").read_bytes() == b"v2"
    state, _, _ = _run_then_cut(tmp_path / "b", code + """
        d = os.open(".", os.O_RDONLY); os.fsync(d); os.close(d)
    """)
    assert (state / "ckpt.json").read_bytes() == b"v2"
    assert not (state / "ckpt.json.tmp").exists()


@pytest.mark.parametrize(("journal", "sync", "survive"), [
    ("WAL", "FULL", 5),       # the reference's settings: every commit is durable
    ("DELETE", "EXTRA", 5),   # the journal's unlink is synced too
    ("DELETE", "FULL", 4),    # SQLite's documented gap: the last commit may roll back
    ("WAL", "NORMAL", 0),     # commits are not synced in WAL mode
    ("WAL", "OFF", 0),
    ("DELETE", "OFF", 0),
])
def test_sqlite_through_python_keeps_what_its_settings_promise(
        tmp_path: Path, journal: str, sync: str, survive: int) -> None:
    state, _, _ = _run_then_cut(tmp_path, f"""
        import sqlite3
        c = sqlite3.connect("ckpt.db", isolation_level=None)
        c.execute("PRAGMA journal_mode = {journal}")
        c.execute("PRAGMA synchronous = {sync}")
        c.execute("CREATE TABLE t (x)")
        for i in range(5):
            c.execute("INSERT INTO t VALUES (?)", (i,))
    """)
    db = state / "ckpt.db"
    if not db.exists():
        assert survive == 0
        return
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT COUNT(*) FROM t").fetchone()[0]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    except sqlite3.OperationalError as exc:  # the table itself never reached the disk
        assert survive == 0, exc
        return
    finally:
        conn.close()
    assert rows == survive


def test_the_shim_is_inert_without_a_state_folder(tmp_path: Path) -> None:
    shim = str(power.shim_path())
    env = {**os.environ, "LD_PRELOAD": shim}
    env.pop(power.ENV_DIR, None)
    done = subprocess.run([sys.executable, "-c", "import os\nf = open('x', 'wb')\n"
                           "f.write(b'1'); f.flush(); os.fsync(f.fileno())"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]


def _scenario(tmp_path: Path, crash: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\n[crash]\n{crash}\n')
    return path


@pytest.mark.parametrize(("crash", "message"), [
    ('mode = "blackout"', "field 'crash.mode': 'blackout'; allowed: 'kill', 'power'"),
    ('power_points = ["t4.parked"]', 'only with crash.mode = "power"'),
    ('mode = "power"\npower_points = ["t9.nowhere"]', "'t9.nowhere'; allowed: labels"),
])
def test_a_bad_crash_mode_is_one_clear_error(tmp_path: Path, crash: str, message: str) -> None:
    with pytest.raises(ScenarioError, match="crash") as caught:
        load_scenario(_scenario(tmp_path, crash))
    assert message in str(caught.value)


def test_power_points_choose_which_kills_are_power_cuts() -> None:
    s = load_scenario(SCENARIOS / "power-after-approval.toml")
    assert s.crash_mode is CrashMode.POWER
    plan = ExecutionPlan(s, CrashSchedule.parse("t4.parked>t6.send_key_persisted"))
    assert plan.power_cuts == (KillPoint.parse("t6.send_key_persisted"),)
    assert ExecutionPlan(load_scenario(SCENARIOS / "o1001.toml"),
                         CrashSchedule.parse("t4.parked")).power_cuts == ()


def _execute(sut: Sut, scenario: str, schedule: str, out: Path, *,
             fork: bool = True) -> ExecutionResult:
    plan = ExecutionPlan(load_scenario(SCENARIOS / f"{scenario}.toml"),
                         CrashSchedule.parse(schedule), sut)
    code = str(sut.path.resolve()) if sut.path is not None else None
    if not fork:
        return execute(plan, out, launcher=SpawnLauncher(), worker_timeout_s=DEADLINE_S)
    with ForkLauncher(code_path=code, fallback=None) as launcher:
        return execute(plan, out, launcher=launcher, worker_timeout_s=DEADLINE_S)


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "spawned"])
def test_the_reference_survives_power_cuts(tmp_path: Path, fork: bool) -> None:
    result = _execute(Sut(), "power-after-approval", "t6.send_key_persisted>t6.gateway_accepted",
                      tmp_path / "exe", fork=fork)
    assert result.verdict == "pass", result.reasons
    cuts = result.evidence.power_cuts
    assert [str(c.point) for c in cuts] == ["t6.send_key_persisted", "t6.gateway_accepted"]
    assert all(c.committed and not c.lost for c in cuts), cuts
    # what the cut removed is what the loop never synced: SQLite's -shm, never its rows
    assert {f for c in cuts for f in c.files_lost} <= {"checkpoints.db-shm"}


@pytest.mark.parametrize("mutant", POWER_MUTANTS, ids=lambda m: m.name)
def test_each_power_mutant_fails_on_commits_durable_and_only_under_a_power_cut(
        mutant: Mutant, tmp_path: Path) -> None:
    folder = mutant.build(tmp_path / "sut")
    sut = Sut(path=folder, trusted=True)
    scenario, _, schedule = mutant.shown_by.partition("[")
    schedule = schedule.removesuffix("]")
    result = _execute(sut, scenario, schedule, tmp_path / "power")
    assert result.verdict == "fail", result.reasons
    failed = {c.check_id for c in result.checks if not c.passed}
    assert CheckId.COMMITS_DURABLE in failed, result.reasons
    durable = next(c for c in result.checks if c.check_id is CheckId.COMMITS_DURABLE)
    assert "lost committed checkpoint(s) seq" in durable.detail
    # the same kill without the power cut: the page cache keeps every commit
    killed = _execute(sut, "o1001", schedule, tmp_path / "kill")
    assert killed.verdict == "pass", killed.reasons


def test_a_cut_follows_nothing_planted_in_the_shadow_or_the_folder(tmp_path: Path) -> None:
    """The shadow and the folder are the worker's (sealed: its uid writes them) and the
    harness cuts as root: a "../" name, a key that is a path, a symlink to a file outside
    are skipped, never followed — nothing outside the folder is read or written."""
    state, shadow, outside = tmp_path / "state", tmp_path / "shadow", tmp_path / "outside"
    state.mkdir()
    outside.write_bytes(b"secret")
    power.baseline(state, shadow)
    (shadow / "names" / b"../escape".hex()).write_text("1-2-0")
    (shadow / "names" / b"leak".hex()).write_text("../../outside")
    (shadow / "data" / "7-7-0").symlink_to(outside)
    (shadow / "names" / b"linked".hex()).write_text("7-7-0")
    (state / "ln").symlink_to(outside)
    cut = power.cut(state, shadow)
    assert outside.read_bytes() == b"secret"
    assert not (tmp_path / "escape").exists()
    assert sorted(p.name for p in state.iterdir()) == ["linked"]
    assert (state / "linked").read_bytes() == b""  # a name without durable content
    assert "ln" in cut.lost


def test_the_reports_say_which_crashes_were_power_cuts(tmp_path: Path) -> None:
    """Two kills, a plain SIGKILL then a power cut (``power_points``): the console line,
    summary.json, report.md and report.html name the power cut, and only it."""
    exe = "power-after-approval[t3.checkpoint_saved>t6.send_key_persisted]"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(SCENARIOS / "power-after-approval.toml"),
         "--schedule", "t3.checkpoint_saved>t6.send_key_persisted",
         "--report-dir", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if exe in ln]
    assert line.endswith("deliveries=1 power cut at t6.send_key_persisted"), line
    out = tmp_path / "latest"
    (entry,) = json.loads((out / "summary.json").read_text())["executions"]
    assert (entry["id"], entry["power_cuts"]) == (exe, ["t6.send_key_persisted"])
    assert "(power cut at t6.send_key_persisted)" in (out / "report.md").read_text()
    assert "power cut at t6.send_key_persisted" in (out / "report.html").read_text()
    for text in ((out / "report.md").read_text(), (out / "report.html").read_text()):
        assert "power cut at t3" not in text


def test_without_a_compiler_power_cuts_say_so(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(power, "_built", None)
    monkeypatch.setenv("SHOPOPS_POWER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    with pytest.raises(power.PowerUnavailable, match="need a C compiler"):
        power.shim_path()


def test_sync_makes_everything_durable_and_an_unlinked_file_leaves_no_name(
        tmp_path: Path) -> None:
    state, _, _ = _run_then_cut(tmp_path, """
        import os
        with open("a", "wb") as f:
            f.write(b"by sync()")
        os.sync()
        with open("gone", "wb") as f:
            os.unlink("gone")
            f.write(b"x"); f.flush(); os.fsync(f.fileno())
    """)
    assert sorted(p.name for p in state.iterdir()) == ["a"]
    assert (state / "a").read_bytes() == b"by sync()"


@pytest.mark.skipif(not sandbox.available(), reason="sealed workers need root")
def test_a_sealed_execution_keeps_its_syncs_and_loses_the_rest(tmp_path: Path) -> None:
    """Untrusted code runs as its own uid in a sandbox: its shim must be able to write the
    shadow (found: every sync was lost), and a cut must leave its files its own."""
    ref = Mutant("reference", (), (), "").build(tmp_path / "ref")
    off = next(m for m in POWER_MUTANTS if m.name == "synchronous-off").build(tmp_path / "off")
    scenario = load_scenario(SCENARIOS / "o1001-power.toml")
    for folder, verdict in ((ref, "pass"), (off, "fail")):
        plan = ExecutionPlan(scenario, CrashSchedule.parse("t4.parked"), Sut(path=folder))
        result = execute(plan, tmp_path / f"exe-{folder.name}", worker_timeout_s=DEADLINE_S)
        assert result.verdict == verdict, result.reasons
        assert [str(c.point) for c in result.evidence.power_cuts] == ["t4.parked"]


def test_a_cut_never_writes_through_a_hard_link(tmp_path: Path) -> None:
    """A name in the folder that is a hard link to a file elsewhere (where the kernel lets a
    worker make one: ``fs.protected_hardlinks = 0``) is made anew from its durable content,
    never written through: root, who cuts, would otherwise rewrite the other file (found
    by an attack)."""
    state, shadow = tmp_path / "state", tmp_path / "shadow"
    state.mkdir()
    (state / "ckpt.json").write_bytes(b"durable")
    power.baseline(state, shadow)
    outside = tmp_path / "outside.conf"
    outside.write_bytes(b"not the worker's")
    (state / "ckpt.json").unlink()
    os.link(outside, state / "ckpt.json")
    cut = power.cut(state, shadow)
    assert outside.read_bytes() == b"not the worker's"
    assert (state / "ckpt.json").read_bytes() == b"durable"
    assert not (state / "ckpt.json").samefile(outside)
    assert cut.lost == ("ckpt.json",)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the shadow away needs root")
def test_giving_the_shadow_away_never_follows_a_folder_swapped_for_a_symlink(
        tmp_path: Path) -> None:
    """Root gives the shadow to the state folder's owner (a sealed uid) after writing it. A
    worker of that uid swapping a folder of the shadow for a symlink to root's files while
    root walks it must not get those files (found by an attack: a path walk with
    ``chown(follow_symlinks=False)`` handed 100 of 200 root files over in 0.03 s)."""
    uid = 4242
    state, shadow = tmp_path / "state", tmp_path / "state" / ".shopops-power"
    state.mkdir()
    os.chown(state, uid, uid)
    power.baseline(state, shadow)
    victim = tmp_path / "root-owned"
    victim.mkdir()
    for i in range(200):
        (victim / f"f{i}").write_bytes(b"root's")
    sub, real, link = shadow / "data" / "sub", shadow / "data" / "sub.real", \
        shadow / "data" / "sub.ln"
    sub.mkdir()
    for i in range(200):
        (sub / f"f{i}").write_bytes(b"worker's")
    os.symlink(victim, link)
    pid = os.fork()
    if pid == 0:  # the worker: swap the folder for the symlink and back, as fast as it can
        try:
            os.chdir(shadow / "data")  # pytest's folders above are root's alone (0700)
            os.setgid(uid)
            os.setuid(uid)
            while True:
                try:
                    os.rename(sub.name, real.name)
                    os.rename(link.name, sub.name)
                    os.rename(sub.name, link.name)
                    os.rename(real.name, sub.name)
                except OSError:
                    pass
        finally:
            os._exit(0)
    try:
        for _ in range(300):  # without the fix: within the first few
            power._owned_like(state, shadow)  # noqa: SLF001 (the step that gives it away)
            if any(f.stat().st_uid != 0 for f in victim.iterdir()):
                break
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert {os.stat(f).st_uid for f in victim.iterdir()} == {0}
