"""``shopops-chaos run`` end to end: real workers, real SIGKILL, real SQLite, real gateway.

Exit statuses, the reports a CI reads, the duplicate the demo must show, and replay.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from input_helpers import assert_refused, call

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def write(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "scenarios"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_demo_shows_its_duplicate_and_passes(tmp_path: Path) -> None:
    proc = chaos("run", str(SCENARIOS / "demo-keys-off.toml"), "--report-dir", "r",
                 cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    latest = tmp_path / "r" / "latest"
    summary = json.loads((latest / "summary.json").read_text())
    assert summary["verdict"] == "pass"
    (ex,) = summary["executions"]
    assert ex["id"] == "demo-keys-off[t6.gateway_accepted]"
    assert ex["deliveries"] == 2
    assert ex["checks"]["same_key_one_delivery"]["passed"] is False
    assert ex["checks"]["exactly_one_delivery"]["passed"] is False
    dupes = json.loads((latest / "duplicates.json").read_text())
    assert [d["id"] for d in dupes["executions"]] == [ex["id"]]
    assert len(dupes["executions"][0]["sends"]) == 2
    report = (latest / "report.md").read_text()
    assert "demo-keys-off[t6.gateway_accepted]" in report
    assert "deliveries other than one in 1 execution(s)" in proc.stdout
    assert ("demo-keys-off[t6.gateway_accepted]: 2 deliveries, duplicate "
            "(as the scenario expects)") in proc.stdout


def test_an_execution_cut_short_is_not_reported_as_a_lost_send(tmp_path: Path) -> None:
    """The human approves before anything is parked: the queue refuses, the story is cut
    short, nothing is sent. The verdict is unknown, and no report calls that a lost send:
    the evidence does not show the loop losing the email (it never had the chance)."""
    path = write(tmp_path, "early.toml", """
name = "approve-too-early"
description = "The human approves before the case is parked: the story is cut short"

[[story]]
step = "human"
action = "approve"

[[story]]
step = "workers"
role = "start"
""")
    proc = chaos("run", str(path), "--schedule", "no-kill", "--report-dir", "r", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    latest = tmp_path / "r" / "latest"
    (ex,) = json.loads((latest / "summary.json").read_text())["executions"]
    assert (ex["verdict"], ex["deliveries"]) == ("unknown", 0), ex["reasons"]
    assert any("the human could not approve" in r for r in ex["reasons"])
    (entry,) = json.loads((latest / "duplicates.json").read_text())["executions"]
    assert (entry["id"], entry["kind"], entry["verdict"]) == (
        "approve-too-early[no-kill]", "unknown", "unknown")
    assert ("approve-too-early[no-kill]: 0 deliveries, not known: the execution was cut "
            "short or its evidence has gaps (not a lost send)") in proc.stdout
    assert "lost\n" not in proc.stdout
    md = (latest / "report.md").read_text().split("## Deliveries other than one", 1)[1]
    assert "### Lost sends (no delivery where one was expected): 0" in md
    unknown = md.split("### No delivery, not known to be lost", 1)[1].split("###", 1)[0]
    assert unknown.startswith(" (the execution was cut short or its evidence has gaps): 1")
    assert "`approve-too-early[no-kill]`" in unknown
    html = (latest / "report.html").read_text()
    lost = html.split("Lost sends (no delivery where one was expected)", 1)[1]
    assert lost.split("<h3", 1)[0].count("approve-too-early") == 0
    assert "0 deliveries (not known: the execution was cut short" in html


def test_broken_loop_fails_with_exit_1_and_junit_failure(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.toml", """
name = "broken"
[sut]
idempotency_keys = false
[crash]
points = ["t6.gateway_accepted", "t4.parked"]
baseline = false
""")
    proc = chaos("run", str(path), "--report-dir", "r", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "r" / "latest" / "summary.json").read_text())
    # Without keys the send is unprotected at every point (check 5 fails everywhere), but
    # only a kill after the gateway accepted actually duplicates it.
    outcome = {e["id"]: (e["verdict"], e["deliveries"]) for e in summary["executions"]}
    assert outcome == {"broken[t6.gateway_accepted]": ("fail", 2),
                       "broken[t4.parked]": ("fail", 1)}
    suite = ET.parse(tmp_path / "r" / "latest" / "junit.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    failed = [tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert failed == ["broken[t6.gateway_accepted]", "broken[t4.parked]"]


def test_unreached_kill_point_is_unknown_never_pass(tmp_path: Path) -> None:
    # After the kill at the completed checkpoint the resume finds a completed case: the
    # second kill point (a fresh case start) is never reached.
    path = write(tmp_path, "unreached.toml", """
name = "unreached"
[crash]
points = []
schedules = ["t7.completed_saved>t0.case_started"]
baseline = false
""")
    proc = chaos("run", str(path), "--report-dir", "r", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "r" / "latest" / "summary.json").read_text())
    (ex,) = summary["executions"]
    assert ex["verdict"] == "unknown"
    assert any("t0.case_started was never reached" in r for r in ex["reasons"])


def test_replay_command_reproduces_the_execution(tmp_path: Path) -> None:
    proc = chaos("run", str(SCENARIOS / "o1001.toml"), "--schedule",
                 "t3.checkpoint_saved>t6.gateway_accepted", "--report-dir", "r1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = json.loads((tmp_path / "r1" / "latest" / "summary.json").read_text())
    (ex,) = first["executions"]
    assert ex["schedule"] == ["t3.checkpoint_saved", "t6.gateway_accepted"]
    argv = shlex.split(ex["replay"])
    assert argv[0] == "shopops-chaos"
    again = chaos(*argv[1:], "--report-dir", "r2", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    second = json.loads((tmp_path / "r2" / "latest" / "summary.json").read_text())
    (ex2,) = second["executions"]
    assert ex2["id"] == ex["id"]
    assert {k: v["passed"] for k, v in ex2["checks"].items()} == {
        k: v["passed"] for k, v in ex["checks"].items()}
    assert [w["role"] for w in ex2["workers"]] == [w["role"] for w in ex["workers"]]
    assert [w["returncode"] for w in ex2["workers"]] == [-9, 0, -9, 0]


def test_points_lists_the_catalogue() -> None:
    from shopops_contract.labels import CATALOGUE

    proc = subprocess.run([sys.executable, "-m", "harness", "points"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    listed = [line.split()[0] for line in proc.stdout.splitlines()]
    assert listed == [label.name for label in CATALOGUE]


@pytest.mark.io
@pytest.mark.parametrize("schedule", ["t9.nowhere", "t5.approved", "t4.parked#0"])
def test_bad_schedule_option_exits_2_before_running(tmp_path: Path, schedule: str) -> None:
    """In this process (``input_helpers.call``): exit status 2, one error line naming the
    kill point, nothing written, no process started."""
    refused = call("shopops-chaos", ["run", str(SCENARIOS / "o1001.toml"), "--schedule",
                                     schedule, "--report-dir", "r"], tmp_path)
    assert_refused(refused, 2, "kill point")


@pytest.mark.parametrize("launcher", ["fork", "spawn"])
def test_run_starts_its_fork_server_before_it_loads_the_scenarios(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher: str) -> None:
    """The fork server's imports run beside the command's loading and planning
    (``make_launcher(begin=True)``), not after them; a spawning run starts none."""
    import psutil

    import harness.plan.scenario as scenario_module

    real = scenario_module.load_scenarios
    servers: list[list[int]] = []

    def fork_servers() -> set[int]:
        found = set()
        for p in psutil.Process().children():
            try:
                if "harness.forkserver.server" in " ".join(p.cmdline()):
                    found.add(p.pid)
            except psutil.NoSuchProcess:
                continue
        return found

    before = fork_servers()  # e.g. another test's, in this xdist worker

    def loading(paths: object) -> object:
        servers.append(sorted(fork_servers() - before))
        return real(paths)  # type: ignore[arg-type]

    monkeypatch.setattr(scenario_module, "load_scenarios", loading)
    ran = call("shopops-chaos", ["run", str(SCENARIOS / "o1001.toml"), "--schedule",
                                 "no-kill", "--launcher", launcher, "--report-dir", "r"],
               tmp_path)
    assert ran.code == 0, ran.err
    assert [len(found) for found in servers] == [1 if launcher == "fork" else 0]
    assert not ran.new_processes  # closed with the command
