"""Starting workers: the ``Launcher`` protocol and its factory (``launcher``), one module
per launcher (``spawn``, ``fork``, ``sealed``), the fork server's client side (``fork_conn``,
``fork_packages``, ``target_servers``) and processes started, killed and reaped
(``processes``).

Plumbing: it may import ``forkserver``, ``sandbox`` and ``model``; it knows no story and no
verdict.
"""
