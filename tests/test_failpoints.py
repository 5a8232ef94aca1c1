"""Failpoints: the ``SHOPOPS_FAILPOINTS`` grammar (fail-rs / gofail style), its actions in
real subprocesses, and the synchronous controller channel the harness kills through.

Exit statuses are asserted exactly (``returncode == -signal.SIGKILL``); every child is
reaped in ``finally``; synchronisation is on lines and socket events, never on sleeps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shopops import failpoints
from shopops.errors import FailpointRaised, FailpointSpecError
from shopops.failpoints import FailpointChannelError, Term, parse_spec
from shopops_contract import labels

TIMEOUT_S = 30.0


@pytest.fixture(autouse=True)
def disarmed() -> Iterator[None]:
    """Every test starts and ends with this process's failpoints disarmed."""
    failpoints.configure(None, None)
    yield
    failpoints.configure(None, None)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    env.update(extra)
    return env


@contextmanager
def child(code: str, cwd: Path, **env: str) -> Iterator[subprocess.Popen[str]]:
    """A ``python -c code`` child; SIGKILLed (if still alive) and reaped on exit."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                            env=child_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=TIMEOUT_S)  # reap; closes the pipes


def run_child(code: str, cwd: Path, **env: str) -> tuple[int, str, str]:
    with child(code, cwd, **env) as proc:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, out, err


# -- grammar ------------------------------------------------------------------------------

@pytest.mark.pure
def test_parse_single_action() -> None:
    assert parse_spec("t4.parked=kill") == {"t4.parked": (Term("kill"),)}


@pytest.mark.pure
def test_parse_every_action_kind() -> None:
    spec = ("t0.case_started=off;t1.get_customer=pause;t1.get_order=kill;"
            "t1.draft_email=raise;t2.send_proposed=sleep(250)")
    assert parse_spec(spec) == {
        "t0.case_started": (Term("off"),),
        "t1.get_customer": (Term("pause"),),
        "t1.get_order": (Term("kill"),),
        "t1.draft_email": (Term("raise"),),
        "t2.send_proposed": (Term("sleep", ms=250),),
    }


@pytest.mark.pure
def test_parse_chain_with_counts_and_whitespace() -> None:
    spec = " t6.request_leaving = 1*off -> 2*sleep(5) -> kill ; ; t4.parked=3*raise; "
    assert parse_spec(spec) == {
        "t6.request_leaving": (Term("off", 1), Term("sleep", 2, 5), Term("kill")),
        "t4.parked": (Term("raise", 3),),
    }


@pytest.mark.pure
@pytest.mark.parametrize("spec", ["", ";", " ; ;  "])
def test_empty_spec_arms_nothing(spec: str) -> None:
    assert parse_spec(spec) == {}


@pytest.mark.pure
def test_every_catalogue_label_is_accepted() -> None:
    spec = ";".join(f"{label.name}=off" for label in labels.CATALOGUE)
    assert set(parse_spec(spec)) == set(labels.BY_NAME)


@pytest.mark.pure
@pytest.mark.parametrize(("spec", "entry", "fragment"), [
    ("t4.parked", "t4.parked", "expected label=action"),
    ("t4.parked=kill;t0.case_started", "t0.case_started", "expected label=action"),
    ("t9.nowhere=kill", "t9.nowhere=kill", "unknown label 't9.nowhere'"),
    ("=kill", "=kill", "unknown label ''"),
    ("t4.parked=kill;t4.parked=off", "t4.parked=off", "given twice"),
    ("t4.parked=", "t4.parked=", "bad action ''"),
    ("t4.parked=explode", "t4.parked=explode", "bad action 'explode'"),
    ("t4.parked=KILL", "t4.parked=KILL", "bad action"),
    ("t4.parked=kill->", "t4.parked=kill->", "bad action ''"),
    ("t4.parked=sleep", "t4.parked=sleep", "sleep takes a duration"),
    ("t4.parked=sleep()", "t4.parked=sleep()", "bad action"),
    ("t4.parked=sleep(-5)", "t4.parked=sleep(-5)", "bad action"),
    ("t4.parked=sleep(1.5)", "t4.parked=sleep(1.5)", "bad action"),
    ("t4.parked=kill(5)", "t4.parked=kill(5)", "sleep takes a duration"),
    ("t4.parked=0*kill", "t4.parked=0*kill", "from 1 to 1000"),
    ("t4.parked=-1*kill", "t4.parked=-1*kill", "bad action"),
    ("t4.parked=*kill", "t4.parked=*kill", "bad action"),
    ("t4.parked=kill->off", "t4.parked=kill->off", "could never apply"),
    ("t4.parked=1*off->raise->kill", "t4.parked=1*off->raise->kill", "could never apply"),
    ("t4.parked=kill,off", "t4.parked=kill,off", "bad action"),
])
def test_malformed_entries_name_the_entry(spec: str, entry: str, fragment: str) -> None:
    with pytest.raises(FailpointSpecError) as info:
        parse_spec(spec)
    exc = info.value
    assert exc.entry == entry
    assert exc.spec == spec
    assert repr(entry) in str(exc) and fragment in str(exc)
    assert "SHOPOPS_FAILPOINTS" in str(exc)
    assert isinstance(exc, ValueError)


@pytest.mark.pure
def test_unknown_label_message_lists_the_catalogue() -> None:
    with pytest.raises(FailpointSpecError) as info:
        parse_spec("t6.gateway_acepted=kill")
    assert all(name in str(info.value) for name in labels.BY_NAME)


@pytest.mark.pure
def test_bad_action_message_lists_the_actions() -> None:
    with pytest.raises(FailpointSpecError) as info:
        parse_spec("t4.parked=abort")
    assert "off, pause, kill, raise, sleep(ms)" in str(info.value)


@pytest.mark.pure
def test_configure_with_a_bad_spec_raises() -> None:
    with pytest.raises(FailpointSpecError):
        failpoints.configure("t4.parked=nope")


@pytest.mark.parametrize("spec", ["t4.parked=explode", "nolabel", "t4.parked=kill->off"])
def test_malformed_env_fails_at_the_first_failpoint(tmp_path: Path, spec: str) -> None:
    """The import keeps the error (entry points report it first, without a traceback:
    ``shopops.validators.check_environment``); the first failpoint raises it, so nothing
    runs past a point it was told to act on."""
    code, out, err = run_child(
        "import shopops.failpoints as f\nprint('imported')\nf.failpoint('t4.parked')\n"
        "print('ran past it')", tmp_path, SHOPOPS_FAILPOINTS=spec)
    assert code != 0
    assert "imported" in out and "ran past it" not in out
    assert "FailpointSpecError" in err and "SHOPOPS_FAILPOINTS: bad entry" in err


# -- in this process ----------------------------------------------------------------------

@pytest.mark.pure
def test_disarmed_failpoint_is_a_no_op() -> None:
    assert failpoints._armed is None
    for label in labels.CATALOGUE:
        assert failpoints.failpoint(label.name) is None
    assert failpoints.failpoint("not.a.label") is None  # labels are only checked when armed
    assert failpoints._armed is None


@pytest.mark.pure
def test_armed_unknown_label_is_a_value_error() -> None:
    failpoints.configure("t4.parked=off")
    with pytest.raises(ValueError, match="not in shopops_contract.labels.CATALOGUE"):
        failpoints.failpoint("t4.parkd")


@pytest.mark.pure
def test_counted_chain_in_process() -> None:
    failpoints.configure("t1.get_order=2*off->1*raise->off")
    failpoints.failpoint("t1.get_order")
    failpoints.failpoint("t1.get_order")
    with pytest.raises(FailpointRaised) as info:
        failpoints.failpoint("t1.get_order")
    assert info.value.label == "t1.get_order"
    failpoints.failpoint("t1.get_order")  # the chain moved on to off
    failpoints.failpoint("t4.parked")     # an unarmed label in an armed process


@pytest.mark.pure
def test_configure_resets_the_counters() -> None:
    failpoints.configure("t4.parked=1*off->raise")
    failpoints.failpoint("t4.parked")
    failpoints.configure("t4.parked=1*off->raise")
    failpoints.failpoint("t4.parked")  # first hit again after reconfiguring
    with pytest.raises(FailpointRaised):
        failpoints.failpoint("t4.parked")


# -- actions in real subprocesses ---------------------------------------------------------

TWO_HITS = """
    from shopops.failpoints import failpoint
    print("before", flush=True)
    failpoint("t6.request_leaving")
    print("after-1", flush=True)
    failpoint("t6.request_leaving")
    print("after-2", flush=True)
"""


def test_kill_is_sigkill_exactly(tmp_path: Path) -> None:
    code, out, err = run_child(TWO_HITS, tmp_path, SHOPOPS_FAILPOINTS="t6.request_leaving=kill")
    assert code == -signal.SIGKILL
    assert out.split() == ["before"]
    assert err == ""


def test_off_then_kill_passes_the_first_hit_and_dies_at_the_second(tmp_path: Path) -> None:
    code, out, _ = run_child(TWO_HITS, tmp_path,
                             SHOPOPS_FAILPOINTS="t6.request_leaving=1*off->kill")
    assert code == -signal.SIGKILL
    assert out.split() == ["before", "after-1"]


def test_off_everywhere_runs_to_the_end(tmp_path: Path) -> None:
    code, out, _ = run_child(TWO_HITS, tmp_path, SHOPOPS_FAILPOINTS="t6.request_leaving=off")
    assert code == 0
    assert out.split() == ["before", "after-1", "after-2"]


def test_raise_raises_failpoint_raised(tmp_path: Path) -> None:
    code, out, err = run_child("""
        from shopops.errors import FailpointRaised
        from shopops.failpoints import failpoint
        try:
            failpoint("t3.checkpoint_saved")
        except FailpointRaised as exc:
            print("caught", exc.label, flush=True)
        failpoint("t3.checkpoint_saved")
        print("unreachable", flush=True)
    """, tmp_path, SHOPOPS_FAILPOINTS="t3.checkpoint_saved=raise")
    assert out.split() == ["caught", "t3.checkpoint_saved"]
    assert code == 1
    assert "shopops.errors.FailpointRaised: failpoint t3.checkpoint_saved armed to raise" in err


def test_sleep_delays_the_hit(tmp_path: Path) -> None:
    code, out, err = run_child("""
        import time
        from shopops.failpoints import failpoint
        t = time.monotonic()
        failpoint("t2.send_proposed")
        print(time.monotonic() - t, flush=True)
    """, tmp_path, SHOPOPS_FAILPOINTS="t2.send_proposed=sleep(200)")
    assert code == 0, err
    assert float(out) >= 0.2


# -- the controller channel ---------------------------------------------------------------

@pytest.fixture
def channel() -> Iterator[tuple[str, socket.socket]]:
    """A listening Unix socket under /tmp (tmp_path may exceed AF_UNIX's ~108 bytes)."""
    folder = tempfile.mkdtemp(prefix="fp-")
    path = os.path.join(folder, "ch.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
        server.listen(1)
        server.settimeout(TIMEOUT_S)
        yield path, server
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


class Controller:
    """The harness's side of one worker connection: read hit lines, send replies."""

    def __init__(self, server: socket.socket) -> None:
        self.conn, _ = server.accept()
        self.conn.settimeout(TIMEOUT_S)
        self.reader = self.conn.makefile("rb")

    def hit(self) -> dict[str, object]:
        line = self.reader.readline()
        assert line.endswith(b"\n"), f"no complete hit line: {line!r}"
        data = json.loads(line)
        assert isinstance(data, dict)
        return data

    def reply(self, message: dict[str, object]) -> None:
        self.conn.sendall(json.dumps(message).encode() + b"\n")

    def close(self) -> None:
        self.reader.close()
        self.conn.close()


CHANNEL_CHILD = """
    from shopops.failpoints import failpoint
    failpoint("t1.get_customer")
    print("between", flush=True)
    failpoint("t1.get_order")
    print("after", flush=True)
"""


def test_channel_reports_hits_and_the_kill_lands_at_the_point(
        tmp_path: Path, channel: tuple[str, socket.socket]) -> None:
    path, server = channel
    with child(CHANNEL_CHILD, tmp_path, SHOPOPS_FAILPOINT_CHANNEL=path) as proc:
        ctl = Controller(server)
        try:
            first = ctl.hit()
            assert first == {"label": "t1.get_customer", "pid": proc.pid, "occurrence": 1,
                             "action": "off"}
            ctl.reply({"do": "continue"})
            second = ctl.hit()  # the worker now blocks, waiting for our reply
            assert second == {"label": "t1.get_order", "pid": proc.pid, "occurrence": 1,
                              "action": "off"}
            os.kill(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=TIMEOUT_S)
        finally:
            ctl.close()
    assert proc.returncode == -9
    assert out.split() == ["between"]  # never printed what comes after the second point
    assert err == ""


def test_channel_counts_occurrences_of_one_label(
        tmp_path: Path, channel: tuple[str, socket.socket]) -> None:
    path, server = channel
    code = """
        from shopops.failpoints import failpoint
        for _ in range(3):
            failpoint("t6.request_leaving")
        print("done", flush=True)
    """
    with child(code, tmp_path, SHOPOPS_FAILPOINT_CHANNEL=path,
               SHOPOPS_FAILPOINTS="t6.request_leaving=2*off->raise") as proc:
        ctl = Controller(server)
        try:
            seen = []
            for _ in range(2):
                hit = ctl.hit()
                seen.append((hit["occurrence"], hit["action"]))
                ctl.reply({"do": "continue"})
            hit = ctl.hit()
            seen.append((hit["occurrence"], hit["action"]))
            ctl.reply({"do": "continue"})  # a local raise is not overridden by the controller
            out, err = proc.communicate(timeout=TIMEOUT_S)
        finally:
            ctl.close()
    assert seen == [(1, "off"), (2, "off"), (3, "raise")]
    assert proc.returncode == 1 and "FailpointRaised" in err and out == ""


@pytest.mark.parametrize(("reply", "code", "marker"), [
    ({"do": "raise"}, 1, "FailpointRaised"),
    ({"do": "kill"}, -signal.SIGKILL, ""),
    ({"do": "sleep", "ms": 1}, 0, ""),
    ({"do": "dance"}, 1, "FailpointChannelError"),
])
def test_channel_reply_decides_the_action(tmp_path: Path, channel: tuple[str, socket.socket],
                                          reply: dict[str, object], code: int,
                                          marker: str) -> None:
    path, server = channel
    with child("""
        from shopops.failpoints import failpoint
        failpoint("t4.parked")
        print("after", flush=True)
    """, tmp_path, SHOPOPS_FAILPOINT_CHANNEL=path) as proc:
        ctl = Controller(server)
        try:
            assert ctl.hit()["label"] == "t4.parked"
            ctl.reply(reply)
            out, err = proc.communicate(timeout=TIMEOUT_S)
        finally:
            ctl.close()
    assert proc.returncode == code
    assert ("after" in out) == (code == 0)
    assert marker in err


def test_channel_closed_without_reply_stops_the_worker(
        tmp_path: Path, channel: tuple[str, socket.socket]) -> None:
    path, server = channel
    with child(CHANNEL_CHILD, tmp_path, SHOPOPS_FAILPOINT_CHANNEL=path) as proc:
        ctl = Controller(server)
        ctl.hit()
        ctl.close()  # the controller went away: the worker must not run past the point
        out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 1
    assert out == ""
    assert "FailpointChannelError" in err and "t1.get_customer" in err


@pytest.mark.io
def test_unreachable_channel_is_an_error_in_process() -> None:
    folder = tempfile.mkdtemp(prefix="fp-")
    try:
        missing = os.path.join(folder, "nobody.sock")
        failpoints.configure(None, missing)
        with pytest.raises(FailpointChannelError) as info:
            failpoints.failpoint("t0.case_started")
        assert (info.value.path, info.value.label) == (missing, "t0.case_started")
    finally:
        shutil.rmtree(folder, ignore_errors=True)

