"""A target graded as root runs sealed, like a package (issue 24): its workers and its
``history`` read run as the execution's uid, from a root-owned copy of its folder, with the
sealed environment; what it writes outside its sandbox is refused, what it leaves in the
temporary folders is removed, its daemons are killed and reported.

``tests/tricks.py`` (``TARGET_TRICKS``) keeps the hostile target; sealing needs root.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from target_helpers import NEEDS_DBOS
from tricks import STARTER, TARGET_TRICKS

from harness.grading.grade import grade
from harness.grading.rubric import RubricItem
from harness.grading.targets import load_target_dir
from harness.model import REFERENCE, CheckId, CrashSchedule
from harness.sandbox import users as sandbox
from harness.sandbox.boot import can_hide_processes

pytestmark = pytest.mark.skipif(not sandbox.available(),
                                reason="sealed grading gives workers a uid: needs root")

SECRET = "GRADER_SECRET_TOKEN"
RUBRIC = (RubricItem("one delivery", 10, ("o1001",),
                     (CheckId.EXACTLY_ONE_DELIVERY, CheckId.NO_PROCESS_LEFT)),)


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A root-owned folder every uid may enter and read (0755), unlike pytest's 0700
    ``tmp_path``: what the target is refused there, only its uid refuses."""
    folder = Path(tempfile.mkdtemp(prefix="shopops-seal-test-", dir="/var/tmp"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _grade(folder: Path, out: Path, results: Path) -> tuple[float, dict[str, dict[str, object]]]:
    g = grade(REFERENCE, out, rubric=RUBRIC, target=load_target_dir("python", folder),
              results_path=results, schedule=CrashSchedule.parse("t6.gateway_accepted"),
              jobs=1, worker_timeout_s=120)
    (execution,) = json.loads((out / "run" / "summary.json").read_text())["executions"]
    return g.score, execution["checks"]


def test_a_hostile_target_is_sealed_and_changes_nothing(
        reachable: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET, "s3cret-of-the-grader")
    token = "seal-" + secrets.token_hex(6)
    victim = reachable / "gateway.db"  # another run's gateway log, readable by all
    with sqlite3.connect(victim) as db:
        db.execute("CREATE TABLE deliveries (n INTEGER)")
        db.execute("INSERT INTO deliveries VALUES (1)")
    os.chmod(victim, 0o644)
    results = reachable / "results.json"
    values = {"VICTIM": str(victim), "RESULTS": str(results), "TOKEN": token,
              "SOURCE": str(reachable / "hostile"), "SECRET_NAME": SECRET}
    trick = next(t for t in TARGET_TRICKS if t.name == "escape-the-sandbox")
    plain_dir = trick.build(reachable / "plain", values, with_trick=False)
    hostile = trick.build(reachable / "hostile", values)
    for root, dirs, files in os.walk(reachable):  # all readable: only the uid refuses
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    plain, _ = _grade(plain_dir, tmp_path / "plain", tmp_path / "plain.json")
    assert plain == 10
    before = (_digest(victim), _digest(hostile / "loop.py"))

    score, checks = _grade(hostile, tmp_path / "hostile", results)

    assert score == 0 and not checks[CheckId.NO_PROCESS_LEFT]["passed"]  # its daemon
    assert checks[CheckId.EXACTLY_ONE_DELIVERY]["passed"]
    assert (_digest(victim), _digest(hostile / "loop.py")) == before
    assert json.loads(results.read_text())["score"] == 0
    # a failing execution keeps the target's own state (copied out of its sandbox)
    assert list((tmp_path / "hostile" / "run").rglob("target/state.db"))
    lines = [line for err in (tmp_path / "hostile" / "run").rglob("worker-*.err")
             for line in err.read_text().splitlines() if line.startswith("attack: ")]
    assert lines, "the attack never ran"
    assert not [line for line in lines if line.startswith("attack: wrote")
                or line.startswith("attack: deleted")], lines
    assert "attack: secret None" in lines and "attack: left files in /tmp" in lines
    hidden = [line for line in lines if line.startswith("attack: sees")]
    if can_hide_processes():
        assert set(hidden) == {"attack: sees 0 processes of other users"}, hidden
    # the daemon is dead and every file the uid left in the temporary folders is gone
    assert sandbox.strays() == []
    left = [p for root in sandbox.TEMP_ROOTS for p in Path(root).glob(f"{token}-*")]
    assert left == []



def _waiting_victim(folder: Path, go: Path) -> Path:
    """The starter, whose start waits (up to 120 s) until ``go`` exists: the hostile
    execution attacks while it runs."""
    folder.mkdir()
    (folder / "target.toml").write_text((STARTER / "target.toml").read_text())
    loop = (STARTER / "loop.py").read_text()
    head = 'def start(ctx: Any) -> None:\n    """Run a new case until it parks for approval."""\n'
    assert head in loop
    (folder / "loop.py").write_text(loop.replace(head, head + (
        "    import time\n"
        "    deadline = time.monotonic() + 120\n"
        f"    while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n")))
    return folder


def test_a_concurrent_hostile_execution_cannot_reach_anothers_services(
        reachable: Path, tmp_path: Path) -> None:
    """Two grades at once in one process (one scratch area), one hostile: it finds the
    other execution's approval service and failpoint channel in ``/proc/net/unix`` and
    connects to them (a kill point, an approval call). They are socket files in a folder
    only the other execution's uid can enter: refused by the kernel, and the other grade's
    verdicts and checks are the ones it has alone."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.sandbox import scratch

    area = scratch.area() or sandbox.area()
    shared = reachable / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o1777)  # sticky and world-writable, like /tmp: the go-ahead
    go = shared / "go"
    victim = _waiting_victim(reachable / "victim", go)
    trick = next(t for t in TARGET_TRICKS if t.name == "reach-another-execution")
    hostile = trick.build(reachable / "hostile", {"AREA": str(area), "PID": str(os.getpid()),
                                                   "GO": str(go)})
    for folder in (victim, hostile):
        os.chmod(folder, 0o755)
        for name in os.listdir(folder):
            os.chmod(folder / name, 0o644)
    go.write_text("alone")
    alone_score, alone = _grade(victim, tmp_path / "alone", tmp_path / "alone.json")
    go.unlink()

    with ThreadPoolExecutor(2) as pool:
        other = pool.submit(_grade, victim, tmp_path / "victim", tmp_path / "victim.json")
        attack = pool.submit(_grade, hostile, tmp_path / "hostile", tmp_path / "hostile.json")
        (score, checks), _ = other.result(), attack.result()

    lines = [line for err in (tmp_path / "hostile" / "run").rglob("worker-*.err")
             for line in err.read_text().splitlines() if line.startswith("attack: ")]
    found = [line for line in lines if line.startswith("attack: found")]
    assert found and int(found[0].split()[2]) >= 2, lines  # the approval service, the channel
    assert not [line for line in lines if line.startswith("attack: connected")], lines
    assert [line for line in lines if line.startswith("attack: refused")], lines
    assert score == alone_score == 10
    assert {c: v["passed"] for c, v in checks.items()} == \
        {c: v["passed"] for c, v in alone.items()}


_WHERE = (
    "    import resource, sys\n"
    "    print('where:', ROLE, os.getppid(), os.getuid(), *(resource.getrlimit(r) for r in (\n"
    "        resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_CPU,\n"
    "        resource.RLIMIT_NPROC)), file=sys.stderr, flush=True)\n")


def test_a_sealed_targets_history_read_is_forked_as_its_uid_under_its_limits(
        reachable: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sealed target's ``history`` read is a child of the sealed fork server, like its
    workers (no fresh interpreter: ``TargetDriver._spawned`` is never called), as the
    execution's uid and under the limits its workers have; the grade scores as before."""
    from harness.launch.fork import ForkLauncher
    from harness.sandbox.users import UID_BASE
    from harness.targets.drive import TargetDriver

    folder = reachable / "where"
    folder.mkdir()
    (folder / "target.toml").write_text((STARTER / "target.toml").read_text())
    loop = (STARTER / "loop.py").read_text()
    for role, head in (("start", 'def start(ctx: Any) -> None:\n'),
                       ("history", 'def history(ctx: Any) -> list[dict[str, Any]]:\n')):
        assert head in loop
        loop = loop.replace(head, head + _WHERE.replace("ROLE", repr(role)))
    (folder / "loop.py").write_text(loop)
    for path in (folder, folder / "target.toml", folder / "loop.py"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    spawned: list[object] = []
    monkeypatch.setattr(TargetDriver, "_spawned", lambda self, *a: spawned.append(a) or (
        "", "", "a fresh interpreter", 1))
    servers: list[tuple[int, int | None]] = []  # (launcher index, the server's pid)
    start_sealed = ForkLauncher.start_sealed

    def recorded(self: ForkLauncher, *args: object, **kwargs: object) -> object:
        worker = start_sealed(self, *args, **kwargs)  # type: ignore[arg-type]
        servers.append((kwargs["index"], self.server_pid))  # type: ignore[arg-type]
        return worker

    monkeypatch.setattr(ForkLauncher, "start_sealed", recorded)

    score, _ = _grade(folder, tmp_path / "g", tmp_path / "g.json")

    assert score == 10 and spawned == []
    (execution,) = (tmp_path / "g" / "run" / "executions").iterdir()
    where = {}
    for err in sorted(execution.glob("*.err")):
        for line in err.read_text().splitlines():
            if line.startswith("where: "):
                role, rest = line.split(" ", 2)[1:]
                where.setdefault(role, set()).add(rest)
    assert set(where) == {"start", "history"}, where
    (worker,), (read,) = where["start"], where["history"]
    assert read == worker  # one server, one uid, the same limits
    ppid, uid = (int(n) for n in read.split()[:2])
    assert uid >= UID_BASE and ppid != os.getpid()
    history_index = max(index for index, _ in servers)
    assert (history_index, ppid) in servers  # its parent: the sealed fork server
    # read after each worker (history_not_replaced), every read sealed the same way
    reads = sorted(execution.glob("history-after-*.err"))
    assert len(reads) >= 2 and all("where: history " + read in r.read_text() for r in reads)


@NEEDS_DBOS
def test_a_framework_skeleton_runs_sealed_and_passes(tmp_path: Path) -> None:
    """The frameworks are importable by the execution's uid, whatever they import late: DBOS
    imports ``ctypes.util`` of the ``ctypes`` the boot imported as root from a folder the
    uid may not traverse (here root's 0700 home); the boot points imported packages at their
    pinned folders (``harness.sandbox.boot.repoint_packages``). Its state (a SQLite system
    database) lives in the sandbox."""
    g = grade(REFERENCE, tmp_path / "g", rubric=RUBRIC[:1],
              target=load_target_dir("dbos", STARTER.parent / "dbos_o1001"),
              results_path=tmp_path / "r.json", jobs=1, worker_timeout_s=240,
              schedule=CrashSchedule.parse("t6.gateway_accepted"))
    assert g.score == 10, g.tests[0].output
    assert "Sealed: every worker ran as a user of its own" in g.output
    errors = [e.read_text() for e in (tmp_path / "g" / "run").rglob("worker-*.err")]
    assert not [e for e in errors if "ModuleNotFoundError" in e], errors


@pytest.mark.io
def test_a_target_folder_that_cannot_be_installed_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    """As root the target's folder is copied before any execution (``from_cli``): a symlink
    in it is refused with exit 2 naming ``--sut``, and nothing is written or started."""
    from input_helpers import call

    folder = tmp_path / "sut"
    folder.mkdir()
    (folder / "target.toml").write_text((STARTER / "target.toml").read_text())
    (folder / "loop.py").write_text((STARTER / "loop.py").read_text())
    (folder / "secrets.txt").symlink_to("/etc/shadow")
    out = tmp_path / "out"
    done = call("shopops-chaos", ["grade", "--sut", str(folder), "--target", "python",
                                  "--out", str(out)], tmp_path)
    assert done.code == 2, done
    assert f"--sut {folder}: its folder cannot be installed" in done.err
    assert "'secrets.txt' is a symlink" in done.err
    assert done.changed == {} and done.new_processes == () and not out.exists()


def test_not_root_a_target_is_graded_not_sealed_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the harness cannot give workers a uid (not root: simulated), a ``--target``
    grade runs its workers as the harness's user and says *not sealed*, as a package's."""
    import harness.run.execution as execution

    monkeypatch.setattr(sandbox, "available", lambda: False)
    monkeypatch.setattr(execution, "available", lambda: False)
    g = grade(REFERENCE, tmp_path / "g", rubric=RUBRIC,
              target=load_target_dir("python", STARTER), results_path=tmp_path / "r.json",
              schedule=CrashSchedule.parse("t6.gateway_accepted"), jobs=1,
              worker_timeout_s=120)
    assert g.score == 10
    assert ("Not sealed: the harness is not root, so workers ran as the harness's user."
            in g.output)
    # the page names the target graded, not the reference (found by a new-user trial)
    assert f"Implementation: `{STARTER.name} (target python)`" in (tmp_path / "g" /
                                                                     "report.md").read_text()


def test_a_sealed_target_forked_from_its_server_reports_every_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sealed target workers fork from a sealed server that preloaded the harness's target
    worker (``harness.launch.target_servers.sealed_server``); each child re-arms the
    failpoints from its own environment, so the trace run finds every point and the kill
    matrix is the one an unsealed grade runs (before the re-arm: 2 executions, not 14)."""
    import harness.run.execution as execution

    def executions(out: Path) -> list[str]:
        summary = json.loads((out / "run" / "summary.json").read_text())
        return sorted(e["id"] for e in summary["executions"] if e["verdict"] == "pass")

    target = load_target_dir("python", STARTER)
    sealed = grade(REFERENCE, tmp_path / "sealed", rubric=RUBRIC[:1], target=target,
                   results_path=tmp_path / "s.json", worker_timeout_s=120)
    assert "Sealed: every worker ran" in sealed.output
    monkeypatch.setattr(sandbox, "available", lambda: False)
    monkeypatch.setattr(execution, "available", lambda: False)
    plain = grade(REFERENCE, tmp_path / "plain", rubric=RUBRIC[:1], target=target,
                  results_path=tmp_path / "p.json", worker_timeout_s=120)
    assert sealed.score == plain.score == 10
    assert executions(tmp_path / "sealed") == executions(tmp_path / "plain")
    assert len(executions(tmp_path / "plain")) > 2
    # the preloaded target worker runs as __main__ without runpy's "found in sys.modules"
    # RuntimeWarning in every sealed worker's stderr (shown in every report beside real
    # errors); the python target's workers are all the harness's target worker
    errors = [e.read_text() for e in (tmp_path / "sealed" / "run").rglob("worker-*.err")]
    assert errors and not [e for e in errors if "RuntimeWarning" in e], errors[:1]


@pytest.mark.io
def test_following_a_grades_replay_advice_twice_in_the_target_folder_still_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay command a grade prints (``--sut .``) is run in the student's folder: it
    writes ``reports/`` with its ``latest`` symlink there. Run again — and the next grade's
    install of the folder (``from_cli``) — must not refuse the folder for that symlink:
    the harness's own reports are left out of the copy (found by a new-user trial: the
    second replay and the next grade exited 2, "'reports/latest' is a symlink")."""
    import shlex
    import subprocess
    import sys
    from dataclasses import replace
    from types import SimpleNamespace

    from harness.grading.grade import replay_command
    from harness.grading.targets import from_cli
    from harness.model import ExecutionPlan
    from harness.plan.catalogue import resolve
    from harness.plan.scenario import load_scenario

    folder = tmp_path / "submission"
    folder.mkdir()
    for name in ("target.toml", "loop.py"):
        (folder / name).write_text((STARTER / name).read_text())
    monkeypatch.chdir(folder)
    scenario = replace(load_scenario(resolve("o1001")),
                       target=load_target_dir("python", folder))
    plan = ExecutionPlan(scenario, CrashSchedule.parse("t6.gateway_accepted"))
    command = replay_command(SimpleNamespace(plan=plan))  # type: ignore[arg-type]
    assert command.endswith("--sut . --target python"), command
    argv = [sys.executable, "-m", "harness", *shlex.split(command)[1:]]
    for attempt in (1, 2):
        proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (attempt, proc.stdout + proc.stderr)
    assert (folder / "reports" / "latest").is_symlink()
    assert from_cli("python", ".", "shopops") is not None  # what the next grade does first
