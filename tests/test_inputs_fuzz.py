"""Hypothesis fuzzes every entry point with bad input (issue 14).

Three generators, each producing inputs that are bad BY CONSTRUCTION (so every example must
be refused): scenario files (valid TOML: a known field set to a wrong type, an
out-of-range or non-finite number, an unknown key, a long or odd name), command-line
argument lists (a numeric or path option of ``shopops-chaos`` or ``shopops`` given a bad
value), and ``SHOPOPS_*`` environment values. For each: the exit status of the contract
(2; ``shopops``: 2 for an option, 1 for a variable), exactly one error line naming the
input, no traceback, no run folder, no file changed, no process started
(``input_helpers.call``).

Budgets: a few dozen examples per generator in the default suite (derandomised, no
example database: the same examples in every CI run), many more with ``--crash-soak``.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from input_helpers import assert_refused, call

from shopops.records import Records
from shopops.validators import ENV_VARS, NAME
from shopops_contract import labels

DEFAULT_EXAMPLES = 25
SOAK_EXAMPLES = 600


def fuzz(config: pytest.Config) -> settings:
    """This module's Hypothesis settings; the budget comes from ``--crash-soak``."""
    soak = bool(config.getoption("--crash-soak", False))
    return settings(max_examples=SOAK_EXAMPLES if soak else DEFAULT_EXAMPLES, deadline=None,
                    derandomize=not soak, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------------ TOML writing
def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(value)


def toml_string(text: str) -> str:
    """A TOML basic string (TOML 1.0, "String"): control characters, ``"`` and ``\\``
    escaped; a character beyond the BMP as ``\\UXXXXXXXX`` (JSON's surrogate pairs are not
    Unicode scalar values, so ``tomllib`` would refuse the file as a whole)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\' or code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif code > 0xFFFF:
            out.append(f"\\U{code:08x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_text(data: dict[str, Any]) -> str:
    top = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in data.items()
           if not isinstance(v, dict)]
    tables = [f"[{json.dumps(k)}]\n" + "".join(f"{json.dumps(kk)} = {toml_value(vv)}\n"
                                                for kk, vv in v.items())
              for k, v in data.items() if isinstance(v, dict)]
    return "\n".join(top) + "\n" + "\n".join(tables)


# ------------------------------------------------------------------------ bad values
TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])


def bad_float(lo: float, hi: float) -> st.SearchStrategy[Any]:
    """A TOML value that is not a finite number in [lo, hi]."""
    return st.one_of(
        NON_FINITE,
        st.floats(max_value=lo, exclude_max=True, allow_nan=False),
        st.floats(min_value=hi, exclude_min=True, allow_nan=False),
        st.booleans(), st.text(TEXT, max_size=8), st.lists(st.integers(), max_size=2))


def bad_int(lo: int, hi: int) -> st.SearchStrategy[Any]:
    """A TOML value that is not an integer in [lo, hi]."""
    return st.one_of(
        st.integers(max_value=lo - 1), st.integers(min_value=hi + 1),
        st.floats(allow_nan=True).filter(lambda x: not float(x).is_integer()), NON_FINITE,
        st.booleans(), st.text(TEXT, max_size=8))


def bad_name() -> st.SearchStrategy[str]:
    def invalid(s: str) -> bool:
        try:
            NAME.check(s)
        except ValueError:
            return True
        return False
    return st.one_of(st.text(st.sampled_from("abc-_0"), min_size=65, max_size=5000),
                     st.text(TEXT, max_size=80)).filter(invalid)


def bad_point() -> st.SearchStrategy[str]:
    labelled = st.sampled_from([lab.name for lab in labels.CATALOGUE if lab.side != "queue"])
    return st.one_of(
        st.builds(lambda lab, n: f"{lab}#{n}", labelled, st.integers(min_value=1001)),
        st.builds(lambda lab, n: f"{lab}#{n}", labelled, st.integers(max_value=0)),
        st.text(st.sampled_from("xyz.#"), min_size=1, max_size=20).map(lambda s: "zz" + s))


BASE: dict[str, Any] = {"name": "fuzz", "crash": {"points": ["t4.parked"], "baseline": False}}

#: (table or "", key, bad value strategy, extra fields the table needs so that only the
#: bad value is wrong)
FIELDS: list[tuple[str, str, st.SearchStrategy[Any], dict[str, Any]]] = [
    ("", "name", bad_name(), {}),
    ("", "description", st.one_of(st.text(TEXT, min_size=2001, max_size=2100),
                                  st.text(st.sampled_from("ab\n\t\x1b"), min_size=1,
                                          max_size=20).filter(lambda s: not s.isprintable()),
                                  st.integers(), st.booleans()), {}),
    ("human", "delay_hours", bad_float(0, 366 * 24), {}),
    ("concurrency", "lease_ttl_s", bad_float(0.1, 86400), {"leases": True}),
    ("concurrency", "resumers", bad_int(1, 4), {"leases": True}),
    ("storage", "lock_ms", bad_int(0, 60_000), {"fault": "lock", "lock_at": "t4.parked"}),
    ("sut", "read_timeout_s", bad_float(0.05, 60), {}),
    ("expect", "deliveries", bad_int(0, 1), {}),
    ("crash", "points", st.lists(bad_point(), min_size=1, max_size=3), {"baseline": False}),
    ("gateway", "faults", st.builds(lambda ms: [{"kind": "latency", "ms": ms}],
                                    bad_int(0, 60_000)), {}),
]


@st.composite
def bad_scenario(draw: st.DrawFn) -> tuple[str, str]:
    """(TOML text, the field the error must name)."""
    data = json.loads(json.dumps(BASE))
    if draw(st.booleans()):  # an unknown key, at the top or in a table
        table = draw(st.sampled_from(["", "crash", "human", "sut", "storage", "expect"]))
        key = "zz" + draw(st.text(st.sampled_from("abc_"), max_size=10))
        value = draw(st.one_of(st.integers(), st.text(TEXT, max_size=5), st.booleans()))
        (data.setdefault(table, {}) if table else data)[key] = value
        return toml_text(data), f"{table}.{key}" if table else key
    table, key, bad, extra = draw(st.sampled_from(FIELDS))
    value = draw(bad)
    target = data.setdefault(table, {}) if table else data
    target.update(extra)
    target[key] = value
    return toml_text(data), f"{table}.{key}" if table else key


@pytest.fixture(scope="module")
def folder() -> Any:
    with tempfile.TemporaryDirectory(prefix="fuzz-inputs-") as d:
        root = Path(d)
        (root / "reports").mkdir()
        (root / "folder").mkdir()
        yield root


def test_bad_scenario_files_are_refused(pytestconfig: pytest.Config, folder: Path) -> None:
    @fuzz(pytestconfig)
    @given(case=bad_scenario())
    def run(case: tuple[str, str]) -> None:
        text, field = case
        path = folder / "bad.toml"
        path.write_text(text, encoding="utf-8")
        try:
            o = call("shopops-chaos", ("run", "bad.toml", "--report-dir", "reports"), folder)
            assert_refused(o, 2, "bad.toml", f"field '{field}'")
        finally:
            path.unlink()

    run()


# ------------------------------------------------------------------------ CLI arguments
BAD_NUMBER_TEXT = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e309", "1e308", "-1", "0x10",
                     "", " ", "1_0e", "99999999999999999999", "1e-9", "--"]),
    st.text(TEXT, max_size=12).filter(lambda s: _not_number(s)))


def _not_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return True
    return False


def out_of(lo: float, hi: float, integer: bool) -> st.SearchStrategy[str]:
    """Text of a number outside [lo, hi] (or not a number at all)."""
    if integer:
        nums = st.one_of(st.integers(max_value=int(lo) - 1), st.integers(min_value=int(hi) + 1)
                         ).map(str)
        frac = st.floats(allow_nan=False, allow_infinity=False).filter(
            lambda x: not x.is_integer()).map(repr)
        return st.one_of(nums, frac, BAD_NUMBER_TEXT)
    nums = st.one_of(st.floats(max_value=lo, exclude_max=True),
                     st.floats(min_value=hi, exclude_min=True)).map(repr)
    # "-1" or "1e-9" is bad for a timeout, not for a clock offset: keep only what is
    # really outside [lo, hi] for this input
    return st.one_of(nums, BAD_NUMBER_TEXT.filter(lambda s: not _within(s, lo, hi)))


def _within(text: str, lo: float, hi: float) -> bool:
    """``text`` is a finite number in [lo, hi] (so it is not a bad value here)."""
    try:
        x = float(text)
    except ValueError:
        return False
    return math.isfinite(x) and lo <= x <= hi


#: (entry, argv before the option, option, bad value text)
OPTIONS: list[tuple[str, tuple[str, ...], str, st.SearchStrategy[str]]] = [
    ("shopops-chaos", ("run", "x.toml"), "--jobs", out_of(1, 10_000, True)),
    ("shopops-chaos", ("run", "x.toml"), "--timeout", out_of(0.001, 86400, False)),
    ("shopops-chaos", ("run", "x.toml"), "--repeat", out_of(1, 10_000, True)),
    ("shopops-chaos", ("run", "x.toml"), "--schedule",
     st.lists(bad_point(), min_size=1, max_size=3).map(">".join)),
    ("shopops-chaos", ("explore", "x.toml"), "--examples", out_of(1, 100_000, True)),
    ("shopops-chaos", ("explore", "x.toml"), "--seed", out_of(0, 2**64 - 1, True)),
    ("shopops-chaos", ("grade",), "--timeout", out_of(0.001, 86400, False)),
    ("shopops", ("run",), "--lease-ttl", out_of(0.001, 86400, False)),
    ("shopops", ("resume",), "--read-timeout", out_of(0.001, 3600, False)),
    ("shopops", ("run",), "--case", st.one_of(st.text(TEXT, min_size=201, max_size=400),
                                               st.text(st.sampled_from("a \n\x1b"), min_size=1,
                                                       max_size=5).filter(
                                                   lambda s: " " in s or not s.isprintable()))),
    ("shopops", ("run",), "--db", st.sampled_from(["folder", "nowhere/x.db", "x" * 256, ""])),
    ("shopops", ("run",), "--gateway", st.text(TEXT, max_size=30).filter(
        lambda s: not s.startswith(("http://", "https://")))),
    ("shopops", ("run",), "--max-attempts", out_of(1, 1000, True)),
    # an order the fixtures do not hold: refused before any database is created
    ("shopops", ("run",), "--order", st.text(TEXT, min_size=1, max_size=30).filter(
        lambda s: s not in Records.load().orders)),
    ("shopops", ("reject",), "--feedback", st.one_of(
        st.text(TEXT, min_size=2001, max_size=2100),
        st.text(st.sampled_from("ab\n\t\x1b"), min_size=1, max_size=6).filter(
            lambda s: not s.isprintable()))),
    ("shopops-chaos", ("run", "x.toml"), "--keep-runs", out_of(1, 10_000, True)),
    ("shopops-chaos", ("gateway", "serve"), "--port", out_of(0, 65_535, True)),
]


@st.composite
def bad_argv(draw: st.DrawFn) -> tuple[str, tuple[str, ...], str]:
    entry, before, option, bad = draw(st.sampled_from(OPTIONS))
    value = draw(bad)
    if option == "--jobs" and not _not_number(value):  # allowed range depends on the cores
        n = float(value)
        if n.is_integer() and 1 <= n <= 10_000:
            value = "100000"
    return entry, (*before, f"{option}={value}"), option


def test_bad_arguments_are_refused(pytestconfig: pytest.Config, folder: Path) -> None:
    (folder / "x.toml").write_text('name = "x"\n', encoding="utf-8")

    @fuzz(pytestconfig)
    @given(case=bad_argv())
    def run(case: tuple[str, tuple[str, ...], str]) -> None:
        entry, argv, option = case
        assert_refused(call(entry, argv, folder), 2, option)

    run()


# ------------------------------------------------------------------------ environment
ENV_BAD: dict[str, st.SearchStrategy[str]] = {
    "SHOPOPS_CLOCK_OFFSET_S": out_of(-316_224_000, 316_224_000, False),
    "SHOPOPS_READ_TIMEOUT_S": out_of(0.001, 3600, False),
    "SHOPOPS_IDEMPOTENCY_KEYS": st.text(TEXT, min_size=1, max_size=8).filter(
        lambda s: s not in ("on", "off")),
    "SHOPOPS_POLICY": st.text(TEXT, min_size=1, max_size=12).filter(
        lambda s: s not in ("deterministic", "varying")),
    "SHOPOPS_GATEWAY_URL": st.text(TEXT, min_size=1, max_size=30).filter(
        lambda s: not s.startswith(("http://", "https://"))),
    "SHOPOPS_FIXTURES": st.text(st.sampled_from("nowhere/"), min_size=1).map(
        lambda s: "nowhere-" + s),
    "SHOPOPS_FAILPOINTS": st.one_of(
        bad_point().map(lambda p: f"{p}=kill"),
        st.builds(lambda lab, act: f"{lab}={act}",
                  st.sampled_from([lab.name for lab in labels.CATALOGUE]),
                  st.sampled_from(["explode", "sleep", "sleep(86400001)", "0*kill",
                                   "1001*kill", "kill->off", "sleep(x)"]))),
}


@st.composite
def bad_env(draw: st.DrawFn) -> tuple[str, str]:
    if draw(st.integers(0, 9)) == 0:  # a name nobody reads: a typo
        name = "SHOPOPS_ZZ" + draw(st.text(st.sampled_from("ABC_"), max_size=8))
        return name, draw(st.text(TEXT, min_size=1, max_size=8))
    name = draw(st.sampled_from(sorted(ENV_BAD)))
    assert name in ENV_VARS
    return name, draw(ENV_BAD[name])


def test_bad_environment_values_are_refused(pytestconfig: pytest.Config, folder: Path
                                            ) -> None:
    @fuzz(pytestconfig)
    @given(case=bad_env())
    def run(case: tuple[str, str]) -> None:
        name, value = case
        assert_refused(call("shopops", ("run",), folder, {name: value}), 1, name)
        assert_refused(call("shopops-chaos", ("points",), folder, {name: value}), 2, name)

    run()
