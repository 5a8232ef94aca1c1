"""Benchmark: grading a foreign implementation against grading the reference.

Grades, one after the other, (1) the reference (``Sut()``: a fork server preloaded with
``shopops``), (2) a foreign copy of the reference (``Sut(path=copy)``: untrusted, sealed,
workers forked by the sealed fork server, ``harness.forkserver.sealed``) and, with ``--spawn``,
(3) the same copy with a fresh interpreter per worker (the old way). Prints one line per
grade and, on its last line, a JSON object::

    {"reference_s", "foreign_fork_s", "foreign_spawn_s", "ratio_fork", "ratio_spawn",
     "executions", "items", "sealed", "jobs"}

``ratio_*`` is the foreign grade's wall time over the reference's (the issue's target: about
2 or less for the fork server). Scores must match (the copy is the reference).

Run (as root, so the foreign grade is sealed): ``python benchmarks/grade_bench.py
[--items N] [--jobs 2] [--spawn]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.grading.grade import DEFAULT_RUBRIC, grade  # noqa: E402
from harness.launch.sealed import Sut  # noqa: E402
from harness.sandbox import users as sandbox  # noqa: E402


def timed(sut: Sut, out: Path, items: int, jobs: int, launcher: str | None
          ) -> tuple[float, float]:
    """Wall seconds and score of one grade."""
    started = time.monotonic()
    result = grade(sut, out, rubric=DEFAULT_RUBRIC[:items], jobs=jobs, launcher=launcher)
    return time.monotonic() - started, result.score


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--items", type=int, default=len(DEFAULT_RUBRIC),
                        help="first N rubric items (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel executions")
    parser.add_argument("--spawn", action="store_true",
                        help="also grade the copy with a fresh interpreter per worker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grade-bench-") as tmp:
        copy = Path(tmp) / "student"
        shutil.copytree(ROOT / "shopops", copy / "shopops",
                        ignore=shutil.ignore_patterns("__pycache__"))
        ref_s, ref_score = timed(Sut(), Path(tmp) / "ref", args.items, args.jobs, None)
        print(f"reference:      {ref_s:7.1f} s  score {ref_score:g}", flush=True)
        fork_s, fork_score = timed(Sut(path=copy), Path(tmp) / "fork", args.items, args.jobs,
                                   None)
        print(f"foreign (fork): {fork_s:7.1f} s  score {fork_score:g}", flush=True)
        spawn_s = None
        if args.spawn:
            spawn_s, spawn_score = timed(Sut(path=copy), Path(tmp) / "spawn", args.items,
                                         args.jobs, "spawn")
            print(f"foreign (spawn):{spawn_s:7.1f} s  score {spawn_score:g}", flush=True)
        summary = json.loads((Path(tmp) / "ref" / "run" / "summary.json").read_text())
    print(json.dumps({
        "reference_s": round(ref_s, 2), "foreign_fork_s": round(fork_s, 2),
        "foreign_spawn_s": None if spawn_s is None else round(spawn_s, 2),
        "ratio_fork": round(fork_s / ref_s, 2),
        "ratio_spawn": None if spawn_s is None else round(spawn_s / ref_s, 2),
        "executions": len(summary["executions"]), "items": args.items,
        "sealed": sandbox.available(), "jobs": args.jobs,
    }))
    return 0 if fork_score == ref_score else 1


if __name__ == "__main__":
    sys.exit(main())
