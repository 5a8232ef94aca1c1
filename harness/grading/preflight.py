"""The grade's preflight: start the implementation once (``python -m MODULE --help``) before
any execution, so that one that does not start scores 0 with its own error instead of a
matrix of ``unknown`` (``harness.grading.grade.grade``).

It starts the way the grade's workers start: through the grade's fork server when there is
one (our own code: the server preloaded from its folder; a sealed implementation: the
sealed server, in a sandbox of its own, ``harness.launch.sealed``), else as a fresh
interpreter, sealed when the workers are (``harness.sandbox.users``, ``harness.sandbox.boot``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile

from harness.launch.launcher import Launcher
from harness.launch.processes import output_tail
from harness.launch.sealed import sealed_argv
from harness.model import SRC, Sut
from harness.sandbox import users as sandbox

__all__ = ["preflight", "sealed"]


def sealed(sut: Sut) -> bool:
    """Whether ``sut``'s workers run sealed (untrusted, and the harness is root)."""
    return sut.untrusted and sandbox.available()


def preflight(sut: Sut, timeout_s: float = 60.0, launcher: Launcher | None = None
              ) -> str | None:
    """Start the implementation once (``MODULE --help`` under its limits, sealed like its
    workers). Returns ``None`` if it starts, else what went wrong (for the student).

    ``launcher``: the grade's launcher. ``--help`` then starts through it as the workers
    do, from the fork server the grade starts anyway (no interpreter of its own): for our
    own code (the reference or a trusted variant) the server preloaded from its folder; for
    a sealed implementation the sealed server (``harness.forkserver.sealed``), in a sandbox of
    its own. Otherwise (``None``, a fresh interpreter per worker, or our own code with a
    sealed target's server) as before: a fresh interpreter, sealed when the workers are."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOPOPS_")}
    env["PYTHONPATH"] = sut.pythonpath(env.get("PYTHONPATH"))
    argv, cwd, box = sut.argv("--help"), str(sut.path or SRC), None
    if launcher is not None and not sealed(sut) and not getattr(launcher, "sealed", False):
        return _preflight_through(launcher, sut, argv, env, cwd, timeout_s)
    if not sealed(sut):  # our own code, with a sealed target's server: a fresh interpreter
        launcher = None
    if launcher is not None and getattr(launcher, "sealed", False):
        return _preflight_sealed(launcher, sut, argv, env, timeout_s)
    try:
        if sealed(sut):
            assert sut.path is not None
            box = sandbox.Sandbox()
            box.started()
            argv = sealed_argv(argv, box.uid, str(sandbox.install_code(sut.path, sut.module)))
            env.update(PYTHONPATH=SRC, HOME=str(box.path))
            cwd = str(box.path)
        # output to a file, not a pipe: a daemon it leaves must not hold the grader up
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                    cwd=cwd, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                returncode = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                return f"`python -m {sut.module} --help` did not finish within {timeout_s:g} s"
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
    except sandbox.CodeRefused as exc:
        return f"its folder cannot be installed: {exc}"
    except (OSError, sandbox.SandboxError) as exc:
        return f"`python -m {sut.module} --help` could not be started: {exc}"
    finally:
        if box is not None:
            box.close()
    return _started(sut, returncode, stderr)


def _preflight_through(launcher: Launcher, sut: Sut, argv: list[str], env: dict[str, str],
                       cwd: str, timeout_s: float) -> str | None:
    """``preflight`` through ``launcher`` (``Launcher.start``; its worker is reaped)."""
    with tempfile.TemporaryDirectory(prefix="shopops-preflight-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        try:
            info = launcher.start(argv, env=env, cwd=cwd, stdout=out, stderr=err,
                                  index=0).wait(timeout_s)
        except (OSError, RuntimeError, ValueError) as exc:  # also HarnessStopping
            return f"`python -m {sut.module} --help` could not be started: {exc}"
        if info.timed_out:
            return f"`python -m {sut.module} --help` did not finish within {timeout_s:g} s"
        return _started(sut, info.returncode, output_tail(err))


def _preflight_sealed(server: Launcher, sut: Sut, argv: list[str], env: dict[str, str],
                     timeout_s: float) -> str | None:
    """``preflight`` forked from the grade's sealed fork server, in a sandbox of its own,
    exactly as each execution starts its workers (``harness.launch.sealed``: the uid's
    every process is killed once it exits, a daemon it leaves included)."""
    from harness.launch.sealed import SealedLauncher
    from shopops.records import DEFAULT_FIXTURES

    assert sut.path is not None
    try:
        box = sandbox.Sandbox()
    except sandbox.CodeRefused as exc:
        return f"its folder cannot be installed: {exc}"
    except (OSError, sandbox.SandboxError) as exc:
        return f"`python -m {sut.module} --help` could not be started: {exc}"
    try:
        launcher = SealedLauncher(box, str(sandbox.install_code(sut.path, sut.module)),
                                  lambda line: None,
                                  str(sandbox.install_fixtures(DEFAULT_FIXTURES)),
                                  server)  # type: ignore[arg-type]
        return _preflight_through(launcher, sut, argv, env, str(box.path), timeout_s)
    except sandbox.CodeRefused as exc:
        return f"its folder cannot be installed: {exc}"
    except (OSError, sandbox.SandboxError) as exc:
        return f"`python -m {sut.module} --help` could not be started: {exc}"
    finally:
        box.close()


def _started(sut: Sut, returncode: int, stderr: str) -> str | None:
    if returncode != 0:
        tail = "\n".join(stderr.strip().splitlines()[-8:])
        return (f"`python -m {sut.module} --help` exited {returncode}; the "
                f"implementation does not start:\n{tail}")
    return None
