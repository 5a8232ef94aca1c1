"""One execution: a scenario under one crash schedule, in real processes, then judged.

``execute`` is the pipeline of ``docs/design.md`` ("The pipeline"): **drive** (the story
engine, ``harness.story.engine.drive``, plays the story: the failpoint channel and the harness's
own mock gateway report every hit to the ``KillController``, which kills at the schedule's
points) → **collect** (``collect``: the story's record, the harness's trace and the files,
read by the harness) → **check** (``harness.judge.checks.registry.run_checks``) → **judge**
(``harness.judge.verdict``).

An untrusted implementation's execution (a package, or a target named by ``--sut DIR
--target``) is sealed (``harness.sandbox.users``) when the harness runs as root: its
workers (and a target's ``history`` read) run as a uid of their own in a sandbox folder
that holds only the checkpoint database (a target's own state); its failpoint channel and
approval service listen on socket files only that uid can reach; the gateway log, the
approval records (served to the workers by the harness's approval service,
``harness.services.approvals``) and the worker output live in the execution folder (root's,
mode 0700); every process of the uid is killed before the evidence is read; the checkpoint
database is then copied into the execution folder and the sandbox removed, with every file
of the uid in the temporary folders (``harness.sandbox.users.remove_temp_files``).
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import replace
from pathlib import Path

from harness.judge.assess import assess
from harness.judge.evidence import (
    EventLog,
    committed_hit,
    file_id,
    not_a_file,
    read_approvals,
    read_checkpoints,
    read_gateway,
)
from harness.judge.observers import store
from harness.judge.observers.approvals import records_of
from harness.judge.observers.store import migrations
from harness.launch.launcher import Launcher
from harness.launch.sealed import SealedLauncher, sealed_target_argv, worker_env
from harness.launch.spawn import SpawnLauncher
from harness.model import (
    DEFAULT_GATE,
    NOTE_GATE,
    ApprovalRecord,
    EventKind,
    Evidence,
    EvidenceSource,
    ExecutionPlan,
    ExecutionResult,
    Gap,
    GatewayDialect,
    GatewayLog,
    History,
    HistorySource,
    KillPoint,
    RequestRecord,
    StoryRecord,
    Sut,
    TicketRecord,
    Verdict,
)
from harness.run.equivalence import applies
from harness.sandbox.code_copy import CopyRefused, copy_tree
from harness.sandbox.scratch import discard, in_scratch, move_home
from harness.sandbox.users import (
    Sandbox,
    available,
    install_code,
    install_fixtures,
    install_target,
)
from harness.services.approvals import ApprovalService
from harness.services.channel import FailpointChannel
from harness.services.gateway import MockGateway
from harness.story.controller import KillController
from harness.story.crash_state import database_digest
from harness.story.engine import drive
from harness.targets.drive import TargetSeal
from shopops.records import DEFAULT_FIXTURES
from shopops_contract import labels

_log = logging.getLogger(__name__)

__all__ = ["ExecutionPlan", "ExecutionResult", "collect", "execute"]


def execute(plan: ExecutionPlan, workdir: Path, *, launcher: Launcher | None = None,
            worker_timeout_s: float = 30.0, keep_databases: bool = True) -> ExecutionResult:
    """Run one execution for ``workdir`` (its files are the evidence; the folder is created
    when its files go there, ``keep_databases``) and judge it.

    Args:
        plan: the scenario and crash schedule.
        workdir: a fresh folder for the execution's databases and worker output.
        launcher: how workers start (default: a fresh interpreter each).
        worker_timeout_s: seconds each worker may run before the harness kills it (the
            story is then cut short).
        keep_databases: with ``False``, a passing execution keeps no files: its folder
            in the scratch area is removed, and ``workdir`` too when this call made it
            (``scratch.discard``: a folder that held files first is left as it was); its
            evidence's ``workdir`` is then ``""`` (``run`` without ``--keep-all``; its
            workers' output tails are in its evidence). Any other verdict keeps every
            file.

    Returns:
        ``ExecutionResult``. Never leaves a process running: every worker is reaped before
        this returns or raises.
    """
    started = time.monotonic()
    final = workdir.resolve()
    made = not os.path.lexists(final)  # ours to remove if nobody keeps its files
    workdir = in_scratch(final)  # final is made when files go there, or now without scratch
    events = EventLog()
    keep = True  # the databases go home unless a passing verdict says otherwise
    target = plan.scenario.target
    sealed_target = target is not None and target.untrusted
    sandbox = Sandbox() if (plan.sut.untrusted or sealed_target) and available() else None
    seal: TargetSeal | None = None
    try:
        if sandbox is not None:
            final.mkdir(parents=True, exist_ok=True)
            os.chmod(workdir, 0o700)
            os.chmod(final, 0o700)
            fixtures = str(install_fixtures(DEFAULT_FIXTURES))

            def tamper(line: str) -> None:
                events.add(EventKind.TAMPERING, None, None, None, line)

            server = launcher if getattr(launcher, "sealed", False) else None
            if target is not None:  # a target: through the boot, forked when it can be
                seal = _target_seal(sandbox, install_target(target.folder), fixtures,
                                    plan.sut)
                launcher = SealedLauncher(sandbox, str(seal.folder), tamper, fixtures,
                                          server, limits=_limits(plan.sut))  # type: ignore[arg-type]
            else:
                assert plan.sut.path is not None
                launcher = SealedLauncher(
                    sandbox, str(install_code(plan.sut.path, plan.sut.module)), tamper,
                    fixtures, server)  # type: ignore[arg-type]
        record, controller, gateway, approvals = _drive(
            plan, workdir, launcher or SpawnLauncher(), events, worker_timeout_s, sandbox, seal)
        if sandbox is not None:
            for pid in sandbox.kill_all():
                events.add(EventKind.LEFTOVER, None, pid, None,
                           "a process of the execution's uid was alive after its workers "
                           "(killed)")
            for line in sandbox.sanitize():
                events.add(EventKind.TAMPERING, None, None, None, f"left in the sandbox: "
                           f"{line}")
        evidence = collect(plan, record, controller, events, final, gateway.log(),
                           approvals)
        checks, verdict, reasons = assess(evidence, plan)
        keep = keep_databases or verdict != Verdict.PASS
        if keep:  # the records held in memory, for the reports and replays (not evidence)
            _save(gateway.save, approvals.save)
        if sandbox is not None and keep:
            _keep_databases(sandbox.path, final)  # straight home: no second copy
            if seal is not None:
                _keep_target_state(sandbox.path / "target", final / "target")
    finally:
        if sandbox is not None:
            sandbox.close()
        if keep:
            move_home(workdir, final)
        elif discard(workdir, final, made=made):  # a passing execution nobody keeps
            evidence = replace(evidence, workdir="")
    return ExecutionResult(plan, evidence, checks, verdict, reasons,
                           round(time.monotonic() - started, 4))


def _limits(sut: Sut) -> tuple[int, int, int, int]:
    """A sealed worker's limits (memory MiB, file MiB, CPU s, processes), from ``sut``
    (the defaults of ``harness.model.plan.Sut`` for a target)."""
    return (sut.memory_mib, sut.file_size_mib, sut.cpu_s, sut.nproc)


def _target_seal(sandbox: Sandbox, folder: Path, fixtures: str, sut: Sut) -> TargetSeal:
    """How a sealed execution runs its target (``harness.targets.drive.TargetSeal``): from
    ``folder`` (its root-owned copy), each worker and the ``history`` read as the sandbox's
    uid under ``sut``'s limits, with the sealed environment, its context files in the
    sandbox's ``shared`` folder."""

    def argv(given: list[str]) -> list[str]:
        sandbox.started()  # the history worker: the next sweep must look again
        return sealed_target_argv(given, sandbox.uid, _limits(sut), str(folder))

    return TargetSeal(folder=folder, fixtures=fixtures, share=sandbox.share, argv=argv,
                      env=lambda env: worker_env(env, sandbox, fixtures),
                      sweep=sandbox.kill_all)


def _drive(plan: ExecutionPlan, workdir: Path, launcher: Launcher, events: EventLog,
           worker_timeout_s: float, sandbox: Sandbox | None, seal: TargetSeal | None = None
           ) -> tuple[StoryRecord, KillController, MockGateway, ApprovalService]:
    """Play the story with the channel, the gateway and the approval service up; all are
    down on return. A sealed execution's channel and approval service listen on socket
    files in the sandbox's ``shared`` folder, which only its uid can enter. Returns the
    story's record, the kill controller, and the gateway and the approval service, both
    stopped, whose records are in memory (``memory=True``: the evidence is read from them,
    their ``save`` writes ``gateway.db`` and ``approvals.db`` for the reports)."""
    uid = sandbox.uid if sandbox is not None else None
    folder = sandbox.shared if sandbox is not None else None
    controller = KillController(plan.schedule.kills, events, allowed_uid=uid)
    gateway = MockGateway(workdir / "gateway.db", allowed_uid=uid, memory=True,
                          candidates=lambda: list(controller.by_pid),
                          smtp=plan.scenario.gateway_dialect is GatewayDialect.SMTP)
    # the worker pid the gateway logged for each request (the kernel's answer), by
    # (ledger, seq): on_request runs before on_accepted for the same request
    senders: dict[tuple[str, int], int | None] = {}

    def on_request(r: RequestRecord, ledger: str = "email") -> None:
        senders[(ledger, r.seq)] = r.worker_pid
        note = ledger == "note"
        events.add(EventKind.REQUEST, None, r.worker_pid, None,
                   ("order note: " if note else "") + f"status {r.status}"
                   + (" duplicate" if r.duplicate else ""),
                   ref=f"note:{r.seq}" if note else str(r.seq))  # "note:<seq>": its ledger's

    gateway.on_request = on_request
    gateway.on_note_request = lambda r: on_request(r, "note")
    gateway.on_accepted = lambda delivery: controller.on_gateway_accepted(
        delivery, senders.get(("email", delivery.request_seq)))
    gateway.on_note_accepted = lambda note: controller.on_gateway_accepted(
        note, senders.get(("note", note.request_seq)), labels.NOTE_ACCEPTED)
    gateway.set_faults(plan.scenario.gateway_faults)
    gateway.fault_case = plan.scenario.case_id  # only the loop's own sends meet the faults
    gateway.case_id = plan.scenario.case_id  # a Resend or SMTP message is the execution's
    gateway.faults_for = controller.stands_for_a_worker
    def tampered(line: str) -> None:
        events.add(EventKind.TAMPERING, None, None, None, line)

    def consumed(pid: int, ticket_id: str, key: str) -> None:
        events.add(EventKind.CONSUMED, None, pid, None, f"key {key}", ref=ticket_id)

    with FailpointChannel(controller.on_hit, tampered, folder) as channel, gateway, \
            ApprovalService(workdir / "approvals.db", allowed_uid=uid, on_tamper=tampered,
                            folder=folder, memory=True, on_consumed=consumed) as approvals:
        record = drive(plan, workdir, launcher, controller, events,
                       gateway_url=gateway.url, email_env=gateway.worker_env(),
                       channel=channel.path,
                       worker_timeout_s=worker_timeout_s,
                       data_dir=sandbox.path if sandbox is not None else None,
                       approvals=approvals, seal=seal,
                       pending_faults=gateway.pending_faults,
                       fingerprint=applies(plan) and len(plan.schedule.kills) == 1,
                       held_databases={
                           "gateway.db": lambda now_s: gateway.read_ledger(
                               lambda conn: database_digest(conn, now_s)),
                           "approvals.db": lambda now_s: approvals.read(
                               lambda conn: database_digest(conn, now_s))})
    return record, controller, gateway, approvals


def _save(*saves: Callable[[], None]) -> None:
    """Write the databases the harness held in memory, for the reports: a failure (what a
    worker left at the name could not be removed, the folder is full) loses the copy, not
    the execution, whose verdict was already taken from the records in memory."""
    for save in saves:
        try:
            save()
        except (OSError, sqlite3.Error) as exc:
            _log.warning("a database the harness held in memory was not saved: %s", exc)


def _keep_databases(sandbox: Path, workdir: Path) -> None:
    """Copy the sandbox's SQLite databases (plain files only) into the execution folder
    with SQLite's online backup (WAL content included), for the reports and replays."""
    for name in ("checkpoints.db",):  # the approval records are the harness's already
        src = sandbox / name
        if not src.is_file() or src.is_symlink():
            continue
        try:
            with closing(sqlite3.connect(src.as_uri() + "?mode=ro", uri=True)) as source, \
                    closing(sqlite3.connect(workdir / name)) as target:
                source.backup(target)
        except sqlite3.Error:
            continue  # an unreadable database: its evidence error is already recorded


def _keep_target_state(state: Path, home: Path) -> None:
    """Copy a sealed target's own state folder (its SQLite files) into the execution
    folder, as an unsealed target leaves it there, for the reports and replays: with
    ``harness.sandbox.code_copy.copy_tree`` (root copying the uid's files: no symlink
    followed, no FIFO opened, bounded). Nothing when it holds anything else."""
    try:
        copy_tree(state, home)
    except (CopyRefused, OSError):
        shutil.rmtree(home, ignore_errors=True)  # its evidence was read already


def collect(plan: ExecutionPlan, record: StoryRecord, controller: KillController,
            events: EventLog, home: Path | None = None,
            held: GatewayLog | None = None,
            approvals: ApprovalService | None = None) -> Evidence:
    """The evidence of one execution: the story's record, the harness's trace, and the
    checkpoint history, approval records and gateway log read back from the files (read
    only; a file that cannot be read becomes a ``Gap``). ``home``: where the execution's
    folder will be once moved out of the scratch area (``harness.sandbox.scratch``); the evidence
    names that folder, and a gap's reason and the story's errors name its files there
    (a worker's own output is kept as it printed it). ``held``: the gateway's log as the
    gateway held it in memory, whose ledger no file holds while the execution runs; then
    the evidence is that log, and anything at the ledger's path is tampering
    (``_planted``). ``None``: the gateway log is read from ``record.gateway_db``.
    ``approvals``: the approval service whose records are in memory (``_held_approvals``);
    ``None``: they are read from ``record.approvals_db``."""
    s = plan.scenario
    home = home or record.workdir

    def at_home(text: str) -> str:  # the harness's own text names the files where they stay
        return text.replace(str(record.workdir), str(home))

    target = s.target
    if target is None:  # the contract's checkpoint store, read by the harness
        identity = file_id(record.checkpoints_db)  # the file read
        checkpoints, g1, unfit = read_checkpoints(record.checkpoints_db, s.case_id)
        if g1 is None and unfit is None and not os.path.lexists(record.checkpoints_db):
            g1 = _gone(record.checkpoints_db, events)
        if g1 is not None or unfit is not None:
            _spoiled(record, events, at_home)
        history = (History(HistorySource.CHECKPOINT_STORE, problem=at_home(unfit))
                   if unfit is not None else store.history_of(checkpoints))
        g4 = None
    else:  # a target keeps its own storage, read through its API by the story
        identity, checkpoints, g1 = None, (), None
        history = record.target_history or History(HistorySource.TARGET_HISTORY,
                                                   observes=frozenset())
        g4 = (Gap(EvidenceSource.TARGET, record.target_error)
              if record.target_error is not None else None)
    requests, tickets, g2 = (
        read_approvals(record.approvals_db, s.case_id) if approvals is None
        else _held_approvals(approvals, record.approvals_db, s.case_id, events, at_home))
    if held is None:
        gateway_log, g3 = read_gateway(record.gateway_db)
    else:  # the gateway's ledger, held in memory
        gateway_log, g3 = held, None
        _planted(record.gateway_db, "gateway log", events, at_home)
    return Evidence(
        execution_id=plan.id, case_id=s.case_id, events=events.snapshot(),
        workers=record.workers, checkpoints=checkpoints, approval_requests=requests,
        tickets=tickets, gateway=gateway_log, approval_event=record.approval_event,
        checkpoint_seq_at_approval=record.checkpoint_seq_at_approval,
        history_at_approval=record.history_at_approval,  # none for a target
        power_cuts=record.power_cuts,
        checkpoints_file=identity,
        unreached=tuple(controller.pending) + _unreached_points(controller),
        errors=tuple(at_home(e) for e in record.errors),
        gaps=tuple(Gap(g.source, at_home(g.reason)) for g in (g1, g2, g3, g4)
                   if g is not None),
        workdir=str(home), expected_deliveries=s.expect_deliveries,
        injected=record.injected, v1_rows=record.v1_rows,
        # only from a file read_checkpoints inspected and read: not from one it refused
        migrations=(migrations(record.checkpoints_db)
                    if target is None and g1 is None and not history.problem else ()),
        max_attempts=s.max_attempts,
        gates=(DEFAULT_GATE, NOTE_GATE) if s.order_note else (DEFAULT_GATE,),
        target="reference" if target is None else target.name,
        history=history, crash_state=record.crash_state,
        history_reads=record.history_reads,  # a target's, after each worker
    )


def _planted(db: Path, what: str, events: EventLog, at_home: Callable[[str], str]) -> None:
    """Record as tampering anything at ``db``, where the harness writes ``what`` (its
    gateway log, its approval records, held in memory while the execution runs:
    ``memory=True``) only after the verdict: a worker put it there — an unsealed one shares
    the folder (found by an attack: a target that sent twice with two keys and deleted the
    second row of the then on-disk gateway log passed ``run``). What the harness held is
    judged either way, and its ``save`` replaces what is at ``db`` when the files are
    kept."""
    if os.path.lexists(db):
        events.add(EventKind.TAMPERING, None, None, None,
                   at_home(f"{db} was created by a worker: the harness writes its {what} "
                           "there only after the verdict; what it held in memory is judged"))


def _held_approvals(service: ApprovalService, db: Path, case_id: str, events: EventLog,
                    at_home: Callable[[str], str]
                    ) -> tuple[tuple[ApprovalRecord, ...], tuple[TicketRecord, ...],
                               Gap | None]:
    """The case's approval records as the harness's approval service holds them in memory
    (``ApprovalService(memory=True)``), and anything a worker put at ``db`` (``_planted``)."""
    _planted(db, "approval records", events, at_home)
    try:
        requests, tickets = service.read(lambda conn: records_of(conn, case_id))
    except sqlite3.Error as exc:
        return (), (), Gap(EvidenceSource.APPROVALS, f"approval records unreadable: {exc}")
    return requests, tickets, None


def _gone(db: Path, events: EventLog) -> Gap | None:
    """The gap of a checkpoint file that is missing although the harness's own trace shows
    a worker past a committed checkpoint (``labels.AFTER_A_CHECKPOINT``): a worker deleted
    it, or put a symlink or a FIFO there that the sandbox's sweep removed. An empty history
    would pass the checks over it without evidence. ``None`` when no such point was hit
    (nothing was written yet: no file is the truth)."""
    hit = committed_hit(events.snapshot())
    if hit is None:
        return None
    return Gap(EvidenceSource.CHECKPOINTS, f"checkpoint database {db} is gone although a "
               f"worker reached {hit} (a committed checkpoint, in the harness's trace): "
               "removed or replaced by a worker")


def _spoiled(record: StoryRecord, events: EventLog, at_home: Callable[[str], str]) -> None:
    """Record as tampering a checkpoint file that the harness had read as the contract's
    store during the story (at the approval, or the phase before or after a worker) and
    that is now gone, not a regular file, or no longer such a store (not SQLite, no
    readable ``checkpoints`` table) — never the harness's "too long to read". A loop's own
    writes never do that (SIGKILL cannot), so it is a decided failure (``no_tampering``),
    not only a gap that leaves every check over the history undecided (found by an attack:
    a duplicate delivery followed by deleting or spoiling the file came out ``unknown``).
    A file that never met the contract is not tampering: the checks name what it lacks."""
    db = record.checkpoints_db
    mark = record.history_at_approval
    read_then = (any(w.phase_before is not None or w.phase_after is not None
                     for w in record.workers)
                 or (mark is not None and mark.unreadable is None and mark.rows > 0))
    hit = committed_hit(events.snapshot())
    if not read_then or hit is None:
        return
    if not os.path.lexists(db):
        what = "is gone"
    elif (why := not_a_file(db)) is not None:
        what = why
    else:
        try:
            store.read_rows(db, "", max_rows=0)  # the layout only: no row of case ""
            return  # a store still: unreadable for another reason (too long), not spoiled
        except store.HistoryTooLong:
            return
        except (store.NotAContractStore, sqlite3.Error) as exc:
            what = f"is no longer a checkpoint database of the contract ({exc})"
    events.add(EventKind.TAMPERING, None, None, None,
               at_home(f"checkpoint database {db} {what}, although the harness had read "
                       f"its history during the story and a worker had reached {hit} (a "
                       "committed checkpoint, in the harness's trace)"))


def _unreached_points(controller: KillController) -> tuple[KillPoint, ...]:
    """Story points (a decision or a lock ``at`` a point, a hold) no worker ever reached."""
    missed = list(controller.hooks)  # a hook is removed when it fires
    missed += [h.point for h in controller.holds.values()
               if h.required and not h.held.is_set()]
    return tuple(missed)
