"""Sealed executions: an untrusted implementation's workers run as a user of their own.

Chosen over the alternatives this container offers (tried, see the README's "Sealed
grading"): bubblewrap is not installed by default and re-execs every worker (no fork
server); ``systemd-run`` needs systemd as PID 1 (absent in containers and CI); cgroup v2 is
mounted here but not on every grading host. Plain POSIX credentials are always there when
the harness runs as root, which it does in CI and on Gradescope: each execution gets a
numeric uid/gid of its own from a pool (``UID_BASE`` …), held with an ``flock`` so parallel
harness processes never share one. The kernel then does the rest:

- the worker can write only what that uid owns: its sandbox folder (``Sandbox.path``, mode
  0700, the checkpoint and approval databases and its scratch files); the gateway log, the
  trace, the reports and the rubric are root's and out of its reach (and the run folder is
  0700, so nothing there can be read either);
- every process of the execution carries the uid, whatever it does (double fork, setsid,
  a new process group): ``Sandbox.processes`` finds them all through ``/proc`` and
  ``kill_all`` SIGKILLs them until none is left. A process cannot give a uid away without
  privilege (``setuid(2)``), so this is as strong as tracking a cgroup and needs no
  delegation. ``RLIMIT_NPROC`` (set by ``harness.sandbox.boot``) bounds a fork bomb;
- the execution's services and a target's context files are in ``Sandbox.shared`` (root's,
  the execution's gid, 0710): its uid reaches them by name, no other execution's can;
- what the uid leaves in ``/dev/shm``, ``/tmp``, ``/var/tmp`` and ``/run/lock`` is removed
  with the sandbox (``remove_temp_files``).

When the harness is not root, ``available()`` is false and grading says it ran unsealed.
"""

from __future__ import annotations

import atexit
import compileall
import fcntl
import os
import secrets
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from harness.sandbox import scratch
from harness.sandbox.code_copy import (
    REPORTS,
    CopyRefused,
    copy_file,
    copy_tree,
    harness_reports,
)

__all__ = ["POOL_SIZE", "TEMP_ROOTS", "UID_BASE", "CodeRefused", "Sandbox", "SandboxError", "area",
           "available", "check_installable", "install_code", "install_fixtures",
           "install_target", "kill_uid", "remove_temp_files", "strays", "sweep_strays"]

#: First uid/gid of the pool; ``POOL_SIZE`` consecutive ids, none of them in /etc/passwd.
UID_BASE = 4_170_000
POOL_SIZE = 512
_LOCK_DIR = Path(tempfile.gettempdir()) / "shopops-sealed-uids"
_lock = threading.Lock()
_area: Path | None = None


class SandboxError(OSError):
    """The sandbox could not be set up (no free uid, not root, a folder not creatable)."""


class CodeRefused(SandboxError):
    """An implementation's folder cannot be installed: it holds a symlink, a FIFO, a
    socket or a device, or is too large (``harness.sandbox.code_copy``; the message says which)."""


def available() -> bool:
    """True when workers can be given a uid of their own (the harness runs as root)."""
    return os.geteuid() == 0


def area() -> Path:
    """This harness process's folder of sandboxes (``shopops-sealed-XXXX`` in the scratch
    area of ``harness.sandbox.scratch``, else in ``/tmp``; mode 0711:
    a worker can reach its own folder by its unguessable name, not list the others).
    Removed at interpreter exit."""
    global _area
    with _lock:
        if _area is None:
            _area = Path(tempfile.mkdtemp(prefix="shopops-sealed-", dir=scratch.area()))
            os.chmod(_area, 0o711)
            atexit.register(shutil.rmtree, _area, True)
        return _area


def _uid_pids(uid: int) -> list[int]:
    """Live (not zombie) pids whose real, effective, saved or filesystem uid is ``uid``,
    from each ``/proc/PID/status`` (``proc(5)``: the ``State:`` and ``Uid:`` lines). Read
    directly rather than through psutil: about twice as fast, and this runs after every
    worker."""
    wanted = str(uid).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as status:
                zombie = False
                for line in status:
                    if line.startswith(b"State:"):
                        zombie = line.split()[1:2] in ([b"Z"], [b"X"])
                    elif line.startswith(b"Uid:"):
                        if not zombie and wanted in line.split()[1:]:
                            found.append(int(name))
                        break
        except OSError:
            continue  # gone meanwhile
    return found


def kill_uid(uid: int, timeout_s: float = 10.0) -> tuple[int, ...]:
    """SIGKILL every process whose real, effective or saved uid is ``uid``, again until none
    is left (a process forking meanwhile is caught in the next pass); reaped by whoever is
    its parent. Returns the pids killed.

    Raises:
        SandboxError: processes of ``uid`` still alive after ``timeout_s`` seconds.
    """
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        pids = _uid_pids(uid)
        if not pids:
            return tuple(killed)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            if pid not in killed:
                killed.append(pid)
        if time.monotonic() > deadline:
            raise SandboxError(f"processes of uid {uid} survive SIGKILL: {pids}")
        time.sleep(0.005)  # SIGKILL is delivered at once; let them die before looking again


class Sandbox:
    """One execution's confinement: a uid/gid of its own and a folder only it can write.

    Use as a context manager; ``close()`` kills every process of the uid, removes the
    folder and gives the uid back. Not thread-safe for concurrent ``close``.

    Attributes:
        uid, gid: the worker's credentials (``gid == uid``).
        path: the sandbox folder (owned by ``uid``, mode 0700), the workers' cwd.
        shared: root's folder the uid may enter but not list or write (group ``gid``,
            0710): the execution's service sockets, a target's context files (``share``).

    Raises:
        SandboxError: not root, or every uid of the pool is taken.
    """

    def __init__(self) -> None:
        if not available():
            raise SandboxError("a sealed execution needs root (to give workers a uid)")
        _LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        start = secrets.randbelow(POOL_SIZE)
        self._lock_fd = -1
        for i in range(POOL_SIZE):
            uid = UID_BASE + (start + i) % POOL_SIZE
            fd = _try_lock(uid)
            if fd is None:
                continue
            self._lock_fd, self.uid, self.gid = fd, uid, uid
            _used.add(uid)
            break
        else:
            raise SandboxError(f"all {POOL_SIZE} sandbox uids from {UID_BASE} are in use")
        kill_uid(self.uid)  # a previous harness that died may have left some
        self._clean = True
        self.path = area() / secrets.token_hex(12)
        self.path.mkdir(mode=0o700)
        os.chown(self.path, self.uid, self.gid)
        # root's, group the execution's, 0710: the uid may reach a name in it (a service
        # socket, a context file) but not list or write it; no other sandbox uid may enter
        self.shared = area() / ("s" + secrets.token_hex(4))  # short: socket paths fit
        while self.shared.exists():
            self.shared = area() / ("s" + secrets.token_hex(4))
        self.shared.mkdir(mode=0o700)
        os.chown(self.shared, 0, self.gid)
        os.chmod(self.shared, 0o710)

    def share(self, name: str, text: str) -> Path:
        """Write ``text`` to a new root-owned file ``name`` in ``shared`` that the uid may
        read (0640, group the execution's) and not change; returns its path. Written with
        ``O_EXCL|O_NOFOLLOW`` in a folder the uid cannot write: nothing can redirect it.

        Raises:
            FileExistsError: ``name`` was already shared.
        """
        path = self.shared / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o640)
        try:
            os.fchown(fd, 0, self.gid)
            os.fchmod(fd, 0o640)
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        return path

    def processes(self) -> list[int]:
        """Pids of every live process of the execution (by uid), zombies excluded."""
        return _uid_pids(self.uid)

    def started(self) -> None:
        """A worker is about to start: the next ``kill_all`` must look again."""
        self._clean = False

    def kill_all(self) -> tuple[int, ...]:
        """SIGKILL every process of the execution; the pids killed (see ``kill_uid``). Free
        when nothing can have started since the last sweep found none: only a process of
        the uid can make another, and none was left."""
        if self._clean:
            return ()
        killed = kill_uid(self.uid)
        self._clean = True
        return killed

    def sanitize(self) -> list[str]:
        """Before the harness itself writes into the folder (as root): remove anything at
        its top level that is not a plain file or folder of the sandbox's own (a symlink, a
        fifo, a hard link) so that no write of the harness can be redirected, then hand
        every top-level file to the uid. Call only while no process of the uid runs.
        Returns what was removed, one line each (tampering)."""
        removed = []
        for entry in os.scandir(self.path):
            st = entry.stat(follow_symlinks=False)
            plain = stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)
            if not plain:
                removed.append(f"{entry.name} ({_kind(st.st_mode)}, links {st.st_nlink})")
                os.unlink(entry.path)
            elif st.st_uid != self.uid:
                os.chown(entry.path, self.uid, self.gid, follow_symlinks=False)
        return removed

    def close(self) -> tuple[int, ...]:
        """Kill every process of the uid, remove the folders and every file of the uid in
        the temporary folders (``remove_temp_files``), release the uid. Returns the pids
        killed. Idempotent."""
        if self._lock_fd < 0:
            return ()
        try:
            killed = self.kill_all()
            shutil.rmtree(self.path, ignore_errors=True)
            shutil.rmtree(self.shared, ignore_errors=True)
            remove_temp_files(self.uid)
        finally:
            os.close(self._lock_fd)
            self._lock_fd = -1
        return killed

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: The world-writable folders a worker can leave files in outside its sandbox (the sticky
#: folders of the FHS: the temporary ones and ``/run/lock``, where a sealed worker could
#: leave a file for the next execution given the same uid, found by an attack): every file
#: of an execution's uid there is removed when the execution ends (``remove_temp_files``;
#: ``/var/lock`` is a symlink to ``/run/lock`` and is skipped).
TEMP_ROOTS = ("/dev/shm", "/tmp", "/var/tmp", "/run/lock", "/var/lock")
_MAX_TEMP_ENTRIES = 100_000  # a walk of the temporary folders stops there (a busy /tmp)


def remove_temp_files(uid: int, roots: tuple[str, ...] = TEMP_ROOTS) -> list[str]:
    """Remove everything ``uid`` owns under ``roots`` (a folder of the uid with all it
    holds), walking without following a symlink and descending only into folders the uid
    could write in (world-writable ones: ``/tmp/.X11-unix``) — a file of the uid can be
    nowhere else outside its sandbox. Call after every process of the uid is gone (so none
    adds more). Returns the paths removed. At most ``_MAX_TEMP_ENTRIES`` entries are looked
    at; an entry that vanishes or cannot be removed is skipped."""
    removed: list[str] = []
    seen = 0
    todo = [r for r in roots if os.path.isdir(r) and not os.path.islink(r)]
    while todo and seen < _MAX_TEMP_ENTRIES:
        folder = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                st = entry.stat(follow_symlinks=False)
                if st.st_uid == uid:
                    if stat.S_ISDIR(st.st_mode):
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)
                    removed.append(entry.path)
                elif stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
                    todo.append(entry.path)
            except OSError:
                continue
    return removed


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISREG(mode):
        return "hard link"
    return "special file"


def install_fixtures(fixtures: Path) -> Path:
    """A root-owned, world-readable copy of the harness's fixtures (CRM records, orders)
    in the sandbox area, made once per process, for sealed workers
    (``SHOPOPS_FIXTURES``)."""
    return _install(fixtures, None)


def install_code(package_dir: Path, module: str) -> Path:
    """A root-owned, world-readable copy of an implementation's package (``package_dir``
    holds ``module/``) in this process's sandbox area, made once per folder and byte-compiled
    (``compileall``: compiling runs none of it) so that each worker does not compile it
    again: sealed workers
    import it from there (the original may sit in a folder they cannot read, such as
    pytest's 0700 ``tmp_path``) and cannot change it between workers. Returns the folder
    to put first on ``sys.path``.

    Raises:
        SandboxError: ``module`` is not a package or module in ``package_dir``.
        CodeRefused: the package holds what may not be copied as root (a symlink, a FIFO,
            a socket, a device; over ``harness.sandbox.code_copy.MAX_FILES`` files or
            ``MAX_BYTES``): nothing is copied.
    """
    return _install(package_dir, module)


def install_target(folder: Path) -> Path:
    """A root-owned, world-readable, byte-compiled copy of a target's whole ``folder``
    (its ``target.toml`` and modules; ``__pycache__`` left out), made once per folder as
    ``install_code`` makes a package's: a sealed target's workers import it from there.

    Raises:
        CodeRefused: as ``install_code``.
    """
    return _install(folder, "")


def _install(src: Path, module: str | None) -> Path:
    src = src.resolve()
    target = area() / ("code-" + secrets.token_hex(6))
    with _lock:
        cached = _installed.get((str(src), module))
        if cached is not None:
            return cached
        try:  # as root, of a folder that is the implementation's: harness.sandbox.code_copy
            if module is None:
                copy_tree(src, target)
            elif module == "":  # a target's folder, whole, but for the harness's reports
                copy_tree(src, target, skip=("__pycache__", "*.pyc"),
                          leave_out=(REPORTS,) if harness_reports(src) else ())
            elif (src / module).is_dir():
                target.mkdir(mode=0o755)
                copy_tree(src / module, target / module, skip=("__pycache__", "*.pyc"))
            elif (src / f"{module}.py").is_file():
                target.mkdir(mode=0o755)
                copy_file(src / f"{module}.py", target / f"{module}.py")
            else:
                raise SandboxError(f"{src}: no package {module}/ or module {module}.py")
        except CopyRefused as exc:
            shutil.rmtree(target, ignore_errors=True)  # nothing half-copied is left
            raise CodeRefused(str(exc)) from None
        if module is not None:  # compiled, never run: workers cannot write __pycache__
            compileall.compile_dir(str(target), quiet=1, workers=1)
        os.chmod(target, 0o755)
        for root, dirs, files in os.walk(target):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        _installed[(str(src), module)] = target
        return target


_installed: dict[tuple[str, str | None], Path] = {}
_used: set[int] = set()


def check_installable(folder: Path, module: str) -> None:
    """Where workers will run sealed (as root), copy the implementation's package now, once
    (``install_code`` keeps the copy for every execution), so that a folder that cannot be
    installed is refused before anything runs (``shopops-chaos run --sut``). Not root:
    nothing to do (workers import the folder as the user running the harness).

    Raises:
        ValueError: the folder holds a symlink, a FIFO, a socket or a device, or is too
            large (``harness.sandbox.code_copy``), or has no such package; naming ``--sut``.
    """
    if not available():
        return
    try:
        install_code(folder, module)
    except SandboxError as exc:
        raise ValueError(f"--sut {folder}: its folder cannot be installed: {exc}") from None



def _try_lock(uid: int) -> int | None:
    """The descriptor of ``uid``'s lock file with its ``flock`` held (exclusive), or
    ``None`` when another holder has it; the file is opened ``O_NOFOLLOW`` in the harness's
    0700 lock folder. The one place a uid of the pool is locked."""
    fd = os.open(_LOCK_DIR / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _free_uids() -> Iterator[int]:
    """Each sandbox uid this process has used that no sandbox holds now, its ``flock``
    held until the next one is asked for (so no sandbox takes it meanwhile)."""
    for uid in sorted(_used):
        fd = _try_lock(uid)
        if fd is None:
            continue  # in use by a sandbox right now
        try:
            yield uid
        finally:
            os.close(fd)


def strays() -> list[int]:
    """Pids of live processes of any sandbox uid this process has used that no sandbox
    holds now (its ``flock`` is free): what a correct harness never leaves behind. A uid
    another harness process holds at the moment is skipped."""
    return [pid for uid in _free_uids() for pid in _uid_pids(uid)]


def sweep_strays() -> tuple[int, ...]:
    """SIGKILL every stray (``strays``), each uid locked while its processes are killed
    (``kill_uid``), so no execution takes it meanwhile. Run at the end of a run: a
    descendant that escaped its execution's sweep (seen under a hostile implementation in
    a grade: ``setsid`` grandchildren alive after the grade exited) does not outlive the
    run. Returns the pids killed; a uid whose processes would not die is left to the next
    sandbox of that uid, which sweeps it first."""
    killed: list[int] = []
    for uid in _free_uids():
        try:
            killed += kill_uid(uid)
        except SandboxError:
            continue
    return tuple(killed)
