"""The checklist: pure functions over ``Evidence``, each returning a ``CheckResult`` with
the lines a human needs to see why (``registry`` lists them and what each reads).

Imports only ``model`` and ``judge.checks.support``; no check reads a file or asks the loop
anything.
"""
