"""Scenario files, the newer tables: ``[human]``, ``[gateway]``, ``[concurrency]``,
``[storage]``, ``expect.deliveries``/``expect.worker_error`` and ``crash.double``.

Every bad value is refused on load with a ``ScenarioError`` whose ``path``, ``field``
(dotted) and ``line`` are set and whose message names the file, the field and what is
allowed. The complete example in ``scenarios/README.md`` loads with the values it shows, and
every shipped file loads with the story it says it tells.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from scenario_helpers import ROOT, SHIPPED, assert_names, refused

from harness.model import CrashMode, CrashSchedule, KillPoint
from harness.plan.scenario import (
    HUMAN_ACTIONS,
    STORAGE_FAULTS,
    TICKETS,
    WORKER_ERRORS,
    Scenario,
    ScenarioError,
    load_scenario,
    load_scenarios,
)
from harness.services.gateway import FaultSpec

README = ROOT / "scenarios" / "README.md"
DOCUMENTED_FAULT_KINDS = ("latency", "error", "drop_after_accept", "delay_after_accept")


def write(folder: Path, text: str, name: str = "bad.toml") -> Path:
    """Write a scenario file. Unless ``text`` sets ``name``, its first line is
    ``name = "<file stem>"``, so the lines of ``text`` are numbered from 2."""
    if not re.search(r"(?m)^name\s*=", text):
        text = f'name = "{Path(name).stem}"\n' + text
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def allowed_list(err: ScenarioError) -> list[str]:
    """The comma-separated values after ``allowed: `` in the message."""
    message = str(err)
    assert "allowed: " in message, message
    return message.split("allowed: ", 1)[1].split(", ")


# --------------------------------------------------------------------------- [human]


def test_unknown_human_action_lists_the_actions(tmp_path: Path) -> None:
    path = write(tmp_path, 'name = "x"\n\n[human]\naction = "maybe"\n')
    err = refused(path)
    assert_names(err, path, "human.action", 4)
    assert "'maybe'" in str(err)
    assert allowed_list(err) == list(HUMAN_ACTIONS) == ["approve", "reject"]


def test_unknown_human_ticket_lists_the_tickets(tmp_path: Path) -> None:
    path = write(tmp_path, '[human]\naction = "approve"\nticket = "stolen"\n')
    err = refused(path)
    assert_names(err, path, "human.ticket", 4)
    assert "'stolen'" in str(err)
    assert allowed_list(err) == list(TICKETS) == ["issued", "forged", "forged_in_state",
                                                  "other_case", "stale_draft", "consumed",
                                                  "other_case_same_draft",
                                                  "forged_in_parked_state"]


def test_approve_at_an_unknown_label_lists_the_points(tmp_path: Path) -> None:
    path = write(tmp_path, '[human]\napprove_at = "t6.checkpoint_loadd"\n')
    err = refused(path)
    assert_names(err, path, "human.approve_at", 3)
    assert "unknown label 't6.checkpoint_loadd'" in str(err)
    allowed = allowed_list(err)
    assert "t6.checkpoint_loaded" in allowed
    assert "t5.approved" not in allowed  # the human's own act is no point to approve at


@pytest.mark.parametrize("label", ["t6.request_leaving", "t6.request_leaving#2",
                                   "t6.approval_granted", "t7.completed_saved"])
def test_approve_at_a_point_only_reached_after_approval(tmp_path: Path, label: str) -> None:
    path = write(tmp_path, f'[crash]\npoints = []\n[human]\napprove_at = "{label}"\n')
    err = refused(path)
    assert_names(err, path, "human.approve_at", 5)
    assert f"{label.split('#')[0]} is only reached after an approval" in str(err)


@pytest.mark.parametrize("label", ["t4.parked", "t6.checkpoint_loaded", "t3.checkpoint_saved"])
def test_approve_at_a_point_reached_before_approval_loads(tmp_path: Path, label: str) -> None:
    s = load_scenario(write(tmp_path, f'[human]\napprove_at = "{label}"\n', "ok.toml"))
    assert s.approve_at == KillPoint(label)


@pytest.mark.parametrize("value", ["-1", "-0.5"])
def test_negative_delay_hours(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f'[human]\naction = "approve"\ndelay_hours = {value}\n')
    err = refused(path)
    assert_names(err, path, "human.delay_hours", 4)
    assert f"{value}: must be a finite number from 0 to 8784 hours" in str(err)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_delay_hours_that_is_not_a_finite_number(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"[human]\ndelay_hours = {value}\n")
    assert_names(refused(path), path, "human.delay_hours", 3)


@pytest.mark.parametrize("other", ['twice = true', 'approve_at = "t6.checkpoint_loaded"',
                                   'ticket = "forged"', 'ticket = "consumed"'])
def test_reject_together_with_an_approval_detail(tmp_path: Path, other: str) -> None:
    path = write(tmp_path, f'[human]\naction = "reject"\n{other}\n')
    err = refused(path)
    assert_names(err, path, "human.action", 3)
    assert ('a rejected case has no approval: approve_at, twice and ticket need '
            'action = "approve"') in str(err)


@pytest.mark.parametrize("expect", ["", "[expect]\ndeliveries = 1\n"])
def test_a_rejection_without_feedback_expecting_a_delivery(tmp_path: Path, expect: str) -> None:
    """A contradiction, not a matrix of failures (found by a new-user trial: every
    execution failed "1 delivery expected"): a rejection with no feedback sends nothing."""
    path = write(tmp_path, f'[human]\naction = "reject"\n{expect}')
    err = refused(path)
    assert err.field == "expect.deliveries"
    assert "a rejection without feedback ends the case unsent" in str(err)
    ok = write(tmp_path, '[human]\naction = "reject"\n[expect]\ndeliveries = 0\n')
    assert load_scenario(ok).expect_deliveries == 0


@pytest.mark.parametrize("other", ['ticket = "forged"', "twice = true"])
def test_approve_at_with_a_detail_the_story_ignores(tmp_path: Path, other: str) -> None:
    path = write(tmp_path, f'[human]\napprove_at = "t6.checkpoint_loaded"\n{other}\n')
    assert refused(path).field in ("human.approve_at", "human.ticket", "human.twice")


# --------------------------------------------------------------------------- [gateway]

BAD_FAULTS = [
    ('{ kind = "explode" }', "fault 1: fault.kind: 'explode' is not one of"),
    ('{ kind = "latency" }',
     "fault 1: fault.ms: None must be an integer in 0..60000 (milliseconds)"),
    ('{ kind = "latency", ms = -5 }', "fault 1: fault.ms: -5 must be an integer in 0..60000"),
    ('{ kind = "latency", ms = 1.5 }', "fault 1: fault.ms: 1.5 must be an integer in 0..60000"),
    ('{ kind = "error", status = 404 }', "fault 1: fault.status: 404 must be an integer in "
                                         "500..599"),
    ('{ kind = "error" }', "fault 1: fault.status: None must be an integer in 500..599"),
    ('{ kind = "error", status = 503, ms = 5 }',
     "fault 1: fault.ms: not allowed for kind 'error' (allowed: kind, status)"),
    ('{ kind = "drop_after_accept", extra = 1 }',
     "fault 1: fault.extra: not allowed for kind 'drop_after_accept' (allowed: kind)"),
    ('{ kind = "error", status = 503 }, { kind = "latency", ms = 5, status = 500 }',
     "fault 2: fault.status: not allowed for kind 'latency' (allowed: kind, ms)"),
    ('"drop"', "fault 1: fault: expected an object, got str"),
]


@pytest.mark.parametrize(("faults", "says"), BAD_FAULTS,
                         ids=["unknown-kind", "latency-without-ms", "latency-negative",
                              "latency-float", "error-404", "error-without-status",
                              "error-with-ms", "extra-key", "second-fault", "string-fault"])
def test_bad_gateway_fault(tmp_path: Path, faults: str, says: str) -> None:
    path = write(tmp_path, f'name = "x"\n[gateway]\nfaults = [{faults}]\n')
    err = refused(path)
    assert_names(err, path, "gateway.faults", 3)
    assert says in str(err)


def test_unknown_fault_kind_lists_the_kinds(tmp_path: Path) -> None:
    err = refused(write(tmp_path, '[gateway]\nfaults = [{ kind = "explode" }]\n'))
    kinds = str(err).split("is not one of ", 1)[1].split(", ")
    assert set(DOCUMENTED_FAULT_KINDS) <= set(kinds)


def test_a_bad_fault_in_a_multi_line_list_points_at_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, ('name = "x"\n[gateway]\nfaults = [\n'
                            '  { kind = "error", status = 503 },\n'
                            '  { kind = "error", status = 404 },\n]\n'))
    err = refused(path)
    assert_names(err, path, "gateway.faults", 3)
    assert "fault 2: fault.status: 404" in str(err)


def test_good_faults_load_in_order(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, (
        '[gateway]\nfaults = [{ kind = "latency", ms = 0 }, { kind = "error", status = 599 },'
        ' { kind = "drop_after_accept" }]\n'), "ok.toml"))
    assert s.gateway_faults == (FaultSpec("latency", ms=0), FaultSpec("error", status=599),
                                FaultSpec("drop_after_accept"))


# --------------------------------------------------------------------------- [concurrency]


@pytest.mark.parametrize(("value", "says"), [("0", "0: must be an integer from 1 to 4"),
                                             ("-2", "-2: must be an integer from 1 to 4"),
                                             ("5", "5: must be an integer from 1 to 4 workers")])
def test_resumers_out_of_range(tmp_path: Path, value: str, says: str) -> None:
    path = write(tmp_path, f"[concurrency]\nleases = true\nresumers = {value}\n")
    err = refused(path)
    assert_names(err, path, "concurrency.resumers", 4)
    assert says in str(err)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_resumers_without_leases(tmp_path: Path, n: int) -> None:
    path = write(tmp_path, f"[concurrency]\nresumers = {n}\n")
    err = refused(path)
    assert_names(err, path, "concurrency.resumers", 3)
    assert "concurrent resumers need leases = true" in str(err)


@pytest.mark.parametrize("n", [2, 4])
def test_resumers_with_leases_load(tmp_path: Path, n: int) -> None:
    s = load_scenario(write(tmp_path, f"[concurrency]\nresumers = {n}\nleases = true\n",
                            "ok.toml"))
    assert (s.resumers, s.leases) == (n, True)


@pytest.mark.parametrize("text", ['takeover_at = "t6.request_leaving"\n',
                                  'leases = false\ntakeover_at = "t6.request_leaving"\n'])
def test_takeover_without_leases(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "[concurrency]\n" + text)
    err = refused(path)
    assert_names(err, path, "concurrency.takeover_at", text.count("\n") + 2)
    assert "a takeover needs leases = true and resumers = 1" in str(err)


def test_takeover_with_two_resumers(tmp_path: Path) -> None:
    path = write(tmp_path, ('[concurrency]\nleases = true\nresumers = 2\n'
                            'takeover_at = "t6.request_leaving"\n'))
    err = refused(path)
    assert_names(err, path, "concurrency.takeover_at", 5)
    assert "a takeover needs leases = true and resumers = 1" in str(err)


def test_takeover_at_an_unknown_label(tmp_path: Path) -> None:
    path = write(tmp_path, '[concurrency]\nleases = true\ntakeover_at = "t6.leaving"\n')
    err = refused(path)
    assert_names(err, path, "concurrency.takeover_at", 4)
    assert "t6.request_leaving" in allowed_list(err)


def test_takeover_at_a_point_no_resumer_reaches(tmp_path: Path) -> None:
    path = write(tmp_path, '[concurrency]\nleases = true\ntakeover_at = "t4.parked"\n')
    assert_names(refused(path), path, "concurrency.takeover_at", 4)


@pytest.mark.parametrize("value", ["0", "0.05", "-30"])
def test_lease_ttl_not_positive(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"[concurrency]\nleases = true\nlease_ttl_s = {value}\n")
    err = refused(path)
    assert_names(err, path, "concurrency.lease_ttl_s", 4)
    assert f"{value}: must be a finite number from 0.1 to 86400 seconds" in str(err)


def test_lease_ttl_nan(tmp_path: Path) -> None:
    path = write(tmp_path, "[concurrency]\nleases = true\nlease_ttl_s = nan\n")
    assert_names(refused(path), path, "concurrency.lease_ttl_s", 4)


# --------------------------------------------------------------------------- [storage]


def test_unknown_storage_fault_lists_the_faults(tmp_path: Path) -> None:
    path = write(tmp_path, '[storage]\nfault = "bitrot"\n')
    err = refused(path)
    assert_names(err, path, "storage.fault", 3)
    assert "'bitrot'" in str(err)
    assert allowed_list(err) == list(STORAGE_FAULTS) == [
        "none", "corrupt_json", "truncated_json", "invalid_utf8", "unknown_version",
        "v1_checkpoint", "lock"]


@pytest.mark.parametrize("fault", ["", 'fault = "none"\n', 'fault = "corrupt_json"\n'])
def test_lock_at_without_the_lock_fault(tmp_path: Path, fault: str) -> None:
    path = write(tmp_path, f'[storage]\n{fault}lock_at = "t6.approval_granted"\n')
    err = refused(path)
    assert_names(err, path, "storage.lock_at", 3 + fault.count("\n"))
    assert 'lock_at goes with fault = "lock"' in str(err)


def test_lock_fault_without_lock_at(tmp_path: Path) -> None:
    path = write(tmp_path, '[storage]\nfault = "lock"\nlock_ms = 100\n')
    err = refused(path)
    assert_names(err, path, "storage.lock_at", 2)  # missing: its table's header line
    assert 'lock_at goes with fault = "lock" (and it needs one)' in str(err)


def test_lock_at_an_unknown_label(tmp_path: Path) -> None:
    path = write(tmp_path, '[storage]\nfault = "lock"\nlock_at = "t6.granted"\n')
    err = refused(path)
    assert_names(err, path, "storage.lock_at", 4)
    assert "t6.approval_granted" in allowed_list(err)


def test_negative_lock_ms(tmp_path: Path) -> None:
    path = write(tmp_path, ('[storage]\nfault = "lock"\nlock_at = "t6.approval_granted"\n'
                            "lock_ms = -1\n"))
    err = refused(path)
    assert_names(err, path, "storage.lock_ms", 5)
    assert "-1: must be an integer from 0 to 60000 milliseconds" in str(err)


def test_lock_loads_with_its_point_and_duration(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, ('[storage]\nfault = "lock"\n'
                                       'lock_at = "t6.reply_received"\nlock_ms = 450\n'),
                            "ok.toml"))
    assert (s.storage_fault, s.lock_at, s.lock_ms) == ("lock", KillPoint("t6.reply_received"),
                                                       450)


# --------------------------------------------------------------------------- [expect]


def test_negative_expected_deliveries(tmp_path: Path) -> None:
    path = write(tmp_path, "[expect]\ndeliveries = -1\n")
    err = refused(path)
    assert_names(err, path, "expect.deliveries", 3)
    assert "-1; allowed: 0 (nothing may be sent) or 1" in str(err)


def test_expected_deliveries_above_one(tmp_path: Path) -> None:
    path = write(tmp_path, "[expect]\ndeliveries = 2\n")
    assert_names(refused(path), path, "expect.deliveries", 3)


def test_unknown_worker_error_lists_the_errors(tmp_path: Path) -> None:
    path = write(tmp_path, '[expect]\ndeliveries = 0\nworker_error = "CheckpointBroken"\n')
    err = refused(path)
    assert_names(err, path, "expect.worker_error", 4)
    assert "'CheckpointBroken'" in str(err)
    assert allowed_list(err) == list(WORKER_ERRORS) == [
        "ApprovalRefused", "CheckpointCorrupt", "UnsupportedSchemaVersion", "LeaseHeld",
        "FencedOff", "GatewayRejected", "GatewayUnavailable"]


# --------------------------------------------------------------------------- wrong types

WRONG_TYPES = [
    ('[human]\ntwice = "yes"\n', "human.twice", 3, "must be true or false, got a string"),
    ("[human]\naction = true\n", "human.action", 3, "must be a string, got a boolean"),
    ("[human]\nticket = 1\n", "human.ticket", 3, "must be a string, got an integer"),
    ('[human]\ndelay_hours = "6"\n', "human.delay_hours", 3,
     "must be a finite number from 0 to 8784 hours, got a string"),
    ("[human]\napprove_at = [\"t4.parked\"]\n", "human.approve_at", 3,
     "must be a string, got a list"),
    ("[concurrency]\nresumers = 1.5\n", "concurrency.resumers", 3,
     "must be an integer from 1 to 4 workers at once, got a number 1.5"),
    ('[concurrency]\nleases = "true"\n', "concurrency.leases", 3,
     "must be true or false, got a string"),
    ('[concurrency]\nlease_ttl_s = "30"\n', "concurrency.lease_ttl_s", 3,
     "must be a finite number from 0.1 to 86400 seconds, got a string"),
    ('[gateway]\nfaults = "drop"\n', "gateway.faults", 3, "must be a list, got a string"),
    ('[gateway]\nfaults = { kind = "error", status = 503 }\n', "gateway.faults", 3,
     "must be a list, got a table"),
    ("[storage]\nfault = false\n", "storage.fault", 3, "must be a string, got a boolean"),
    ("[storage]\nlock_ms = 0.3\n", "storage.lock_ms", 3,
     "must be an integer from 0 to 60000 milliseconds, got a number 0.3"),
    ('[expect]\ndeliveries = "1"\n', "expect.deliveries", 3, "must be an integer, got a string"),
    ("[expect]\ndeliveries = 1.0\n", "expect.deliveries", 3, "must be an integer, got a number"),
    ('[expect]\nworker_error = ["LeaseHeld"]\n', "expect.worker_error", 3,
     "must be a string, got a list"),
    ('[crash]\ndouble = "yes"\n', "crash.double", 3, "must be true or false, got a string"),
    ("[crash]\ndouble = 1\n", "crash.double", 3, "must be true or false, got an integer"),
    ('name = "x"\nhuman = "approve"\n', "human", 2, "must be a table [human]"),
    ("gateway = []\n", "gateway", 2, "must be a table [gateway]"),
]


@pytest.mark.parametrize(("text", "field", "line", "says"), WRONG_TYPES,
                         ids=[f"{case[1]}-{i}" for i, case in enumerate(WRONG_TYPES)])
def test_wrong_type(tmp_path: Path, text: str, field: str, line: int, says: str) -> None:
    path = write(tmp_path, text)
    err = refused(path)
    assert_names(err, path, field, line)
    assert says in str(err)


@pytest.mark.parametrize(("text", "field"), [("[concurrency]\nresumers = true\n",
                                              "concurrency.resumers"),
                                             ("[expect]\ndeliveries = false\n",
                                              "expect.deliveries"),
                                             ("[storage]\nlock_ms = true\n", "storage.lock_ms"),
                                             ("[human]\ndelay_hours = true\n",
                                              "human.delay_hours")])
def test_a_boolean_is_not_a_number(tmp_path: Path, text: str, field: str) -> None:
    path = write(tmp_path, text)
    err = refused(path)
    assert_names(err, path, field, 3)
    assert ("must be a finite number from" in str(err)
            or "must be an integer from" in str(err)
            or "allowed: 0 (nothing may be sent) or 1" in str(err))


@pytest.mark.parametrize(("table", "key", "allowed"), [
    ("human", "approver", "action, approve_at, delay_hours, twice, ticket"),
    ("gateway", "fault", "faults"),
    ("concurrency", "workers", "resumers, leases, lease_ttl_s, takeover_at"),
    ("storage", "lock_s", "fault, lock_at, lock_ms"),
    ("expect", "worker_errors", "failing_checks, deliveries, worker_error"),
])
def test_unknown_field_in_a_newer_table(tmp_path: Path, table: str, key: str,
                                        allowed: str) -> None:
    path = write(tmp_path, f'name = "x"\n[{table}]\n{key} = 1\n')
    err = refused(path)
    assert_names(err, path, f"{table}.{key}", 3)
    assert f"unknown field; allowed in [{table}]: {allowed}" in str(err)


@pytest.mark.parametrize(("text", "field", "line"), [
    ('human = { action = "maybe" }\n', "human.action", 2),
    ('human.action = "maybe"\n', "human.action", 2),
    ('[human]\n"action" = "maybe"\n', "human.action", 3),
    ('[[gateway.faults]]\nkind = "boom"\n', "gateway.faults", 2),
], ids=["inline-table", "dotted-key", "quoted-key", "array-of-tables"])
def test_a_field_in_another_toml_spelling_keeps_its_line(tmp_path: Path, text: str,
                                                         field: str, line: int) -> None:
    path = write(tmp_path, text)
    assert_names(refused(path), path, field, line)


# --------------------------------------------------------------------------- the README example


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    complete = text.split("## A complete example", 1)[1]
    blocks = re.findall(r"```toml\n(.*?)```", complete, re.S)
    assert blocks, "scenarios/README.md has a complete ```toml example"
    return blocks[0]  # the story-step examples come later


def test_the_readme_example_loads_with_the_values_it_shows(tmp_path: Path) -> None:
    path = write(tmp_path, readme_example(), "my-scenario.toml")
    s = load_scenario(path)
    assert s == Scenario(
        name="my-scenario", path=path, description="one line for the reports",
        case_id="case-O-1001", order_id="O-1001", policy="deterministic",
        idempotency_keys=True, points=None,
        schedules=(CrashSchedule((KillPoint("t3.checkpoint_saved"),
                                  KillPoint("t6.gateway_accepted"))),),
        baseline=True, double=False, human_action="approve", approve_at=None,
        approve_delay_h=0.0, approve_twice=False, ticket="issued",
        gateway_faults=(FaultSpec("error", status=503), FaultSpec("drop_after_accept")),
        resumers=1, leases=False, lease_ttl_s=30.0, takeover_at=None, storage_fault="none",
        lock_at=None, lock_ms=300, expect_failing=frozenset(), expect_deliveries=1,
        expect_worker_error=None)


def test_the_readme_example_shows_the_defaults(tmp_path: Path) -> None:
    """"Every table and field is optional; the defaults are the values shown" — except the
    illustrations that are not defaults (a description, an extra schedule, a fault plan)."""
    shown = load_scenario(write(tmp_path, readme_example(), "my-scenario.toml"))
    empty = load_scenario(write(tmp_path, 'name = "my-scenario"\n', "bare.toml"))
    differ = {f.name for f in dataclasses.fields(Scenario)
              if getattr(shown, f.name) != getattr(empty, f.name)}
    assert differ == {"path", "description", "schedules", "gateway_faults"}
    assert empty.gateway_faults == () and empty.schedules == ()


@pytest.mark.parametrize(("table", "key", "companions"), [
    ("human", "approve_at", ""),
    ("concurrency", "takeover_at", "leases = true\n"),
    ("storage", "lock_at", 'fault = "lock"\n'),
    ("expect", "worker_error", ""),
])
def test_the_readme_commented_alternatives_are_valid(tmp_path: Path, table: str, key: str,
                                                     companions: str) -> None:
    """The example's commented-out lines (``# approve_at = "…"``) hold values that load."""
    found = re.search(rf'^# {key} = ("[^"]*")', readme_example(), re.M)
    assert found, f"the README example shows {key}"
    s = load_scenario(write(tmp_path, f"[{table}]\n{companions}{key} = {found[1]}\n",
                            "alt.toml"))
    attribute = {"worker_error": "expect_worker_error"}.get(key, key)
    value = getattr(s, attribute)
    assert str(value) == found[1].strip('"')


# --------------------------------------------------------------------------- shipped files


SHIPPED_STORIES: dict[str, dict[str, object]] = {
    "late-approval": {"approve_delay_h": 6.0},
    "approval-mid-resume": {"approve_at": KillPoint("t6.checkpoint_loaded")},
    "approved-before-repark": {"approve_at": KillPoint("t6.checkpoint_loaded"),
                               "baseline": False},
    "approve-twice": {"approve_twice": True, "expect_deliveries": 1},
    "rejection": {"human_action": "reject", "expect_deliveries": 0},
    "rejection-feedback": {"human_action": "reject", "expect_deliveries": 1,
                           "reject_feedback": "Please offer free express shipping on the "
                                              "next order."},
    "dead-letter": {"max_attempts": 2, "baseline": False, "expect_deliveries": 0},
    "order-note-rejected": {"order_note": True, "expect_deliveries": 0},
    "crash-at-load": {"max_attempts": 2, "baseline": False, "expect_deliveries": 0},
    "ticket-other-case-same-draft": {"ticket": "other_case_same_draft", "expect_deliveries": 0,
                                     "expect_worker_error": "ApprovalRefused"},
    "forged-ticket-in-parked-state": {"ticket": "forged_in_parked_state",
                                      "expect_deliveries": 0},
    "order-note": {"order_note": True, "points": None, "expect_deliveries": 1},
    "order-note-send": {"order_note": True, "expect_deliveries": 1},
    "lease-same-owner": {"same_owner": True, "leases": True,
                         "takeover_at": KillPoint("t6.request_leaving"),
                         "expect_worker_error": "FencedOff"},
    "reply-after-timeout": {"read_timeout_s": 0.5,
                            "gateway_faults": (FaultSpec("delay_after_accept", ms=1500),)},
    "forged-ticket": {"ticket": "forged", "expect_worker_error": "ApprovalRefused",
                      "expect_deliveries": 0},
    "forged-ticket-in-state": {"ticket": "forged_in_state",
                               "expect_worker_error": "ApprovalRefused"},
    "ticket-other-case": {"ticket": "other_case", "expect_worker_error": "ApprovalRefused"},
    "ticket-stale-draft": {"ticket": "stale_draft", "expect_worker_error": "ApprovalRefused"},
    "ticket-consumed": {"ticket": "consumed", "expect_worker_error": "ApprovalRefused"},
    "gateway-5xx": {"gateway_faults": (FaultSpec("error", status=503),
                                       FaultSpec("error", status=502))},
    "reply-lost-first-attempt": {"gateway_faults": (FaultSpec("drop_after_accept"),)},
    "reply-lost-retry": {"gateway_faults": (FaultSpec("error", status=503),
                                            FaultSpec("drop_after_accept"))},
    "two-resumers": {"resumers": 2, "leases": True, "expect_worker_error": "LeaseHeld"},
    "lease-takeover": {"leases": True, "resumers": 1, "lease_ttl_s": 30.0,
                       "takeover_at": KillPoint("t6.request_leaving"),
                       "expect_worker_error": "FencedOff"},
    "checkpoint-corrupt-json": {"storage_fault": "corrupt_json",
                                "expect_worker_error": "CheckpointCorrupt",
                                "expect_deliveries": 0},
    "checkpoint-truncated-json": {"storage_fault": "truncated_json",
                                  "expect_worker_error": "CheckpointCorrupt"},
    "checkpoint-invalid-utf8": {"storage_fault": "invalid_utf8",
                                "expect_worker_error": "CheckpointCorrupt"},
    "checkpoint-unknown-version": {"storage_fault": "unknown_version",
                                   "expect_worker_error": "UnsupportedSchemaVersion"},
    "v1-migration": {"storage_fault": "v1_checkpoint", "expect_worker_error": None},
    "overlapping-migrators": {"leases": False, "expect_worker_error": None},
    "migrators-together": {"leases": False, "expect_worker_error": None, "baseline": True},
    "eight-kills": {"max_attempts": 10, "expect_worker_error": None},
    "resume-from-earlier": {"baseline": True, "expect_worker_error": None},
    "note-ticket-other-case": {"order_note": True, "expect_worker_error": "ApprovalRefused",
                               "expect_deliveries": 0},
    "db-lock-before-send": {"storage_fault": "lock", "lock_at": KillPoint("t6.approval_granted"),
                            "lock_ms": 300},
    "db-lock-after-reply": {"storage_fault": "lock", "lock_at": KillPoint("t6.reply_received"),
                            "lock_ms": 300},
    "nondeterministic-policy": {"policy": "varying"},
    # the [[story]] files (their steps: tests/test_story_steps.py)
    "story-o1001": {"expect_deliveries": 1, "leases": False},
    "reject-twice-then-approve": {"expect_deliveries": 1, "human_action": "approve"},
    "resume-after-completion": {"leases": True, "expect_deliveries": 1},
    "takeover-steps": {"leases": True, "expect_worker_error": "FencedOff"},
    "lease-live-takeover": {"leases": True, "lease_ttl_s": 300.0,
                            "expect_worker_error": "LeaseHeld"},
    "slow-send": {"expect_deliveries": 1},
    "forged-then-approved": {"expect_worker_error": "ApprovalRefused", "expect_deliveries": 1},
    "rechecks-together": {"leases": True, "expect_worker_error": "LeaseHeld"},
    "corrupt-after-approval": {"expect_worker_error": "CheckpointCorrupt",
                               "expect_deliveries": 0},
    "o1001-power": {"crash_mode": CrashMode.POWER, "power_points": None},
    "power-after-approval": {"crash_mode": CrashMode.POWER,
                             "power_points": frozenset({"t6.send_key_persisted",
                                                        "t6.gateway_accepted",
                                                        "t7.completed_saved"})},
}


@pytest.mark.parametrize("name", sorted(SHIPPED_STORIES))
def test_shipped_file_sets_the_newer_fields_it_describes(name: str) -> None:
    s = load_scenario(ROOT / "scenarios" / f"{name}.toml")
    got = {key: getattr(s, key) for key in SHIPPED_STORIES[name]}
    assert got == SHIPPED_STORIES[name]


def test_every_shipped_file_is_described_above() -> None:
    assert {p.stem for p in SHIPPED} - set(SHIPPED_STORIES) <= {"o1001", "demo-keys-off",
                                                                 "o1001-double"}


def test_a_scenario_that_runs_nothing_is_refused(tmp_path: Path) -> None:
    """Found by a new user: ``points = []`` with ``baseline = false`` and no schedules ran
    no execution, reported UNKNOWN with no reason and moved ``latest`` to the empty run."""
    path = write(tmp_path, '[crash]\npoints = []\nbaseline = false\n')
    err = refused(path)
    assert_names(err, path, "crash.points", 3)
    assert "runs nothing" in str(err) and '"all"' in str(err)
    # each source of an execution alone is enough
    for crash in ('points = []\n', 'points = []\nbaseline = false\nschedules = ["t4.parked"]\n',
                  'points = ["t4.parked"]\nbaseline = false\n'):
        load_scenario(write(tmp_path, "[crash]\n" + crash, name="ok.toml"))


@pytest.mark.parametrize(("written", "read"), [("1e400", "inf"), ("-1e999", "-inf")])
def test_a_number_too_large_for_a_float_is_shown_as_written(tmp_path: Path, written: str,
                                                             read: str) -> None:
    """Found by a new user: ``delay_hours = 1e400`` (``inf`` to ``tomllib``) was refused as
    ``inf``, a value the file never shows."""
    path = write(tmp_path, f"\n[human]\ndelay_hours = {written}  # a year, roughly\n")
    err = refused(path)
    assert_names(err, path, "human.delay_hours", 4)
    assert f"'human.delay_hours': {written} (too large for a float: read as {read}): must be" \
        in str(err)
    # a file that writes inf itself is answered with its own word
    err = refused(write(tmp_path, "\n[human]\ndelay_hours = inf\n", name="inf.toml"))
    assert "'human.delay_hours': inf: must be a finite number" in str(err)


def test_a_path_that_is_no_toml_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """Found by a new user: ``run README.md`` was parsed as TOML and refused as a syntax
    error; ``docs/bad-input.md`` says scenario paths are ``*.toml`` files or folders."""
    notes = tmp_path / "README.md"
    notes.write_text("# notes\n\nname = 'x'\n")
    with pytest.raises(ScenarioError) as info:
        load_scenarios([notes])
    assert str(info.value) == f"{notes}: not a scenario file; allowed: a *.toml file or a " \
                              "folder of them"
    assert (info.value.path, info.value.field, info.value.line) == (str(notes), None, None)


@pytest.mark.parametrize("crash", [
    'mode = "power"\npower_points = []\n',
    'mode = "power"\npower_points = ["t4.parked"]\npoints = ["t3.checkpoint_saved"]\n',
    'mode = "power"\npower_points = ["t7.completed_saved"]\npoints = []\n'
    'schedules = ["t3.checkpoint_saved>t4.parked"]\n',
])
def test_a_power_mode_that_cuts_the_power_nowhere_is_refused(tmp_path: Path,
                                                              crash: str) -> None:
    """Found by a new user: such a scenario ran, passed with exit 0, and no execution was a
    power cut (as ``points = []`` with nothing to run is refused)."""
    path = write(tmp_path, "\n[crash]\n" + crash)
    err = refused(path)
    assert_names(err, path, "crash.power_points", 5)
    assert "power cut" in str(err) and "allowed: " in str(err)
    # one kill among the power points is enough; "all" points and double matrices learn theirs
    for ok in ('mode = "power"\npower_points = ["t4.parked"]\npoints = ["t4.parked"]\n',
               'mode = "power"\npower_points = ["t6.reply_received"]\n',
               'mode = "power"\npower_points = ["t6.reply_received"]\npoints = ["t4.parked"]\n'
               'double = true\n'):
        load_scenario(write(tmp_path, "\n[crash]\n" + ok, name="ok.toml"))
