"""The harness's own servers, each the authority on what it records: the mock email
gateway and order service (``gateway``, their ledgers ``ledger``, ``gateway_serve`` in the
foreground), the approval service (``approvals``), the failpoint channel (``channel``),
who is at the other end of a connection (``peers``) and serving in a thread (``serving``).

Plumbing: it may import ``model`` only.
"""
