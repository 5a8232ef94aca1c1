"""``State`` and its exact JSON form, the phase FSM, and the error tree's pickling.

Chapter 8: the checkpoint holds the draft, the FSM phase, the ticket slot and the send key;
"never best effort field defaults" — ``from_dict`` is strict about every field.
"""

from __future__ import annotations

import itertools
import json
import pickle
from typing import Any

import pytest

from shopops import errors
from shopops.errors import IllegalTransition, ShopOpsError, StateInvalid
from shopops.failpoints import FailpointChannelError
from shopops.phases import ALLOWED, PRE_APPROVAL, TERMINAL, Phase, check_transition
from shopops.records import RecordNotFound
from shopops.runtime import ConfigError
from shopops.state import SCHEMA_VERSION, Draft, State

DRAFT = Draft(to="jordan.lee@example.com", subject="Update on your order O-1001",
              body="Hi Jordan,\n\nIt is delayed — sorry.\n\n— ShopOps support")


def full_state() -> State:
    """A state with every optional field set, a draft included."""
    return State(
        case_id="case-O-1001", order_id="O-1001", phase="sending", step=6, max_steps=9,
        done=False, customer={"customer_id": "C-501", "name": "Jordan Lee"},
        order={"order_id": "O-1001", "total_cents": 12900, "carrier_eta": None},
        draft=DRAFT, approval_request_id="req-case-O-1001-abc", approval_ticket="apr-desk-9",
        send_idempotency_key="case-O-1001:send_email:0123456789abcdef", email_sent=False,
        delivery_id=None, policy_version="p-1", tool_schema_hash="h", model_route_id="r",
    )


def valid_dict() -> dict[str, Any]:
    return full_state().to_dict()


# -- JSON round trip ---------------------------------------------------------------------

def test_json_round_trip_with_a_draft() -> None:
    state = full_state()
    text = state.to_json()
    back = State.from_json(text)
    assert back == state
    assert isinstance(back.draft, Draft)
    assert back.draft == DRAFT
    assert back.to_json() == text  # canonical: the same bytes again


def test_to_dict_nests_the_draft_and_from_dict_inverts_it() -> None:
    data = full_state().to_dict()
    assert data["draft"] == {"to": DRAFT.to, "subject": DRAFT.subject, "body": DRAFT.body}
    assert State.from_dict(json.loads(json.dumps(data))) == full_state()


def test_default_state_round_trips_and_starts_in_intake() -> None:
    state = State(case_id="case-O-1001", order_id="O-1001")
    assert (state.phase, state.step, state.draft, state.schema_version) == (
        "intake", 0, None, SCHEMA_VERSION)
    assert State.from_json(state.to_json()) == state


def test_to_json_is_sorted_and_compact() -> None:
    text = full_state().to_json()
    keys = list(json.loads(text))
    assert keys == sorted(keys)
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_draft_digest_binds_every_field() -> None:
    base = DRAFT.digest()
    assert len(base) == 64 and base == Draft(DRAFT.to, DRAFT.subject, DRAFT.body).digest()
    assert Draft("x@example.com", DRAFT.subject, DRAFT.body).digest() != base
    assert Draft(DRAFT.to, DRAFT.subject + "!", DRAFT.body).digest() != base
    assert Draft(DRAFT.to, DRAFT.subject, DRAFT.body + " ").digest() != base


# -- strict from_dict ------------------------------------------------------------------------

def invalid(data: Any) -> StateInvalid:
    with pytest.raises(StateInvalid) as info:
        State.from_dict(data)
    return info.value


@pytest.mark.parametrize("root", [[], "state", 3, None])
def test_root_must_be_an_object(root: Any) -> None:
    exc = invalid(root)
    assert (exc.field, exc.reason) == ("<root>", "not an object")


def test_unknown_field_is_named() -> None:
    data = valid_dict() | {"lease_owner": "w1"}
    exc = invalid(data)
    assert (exc.field, exc.reason) == ("lease_owner", "unknown")
    assert "lease_owner" in str(exc)


@pytest.mark.parametrize("name", ["case_id", "draft", "preferred_channel", "send_idempotency_key"])
def test_missing_field_is_named_and_never_defaulted(name: str) -> None:
    data = valid_dict()
    del data[name]
    exc = invalid(data)
    assert (exc.field, exc.reason) == (name, "missing")
    assert name in str(exc)


@pytest.mark.parametrize(("name", "value"), [
    ("step", "6"),
    ("step", 6.0),
    ("step", True),         # bool is an int subclass: refused for an int field
    ("max_steps", False),
    ("schema_version", True),
    ("done", 0),            # an int is not a bool
    ("email_sent", "false"),
    ("case_id", None),
    ("phase", 3),
    ("customer", ["C-501"]),
    ("draft", "Hi Jordan"),
    ("approval_ticket", 9),
    ("preferred_channel", None),
])
def test_mistyped_field_is_named(name: str, value: Any) -> None:
    data = valid_dict()
    data[name] = value
    exc = invalid(data)
    assert (exc.field, exc.reason) == (name, "wrong type")
    assert repr(name) in str(exc)


@pytest.mark.parametrize("phase", ["parked", "APPROVED", "", "awaiting approval"])
def test_unknown_phase_lists_the_allowed_ones(phase: str) -> None:
    data = valid_dict()
    data["phase"] = phase
    exc = invalid(data)
    assert (exc.field, exc.reason) == ("phase", "unknown phase")
    assert all(p.value in str(exc) for p in Phase)


@pytest.mark.parametrize("version", [1, 3, 0])
def test_other_schema_versions_are_refused(version: int) -> None:
    data = valid_dict()
    data["schema_version"] = version
    exc = invalid(data)
    assert (exc.field, exc.reason) == ("schema_version", "unsupported version")


@pytest.mark.parametrize("draft", [
    {"to": "a@b", "subject": "s"},                                  # missing body
    {"to": "a@b", "subject": "s", "body": "b", "cc": "c@d"},        # extra key
    {"to": "a@b", "subject": "s", "body": None},                    # non-string value
    {"to": "a@b", "subject": 1, "body": "b"},
    {},
])
def test_bad_draft_shape(draft: dict[str, Any]) -> None:
    data = valid_dict()
    data["draft"] = draft
    exc = invalid(data)
    assert (exc.field, exc.reason) == ("draft", "wrong shape")


def test_from_json_rejects_invalid_json_as_state_invalid() -> None:
    with pytest.raises(StateInvalid) as info:
        State.from_json('{"case_id": "case-O-1001",')
    assert (info.value.field, info.value.reason) == ("<root>", "invalid json")
    assert isinstance(info.value, ValueError)


# -- the phase FSM ---------------------------------------------------------------------------

LEGAL = sorted((src, dst) for src, targets in ALLOWED.items() for dst in targets)
ILLEGAL = sorted(set(itertools.product(Phase, Phase)) - set(LEGAL))


def test_the_fsm_is_the_story() -> None:
    assert LEGAL == sorted([
        (Phase.INTAKE, Phase.DRAFTING),
        (Phase.DRAFTING, Phase.AWAITING_APPROVAL),
        (Phase.AWAITING_APPROVAL, Phase.APPROVED),
        (Phase.AWAITING_APPROVAL, Phase.REJECTED),
        (Phase.AWAITING_APPROVAL, Phase.DRAFTING),  # rejected with feedback: draft again
        (Phase.APPROVED, Phase.SENDING),
        (Phase.SENDING, Phase.COMPLETED),
    ] + [(p, Phase.DEAD_LETTERED) for p in (Phase.INTAKE, Phase.DRAFTING,
                                             Phase.AWAITING_APPROVAL, Phase.APPROVED,
                                             Phase.SENDING)])
    assert TERMINAL == {Phase.COMPLETED, Phase.REJECTED, Phase.DEAD_LETTERED}
    assert all(not ALLOWED[p] for p in TERMINAL)
    assert Phase.APPROVED not in PRE_APPROVAL and Phase.SENDING not in PRE_APPROVAL


@pytest.mark.parametrize(("source", "target"), LEGAL, ids=lambda p: p.value)
def test_every_legal_transition(source: Phase, target: Phase) -> None:
    assert check_transition(source.value, target.value) is target
    state = State(case_id="c", order_id="o", phase=source.value)
    state.transition(target)
    assert state.phase == target.value
    assert type(state.phase) is str  # what the checkpoint stores
    state2 = State(case_id="c", order_id="o", phase=source.value)
    state2.transition(target.value)
    assert state2.phase == target.value


@pytest.mark.parametrize(("source", "target"), ILLEGAL, ids=lambda p: p.value)
def test_every_illegal_transition_raises(source: Phase, target: Phase) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(source.value, target.value)
    assert (info.value.source, info.value.target) == (source.value, target.value)
    assert f"{source.value} -> {target.value}" in str(info.value)
    state = State(case_id="c", order_id="o", phase=source.value)
    with pytest.raises(IllegalTransition):
        state.transition(target)
    assert state.phase == source.value  # unchanged by a refused transition


def test_illegal_transitions_include_the_dangerous_shortcuts() -> None:
    for source, target in [(Phase.AWAITING_APPROVAL, Phase.SENDING),
                           (Phase.DRAFTING, Phase.APPROVED),
                           (Phase.INTAKE, Phase.COMPLETED),
                           (Phase.REJECTED, Phase.APPROVED),
                           (Phase.COMPLETED, Phase.SENDING),
                           (Phase.APPROVED, Phase.APPROVED)]:
        assert (source, target) in ILLEGAL


@pytest.mark.parametrize(("source", "target"), [("parked", "drafting"), ("intake", "nowhere"),
                                                ("", "")])
def test_unknown_phase_names_raise_illegal_transition(source: str, target: str) -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition(source, target)
    assert info.value.fields == {"source": source, "target": target}
    assert "unknown phase" in str(info.value)


# -- the error tree pickles with its fields ----------------------------------------------

ERROR_SAMPLES: list[ShopOpsError] = [
    errors.ShopOpsError("base", path="/tmp/x.db"),
    errors.IllegalTransition("nope", source="intake", target="sending"),
    errors.StateInvalid("bad", field="step", reason="wrong type"),
    errors.CheckpointError("ckpt", path="a.db"),
    errors.CheckpointNotFound("none", path="a.db", case_id="case-O-1001", run_id="run-1",
                              seq=None),
    errors.CheckpointCorrupt("corrupt", path="a.db", case_id="case-O-1001", run_id="run-1",
                             seq=3, field="state_json", reason="invalid json"),
    errors.UnsupportedSchemaVersion("v1", path="a.db", case_id="c", run_id="r", seq=1,
                                    version=1, reason="unsupported version"),
    errors.LeaseHeld("held", case_id="c", owner="w2", holder="w1", expires_at=1.5),
    errors.FencedOff("fenced", case_id="c", owner="w1", fence=1, current_fence=2),
    errors.HistoryTooLong("long", path="c.db", case_id="c", rows=10_001, limit=10_000),
    errors.ApprovalRefused("refused", ticket_id="apr-desk-9", case_id="c",
                           reason="unknown_ticket"),
    errors.GatewayError("gw", url="http://127.0.0.1:1"),
    errors.GatewayUnavailable("down", attempts=3, last_error="HTTP 503"),
    errors.GatewayRejected("409", status=409, body={"error": "idempotency_key_reused"}),
    errors.FailpointSpecError("spec", spec="x=y", entry="x=y", reason="unknown label"),
    errors.FailpointRaised("raised", label="t4.parked"),
    FailpointChannelError("channel", path="/tmp/fp/s", label="t1.get_order"),
    RecordNotFound("no order", kind="order", key="O-9", path="fixtures"),
    ConfigError("bad", variable="SHOPOPS_POLICY", value="x", allowed="deterministic"),
    errors.InputError("bad", input="--jobs", value="0", allowed="1 to 8"),
    errors.NotACheckpointDatabase("foreign", path="a.db", found="tables: users"),
    errors.NotOurDatabase("foreign", path="q.db", kind="approval queue",
                          found="tables: users"),
    errors.DatabaseNotFound("missing", path="q.db", kind="approval queue"),
]


@pytest.mark.parametrize("exc", ERROR_SAMPLES, ids=lambda e: type(e).__name__)
def test_errors_pickle_round_trip_with_their_fields(exc: ShopOpsError) -> None:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert back.fields == exc.fields and back.fields
    assert back.message == exc.message and str(back) == str(exc)
    for key, value in exc.fields.items():
        assert getattr(back, key) == value


def test_every_error_class_is_covered_by_the_pickle_samples() -> None:
    classes = {obj for obj in vars(errors).values()
               if isinstance(obj, type) and issubclass(obj, ShopOpsError)}
    assert classes <= {type(e) for e in ERROR_SAMPLES}


def test_errors_keep_their_stdlib_bases() -> None:
    assert issubclass(errors.StateInvalid, ValueError)
    assert issubclass(errors.CheckpointNotFound, LookupError)
    assert issubclass(errors.FailpointSpecError, ValueError)
    assert issubclass(errors.CheckpointCorrupt, errors.CheckpointError)


@pytest.mark.parametrize(("changes", "field"), [
    ({"phase": "completed", "email_sent": False}, "email_sent"),
    ({"phase": "approved", "approval_ticket": None}, "approval_ticket"),
    ({"phase": "awaiting_approval", "draft": None}, "draft"),
    ({"step": -1}, "step"),
])
def test_a_state_that_contradicts_its_phase_is_invalid(changes: dict, field: str) -> None:
    """A consistent-looking but impossible checkpoint must fail closed, not be resumed."""
    good = State(case_id="case-O-1001", order_id="O-1001", phase="sending",
                 draft=Draft("a@example.com", "s", "b"), approval_ticket="apr-desk-1",
                 send_idempotency_key="k").to_dict()
    State.from_dict(good)  # the unchanged state is fine
    with pytest.raises(StateInvalid) as info:
        State.from_dict({**good, **changes})
    assert info.value.fields["field"] == field
