"""Grading mode end to end: untrusted implementations that do not start, hang, or try to
write their own score get a sensible, explained score; rubric files are validated."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from input_helpers import call

from harness.grading.grade import DEFAULT_RUBRIC, RubricError, RubricItem, grade, load_rubric
from harness.model import CheckId, CrashSchedule
from harness.model.plan import Sut
from harness.sandbox import users as sandbox

ROOT = Path(__file__).resolve().parent.parent
ONE_ITEM = (RubricItem("Exercise 4: a lease owner rejects resume from another owner", 10,
                       ("two-resumers",), ("exactly_one_delivery",)),)


def student(tmp_path: Path, cli_main: str | None = None, init: str = "") -> Path:
    """A copy of the reference with ``shopops/__init__.py`` prefixed by ``init`` and, if
    given, ``cli.main`` replaced by ``cli_main``."""
    folder = tmp_path / "student"
    shutil.copytree(ROOT / "shopops", folder / "shopops",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "fixtures", folder / "fixtures")
    package = folder / "shopops" / "__init__.py"
    package.write_text(init + package.read_text())
    if cli_main is not None:
        cli = folder / "shopops" / "cli.py"
        cli.write_text(cli.read_text() + "\n" + cli_main)
    return folder


def test_an_implementation_that_does_not_import_scores_zero_with_the_reason(
        tmp_path: Path) -> None:
    hostile = "<script>alert('pwned')</script>"
    folder = student(tmp_path, init=f"raise ImportError({hostile!r} + ' student forgot a "
                                    "module')\n")
    result = grade(Sut(path=folder), tmp_path / "out", rubric=ONE_ITEM)
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["score"] == 0 and result.score == 0
    (test,) = data["tests"]
    assert test["max_score"] == 10 and test["score"] == 0
    assert "does not start" in test["output"] and "student forgot a module" in test["output"]
    assert "could not be started" in data["output"]
    # the student-facing page: the score, and the implementation's text escaped, not markup
    page = (tmp_path / "out" / "report.html").read_text()
    assert result.page_path == tmp_path / "out" / "report.html"
    assert "Grade: 0 / 10" in page and ONE_ITEM[0].name in page
    assert "&lt;script&gt;alert(" in page and hostile not in page


def test_a_trusted_variant_that_does_not_start_scores_zero_with_the_reason(
        tmp_path: Path) -> None:
    """Our own code starts its ``--help`` through the grade's fork server (no interpreter of
    its own): an import error there is still the reason given, and nothing runs."""
    folder = student(tmp_path, init="raise ImportError('variant forgot a module')\n")
    result = grade(Sut(path=folder, trusted=True), tmp_path / "out", rubric=ONE_ITEM)
    (test,) = result.tests
    assert result.score == 0 and "variant forgot a module" in test.output, test.output
    assert "could not be started" in result.output
    assert not (tmp_path / "out" / "run").exists()  # no execution ran


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
def test_a_preflight_that_hangs_is_killed_at_its_deadline(tmp_path: Path,
                                                          trusted: bool) -> None:
    """``--help`` started through the grade's launcher (sealed fork server, or the server
    preloaded from the folder) that never returns: killed at the preflight's deadline, and
    said so. Any deadline holds: the hang never ends, however loaded the machine."""
    from harness.grading.grade import _launcher
    from harness.grading.preflight import preflight

    folder = student(tmp_path, cli_main="def main(argv=None):  # noqa: F811\n"
                                        "    import time\n"
                                        "    time.sleep(3600)\n")
    sut = Sut(path=folder, trusted=trusted)
    launcher = _launcher(sut, None)
    try:
        problem = preflight(sut, timeout_s=1.0, launcher=launcher)
    finally:
        launcher.close()
    assert problem == "`python -m shopops --help` did not finish within 1 s", problem
    if not trusted and sandbox.available():
        assert sandbox.strays() == []  # the hung process of its uid is gone


def test_a_hanging_implementation_is_killed_and_scores_zero(tmp_path: Path) -> None:
    hang = ("def main(argv=None):  # noqa: F811\n"
            "    import sys, time\n"
            "    if sys.argv[1:2] == ['--help'] or (argv and argv[:1] == ['--help']):\n"
            "        return 0\n"
            "    time.sleep(3600)\n")
    folder = student(tmp_path, cli_main=hang)
    # one execution of a two-worker story is enough to show it: each hanging worker costs
    # the whole deadline, and the grade runs the execution 3 times (harness.grading.retry: a passed
    # deadline may be a busy machine). A short deadline cannot turn this into a pass: a
    # worker that never returns is killed at any deadline, however loaded the machine.
    item = RubricItem("Exactly one delivery at every kill point", 10, ("o1001",),
                      ("exactly_one_delivery",))
    result = grade(Sut(path=folder), tmp_path / "out", rubric=(item,), worker_timeout_s=1,
                   schedule=CrashSchedule.parse("no-kill"))
    (test,) = result.tests
    assert test.score == 0
    assert "could not be verified" in test.output and "deadline" in test.output
    assert "o1001[no-kill]: run 3 times" in result.output  # retried, within the bound
    assert json.loads(result.results_path.read_text())["score"] == 0


def test_an_implementation_cannot_write_its_own_score(tmp_path: Path) -> None:
    results = tmp_path / "results" / "results.json"
    forge = (f"_real_main = main\n"
             f"def main(argv=None):  # noqa: F811\n"
             f"    import json, pathlib\n"
             f"    p = pathlib.Path({str(results)!r})\n"
             f"    try:  # sealed: the worker's user cannot write there at all\n"
             f"        p.parent.mkdir(parents=True, exist_ok=True)\n"
             f"        p.write_text(json.dumps({{'score': 999, 'tests': []}}))\n"
             f"    except OSError:\n"
             f"        pass\n"
             f"    return _real_main(argv)\n")
    folder = student(tmp_path, cli_main=forge)
    result = grade(Sut(path=folder), tmp_path / "out", rubric=ONE_ITEM, results_path=results)
    data = json.loads(results.read_text())
    assert data["score"] == result.score == 10  # the reference behaviour, honestly scored
    assert [t["name"] for t in data["tests"]] == [ONE_ITEM[0].name]


@pytest.mark.pure
@pytest.mark.parametrize(("text", "field"), [
    ("tests = []\n", "tests"),
    ('[[tests]]\nname = "x"\npoints = -1\nscenarios = ["o1001"]\n', "tests[0].points"),
    ('[[tests]]\nname = "x"\npoints = 1\nscenarios = ["nope"]\n', "tests[0].scenarios"),
    ('[[tests]]\nname = "x"\npoints = 1\nscenarios = ["o1001"]\nchecks = ["bogus"]\n',
     "tests[0].checks"),
    # issue 24: an item naming no check gave 10/10 to a mutant whose executions all failed
    ('[[tests]]\nname = "x"\npoints = 1\nscenarios = ["o1001"]\n', "tests[0].checks"),
    ('[[tests]]\nname = "x"\npoints = 1\nscenarios = ["o1001"]\nchecks = []\n',
     "tests[0].checks"),
    ('[[tests]]\nname = "x"\npoints = 1\nscenarios = ["o1001"]\nchecks = "some"\n',
     "tests[0].checks"),
    ('[[tests]]\nname = "x"\npoints = 1\nscenarios = ["o1001"]\nchecks = "all"\n'
     'visibility = "secret"\n',
     "tests[0].visibility"),
    ('[[tests]]\nname = "x"\npoints = 1\nscenarios = ["o1001"]\nchecks = "all"\nweight = 2\n',
     "tests[0].weight"),
    ('[[tests]]\nname = "x"\npoints = nan\nscenarios = ["o1001"]\n', "tests[0].points"),
    ('[[tests]]\nname = "x"\npoints = inf\nscenarios = ["o1001"]\n', "tests[0].points"),
    ('[[tests]]\nname = "x"\npoints = 1e308\nscenarios = ["o1001"]\n', "tests[0].points"),
    ('[[tests]]\nname = "x"\npoints = 1\nscenarios = ["o1001"]\nchecks = "all"\n'
     '[[tests]]\nname = "x"\npoints = 2\nscenarios = ["rejection"]\n', "tests[1].name"),
])
def test_a_bad_rubric_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(text)
    with pytest.raises(RubricError) as info:
        load_rubric(path)
    assert info.value.field == field and str(path) in str(info.value)


@pytest.mark.pure
def test_checks_all_means_every_check(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text('[[tests]]\nname = "All"\npoints = 5\nscenarios = ["o1001"]\n'
                    'checks = "all"\n')
    (item,) = load_rubric(path)
    assert set(item.checks) == set(CheckId) and item.checks


@pytest.mark.pure
def test_an_item_without_checks_cannot_be_made() -> None:
    with pytest.raises(ValueError, match="names no check"):
        RubricItem("x", 10, ("o1001",))
    assert all(item.checks for item in DEFAULT_RUBRIC)


@pytest.mark.pure
def test_a_rubric_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text('[[tests]]\nname = "Keys"\npoints = 5\nscenarios = ["o1001"]\n'
                    'checks = ["same_key_one_delivery"]\nvisibility = "hidden"\n')
    assert load_rubric(path) == (RubricItem("Keys", 5.0, ("o1001",),
                                            ("same_key_one_delivery",), "hidden"),)


@pytest.mark.io
def test_grade_cli_refuses_a_folder_without_the_package(tmp_path: Path) -> None:
    """In this process (``input_helpers.call``: the real entry point, its exit status and
    stderr), and nothing is written or started."""
    done = call("shopops-chaos", ["grade", "--sut", str(tmp_path)], tmp_path)
    assert done.code == 2 and "no package folder shopops/" in done.err, done.err
    assert done.changed == {} and done.new_processes == ()


def test_an_implementation_that_crashes_is_not_said_to_tamper(tmp_path: Path) -> None:
    """A worker that exits 1 at ``run`` leaves every execution ``unknown``: ``no_tampering``
    and ``no_process_left`` are undecided there, not failed, and the grade says nothing of
    tampering (it used to count each undecided check as an execution that tampered)."""
    folder = student(tmp_path, cli_main=(
        "import sys as _sys\n_main = main\n"
        "def main(argv=None):\n"
        "    if (argv or _sys.argv[1:])[:1] == ['run']:\n"
        "        raise SystemExit(1)\n"
        "    return _main(argv)\n"))
    said: list[str] = []
    result = grade(Sut(path=folder), tmp_path / "out", rubric=ONE_ITEM, say=said.append)
    assert result.score == 0
    output = json.loads((tmp_path / "out" / "results.json").read_text())["output"]
    assert "Tampering" not in output, output
    assert not [line for line in said if line.startswith("tampering:")], said


@pytest.mark.skipif(not sandbox.available(), reason="sealed uids need root")
def test_a_stray_of_a_released_sandbox_uid_is_swept_at_the_end_of_a_run() -> None:
    """A process of a sandbox uid alive after its sandbox was closed (seen under a hostile
    implementation: ``setsid`` grandchildren alive after the grade exited) is what
    ``sweep_strays`` kills, as every run does at its end."""
    box = sandbox.Sandbox()
    uid = box.uid
    box.close()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the stray
        try:
            os.setsid()
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.write(ready_w, b"r")
            time.sleep(600)
        finally:
            os._exit(0)
    try:
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"r"
        assert pid in sandbox.strays()
        assert pid in sandbox.sweep_strays()
        os.waitpid(pid, 0)
        assert sandbox.strays() == []
    finally:
        os.close(ready_r)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_an_undecided_check_of_an_item_is_said_to_be_undecided() -> None:
    """A failing execution whose item check could not be decided is broken for the item
    (as before), and its line says why it was not decided, not the check's pass wording
    (found by an attack: "phase_path: 0 checkpoint(s) along the FSM" read as a pass)."""
    from harness.grading.grade import score_item
    from harness.grading.rubric import RubricItem
    from harness.model import CheckResult, CrashSchedule, Verdict
    from harness.plan.scenario import Scenario
    from harness.run.execution import ExecutionPlan, ExecutionResult
    from tests.test_verdict import evidence

    undecided = CheckResult("phase_path", False, "0 checkpoint(s) along the FSM",
                            undecided="checkpoint database unreadable")
    failed = CheckResult("no_tampering", False, "a worker tampered")
    result = ExecutionResult(ExecutionPlan(Scenario(name="o1001"), CrashSchedule()),
                             evidence(), (undecided, failed), Verdict.FAIL, (), 0.1)
    item = RubricItem(name="History", points=10, scenarios=("o1001",),
                      checks=("phase_path",))
    graded = score_item(item, [result])
    assert graded.score == 0
    assert "phase_path: could not be decided: checkpoint database unreadable" in graded.output
    assert "along the FSM" not in graded.output
