"""The CRM records the Intake tools read, shipped as JSON under ``fixtures/``.

Only the fields a draft needs are returned (Chapter 8: no full CRM dumps in the snapshot).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopops.errors import ShopOpsError

ENV_FIXTURES = "SHOPOPS_FIXTURES"
DEFAULT_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


class RecordNotFound(ShopOpsError, LookupError):
    """No such customer or order (fields: ``kind``, ``key``, ``path``)."""


@dataclass(frozen=True)
class Records:
    """Customers and orders keyed by id (``dict[str, dict[str, Any]]`` each)."""

    customers: dict[str, dict[str, Any]]
    orders: dict[str, dict[str, Any]]
    source: str = "<inline>"

    @classmethod
    def load(cls, directory: str | os.PathLike[str] | None = None) -> Records:
        """Read ``customers.json`` and ``orders.json`` from ``directory`` (default
        ``$SHOPOPS_FIXTURES`` or the repository's ``fixtures/``).

        Raises:
            ShopOpsError: a file is missing or is not a JSON object of records.
        """
        base = Path(directory or os.environ.get(ENV_FIXTURES) or DEFAULT_FIXTURES)
        loaded: list[dict[str, dict[str, Any]]] = []
        for name in ("customers.json", "orders.json"):
            path = base / name
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ShopOpsError(f"cannot read records {path}: {exc}", path=str(path)) from exc
            if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
                raise ShopOpsError(f"{path} must be a JSON object of records", path=str(path))
            loaded.append(data)
        return cls(loaded[0], loaded[1], str(base))

    def order(self, order_id: str) -> dict[str, Any]:
        """The order record. Raises ``RecordNotFound``."""
        try:
            return dict(self.orders[order_id])
        except KeyError:
            raise RecordNotFound(
                f"no order {order_id!r} in {self.source}", kind="order", key=order_id,
                path=self.source,
            ) from None

    def customer_for_order(self, order_id: str) -> dict[str, Any]:
        """The customer who placed ``order_id`` (id, name, email, tier). Raises
        ``RecordNotFound``."""
        customer_id = self.order(order_id).get("customer_id")
        try:
            return dict(self.customers[str(customer_id)])
        except KeyError:
            raise RecordNotFound(
                f"no customer {customer_id!r} (order {order_id}) in {self.source}",
                kind="customer", key=str(customer_id), path=self.source,
            ) from None
