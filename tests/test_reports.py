"""Report writers, end to end on real executions (two real runs of the story, ~2 s).

The baseline and a keys-off duplicate demo run in real processes against the mock gateway;
a failing and an unknown execution are derived from the baseline with
``dataclasses.replace`` to reach the failure paths.
"""

from __future__ import annotations

import dataclasses
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.judge.checks.registry import CHECK_IDS, CheckResult
from harness.launch.launcher import make_launcher
from harness.model import CrashSchedule
from harness.plan.scenario import Scenario
from harness.reports.base import ReportWriter
from harness.reports.markdown import timeline
from harness.reports.write import WRITERS, write_reports
from harness.run.execution import ExecutionPlan, ExecutionResult, execute
from harness.run.runner import RunResult
from harness.services.gateway import GatewayLog

DEMO_EXPECT = frozenset({"same_key_one_delivery", "exactly_one_delivery", "per_action"})


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ExecutionResult]:
    work = tmp_path_factory.mktemp("executions")
    baseline_plan = ExecutionPlan(Scenario(name="o1001"), CrashSchedule())
    demo_plan = ExecutionPlan(
        Scenario(name="demo", path=Path("scenarios/demo.toml"), idempotency_keys=False,
                 expect_failing=DEMO_EXPECT),
        CrashSchedule.parse("t6.gateway_accepted"))
    launcher = make_launcher("fork")  # forked workers: only the reports are under test
    try:
        baseline = execute(baseline_plan, work / "baseline", launcher=launcher)
        demo = execute(demo_plan, work / "demo", launcher=launcher)
    finally:
        launcher.close()
    assert (baseline.verdict, demo.verdict) == ("pass", "pass"), (baseline.reasons, demo.reasons)
    broken_check = dataclasses.replace(baseline.checks[0], passed=False,
                                       detail="the checkpointed draft changed",
                                       evidence=("checkpoint seq 2: draft aaaa",
                                                 "checkpoint seq 3: draft bbbb"))
    failing = dataclasses.replace(
        baseline,
        plan=ExecutionPlan(Scenario(name="broken", path=Path("scenarios/broken.toml")),
                           CrashSchedule.parse("t3.checkpoint_saved>t6.request_leaving")),
        checks=(broken_check, *baseline.checks[1:]), verdict="fail",
        reasons=("draft_identical: the checkpointed draft changed",))
    unknown = dataclasses.replace(
        baseline, plan=ExecutionPlan(Scenario(name="hung"), CrashSchedule.parse("t4.parked")),
        verdict="unknown", reasons=("kill point t4.parked was never reached",))
    return {"baseline": baseline, "demo": demo, "failing": failing, "unknown": unknown}


def _run(results: dict[str, ExecutionResult], run_id: str = "20260719T000000Z-1") -> RunResult:
    return RunResult(run_id, Path(run_id), results=list(results.values()),
                     started_at="2026-07-19T00:00:00+00:00", elapsed_s=4.5)


@pytest.fixture(scope="module")
def written(results: dict[str, ExecutionResult], tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[RunResult, dict[str, Path]]:
    run = _run(results)
    return run, write_reports(run, tmp_path_factory.mktemp("reports") / run.run_id)


def _load(written: tuple[RunResult, dict[str, Path]], name: str) -> dict:
    return json.loads(written[1][name].read_text(encoding="utf-8"))


def test_writers_are_report_writers_and_write_five_files_summary_last(written):
    assert [w.name for w in WRITERS] == ["duplicates", "junit", "markdown", "html", "summary"]
    assert all(isinstance(w, ReportWriter) for w in WRITERS)
    paths = written[1]
    assert {p.name for p in paths.values()} == {"summary.json", "duplicates.json",
                                                "junit.xml", "report.md", "report.html"}
    assert all(p.is_file() for p in paths.values())
    assert not [p for p in paths["summary"].parent.iterdir() if p.name.startswith(".")]


def test_summary_json(written, results):
    data = _load(written, "summary")
    assert data["run_id"] == "20260719T000000Z-1"
    assert data["verdict"] == "fail"
    assert data["counts"] == {"pass": 2, "fail": 1, "unknown": 1}
    assert (data["launcher"], data["interrupted"], data["elapsed_s"]) == ("spawn", False, 4.5)
    by_id = {e["id"]: e for e in data["executions"]}
    assert list(by_id) == ["o1001[no-kill]", "demo[t6.gateway_accepted]",
                           "broken[t3.checkpoint_saved>t6.request_leaving]", "hung[t4.parked]"]
    base, demo = by_id["o1001[no-kill]"], by_id["demo[t6.gateway_accepted]"]
    broken = by_id["broken[t3.checkpoint_saved>t6.request_leaving]"]
    assert (base["schedule"], demo["schedule"]) == ([], ["t6.gateway_accepted"])
    assert broken["schedule"] == ["t3.checkpoint_saved", "t6.request_leaving"]
    assert (base["deliveries"], demo["deliveries"]) == (1, 2)
    assert demo["idempotency_keys"] == [None]
    assert len(base["idempotency_keys"]) == 1
    assert base["idempotency_keys"][0].startswith("case-O-1001:send_email:")
    assert (base["scenario_file"], broken["scenario_file"]) == (None, "scenarios/broken.toml")
    assert base["replay"] == results["baseline"].plan.replay
    assert "scenarios/broken.toml" in broken["replay"]
    assert "--schedule 't3.checkpoint_saved>t6.request_leaving'" in broken["replay"]
    assert list(demo["checks"]) == sorted(CHECK_IDS)
    assert demo["checks"]["exactly_one_delivery"]["passed"] is False
    assert demo["checks"]["exactly_one_delivery"]["evidence"][0].startswith("delivery dlv-")
    assert demo["verdict"] == "pass" and len(demo["reasons"]) == len(DEMO_EXPECT)
    assert broken["verdict"] == "fail" and broken["reasons"] == [
        "draft_identical: the checkpointed draft changed"]
    assert [(w["index"], w["role"], w["returncode"], w["killed_by_harness"])
            for w in demo["workers"]] == [(0, "start", 0, False), (1, "resume", -9, True),
                                          (2, "resume", 0, False)]
    assert demo["workdir"] == results["demo"].evidence.workdir


def test_duplicates_json_lists_the_demo_with_its_two_sends(written):
    data = _load(written, "duplicates")
    assert data["run_id"] == "20260719T000000Z-1"
    [entry] = data["executions"]
    assert entry["id"] == "demo[t6.gateway_accepted]"
    assert (entry["scenario"], entry["schedule"]) == ("demo", ["t6.gateway_accepted"])
    assert (entry["deliveries"], entry["kind"], entry["keys"]) == (2, "duplicate", [None])
    assert entry["replay"].endswith("--schedule t6.gateway_accepted")
    first, second = entry["sends"]
    assert first["delivery_id"] != second["delivery_id"]
    assert first["delivered_at"] < second["delivered_at"]
    assert {first["worker_role"], second["worker_role"]} == {"resume"}
    assert (first["worker"], second["worker"]) == (1, 2)
    assert (first["after_kill"], second["after_kill"]) == (None, "t6.gateway_accepted")
    assert first["idempotency_key"] is None and second["idempotency_key"] is None


def test_a_lost_send_is_reported(results, tmp_path):
    lost = dataclasses.replace(results["failing"], evidence=dataclasses.replace(
        results["failing"].evidence, gateway=GatewayLog((), ())))
    run = _run({"lost": lost})
    entry, = json.loads(write_reports(run, tmp_path / "r")["duplicates"].read_text())[
        "executions"]
    assert (entry["id"], entry["kind"], entry["deliveries"], entry["sends"], entry["keys"]) == (
        "broken[t3.checkpoint_saved>t6.request_leaving]", "lost", 0, [], [])
    # zero deliveries in an unknown execution (cut short, gaps) is not shown to be a loss
    unknown = dataclasses.replace(results["unknown"], evidence=dataclasses.replace(
        results["unknown"].evidence, gateway=GatewayLog((), ())))
    entry, = json.loads(write_reports(_run({"unknown": unknown}), tmp_path / "u")[
        "duplicates"].read_text())["executions"]
    assert (entry["id"], entry["kind"], entry["verdict"]) == (
        "hung[t4.parked]", "unknown", "unknown")
    # a fail whose delivery count could not be decided (the story was cut short) failed
    # for another reason: its zero deliveries are not shown to be a loss either
    undecided = dataclasses.replace(lost, checks=tuple(
        dataclasses.replace(c, undecided="the story was cut short (worker 1 (resume) died of "
                            "signal 9 that the harness did not send)")
        if c.check_id == "exactly_one_delivery" else c for c in lost.checks)
        + (CheckResult("history_not_replaced", False, "replaced"),))
    entry, = json.loads(write_reports(_run({"undecided": undecided}), tmp_path / "d")[
        "duplicates"].read_text())["executions"]
    assert (entry["kind"], entry["verdict"]) == ("unknown", "fail")
    # the same zero deliveries in a scenario that expects none is not a lost send
    none = dataclasses.replace(lost, evidence=dataclasses.replace(lost.evidence,
                                                                  expected_deliveries=0))
    entry, = json.loads(write_reports(_run({"none": none}), tmp_path / "s")["duplicates"]
                        .read_text())["executions"]
    assert (entry["kind"], entry["expected_deliveries"]) == ("none_expected", 0)


def test_junit_xml(written, results):
    root = ET.parse(written[1]["junit"]).getroot()
    assert root.tag == "testsuites"
    [suite] = root
    assert suite.get("name") == "shopops-chaos"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["o1001[no-kill]", "demo[t6.gateway_accepted]",
                           "broken[t3.checkpoint_saved>t6.request_leaving]", "hung[t4.parked]"]
    assert cases["o1001[no-kill]"].get("classname") == "o1001"
    for passed in ("o1001[no-kill]", "demo[t6.gateway_accepted]"):
        assert cases[passed].find("failure") is None and cases[passed].find("error") is None
    failure = cases["broken[t3.checkpoint_saved>t6.request_leaving]"].find("failure")
    assert failure is not None
    assert failure.get("message") == "draft_identical: the checkpointed draft changed"
    assert "checkpoint seq 3: draft bbbb" in failure.text
    assert "replay: shopops-chaos run scenarios/broken.toml" in failure.text
    error = cases["hung[t4.parked]"].find("error")
    assert error is not None and error.get("message") == (
        "unknown: kill point t4.parked was never reached")
    props = {p.get("name"): p.get("value")
             for p in cases["demo[t6.gateway_accepted]"].iterfind("properties/property")}
    assert props["replay"] == results["demo"].plan.replay
    assert (props["verdict"], props["deliveries"]) == ("pass", "2")
    assert float(cases["demo[t6.gateway_accepted]"].get("time")) == pytest.approx(
        results["demo"].elapsed_s, abs=1e-3)
    assert results["demo"].elapsed_s > 0.01  # a real execution's wall time
    out = cases["demo[t6.gateway_accepted]"].find("system-out")
    replay = "replay: shopops-chaos run scenarios/demo.toml --schedule t6.gateway_accepted"
    assert out is not None and replay in (out.text or "")


def test_junit_interrupted_or_empty_run_is_an_error(tmp_path):
    run = RunResult("r1", tmp_path / "r1", interrupted=True)
    suite = ET.parse(write_reports(run, tmp_path / "r1")["junit"]).getroot()[0]
    assert (suite.get("tests"), suite.get("errors")) == ("1", "1")
    assert suite.find("testcase/error").get("message") == "unknown: the run was interrupted"


def test_report_md(written, results):
    text = written[1]["markdown"].read_text(encoding="utf-8")
    assert text.startswith("# shopops-chaos run 20260719T000000Z-1: FAIL\n")
    assert "1 fail, 1 unknown, 2 pass" in text
    lines = text.splitlines()
    # the per-scenario summary comes before any per-execution row
    scen = lines.index("## Scenarios")
    assert scen < lines.index("## Executions to look at") < lines.index("## Checks per execution")
    rows = [line for line in lines[scen:] if line.startswith("| `")]
    assert [r.split(" | ")[:2] for r in rows[:4]] == [
        ["| `o1001`", "pass"], ["| `demo`", "pass"], ["| `broken`", "**fail**"],
        ["| `hung`", "**unknown**"]]
    assert "`t3.checkpoint_saved>t6.request_leaving`" in rows[2]
    # the checks are named in the matrix's header, not numbered
    matrix = lines[lines.index("## Checks per execution"):]
    header = next(line for line in matrix if line.startswith("| execution"))
    assert header == "| execution | " + " | ".join(CHECK_IDS) + " | deliveries | verdict |"
    body = [line for line in matrix if line.startswith("| `")][:4]
    assert body[0].endswith("| 1 | pass |") and "✗" not in body[0]
    assert body[1].count("✗*") == len(DEMO_EXPECT) and body[1].endswith("| 2 | pass |")
    assert body[2].split(" | ")[1] == "✗" and body[2].endswith("| **fail** |")
    assert "### `o1001[no-kill]`" not in text  # a clean pass gets no section
    sections = [line for line in lines if line.startswith("### `")]
    assert sections == [  # failures first, then unknowns, then the demo
        "### `broken[t3.checkpoint_saved>t6.request_leaving]` — fail",
        "### `hung[t4.parked]` — unknown", "### `demo[t6.gateway_accepted]` — pass"]
    assert "#### `exactly_one_delivery` failed (expected by the scenario)" in text
    assert "checkpoint seq 3: draft bbbb" in text
    kill = [line for line in lines if "*** SIGKILL" in line]
    assert len(kill) == 1 and "w1 resume" in kill[0] and "t6.gateway_accepted" in kill[0]
    # the demo sent twice; the failing and unknown cases (copies of the baseline) once each
    assert sum(">>> delivery" in line for line in lines) == 4
    for name in ("demo", "failing", "unknown"):
        assert f"```sh\n{results[name].plan.replay}\n```" in text
    dup = text.split("## Deliveries other than one", 1)[1]
    assert "`demo[t6.gateway_accepted]` | pass | 2 | `(no key)`" in dup
    assert "after kill at t6.gateway_accepted, key (no key)" in dup
    assert "null" not in text and "| none |" not in text  # one spelling for a missing key
    assert "### Lost sends (no delivery where one was expected): 0" in dup


def test_report_md_keeps_expected_zero_deliveries_apart_from_losses(results):
    from harness.reports.markdown import render

    base = results["baseline"]
    rejected = dataclasses.replace(
        base, plan=ExecutionPlan(Scenario(name="rejection", expect_deliveries=0),
                                 CrashSchedule.parse("t4.parked")),
        evidence=dataclasses.replace(base.evidence, gateway=GatewayLog((), ()),
                                     expected_deliveries=0))
    lost = dataclasses.replace(rejected, plan=ExecutionPlan(Scenario(name="lossy"),
                                                            CrashSchedule.parse("t4.parked")),
                               evidence=dataclasses.replace(rejected.evidence,
                                                            expected_deliveries=1))
    text = render(_run({"rejected": rejected, "lost": lost}))
    dup = text.split("## Deliveries other than one", 1)[1]
    assert "### Duplicate sends (two or more deliveries): 0" in dup
    lost_part = dup.split("### Lost sends", 1)[1].split("###", 1)[0]
    assert "`lossy[t4.parked]`" in lost_part and "rejection" not in lost_part
    assert "### No delivery, as the scenario expects: 1" in dup
    assert "`rejection` ×1" in dup.split("### No delivery, as the scenario expects", 1)[1]


def test_control_characters_from_the_implementation_are_made_visible(results):
    from harness.reports.markdown import render

    base = results["baseline"]
    hostile = "\x1b[2J\x1b]0;pwned\x07boom\r\u202eevil"
    worker = dataclasses.replace(base.evidence.workers[0], returncode=3, stderr_tail=hostile)
    bad = dataclasses.replace(
        base, verdict="unknown",
        reasons=(f"worker 0 (start) exited with status 3; stderr: {hostile}",),
        evidence=dataclasses.replace(base.evidence, workers=(worker,)))
    text = render(_run({"bad": bad}))
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "\u202e" not in text
    assert "\\x1b[2J\\x1b]0;pwned\\x07boom\\x0d\\u202eevil" in text


def test_timeline_has_one_line_per_event(results):
    demo = results["demo"]
    lines = timeline(demo)
    assert len(lines) == len(demo.evidence.events)
    assert any("human" in line and "t5.approved" in line for line in lines)
    delivery = next(line for line in lines if ">>> delivery" in line)
    assert " ms  w1 resume" in delivery and "dlv-" in delivery


def test_reports_are_deterministic(written, tmp_path):
    run, first = written
    again = write_reports(run, tmp_path / run.run_id)
    for name, path in first.items():
        assert again[name].read_bytes() == path.read_bytes(), name


def test_latest_symlink_is_relative_and_replaced(results, tmp_path):
    a, b = tmp_path / "run-a", tmp_path / "run-b"
    write_reports(_run(results, "run-a"), a)
    latest = tmp_path / "latest"
    assert latest.is_symlink() and os.readlink(latest) == "run-a"
    assert latest.resolve() == a.resolve()
    write_reports(_run(results, "run-b"), b)
    assert os.readlink(latest) == "run-b" and (latest / "summary.json").is_file()
    assert json.loads((latest / "summary.json").read_text())["run_id"] == "run-b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "run-a", "run-b"]


def test_step_summary_is_appended_only_when_the_variable_is_set(results, tmp_path):
    from harness.reports.step_summary import write_step_summary

    run = _run(results)
    assert write_step_summary(run, env={}) is None
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    assert write_step_summary(run, tmp_path, env={"GITHUB_STEP_SUMMARY": str(target)}) == target
    text = target.read_text()
    assert text.startswith("earlier step\n### shopops-chaos: FAIL\n")
    assert "| `broken` | fail | 1 | 0 | 0 |" in text and "| `o1001`" not in text
    assert text.index("**fail** `broken[") < text.index("**unknown** `hung[")
    assert "replay: `shopops-chaos run scenarios/broken.toml" in text
    assert len(text.splitlines()) < 30


def test_a_step_summary_target_that_cannot_be_appended_to_is_refused_before_the_run(
        tmp_path, monkeypatch, capsys):
    """``GITHUB_STEP_SUMMARY`` naming a folder or a file in a missing folder used to end a
    passing run with a traceback and exit 1 ("an execution failed"), after ``latest`` had
    moved (found by a new-user trial). It is now bad input: one line, exit 2, no run."""
    from harness.cli.main import main
    from harness.reports.step_summary import check_target

    ok = tmp_path / "summary.md"
    check_target({})  # unset: no summary
    check_target({"GITHUB_STEP_SUMMARY": str(ok)})  # a file to be: fine
    for value, why in ((str(tmp_path), "is a folder"),
                       (str(tmp_path / "no" / "such.md"), "not in an existing folder")):
        with pytest.raises(ValueError, match=why):
            check_target({"GITHUB_STEP_SUMMARY": value})
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", value)
        monkeypatch.chdir(tmp_path)
        status = main(["run", str(Path(__file__).resolve().parent.parent / "scenarios"
                                     / "rejection.toml"),
                       "--report-dir", "reports"])
        err = capsys.readouterr().err
        assert status == 2 and "GITHUB_STEP_SUMMARY" in err and why in err, err
        assert not (tmp_path / "reports").exists()  # nothing ran


def test_a_rubric_item_not_applicable_reads_n_a_never_a_full_score(tmp_path: Path) -> None:
    """A grade item worth nothing here (``max_score`` 0: a target without that part) showed
    as a green ``0 / 0`` beside real passes (found by a new user). It reads ``n/a``."""
    from harness.grading.output import GradedTest, write_page, write_report

    tests = [GradedTest("delivery", 4.0, 4.0, "ok", "visible"),
             GradedTest("leases", 0.0, 0.0, "Not applicable: no lease records.", "visible"),
             GradedTest("tickets", 0.0, 2.0, "a send without a ticket", "visible")]
    md = write_report(tests, tmp_path / "report.md", "impl", "graded").read_text()
    assert "| leases | n/a |" in md and "## leases — n/a" in md
    assert "| delivery | 4 / 4 |" in md and "| tickets | 0 / 2 |" in md
    assert "0 / 0" not in md
    page = write_page(tests, tmp_path / "page" / "report.html", "impl", "graded").read_text()
    assert page.count('<span class="badge v-na">n/a</span>') == 2  # table row and section
    assert 'class="x v-na"' in page and "0 / 0" not in page
    assert page.count('<span class="badge v-pass">pass</span>') == 2  # delivery only
    assert page.count('<span class="badge v-fail">fail</span>') == 2  # tickets
    from harness.grading.grade import _console_line

    assert [_console_line(t).split() for t in tests] == [
        ["4", "/", "4", "delivery"], ["n/a", "leases", "(not", "applicable)"],
        ["0", "/", "2", "tickets"]]
