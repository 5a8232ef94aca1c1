"""The case's phase FSM enforced by the reference loop: the phases and edges are the
contract's (``shopops_contract.phases``, which draws them); ``check_transition`` refuses
any other move with ``IllegalTransition``.
"""

from __future__ import annotations

from shopops.errors import IllegalTransition
from shopops_contract.phases import ALLOWED, PRE_APPROVAL, TERMINAL, Phase

__all__ = ["ALLOWED", "PRE_APPROVAL", "TERMINAL", "Phase", "check_transition"]


def check_transition(source: str, target: str) -> Phase:
    """Validate ``source → target`` and return the target phase.

    Args:
        source: the current phase value (e.g. ``"drafting"``).
        target: the requested phase value.

    Returns:
        ``Phase(target)``.

    Raises:
        IllegalTransition: either value is not a phase, or the FSM above has no such edge
            (self-transitions included).
    """
    try:
        src, dst = Phase(source), Phase(target)
    except ValueError as exc:
        raise IllegalTransition(
            f"unknown phase in transition {source!r} -> {target!r}; allowed phases: "
            f"{', '.join(p.value for p in Phase)}",
            source=source,
            target=target,
        ) from exc
    if dst not in ALLOWED[src]:
        allowed = ", ".join(sorted(p.value for p in ALLOWED[src])) or "none (terminal)"
        raise IllegalTransition(
            f"illegal phase transition {src.value} -> {dst.value}; from {src.value} allowed: "
            f"{allowed}",
            source=source,
            target=target,
        )
    return dst
