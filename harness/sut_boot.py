"""Start an untrusted implementation's worker under resource limits.

``python -m harness.sut_boot MEMORY_MIB FILE_SIZE_MIB CPU_S MODULE ARGS...`` sets
``RLIMIT_AS``, ``RLIMIT_FSIZE`` and ``RLIMIT_CPU`` (``resource``, POSIX setrlimit), then runs
``MODULE`` as ``python -m MODULE ARGS`` would. It imports nothing of the harness or of the
reference loop, so the implementation's own package is the one found first on the path.
"""

from __future__ import annotations

import resource
import runpy
import sys


def main(argv: list[str]) -> None:
    """Apply the limits in ``argv[:3]`` and run ``argv[3]`` with the rest as its argv."""
    memory_mib, file_mib, cpu_s = (int(a) for a in argv[:3])
    module, args = argv[3], argv[4:]
    resource.setrlimit(resource.RLIMIT_AS, (memory_mib << 20, memory_mib << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mib << 20, file_mib << 20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
