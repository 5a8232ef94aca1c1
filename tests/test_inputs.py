"""Every entry point fails closed on bad input (issue 14): a clear one-line error naming the
input, its value and what is allowed; exit 2 (``shopops`` CLI: 2 for an option, 1 for a
bad ``SHOPOPS_*`` variable — its contract); no traceback, no run folder, no file changed,
no process started. In this process (fast); ``test_inputs_fuzz.py`` draws many more, and a
few cases run as real subprocesses at the end (import-time environment, ``python -m``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from input_helpers import assert_refused, call, tree

from shopops import validators as v

OK_SCENARIO = 'name = "ok"\n[crash]\npoints = ["t4.parked"]\nbaseline = false\n'


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """A folder with one valid scenario file, ``ok.toml``, an existing ``reports/`` and a
    plain Python target, ``impl/loop.py`` (``start``, ``resume``)."""
    (tmp_path / "ok.toml").write_text(OK_SCENARIO)
    (tmp_path / "reports").mkdir()
    (tmp_path / "impl").mkdir()
    (tmp_path / "impl" / "loop.py").write_text("def start(ctx):\n    pass\n\n\n"
                                               "def resume(ctx):\n    pass\n")
    return tmp_path


RUN = ("run", "ok.toml", "--report-dir", "reports")

CHAOS_OPTIONS = [
    # (argv, names the error line must contain)
    ((*RUN, "--jobs", "100000"), ("--jobs", "100000", "at most 4 per core")),
    ((*RUN, "--jobs", "0"), ("--jobs", "'0'")),
    ((*RUN, "-j", "1.5"), ("--jobs", "1.5")),
    ((*RUN, "--timeout", "1e308"), ("--timeout", "1e308", "0.001 to 86400 seconds")),
    ((*RUN, "--timeout", "1e-9"), ("--timeout", "1e-9")),
    ((*RUN, "--timeout", "nan"), ("--timeout", "nan")),
    ((*RUN, "--timeout", "inf"), ("--timeout", "inf")),
    # Python 3.11's argparse stores [] for "--x=--" without calling the type (found by the
    # soak fuzz): refused by validators.parse_args
    ((*RUN, "--jobs=--"), ("--jobs", "'--' is not a value")),
    ((*RUN, "--timeout=--"), ("--timeout", "'--' is not a value")),
    (("explore", "x.toml", "--examples=--"), ("--examples", "'--' is not a value")),
    ((*RUN, "--timeout", "-1"), ("--timeout", "-1")),
    ((*RUN, "--schedule", "t4.parked#99999999999999999999"), ("--schedule", "1 to 1000")),
    ((*RUN, "--schedule", "t4.parked#0"), ("--schedule", "1 to 1000")),
    ((*RUN, "--schedule", "t4.nope"), ("--schedule", "unknown label")),
    ((*RUN, "--schedule", "  "), ("--schedule", "empty")),
    ((*RUN, "--schedule", ">".join(["ckpt.migration_before_commit#1000"] * 12)),
     ("--schedule", "at most 8")),
    ((*RUN, "--repeat", "0"), ("--repeat", "'0'")),
    ((*RUN, "--repeat", "99999999"), ("--repeat", "1 to 10000")),
    (("run", "ok.toml", "--report-dir", "ok.toml"), ("--report-dir", "is a file")),
    ((*RUN, "--sut", "nowhere"), ("--sut", "no such folder")),
    ((*RUN, "--module", "not a module"), ("--module", "Python module name")),
    (("explore", "ok.toml", "--report-dir", "reports", "--examples", "0"), ("--examples",)),
    (("explore", "ok.toml", "--report-dir", "reports", "--seed", "-1"), ("--seed", "-1")),
    (("explore", "ok.toml", "--report-dir", "reports", "--timeout", "nan"), ("--timeout",)),
    (("grade", "--timeout", "1e308"), ("--timeout", "1e308")),
    (("grade", "--jobs", "100000"), ("--jobs", "100000")),
    (("grade", "--rubric", "missing.toml"), ("--rubric", "no such file")),
    (("grade", "--results", "reports"), ("--results", "is a folder")),
    # the mock gateway is the harness's (``shopops`` never imports the harness)
    (("gateway", "serve", "--port", "99999"), ("--port", "99999", "0 to 65535")),
    (("gateway", "serve", "--port", "-1"), ("--port", "-1")),
    (("gateway", "serve", "--port", "http"), ("--port", "http")),
    (("gateway", "serve", "--db", "reports"), ("--db", "is a folder")),
]


@pytest.mark.parametrize(("argv", "names"), CHAOS_OPTIONS, ids=lambda x: " ".join(x)[:60])
def test_chaos_option_refused(cwd: Path, argv: tuple[str, ...], names: tuple[str, ...]
                              ) -> None:
    assert_refused(call("shopops-chaos", argv, cwd), 2, *names)


_TARGET = ('name = "x"\n[target]\nkind = "python"\nfolder = "impl"\nstart = "{start}"\n'
           'resume = "loop:resume"\n')

SCENARIOS = [
    # (file text, names): valid TOML, bad values
    ('name = "' + "a" * 5000 + '"\n', ("field 'name'", "1 to 64 characters", "5000 chars")),
    ('name = "' + "a" * 65 + '"\n', ("field 'name'", "1 to 64 characters")),
    ('name = "x\\u0000y"\n', ("field 'name'",)),
    ('name = "x"\ndescription = "line\\nbreak"\n', ("field 'description'",)),
    ('name = "x"\n[case]\ncase_id = "' + "c" * 300 + '"\n', ("field 'case.case_id'",)),
    ('name = "x"\n[human]\ndelay_hours = nan\n', ("field 'human.delay_hours'", "nan")),
    ('name = "x"\n[human]\ndelay_hours = inf\n', ("field 'human.delay_hours'", "inf")),
    ('name = "x"\n[human]\ndelay_hours = 1e308\n', ("field 'human.delay_hours'", "8784 hours")),
    ('name = "x"\n[storage]\nfault = "lock"\nlock_at = "t4.parked"\nlock_ms = 31536000000\n',
     ("field 'storage.lock_ms'", "60000 milliseconds")),
    ('name = "x"\n[concurrency]\nleases = true\nlease_ttl_s = nan\n',
     ("field 'concurrency.lease_ttl_s'",)),
    ('name = "x"\n[concurrency]\nleases = true\nlease_ttl_s = 1e300\n',
     ("field 'concurrency.lease_ttl_s'", "86400 seconds")),
    ('name = "x"\n[gateway]\nfaults = [{ kind = "latency", ms = 31536000000 }]\n',
     ("field 'gateway.faults'", "fault.ms")),
    ('name = "x"\n[crash]\npoints = ["t4.parked#99999999999999999999"]\n',
     ("field 'crash.points'", "1 to 1000")),
    ('name = "x"\n[crash]\nschedules = ["t4.parked>t6.request_leaving#1001"]\n',
     ("field 'crash.schedules'", "1 to 1000")),
    ('name = "x"\n[crash]\npoints = 3\n', ("field 'crash.points'",)),
    ('name = "x"\nsurprise = 1\n', ("field 'surprise'", "unknown")),
    # issue 24: nesting bounded before tomllib recurses (a RecursionError traceback)
    ('name = "x"\nv = ' + "[" * 5000 + "]" * 5000 + "\n",
     ("line 2", "nested more than 16 levels", "at most 16")),
    ('name = "x"\nv = ' + "{ a = " * 3000 + "1" + " }" * 3000 + "\n",
     ("nested more than 16 levels",)),
    # issue 24: a [target] refused before any worker starts
    (_TARGET.format(start="loop:nope"), ("field 'target.start'", "defines no 'nope'")),
    (_TARGET.format(start="os:system"), ("field 'target.start'", "no module 'os'",
                                         "inside")),
    (_TARGET.format(start="loop:start").replace('"impl"', '"' + "../" * 30 + 'etc"'),
     ("field 'target.folder'", "/etc", "outside the allowed places")),
]


@pytest.mark.parametrize(("text", "names"), SCENARIOS, ids=lambda x: str(x)[:50])
def test_scenario_field_refused(cwd: Path, text: str, names: tuple[str, ...]) -> None:
    (cwd / "bad.toml").write_text(text)
    for argv in (("run", "bad.toml", "--report-dir", "reports"),
                 ("explore", "bad.toml", "--report-dir", "reports")):
        assert_refused(call("shopops-chaos", argv, cwd), 2, "bad.toml", *names)


@pytest.mark.parametrize("make", ["fifo", "socket"])
def test_a_scenario_that_is_not_a_regular_file_is_refused(cwd: Path, make: str) -> None:
    """A FIFO given as a scenario file hung ``run`` forever (issue 24): opened without
    blocking and refused as what it is."""
    import socket

    if make == "fifo":
        os.mkfifo(cwd / "bad.toml")
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(cwd / "bad.toml"))
        sock.close()
    for argv in (("run", "bad.toml", "--report-dir", "reports"),
                 ("explore", "bad.toml", "--report-dir", "reports")):
        assert_refused(call("shopops-chaos", argv, cwd), 2, "bad.toml",
                       f"is a {'FIFO' if make == 'fifo' else 'socket'}",
                       "allowed: a regular file")


@pytest.mark.parametrize(("make", "names"), [
    ("fifo", ("FIFO", "not a regular file")),
    ("nested", ("nested more than 64 levels", "at most 64")),
    ("garbage", ("not a summary.json",)),
])
def test_a_bad_durations_file_is_refused_with_or_without_shard(
        cwd: Path, make: str, names: tuple[str, ...]) -> None:
    """``--durations`` was read only with ``--shard`` (a nested file passed silently) and a
    FIFO would block: read whenever given, a regular file, nesting bounded."""
    summary = cwd / "summary.json"
    if make == "fifo":
        os.mkfifo(summary)
    else:
        summary.write_text("[" * 100_000 + "]" * 100_000 if make == "nested" else "{}")
    for shard in ((), ("--shard", "1/2")):
        o = call("shopops-chaos", (*RUN, "--durations", "summary.json", *shard), cwd)
        assert_refused(o, 2, "--durations", "summary.json", *names)


@pytest.mark.parametrize(("make", "names"), [
    ("fifo", ("is a FIFO", "allowed: a regular file")),
    ("nested", ("nested more than 64 levels",)),
])
def test_merge_refuses_a_bad_run_json_before_writing(cwd: Path, make: str,
                                                     names: tuple[str, ...]) -> None:
    """A deeply nested ``run.json`` ended ``merge`` in a ``RecursionError`` traceback."""
    for shard in ("a", "b"):
        (cwd / shard).mkdir()
        if make == "fifo":
            os.mkfifo(cwd / shard / "run.json")
        else:
            (cwd / shard / "run.json").write_text('{"run": ' + "[" * 50_000 + "]" * 50_000
                                                  + "}")
    o = call("shopops-chaos", ("merge", "a", "b", "--report-dir", "reports"), cwd)
    assert_refused(o, 2, "a/run.json", *names)


def test_symlink_loop_is_named_as_a_loop(cwd: Path) -> None:
    os.symlink("loop-b.toml", cwd / "loop-a.toml")
    os.symlink("loop-a.toml", cwd / "loop-b.toml")
    o = call("shopops-chaos", ("run", "loop-a.toml", "--report-dir", "reports"), cwd)
    assert_refused(o, 2, "loop-a.toml", "symlink loop")


def test_a_refused_run_leaves_latest_where_it_was(cwd: Path) -> None:
    old = cwd / "reports" / "20260101T000000Z-1"
    old.mkdir()
    (cwd / "reports" / "latest").symlink_to(old.name)
    (cwd / "bad.toml").write_text('name = "' + "a" * 5000 + '"\n')
    assert_refused(call("shopops-chaos", ("run", "bad.toml", "--report-dir", "reports"), cwd),
                   2, "bad.toml")
    assert os.readlink(cwd / "reports" / "latest") == old.name


CHAOS_ENV = [
    ({"SHOPOPS_CLOCK_OFFSET_S": "nan"}, ("SHOPOPS_CLOCK_OFFSET_S", "nan")),
    ({"SHOPOPS_FAILPOINTS": "bogus"}, ("SHOPOPS_FAILPOINTS", "bogus")),
    ({"SHOPOPS_POLCY": "varying"}, ("SHOPOPS_POLCY", "unknown variable")),
    # issue 24: /proc passed as "an existing folder", then the run wrote its folder and
    # moved latest before failing as a harness error
    ({"SHOPOPS_SCRATCH": "/proc"}, ("SHOPOPS_SCRATCH", "/proc", "kernel filesystem",
                                    "allowed: auto, off")),
    ({"SHOPOPS_SCRATCH": "/proc/self"}, ("SHOPOPS_SCRATCH", "kernel filesystem")),
    ({"SHOPOPS_SCRATCH": "/sys/kernel"}, ("SHOPOPS_SCRATCH", "kernel filesystem")),
]


@pytest.mark.parametrize(("env", "names"), CHAOS_ENV, ids=lambda x: str(x)[:40])
def test_chaos_environment_refused(cwd: Path, env: dict[str, str], names: tuple[str, ...]
                                   ) -> None:
    assert_refused(call("shopops-chaos", RUN, cwd, env), 2, *names)


SHOPOPS_OPTIONS = [
    (("run", "--owner", "w", "--lease-ttl", "nan"), ("--lease-ttl", "nan")),
    (("run", "--lease-ttl=--"), ("--lease-ttl", "'--' is not a value")),
    (("run", "--owner", "w", "--lease-ttl", "-1"), ("--lease-ttl", "-1")),
    (("run", "--lease-ttl", "1e308"), ("--lease-ttl", "86400 seconds")),
    (("resume", "--lease-ttl", "inf"), ("--lease-ttl", "inf")),
    (("run", "--read-timeout", "nan"), ("--read-timeout", "nan")),
    (("run", "--read-timeout", "1e308"), ("--read-timeout", "3600 seconds")),
    (("history", "--db", "folder"), ("--db", "is a folder")),
    (("run", "--db", "folder"), ("--db", "is a folder")),
    (("migrate", "folder"), ("db", "is a folder")),
    (("run", "--db", "nowhere/x.db"), ("--db", "does not exist")),
    (("run", "--db", "x" * 300 + ".db"), ("--db", "too long")),
    (("run", "--approvals", "folder"), ("--approvals", "is a folder")),
    (("run", "--case", "c" * 5000), ("--case", "1 to 200 characters")),
    (("run", "--case", "case\x1b[31m"), ("--case",)),
    (("run", "--run-id", ""), ("--run-id",)),
    (("run", "--gateway", "ftp://example.com"), ("--gateway", "http://")),
    (("run", "--gateway", "http://127.0.0.1:99999"), ("--gateway", "0-65535")),
    (("approve", "--ticket", "a b"), ("--ticket",)),
]


@pytest.mark.parametrize(("argv", "names"), SHOPOPS_OPTIONS, ids=lambda x: " ".join(x)[:60])
def test_shopops_option_refused(tmp_path: Path, argv: tuple[str, ...],
                                names: tuple[str, ...]) -> None:
    (tmp_path / "folder").mkdir()
    assert_refused(call("shopops", argv, tmp_path), 2, *names)


def test_shopops_symlink_loop_is_named_as_a_loop(tmp_path: Path) -> None:
    os.symlink("b.db", tmp_path / "a.db")
    os.symlink("a.db", tmp_path / "b.db")
    for argv in (("history", "--db", "a.db"), ("run", "--db", "a.db"), ("migrate", "a.db")):
        assert_refused(call("shopops", argv, tmp_path), 2, "a.db", "symlink loop")


SHOPOPS_ENV = [
    ({"SHOPOPS_CLOCK_OFFSET_S": "nan"}, ("SHOPOPS_CLOCK_OFFSET_S", "nan")),
    ({"SHOPOPS_CLOCK_OFFSET_S": "1e300"}, ("SHOPOPS_CLOCK_OFFSET_S", "1e300")),
    ({"SHOPOPS_FAILPOINTS": "t4.parked=explode"},
     ("FailpointSpecError", "SHOPOPS_FAILPOINTS", "explode")),
    ({"SHOPOPS_FAILPOINTS": "t4.parked=sleep(31536000000)"},
     ("FailpointSpecError", "SHOPOPS_FAILPOINTS", "at most 86400000 ms")),
    ({"SHOPOPS_FAILPOINTS": "t4.parked=99999*kill"},
     ("FailpointSpecError", "SHOPOPS_FAILPOINTS", "1 to 1000")),
    ({"SHOPOPS_IDEMPOTENCY_KEYS": "maybe"}, ("SHOPOPS_IDEMPOTENCY_KEYS", "on, off")),
    ({"SHOPOPS_POLICY": "random"}, ("SHOPOPS_POLICY", "deterministic, varying")),
    ({"SHOPOPS_GATEWAY_URL": "http://127.0.0.1:70000"}, ("SHOPOPS_GATEWAY_URL",)),
    ({"SHOPOPS_FIXTURES": "nowhere"}, ("SHOPOPS_FIXTURES", "no such folder")),
    ({"SHOPOPS_APPROVALS_DB": "folder"}, ("SHOPOPS_APPROVALS_DB", "is a folder")),
    ({"SHOPOPS_FAILPOINT_CHANNEL": "/tmp/" + "s" * 200}, ("SHOPOPS_FAILPOINT_CHANNEL",)),
    ({"SHOPOPS_READ_TIMEOUT_S": "-5"}, ("SHOPOPS_READ_TIMEOUT_S", "-5")),
    ({"SHOPOPS_IDEMPOTENCY_KEY": "off"}, ("SHOPOPS_IDEMPOTENCY_KEY", "unknown variable")),
]


@pytest.mark.parametrize(("env", "names"), SHOPOPS_ENV, ids=lambda x: str(x)[:40])
def test_shopops_environment_refused(tmp_path: Path, env: dict[str, str],
                                     names: tuple[str, ...]) -> None:
    """A bad variable is a typed refusal (``ConfigError`` or ``FailpointSpecError``, exit 1:
    the adapter contract's ``shopops: error: <ErrorName>: ...`` line), before any database
    is created."""
    (tmp_path / "folder").mkdir()
    typed = () if "FailpointSpecError" in names else ("ConfigError",)
    for argv in (("run",), ("approve",), ("history",)):
        assert_refused(call("shopops", argv, tmp_path, env), 1, *typed, *names)


def test_validators_refuse_what_argparse_would_let_through() -> None:
    """The shared bounds themselves (the CLIs and scenario fields use these objects)."""
    for rule, good, bad in (
            (v.WORKER_TIMEOUT_S, [0.001, 30, 86400], [0, 1e-9, 86400.5, float("nan"), True]),
            (v.PORT, [0, 8080, 65535], [-1, 65536, 1.0, False]),
            (v.OCCURRENCE, [1, 1000], [0, 1001, 10**20])):
        for value in good:
            assert rule.check(value) == value
        for value in bad:
            with pytest.raises(ValueError, match="must be"):
                rule.check(value)
    assert v.jobs().check(v.max_jobs()) == v.max_jobs()
    with pytest.raises(ValueError):
        v.jobs().check(v.max_jobs() + 1)


# -- as real processes: what only a fresh interpreter shows ------------------------------

@pytest.mark.processes
def test_bad_failpoint_spec_in_a_fresh_shopops_is_one_line(tmp_path: Path) -> None:
    """``SHOPOPS_FAILPOINTS`` is read when ``shopops`` is imported: still one line, exit 1,
    and no database created."""
    env = {k: val for k, val in os.environ.items() if not k.startswith("SHOPOPS_")}
    env["SHOPOPS_FAILPOINTS"] = "t4.parked=sleep(31536000000)"
    proc = subprocess.run([sys.executable, "-m", "shopops", "run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("shopops: error: FailpointSpecError: SHOPOPS_FAILPOINTS")
    assert tree(tmp_path) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="sealed (a copy made as root) needs root")
@pytest.mark.parametrize("make", ["symlink", "fifo"])
def test_a_sut_folder_that_cannot_be_copied_as_root_is_refused_before_anything_runs(
        cwd: Path, make: str) -> None:
    """``run --sut`` as root copies the package for the sandbox (``harness.sandbox.code_copy``): a
    symlink (to ``/``: the whole filesystem was copied) or a FIFO (the copy blocked) in it
    is one error line naming the entry, and nothing runs."""
    impl = cwd / "impl" / "shopops"
    impl.mkdir(parents=True)
    (impl / "__init__.py").write_text("")
    (impl / "__main__.py").write_text("raise SystemExit(0)\n")
    if make == "symlink":
        (impl / "root").symlink_to("/")
    else:
        os.mkfifo(impl / "root")
    o = call("shopops-chaos", (*RUN, "--sut", "impl"), cwd)
    assert_refused(o, 2, "--sut impl", "'root' is a " + ("symlink" if make == "symlink"
                                                       else "FIFO"))


def test_nesting_counts_brackets_outside_strings_and_comments() -> None:
    """``harness.model.input_files.check_nesting``: brackets in strings (all four TOML
    forms, JSON with escapes) and TOML comments do not count; real nesting does, and the
    refusal names the line."""
    from harness.model.input_files import InputFileError, check_nesting

    toml_ok = ('a = "[[[[\\"[["\nb = \'[[[[\'\nc = """\n[[[[\n"""\nd = \'\'\'[[[[\'\'\'\n'
               '# [[[[[[\ne = [[1]]\n')
    check_nesting(toml_ok, "ok.toml", 2, toml=True)
    with pytest.raises(InputFileError, match="line 8: nested more than 1"):
        check_nesting(toml_ok, "ok.toml", 1, toml=True)
    json_ok = '{"a": "[[[[\\"[[[", "b":\n[[1]]}'
    check_nesting(json_ok, "run.json", 3, toml=False)
    with pytest.raises(InputFileError, match="line 2: nested more than 2"):
        check_nesting(json_ok, "run.json", 2, toml=False)
