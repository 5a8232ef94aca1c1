"""The fork server: one pre-imported process that forks workers (``server``), what a forked
reference worker runs (``worker``) and its sealed mode for untrusted code (``sealed``).

Plumbing: it may import ``sandbox`` only (the boot of a sealed worker); it names the
target worker's modules as strings to preload them.
"""
