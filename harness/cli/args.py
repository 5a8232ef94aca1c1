"""The command line of ``shopops-chaos``: its argument parser and the value types of its
options (each a validator of ``shopops.validators``, so a bad value is refused by argparse
with one line naming the option and what is allowed). ``harness.cli.commands`` runs the commands."""

from __future__ import annotations

import argparse

from harness.grading.targets import GRADE_KINDS, TARGET_HELP
from harness.model import CrashSchedule
from shopops import validators as v

__all__ = ["DEFAULT_EXPLORE", "DEFAULT_SCENARIOS", "build_parser"]

DEFAULT_SCENARIOS = "scenarios"
DEFAULT_EXPLORE = "o1001.toml"

_JOBS = v.argtype(v.parse_jobs, "jobs")
_FOLDER = v.argtype(v.folder_path, "folder")
_SUT = v.argtype(v.existing_folder, "folder")
_OUT_FILE = v.argtype(v.output_file, "file")
_SHARD = v.argtype(lambda t: t if t.strip() == "auto" else (v.shard_spec(t), t)[1], "shard")
_DURATIONS = v.argtype(v.existing_path, "summary")
_EXISTING_FOLDER = v.argtype(v.existing_folder, "folder")



#: What ``shopops-chaos --help`` says first (the module docstring is for developers).
DESCRIPTION = ("Crash-test a durable agent loop: run it in real processes, SIGKILL it at "
               "every labelled point of its crash timeline, resume it, and judge from the "
               "harness's own evidence whether work was lost, a human asked twice or an "
               "email sent twice.")

def _schedule(text: str) -> str:
    """``--schedule``: the text, once it parses as a crash schedule (``CrashSchedule``)."""
    if not text.strip():
        raise ValueError("empty; allowed: 'no-kill' or kill points joined by '>'")
    CrashSchedule.parse(text)
    return text


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``shopops-chaos --help``)."""
    parser = argparse.ArgumentParser(prog="shopops-chaos", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run the kill matrix of scenario files and write reports")
    p.add_argument("paths", nargs="*", help="scenario files or folders, or the names of "
                   "shipped scenarios (o1001); default: scenarios/, else the shipped catalogue")
    p.add_argument("--schedule", default=None, type=v.argtype(_schedule, "schedule"),
                   help="run only this crash schedule, e.g. 't3.checkpoint_saved>t6.gateway_"
                        "accepted' or 'no-kill' (what a report's replay command uses)")
    p.add_argument("--report-dir", default="reports", type=_FOLDER,
                   help="where reports/<run-id>/ goes")
    p.add_argument("--jobs", "-j", type=_JOBS, default=None,
                   help="executions in parallel (default: the CPUs this process may use, plus "
                        "one; at most 4 per core)")
    p.add_argument("--timeout", type=v.WORKER_TIMEOUT_S, default=30.0,
                   help="seconds one worker may run before it is killed (verdict unknown; "
                        "0.001 to 86400)")
    p.add_argument("--launcher", choices=("fork", "spawn"), default="fork",
                   help="how workers start: forked from a pre-imported server (default, "
                        "fast) or a fresh interpreter each (full isolation)")
    p.add_argument("--repeat", type=v.REPEAT, default=1, metavar="N",
                   help="soak: run the whole matrix N times (the same ids each time; "
                        "soak.json says which repeat each execution belongs to)")
    p.add_argument("--exhaustive", action="store_true",
                   help="run every execution of a double-crash matrix: without it, for the "
                        "reference, one whose first crash left a state already run is "
                        "reported as equivalent to it (a seeded 5%% still run and checked)")
    p.add_argument("--fail-fast", action="store_true",
                   help="stop at the first failing execution (no new execution, no further "
                        "repeat)")
    p.add_argument("--sut", default=None, type=_SUT,
                   help="folder holding the implementation to test (default: the reference); "
                        "it runs under limits, with fresh interpreters")
    p.add_argument("--module", default="shopops", type=v.MODULE,
                   help="its package name (python -m MODULE)")
    p.add_argument("--target", default=None, choices=GRADE_KINDS, help=TARGET_HELP)
    p.add_argument("--shard", default=None, metavar="I/N|auto", type=_SHARD,
                   help="run only part I of N (1-based) of the matrix, cut by expected cost "
                        "the same way on every machine; 'auto' reads SHOPOPS_SHARD, GitLab "
                        "CI_NODE_INDEX/CI_NODE_TOTAL, CircleCI or Buildkite; without the "
                        "option SHOPOPS_SHARD=I/N still applies. Combine with "
                        "'shopops-chaos merge'")
    p.add_argument("--durations", default=None, metavar="SUMMARY", type=_DURATIONS,
                   help="with --shard: an earlier run's summary.json (or its folder) whose "
                        "execution times balance the shards; give every shard the same file "
                        "(merge refuses shards that cut the matrix differently)")
    _add_keep_options(p)
    e = sub.add_parser("explore", help="let Hypothesis draw crash schedules against a scenario "
                                       "and shrink a failure to the smallest one")
    e.add_argument("scenario", nargs="?", default=None,
                   help=f"the scenario file to vary (default: scenarios/{DEFAULT_EXPLORE})")
    e.add_argument("--examples", type=v.EXAMPLES, default=None, metavar="N",
                   help="variants to draw (default: 40 with --profile ci, 100 with dev)")
    e.add_argument("--seed", type=v.SEED, default=None,
                   help="Hypothesis seed: repeat a run's draws (ci default: its fixed "
                        "derandomised sequence; dev default: a fresh seed, printed; with a "
                        "seed the example database is not used)")
    e.add_argument("--profile", choices=("ci", "dev"), default="ci",
                   help="ci: derandomised, no example database; dev: randomised, failing "
                        "examples kept under .hypothesis/explore/")
    e.add_argument("--report-dir", default="reports", type=_FOLDER,
                   help="where reports/<run-id>/ goes")
    e.add_argument("--timeout", type=v.WORKER_TIMEOUT_S, default=30.0,
                   help="seconds one worker may run before it is killed (verdict unknown)")
    e.add_argument("--launcher", choices=("fork", "spawn"), default="fork",
                   help="how workers start (default fork: one fork server for the whole "
                        "exploration)")
    g = sub.add_parser("grade", help="grade an implementation of the chapter (Gradescope "
                                     "results.json and report.md)")
    g.add_argument("--sut", default=None, type=_SUT,
                   help="folder holding the implementation's package (default: the reference)")
    g.add_argument("--module", default="shopops", type=v.MODULE,
                   help="its package name (python -m MODULE)")
    g.add_argument("--target", default=None, choices=GRADE_KINDS, help=TARGET_HELP)
    g.add_argument("--rubric", default=None, type=v.argtype(v.existing_file, "file"),
                   help="rubric TOML file (default: built in)")
    g.add_argument("--out", default=None, type=_FOLDER,
                   help="output folder (default reports/grade-<id>)")
    g.add_argument("--results", default=None, type=_OUT_FILE,
                   help="where results.json goes (default OUT/results.json; Gradescope: "
                        "/autograder/results/results.json)")
    g.add_argument("--timeout", type=v.WORKER_TIMEOUT_S, default=30.0,
                   help="seconds per worker (0.001 to 86400)")
    g.add_argument("--jobs", "-j", type=_JOBS, default=None,
                   help="parallel executions (at most 4 per core)")
    m = sub.add_parser("merge", help="combine the report folders of 'run --shard' into one "
                                     "run's reports, with the combined exit status")
    m.add_argument("folders", nargs="+", type=_EXISTING_FOLDER, metavar="DIR",
                   help="every shard's run folder (the one holding run.json)")
    m.add_argument("--report-dir", default="reports", type=_FOLDER,
                   help="where the merged reports/<run-id>/ goes (latest points at it)")
    sub.add_parser("points", help="list the labelled points of the crash timeline")
    gw = sub.add_parser("gateway", help="the harness's mock email gateway")
    gsub = gw.add_subparsers(dest="gateway_command", required=True)
    serve = gsub.add_parser("serve", help="serve the mock gateway on loopback until "
                                          "interrupted (SIGINT/SIGTERM)")
    serve.add_argument("--db", default="gateway.db", type=v.argtype(v.file_path, "path"),
                       help="the gateway's durable log")
    serve.add_argument("--port", type=v.PORT, default=0,
                       help="port 0-65535 (default 0: ephemeral)")
    serve.add_argument("--smtp", action="store_true",
                       help="also serve SMTP on an ephemeral loopback port (printed); Resend's "
                            "POST /emails is always served")
    return parser


def _add_keep_options(p: argparse.ArgumentParser) -> None:
    from harness.reports.runs import DEFAULT_KEEP_RUNS

    p.add_argument("--keep-runs", type=v.Number(1, 10_000, integer=True),
                   default=DEFAULT_KEEP_RUNS, metavar="N",
                   help=f"keep the newest N complete run folders under --report-dir and "
                        f"remove older ones (default {DEFAULT_KEEP_RUNS})")
    p.add_argument("--keep-all", action="store_true",
                   help="keep every execution's files (default: only those of failing and "
                        "unknown executions; a passing one keeps no folder)")
