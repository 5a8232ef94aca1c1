"""Scenario files: the shipped ones load; every kind of bad file is refused before anything
runs, with a ``ScenarioError`` naming the file, the field (and its line) and what is allowed.
Also the kill point / crash schedule grammar the files use.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from scenario_helpers import ROOT, SHIPPED, assert_names, refused

from harness.judge.checks.registry import CHECK_IDS
from harness.model import NO_KILL, CrashSchedule, KillPoint
from harness.plan.scenario import Scenario, ScenarioError, load_scenario, load_scenarios
from shopops_contract import labels

pytest_plugins = ["pytester"]

KILLABLE = [lab.name for lab in labels.CATALOGUE if lab.side != "queue"]


def write(folder: Path, text: str, name: str = "bad.toml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- shipped files


def test_there_are_shipped_scenarios() -> None:
    names = {p.stem for p in SHIPPED}
    assert {"o1001", "demo-keys-off"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_scenario_loads(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.path == path
    assert scenario.name == path.stem
    assert scenario.description
    assert scenario.expect_failing <= set(CHECK_IDS)


def test_the_shipped_folder_loads_with_unique_names() -> None:
    scenarios = load_scenarios([ROOT / "scenarios"])
    assert [s.path for s in scenarios] == SHIPPED
    assert len({s.name for s in scenarios}) == len(scenarios)


def test_o1001_is_the_crash_safe_story_at_every_point() -> None:
    s = load_scenario(ROOT / "scenarios" / "o1001.toml")
    assert (s.name, s.case_id, s.order_id, s.policy) == ("o1001", "case-O-1001", "O-1001",
                                                         "deterministic")
    assert s.idempotency_keys is True
    assert s.points is None  # "all": every point the trace run reaches
    assert s.baseline is True
    assert s.expect_failing == frozenset()


def test_demo_keys_off_expects_its_duplicate() -> None:
    s = load_scenario(ROOT / "scenarios" / "demo-keys-off.toml")
    assert s.idempotency_keys is False
    assert s.points == (KillPoint("t6.gateway_accepted"),)
    assert s.baseline is False
    assert s.expect_failing == {"same_key_one_delivery", "exactly_one_delivery", "per_action"}


def test_defaults_of_a_minimal_file(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, "[crash]\n", "min-1.toml"))
    assert s == Scenario(name="min-1", path=tmp_path / "min-1.toml")


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing but a comment\n", "empty.toml")
    err = refused(path)
    assert (err.path, err.field) == (str(path), "name")
    assert "the file is empty" in str(err)


def test_case_id_defaults_from_the_order(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, '[case]\norder_id = "O-1002"\n', "o1002.toml"))
    assert (s.case_id, s.order_id) == ("case-O-1002", "O-1002")


def test_an_order_missing_from_the_fixtures_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[case]\norder_id = "O-9999"\n')
    err = refused(path)
    assert (err.field, err.line) == ("case.order_id", 2)
    assert "O-9999" in str(err) and "allowed: O-1001" in str(err)


def test_lists_of_points_and_schedules_parse(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, (
        '[crash]\npoints = ["t4.parked", "ckpt.before_commit#4"]\n'
        'schedules = ["t3.checkpoint_saved>t6.gateway_accepted"]\n'), "lists.toml"))
    assert s.points == (KillPoint("t4.parked"), KillPoint("ckpt.before_commit", 4))
    assert s.schedules == (CrashSchedule((KillPoint("t3.checkpoint_saved"),
                                          KillPoint("t6.gateway_accepted"))),)


# --------------------------------------------------------------------------- bad files


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\n[crash]\npoints = = 3\n')
    err = refused(path)
    assert err.path == str(path)
    assert err.field is None
    assert err.reason == "syntax"
    assert str(err).startswith(f"{path}: TOML syntax error: ")
    assert "line 3" in str(err)


def test_a_key_given_twice_is_refused_naming_its_line_and_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\n[crash]\nmode = "kill"\nmode = "power"\n')
    err = refused(path)
    assert err.reason == "syntax" and err.line == 4
    assert str(err).endswith("""; line 4 reads 'mode = "power"'"""), str(err)


def test_toml_syntax_error_carries_its_line(tmp_path: Path) -> None:
    assert refused(write(tmp_path, 'name = "x"\n[crash]\npoints = = 3\n')).line == 3


def test_a_byte_order_mark_is_named(tmp_path: Path) -> None:
    """An editor's UTF-8 BOM makes TOML say only "Invalid statement"; the error says why
    (found by a new-user trial)."""
    err = refused(write(tmp_path, '\ufeffname = "x"\n'))
    assert err.reason == "syntax"
    assert "starts with a UTF-8 byte-order mark" in str(err)
    assert "byte-order mark" not in str(refused(write(tmp_path, 'name = = "x"\n')))


def test_unknown_top_level_field(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\nnmae = "y"\n')
    err = refused(path)
    assert_names(err, path, "nmae", 2)
    assert ("allowed: name, description, [case], [sut], [crash], [human], [gateway], "
            "[concurrency], [storage], [expect]") in str(err)


def test_unknown_table(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\n[gatway]\nfaults = []\n')
    err = refused(path)
    assert err.path == str(path)
    assert err.field == "gatway"
    assert str(path) in str(err)
    assert "field 'gatway'" in str(err)
    assert "unknown field or table" in str(err)


def test_unknown_table_carries_its_line(tmp_path: Path) -> None:
    assert refused(write(tmp_path, 'name = "x"\n[gatway]\nfaults = []\n')).line == 2


def test_unknown_field_in_crash(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\n[crash]\nbaseline = true\npoint = "all"\n')
    err = refused(path)
    assert_names(err, path, "crash.point", 4)
    assert "allowed in [crash]: points, schedules, baseline" in str(err)


WRONG_TYPES = [
    ('[sut]\nidempotency_keys = "yes"\n', "sut.idempotency_keys", 2,
     "must be true or false, got a string"),
    ("[crash]\nbaseline = 1\n", "crash.baseline", 2, "must be true or false, got an integer"),
    ("[crash]\npoints = 3\n", "crash.points", 2, "must be a string or a list, got an integer"),
    ('[crash]\nschedules = "t4.parked"\n', "crash.schedules", 2, "must be a list, got a string"),
    ("[case]\norder_id = 1001\n", "case.order_id", 2, "must be a string, got an integer"),
    ('[expect]\nfailing_checks = "draft_identical"\n', "expect.failing_checks", 2,
     "must be a list, got a string"),
    ('name = "x"\ncase = "O-1001"\n', "case", 2, "must be a table [case]"),
    ("description = 7\n", "description", 1, "must be a string, got an integer"),
]


@pytest.mark.parametrize(("text", "field", "line", "says"), WRONG_TYPES,
                         ids=[case[1] for case in WRONG_TYPES])
def test_wrong_type(tmp_path: Path, text: str, field: str, line: int, says: str) -> None:
    path = write(tmp_path, text)
    err = refused(path)
    assert_names(err, path, field, line)
    assert says in str(err)


def test_points_string_other_than_all(tmp_path: Path) -> None:
    path = write(tmp_path, '[crash]\npoints = "every"\n')
    err = refused(path)
    assert_names(err, path, "crash.points", 2)
    assert "allowed: \"all\" or a list of labels" in str(err)


def test_point_that_is_not_a_string(tmp_path: Path) -> None:
    path = write(tmp_path, "[crash]\npoints = [4]\n")
    assert_names(refused(path), path, "crash.points", 2)


@pytest.mark.parametrize("name", ["O-1001", "o 1001", "-o1001", "o1001[x]", ""])
def test_bad_name(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, f'description = "d"\nname = "{name}"\n')
    err = refused(path)
    assert_names(err, path, "name", 2)
    assert "lowercase letters, digits, '-' and '_'" in str(err)


def test_bad_name_from_the_file_name_has_no_line(tmp_path: Path) -> None:
    path = write(tmp_path, "", "Kill Me.toml")
    assert_names(refused(path), path, "name", None)


def test_name_that_is_a_table_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "name = { a = 1 }\n")
    assert_names(refused(path), path, "name", 1)


def test_name_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "o1001\\n"\n')
    assert_names(refused(path), path, "name", 1)


def test_unknown_policy(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\n\n[sut]\npolicy = "gpt-4"\n')
    err = refused(path)
    assert_names(err, path, "sut.policy", 4)
    assert "'gpt-4'; allowed: deterministic, varying" in str(err)


def test_unknown_label_in_points_lists_the_allowed_labels(tmp_path: Path) -> None:
    path = write(tmp_path, '[crash]\npoints = ["t4.parked", "t4.parkd"]\n')
    err = refused(path)
    assert_names(err, path, "crash.points", 2)
    message = str(err)
    assert "unknown label 't4.parkd'" in message
    allowed = message.split("allowed: ", 1)[1].split(", ")
    assert allowed == KILLABLE


def test_queue_label_is_not_a_kill_point(tmp_path: Path) -> None:
    path = write(tmp_path, '[crash]\npoints = ["t5.approved"]\n')
    err = refused(path)
    assert_names(err, path, "crash.points", 2)
    message = str(err)
    assert "'t5.approved'" in message
    assert "t5.approved" not in message.split("allowed: ", 1)[1]


@pytest.mark.parametrize("schedule", ["t3.checkpoint_saved>>t4.parked", "t4.parked#0",
                                      "t4.parked>t5.approved", "t4.parked#x"])
def test_malformed_schedule(tmp_path: Path, schedule: str) -> None:
    path = write(tmp_path, f'name = "x"\n[crash]\nschedules = ["{schedule}"]\n')
    err = refused(path)
    assert_names(err, path, "crash.schedules", 3)


def test_unknown_check_id_lists_the_checks(tmp_path: Path) -> None:
    path = write(tmp_path, '[expect]\nfailing_checks = ["exactly_one_delivery", "one_send"]\n')
    err = refused(path)
    assert_names(err, path, "expect.failing_checks", 2)
    assert f"unknown check 'one_send'; allowed: {', '.join(CHECK_IDS)}" in str(err)


def test_duplicate_names_across_two_files(tmp_path: Path) -> None:
    first = write(tmp_path, 'name = "same"\n', "a.toml")
    second = write(tmp_path, 'name = "same"\n', "b.toml")
    with pytest.raises(ScenarioError) as info:
        load_scenarios([tmp_path])
    err = info.value
    assert err.path == str(second)
    assert err.field == "name"
    assert str(err).startswith(f"{second}: name 'same'")
    assert str(first) in str(err)


def test_a_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ScenarioError) as info:
        load_scenarios([missing])
    assert_names(info.value, missing, None, None)
    assert info.value.reason == "missing"
    assert "no such scenario file or folder" in str(info.value)


def test_a_bad_file_in_a_folder_stops_the_whole_load(tmp_path: Path) -> None:
    write(tmp_path, 'name = "good"\n', "a.toml")
    bad = write(tmp_path, '[crash]\npoints = ["t9.nowhere"]\n', "b.toml")
    with pytest.raises(ScenarioError) as info:
        load_scenarios([tmp_path])
    assert info.value.path == str(bad)


def test_scenario_error_pickles_with_its_fields(tmp_path: Path) -> None:
    err = refused(write(tmp_path, '[sut]\npolicy = "gpt-4"\n'))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ScenarioError
    assert (back.path, back.field, back.line, str(back)) == (err.path, err.field, err.line,
                                                             str(err))
    assert isinstance(back, ValueError)


# --------------------------------------------------------------------------- before anything runs


def test_cli_refuses_a_bad_file_before_running_anything(tmp_path: Path) -> None:
    good = write(tmp_path, 'name = "good"\n[crash]\npoints = ["t4.parked"]\n', "good.toml")
    bad = write(tmp_path, 'name = "bad"\n[crash]\npoints = ["t4.parkd"]\n')
    reports = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(good), str(bad),
                           "--report-dir", str(reports)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{bad}:3: field 'crash.points'" in proc.stderr
    assert list(tmp_path.glob("*/executions")) == []
    assert list(tmp_path.rglob("worker-*")) == []
    assert list(tmp_path.rglob("*.db")) == []


def test_pytest_reports_a_bad_scenario_as_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.mkdir("scenarios")
    write(pytester.path / "scenarios", '[sut]\nidempotency_keys = "yes"\n')
    pytester.makepyfile(test_sentinel="def test_would_pass():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*bad.toml:2: field 'sut.idempotency_keys'*"])
    result.stdout.no_fnmatch_line("*test_would_pass*PASSED*")


# --------------------------------------------------------------------------- the id grammar


@pytest.mark.parametrize("text", ["t4.parked", "t6.request_leaving#2", "ckpt.before_commit#11",
                                  "t6.gateway_accepted", "t0.case_started"])
def test_kill_point_round_trips(text: str) -> None:
    point = KillPoint.parse(text)
    assert str(point) == text
    assert KillPoint.parse(str(point)) == point


def test_kill_point_first_occurrence_is_written_without_suffix() -> None:
    assert KillPoint.parse("t4.parked#1") == KillPoint("t4.parked", 1)
    assert str(KillPoint("t4.parked", 1)) == "t4.parked"
    assert KillPoint.parse("t6.request_leaving#2") == KillPoint("t6.request_leaving", 2)


@pytest.mark.parametrize("text", ["", "t4", "T4.parked", "t4.parked#0", "t4.parked#-1",
                                  "t4.parked#", "t4.parked#2#3", "t5.approved", "t9.nowhere",
                                  "t4.parked>t6.gateway_accepted", "no-kill"])
def test_kill_point_rejects_bad_text(text: str) -> None:
    with pytest.raises(ValueError, match="kill point"):
        KillPoint.parse(text)


def test_kill_point_rejects_non_ascii_digits() -> None:
    with pytest.raises(ValueError):
        KillPoint.parse("t4.parked#\u0663")


@pytest.mark.parametrize("text", ["no-kill", "t4.parked",
                                  "t3.checkpoint_saved>t6.gateway_accepted",
                                  "t6.request_leaving#2>t6.gateway_accepted>t7.completed_saved"])
def test_crash_schedule_round_trips(text: str) -> None:
    schedule = CrashSchedule.parse(text)
    assert str(schedule) == schedule.id == text
    assert CrashSchedule.parse(schedule.id) == schedule


def test_empty_schedule_is_no_kill() -> None:
    assert CrashSchedule.parse("") == CrashSchedule.parse(NO_KILL) == CrashSchedule(())
    assert CrashSchedule().id == "no-kill"


@pytest.mark.parametrize("text", ["t3.checkpoint_saved>>t4.parked", "t4.parked#0", ">t4.parked",
                                  "t4.parked>", "t4.parked>no-kill", "t4.parked>t5.approved",
                                  "t4.parked,t6.gateway_accepted"])
def test_crash_schedule_rejects_bad_text(text: str) -> None:
    with pytest.raises(ValueError, match="kill point"):
        CrashSchedule.parse(text)


@pytest.mark.parametrize("story, line", [
    ('[story]\nstep = "workers"\n', 3),  # a table where an array of tables belongs
    ('story = 3\n', 3),
    ('story = "workers"\n[crash]\npoints = []\n', 3),
    ('[crash]\npoints = []\n[story.x]\na = 1\n', 5),
])
def test_a_story_that_is_no_array_of_tables_carries_its_line(
        tmp_path: Path, story: str, line: int) -> None:
    """Found by a new user: ``[story]`` written as one table was refused with no line."""
    path = write(tmp_path, 'name = "x"\ndescription = "d"\n' + story)
    err = refused(path)
    assert_names(err, path, "story", line)
    assert "must be an array of tables: [[story]]" in str(err)


def test_a_story_steps_sub_table_is_refused_at_its_own_line(tmp_path: Path) -> None:
    """Found by a new user: ``[story.extra]`` after the ``[[story]]`` steps (TOML puts it in
    the last step) was refused at that step's header line, not its own."""
    path = write(tmp_path, 'name = "x"\ndescription = "d"\n'
                 '[[story]]\nstep = "workers"\nrole = "start"\n'
                 '[[story]]\nstep = "workers"\nrole = "resume"\n'
                 '[story.extra]\na = 1\n')
    err = refused(path)
    assert_names(err, path, "story[1].extra", 9)
    assert "unknown field" in str(err)
