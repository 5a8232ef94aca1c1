"""Starting and reaping the workers of a story (``harness.story.engine``): their command line,
environment (the simulated clock), lease owner, and the phase the harness reads from the
checkpoint database before and after each one.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.judge.evidence import EventLog, latest_checkpoint
from harness.judge.observers import store
from harness.judge.observers.target import item_digests
from harness.launch import power
from harness.launch.launcher import Launcher
from harness.launch.processes import Worker, output_tail, trim_output
from harness.launch.target_servers import FRAMEWORKS_ENV, frameworks_of
from harness.model import (
    DEFAULT_OWNER,
    CrashMode,
    EventKind,
    HistoryRead,
    KillPoint,
    PowerCut,
    Scenario,
    Sut,
    TargetRole,
    WorkerRole,
    WorkerRun,
)
from harness.model.observations import DurableWrite, LeaseSeen, StoredRow
from harness.sandbox.boot import TITLE_ENV
from harness.story.controller import KillController
from harness.targets.drive import TargetDriver, TargetSeal
from shopops.approvals import ENV_SOCKET
from shopops.records import DEFAULT_FIXTURES

__all__ = ["RUN_ID", "Started", "Workers"]

RUN_ID = "run-1"
#: Hosts a worker reaches without a proxy (``NO_PROXY``): the harness's own, on loopback.
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Started:
    """A worker that was started and not yet reaped."""

    worker: Worker
    role: WorkerRole
    before: DurableWrite | None  # the loop's latest write when it started, as read
    index: int
    owner: str | None = None  # its ``--owner`` (``None``: leases off)
    lease: LeaseSeen | None = None  # the case's lease record when it started, as read


class Workers:
    """The story's workers: start, wait, record (``WorkerRun``), in launch order.

    Attributes:
        clock_offset_s: seconds later workers' clocks run ahead (``SHOPOPS_CLOCK_OFFSET_S``).
        offered_ticket: a ticket the human handed over, passed to later workers.
        offered_note_ticket: likewise on the order note's gate (``--note-ticket``).
        runs: every reaped worker, in launch order.
        errors: deadlines that passed (they cut the story short).
        injected: checkpoint rows the harness appended (not the loop's: ignored when the
            harness reads the loop's latest phase).
        target: the scenario's ``[target]`` driver (``None``: the reference loop), which
            builds a target worker's command line and holds the ticket it is handed.
    """

    def __init__(self, scenario: Scenario, sut: Sut, workdir: Path, launcher: Launcher,
                 controller: KillController, events: EventLog, *, gateway_url: str,
                 channel: str, timeout_s: float, extra_wait_s: float,
                 data_dir: Path | None = None, approvals: str | None = None,
                 email_env: Mapping[str, str] | None = None,
                 seal: TargetSeal | None = None) -> None:
        self.s = scenario
        self.email_env = dict(email_env or {})
        self.sut = sut
        self.workdir = workdir
        self.launcher = launcher
        self.controller = controller
        self.events = events
        self.gateway_url = gateway_url
        self.channel = channel
        self.approvals = approvals
        self.timeout = timeout_s
        self.extra_wait_s = extra_wait_s
        # the databases the workers write, and their cwd: the sandbox of a sealed execution;
        # for power cuts a folder of its own, so that a cut touches only the loop's state
        if data_dir is None and scenario.crash_mode is CrashMode.POWER:
            (workdir / "state").mkdir(exist_ok=True)
        self.data_dir = data_dir or (workdir / "state" if scenario.crash_mode is CrashMode.POWER
                                     else workdir)
        self.ckpt_db = self.data_dir / "checkpoints.db"
        # the approval records are the harness's (its approval service serves them to the
        # workers); the path a worker is given is only used by one that keeps its own, and
        # is never the harness's (a worker may open it: found by an attack, that was
        # tampering unsealed and nothing sealed)
        self.appr_db = workdir / "approvals.db"
        self.worker_appr_db = self.data_dir / "loop-approvals.db"
        self.gw_db = workdir / "gateway.db"
        self.clock_offset_s = 0.0
        self.offered_ticket: str | None = None
        self.offered_note_ticket: str | None = None
        self.runs: list[WorkerRun] = []
        self.errors: list[str] = []
        self.injected: list[StoredRow] = []
        self._started = 0
        self._latest: DurableWrite | None = None  # the loop's latest write, as last read
        self._base_env: dict[str, str] | None = None  # env() without the clock: per story
        # a target's history read is started like its workers: forked from the server
        # preloaded with its frameworks (sealed: from the sealed one, as its uid)
        self.target = (TargetDriver(
            scenario, self.data_dir, self.worker_appr_db, gateway_url, approvals, seal,
            launcher=launcher, outdir=workdir, launch_env={FRAMEWORKS_ENV: ",".join(
                frameworks_of(scenario.target.folder if seal is None else seal.folder,
                              scenario.target.extra))})
                       if scenario.target is not None else None)
        #: a target's history as read after each worker (``read_history``), and the last
        #: read: (workers reaped then, its objects, why unreadable)
        self.history_reads: list[HistoryRead] = []
        self._last_read: tuple[int, tuple[object, ...] | None, str | None] | None = None
        #: power cuts (``harness.launch.power``): the harness-owned shadow of what the
        #: workers synced (``None``: every kill is a plain SIGKILL), and a cut due once
        #: every worker running when it was decided has been reaped
        self.shadow: Path | None = None
        self._cut_due: KillPoint | None = None
        self.power_cuts: list[PowerCut] = []
        if scenario.crash_mode is CrashMode.POWER:
            # beside the state folder, or inside a sealed sandbox (its worker's uid writes it)
            self.shadow = (workdir / "power-shadow" if data_dir is None
                           else self.data_dir / ".shopops-power")
            self.synced()

    def synced(self) -> None:
        """In power mode, everything in the state folder is durable now: the harness's own
        writes (before the first worker, a storage fault) count as ``sync()``."""
        if self.shadow is not None:
            power.baseline(self.data_dir, self.shadow)

    @property
    def started(self) -> int:
        """Workers started so far."""
        return self._started

    def argv(self, role: WorkerRole, index: int, owner: str,
             from_seq: int | None = None) -> list[str]:
        """The command line of worker ``index`` (a target's: ``TargetDriver.argv``);
        ``from_seq``: resume from that checkpoint (``--from-seq N``, the contract's)."""
        s = self.s
        if self.target is not None:
            return self.target.argv(role, index, from_seq)
        if role is WorkerRole.MIGRATE:
            return self.sut.argv("migrate", str(self.ckpt_db))
        argv = self.sut.argv(
            "run", "--db", str(self.ckpt_db), "--approvals", str(self.worker_appr_db),
            "--gateway", self.gateway_url, "--case", s.case_id, "--order", s.order_id,
            "--run-id", RUN_ID, "--keys", "on" if s.idempotency_keys else "off",
            "--policy", s.policy)
        if s.read_timeout_s is not None:
            argv += ["--read-timeout", f"{s.read_timeout_s:g}"]
        if s.max_attempts is not None:
            argv += ["--max-attempts", str(s.max_attempts)]
        if s.order_note:
            argv.append("--order-note")
        if s.leases:
            argv += ["--owner", owner.format(index=index), "--lease-ttl", f"{s.lease_ttl_s:g}"]
        if self.offered_ticket is not None:
            argv += ["--ticket", self.offered_ticket]
        if self.offered_note_ticket is not None:
            argv += ["--note-ticket", self.offered_note_ticket]
        if from_seq is not None:
            argv += ["--from-seq", str(from_seq)]
        return argv

    def env(self) -> dict[str, str]:
        """The worker's environment: ours without any ``SHOPOPS_*``, plus the channel, the
        approval service, the simulated clock, loopback in ``NO_PROXY`` and, for a target, the
        frameworks its code uses (``harness.launch.target_servers.FRAMEWORKS_ENV``)."""
        if self._base_env is None:  # the same for every worker of the story
            self._base_env = self._story_env()
        env = dict(self._base_env)
        if self.clock_offset_s:
            env["SHOPOPS_CLOCK_OFFSET_S"] = f"{self.clock_offset_s:.3f}"
        if self.shadow is not None:  # the shim records what the worker syncs
            env = power.env_for(self.data_dir, self.shadow, env)
        return env

    def _story_env(self) -> dict[str, str]:
        """``env()`` but the simulated clock: built once per story (read from
        ``os.environ`` at the first worker's start)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
        env["PYTHONPATH"] = self.sut.pythonpath(env.get("PYTHONPATH"))
        env["SHOPOPS_FAILPOINT_CHANNEL"] = self.channel
        if self.approvals is not None:
            env[ENV_SOCKET] = self.approvals
        env["SHOPOPS_FIXTURES"] = str(DEFAULT_FIXTURES)  # the harness's CRM and orders
        env |= self.email_env  # an app's own email client: Resend's base URL, SMTP host
        # the gateway and the services are the harness's, on loopback: no proxy from our
        # environment may stand between a worker and them (requests and urllib honour
        # NO_PROXY; an implementation's own client would otherwise fail through a proxy)
        for name in ("NO_PROXY", "no_proxy"):
            given = [h for h in env.get(name, "").split(",") if h.strip()]
            env[name] = ",".join(dict.fromkeys(given + list(_LOOPBACK)))
        if self.target is not None:  # the fork server to start it from (target_servers)
            target = self.target.target
            env[FRAMEWORKS_ENV] = ",".join(frameworks_of(target.folder, target.extra))
        return env

    def run(self, role: WorkerRole, owner: str = DEFAULT_OWNER,
            from_seq: int | None = None) -> WorkerRun:
        """Start one worker and wait for it."""
        return self.finish(self.start(role, owner, from_seq))

    def start(self, role: WorkerRole, owner: str = DEFAULT_OWNER,
              from_seq: int | None = None) -> Started:
        """Start one worker (index = launch order) without waiting for it; ``from_seq``:
        it resumes from that checkpoint instead of the latest.

        Raises:
            OSError: the launcher could not start it.
        """
        # Only workers change the phase and it is read as each one ends; while another
        # worker still runs (a held or concurrent one), read it afresh.
        before = self._latest if self._started == len(self.runs) else self.latest_write()
        index = self._started
        self._started += 1
        out, err = self.workdir / f"worker-{index}.out", self.workdir / f"worker-{index}.err"
        env = self.env()
        # ps names the worker by role and execution folder (opaque for sealed executions)
        env[TITLE_ENV] = f"shopops-worker {WorkerRole(role).value} {self.workdir.name}"
        argv = self.argv(role, index, owner, from_seq)
        lease = self.lease()  # read just before it starts: whose lease it may take
        if self.shadow is not None and self.target is not None:  # the contexts it wrote
            power.synced(self.data_dir, self.shadow, self.target.written)
            self.target.written.clear()
        worker = self.launcher.start(argv, env=env,
                                     cwd=str(self.data_dir), stdout=str(out), stderr=str(err),
                                     index=index)
        self.controller.attach(worker)
        self.events.add(EventKind.WORKER_START, None, worker.pid, index,
                        role if from_seq is None else f"{role} --from-seq {from_seq}")
        release = getattr(worker, "release", None)
        if release is not None:  # a fork-server child held at its start gate until attached
            release()
        given = (self.s.leases and self.target is None  # as argv() passes --owner
                 and role is not WorkerRole.MIGRATE)
        return Started(worker, role, before, index, owner.format(index=index) if given
                       else None, lease)

    def finish(self, started: Started) -> WorkerRun:
        """Wait for (reap) a started worker and record its run."""
        worker, index = started.worker, started.index
        info = worker.wait(self.timeout + self.extra_wait_s)
        self.events.add(EventKind.WORKER_EXIT, None, worker.pid, index,
                        f"returncode {info.returncode}"
                        + (" (deadline passed)" if info.timed_out else ""))
        if info.timed_out:
            self.errors.append(f"worker {index} ({started.role}) passed its {self.timeout:g} s "
                               "deadline")
        out, err = self.workdir / f"worker-{index}.out", self.workdir / f"worker-{index}.err"
        self._power_cut(worker, index)
        self._latest = self.latest_write()
        for stream in (out, err):  # bounded on disk; its end is kept: the same tails below
            trim_output(stream)
        run = WorkerRun(index, started.role, worker.pid, info.returncode,
                        info.killed_by_harness, info.timed_out, info.leftovers,
                        output_tail(out, 15), output_tail(err, 15), round(info.elapsed_s, 4),
                        _phase(self._latest), _phase(started.before),
                        _draft(started.before), started.owner, started.lease, self.lease())
        self.runs.append(run)
        self.runs.sort(key=lambda r: r.index)
        self.read_history(run)
        return run

    def read_history(self, run: WorkerRun) -> None:
        """A target's history, read through its own ``history`` right after ``run`` was
        reaped (``TargetDriver.history``: outside the kill controller, sealed like its
        workers), so that ``history_not_replaced`` can tell a history that was deleted or
        rewritten between workers from one that only grew. Read only while no other worker
        runs (a held or concurrent one would race the read) and not with power cuts (a
        read's own files would be rolled back with the loop's); recorded in
        ``history_reads``."""
        if (self.target is None or not self.target.has(TargetRole.HISTORY)
                or self._started != len(self.runs) or self.shadow is not None):
            return
        items, error = self.target.history(f"history-after-{run.index}")
        self._record_read(run.index, run.role, run.killed_by_harness, items, error)

    def final_history(self) -> tuple[tuple[object, ...] | None, str | None]:
        """A target's history after the story (``TargetDriver.history``): the read made
        after its last worker when no worker was started since (nothing else writes a
        target's state: the human answers through the harness's records or a ``decide``
        worker), else read now and recorded. ``(None, None)``: no target, or no
        ``history``."""
        if self.target is None:
            return None, None
        last = self._last_read
        if last is not None and last[0] == len(self.runs) == self._started:
            return last[1], last[2]
        items, error = self.target.history()
        if items is not None:
            self._record_read(None, None, False, items, error)
        return items, error

    def _record_read(self, worker: int | None, role: WorkerRole | None, killed: bool,
                     items: tuple[object, ...] | None, error: str | None) -> None:
        self._last_read = (len(self.runs), items, error)
        if items is not None:
            self.history_reads.append(HistoryRead(
                worker, role, killed, item_digests(items) if error is None else (), error))

    def _power_cut(self, worker: Worker, index: int) -> None:
        """After reaping worker ``index``: if it was killed at a point that is a power cut
        (``Scenario.is_power_cut``), the state folder goes back to its last sync — once no
        other worker still runs (a real cut stops them all; theirs are then reaped first)."""
        point = self.controller.killed_at.get(index)
        if self.shadow is not None and point is not None and self.s.is_power_cut(point):
            self._cut_due = point
        if self._cut_due is None or self._started > len(self.runs) + 1:
            return
        assert self.shadow is not None
        point, self._cut_due = self._cut_due, None
        before, unread = self._committed()
        done = power.cut(self.data_dir, self.shadow)
        after, _ = self._committed()  # unreadable after the cut: every committed row is lost
        lost = () if unread else tuple(seq for seq, blob in before.items()
                                       if after.get(seq) != blob)
        self.power_cuts.append(PowerCut(point, index, tuple(before), lost, done.lost, unread))
        self.events.add(EventKind.POWER_CUT, point.label, worker.pid, index,
                        done.line() + (f"; committed checkpoint(s) lost: seq "
                                       f"{', '.join(map(str, lost))}" if lost else ""),
                        ref=str(point))

    def _committed(self) -> tuple[dict[int, bytes | None], str | None]:
        """The case's checkpoint rows as the harness reads them now (``seq`` -> state), the
        harness's injected rows left out, or why they could not be read (a target's own
        storage is not read). No file yet, or no checkpoint table in it yet (a worker killed
        before its schema was committed): no rows."""
        if self.target is not None:
            return {}, "a target keeps its own storage"
        if not self.ckpt_db.exists():
            return {}, None
        skip = {r.seq for r in self.injected}
        try:
            rows = store.read_rows(self.ckpt_db, self.s.case_id)
        except store.NotAContractStore:
            return {}, None
        except (store.HistoryTooLong, sqlite3.Error, OSError) as exc:
            return {}, f"{type(exc).__name__}: {exc}"
        return {r.seq: r.state_json for r in rows if r.seq not in skip}, None

    def lease(self) -> LeaseSeen | None:
        """The case's lease record now, stamped with the story's simulated clock (the one
        the next worker runs on); ``None`` without leases, for a target, or when the loop
        keeps no readable ``leases`` table (``store.lease_of``)."""
        if not self.s.leases or self.target is not None:
            return None
        return store.lease_of(self.ckpt_db, self.s.case_id, time.time() + self.clock_offset_s)

    def reset_phase(self) -> None:
        """Read the latest write afresh (after the harness itself wrote the database)."""
        self._latest = self.latest_write()

    def latest_phase(self) -> str | None:
        """The phase of the latest checkpoint the loop wrote, read by the harness (``None``
        for a target: its state is read through its own API, ``read_history``)."""
        return _phase(self.latest_write())

    def latest_write(self) -> DurableWrite | None:
        """The latest checkpoint the loop wrote (the harness's injected rows left out), as
        the store observer reads it; ``None`` for a target or when there is none."""
        if self.target is not None:
            return None
        row = latest_checkpoint(self.ckpt_db, self.s.case_id, {r.seq for r in self.injected})
        return store.write_of(row) if row is not None else None


def _phase(write: DurableWrite | None) -> str | None:
    return write.phase if write is not None else None


def _draft(write: DurableWrite | None) -> str | None:
    return write.draft.digest if write is not None and write.draft is not None else None

