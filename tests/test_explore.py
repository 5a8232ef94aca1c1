"""``shopops-chaos explore`` (Hypothesis-drawn crash schedules) and ``run --repeat/--fail-fast``.

Real executions throughout (fork launcher): the reference loop explored without a failure,
a broken loop (idempotency keys off) whose failure is found, shrunk and replayed from the
written scenario file, the ci profile's determinism, and the soak options.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from input_helpers import assert_refused, call

from harness.explore.explorer import (
    CI_EXAMPLES,
    ExploreResult,
    explore,
    profile_settings,
    scenario_toml,
    write_explore_report,
)
from harness.model import CrashSchedule
from harness.plan.scenario import Scenario, load_scenario, load_scenarios

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
O1001 = SCENARIOS / "o1001.toml"


def chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def keys(result: ExploreResult) -> list[str]:
    """What was executed, in order: schedule id and the rest of each variant."""
    return [e.variant.key() for e in result.examples]


LEFT_BEHIND: list[int] = []


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> ExploreResult:
    out = tmp_path_factory.mktemp("explore") / "run"
    before = children()  # e.g. a session-wide fork server of the pytest plugin
    result = explore(load_scenario(O1001), out, max_examples=8, profile="ci")
    LEFT_BEHIND.extend(children() - before)
    return result


# ------------------------------------------------------------------ the reference loop


def test_reference_loop_explored_without_a_failure(reference: ExploreResult) -> None:
    assert reference.failure is None and reference.exit_status == 0
    assert reference.trace.verdict == "pass"
    counts = reference.counts()
    assert counts["executions"] == len(reference.examples) >= 8
    assert counts["fail"] == 0 and counts["pass"] > 0
    assert counts["pass"] + counts["unknown"] == counts["executions"]
    assert sum(reference.unknown_reasons().values()) >= counts["unknown"]
    for example in reference.examples:
        kills = example.variant.kills
        assert 1 <= len(kills) <= 3
        assert all(k.label in reference.space.labels and 1 <= k.occurrence <= 3
                   for k in kills)
        assert example.execution_id == f"o1001-explore[{CrashSchedule(kills).id}]"
        assert len(example.variant.faults) <= 2
        assert example.variant.policy in ("deterministic", "varying")
    assert reference.launcher == "fork"
    assert not LEFT_BEHIND  # its own fork server was closed, no worker left


def test_the_space_is_learned_from_the_trace(reference: ExploreResult) -> None:
    space = reference.space
    assert space.labels[0] == "t0.case_started" and "t6.gateway_accepted" in space.labels
    assert space.reached["ckpt.before_commit"] == 6
    # a mid-story approval only where the approval request already exists, never past it
    assert [str(p) for p in space.approve_points] == [
        "t3.checkpoint_saved", "t4.parked", "t6.checkpoint_loaded"]
    assert space.policies == ("deterministic", "varying")


def test_the_report_has_counts_and_every_example(reference: ExploreResult) -> None:
    paths = write_explore_report(reference)
    assert list(paths) == ["explore"]  # no failure: no execution reports
    data = json.loads(paths["explore"].read_text())
    assert data["verdict"] == "pass" and data["failure"] is None
    assert data["profile"] == "ci" and data["seed"] is None and data["max_examples"] == 8
    assert data["counts"]["executions"] == len(data["examples"]) == len(reference.examples)
    assert (reference.out_dir.parent / "latest").resolve() == reference.out_dir.resolve()
    # passing executions' folders are removed; unknown ones stay for a look
    kept = {p.name.split("--", 1)[0] for p in (reference.out_dir / "executions").iterdir()}
    for e in reference.examples:
        assert (f"{e.n:04d}" in kept) == (e.verdict != "pass")


# ------------------------------------------------------------------------ determinism


def test_ci_profile_draws_the_same_examples_for_the_same_seed(tmp_path: Path) -> None:
    scenario = load_scenario(O1001)
    runs = [explore(scenario, tmp_path / f"run{i}", max_examples=3, seed_value=seed)
            for i, seed in enumerate((3, 3, 4))]
    assert keys(runs[0]) == keys(runs[1])
    assert [e.execution_id for e in runs[0].examples] == [
        e.execution_id for e in runs[1].examples]
    assert keys(runs[0]) != keys(runs[2])  # the seed does choose the sequence
    assert all(r.failure is None for r in runs)


@pytest.mark.pure
def test_profiles() -> None:
    scenario = load_scenario(O1001)
    ci = profile_settings("ci", None, scenario)
    assert ci.derandomize and ci.database is None and ci.deadline is None
    assert ci.max_examples == CI_EXAMPLES
    dev = profile_settings("dev", 7, scenario)
    assert not dev.derandomize and dev.database is not None and dev.max_examples == 7
    with pytest.raises(ValueError, match="allowed: ci, dev"):
        profile_settings("nightly", None, scenario)
    with pytest.raises(ValueError, match="at least 1"):
        profile_settings("ci", 0, scenario)


# ------------------------------------------------------------------ a broken loop


def test_keys_off_failure_is_found_shrunk_and_replayed(tmp_path: Path) -> None:
    broken = dataclasses.replace(load_scenario(O1001), idempotency_keys=False)
    result = explore(broken, tmp_path / "run", max_examples=10)
    assert result.exit_status == 1 and result.failure is not None
    assert result.first_failure is not None
    assert 1 <= len(result.failure.variant.kills) <= 2
    assert any("same_key_one_delivery" in r for r in result.failure.reasons)
    assert result.scenario_file is not None and result.scenario_file.exists()
    replayed = load_scenario(result.scenario_file)
    assert replayed.idempotency_keys is False
    assert replayed.schedules == (result.failure.variant.schedule,)
    assert result.replay_result is not None and result.replay_result.verdict == "fail"
    assert result.replay == (f"shopops-chaos run {result.scenario_file} "
                             f"--schedule {shlex.quote(result.failure.variant.schedule.id)}")
    paths = write_explore_report(result)
    assert set(paths) == {"explore", "summary", "duplicates", "junit", "markdown", "html"}
    summary = json.loads(paths["summary"].read_text())
    assert [e["replay"] for e in summary["executions"]] == [result.replay]
    data = json.loads(paths["explore"].read_text())
    assert data["failure"]["shrunk"]["id"] == result.failure.execution_id
    assert data["failure"]["replay_verdict"] == "fail"


def test_dev_profile_keeps_the_failure_in_its_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the database lives under ./.hypothesis/
    broken = dataclasses.replace(load_scenario(O1001), idempotency_keys=False)
    result = explore(broken, tmp_path / "run", max_examples=5, profile="dev")
    assert result.failure is not None and isinstance(result.seed, int)
    assert any((tmp_path / ".hypothesis" / "explore" / "o1001").iterdir())


def test_cli_explore_keys_off_exit_1_and_the_printed_replay_fails_again(
        tmp_path: Path) -> None:
    (tmp_path / "keys-off.toml").write_text(
        'name = "keys-off"\n[sut]\nidempotency_keys = false\n')
    proc = chaos("explore", "keys-off.toml", "--examples", "10", "--report-dir", "r",
                 cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "r" / "latest" / "explore.json").read_text())
    assert data["verdict"] == "fail" and data["profile"] == "ci"
    assert 1 <= data["failure"]["kills"] <= 2
    replay = data["failure"]["replay"]
    assert f"replay: {replay}" in proc.stdout
    argv = shlex.split(replay)
    assert argv[:2] == ["shopops-chaos", "run"]
    again = chaos(*argv[1:], "--report-dir", "replayed", cwd=tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr
    (ex,) = json.loads((tmp_path / "replayed" / "latest" / "summary.json").read_text()
                       )["executions"]
    assert ex["id"] == data["failure"]["shrunk"]["id"] and ex["verdict"] == "fail"


@pytest.mark.io
def test_cli_explore_refuses_bad_input(tmp_path: Path) -> None:
    """In this process (``input_helpers.call``): exit 2, one error line naming what is
    wrong, nothing written, no process started."""
    assert_refused(call("shopops-chaos", ["explore", "--examples", "0"], tmp_path), 2,
                   "--examples")
    assert_refused(call("shopops-chaos", ["explore", "nope.toml"], tmp_path), 2, "nope.toml")


# ------------------------------------------------------------------ scenario files


@pytest.mark.io
@pytest.mark.parametrize("scenario", load_scenarios([SCENARIOS]), ids=lambda s: s.name)
def test_scenario_toml_round_trips(scenario: Scenario, tmp_path: Path) -> None:
    path = tmp_path / "again.toml"
    path.write_text(scenario_toml(scenario, comment="a comment\nover two lines"))
    assert dataclasses.replace(load_scenario(path), path=None) == dataclasses.replace(
        scenario, path=None)


# ------------------------------------------------------------------------ soak


def test_repeat_runs_the_matrix_twice(tmp_path: Path) -> None:
    (tmp_path / "soak.toml").write_text(
        'name = "soak"\n[crash]\npoints = ["t4.parked"]\nbaseline = false\n')
    proc = chaos("run", "soak.toml", "--repeat", "2", "--report-dir", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    latest = tmp_path / "r" / "latest"
    soak = json.loads((latest / "soak.json").read_text())
    assert soak["repeats_run"] == 2 and not soak["stopped_early"]
    assert [[e["id"] for e in r["executions"]] for r in soak["repeats"]] == [
        ["soak[t4.parked]"], ["soak[t4.parked]"]]  # the same id in every repeat
    assert [r["verdict"] for r in soak["repeats"]] == ["pass", "pass"]
    summary = json.loads((latest / "summary.json").read_text())
    assert [e["id"] for e in summary["executions"]] == ["soak[t4.parked]"] * 2
    # passing executions keep no folder (--keep-all keeps them, one per repeat)
    assert [e["workdir"] for r in soak["repeats"] for e in r["executions"]] == [None, None]
    assert not (latest / "executions").exists()
    kept = chaos("run", "soak.toml", "--repeat", "2", "--keep-all", "--report-dir", "r",
                 cwd=tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert sorted(p.name for p in (latest / "executions").iterdir()) == [
        "repeat-1", "repeat-2"]


def test_fail_fast_stops_at_the_first_failure(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text(
        'name = "broken"\n[sut]\nidempotency_keys = false\n[crash]\n'
        'points = ["t6.gateway_accepted", "t4.parked", "t3.checkpoint_saved", "t1.get_order",'
        ' "t6.reply_received", "t7.completed_saved"]\nbaseline = false\n')
    proc = chaos("run", "broken.toml", "--repeat", "3", "--fail-fast", "--jobs", "1",
                 "--report-dir", "r", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--fail-fast" in proc.stdout
    soak = json.loads((tmp_path / "r" / "latest" / "soak.json").read_text())
    assert soak["stopped_early"] and soak["repeats_run"] == 1 and soak["verdict"] == "fail"
    (only,) = soak["repeats"]
    # one job: the first failure, at most the one execution already started behind it
    assert 1 <= len(only["executions"]) <= 2 < 6
    assert only["executions"][0]["verdict"] == "fail"


def test_an_undecided_check_is_listed_as_undecided_not_as_failing() -> None:
    """explore.json's ``failing_checks`` names only checks that failed on the evidence; a
    check whose evidence is missing is ``undecided_checks`` (it used to be listed as
    failing, so an unknown example looked like a proven failure)."""
    from harness.explore.explorer import failing_and_undecided
    from harness.model import CheckResult

    checks = (CheckResult("step_continues", True, "ok"),
              CheckResult("exactly_one_delivery", False, "two deliveries"),
              CheckResult("draft_identical", False, "no checkpoint", undecided="no history"),
              CheckResult("no_tampering", False, "expected", ),
              CheckResult("lease_exclusive", False, "n/a", applicable=False))
    assert failing_and_undecided(checks, frozenset({"no_tampering"})) == (
        ("exactly_one_delivery",), ("draft_identical",))
