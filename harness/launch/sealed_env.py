"""What of the grader's environment an untrusted implementation may see: ``WORKER_ENV``.

Used twice: a sealed worker's environment (``harness.launch.sealed.worker_env``), and the
environment the sealed fork server itself starts with (``harness.launch.fork``): a forked
worker's ``/proc/self/environ`` is the server's start-up environment whatever its
``os.environ`` says, and a sealed worker may read it (it is dumpable again once it runs
as its own uid), so the server must hold nothing a worker may not (found by an attack,
stop 36).
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.launch.power import ENV_DIR as POWER_DIR
from harness.launch.power import ENV_SHADOW as POWER_SHADOW

__all__ = ["WORKER_ENV", "sealed_env"]

#: The only variables a sealed worker gets (``sealed_env``): what ``docs/contract.md``
#: ("The environment") names, ``PATH``, the locale (``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``)
#: and what the harness itself reads in the worker (its title, a target's frameworks,
#: ``PYTHONPATH``, ``HOME``, ``TMPDIR``). Nothing else of the grader's environment — a
#: token, a key, a path of its machine — reaches the implementation.
WORKER_ENV = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "HOME", "TMPDIR", "NO_PROXY", "no_proxy",
    "SHOPOPS_FIXTURES", "SHOPOPS_APPROVALS_SOCKET", "SHOPOPS_FAILPOINT_CHANNEL",
    "SHOPOPS_CLOCK_OFFSET_S", "HARNESS_WORKER_TITLE", "HARNESS_TARGET_FRAMEWORKS",
    # an app's own email client pointed at the execution's gateway (MockGateway.worker_env)
    "RESEND_API_URL", "RESEND_API_KEY", "SMTP_HOST", "SMTP_PORT",
    # a power-cut execution's shim (harness.launch.power.env_for); LD_PRELOAD only with it
    POWER_DIR, POWER_SHADOW, "LD_PRELOAD"})


def sealed_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` cut down to ``WORKER_ENV`` and the ``LC_*`` locale variables; ``LD_PRELOAD``
    only in a power-cut execution (the shim's state folder named), never the grader's own."""
    out = {k: v for k, v in env.items() if k in WORKER_ENV or k.startswith("LC_")}
    if POWER_DIR not in out:
        out.pop("LD_PRELOAD", None)
    return out
