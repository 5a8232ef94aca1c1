"""What the 'model' writes, and the ids derived from it.

Digests are the contract's: SHA-256 of the canonical JSON (sorted keys, no spaces, UTF-8).
Request ids and idempotency keys are functions of the case, the gate and the digest only,
so a worker that comes back after a crash derives the very same ones.
"""

import hashlib
import json
import secrets

GATE_EMAIL = "send_email"
GATE_NOTE = "add_order_note"


def canonical_digest(obj: dict) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def draft_digest(draft: dict) -> str:
    return canonical_digest({"body": draft["body"], "subject": draft["subject"],
                             "to": draft["to"]})


def note_digest(body: str, order_id: str) -> str:
    return canonical_digest({"body": body, "order_id": order_id})


def request_id(case_id: str, gate: str, digest: str) -> str:
    return f"ask.{case_id}.{gate}.{digest[:16]}"


def idempotency_key(case_id: str, gate: str, digest: str) -> str:
    return f"once.{case_id}.{gate}.{digest[:32]}"


def _status_sentence(order: dict) -> str:
    status = order.get("status")
    eta = order.get("carrier_eta")
    if status == "delayed":
        return (f"Your order is running late. The carrier's latest estimate for delivery is "
                f"{eta}.")
    if status == "shipped":
        return f"Your order is on its way; the carrier expects to deliver it by {eta}."
    if status == "refund_pending":
        return "Your refund is being processed and should reach you shortly."
    if status == "delivered":
        return "Our records show your order was delivered."
    return f"Your order's current status is: {status}."


def write_draft(customer: dict, order: dict, feedback: list[str], policy: str) -> dict:
    first_name = (customer.get("name") or "there").split()[0]
    lines = [
        f"Hello {first_name},",
        "",
        f"This is an update about order {order['order_id']} ({order.get('item')}).",
        _status_sentence(order),
    ]
    if feedback:
        lines.append("")
        lines.append("As you asked:")
        for item in feedback:
            lines.append(f"- {item}")
    lines += ["", "Apologies for any inconvenience, and thank you for shopping with us.",
              "", "The ShopOps support team"]
    if policy == "varying":
        # a sampled model never writes the same text twice
        lines.append(f"(ref {secrets.token_hex(6)})")
    return {"to": customer["email"],
            "subject": f"Your order {order['order_id']}: an update",
            "body": "\n".join(lines)}


def write_note(customer: dict, order: dict) -> str:
    return (f"Customer {customer.get('customer_id')} ({customer.get('email')}) was emailed "
            f"about order {order['order_id']} (status {order.get('status')}).")
