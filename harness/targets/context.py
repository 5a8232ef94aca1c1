"""What a target is handed: ``TargetContext``, written as JSON for each worker.

A target's functions (``start(ctx)``, ``resume(ctx)``, ``decide(ctx)``, ``history(ctx)``)
get everything they need from it, so nothing has to be copied next to their code: the CRM
and order fixtures (a folder of ``customers.json`` and ``orders.json``), the mock
gateway's URL, the approval queue's database (open it with
``shopops.approvals.ApprovalQueue``), a folder of their own for durable state, and the
scenario's switches (idempotency keys, options such as a durability mode).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shopops.errors import InputError

__all__ = ["FIXTURES", "TargetContext"]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@dataclass(frozen=True)
class TargetContext:
    """One execution as a target sees it.

    Attributes:
        case_id, order_id: the case (``"case-O-1001"``) and its order (``"O-1001"``).
        run_id: the durable run's id (a LangGraph ``thread_id``, a DBOS workflow id).
        workdir: a folder the target owns for its durable state (its SQLite files).
        gateway_url: the harness's mock email gateway, ``http://127.0.0.1:PORT``; send
            ``POST /v1/messages`` there, with ``Idempotency-Key`` when ``keys`` is on.
        approvals_db: the approval queue's SQLite file, for a target run without the
            harness's approval service (a test driving it by hand).
        fixtures: folder of ``customers.json`` and ``orders.json``.
        keys: send idempotency keys (``False`` only to show the duplicates it prevents).
        ticket: the ticket the human's approval issued, for ``resume``/``decide`` (else
            ``None``).
        options: the scenario's ``target.options`` (strings), e.g. ``{"durability": "exit"}``.
        approvals_service: the harness's approval service (``harness.services.approvals``;
            ``SHOPOPS_APPROVALS_SOCKET``), which holds the approval records under the
            harness; ``None``: the queue is the file ``approvals_db``.
        from_seq: resume from the ``from_seq``-th item of the target's ``history`` (1 =
            the oldest) instead of the latest (a story's ``from_seq``, the contract's
            ``--from-seq``): a LangGraph target invokes with that checkpoint's config (its
            ``checkpoint_id``); work recorded after it must not be done again. ``None``:
            the latest.
    """

    case_id: str
    order_id: str
    run_id: str
    workdir: str
    gateway_url: str
    approvals_db: str
    fixtures: str = str(FIXTURES)
    keys: bool = True
    ticket: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    approvals_service: str | None = None
    from_seq: int | None = None

    def approval_queue(self) -> Any:
        """The approval queue to ask and verify tickets with: a
        ``shopops.approvals.ApprovalQueue`` at the harness's service when there is one,
        else on ``approvals_db``. Use it as a context manager (``with ctx.approval_queue()
        as queue:``)."""
        from shopops.approvals import ApprovalQueue

        return ApprovalQueue(self.approvals_db, service=self.approvals_service)

    def option(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        """``options[name]`` or ``default``, refused unless one of ``allowed``.

        Raises:
            InputError: the value is not in ``allowed`` (names ``target.options.NAME``).
        """
        value = self.options.get(name, default)
        if value not in allowed:
            raise InputError(
                f"target.options.{name}: {value!r} is not one of {', '.join(allowed)}",
                input=f"target.options.{name}", value=value, allowed=", ".join(allowed))
        return value

    def to_json(self) -> str:
        """The context as one JSON object."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TargetContext:
        """Parse ``to_json``'s output.

        Raises:
            InputError: not a JSON object of exactly these fields.
        """
        try:
            data: Any = json.loads(text)
            return cls(**data)
        except (ValueError, TypeError) as exc:
            raise InputError(f"target context: {exc}", input="target context",
                             value=text[:200], allowed="TargetContext JSON") from None
