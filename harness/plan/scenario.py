"""Scenario files: one TOML file per scenario under ``scenarios/`` (``tomllib``).

See ``scenarios/README.md`` for the format. Loading validates everything before anything
runs: a syntax error, an unknown table or field, a wrong type, an unknown label or an
impossible schedule raises ``ScenarioError`` naming the file, the field (with its line when
it can be found) and what is allowed.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.model import (
    CheckId,
    CrashMode,
    CrashSchedule,
    FaultKind,
    FaultSpec,
    GatewayDialect,
    HumanAction,
    KillPoint,
    Scenario,
    Step,
    StorageFault,
    TicketKind,
    WorkerRole,
    WorkersStep,
)
from harness.model.input_files import (
    MAX_TOML_BYTES,
    MAX_TOML_NESTING,
    InputFileError,
    check_nesting,
    read_input,
)
from harness.plan.story_parse import mistyped, parse_story
from harness.targets.apps import APP_TYPES
from harness.targets.spec import parse_target, target_limits
from shopops.errors import ShopOpsError
from shopops.policy import POLICIES
from shopops.records import Records
from shopops.validators import (
    DELAY_HOURS,
    FREE_TEXT,
    IDENT,
    LEASE_TTL_S,
    LOCK_MS,
    NAME,
    Number,
    folder_path,
)
from shopops_contract import labels

__all__ = ["Scenario", "ScenarioError", "impossible", "load_scenario", "load_scenarios"]

#: At most 4 workers at once; a scenario's lease from 0.1 s (shopops.validators bounds).
_RESUMERS = Number(1, 4, "workers at once", integer=True)
_LEASE_TTL_S = Number(0.1, LEASE_TTL_S.hi, "seconds")
#: sut.read_timeout_s: 0.05 s to a minute.
_READ_TIMEOUT_S = Number(0.05, 60, "seconds")
_MAX_ATTEMPTS = Number(1, 100, "attempts", integer=True)
#: The range of each numeric table field: its range check, and the type check's message
#: (``story_parse.mistyped``), name it.
_RANGES: dict[str, Number] = {
    "sut.read_timeout_s": _READ_TIMEOUT_S, "sut.max_attempts": _MAX_ATTEMPTS,
    "human.delay_hours": DELAY_HOURS, "concurrency.resumers": _RESUMERS,
    "concurrency.lease_ttl_s": _LEASE_TTL_S, "storage.lock_ms": LOCK_MS}


class ScenarioError(ShopOpsError, ValueError):
    """A bad scenario file (fields: ``path``, ``field``, ``line`` or ``None``, ``reason``)."""


HUMAN_ACTIONS = tuple(HumanAction)
TICKETS = tuple(TicketKind)
STORAGE_FAULTS = tuple(StorageFault)
WORKER_ERRORS = ("ApprovalRefused", "CheckpointCorrupt", "UnsupportedSchemaVersion",
                 "LeaseHeld", "FencedOff", "GatewayRejected", "GatewayUnavailable")


#: The array of tables that writes the story out as steps (``harness.plan.story_parse``).
STORY = "story"
#: What a ``[[story]]`` replaces: whole tables (``None``) or some of their fields.
_STORY_REPLACES: dict[str, frozenset[str] | None] = {
    "human": None, "storage": None,
    "concurrency": frozenset({"resumers", "takeover_at", "same_owner"})}
_NUM = (int, float)
_ALLOWED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "": {"name": str, "description": str},
    "case": {"case_id": str, "order_id": str},
    "sut": {"policy": str, "idempotency_keys": bool, "read_timeout_s": _NUM,
            "max_attempts": int, "order_note": bool},
    "crash": {"points": (str, list), "schedules": list, "baseline": bool, "double": bool,
              "mode": str, "power_points": list},
    "human": {"action": str, "approve_at": str, "delay_hours": _NUM, "twice": bool,
              "ticket": str, "feedback": str},
    "gateway": {"faults": list, "dialect": str},
    "concurrency": {"resumers": int, "leases": bool, "lease_ttl_s": _NUM, "takeover_at": str,
                    "same_owner": bool},
    "storage": {"fault": str, "lock_at": str, "lock_ms": int},
    "expect": {"failing_checks": list, "deliveries": int, "worker_error": str},
    "target": {"kind": str, "folder": str, "start": str, "resume": str, "decide": str,
               "history": str, "options": dict, **APP_TYPES},
}


def _crash_mode(crash: dict[str, Any], fail: Callable[[str, str], Exception]
                ) -> tuple[CrashMode, frozenset[str] | None]:
    """``[crash] mode`` (``kill``, ``power``) and ``power_points`` (labels whose kills are
    power cuts; only with ``mode = "power"``; absent: every kill)."""
    raw = crash.get("mode", CrashMode.KILL.value)
    try:
        mode = CrashMode(raw)
    except ValueError:
        raise fail("crash.mode", f"{raw!r}; allowed: "
                   + ", ".join(repr(m.value) for m in CrashMode)) from None
    if "power_points" not in crash:
        return mode, None
    if mode is not CrashMode.POWER:
        raise fail("crash.power_points", 'only with crash.mode = "power"')
    if crash["power_points"] == []:
        raise fail("crash.power_points", "[] makes no crash a power cut; allowed: labels of "
                   "`shopops-chaos points`, or no power_points (every kill)")
    known = set(labels.KILLABLE)
    for label in crash["power_points"]:
        if not isinstance(label, str) or label not in known:
            raise fail("crash.power_points", f"{label!r}; allowed: labels of "
                       "`shopops-chaos points` (without #N: every occurrence)")
    return mode, frozenset(crash["power_points"])


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file.

    Raises:
        ScenarioError: unreadable file, not a regular file (a FIFO), over
            ``MAX_TOML_BYTES`` or nested deeper than ``MAX_TOML_NESTING``
            (``harness.model.input_files``), TOML syntax error (with its line), unknown table or
            field, wrong type, bad name, unknown policy, unknown label, bad schedule, unknown
            check id.
    """
    path = Path(path)
    try:  # a regular file, bounded in size and nesting before tomllib sees it
        text = read_input(path, MAX_TOML_BYTES)
        check_nesting(text, path, MAX_TOML_NESTING, toml=True)
    except InputFileError as exc:
        raise ScenarioError(str(exc), path=str(path), field=None, line=None,
                            reason="unreadable") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))  # TOMLDecodeError.lineno is 3.14+
        line = int(found[1]) if found else None
        bom = (" (the file starts with a UTF-8 byte-order mark, which TOML does not allow: "
               "save it as UTF-8 without one)" if text.startswith("\ufeff") else "")
        lines = text.splitlines()
        said = (f"; line {line} reads {lines[line - 1].strip()[:80]!r}"  # names the key
                if line is not None and 0 < line <= len(lines) and lines[line - 1].strip()
                else "")
        raise ScenarioError(f"{path}: TOML syntax error: {exc}{said}{bom}", path=str(path),
                            field=None, line=line, reason="syntax") from exc
    return _build(data, path, text)


def load_scenarios(paths: Iterable[str | Path]) -> list[Scenario]:
    """Load files and folders (every ``*.toml`` inside, sorted), all before any runs.

    Raises:
        ScenarioError: the first bad file; also two scenarios with the same name, or a
            path that does not exist.
    """
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files.extend(sorted(p.glob("*.toml")))
        elif p.exists():
            if p.suffix != ".toml":  # README.md parsed as TOML said "syntax error" only
                raise ScenarioError(f"{p}: not a scenario file; allowed: a *.toml file or a "
                                    "folder of them", path=str(p), field=None, line=None,
                                    reason="not a scenario file")
            files.append(p)
        else:
            try:
                folder_path(str(p))  # says why: a symlink loop, a path through a file
                reason = "no such scenario file or folder"
            except ValueError as exc:
                reason = str(exc)
            raise ScenarioError(f"{p}: {reason}", path=str(p), field=None, line=None,
                                reason="missing")
    scenarios = [load_scenario(f) for f in files]
    seen: dict[str, Path | None] = {}
    for s in scenarios:
        if s.name in seen:
            raise ScenarioError(
                f"{s.path}: name {s.name!r} is already used by {seen[s.name]}",
                path=str(s.path), field="name", line=None, reason="duplicate name")
        seen[s.name] = s.path
    return scenarios


def _build(data: dict[str, Any], path: Path, text: str) -> Scenario:
    def fail(fld: str, reason: str) -> ScenarioError:
        line = _line_of(text, fld)
        reason = _as_written(reason, text, line, fld)
        where = f"{path}:{line}" if line else str(path)
        return ScenarioError(f"{where}: field '{fld}': {reason}", path=str(path), field=fld,
                             line=line, reason=reason)

    def fail_at(fld: str, reason: str, line: int | None) -> ScenarioError:
        where = f"{path}:{line}" if line else str(path)
        return ScenarioError(f"{where}: field '{fld}': {reason}", path=str(path), field=fld,
                             line=line, reason=reason)

    tables = [t for t in _ALLOWED if t]
    for key, value in data.items():
        if key == STORY:
            continue
        if key in tables and not isinstance(value, dict):
            raise fail(key, f"must be a table [{key}]")
        if key not in tables and key not in _ALLOWED[""]:
            raise fail(key, "unknown field or table; allowed: name, description, "
                       + ", ".join(f"[{t}]" for t in tables) + f", [[{STORY}]]")
    for table, allowed in _ALLOWED.items():
        section = data if table == "" else data.get(table, {})
        for key, value in section.items():
            if table == "" and key in (*tables, STORY):
                continue
            dotted = f"{table}.{key}" if table else key
            if key not in allowed:
                raise fail(dotted, f"unknown field; allowed in [{table or 'top level'}]: "
                           + ", ".join(allowed))
            why = mistyped(allowed[key], value, rule=_RANGES.get(dotted))
            if why is not None:
                raise fail(dotted, why)
    case, sut, crash, expect = (data.get(t, {}) for t in ("case", "sut", "crash", "expect"))
    if not data:
        raise fail("name", "the file is empty; a scenario needs at least a name or a table "
                   "(see scenarios/README.md)")
    name = data.get("name", path.stem)
    for dotted, rule, default in (("name", NAME, name), ("description", FREE_TEXT, "x"),
                                  ("case.case_id", IDENT, "x"), ("case.order_id", IDENT, "x")):
        table, _, key = dotted.rpartition(".")
        value = (case if table else data).get(key, default)
        try:
            rule.check(value)
        except ValueError as exc:
            raise fail(dotted, str(exc)) from None
    policy = sut.get("policy", "deterministic")
    if policy not in POLICIES:
        raise fail("sut.policy", f"{policy!r}; allowed: {', '.join(POLICIES)}")
    points: tuple[KillPoint, ...] | None
    raw_points = crash.get("points", "all")
    if isinstance(raw_points, str):
        if raw_points != "all":
            raise fail("crash.points", f"{raw_points!r}; allowed: \"all\" or a list of labels")
        points = None
    else:
        try:
            points = tuple(KillPoint.parse(_str(p)) for p in raw_points)
        except ValueError as exc:
            raise fail("crash.points", str(exc)) from None
    try:
        schedules = tuple(CrashSchedule.parse(_str(s)) for s in crash.get("schedules", []))
    except ValueError as exc:
        raise fail("crash.schedules", str(exc)) from None
    if any(not s.kills for s in schedules):
        raise fail("crash.schedules", "'no-kill' is the baseline: set crash.baseline = true")
    if points == () and not schedules and not crash.get("baseline", True):
        # found by a new user: it ran nothing, said UNKNOWN with no reason, moved latest
        raise fail("crash.points", "[] with no crash.schedules and crash.baseline = false "
                   "runs nothing; allowed: \"all\", a list of labels, or crash.baseline = true")
    crash_mode, power_points = _crash_mode(crash, fail)
    if power_points is not None and points is not None and not crash.get("double", False):
        # found by a new user: a power mode whose points no kill reaches ran, passed, and
        # cut the power nowhere (a double-crash matrix learns its second kills: not known)
        kills = {p.label for p in points} | {k.label for s in schedules for k in s.kills}
        if not power_points & kills:
            raise fail("crash.power_points", f"{sorted(power_points)} is no kill of this "
                       f"scenario, so no crash is a power cut; allowed: labels among "
                       f"crash.points or crash.schedules ({', '.join(sorted(kills))})")
    failing = expect.get("failing_checks", [])
    for check in failing:
        if check not in set(CheckId):
            raise fail("expect.failing_checks",
                       f"unknown check {check!r}; allowed: {', '.join(CheckId)}")
    order_id = case.get("order_id", "O-1001")
    try:
        Records.load().order(order_id)
    except ShopOpsError as exc:
        raise fail("case.order_id", f"{exc}; allowed: "
                   + ", ".join(sorted(Records.load().orders))) from None
    human, gw, conc, storage = (data.get(t, {}) for t in ("human", "gateway", "concurrency",
                                                           "storage"))

    def choice(table: dict[str, Any], dotted: str, default: str, allowed: tuple[str, ...]
               ) -> str:
        value = table.get(dotted.split(".")[1], default)
        if value not in allowed:
            raise fail(dotted, f"{value!r}; allowed: {', '.join(allowed)}")
        return str(value)

    def point(table: dict[str, Any], dotted: str) -> KillPoint | None:
        raw = table.get(dotted.split(".")[1])
        try:
            return KillPoint.parse(raw) if raw is not None else None
        except ValueError as exc:
            raise fail(dotted, str(exc)) from None

    def positive(table: dict[str, Any], dotted: str, default: float) -> float:
        try:
            return float(_RANGES[dotted].check(table.get(dotted.split(".")[1], default)))
        except ValueError as exc:
            raise fail(dotted, str(exc)) from None

    faults = []
    for i, raw in enumerate(gw.get("faults", [])):
        try:
            faults.append(FaultSpec.from_dict(raw))
        except ValueError as exc:
            raise fail("gateway.faults", f"fault {i + 1}: {exc}") from None
    dialect = GatewayDialect(choice(gw, "gateway.dialect", GatewayDialect.NATIVE,
                                    tuple(GatewayDialect)))
    action = HumanAction(choice(human, "human.action", "approve", HUMAN_ACTIONS))
    ticket = TicketKind(choice(human, "human.ticket", "issued", TICKETS))
    fault = StorageFault(choice(storage, "storage.fault", "none", STORAGE_FAULTS))
    worker_error = expect.get("worker_error")
    if worker_error is not None and worker_error not in WORKER_ERRORS:
        raise fail("expect.worker_error",
                   f"{worker_error!r}; allowed: {', '.join(WORKER_ERRORS)}")
    read_timeout = (positive(sut, "sut.read_timeout_s", 5)
                    if "read_timeout_s" in sut else None)
    max_attempts = (int(positive(sut, "sut.max_attempts", 5))
                    if "max_attempts" in sut else None)
    feedback = human.get("feedback")
    if feedback is not None and not 0 < len(feedback.strip()) <= 2000:
        raise fail("human.feedback", "must be 1-2000 characters of text")
    resumers = int(positive(conc, "concurrency.resumers", 1))
    story: tuple[Step, ...] = ()
    if STORY in data:
        for table, keys in _STORY_REPLACES.items():
            given = sorted(k for k in data.get(table, {}) if keys is None or k in keys)
            if given:
                dotted = table if keys is None else f"{table}.{given[0]}"
                raise fail(dotted, f"[[{STORY}]] tells the story: write this as a step "
                           "instead (scenarios/README.md, \"The story as steps\")")
        story = parse_story(data[STORY], text, leases=conc.get("leases", False), fail=fail_at,
                            order_note=sut.get("order_note", False))
    scenario = Scenario(
        name=name, path=path, description=data.get("description", ""),
        case_id=case.get("case_id", f"case-{case.get('order_id', 'O-1001')}"),
        order_id=case.get("order_id", "O-1001"), policy=policy,
        idempotency_keys=sut.get("idempotency_keys", True), read_timeout_s=read_timeout,
        max_attempts=max_attempts, order_note=sut.get("order_note", False), points=points,
        schedules=schedules, crash_mode=crash_mode, power_points=power_points,
        baseline=crash.get("baseline", True),
        double=crash.get("double", False), human_action=action, reject_feedback=feedback,
        approve_at=point(human, "human.approve_at"),
        approve_delay_h=positive(human, "human.delay_hours", 0),
        approve_twice=human.get("twice", False), ticket=ticket,
        gateway_faults=tuple(faults), gateway_dialect=dialect, resumers=resumers,
        leases=conc.get("leases", False),
        lease_ttl_s=positive(conc, "concurrency.lease_ttl_s", 30),
        takeover_at=point(conc, "concurrency.takeover_at"),
        same_owner=conc.get("same_owner", False), storage_fault=fault,
        lock_at=point(storage, "storage.lock_at"),
        lock_ms=int(positive(storage, "storage.lock_ms", 300)),
        expect_failing=frozenset(CheckId(c) for c in failing),
        expect_deliveries=_deliveries(expect, fail),
        expect_worker_error=worker_error, story=story,
        target=parse_target(data.get("target", {}), path, fail),
    )
    for dotted, reason in impossible(scenario):
        raise fail(dotted, reason)
    return scenario


def _deliveries(expect: dict[str, Any], fail: Any) -> int:
    value = expect.get("deliveries", 1)
    if value not in (0, 1) or isinstance(value, bool):
        raise fail("expect.deliveries", f"{value!r}; allowed: 0 (nothing may be sent) or 1")
    return int(value)


def impossible(s: Scenario) -> list[tuple[str, str]]:
    """Combinations that can never run as written: ``(field, reason)`` pairs."""
    problems = target_limits(s)
    deciding = [st for st in s.story if isinstance(st, WorkersStep)
                and WorkerRole.DECIDE in (st.role, st.recover)]
    if deciding and s.target is None:
        problems.append(("story", "a \"decide\" worker delivers the human's decision to a "
                                  "[target] with a decide function; the reference loop has "
                                  "none"))
    if s.order_note and s.target is not None:
        problems.append(("sut.order_note", "the order note is the reference loop's second "
                                           "gated action; a [target] has none"))
    if s.human_action == "reject" and (s.approve_at or s.approve_twice or s.ticket != "issued"):
        problems.append(("human.action", "a rejected case has no approval: approve_at, twice "
                                         "and ticket need action = \"approve\""))
    if s.takeover_at and (not s.leases or s.resumers != 1):
        problems.append(("concurrency.takeover_at", "a takeover needs leases = true and "
                                                    "resumers = 1"))
    if (s.human_action == "reject" and s.reject_feedback is None and not s.story
            and s.target is None and s.expect_deliveries != 0):
        problems.append(("expect.deliveries", "a rejection without feedback ends the case "
                                              "unsent: set deliveries = 0 (or give "
                                              "human.feedback, and the redraft is sent)"))
    if s.reject_feedback is not None and s.human_action != "reject":
        problems.append(("human.feedback", "feedback goes with action = \"reject\""))
    if s.same_owner and not s.leases:
        problems.append(("concurrency.same_owner", "one owner id for every worker needs "
                                                   "leases = true"))
    if s.resumers > 1 and not s.leases:
        problems.append(("concurrency.resumers", "concurrent resumers need leases = true"))
    if (s.lock_at is not None) != (s.storage_fault == "lock"):
        problems.append(("storage.lock_at", "lock_at goes with fault = \"lock\" (and it "
                                            "needs one)"))
    if s.approve_at is not None and (s.ticket != "issued" or s.approve_twice):
        problems.append(("human.approve_at", "an approval mid-resume issues the ticket itself: "
                                             "ticket and twice need approve_at unset"))
    timeout_ms = 1000 * (5.0 if s.read_timeout_s is None else s.read_timeout_s)
    for f in s.gateway_faults:
        if f.kind is FaultKind.DELAY_AFTER_ACCEPT and (f.ms or 0) <= timeout_ms:
            problems.append(("gateway.faults", f"delay_after_accept ms = {f.ms} must exceed "
                             f"the client's read timeout ({timeout_ms:g} ms; "
                             "sut.read_timeout_s) to answer after it"))
    if s.takeover_at is not None and s.takeover_at.label not in labels.RESUMER_POINTS:
        problems.append(("concurrency.takeover_at",
                         f"{s.takeover_at.label} is not reached by a resuming worker; allowed: "
                         + ", ".join(sorted(labels.RESUMER_POINTS))))
    if s.approve_at is not None and s.approve_at.label in labels.AFTER_APPROVAL:
        problems.append(("human.approve_at", f"{s.approve_at.label} is only reached after "
                                             "an approval"))
    return problems


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} must be a string")
    return value


def _as_written(reason: str, text: str, line: int | None, dotted: str) -> str:
    """``reason`` with the value as the file writes it when TOML read it as ``inf``: a
    number too large for a float (``1e400``) is ``inf`` to ``tomllib``, and a message
    about ``inf`` would show the user a value they never wrote."""
    read = re.match(r"(-?inf): ", reason)
    if read is None or line is None:
        return reason
    key = re.escape(dotted.rpartition(".")[2])
    written = re.search(rf"{key}\s*=\s*([^\s#,}}]+)", text.splitlines()[line - 1])
    if written is None or written[1].lstrip("+-") == "inf":
        return reason
    return f"{written[1]} (too large for a float: read as {read[1]}): {reason[read.end():]}"


def _line_of(text: str, dotted: str) -> int | None:
    """The 1-based line where ``dotted`` (``table.key`` or ``key``) is set, if found: under
    its ``[table]`` header, as a dotted or quoted key, in an inline table, or as
    ``[[table.key]]``; else the line of its table's header."""
    table, _, key = dotted.rpartition(".")
    k = rf'(?:{re.escape(key)}|"{re.escape(key)}"|\'{re.escape(key)}\')'
    t = rf'(?:{re.escape(table)}|"{re.escape(table)}")' if table else ""
    lines = text.splitlines()
    current = ""
    header_line = None
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        header = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", stripped)
        if header:
            current = header[1].strip().replace('"', "")
            if not table and current == key:
                return number  # a top-level name used as a table
            if table and current == f"{table}.{key}":
                return number  # [[table.key]]
            if table and current == table and header_line is None:
                header_line = number
            continue
        if current == table and re.match(rf"^{k}\s*=", stripped):
            return number
        if table and not current and (re.match(rf"^{t}\s*\.\s*{k}\s*=", stripped)
                                       or re.match(rf"^{t}\s*=\s*\{{.*\b{k}\s*=", stripped)):
            return number  # a dotted key, or an inline table, at the top level
    return header_line
