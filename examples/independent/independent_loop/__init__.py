"""An independent durable ShopOps loop, written from docs/contract.md alone.

Modules:
  cli        argument parsing, error lines, exit codes
  clock      the wall clock with SHOPOPS_CLOCK_OFFSET_S applied
  errors     the refusals the contract names
  failpoints the client of SHOPOPS_FAILPOINT_CHANNEL
  approvals  the client of SHOPOPS_APPROVALS_SOCKET (or a local JSON file)
  gateway    the email gateway / order-note client with bounded retries
  ledger     the SQLite checkpoint ledger, leases, and the v1->v2 migration
  compose    drafting, the order note, digests and derived ids
  engine     the phase machine that drives one worker
"""

PROG = "independent_loop"
