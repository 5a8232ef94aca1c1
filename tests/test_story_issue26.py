"""Stories the format could not tell before issue 26, told and run on the reference:
overlapping migrators (one held inside its migration, released while the next waits for its
lock; or started together), up to eight kills in one schedule, and the bounds of both
(``harness.story.engine``, ``harness.plan.story_parse``, ``harness.model.plan``).

Real workers, forked from one server for the module; no test sleeps: the order of events is
read from the harness's own trace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mutants import Mutant
from scenario_helpers import ROOT, assert_names, refused

from harness.launch.launcher import Launcher, make_launcher
from harness.model import CrashSchedule, KillPoint, ReleaseStep, WorkerRole
from harness.plan.scenario import load_scenario
from harness.run.execution import ExecutionPlan, ExecutionResult, execute
from shopops_contract.limits import MAX_DIRNAME, MAX_KILLS

SCEN = ROOT / "scenarios"
EIGHT = ("t1.get_customer>t1.draft_email>t3.checkpoint_saved>t4.parked>"
         "t6.checkpoint_loaded>t6.send_key_persisted>t6.gateway_accepted>t7.completed_saved")


@pytest.fixture(scope="module")
def launcher(request: pytest.FixtureRequest) -> Launcher:
    made = make_launcher("fork")
    request.addfinalizer(made.close)
    return made


def run(launcher: Launcher, name: str, workdir: Path, schedule: str = "no-kill"
        ) -> ExecutionResult:
    plan = ExecutionPlan(load_scenario(SCEN / name), CrashSchedule.parse(schedule))
    return execute(plan, workdir, launcher=launcher)


def explain(result: ExecutionResult) -> str:
    ev = result.evidence
    return "\n".join([f"{result.plan.id}: {result.verdict} {result.reasons}"]
                     + [f"  {e.seq} {e.kind} {e.label or ''} w{e.worker} {e.detail}"
                        for e in ev.events]
                     + [f"  worker {w.index} {w.role} rc={w.returncode} "
                        f"stderr={w.stderr_tail[-200:]!r}" for w in ev.workers])


def seq(result: ExecutionResult, kind: str, worker: int, label: str | None = None) -> int:
    """The trace seq of the first event of ``kind`` (at ``label``) of ``worker``."""
    return next(e.seq for e in result.evidence.events if e.kind == kind
                and e.worker == worker and (label is None or e.label == label))


def migrated_rows(workdir: Path, index: int) -> int:
    """What migrator ``index`` printed (``{"migrated_rows": N}``)."""
    return int(json.loads((workdir / f"worker-{index}.out").read_text())["migrated_rows"])


# --------------------------------------------------------------------------- migrators


def test_a_held_migrator_released_while_the_next_waits_migrates_once_and_passes(
        launcher: Launcher, tmp_path: Path) -> None:
    """The overlapping-migrators story: A held inside its migration (it holds the write
    lock), B started, A released when B reached ``ckpt.migration_started``. Before issue 26
    the engine queued the parked case's request at the end of A's step, before A
    committed: it read an unmigrated row, the story was cut short and
    ``parked_until_approval`` failed the reference ("parked for approval but never asked").
    The request is now made once a migrator has committed."""
    result = run(launcher, "overlapping-migrators.toml", tmp_path)
    assert result.verdict == "pass", explain(result)
    held = seq(result, "hold", 0, "ckpt.migration_before_commit")
    b_started = seq(result, "worker_start", 1)
    b_waiting = seq(result, "hit", 1, "ckpt.migration_started")
    released = seq(result, "release", 0)
    assert held < b_started < b_waiting < released < seq(result, "worker_exit", 1)
    assert (migrated_rows(tmp_path, 0), migrated_rows(tmp_path, 1)) == (3, 0)
    assert [r.gate for r in result.evidence.approval_requests] == ["send_email"]
    assert all(r.schema_version == 2 for r in result.evidence.checkpoints)


@pytest.mark.parametrize("schedule", ["no-kill", "ckpt.migration_before_commit"])
def test_migrators_started_together_overlap_and_pass(launcher: Launcher, tmp_path: Path,
                                                     schedule: str) -> None:
    result = run(launcher, "migrators-together.toml", tmp_path, schedule)
    assert result.verdict == "pass", explain(result)
    migrators = [w for w in result.evidence.workers if w.role == WorkerRole.MIGRATE]
    assert len(migrators) >= 2
    if schedule == "no-kill":  # the first held inside, released once the other got there
        (held,) = [e.worker for e in result.evidence.events if e.kind == "hold"]
        other = 1 - held
        released = seq(result, "release", held)
        assert seq(result, "hold", held) < released < seq(result, "worker_exit", other)
        assert seq(result, "hit", other, "ckpt.migration_started") < released
        assert sorted(migrated_rows(tmp_path, w.index) for w in migrators) == [0, 3]
    else:
        assert any(w.killed_by_harness for w in migrators[:2])


def test_a_release_on_a_point_is_a_step_field(tmp_path: Path) -> None:
    s = load_scenario(SCEN / "overlapping-migrators.toml")
    (release,) = [st for st in s.story if isinstance(st, ReleaseStep)]
    assert release == ReleaseStep(KillPoint("ckpt.migration_before_commit"),
                                  on=KillPoint("ckpt.migration_started", 2))


HEAD = 'name = "s"\n[[story]]\nstep = "storage"\nfault = "v1_checkpoint"\n'
HOLD = '[[story]]\nstep = "hold"\nat = "ckpt.migration_before_commit"\n'


@pytest.mark.parametrize(("steps", "field", "line", "words"), [
    (HOLD + '[[story]]\nstep = "workers"\nrole = "migrate"\nwait = "held"\n'
     '[[story]]\nstep = "release"\nat = "ckpt.migration_before_commit"\n'
     'on = "ckpt.migration_started#2"\n', "story[3].on", 15, "needs a later step"),
    (HOLD + '[[story]]\nstep = "workers"\nrole = "migrate"\nwait = "held"\n'
     '[[story]]\nstep = "release"\nat = "ckpt.migration_before_commit"\n'
     'on = "t6.nowhere"\n', "story[3].on", 15, "unknown label"),
    (HOLD + '[[story]]\nstep = "workers"\nrole = "migrate"\nwait = "held"\n'
     '[[story]]\nstep = "release"\nat = "ckpt.migration_before_commit"\n'
     'on = "t7.completed_saved"\n[[story]]\nstep = "workers"\nrole = "resume"\n',
     "story[3].on", 15, "only reached after an approval"),
    ('[[story]]\nstep = "workers"\nrole = "start"\ncount = 2\ntogether = true\n',
     "story[1].together", 9, "roles recheck, resume, takeover, migrate"),
])
def test_a_bad_release_or_group_is_refused_naming_the_field(
        tmp_path: Path, steps: str, field: str, line: int, words: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(HEAD + steps, encoding="utf-8")
    err = refused(path)
    assert_names(err, path, field, line)
    assert words in str(err)


def test_migrators_together_need_no_leases(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(HEAD + '[[story]]\nstep = "workers"\nrole = "migrate"\ncount = 2\n'
                    'together = true\n', encoding="utf-8")
    assert load_scenario(path).story[1].together


# --------------------------------------------------------------------------- kills


def test_eight_kills_in_one_schedule_pass_on_the_reference(launcher: Launcher,
                                                           tmp_path: Path) -> None:
    (schedule,) = load_scenario(SCEN / "eight-kills.toml").schedules
    assert str(schedule) == EIGHT and len(schedule.kills) == MAX_KILLS == 8
    result = run(launcher, "eight-kills.toml", tmp_path, EIGHT)
    assert result.verdict == "pass", explain(result)
    assert len(result.evidence.kills) == 8 and not result.evidence.unreached
    assert len(result.evidence.gateway.deliveries) == 1


def test_more_than_eight_kills_are_refused_naming_the_bound(tmp_path: Path) -> None:
    nine = ">".join(["t6.request_leaving"] * 9)
    with pytest.raises(ValueError, match="9 kills; at most 8"):
        CrashSchedule.parse(nine)
    path = tmp_path / "s.toml"
    path.write_text(f'name = "s"\n[crash]\nschedules = ["{nine}"]\n', encoding="utf-8")
    err = refused(path)
    assert_names(err, path, "crash.schedules", 3)
    assert "at most 8" in str(err)


def test_a_long_schedule_gets_a_bounded_distinct_folder_name() -> None:
    s = load_scenario(SCEN / "o1001.toml")
    longest = ">".join(["ckpt.migration_before_commit#1000"] * 8)
    other = ">".join(["ckpt.migration_before_commit#1000"] * 7 + ["ckpt.before_commit#1000"])
    names = [ExecutionPlan(s, CrashSchedule.parse(t)).dirname for t in (longest, other)]
    assert all(len(n) <= MAX_DIRNAME for n in names) and names[0] != names[1]
    assert ExecutionPlan(s, CrashSchedule.parse("t4.parked")).dirname == "o1001--t4.parked"


# --------------------------------------------------------------------------- time travel

#: A loop that honours ``--from-seq`` naively: it loads the chosen row and goes on from it,
#: behind the progress recorded after it (what a LangGraph fork from a past checkpoint does).
NAIVE_TIME_TRAVEL = Mutant(
    "naive-time-travel",
    (("cli.py", "            _chosen_checkpoint(store, args.case, args.run_id, args.from_seq)\n",
      "            _chosen_checkpoint(store, args.case, args.run_id, args.from_seq)\n"
      "            _row = next(r for r in store.history(args.case, args.run_id)\n"
      "                        if r.seq == args.from_seq)\n"
      "            store.find = store.load = lambda *a, _s=_row.state(): _s\n"),),
    breaks=(), shown_by="resume-from-earlier[t6.send_key_persisted]")


@pytest.mark.parametrize("schedule", ["no-kill", "t6.send_key_persisted",
                                      "t6.gateway_accepted"])
def test_a_resume_from_the_parked_checkpoint_redoes_nothing(launcher: Launcher, tmp_path: Path,
                                                            schedule: str) -> None:
    result = run(launcher, "resume-from-earlier.toml", tmp_path, schedule)
    assert result.verdict == "pass", explain(result)
    ev = result.evidence
    parked = max(w.seq for w in ev.loop_writes if w.phase == "awaiting_approval")
    (travel,) = [e for e in ev.events if e.kind == "worker_start" and "--from-seq" in e.detail]
    assert travel.detail.endswith(f"--from-seq {parked}")
    assert len(ev.gateway.deliveries) == 1
    out = json.loads((tmp_path / f"worker-{travel.worker}.out").read_text())
    assert (out["from_seq"], out["phase"]) == (parked, "completed")


def test_a_loop_that_goes_back_to_the_chosen_checkpoint_fails(tmp_path: Path) -> None:
    """Killed once its send key was committed, the case is resumed from the parked row: the
    mutant goes back to it and writes ``approved`` after ``sending``, behind the progress
    recorded after the chosen row: ``phase_path`` names it (``fail``, not ``unknown``).
    (After a completed case it would only park again and write nothing: harmless.)"""
    from harness.launch.fork import ForkLauncher
    from harness.model import Sut

    sut = Sut(path=NAIVE_TIME_TRAVEL.build(tmp_path / "sut"), trusted=True)
    plan = ExecutionPlan(load_scenario(SCEN / "resume-from-earlier.toml"),
                         CrashSchedule.parse("t6.send_key_persisted"), sut)
    assert sut.path is not None
    with ForkLauncher(code_path=str(sut.path.resolve()), fallback=None) as forked:
        result = execute(plan, tmp_path / "exe", launcher=forked)
    assert result.verdict == "fail", explain(result)
    failed = {c.check_id for c in result.checks if c.status == "fail"}
    assert "phase_path" in failed, explain(result)
    assert any("sending -> approved" in r for r in result.reasons)


@pytest.mark.parametrize(("fields", "field", "words"), [
    ('from_seq = 0\n', "from_seq", "an integer from 1 to 10000"),
    ('from_phase = "napping"\n', "from_phase", "allowed: intake, drafting"),
    ('from_seq = 3\nfrom_phase = "completed"\n', "from_seq", "not both"),
])
def test_a_bad_chosen_checkpoint_is_refused(tmp_path: Path, fields: str, field: str,
                                            words: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[[story]]\nstep = "workers"\nrole = "start"\n'
                    '[[story]]\nstep = "workers"\nrole = "resume"\n' + fields,
                    encoding="utf-8")
    err = refused(path)
    assert err.field == f"story[1].{field}" and words in str(err)


def test_from_seq_is_refused_on_a_start(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\n[[story]]\nstep = "workers"\nrole = "start"\nfrom_seq = 2\n',
                    encoding="utf-8")
    assert "a resume from a chosen checkpoint" in str(refused(path))


def test_the_reference_refuses_a_checkpoint_it_does_not_have(tmp_path: Path) -> None:
    """``shopops resume --from-seq N`` on a case without row N: a typed refusal, exit 1."""
    import subprocess
    import sys

    db = tmp_path / "c.db"
    from harness.story.storage_faults import install_v1_fixture

    install_v1_fixture(db)
    done = subprocess.run([sys.executable, "-m", "shopops", "migrate", str(db)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    refused_run = subprocess.run(
        [sys.executable, "-m", "shopops", "resume", "--db", str(db), "--approvals",
         str(tmp_path / "a.db"), "--from-seq", "99"], capture_output=True, text=True,
        check=False, cwd=tmp_path)
    assert refused_run.returncode == 1
    assert "CheckpointNotFound" in refused_run.stderr and "seq=99" in refused_run.stderr


# --------------------------------------------------------------------------- note tickets

#: A loop that takes the note's ticket without asking the queue about it.
NOTE_UNVERIFIED = Mutant(
    "note-ticket-unverified",
    (("grant.py", "    queue.verify(ticket_id, state.case_id, note_digest(state.order_id, "
      "state.note_text),\n                 gate=NOTE_GATE)\n", "    pass\n"),),
    breaks=(), shown_by="note-ticket-other-case[no-kill]")


def note_story(tmp_path: Path, kind: str) -> Path:
    """``note-ticket-other-case.toml`` with another bad ticket on the note's gate."""
    text = (SCEN / "note-ticket-other-case.toml").read_text(encoding="utf-8")
    path = tmp_path / "note.toml"
    path.write_text(text.replace('ticket = "other_case"', f'ticket = "{kind}"'),
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["forged", "other_case", "stale_draft", "consumed"])
def test_a_bad_note_ticket_is_refused_and_nothing_sent(launcher: Launcher, tmp_path: Path,
                                                       kind: str) -> None:
    plan = ExecutionPlan(load_scenario(note_story(tmp_path, kind)), CrashSchedule())
    result = execute(plan, tmp_path / "exe", launcher=launcher)
    assert result.verdict == "pass", explain(result)
    (offer,) = [e for e in result.evidence.events if "ticket offered" in e.detail]
    assert offer.detail.startswith(f"{kind} ticket offered") and "add_order_note" in offer.detail
    last = result.evidence.workers[-1]
    assert last.returncode == 1 and "ApprovalRefused" in last.stderr_tail
    assert not result.evidence.gateway.deliveries


def test_a_loop_that_takes_a_bad_note_ticket_fails(tmp_path: Path) -> None:
    """Before issue 26 no story could offer a bad ticket on the note's gate; the mutant that
    never verifies the note's ticket sends the note on another case's approval: ``fail``."""
    from harness.launch.fork import ForkLauncher
    from harness.model import Sut

    sut = Sut(path=NOTE_UNVERIFIED.build(tmp_path / "sut"), trusted=True)
    plan = ExecutionPlan(load_scenario(SCEN / "note-ticket-other-case.toml"), CrashSchedule(),
                         sut)
    assert sut.path is not None
    with ForkLauncher(code_path=str(sut.path.resolve()), fallback=None) as forked:
        result = execute(plan, tmp_path / "exe", launcher=forked)
    assert result.verdict == "fail", explain(result)
    failed = {c.check_id for c in result.checks if c.status == "fail"}
    assert "ticket_server_issued" in failed, explain(result)  # the note's ticket is named


def test_a_ticket_forged_into_the_state_is_the_emails_only(tmp_path: Path) -> None:
    path = note_story(tmp_path, "forged_in_state")
    err = refused(path)
    assert err.field == "story[3].ticket" and "is the email's" in str(err)


# --------------------------------------------------------------------------- LangGraph

LANGGRAPH = ROOT / "examples" / "langgraph_o1001"
#: The example's validation replaced by LangGraph's time travel as its documentation shows
#: it: invoke with the past checkpoint's config (its ``checkpoint_id``), forking the thread.
NAIVE_FORK = ('''        if getattr(ctx, "from_seq", None) is not None:
            _chosen_checkpoint(app, config, ctx.from_seq)
''', '''        if getattr(ctx, "from_seq", None) is not None:  # fork from the chosen checkpoint
            past = list(reversed(list(app.get_state_history(config))))[ctx.from_seq - 1]
            app.invoke(None, past.config, durability=durability)
            return
''')


def langgraph_story(folder: Path | None = None) -> ExecutionPlan:
    from dataclasses import replace

    s = load_scenario(SCEN / "targets" / "langgraph-from-earlier.toml")
    assert s.target is not None
    if folder is not None:
        s = replace(s, target=replace(s.target, folder=folder))
    return ExecutionPlan(s, CrashSchedule())


@pytest.mark.processes
def test_langgraph_resumes_from_a_checkpoint_id_and_redoes_nothing(launcher: Launcher,
                                                                   tmp_path: Path) -> None:
    result = execute(langgraph_story(), tmp_path, launcher=launcher)
    assert result.verdict == "pass", explain(result)
    context = json.loads((tmp_path / "worker-2.context.json").read_text())
    assert context["from_seq"] == 1
    assert len(result.evidence.gateway.deliveries) == 1


@pytest.mark.processes
def test_langgraph_forking_from_the_chosen_checkpoint_fails(launcher: Launcher,
                                                            tmp_path: Path) -> None:
    """A resume that replays from the chosen checkpoint (LangGraph's fork) starts the case
    over after it completed: ``fail`` on ``phase_path`` (the history goes back to intake)."""
    folder = tmp_path / "naive"
    folder.mkdir()
    for name in ("o1001_graph.py", "target.toml"):
        text = (LANGGRAPH / name).read_text(encoding="utf-8")
        if name.endswith(".py"):
            assert text.count(NAIVE_FORK[0]) == 1
            text = text.replace(*NAIVE_FORK)
        (folder / name).write_text(text, encoding="utf-8")
    result = execute(langgraph_story(folder), tmp_path / "exe", launcher=launcher)
    assert result.verdict == "fail", explain(result)
    failed = {c.check_id for c in result.checks if c.status == "fail"}
    assert "phase_path" in failed, explain(result)


def test_a_target_story_may_only_start_resume_and_approve(tmp_path: Path) -> None:
    from harness.targets.spec import target_limits

    assert target_limits(load_scenario(SCEN / "targets" / "langgraph-from-earlier.toml")) == []
    text = (SCEN / "targets" / "langgraph-from-earlier.toml").read_text(encoding="utf-8")
    path = tmp_path / "t.toml"
    path.write_text(text.replace("from_seq = 1", 'from_phase = "awaiting_approval"'),
                    encoding="utf-8")
    err = refused(path)
    assert err.field == "story" and "not supported for target kind" in str(err)


@pytest.mark.processes
def test_langgraph_fanout_branches_join_in_one_superstep_and_pass(launcher: Launcher,
                                                                  tmp_path: Path) -> None:
    """``options.intake = "fanout"``, killed once one branch has ended: the story passes,
    and the thread's steps show the join — both branches wrote ``step`` 1 in one superstep
    (kept by the max reducer), so the completed checkpoint is at step 6, where the serial
    graph's seven nodes reach 7. (Not the order of the branches' hits: the thread pool
    may run one after the other on a busy machine.)"""
    plan = ExecutionPlan(load_scenario(SCEN / "targets" / "langgraph-fanout.toml"),
                         CrashSchedule.parse("b.langgraph.node_end#2"))
    result = execute(plan, tmp_path, launcher=launcher)
    assert result.verdict == "pass", explain(result)
    writes = result.evidence.loop_writes
    assert writes[-1].phase == "completed" and writes[-1].step == 6, writes
    assert len(result.evidence.gateway.deliveries) == 1
