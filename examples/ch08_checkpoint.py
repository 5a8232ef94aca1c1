"""Chapter 8, run as written: park O-1001, checkpoint, kill the worker, approve, resume, send once.

Run from the repository root with nothing else running::

    PYTHONPATH=. python examples/ch08_checkpoint.py

What it does, in a temporary directory that is removed at the end:

1. starts the mock email gateway (``harness.services.gateway.MockGateway``) on loopback and
   points ``SHOPOPS_GATEWAY_URL`` / ``SHOPOPS_APPROVALS_DB`` at it and at a fresh approval
   queue, before anything builds the default services;
2. t0–t4 in a real worker process, ``python -m shopops run``, armed with
   ``SHOPOPS_FAILPOINTS="t4.parked=kill"``: it reads the customer and the order, drafts,
   proposes the send, checkpoints ``awaiting_approval`` (t3) and is SIGKILLed at its
   ``t4.parked`` point — its return code must be exactly ``-9``;
3. the chapter's code, line for line (its first part runs in this process too, so the
   in-memory draft can be compared with the dead worker's checkpoint);
4. the human (maya) approves through the approval queue, which issues ``apr-desk-9`` (t5);
5. the chapter's "later" lines: load, ``grant_approval``, continue the loop (t6);
6. reads the gateway's own log: exactly one email went out, with the checkpointed draft and
   the idempotency key of the state.

Exit status 0 only if every check held; 1 otherwise (the failed check is printed).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.services.gateway import MockGateway, read_log

CASE, ORDER, RUN = "case-O-1001", "O-1001", "run-1"
REPO = Path(__file__).resolve().parent.parent
WORKER_TIMEOUT_S = 60.0


class CheckFailed(Exception):
    """A step of the story did not hold."""


def check(ok: bool, what: str) -> None:
    """Print ``what`` as a passed check, or raise ``CheckFailed``."""
    if not ok:
        raise CheckFailed(what)
    print(f"   ok: {what}")


def show(title: str, state: object) -> None:
    """Print the facts of a ``State`` the chapter's checklist is about."""
    from shopops.state import State

    assert isinstance(state, State)
    subject = state.draft.subject if state.draft else None
    print(f"{title}: phase={state.phase} step={state.step} done={state.done} "
          f"email_sent={state.email_sent}")
    print(f"   draft subject={subject!r} ticket={state.approval_ticket!r} "
          f"idempotency_key={state.send_idempotency_key!r}")


def kill_worker_at_park(workdir: Path, gateway_url: str, approvals_db: Path) -> None:
    """t0–t4 in a real worker process SIGKILLed at ``t4.parked``; checks its exit status."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    env["SHOPOPS_FAILPOINTS"] = "t4.parked=kill"
    # PYTHONPATH=. would mean the temporary directory once cwd changes: make it absolute.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    argv = [sys.executable, "-m", "shopops", "run", "--db", "shopops.db",
            "--approvals", str(approvals_db), "--gateway", gateway_url,
            "--case", CASE, "--order", ORDER, "--run-id", RUN]
    print("t0-t4 worker process:", " ".join(argv[1:]), "with SHOPOPS_FAILPOINTS=t4.parked=kill")
    proc = subprocess.Popen(argv, cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=WORKER_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"   worker pid {proc.pid} exited with {proc.returncode}")
    check(proc.returncode == -signal.SIGKILL,
          f"the worker was SIGKILLed at t4.parked (returncode {proc.returncode}, stderr "
          f"{err.strip()[-300:]!r}, stdout {out.strip()[-300:]!r})")
    check(out == "", "the worker died before printing any result")


def story(workdir: Path, gateway: MockGateway, gateway_db: Path) -> None:
    """The crash timeline of O-1001 (Chapter 8), checked step by step."""
    approvals_db = workdir / "approvals.db"
    # Before the first use of the default services (run_loop / grant_approval build them).
    os.environ["SHOPOPS_GATEWAY_URL"] = gateway.url
    os.environ["SHOPOPS_APPROVALS_DB"] = str(approvals_db)
    print(f"gateway {gateway.url} (log {gateway_db.name}), approvals {approvals_db.name}")

    kill_worker_at_park(workdir, gateway.url, approvals_db)

    from shopops import CheckpointStore, State, grant_approval, run_loop
    from shopops.approvals import ApprovalQueue
    from shopops.checkpoint import read_history
    from shopops.runtime import default_services

    rows = read_history(workdir / "shopops.db", CASE, RUN)
    print("   checkpoints the dead worker left:",
          " -> ".join(f"#{r.seq} {r.state().phase}@{r.state().step}" for r in rows))
    dead = rows[-1].state()
    check(dead.phase == "awaiting_approval" and not dead.email_sent,
          "t3: the awaiting_approval checkpoint was committed before the kill")
    check(read_log(gateway_db).requests == (), "nothing reached the gateway before approval")

    # --- the chapter's code, as written ------------------------------------------------
    store = CheckpointStore("shopops.db")
    result = run_loop(State(case_id="case-O-1001", order_id="O-1001"))
    store.save(result.state, run_id="run-1", created_at="2026-07-19T00:00:00Z")
    # ------------------------------------------------------------------------------------
    show("t2/t3 chapter first part", result.state)
    check(result.stopped == "parked" and result.state.phase == "awaiting_approval",
          "the loop parked the case in awaiting_approval")
    check(result.state.draft == dead.draft, "the chapter's draft equals the dead worker's")
    pre_crash_draft, pre_crash_step = result.state.draft, result.state.step
    assert pre_crash_draft is not None
    del result  # the worker's RAM is gone

    # t5: a human (maya) approves through the queue; the queue issues the ticket.
    with ApprovalQueue(approvals_db) as queue:
        ticket = queue.approve("case-O-1001", approver="maya", ticket_id="apr-desk-9")
    print(f"t5 maya approved: ticket {ticket.ticket_id} for draft {ticket.draft_digest[:12]}")

    # --- the chapter's code, as written ------------------------------------------------
    state = store.load("case-O-1001", "run-1")
    show("t6 loaded", state)
    check(state.draft == pre_crash_draft, "checklist 1: the draft is identical to pre-crash")
    check(state.phase == "awaiting_approval", "checklist 2: awaiting_approval until granted")
    check(not state.email_sent, "checklist 3: email_sent is False before the send")
    grant_approval(state, "apr-desk-9")
    show("t6 granted", state)
    state.max_steps = state.step + 5
    state.done = False
    cont = run_loop(state)
    assert cont.state.email_sent
    # ------------------------------------------------------------------------------------
    show("t6 sent", cont.state)
    check(cont.state.step == pre_crash_step + 1, "checklist 4: step continued, not reset")
    store.close()
    services = default_services()
    services.approvals.close()
    if services.gateway is not None:
        services.gateway.close()

    log = read_log(gateway_db)
    deliveries = log.deliveries_for(CASE)
    for d in deliveries:
        print(f"gateway delivered {d.delivery_id} key={d.idempotency_key} to={d.to} "
              f"subject={d.subject!r}")
    check(len(deliveries) == 1, f"the gateway delivered exactly one email ({len(deliveries)})")
    check(deliveries[0].body == pre_crash_draft.body,
          "the delivered body is the checkpointed draft")
    check(deliveries[0].idempotency_key == cont.state.send_idempotency_key,
          "checklist 5: delivered under the state's idempotency key")
    check(deliveries[0].delivery_id == cont.state.delivery_id, "the state names that delivery")


def main() -> int:
    """Run the story; 0 if every check held, 1 otherwise."""
    workdir = Path(tempfile.mkdtemp(prefix="shopops-ch08-"))
    gateway_db = workdir / "gateway.db"
    old_cwd = Path.cwd()
    saved_env = {k: os.environ.get(k) for k in ("SHOPOPS_GATEWAY_URL", "SHOPOPS_APPROVALS_DB")}
    gateway = MockGateway(gateway_db).start()
    try:
        os.chdir(workdir)
        story(workdir, gateway, gateway_db)
    except CheckFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        from shopops.runtime import set_default_services

        set_default_services(None)
        gateway.stop()
        os.chdir(old_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(workdir, ignore_errors=True)
    print("PASS: parked, checkpointed, worker killed, approved, resumed, sent exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
