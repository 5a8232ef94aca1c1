"""The story as data: today's tables expand into steps that tell the same story, a
``[[story]]`` file is validated as strictly as the tables (file, line, field, allowed
values; nothing runs), and the explicit steps of the shipped story files mean what the
tables meant (``harness.plan.story_plan``, ``harness.plan.story_parse``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from scenario_helpers import ROOT, SHIPPED, assert_names, refused

from harness.model import (
    ClockStep,
    HoldStep,
    HumanAction,
    HumanStep,
    KillPoint,
    ReleaseStep,
    StepKind,
    StorageFault,
    StorageStep,
    TicketKind,
    Wait,
    When,
    WorkerRole,
    WorkersStep,
)
from harness.plan.scenario import load_scenario
from harness.plan.scenario_toml import scenario_toml
from harness.plan.story_plan import SAME_OWNER, expand, story_of

SCEN = ROOT / "scenarios"
START = WorkersStep(WorkerRole.START, recover=WorkerRole.RECHECK)
RESUME = WorkersStep(WorkerRole.RESUME, recover=WorkerRole.RESUME)


def kinds(path: str) -> list[StepKind]:
    return [st.kind for st in story_of(load_scenario(SCEN / path))]


# --------------------------------------------------------------------------- shorthands


def test_the_chapter_story_expands_to_start_approve_resume() -> None:
    assert expand(load_scenario(SCEN / "o1001.toml")) == (START, HumanStep(), RESUME)


def test_the_explicit_story_file_is_exactly_what_the_tables_expand_to() -> None:
    explicit = load_scenario(SCEN / "story-o1001.toml")
    assert explicit.story == expand(load_scenario(SCEN / "o1001.toml"))
    assert story_of(explicit) == explicit.story


def test_a_takeover_expands_to_hold_clock_takeover_release_and_a_recovery() -> None:
    s = load_scenario(SCEN / "lease-takeover.toml")
    at = KillPoint("t6.request_leaving")
    assert expand(s)[2:] == (
        HoldStep(at), WorkersStep(WorkerRole.RESUME, wait=Wait.HELD), ClockStep(),
        WorkersStep(WorkerRole.TAKEOVER), ReleaseStep(at), ClockStep(when=When.KILLED),
        replace(RESUME, when=When.KILLED))
    assert load_scenario(SCEN / "takeover-steps.toml").story == expand(s)[:5] + (
        WorkersStep(WorkerRole.TAKEOVER), ReleaseStep(at))


def test_concurrent_resumers_expand_to_a_group_and_a_recovery_when_killed() -> None:
    steps = expand(load_scenario(SCEN / "two-resumers.toml"))
    assert steps[2:] == (WorkersStep(WorkerRole.RESUME, count=2, together=True),
                         ClockStep(when=When.KILLED), replace(RESUME, when=When.KILLED))


def test_mid_story_decisions_and_locks_are_armed_before_any_worker() -> None:
    mid = expand(load_scenario(SCEN / "approval-mid-resume.toml"))
    assert mid[0] == HumanStep(at=load_scenario(SCEN / "approval-mid-resume.toml").approve_at)
    assert [st.kind for st in mid] == [StepKind.HUMAN, StepKind.WORKERS, StepKind.WORKERS]
    lock = load_scenario(SCEN / "db-lock-before-send.toml")
    assert expand(lock)[0] == StorageStep(StorageFault.LOCK, at=lock.lock_at, ms=lock.lock_ms)


def test_storage_rejection_bad_tickets_and_migration_expand_in_story_order() -> None:
    assert kinds("checkpoint-corrupt-json.toml") == [
        StepKind.WORKERS, StepKind.STORAGE, StepKind.HUMAN, StepKind.WORKERS]
    assert expand(load_scenario(SCEN / "rejection.toml"))[1] == HumanStep(HumanAction.REJECT)
    assert expand(load_scenario(SCEN / "forged-ticket.toml"))[1] == HumanStep(
        ticket=TicketKind.FORGED)
    v1 = expand(load_scenario(SCEN / "v1-migration.toml"))
    assert v1[:2] == (StorageStep(StorageFault.V1_CHECKPOINT),
                      WorkersStep(WorkerRole.MIGRATE, recover=WorkerRole.MIGRATE))


def test_workers_of_any_loading_role_can_start_together() -> None:
    steps = load_scenario(SCEN / "rechecks-together.toml").story
    assert steps[1] == WorkersStep(WorkerRole.RECHECK, count=2, together=True)


def test_same_owner_gives_every_worker_one_identity() -> None:
    steps = expand(load_scenario(SCEN / "lease-same-owner.toml"))
    owners = {st.owner for st in steps if isinstance(st, WorkersStep)}
    assert owners == {SAME_OWNER}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_story_has_workers_and_round_trips_as_a_file(path: Path,
                                                                   tmp_path: Path) -> None:
    s = load_scenario(path)
    assert any(isinstance(st, WorkersStep) for st in story_of(s))
    written = tmp_path / path.name
    written.write_text(scenario_toml(s), encoding="utf-8")
    again = load_scenario(written)
    assert replace(again, path=None) == replace(s, path=None)


# --------------------------------------------------------------------------- validation

HEAD = 'name = "s"\n[concurrency]\nleases = true\n'
OK_START = '[[story]]\nstep = "workers"\nrole = "start"\n'
BAD_STORIES = [
    # (steps after the head, field, line, words in the message)
    ('[[story]]\nstep = "dance"\n', "story[0].step", 5,
     "'dance': not a step kind; allowed kinds: workers, human, hold, release, clock, storage"),
    # kind = names a kind in other tables: named as the field set, with its value
    ('[[story]]\nkind = "dance"\n', "story[0].kind", 5,
     "'dance': a [[story]] step names its kind with step = \"...\", not kind; and 'dance' is "
     "not a step kind either; allowed kinds: workers, human, hold, release, clock, storage"),
    ('[[story]]\nkind = "workers"\nrole = "start"\n', "story[0].kind", 5,
     "'workers': a [[story]] step names its kind with step = \"...\", not kind; allowed kinds: "
     "workers, human"),
    ('[[story]]\nrole = "start"\n', "story[0].step", 4,
     "required: every [[story]] step names its kind with step = \"...\"; allowed kinds: "
     "workers, human"),
    ('[[story]]\nstep = "workers"\n', "story[0].role", 4, "required"),
    ('[[story]]\nstep = "workers"\nrole = "janitor"\n', "story[0].role", 6,
     "allowed: start, recheck"),
    ('[[story]]\nstep = "workers"\nrole = "resume"\ncount = 9\n', "story[0].count", 7,
     "an integer from 1 to 4 workers"),
    # a wrong type names the range too, not only the type
    ('[[story]]\nstep = "workers"\nrole = "resume"\ncount = 1.5\n', "story[0].count", 7,
     "must be an integer from 1 to 4 workers, got a number 1.5"),
    ('[[story]]\nstep = "hold"\nat = "t2.checkpoint_committed"\nms = "5"\n',
     "story[0].ms", 7, "must be an integer from 0 to 600000 milliseconds, got a string"),
    ('[[story]]\nstep = "workers"\nrole = "resume"\ncount = true\n', "story[0].count", 7,
     "must be an integer"),
    ('[[story]]\nstep = "workers"\nrole = "resume"\ncolour = "red"\n', "story[0].colour", 7,
     "unknown field"),
    ('[[story]]\nstep = "workers"\nrole = "resume"\ntogether = true\n', "story[0].together",
     7, "count >= 2"),
    ('[[story]]\nstep = "workers"\nrole = "start"\ncount = 2\ntogether = true\n',
     "story[0].together", 8, "roles recheck, resume, takeover"),
    ('[[story]]\nstep = "workers"\nrole = "resume"\nowner = "a b"\n', "story[0].owner", 7,
     "letters, digits"),
    ('[[story]]\nstep = "workers"\nrole = "resume"\nwhen = "sometimes"\n', "story[0].when",
     7, "allowed: always, killed"),
    (OK_START + '[[story]]\nstep = "human"\naction = "maybe"\n', "story[1].action", 9,
     "allowed: approve, reject"),
    (OK_START + '[[story]]\nstep = "human"\ngate = "launch_rockets"\n', "story[1].gate", 9,
     "allowed: send_email"),
    (OK_START + '[[story]]\nstep = "human"\naction = "approve"\nfeedback = "no"\n',
     "story[1].feedback", 10, "only when action = \"reject\""),
    (OK_START + '[[story]]\nstep = "human"\ndelay_hours = nan\n', "story[1].delay_hours", 9,
     "finite"),
    (OK_START + '[[story]]\nstep = "human"\nat = "t7.completed_saved"\n', "story[1].at", 9,
     "only reached after an approval"),
    (OK_START + '[[story]]\nstep = "hold"\nat = "t6.nowhere"\n', "story[1].at", 9,
     "unknown label"),
    (OK_START + '[[story]]\nstep = "hold"\nat = "t6.request_leaving"\n', "story[1].at", 9,
     "never released"),
    (OK_START + '[[story]]\nstep = "release"\nat = "t6.request_leaving"\n', "story[1].at", 9,
     "no earlier hold"),
    (OK_START + '[[story]]\nstep = "workers"\nrole = "resume"\nwait = "held"\n',
     "story[1].wait", 10, "needs an earlier hold"),
    (OK_START + '[[story]]\nstep = "clock"\nadvance_s = -5\n', "story[1].advance_s", 9,
     "(0, "),
    (OK_START + '[[story]]\nstep = "clock"\nadvance_s = "soon"\n', "story[1].advance_s", 9,
     "\"lease\""),
    (OK_START + '[[story]]\nstep = "storage"\nfault = "lock"\n', "story[1].at", 7,
     "required"),
    (OK_START + '[[story]]\nstep = "storage"\nfault = "v1_checkpoint"\n', "story[1].fault", 9,
     "before any worker"),
    (OK_START + '[[story]]\nstep = "storage"\nfault = "corrupt_json"\nms = 5\n',
     "story[1].ms", 10, "only with fault = \"lock\""),
    ('[[story]]\nstep = "human"\n', "story", 4, "at least one step = \"workers\""),
    # a story that never starts the case has nothing to recover: refused, not judged
    ('[[story]]\nstep = "workers"\nrole = "resume"\n', "story[0].role", 6,
     "nothing to recover yet"),
    (OK_START.replace('"start"', '"takeover"'), "story[0].role", 6, "nothing to recover"),
]


@pytest.mark.parametrize(("steps", "field", "line", "words"), BAD_STORIES,
                         ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_STORIES)])
def test_a_bad_story_is_refused_naming_file_line_field_and_allowed(
        tmp_path: Path, steps: str, field: str, line: int, words: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(HEAD + steps, encoding="utf-8")
    err = refused(path)
    assert_names(err, path, field, line)
    assert words in str(err)
    assert [p.name for p in tmp_path.iterdir()] == ["s.toml"]  # nothing ran


@pytest.mark.parametrize("table", ['[human]\naction = "reject"\n',
                                   '[storage]\nfault = "corrupt_json"\n'])
def test_a_story_file_may_not_also_tell_it_with_tables(tmp_path: Path, table: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n' + table + OK_START, encoding="utf-8")
    err = refused(path)
    assert "[[story]] tells the story" in str(err)


def test_together_and_takeover_and_owner_need_leases(tmp_path: Path) -> None:
    for extra, field in (('count = 2\ntogether = true\n', "story[0].together"),
                         ('owner = "w"\n', "story[0].owner")):
        path = tmp_path / "s.toml"
        path.write_text('name = "s"\n[[story]]\nstep = "workers"\nrole = "resume"\n' + extra,
                        encoding="utf-8")
        err = refused(path)
        assert err.field == field and "leases = true" in str(err)


def test_story_must_be_an_array_of_tables(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\nstory = "start, approve, resume"\n', encoding="utf-8")
    err = refused(path)
    assert err.field == "story" and "[[story]]" in str(err)


def test_a_story_may_recover_a_v1_history_it_installs_first(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(HEAD + '[[story]]\nstep = "storage"\nfault = "v1_checkpoint"\n'
                    '[[story]]\nstep = "workers"\nrole = "resume"\n', encoding="utf-8")
    scenario = load_scenario(path)
    assert [type(s).__name__ for s in scenario.story] == ["StorageStep", "WorkersStep"]
