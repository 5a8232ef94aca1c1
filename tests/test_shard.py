"""Shards (``harness.plan.shard``): the spec and the CI variables, the LPT cut, and a replay
schedule sharded by scenario. The real sharded runs whose union is exactly the unsharded
matrix are test_merge.py's (the same runs prove the shards and their merge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.plan.scenario import load_scenario
from harness.plan.shard import (
    Shard,
    ShardError,
    Unit,
    earlier_durations,
    family_key,
    parse_shard,
    plan_shards,
    resolve_shard,
    shard_from_env,
)
from harness.run.runner import run

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("text, index, count", [("1/1", 1, 1), ("2/4", 2, 4),
                                                 (" 3 / 3 ", 3, 3), ("1000/1000", 1000, 1000)])
def test_parse_shard(text: str, index: int, count: int) -> None:
    assert parse_shard(text) == Shard(index, count)


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "-1/2", "1/1001", "1.5/3", "a/b", "",
                                  "2", "2/", "/2", "nan/3", "1/inf", "99999/99999"])
def test_bad_shard_names_the_option_and_the_form(text: str) -> None:
    with pytest.raises(ShardError, match=r"--shard .*allowed I/N"):
        parse_shard(text)


def test_environment_variables() -> None:
    assert shard_from_env({}) is None
    assert shard_from_env({"SHOPOPS_SHARD": "2/3"}) == Shard(2, 3)
    assert shard_from_env({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "4"}) == Shard(1, 4)
    assert shard_from_env({"CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "2"}) == Shard(1, 2)
    assert shard_from_env({"BUILDKITE_PARALLEL_JOB": "3",
                           "BUILDKITE_PARALLEL_JOB_COUNT": "4"}) == Shard(4, 4)
    # ours wins over the CI's
    assert shard_from_env({"SHOPOPS_SHARD": "1/2", "CI_NODE_INDEX": "2",
                           "CI_NODE_TOTAL": "2"}) == Shard(1, 2)
    with pytest.raises(ShardError, match="CI_NODE_INDEX"):
        shard_from_env({"CI_NODE_INDEX": "3"})
    with pytest.raises(ShardError, match="CI_NODE_INDEX=5"):
        shard_from_env({"CI_NODE_INDEX": "5", "CI_NODE_TOTAL": "4"})
    with pytest.raises(ShardError, match="SHOPOPS_SHARD"):
        shard_from_env({"SHOPOPS_SHARD": "4/3"})


def test_resolve_shard() -> None:
    gitlab = {"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "2"}
    assert resolve_shard(None, gitlab) is None  # a parallel job shards only when asked
    assert resolve_shard("auto", gitlab) == Shard(2, 2)
    assert resolve_shard("1/2", gitlab) == Shard(1, 2)
    assert resolve_shard(None, {"SHOPOPS_SHARD": "1/2"}) == Shard(1, 2)
    with pytest.raises(ShardError, match="auto: none of"):
        resolve_shard("auto", {})


def test_family_key() -> None:
    assert family_key("o1001[t4.parked]") == "o1001[t4.parked]"
    assert family_key("o1001-double[t4.parked>t6.gateway_accepted#2]") == "o1001-double[t4.parked]"
    assert family_key("x[a>b>c]") == "x[a>b>c]"
    assert family_key("x[no-kill]") == "x[no-kill]"


units_st = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 40),
                              st.integers(1, 30)), unique_by=lambda t: (t[0], t[1]),
                    max_size=60)


@given(units_st, st.integers(1, 8), st.dictionaries(st.integers(0, 40),
                                                    st.floats(0, 100), max_size=20))
def test_cut_is_a_partition_balanced_by_lpt(raw: list[tuple[str, int, int]], count: int,
                                            secs: dict[int, float]) -> None:
    units = [Unit(s, f"p{k}", n) for s, k, n in raw]
    durations = {f"a[p{k}]": v for k, v in secs.items()}
    cut = plan_shards(units, count, durations)
    again = plan_shards(list(units), count, dict(reversed(list(durations.items()))))
    assert cut == again and cut.fingerprint == again.fingerprint  # same on every machine
    assert len(cut.owners) == len(units) and set(cut.owners) <= set(range(1, count + 1))
    assert sum(cut.load(i) for i in range(1, count + 1)) == pytest.approx(sum(cut.costs))
    if units:  # LPT: no shard exceeds the mean by more than the largest unit
        loads = [cut.load(i) for i in range(1, count + 1)]
        assert max(loads) <= sum(cut.costs) / count + max(cut.costs) + 1e-9
    for k, v in secs.items():  # an earlier run's seconds are the cost
        i = next((i for i, u in enumerate(units) if u.id == f"a[p{k}]"), None)
        if i is not None:
            assert cut.costs[i] == v


def test_lpt_uses_earlier_durations() -> None:
    units = [Unit("s", k) for k in "abcd"]
    flat = plan_shards(units, 2)
    assert sorted(flat.load(i) for i in (1, 2)) == [2, 2]
    timed = plan_shards(units, 2, {"s[a]": 9.0, "s[b]": 1.0, "s[c]": 1.0, "s[d]": 1.0})
    assert timed.owners[0] != timed.owners[1] == timed.owners[2] == timed.owners[3]
    assert flat.fingerprint != timed.fingerprint


def test_earlier_durations(tmp_path: Path) -> None:
    assert earlier_durations(None) == {} and earlier_durations(tmp_path / "nope") == {}
    (tmp_path / "summary.json").write_text(json.dumps(
        {"executions": [{"id": "a[b]", "elapsed_s": 0.5}]}))
    assert earlier_durations(tmp_path) == {"a[b]": 0.5}
    (tmp_path / "summary.json").write_text(json.dumps(
        {"executions": [{"id": "a[b]", "elapsed_s": float("inf")}]}))
    with pytest.raises(ShardError, match=r"--durations .*summary.json.*elapsed_s"):
        earlier_durations(tmp_path / "summary.json")
    (tmp_path / "summary.json").write_text("[]")
    with pytest.raises(ShardError, match="summary.json"):
        earlier_durations(tmp_path)


def _scenarios(tmp_path: Path) -> list:
    listed = tmp_path / "listed.toml"  # listed points, a listed pair, and a double row
    listed.write_text('name = "listed"\n[crash]\n'
                      'points = ["t6.gateway_accepted"]\n'
                      'schedules = ["t4.parked>t6.checkpoint_loaded"]\ndouble = true\n')
    # rejection: points learned from its trace run
    return [load_scenario(ROOT / "scenarios" / "rejection.toml"), load_scenario(listed)]


@pytest.mark.processes
def test_replay_schedule_is_sharded_by_scenario(tmp_path: Path) -> None:
    from harness.model import CrashSchedule

    scenarios = _scenarios(tmp_path)
    sched = CrashSchedule.parse("t4.parked")
    parts = [run(scenarios, tmp_path / f"s{i}", jobs=2, schedule=sched, shard=Shard(i, 2))
             for i in (1, 2)]
    ids = sorted(r.plan.id for p in parts for r in p.results)
    assert ids == ["listed[t4.parked]", "rejection[t4.parked]"]


@pytest.mark.processes
@pytest.mark.parametrize("argv, env, needle", [
    (["--shard", "5/4"], {}, "--shard: '5/4': allowed I/N"),
    (["--shard", "auto"], {}, "--shard auto: none of"),
    ([], {"SHOPOPS_SHARD": "x"}, "SHOPOPS_SHARD"),
    (["--shard", "1/2", "--durations", "nope.json"], {}, "--durations: 'nope.json'"),
])
def test_cli_refuses_a_bad_shard_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], env: dict[str, str], needle: str) -> None:
    from harness.cli.main import main

    monkeypatch.chdir(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        status = main(["run", str(ROOT / "scenarios" / "o1001.toml"), *argv])
    except SystemExit as exc:  # argparse refuses an option's value itself
        status = exc.code
    assert status == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()  # refused before a folder or a worker
