"""Observers: each turns one source of what a loop did into the neutral observations of
``harness.model.observations`` — the contract's SQLite checkpoint store (``store``), a
target's ``history`` (``target``), the approval records the harness holds (``approvals``).
Each says what it can and cannot observe (``History.observes``, ``History.cannot``).
"""
