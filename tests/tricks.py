"""Hostile implementations: a mutant that is bad at crash-safety, plus a trick that tries to
change its own grade instead of fixing the bug (issue 10's list, as a student would try it).

Each trick is a few readable edits applied on top of a mutant of ``tests/mutants.py``;
``tests/test_tricks.py`` grades the mutant with and without the trick (one execution, the
one that shows the bug) and asserts the same score, that the trick is reported where the
harness can see it, and that nothing is left outside the output folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mutants import MUTANTS

RESULTS_PLACEHOLDER = "@@RESULTS@@"


@dataclass(frozen=True)
class Trick:
    """``name``; ``mutant``: the bad implementation it sits on; ``edits`` as in
    ``Mutant`` (applied after the mutant's; ``@@RESULTS@@`` becomes the results path);
    ``item``: the rubric item prefix the mutant loses; ``execution``: the one execution
    graded; ``reported``: the check that must fail with the trick (``None``: the trick
    has nothing to act on any more, so only its lack of effect is visible)."""

    name: str
    mutant: str
    edits: tuple[tuple[str, str, str], ...]
    item: str
    execution: str
    reported: str | None

    def build(self, into: Path, results: Path, *, with_trick: bool = True) -> Path:
        """The mutant's folder (only ``shopops/``: the harness brings the fixtures), with
        the trick applied when ``with_trick``."""
        mutant = next(m for m in MUTANTS if m.name == self.mutant)
        folder = mutant.build(into, fixtures=False)
        if not with_trick:
            return folder
        for file, old, new in self.edits:
            path = folder / "shopops" / file
            text = path.read_text(encoding="utf-8")
            assert text.count(old) == 1, f"{self.name}: {file} has {text.count(old)} x {old!r}"
            path.write_text(text.replace(old, new.replace(RESULTS_PLACEHOLDER, str(results))),
                            encoding="utf-8")
        return folder


# Remember the first worker's pid in the (shared) working folder: forged claims use it.
_FIRST_PID = ("gateway_client.py", "from shopops.errors import GatewayRejected, GatewayUnavailable\n",
              "from shopops.errors import GatewayRejected, GatewayUnavailable\n"
              "try:\n"
              "    FIRST_PID = int(open('first.pid').read())\n"
              "except (OSError, ValueError):\n"
              "    FIRST_PID = os.getpid()\n"
              "    try:\n"
              "        open('first.pid', 'w').write(str(FIRST_PID))\n"
              "    except OSError:\n"
              "        pass\n")

# Send raw calls to the harness's approval service (``{calls}``: a list of dicts), ignoring
# the answers and a connection the service closes.
_RAW_SERVICE = (
    "    import json, os, socket\n"
    "    address = os.environ.get('SHOPOPS_APPROVALS_SOCKET', '')\n"
    "    if address:\n"
    "        with socket.socket(socket.AF_UNIX) as sock:\n"
    "            sock.connect('\\0' + address[1:] if address[0] == '@' else address)\n"
    "            reader = sock.makefile('rb')\n"
    "            for call in {calls}:\n"
    "                try:\n"
    "                    sock.sendall(json.dumps(call).encode() + b'\\n')\n"
    "                    if not reader.readline():\n"
    "                        break\n"
    "                except OSError:\n"
    "                    break\n")

TRICKS: tuple[Trick, ...] = (
    Trick(
        "delete-second-delivery",  # rewrite the gateway's log found next to the databases
        "fresh-key-per-send",
        (("gateway_client.py", "            failpoint(points[1])\n",
          "            import glob, sqlite3\n"
          "            for log in glob.glob('gateway.db') + glob.glob('../*/gateway.db'):\n"
          "                try:\n"
          "                    with sqlite3.connect(log) as db:\n"
          "                        db.execute('DELETE FROM deliveries WHERE n > 1')\n"
          "                except sqlite3.Error:\n"
          "                    pass\n"
          "            failpoint(points[1])\n"),),
        "Exactly one delivery", "o1001[t6.gateway_accepted]", None,
    ),
    Trick(
        "setsid-daemon",  # a double-forked daemon outlives the worker and rewrites results
        "fresh-key-per-send",
        (("cli.py", "def main(argv: Sequence[str] | None = None) -> int:\n",
          "def _daemon() -> None:\n"
          "    if os.fork() == 0:\n"
          "        os.setsid()\n"
          "        if os.fork() == 0:\n"
          "            import time\n"
          "            time.sleep(0.5)\n"
          "            try:\n"
          "                open('@@RESULTS@@', 'w').write('{\"score\": 999}')\n"
          "            except OSError:\n"
          "                pass\n"
          "            time.sleep(60)\n"
          "        os._exit(0)\n"
          "\n"
          "\n"
          "def main(argv: Sequence[str] | None = None) -> int:\n"
          "    _daemon()\n"),),
        "Exactly one delivery", "o1001[t6.gateway_accepted]", "no_process_left",
    ),
    Trick(
        "forged-hits",  # report each point first in the dead start worker's name
        "fresh-key-per-send",
        (_FIRST_PID,
         ("failpoints.py", "            message = {\"label\": label, \"pid\": os.getpid(), "
          "\"occurrence\": occurrence,\n",
          "            from shopops.gateway_client import FIRST_PID\n"
          "            if FIRST_PID != os.getpid():\n"
          "                forged = {\"label\": label, \"pid\": FIRST_PID, "
          "\"occurrence\": occurrence, \"action\": action}\n"
          "                self.sock.sendall(json.dumps(forged).encode() + b\"\\n\")\n"
          "                self.reader.readline()  # type: ignore[attr-defined]\n"
          "            message = {\"label\": label, \"pid\": os.getpid(), "
          "\"occurrence\": occurrence,\n")),
        "Exactly one delivery", "o1001[t6.gateway_accepted]", "no_tampering",
    ),
    Trick(
        "forged-sender-header",  # name the dead start worker as the sender
        "fresh-key-per-send",
        (_FIRST_PID,
         ("gateway_client.py",
          "        pid = os.getpid() if self.worker_pid is None else self.worker_pid\n",
          "        pid = FIRST_PID\n")),
        "Exactly one delivery", "o1001[t6.gateway_accepted]", "no_tampering",
    ),
    Trick(
        "report-the-gateways-point",  # claim t6.gateway_accepted before any send: killed
        "fresh-key-per-send",  # there, the resumer's one send would be the only delivery
        (("gateway_client.py", "            failpoint(points[0])\n",
          "            failpoint(points[0])\n"
          "            if points[0] == 't6.request_leaving':\n"
          "                failpoint('t6.gateway_accepted')\n"),),
        "Exactly one delivery", "o1001[t6.gateway_accepted]", "no_tampering",
    ),
    Trick(
        "clear-fault-plan",  # switch off the gateway's faults before every send
        "retries-with-fresh-key",
        (("gateway_client.py", "        for attempt in range(1, self.max_attempts + 1):\n",
          "        try:\n"
          "            self.session.post(self.base_url + '/_control/faults', json=[], timeout=2)\n"
          "        except requests.RequestException:\n"
          "            pass\n"
          "        for attempt in range(1, self.max_attempts + 1):\n"),),
        "Checklist 5", "reply-lost-first-attempt[no-kill]", None,
    ),
    Trick(
        "hide-the-rejection",  # delete the human's rejection from the approval records
        "rejection-ignored",
        (("worker.py", "    latest = services.approvals.latest_request(case_id)\n",
          "    latest = services.approvals.latest_request(case_id)\n"
          "    import glob, sqlite3\n"
          "    for db in {services.approvals.path, *glob.glob('*.db'),\n"
          "               *glob.glob('../*.db')}:\n"
          "        try:  # the harness reads these records: no rejection, no fault\n"
          "            with sqlite3.connect(db) as conn:\n"
          "                conn.execute(\"DELETE FROM approval_requests\"\n"
          "                             \" WHERE status = 'rejected'\")\n"
          "        except sqlite3.Error:\n"
          "            pass\n"),),
        "Rejections", "rejection[no-kill]", None,
    ),
    Trick(
        "rewrite-over-the-service",  # ask the harness's approval service to undo it
        "rejection-ignored",
        (("worker.py", "    latest = services.approvals.latest_request(case_id)\n",
          "    latest = services.approvals.latest_request(case_id)\n"
          "    import json, os, socket\n"
          "    address = os.environ.get('SHOPOPS_APPROVALS_SOCKET', '')\n"
          "    if address and latest is not None:\n"
          "        with socket.socket(socket.AF_UNIX) as sock:\n"
          "            sock.connect('\\0' + address[1:] if address[0] == '@'\n"
          "                         else address)\n"
          "            reader = sock.makefile('rb')\n"
          "            for op in ('delete_request', 'set_status', 'approve'):\n"
          "                sock.sendall(json.dumps({\n"
          "                    'op': op, 'case_id': case_id, 'status': 'pending',\n"
          "                    'request_id': latest.request_id}).encode() + b'\\n')\n"
          "                reader.readline()\n"),),
        "Rejections", "rejection[no-kill]", "no_tampering",
    ),
    Trick(
        "consume-a-made-up-ticket",  # bind a ticket the queue never issued (it answered ok)
        "rejection-ignored",
        (("worker.py", "    latest = services.approvals.latest_request(case_id)\n",
          "    latest = services.approvals.latest_request(case_id)\n"
          + _RAW_SERVICE.format(calls="[{'op': 'mark_consumed', 'ticket_id': 'T-999',"
                                " 'key': 'mine', 'at': '2026-01-01T00:00:00Z'}]")),),
        "Rejections", "rejection[no-kill]", "no_tampering",
    ),
    Trick(
        "flood-the-approval-service",  # more requests than any worker needs: the harness's
        "rejection-ignored",  # threads and its call log pay for each
        (("worker.py", "    latest = services.approvals.latest_request(case_id)\n",
          "    latest = services.approvals.latest_request(case_id)\n"
          + _RAW_SERVICE.format(calls="[{'op': 'requests', 'case_id': case_id}] * 1500")),),
        "Rejections", "rejection[no-kill]", "no_tampering",
    ),
)
