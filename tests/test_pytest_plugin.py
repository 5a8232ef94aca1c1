"""The pytest plugin behaves like pytest (pytester: real pytest sessions in subprocesses
wherever an execution runs, in this process where nothing does — ``--help``, ``--fixtures``,
a collection of listed points, a refusal):
``--lf``/``--ff``/``-k``/node ids select scenario items, scenario folders come from the
ini option or the command line, kill matrices are learned once and cached (once across
xdist workers), junit carries real times and the replay command."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

KEYS_OFF = """name = "k"
[sut]
idempotency_keys = false
[crash]
points = ["t6.request_leaving#2"]
schedules = ["t4.parked>t6.gateway_accepted"]
baseline = false
"""
OK = """name = "ok"
[crash]
points = ["t4.parked"]
baseline = false
"""
LEARNED = """name = "learned"
[crash]
points = "all"
baseline = {baseline}
"""


def _scenarios(pytester: pytest.Pytester, folder: str = "scenarios", **files: str) -> Path:
    where = pytester.path / folder
    where.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (where / f"{name}.toml").write_text(text, encoding="utf-8")
    return where


def test_ids_have_a_real_parameter_part_and_lf_reruns_only_failures(
        pytester: pytest.Pytester) -> None:
    _scenarios(pytester, k=KEYS_OFF, ok=OK)
    first = pytester.runpytest_subprocess("-v")
    first.assert_outcomes(failed=2, passed=1)  # keys off: every k item fails
    first.stdout.fnmatch_lines([
        "scenarios/k.toml::k[[]t6.request_leaving:2[]] FAILED*",
        "scenarios/k.toml::k[[]t4.parked+t6.gateway_accepted[]] FAILED*",
        "scenarios/ok.toml::ok[[]t4.parked[]] PASSED*"])
    again = pytester.runpytest_subprocess("--lf", "-v")
    again.assert_outcomes(failed=2)  # ok.toml is skipped or deselected, never run
    again.stdout.no_fnmatch_line("*ok.toml::ok*PASSED*")
    (pytester.path / "scenarios" / "ok.toml").rename(pytester.path / "scenarios" / "a.toml")
    # a.toml sorts first, failures go first (the order is collection's: nothing need run)
    ff = pytester.runpytest_subprocess("--ff", "--collect-only", "-q")
    assert [ln for ln in ff.outlines if ln.startswith("scenarios/")] == [
        "scenarios/k.toml::k[t6.request_leaving:2]",
        "scenarios/k.toml::k[t4.parked+t6.gateway_accepted]",
        "scenarios/a.toml::ok[t4.parked]"], ff.stdout.str()


def test_k_accepts_the_id_characters_and_a_node_id_selects_one_item(
        pytester: pytest.Pytester) -> None:
    _scenarios(pytester, k=KEYS_OFF, ok=OK)
    # -k is a selection: the collection shows it (nothing need run)
    by_k = pytester.runpytest_subprocess("--collect-only", "-q", "-k",
                                         "t6.request_leaving:2 or t4.parked+t6")
    assert [ln for ln in by_k.outlines if ln.startswith("scenarios/")] == [
        "scenarios/k.toml::k[t6.request_leaving:2]",
        "scenarios/k.toml::k[t4.parked+t6.gateway_accepted]"], by_k.stdout.str()
    by_k.stdout.fnmatch_lines(["*2/3 tests collected (1 deselected)*"])
    by_id = pytester.runpytest_subprocess(
        "-v", "scenarios/k.toml::k[t4.parked+t6.gateway_accepted]")
    by_id.assert_outcomes(failed=1)
    # the failure text keeps the schedule as the harness writes it, with its replay
    by_id.stdout.fnmatch_lines(["*k[[]t4.parked>t6.gateway_accepted[]]: verdict FAIL*",
                                "*replay:*--schedule 't4.parked>t6.gateway_accepted'*",
                                "*evidence folder is removed when the session ends; "
                                "--crash-keep DIR keeps it*"])


def test_scenario_folders_from_the_ini_option_and_the_command_line(
        pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ncrash_scenarios = chaos\n")
    _scenarios(pytester, "chaos", ok=OK)
    _scenarios(pytester, "elsewhere", other=OK.replace('"ok"', '"other"'))
    _scenarios(pytester, "more", more=OK.replace('"ok"', '"more"'))
    (pytester.path / "config.toml").write_text("[tool]\nx = 1\n")  # not a scenario folder
    # which files become items is collection's business; with listed points nothing runs
    # there, so these sessions run in this process (no worker, no fork server)

    def items(*args: str) -> list[str]:
        result = pytester.runpytest_inprocess("--collect-only", "-q", *args)
        assert result.ret == 0, result.stdout.str()
        return [ln for ln in result.outlines if ".toml::" in ln]

    assert items() == ["chaos/ok.toml::ok[t4.parked]"]
    assert items("elsewhere/other.toml", "--crash-scenarios", "more") == [
        "elsewhere/other.toml::other[t4.parked]", "more/more.toml::more[t4.parked]"]
    bad = pytester.runpytest_inprocess("config.toml")
    bad.assert_outcomes(errors=1)  # named explicitly: a scenario error naming the file
    bad.stdout.fnmatch_lines(["*config.toml*"])
    missing = pytester.runpytest_inprocess("--crash-scenarios", "nowhere")
    missing.stderr.fnmatch_lines(["*--crash-scenarios nowhere: no such folder*"])


def _executions(keep: Path, prefix: str) -> list[Path]:
    return sorted(p for p in keep.iterdir() if p.name.startswith(prefix))


def test_a_learned_plan_is_cached_and_collection_then_runs_nothing(
        pytester: pytest.Pytester) -> None:
    _scenarios(pytester, learned=LEARNED.format(baseline="true"))
    keep = pytester.path / "keep"
    first = pytester.runpytest_subprocess("--collect-only", "-q", "--crash-keep", str(keep))
    assert first.ret == 0
    assert len(_executions(keep, "learned--no-kill")) == 1  # the trace run, once
    [entry] = (pytester.path / ".pytest_cache" / "d" / "shopops-chaos-plans").glob("*.json")
    plan = json.loads(entry.read_text())
    assert plan["schedules"][0] == "no-kill" and "t6.gateway_accepted" in plan["schedules"]
    collected = [ln for ln in first.outlines if "::" in ln]
    assert len(collected) == len(plan["schedules"])
    # read from the cache, so nothing runs: this process will do
    again = pytester.runpytest_inprocess("--collect-only", "-q", "--crash-keep", str(keep))
    assert [ln for ln in again.outlines if "::" in ln] == collected
    assert len(_executions(keep, "learned--")) == 1  # nothing ran at collection
    # a changed scenario file is a new key: learned again
    (pytester.path / "scenarios" / "learned.toml").write_text(
        LEARNED.format(baseline="true") + "[human]\ndelay_hours = 1\n")
    pytester.runpytest_subprocess("--collect-only", "-q", "--crash-keep", str(keep))
    assert len(_executions(keep, "learned--no-kill")) == 2


def test_xdist_workers_learn_a_plan_once_and_junit_has_real_times(
        pytester: pytest.Pytester) -> None:
    _scenarios(pytester, learned=LEARNED.format(baseline="false"), ok=OK)
    keep = pytester.path / "keep"
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("-n", "2", "--crash-keep", str(keep),
                                           f"--junitxml={junit}", "-k", "ok or parked")
    assert result.ret == 0, result.stdout.str()
    # two workers collected the file; the trace run (no item of its own) ran once
    assert len(_executions(keep, "learned--no-kill")) == 1
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert cases and all(float(c.get("time") or 0) > 0.01 for c in cases)
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["replay"].startswith("shopops-chaos run ")
        assert props["verdict"] == "pass"


def test_an_item_run_while_learning_reports_its_own_time(pytester: pytest.Pytester) -> None:
    _scenarios(pytester, learned=LEARNED.format(baseline="true"))
    junit = pytester.path / "junit.xml"
    # the plugin registers the markers it gives items: none is unknown to a plain project
    result = pytester.runpytest_subprocess(f"--junitxml={junit}", "-k", "no-kill",
                                           "-W", "error::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(passed=1, deselected=result.parseoutcomes()["deselected"])
    [case] = ET.parse(junit).getroot().iter("testcase")
    assert case.get("name") == "learned[no-kill]" and float(case.get("time") or 0) > 0.05


def test_options_ini_and_fixtures_are_documented(pytester: pytest.Pytester) -> None:
    # nothing runs: in this process
    helped = pytester.runpytest_inprocess("--help")
    helped.stdout.fnmatch_lines(["*ShopOps crash harness*", "*--crash-timeout*",
                                 "*--crash-keep*", "*--crash-launcher*",
                                 "*--crash-scenarios*", "*--crash-replan*",
                                 "*crash_scenarios*"])
    fixtures = pytester.runpytest_inprocess("--fixtures")
    fixtures.stdout.fnmatch_lines(["crash_runner*", "*Run one execution of a crash schedule*"])
    fixtures.stdout.fnmatch_lines(["mock_gateway*"])
    fixtures.stdout.fnmatch_lines(["checkpoint_db*"])
