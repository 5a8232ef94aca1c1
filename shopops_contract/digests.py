"""The digests an approval binds to (``docs/contract.md``, "The draft digest"): SHA-256 of
canonical JSON (sorted keys, no spaces, UTF-8), hex. A loop asks for approval of a draft's
digest; the harness recomputes it from what the gateway delivered, so the body sent is the
body approved.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["draft_digest", "note_digest"]


def _digest(obj: dict[str, str]) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def draft_digest(to: str, subject: str, body: str) -> str:
    """Hex SHA-256 of ``{"body": body, "subject": subject, "to": to}`` as canonical JSON:
    what an approval of the email (gate ``send_email``) binds to."""
    return _digest({"to": to, "subject": subject, "body": body})


def note_digest(order_id: str, body: str) -> str:
    """Hex SHA-256 of ``{"body": body, "order_id": order_id}`` as canonical JSON: what an
    ``add_order_note`` approval binds to, and what the harness recomputes from the note the
    mock order service received."""
    return _digest({"order_id": order_id, "body": body})
