"""The ShopOps exception tree: small, flat, with structured fields, and picklable.

Every error carries a human message plus keyword fields (``case_id``, ``path``,
``field`` …) that tools read without parsing text. They pickle cleanly (the
harness moves them across process boundaries: xdist workers, fork-server
children), following psutil's ``Error`` classes.
"""

from __future__ import annotations

from typing import Any


def _rebuild(cls: type[ShopOpsError], message: str, fields: dict[str, Any]) -> ShopOpsError:
    return cls(message, **fields)


class ShopOpsError(Exception):
    """Base class of every ShopOps error.

    Args:
        message: what went wrong, for a human, naming the file/field where relevant.
        **fields: structured facts (e.g. ``case_id="case-O-1001"``), also set as attributes.
    """

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = dict(fields)
        for key, value in fields.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.fields))

    def __str__(self) -> str:
        return self.message


class InputError(ShopOpsError, ValueError):
    """A value given to an entry point is not allowed (fields: ``input`` — the option,
    variable or field, ``value`` and ``allowed``). Raised before anything runs
    (``shopops.validators``)."""


class ConfigError(InputError):
    """A bad setting, mostly an environment variable (fields: ``variable``, ``value``,
    ``allowed``; ``input`` is the variable too)."""


class IllegalTransition(ShopOpsError):
    """A phase change the FSM does not allow (fields: ``source``, ``target``)."""


class StateInvalid(ShopOpsError, ValueError):
    """A state dict that is not a valid ``State`` (fields: ``field``, ``reason``)."""


class CheckpointError(ShopOpsError):
    """Base of checkpoint-store errors."""


class CheckpointNotFound(CheckpointError, LookupError):
    """No checkpoint row at all for ``(case_id, run_id)``. Never raised for a corrupt row."""


class CheckpointCorrupt(CheckpointError):
    """A stored ``state_json`` cannot be trusted; the row is left untouched.

    Fields: ``path``, ``case_id``, ``run_id``, ``seq``, ``reason``. The chapter: "Corrupt /
    unsupported schema versions raise — do not silently guess."
    """


class UnsupportedSchemaVersion(CheckpointError):
    """A row whose ``schema_version`` this code cannot read (fields as ``CheckpointCorrupt``
    plus ``version``). A v1 row raises this until the explicit v1→v2 migration has run."""


class LeaseHeld(CheckpointError):
    """Another owner holds a live lease on the case (fields: ``case_id``, ``owner``,
    ``holder``, ``expires_at`` in epoch seconds). Chapter 8 exercise 4 / Chapter 32."""


class NotOurDatabase(ShopOpsError):
    """A file that is not a database of ours of the kind expected (fields: ``path``,
    ``kind`` — ``"checkpoint database"``, ``"approval queue"``, ``"gateway log"`` — and
    ``found``: what was found instead: a folder, a symlink loop, another file type, another
    application's tables or another of our databases, wrong columns, an unreadable SQLite
    file). Refused before anything is written: the file is left exactly as it was
    (Chapter 8: fail closed; ``shopops.checkpoint_file.inspect``)."""


class DatabaseNotFound(ShopOpsError, LookupError):
    """No database file where a command needs an existing one (fields: ``path``, ``kind``):
    e.g. ``shopops approve`` on a queue file that does not exist. Nothing is created."""


class NotACheckpointDatabase(NotOurDatabase, CheckpointError):
    """A file that is not a checkpoint database of ours (``NotOurDatabase`` with ``kind``
    ``"checkpoint database"``)."""


class HistoryTooLong(CheckpointError):
    """A case's checkpoint history holds more rows than a reader was told to read (fields:
    ``path``, ``case_id``, ``rows``, ``limit``): nothing of it was decoded."""


class FencedOff(CheckpointError):
    """A write from a worker whose lease was taken over (fields: ``case_id``, ``owner``,
    ``fence``, ``current_fence``)."""


class ApprovalRefused(ShopOpsError):
    """``grant_approval`` or the send refused a ticket (fields: ``ticket_id``, ``case_id``,
    ``reason`` — one of ``unknown_ticket``, ``wrong_case``, ``wrong_gate``, ``stale_draft``,
    ``consumed``, ``rejected``, ``no_draft``, ``wrong_phase``, ``unknown_gate``, ``no_request``,
    ``duplicate_ticket``, ``bad_feedback``, ``no_ticket``). Tickets are server-side facts
    (Chapter 8)."""


class GatewayError(ShopOpsError):
    """Base of email-gateway client errors."""


class GatewayUnavailable(GatewayError):
    """Retries exhausted without a definite answer (fields: ``attempts``, ``last_error``).
    The message may or may not have been delivered: retry later with the same key."""


class GatewayRejected(GatewayError):
    """The gateway answered with a definite 4xx refusal (fields: ``status``, ``body``), e.g.
    409/422 for an idempotency key reused with a different body."""


class FailpointSpecError(ShopOpsError, ValueError):
    """A malformed ``SHOPOPS_FAILPOINTS`` spec (fields: ``spec``, ``entry``, ``reason``)."""


class FailpointRaised(ShopOpsError):
    """Raised by a failpoint armed with the ``raise`` action (field: ``label``)."""
