"""The kill controller: what the harness does when a worker reaches a labelled point.

Every hit arrives here — worker-side over the failpoint channel, gateway-side from the
harness's own mock gateway (``t6.gateway_accepted``). The controller records it in the
trace, then, in this order: runs the scenario's hooks due at this hit (the human approves
mid-resume, an exclusive lock is taken), SIGKILLs the worker if the hit is the next kill of
the crash schedule, or holds the worker there until the story releases it (a slow worker
whose lease another worker takes over).

Who reached a point is the kernel's word (``Hit.pid`` from ``SO_PEERCRED``, the gateway's
connection owner): a hit whose message names another pid, or that comes from a uid other
than the execution's own (``allowed_uid``, sealed executions), or that names a point only the
harness's own components reach (``labels.HARNESS_OWNED``: the gateway's
``t6.gateway_accepted``, the queue's ``t5.approved``; the kill there happens only when the
gateway reaches it, ``on_gateway_accepted``), is refused — not counted,
no kill, no hook — and recorded as a ``tampering`` event, which fails the execution
(``harness.judge.checks.registry.no_tampering``).

Kill points count hits per label across every worker since the execution started or since
the previous kill fired (``harness.model.points``); hooks and holds count from the start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from harness.judge.evidence import EventLog
from harness.launch.processes import Worker
from harness.model import Delivery, EventKind, HitCounter, KillPoint, NoteDelivery
from harness.services.channel import Hit, HitAnswer, HitReply
from shopops_contract import labels

__all__ = ["HOLD_LIMIT_S", "Hold", "KillController"]

_CONTINUE = {"do": "continue"}
#: ``KillController._worker_above``: a live sender that descends from no worker.
_FOREIGN = object()
#: Seconds a held worker waits for its release before the controller lets it go anyway.
HOLD_LIMIT_S = 60.0


@dataclass
class Hold:
    """A worker held at ``point``: ``held`` is set when one arrives, ``release`` lets it go;
    after ``limit_s`` seconds it goes on anyway (a slow step is a short limit). A hold that
    is not ``required`` (a slow step) may be missed: a kill at the same hit comes first."""

    point: KillPoint
    limit_s: float = HOLD_LIMIT_S
    required: bool = True
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    worker: Worker | None = None


class KillController:
    """Counts hits, runs hooks and holds, and fires the schedule's kills at the exact hit."""

    def __init__(self, kills: tuple[KillPoint, ...], events: EventLog,
                 allowed_uid: int | None = None) -> None:
        self.pending = list(kills)
        self.allowed_uid = allowed_uid
        self.events = events
        #: hits since the start or the last kill (what a kill point counts)
        self.since_kill = HitCounter()
        #: hits since the start (what hooks and holds count)
        self.totals = HitCounter()
        #: the kill point each killed worker (by launch index) was killed at
        self.killed_at: dict[int, KillPoint] = {}
        self.hooks: dict[KillPoint, Callable[[Worker], None]] = {}
        self.holds: dict[KillPoint, Hold] = {}
        self.current: Worker | None = None
        self.by_pid: dict[int, Worker] = {}
        self._lock = threading.Lock()
        #: a hook runs (``_act``): hits wait for it (``_after_act``)
        self._acting = False
        self._acted = threading.Condition(self._lock)

    def attach(self, worker: Worker) -> None:
        """Register ``worker``; it becomes the current one (the sender, for gateway points)."""
        with self._lock:
            self.current = worker
            self.by_pid[worker.pid] = worker

    def add_hook(self, point: KillPoint, action: Callable[[Worker], None]) -> None:
        """Run ``action(worker)`` once, at the hit ``point`` (counted from the start)."""
        self.hooks[point] = action

    def add_hold(self, point: KillPoint, *, limit_s: float = HOLD_LIMIT_S,
                 required: bool = True) -> Hold:
        """Hold the worker that reaches ``point`` (counted from the start) until
        ``Hold.release`` is set, or for at most ``limit_s`` seconds; ``required``: a point
        no worker reached makes the execution's evidence incomplete."""
        hold = Hold(point, limit_s, required)
        self.holds[point] = hold
        return hold

    def on_hit(self, hit: Hit) -> HitAnswer:
        """Channel callback, in the service loop's thread (``harness.services.channel``):
        ``None`` if it killed the worker, the reply, or a call that returns one of those
        and may wait, which the channel runs in a thread of its own (the loop never waits):
        when the story acts at this hit (a hook: the human approves, a lock is taken, which
        may wait), or holds the worker here. While a hook runs no other hit is counted:
        each waits for it, as it waited for the controller's lock when every hit had a
        thread (a hit counted meanwhile was wiped when the hook's kill fired; found by an
        attack), so the numbering is the trace's."""
        refused = self._refusal(hit)
        if refused is not None:  # another uid's call is not this implementation's doing
            foreign = self.allowed_uid is not None and hit.uid != self.allowed_uid
            self.events.add(EventKind.FOREIGN if foreign else EventKind.TAMPERING, hit.label,
                            hit.pid, None, refused)
            return dict(_CONTINUE)
        with self._lock:
            if self._acting:
                return lambda: self._after_act(hit)
            return self._count(hit)

    def _count(self, hit: Hit) -> HitAnswer:
        """Record and count ``hit``; the caller holds ``_lock`` and no hook runs."""
        worker = self.by_pid.get(hit.pid)
        index = worker.index if worker else None
        self.events.add(EventKind.HIT, hit.label, hit.pid, index,
                        f"occurrence {hit.occurrence}")
        if worker is None:  # counted like the trace counts it, but never killed
            self.since_kill.hit(hit.label)
            self.events.add(EventKind.ERROR, hit.label, hit.pid, None,
                            "hit from an unknown pid")
            return dict(_CONTINUE)
        point = self.totals.hit(hit.label)
        hook = self.hooks.pop(point, None)  # the story's act at this hit comes first:
        if hook is not None:  # a human who approves "when a worker gets there" has
            self._acting = True  # approved even if the worker is killed there
            return lambda: self._act(hit, worker, point, hook)
        return self._kill_or_hold(hit, worker, point)

    def _act(self, hit: Hit, worker: Worker, point: KillPoint,
             hook: Callable[[Worker], None]) -> HitReply:
        """The story's act at ``hit`` (a thread of its own), then its kill or hold."""
        try:
            hook(worker)
        finally:
            with self._lock:
                self._acting = False
                self._acted.notify_all()  # the hits that waited go on once this is done
                reply = self._kill_or_hold(hit, worker, point)
        return reply() if callable(reply) else reply

    def _after_act(self, hit: Hit) -> HitReply:
        """``hit``, which came while a hook ran, once it is done (a thread of its own)."""
        with self._lock:
            while self._acting:
                self._acted.wait()
            reply = self._count(hit)
        return reply() if callable(reply) else reply

    def _kill_or_hold(self, hit: Hit, worker: Worker, point: KillPoint
                      ) -> HitAnswer:
        """The caller holds ``_lock``: SIGKILL the worker if ``hit`` is the next kill
        (``None``), else hold it if the story holds a worker at ``point`` (a call that
        waits for the release), else the reply."""
        if self._maybe_kill(hit.label, worker):
            return None
        hold = self.holds.get(point)
        if hold is None or hold.held.is_set():
            return dict(_CONTINUE)
        hold.worker = worker
        self.events.add(EventKind.HOLD, hit.label, worker.pid, worker.index, f"held at {point}",
                        ref=str(point))
        hold.held.set()
        return lambda: self._held(hit, worker, hold)

    def _held(self, hit: Hit, worker: Worker, hold: Hold) -> dict[str, object]:
        """Wait (outside the lock: other workers' hits go on) until the hold is released."""
        hold.release.wait(hold.limit_s)
        self.events.add(EventKind.RELEASE, hit.label, hit.pid, worker.index,
                        f"released at {hold.point}")
        return dict(_CONTINUE)

    def _refusal(self, hit: Hit) -> str | None:
        """Why ``hit`` is refused, or ``None``: from another uid (``foreign``: recorded, not
        the implementation's doing), else a point only the harness's own components reach
        (``labels.HARNESS_OWNED``), or in another pid's name (both tampering)."""
        if self.allowed_uid is not None and hit.uid != self.allowed_uid:
            return (f"hit at {hit.label} from uid {hit.uid}, not this execution's "
                    f"({self.allowed_uid}): refused")
        if hit.label in labels.HARNESS_OWNED:
            return (f"hit at {hit.label} reported by pid {hit.pid}: that point belongs to the "
                    f"harness ({labels.BY_NAME[hit.label].side} side), not to a worker: "
                    "refused")
        if hit.forged:
            return (f"hit at {hit.label} sent by pid {hit.pid} in the name of pid "
                    f"{hit.claimed_pid}: refused")
        return None

    def on_gateway_accepted(self, delivery: Delivery | NoteDelivery,
                            sender_pid: int | None = None,
                            label: str = labels.GATEWAY_ACCEPTED) -> None:
        """Mock-gateway callback, after a new delivery is committed, before the reply.

        Args:
            delivery: the new delivery (an email, or an order note).
            sender_pid: the pid the request came from (the kernel's: the gateway's
                connection owner), if known. A descendant of a worker (a child it started
                to send) stands for that worker. A live process that is neither a worker
                nor a descendant of one is refused — not counted, no kill, a ``tampering``
                event (``no_tampering`` fails): the delivery stays in the ledger, but no
                worker is credited or killed for it. A pid that cannot be looked up (gone)
                or ``None``: the current worker is the sender.
            label: the gateway-side point reached: ``t6.gateway_accepted`` for an email,
                ``t6.note_accepted`` (``labels.NOTE_ACCEPTED``) for an order note.
        """
        with self._lock:
            while self._acting:  # counted after a story act under way, as a worker's hit
                self._acted.wait()
            worker = self.by_pid.get(sender_pid) if sender_pid is not None else None
            if worker is None and sender_pid is not None:
                above = self._worker_above(sender_pid)
                if above is not _FOREIGN:
                    worker = above  # type: ignore[assignment]
                else:
                    self.events.add(
                        EventKind.TAMPERING, label, sender_pid, None,
                        f"{delivery.delivery_id} was delivered for pid {sender_pid}, which "
                        "is neither a worker of this execution nor a descendant of one: "
                        "not counted, nobody killed", ref=delivery.delivery_id)
                    return
            worker = worker or self.current
            pid, index = (worker.pid, worker.index) if worker else (None, None)
            self.events.add(EventKind.DELIVERY, label, pid, index,
                            f"{delivery.delivery_id} key {delivery.idempotency_key}",
                            ref=delivery.delivery_id)
            self.totals.hit(label)
            if worker is not None:
                self._maybe_kill(label, worker)

    def stands_for_a_worker(self, pid: int | None) -> bool:
        """Whether a gateway request from ``pid`` is this execution's: a worker, a
        descendant of one, or a pid that cannot be told (``None``, gone) — not a live
        process outside every worker's tree (``harness.services.gateway``: only such requests
        take the scenario's faults)."""
        if pid is None:
            return True
        with self._lock:
            if pid in self.by_pid:
                return True
            return self._worker_above(pid) is not _FOREIGN

    def _worker_above(self, pid: int) -> Worker | None | object:
        """The worker ``pid`` descends from; ``_FOREIGN`` if it is alive and descends from
        none; ``None`` if it cannot be looked up (it is gone, or not ours to read)."""
        try:
            parents = psutil.Process(pid).parents()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None
        return next((self.by_pid[p.pid] for p in parents if p.pid in self.by_pid), _FOREIGN)

    def _maybe_kill(self, label: str, worker: Worker) -> bool:
        point = self.since_kill.hit(label)
        if not self.pending or self.pending[0] != point:
            return False
        self.pending.pop(0)
        self.since_kill.clear()
        self.killed_at[worker.index] = point
        worker.kill()
        self.events.add(EventKind.KILL, label, worker.pid, worker.index, f"SIGKILL at {point}",
                        ref=str(point))
        return True
