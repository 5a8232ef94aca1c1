"""``shopops-chaos merge``: N shards merged give the same verdicts, counts, duplicates,
junit and exit status as one run; folders that do not belong together are refused. The
same real runs prove the shards themselves (``harness.plan.shard``): their executions are
exactly the unsharded run's, once each, with its verdicts, every shard cutting the matrix
the same way (test_shard.py holds the cut's pure properties)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from junitparser import JUnitXml

from harness.reports.codec import CodecError, decode, encode

ROOT = Path(__file__).resolve().parent.parent
BROKEN = """name = "broken"
[sut]
idempotency_keys = false
[crash]
points = ["t6.gateway_accepted", "t4.parked"]
"""
LISTED = """name = "listed"
[crash]
points = ["t6.gateway_accepted"]
schedules = ["t4.parked>t6.checkpoint_loaded"]
double = true
"""  # listed points, a listed pair, and a double row


def chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def folder(base: Path) -> Path:
    return (base / "latest").resolve()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One whole run and its two shards, of a learned-points scenario, a failing one and
    one with a listed pair and a double row."""
    tmp = tmp_path_factory.mktemp("merge")
    (tmp / "broken.toml").write_text(BROKEN)
    (tmp / "listed.toml").write_text(LISTED)
    paths = [str(ROOT / "scenarios" / "rejection.toml"), str(tmp / "broken.toml"),
             str(tmp / "listed.toml")]
    # the three runs are independent harnesses: side by side, as CI jobs would run them
    with ThreadPoolExecutor(max_workers=3) as pool:
        whole = pool.submit(chaos, "run", *paths, "--report-dir", "whole", "-j", "2", cwd=tmp)
        shards = [pool.submit(chaos, "run", *paths, "--report-dir", f"s{i}", "-j", "2",
                              "--shard", f"{i}/2", cwd=tmp) for i in (1, 2)]
        return {"tmp": tmp, "whole": whole.result(), "shards": [s.result() for s in shards]}


def _summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


def test_merged_shards_equal_one_run(runs: dict) -> None:
    tmp: Path = runs["tmp"]
    assert runs["whole"].returncode == 1, runs["whole"].stderr  # broken fails
    merged = chaos("merge", str(folder(tmp / "s1")), str(folder(tmp / "s2")),
                   "--report-dir", "merged", cwd=tmp)
    assert merged.returncode == runs["whole"].returncode, merged.stdout + merged.stderr
    one, both = _summary(folder(tmp / "whole")), _summary(folder(tmp / "merged"))
    assert both["verdict"] == one["verdict"] == "fail"
    assert both["counts"] == one["counts"]
    verdicts = {e["id"]: (e["verdict"], e["deliveries"]) for e in one["executions"]}
    assert {e["id"]: (e["verdict"], e["deliveries"]) for e in both["executions"]} == verdicts
    # each shard ran only its part; together the whole matrix, once each
    parts = [_summary(folder(tmp / f"s{i}")) for i in (1, 2)]
    assert all(p["executions"] for p in parts)
    assert sum(len(p["executions"]) for p in parts) == len(one["executions"])
    dupes = [json.loads((folder(tmp / d) / "duplicates.json").read_text())
             for d in ("whole", "merged")]
    assert sorted(e["id"] for e in dupes[0]["executions"]) == \
        sorted(e["id"] for e in dupes[1]["executions"])
    junit = [JUnitXml.fromfile(str(folder(tmp / d) / "junit.xml")) for d in ("whole", "merged")]
    assert [(s.tests, s.failures, s.errors) for s in junit[0]] == \
        [(s.tests, s.failures, s.errors) for s in junit[1]]
    assert "broken[t6.gateway_accepted]" in (folder(tmp / "merged") / "report.md").read_text()
    assert "shard 1/2" in merged.stdout and "shard 2/2" in merged.stdout


def test_shards_cover_the_matrix_each_execution_once(runs: dict) -> None:
    """The two shards' executions are exactly the whole run's, once each, with the same
    verdicts, and every shard cut the matrix the same way."""
    from harness.reports.run_json import read_run_json

    tmp: Path = runs["tmp"]
    parts = [read_run_json(folder(tmp / f"s{i}")).run for i in (1, 2)]
    ids = [r.plan.id for p in parts for r in p.results]
    whole = {e["id"]: e["verdict"] for e in _summary(folder(tmp / "whole"))["executions"]}
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(whole)
    assert {r.plan.id: getattr(r.verdict, "value", r.verdict) for p in parts
            for r in p.results} == whole
    assert len({p.shard_plan.fingerprint for p in parts if p.shard_plan}) == 1
    assert all(p.results for p in parts)  # balanced enough that none is empty
    # the listed pair is a unit of its own, never repeated by the double row
    assert ids.count("listed[t4.parked>t6.checkpoint_loaded]") == 1


def merge_here(tmp: Path, *dirs: Path, capsys: pytest.CaptureFixture[str],
               monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``shopops-chaos merge`` in this process (refusals start no worker)."""
    from harness.cli.main import main

    monkeypatch.chdir(tmp)
    status = main(["merge", *map(str, dirs), "--report-dir", "m"])
    return status, capsys.readouterr().err


def _copy(tmp: Path, i: int, name: str) -> Path:
    dest = tmp / name
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(folder(tmp / f"s{i}"), dest, symlinks=True)
    return dest


@pytest.mark.parametrize("field, value, needle", [
    ("code", "0" * 64, "different harness code"),
    ("version", "9.9.9", "different harness version"),
    ("scenarios", [["rejection", "1" * 64]],
     "different scenario set (only in the second: broken, listed; changed: rejection)"),
])
def test_refuses_folders_that_do_not_belong_together(
        runs: dict, field: str, value: object, needle: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    tmp: Path = runs["tmp"]
    other = _copy(tmp, 2, f"tampered-{field}")
    doc = json.loads((other / "run.json").read_text())
    doc[field] = value
    (other / "run.json").write_text(json.dumps(doc))
    status, err = merge_here(tmp, folder(tmp / "s1"), other, capsys=capsys,
                             monkeypatch=monkeypatch)
    assert status == 2 and needle in err, err
    assert not (tmp / "m").exists()  # refused before anything is written


def test_refuses_missing_twice_and_unsharded(runs: dict, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    tmp: Path = runs["tmp"]
    s1, s2 = folder(tmp / "s1"), folder(tmp / "s2")
    cases = [([s1], "shard(s) 2/2 missing"),
             ([s1, _copy(tmp, 1, "again"), s2], "both are shard 1/2"),
             ([s1, folder(tmp / "whole")], "run.json: no such file")]
    for dirs, needle in cases:
        status, err = merge_here(tmp, *dirs, capsys=capsys, monkeypatch=monkeypatch)
        assert status == 2 and needle in err, err
    other = _copy(tmp, 2, "cut-differently")
    doc = json.loads((other / "run.json").read_text())
    text = json.dumps(doc).replace('"rejection", "key": "no-kill"',
                                   '"rejection", "key": "elsewhere"')
    (other / "run.json").write_text(text)
    status, err = merge_here(tmp, s1, other, capsys=capsys, monkeypatch=monkeypatch)
    assert status == 2 and "different cut of the matrix" in err, err
    assert not (tmp / "m").exists()


def test_codec_round_trips_and_refuses_foreign_types(runs: dict) -> None:
    from harness.reports.run_json import read_run_json

    shard = read_run_json(folder(runs["tmp"] / "s1"))
    assert decode(json.loads(json.dumps(encode(shard.run)))) == shard.run
    odd = {1: (float("nan"),), "p": Path("/x"), "b": b"\x00", "f": frozenset({"a"})}
    back = decode(json.loads(json.dumps(encode(odd))))
    assert back.keys() == odd.keys() and back[1][0] != back[1][0] and back["p"] == Path("/x")
    with pytest.raises(CodecError, match=r"\$\.x.*cannot be written"):
        encode(object(), "$.x")
    for bad in ({"__dc__": "os:system", "fields": {}}, {"__dc__": "subprocess:Popen",
                                                       "fields": {"args": "true"}},
                {"__weird__": 1}, {"__dc__": "harness.reports.codec:CodecError", "fields": {}}):
        with pytest.raises(CodecError):
            decode(bad)


def test_refuses_a_verdict_its_own_evidence_does_not_give(
        runs: dict, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard's ``run.json`` edited to turn its failing executions into passes (found by
    an attack: merged, the run read PASS, exit 0, above the executions' own failing
    checks) is refused: every execution is judged again from its stored evidence."""
    tmp: Path = runs["tmp"]
    edited = []
    for i in (1, 2):
        dest = _copy(tmp, i, f"passed-{i}")
        text = (dest / "run.json").read_text()
        fail = '"harness.model.kinds:Verdict", "value": "fail"'
        if fail in text:
            (dest / "run.json").write_text(text.replace(
                fail, '"harness.model.kinds:Verdict", "value": "pass"'))
            edited.append(i)
        else:
            dest = folder(tmp / f"s{i}")
        monkeypatch.setitem(runs, f"edited-{i}", dest)
    assert edited  # the broken scenario fails in at least one shard
    status, err = merge_here(tmp, runs["edited-1"], runs["edited-2"], capsys=capsys,
                             monkeypatch=monkeypatch)
    assert status == 2, err
    assert "verdict pass stored, but its own evidence gives fail" in err, err
    assert list((tmp / "m").iterdir()) == [] if (tmp / "m").exists() else True


def test_a_merge_refused_at_its_junit_check_leaves_no_report_behind(
        runs: dict, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The merged junit is checked against the shards' own after it is written; a refusal
    there used to leave a whole report folder and ``latest`` pointing at it, which a CI
    recipe publishing reports ``if: always()`` would show."""
    tmp: Path = runs["tmp"]
    other = _copy(tmp, 1, "junit-edited")
    junit = other / "junit.xml"
    text = re.sub(r"<failure.*?</failure>", "", junit.read_text(), flags=re.S)
    assert text != junit.read_text()  # shard 1 holds a failure to drop
    junit.write_text(text)
    status, err = merge_here(tmp, other, folder(tmp / "s2"), capsys=capsys,
                             monkeypatch=monkeypatch)
    assert status == 2 and "does not hold the shards' test cases" in err, err
    left = list((tmp / "m").iterdir()) if (tmp / "m").exists() else []
    assert left == [], left  # no run folder, no latest


def test_refuses_a_shard_whose_failing_executions_were_removed(
        runs: dict, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Taking the failing executions out of a shard's ``run.json`` (and their junit cases)
    used to merge to PASS, exit 0 (found by an attack): every unit the cut gave a shard must
    have an execution in it."""
    tmp: Path = runs["tmp"]
    dropped = []
    for i in (1, 2):
        dest = _copy(tmp, i, f"dropped-{i}")
        doc = json.loads((dest / "run.json").read_text())
        run = doc["run"]["fields"]
        results, repeats = run["results"]["__tuple__"], run["repeats"]["__tuple__"]
        keep = [n for n, r in enumerate(results) if r["fields"]["verdict"]["value"] == "pass"]
        if len(keep) < len(results):
            dropped.append(i)
        run["results"]["__tuple__"] = [results[n] for n in keep]
        if repeats:
            run["repeats"]["__tuple__"] = [repeats[n] for n in keep]
        (dest / "run.json").write_text(json.dumps(doc))
        monkeypatch.setitem(runs, f"dropped-{i}", dest)
    assert dropped  # the broken scenario fails in at least one shard
    status, err = merge_here(tmp, runs["dropped-1"], runs["dropped-2"], capsys=capsys,
                             monkeypatch=monkeypatch)
    assert status == 2, err
    assert "holds no execution of broken[" in err and "were removed after its run" in err, err
    assert list((tmp / "m").iterdir()) == [] if (tmp / "m").exists() else True
