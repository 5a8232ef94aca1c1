"""Scenario fields for the reference loop's newer options: ``sut.read_timeout_s``,
``concurrency.same_owner`` and the ``delay_after_accept`` gateway
fault. Bad values are refused on load, naming the file, the line and the field; good ones
reach the worker's command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_helpers import ROOT, assert_names, refused

from harness.plan.scenario import load_scenario


def write(folder: Path, text: str) -> Path:
    path = folder / "x.toml"
    path.write_text('name = "x"\n' + text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("value", "says"), [("0", "must be a finite number from 0.05"),
                                             ("nan", "must be a finite number"),
                                             ("inf", "must be a finite number"),
                                             ("61", "from 0.05 to 60 seconds"),
                                             ('"5"', "must be a finite number from 0.05 "
                                                     "to 60 seconds, got a string")])
def test_bad_read_timeouts_are_refused(tmp_path: Path, value: str, says: str) -> None:
    path = write(tmp_path, f"[sut]\nread_timeout_s = {value}\n")
    err = refused(path)
    assert_names(err, path, "sut.read_timeout_s", 3)
    assert says in str(err)


@pytest.mark.parametrize(("value", "says"), [("0", "from 1 to 100"), ("101", "from 1 to 100"),
                                             ("2.5", "must be an integer from 1 to 100 "
                                                     "attempts, got a number 2.5")])
def test_bad_max_attempts_are_refused(tmp_path: Path, value: str, says: str) -> None:
    path = write(tmp_path, f"[sut]\nmax_attempts = {value}\n")
    err = refused(path)
    assert_names(err, path, "sut.max_attempts", 3)
    assert says in str(err)


@pytest.mark.parametrize(("text", "says"), [
    ('[human]\naction = "reject"\nfeedback = ""\n', "1-2000 characters"),
    ('[human]\naction = "reject"\nfeedback = 3\n', "must be a string"),
    ('[human]\nfeedback = "more detail"\n', 'feedback goes with action = "reject"')])
def test_bad_feedback_is_refused(tmp_path: Path, text: str, says: str) -> None:
    err = refused(write(tmp_path, text))
    assert err.field == "human.feedback" and says in str(err), str(err)


@pytest.mark.parametrize(("timeout", "ms"), [("", 5000), ("read_timeout_s = 0.5\n", 500)])
def test_a_delayed_reply_must_outlast_the_read_timeout(tmp_path: Path, timeout: str,
                                                       ms: int) -> None:
    path = write(tmp_path, f"[sut]\n{timeout}\n[gateway]\n"
                           f'faults = [{{ kind = "delay_after_accept", ms = {ms} }}]\n')
    err = refused(path)
    assert err.field == "gateway.faults" and "must exceed the client's read timeout" in str(err)


def test_same_owner_needs_leases(tmp_path: Path) -> None:
    path = write(tmp_path, "[concurrency]\nsame_owner = true\n")
    err = refused(path)
    assert_names(err, path, "concurrency.same_owner", 3)
    assert "leases = true" in str(err)


def test_the_shipped_loop_scenarios_load() -> None:
    timeout = load_scenario(ROOT / "scenarios" / "reply-after-timeout.toml")
    assert timeout.read_timeout_s == 0.5
    assert [f.kind for f in timeout.gateway_faults] == ["delay_after_accept"]
    same = load_scenario(ROOT / "scenarios" / "lease-same-owner.toml")
    assert same.same_owner and same.leases and same.expect_worker_error == "FencedOff"
