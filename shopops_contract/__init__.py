"""The contract between the ShopOps crash harness and any loop under test
(``docs/contract.md``): the labelled points (``labels``), the limits (``limits``), the case
phases and their FSM (``phases``), the digests approvals bind to (``digests``), the
approval gates and record statuses (``approvals``), and the checkpoint database and
``state_json`` as a machine-readable schema (``schema``, over ``schema/*.json``).

Both sides import it: the reference loop (``shopops``) and the harness, whose judge reads
a loop only through it. It imports nothing of either, and nothing outside the standard
library at import time (``schema.validator`` imports ``jsonschema`` when first asked).
"""
