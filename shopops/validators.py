"""The one set of input validators every entry point uses (issue 14: fail closed).

``shopops`` (the CLI, its environment variables), ``shopops-chaos`` (its CLI, scenario and
rubric files) and the pytest plugin all check their inputs here, before any file is created
or any process started. It lives in ``shopops`` because the system under test may not import
the harness, while the harness may import ``shopops`` (docs/design.md, layering): one rule
in one place.

Each validator is a small frozen object with three faces:

- ``check(value)`` — a value already typed (a TOML number, a string): returns the value or
  raises ``ValueError`` whose message says the value and what is allowed;
- ``parse(text)`` — command-line or environment text: the same, from a string;
- calling it — an ``argparse`` ``type=``: raises ``argparse.ArgumentTypeError``, so
  argparse prints ``prog: error: argument --jobs/-j: 100000: ...`` and exits 2
  (argparse docs, "type").

``check_environment`` validates every ``SHOPOPS_*`` variable the loop or the harness reads
(and refuses a name nobody reads: a typo would otherwise be silently ignored). The path,
URL and socket validators live in ``shopops.path_checks`` and are re-exported here.

The bounds are the domain's, not the machine's: a worker timeout between a millisecond
and a day, jobs up to four per core, names short enough to be a file name, ports 0–65535,
a kill point's occurrence up to 1000, a failpoint sleep of at most a day. Numbers must be
finite (``nan`` and ``inf`` are refused everywhere).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shopops.errors import ConfigError, ShopOpsError
from shopops.path_checks import MAX_SOCKET_PATH as MAX_SOCKET_PATH
from shopops.path_checks import NAME_MAX as NAME_MAX
from shopops.path_checks import PATH_MAX as PATH_MAX
from shopops.path_checks import existing_file as existing_file
from shopops.path_checks import existing_folder as existing_folder
from shopops.path_checks import existing_path as existing_path
from shopops.path_checks import file_path as file_path
from shopops.path_checks import folder_path as folder_path
from shopops.path_checks import output_file as output_file
from shopops.path_checks import show as _show
from shopops.path_checks import socket_path as socket_path
from shopops.path_checks import url as url
from shopops_contract.limits import (
    DAY_S,
    MAX_HISTORY_ROWS,
    MAX_OCCURRENCE,
    MAX_SHARDS,
    MAX_SLEEP_MS,
)

#: Simulated clock offsets (SHOPOPS_CLOCK_OFFSET_S) up to ten years either way.
MAX_CLOCK_OFFSET_S = 10 * 366 * DAY_S
#: Longest scenario name: it becomes part of folder names (execution ids add the schedule).
MAX_NAME = 64
#: Longest id (case, run, owner, ticket, approver) and free text such as a description.
MAX_ID = 200
MAX_TEXT = 2000


def max_jobs() -> int:
    """Parallel executions allowed: four per core (``os.cpu_count()``), at least 4."""
    return max(4, 4 * (os.cpu_count() or 1))


def parse_args(parser: argparse.ArgumentParser, argv: Any) -> argparse.Namespace:
    """``parser.parse_args(argv)``, refusing a one-value option given ``--`` as its value.

    Python 3.11's argparse strips ``--`` from an option's values even in ``--jobs=--``, and
    then stores an empty list without calling the option's ``type=`` (CPython gh-53780,
    fixed in 3.13): the validator never runs and ``[]`` reaches the code. Found by the input
    fuzz test (``tests/test_inputs_fuzz.py``). Raises ``SystemExit(2)`` through
    ``parser.error`` with one line naming the option, like any other bad option.
    """
    args = parser.parse_args(argv)
    if not any(value == [] for value in vars(args).values()):
        return args  # no option holds [] (the walk below touches every action: ~0.3 ms)
    for action in _one_value_actions(parser):
        if getattr(args, action.dest, None) == []:
            parser.error(f"argument {'/'.join(action.option_strings)}: '--' is not a "
                         f"value; give the option one value")
    return args


def _one_value_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every option of ``parser`` and its sub-commands that takes exactly one value."""
    found: list[argparse.Action] = []
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _one_value_actions(sub)
        elif (action.option_strings and action.nargs is None
              and isinstance(action, argparse._StoreAction)):
            found.append(action)
    return found


def argtype(check: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """Wrap ``check(text)`` as an argparse ``type=``: a ``ValueError`` becomes the
    ``ArgumentTypeError`` argparse prints after the option's name (exit status 2)."""

    def convert(text: str) -> Any:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


@dataclass(frozen=True)
class Number:
    """A finite number from ``lo`` to ``hi`` (inclusive) in ``unit``; ``integer`` for ints.

    ``check`` refuses ``bool`` (TOML ``true`` is not 1), ``nan``, ``inf`` and anything out
    of range; ``parse`` accepts decimal text only (``int()``/``float()``), so
    ``99999999999999999999`` parses and is then refused as out of range.
    """

    lo: float
    hi: float
    unit: str = ""
    integer: bool = False

    @property
    def allowed(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind} from {_num(self.lo)} to {_num(self.hi)}{unit}"

    def check(self, value: object) -> Any:
        """``value`` itself (int or float) if allowed; else ``ValueError``."""
        ok_type = (int,) if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, ok_type):
            raise ValueError(f"{_show(value)}: must be {self.allowed}")
        if not math.isfinite(value) or not self.lo <= value <= self.hi:
            raise ValueError(f"{_show(value)}: must be {self.allowed}")
        return value

    def parse(self, text: str) -> Any:
        """The number written in ``text`` if allowed; else ``ValueError``."""
        raw = text.strip()
        try:
            value: Any = int(raw, 10) if self.integer else float(raw)
            return self.check(value)
        except ValueError:
            raise ValueError(f"{_show(text)}: must be {self.allowed}") from None

    def __call__(self, text: str) -> Any:
        return argtype(self.parse, "number")(text)


@dataclass(frozen=True)
class Text:
    """A non-empty line of printable text of at most ``max_len`` characters; ``pattern``
    (a regex, full match) narrows it further, described by ``what``."""

    max_len: int = MAX_ID
    pattern: str | None = None
    what: str = "printable text"

    @property
    def allowed(self) -> str:
        return f"{self.what}, 1 to {self.max_len} characters"

    def check(self, value: object) -> str:
        """``value`` if allowed; else ``ValueError``."""
        if not isinstance(value, str):
            raise ValueError(f"{_show(value)}: must be {self.allowed}")
        bad = not value or len(value) > self.max_len or not value.isprintable()
        if bad or (self.pattern is not None and not re.fullmatch(self.pattern, value)):
            raise ValueError(f"{_show(value)}: must be {self.allowed}")
        return value

    parse = check

    def __call__(self, text: str) -> str:
        return argtype(self.check, "text")(text)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# ----------------------------------------------------------------------------- numbers
WORKER_TIMEOUT_S = Number(0.001, DAY_S, "seconds")
LEASE_TTL_S = Number(0.001, DAY_S, "seconds")
#: The gateway client's read timeout per attempt (shopops.runtime allows up to an hour).
READ_TIMEOUT_S = Number(0.001, 3600, "seconds")
#: Recovery attempts before the loop dead-letters a case (``--max-attempts``).
MAX_ATTEMPTS = Number(1, 1000, "attempts", integer=True)
#: ``resume --from-seq N``: a checkpoint's ``seq`` (the contract's bound on a history).
FROM_SEQ = Number(1, MAX_HISTORY_ROWS, "(a checkpoint's seq)", integer=True)
PORT = Number(0, 65535, integer=True)
REPEAT = Number(1, 10_000, integer=True)
EXAMPLES = Number(1, 100_000, integer=True)
SEED = Number(0, 2**64 - 1, integer=True)
OCCURRENCE = Number(1, MAX_OCCURRENCE, integer=True)
SLEEP_MS = Number(0, MAX_SLEEP_MS, "milliseconds", integer=True)
CLOCK_OFFSET_S = Number(-MAX_CLOCK_OFFSET_S, MAX_CLOCK_OFFSET_S, "seconds")
#: Simulated hours between the park and the approval (a scenario's human.delay_hours).
DELAY_HOURS = Number(0, 366 * 24, "hours")
#: A scenario's storage lock and a gateway fault's latency: at most a minute of real time.
LOCK_MS = Number(0, 60_000, "milliseconds", integer=True)
LATENCY_MS = Number(0, 60_000, "milliseconds", integer=True)
#: Rubric points per item.
POINTS = Number(0, 10_000, "points")


def jobs() -> Number:
    """``--jobs``: 1 to ``max_jobs()`` parallel executions."""
    return Number(1, max_jobs(), f"(at most 4 per core, {os.cpu_count() or 1} cores)",
                  integer=True)


def parse_jobs(text: str) -> int:
    """``--jobs`` from text (see ``jobs``)."""
    return int(jobs().parse(text))


# ----------------------------------------------------------------------------- text
IDENT = Text(MAX_ID, r"[^\s]+", "printable text without spaces")
FREE_TEXT = Text(MAX_TEXT, None, "one line of printable text")
NAME = Text(MAX_NAME, r"[a-z0-9][a-z0-9_-]*",
            "lowercase letters, digits, '-' and '_' (starting with a letter or digit)")
MODULE = Text(100, r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*",
              "a Python module name")


_SHARD = re.compile(r"\s*(\d{1,4})\s*/\s*(\d{1,4})\s*")


def shard_spec(text: str) -> tuple[int, int]:
    """``I/N``: part ``I`` (1-based) of ``N`` shards, ``1 <= I <= N <= MAX_SHARDS``
    (``shopops-chaos run --shard``, ``SHOPOPS_SHARD``); returns ``(I, N)``."""
    match = _SHARD.fullmatch(text) if isinstance(text, str) else None
    if match and 1 <= int(match[1]) <= int(match[2]) <= MAX_SHARDS:
        return int(match[1]), int(match[2])
    raise ValueError(f"{_show(text)}: allowed I/N, e.g. 2/4 (1 <= I <= N <= {MAX_SHARDS})"
                     ", or 'auto' (from CI variables) for --shard")


def choice(*allowed: str) -> Callable[[str], str]:
    """A validator for one of ``allowed``."""

    def check(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"{_show(text)}: allowed: {', '.join(allowed)}")
        return text

    return check


# ----------------------------------------------------------------------------- environment
def _failpoints(text: str) -> str:
    from shopops.failpoints import parse_spec  # imports labels; keeps this module light

    parse_spec(text)  # FailpointSpecError is a ValueError naming the entry
    return text


#: Kernel filesystems no execution's files can live in (``SHOPOPS_SCRATCH``): ``/proc``
#: passed "an existing folder" and the run then failed after writing its folder (issue 24).
_PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def _scratch(text: str) -> str:
    """``SHOPOPS_SCRATCH``: ``auto``, ``off``, or an existing folder outside ``/proc``,
    ``/sys`` and ``/dev`` (``/dev/shm`` is allowed) in which a folder can be created — proven
    by creating and removing one, so a bad place is refused before any run folder exists."""
    allowed = ("allowed: auto, off, or an existing folder where files can be written, "
               "outside /proc, /sys and /dev (except /dev/shm)")
    if text in ("auto", "off"):
        return text
    try:
        existing_folder(text)
    except ValueError as exc:
        raise ValueError(f"{exc} ({allowed})") from None
    real = os.path.realpath(text)
    if (any(real == r or real.startswith(r + "/") for r in _PSEUDO_ROOTS)
            and not (real == "/dev/shm" or real.startswith("/dev/shm/"))):
        raise ValueError(f"{_show(text)} is on a kernel filesystem ({real}); {allowed}")
    probe = os.path.join(real, f".shopops-probe-{os.getpid()}")
    try:
        os.mkdir(probe, 0o700)
        os.rmdir(probe)
    except OSError as exc:
        raise ValueError(f"{_show(text)}: cannot create a folder in it "
                         f"({exc.strerror}); {allowed}") from None
    return text


def _clock_offset(text: str) -> float:
    return float(CLOCK_OFFSET_S.parse(text))


#: Every ``SHOPOPS_*`` variable read by the loop or the harness, and its validator.
#: A new variable is registered here (else ``check_environment`` refuses it as unknown).
ENV_VARS: Mapping[str, Callable[[str], Any]] = {
    "SHOPOPS_APPROVALS_DB": file_path,
    "SHOPOPS_APPROVALS_SOCKET": socket_path,  # the harness's approval service
    "SHOPOPS_GATEWAY_URL": url,
    "SHOPOPS_IDEMPOTENCY_KEYS": choice("on", "off"),
    "SHOPOPS_POLICY": choice("deterministic", "varying"),
    "SHOPOPS_FIXTURES": existing_folder,
    "SHOPOPS_CLOCK_OFFSET_S": _clock_offset,
    "SHOPOPS_FAILPOINTS": _failpoints,
    "SHOPOPS_FAILPOINT_CHANNEL": socket_path,
    "SHOPOPS_READ_TIMEOUT_S": READ_TIMEOUT_S.parse,
    "SHOPOPS_SHARD": shard_spec,  # shopops-chaos run: harness.plan.shard
    "SHOPOPS_MAX_ATTEMPTS": MAX_ATTEMPTS.parse,
    "SHOPOPS_SCRATCH": _scratch,  # the harness: harness.sandbox.scratch
    # the power-cut shim (harness.launch.power): the state folder it watches, its shadow
    "SHOPOPS_POWER_DIR": existing_folder,
    "SHOPOPS_POWER_SHADOW": str,
}


#: Variables whose readers take an empty value as unset (``os.environ.get(...) or None``);
#: for the others an empty value is refused, as their readers refuse it.
_EMPTY_IS_UNSET = frozenset({"SHOPOPS_FAILPOINTS", "SHOPOPS_FAILPOINT_CHANNEL",
                             "SHOPOPS_APPROVALS_SOCKET",
                             "SHOPOPS_FIXTURES", "SHOPOPS_GATEWAY_URL"})


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Validate every ``SHOPOPS_*`` variable of ``env`` (default ``os.environ``).

    An empty value means "unset" only where its reader treats it so (``_EMPTY_IS_UNSET``).

    Raises:
        shopops.errors.ConfigError: the first bad variable, naming it, its value and what
            is allowed; also a ``SHOPOPS_*`` name nobody reads (a typo), listing the names.
        shopops.errors.FailpointSpecError: a malformed ``SHOPOPS_FAILPOINTS`` (the same
            error a fresh or forked worker raises at start).
    """
    env = os.environ if env is None else env
    for name in sorted(k for k in env if k.startswith("SHOPOPS_")):
        raw = env[name]
        check = ENV_VARS.get(name)
        if check is None:
            raise ConfigError(
                f"{_show(name)}: unknown variable; the loop and the harness read: "
                + ", ".join(ENV_VARS), input=name, variable=name, value=raw,
                allowed=", ".join(ENV_VARS))
        if raw == "" and name in _EMPTY_IS_UNSET:
            continue
        try:
            check(raw)
        except ShopOpsError:
            raise  # already typed and naming the variable (FailpointSpecError)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}", input=name, variable=name,
                              value=raw, allowed=str(exc)) from None
