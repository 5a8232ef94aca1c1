"""Where an execution's files live while it runs: a RAM-backed scratch folder.

An execution's databases are written with ``synchronous=FULL`` (the reference loop's
checkpoint store, the approval queue, the gateway log): on this project's 2-core CI
machine one ``fsync`` costs about 6 ms, and a new SQLite database about 60 ms, so most of
an execution's time used to be the disk. A SIGKILL does not lose the page cache — what a
killed process wrote is there for the next reader whether or not it was synced — and the
harness never simulates a power loss (its storage faults are rows it writes itself,
``harness.story.storage_faults``), so the verdict cannot depend on where the files are. The
harness therefore runs each execution in a folder on a tmpfs (``/dev/shm``) when one is
mounted with room to spare, and moves the finished folder to its place under the run's
report folder before anything reads it there (``harness.run.execution.execute``).

``SHOPOPS_SCRATCH`` chooses: unset or ``auto`` (the default above), ``off`` (run in place,
on the report folder's filesystem), or a folder (used as given; it must exist, accept a new
folder, and not be under ``/proc``, ``/sys`` or ``/dev`` other than ``/dev/shm``:
``shopops.validators``, checked with the other variables before anything is written).

Each harness process has its own area, ``shopops-scratch-<pid>-XXXX``, removed at exit;
areas of processes that are gone (a harness killed with SIGKILL) are removed by the next
harness that starts one.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import psutil

__all__ = ["ENV", "MIN_FREE_BYTES", "area", "default_root", "discard", "in_scratch",
           "move_home"]

ENV = "SHOPOPS_SCRATCH"
MIN_FREE_BYTES = 256 * 1024 * 1024  # a tmpfs with less room is not worth the risk
_TRANSIENT = ("-shm", "-journal")  # SQLite removes them when its last connection closes
_AREA = re.compile(r"shopops-scratch-(?P<pid>\d+)-\w+")
_lock = threading.Lock()
_area: Path | None = None
_area_pid: int | None = None


def default_root() -> Path | None:
    """``/dev/shm`` when it is a writable tmpfs (``psutil.disk_partitions``) with at least
    ``MIN_FREE_BYTES`` free, else ``None``."""
    shm = Path("/dev/shm")
    try:
        mounted = any(p.mountpoint == str(shm) and p.fstype == "tmpfs"
                      for p in psutil.disk_partitions(all=True))
        if not mounted or not os.access(shm, os.W_OK | os.X_OK):
            return None
        return shm if shutil.disk_usage(shm).free >= MIN_FREE_BYTES else None
    except OSError:
        return None


def _root() -> Path | None:
    """The scratch root ``SHOPOPS_SCRATCH`` asks for (see the module docstring).

    Raises:
        ValueError: ``SHOPOPS_SCRATCH`` names something that is not an existing folder.
    """
    value = os.environ.get(ENV, "auto")
    if value == "auto":
        return default_root()
    if value == "off":
        return None
    from shopops.validators import ENV_VARS  # the one rule (a kernel filesystem: refused)

    try:
        ENV_VARS[ENV](value)
    except ValueError as exc:
        raise ValueError(f"{ENV}: {exc}") from None
    return Path(value)


def _prune(root: Path) -> None:
    """Remove the areas under ``root`` whose harness process is gone."""
    for child in root.iterdir():
        match = _AREA.fullmatch(child.name)
        if match is None or not child.is_dir() or child.is_symlink():
            continue
        if not psutil.pid_exists(int(match["pid"])):
            shutil.rmtree(child, ignore_errors=True)


def area() -> Path | None:
    """This harness process's scratch area (created on first use, mode 0711 so that a
    sealed worker can reach its own sandbox in it by name without listing the others), or
    ``None`` when executions run in place. A forked child gets an area of its own.

    Raises:
        ValueError: a bad ``SHOPOPS_SCRATCH``.
    """
    global _area, _area_pid
    with _lock:
        if _area is None or _area_pid != os.getpid():
            root = _root()
            if root is None:
                return None
            _prune(root)
            _area = Path(tempfile.mkdtemp(prefix=f"shopops-scratch-{os.getpid()}-",
                                          dir=root))
            os.chmod(_area, 0o711)
            _area_pid = os.getpid()
            atexit.register(shutil.rmtree, _area, True)
        return _area


def in_scratch(home: Path) -> Path:
    """The folder an execution whose files belong in ``home`` runs in: a new folder of the
    same name in the scratch ``area()`` (``home`` is then created only when files are moved
    there, ``move_home``: a passing execution nobody keeps never makes it), or ``home``
    itself, created if missing, when there is no area or ``home`` already holds files (an
    execution never mixes its files with older ones somewhere else).

    Raises:
        ValueError: a bad ``SHOPOPS_SCRATCH``.
        OSError: ``home`` could not be created.
    """
    where = area()
    if where is None or (home.is_dir() and any(home.iterdir())):
        home.mkdir(parents=True, exist_ok=True)
        return home
    work = Path(tempfile.mkdtemp(prefix="e", dir=where)) / home.name  # the same name: the
    work.mkdir()  # workers' titles and messages name the execution as the report does
    return work


def move_home(work: Path, home: Path) -> None:
    """Move everything in ``work`` (from ``in_scratch(home)``) into ``home`` and remove
    ``work`` and its parent; nothing when they are the same folder. Files keep their
    modes; a move across filesystems copies (``_move``).

    Raises:
        OSError: a file could not be moved (``work`` is removed all the same).
    """
    if work == home:
        return
    try:
        home.mkdir(parents=True, exist_ok=True)
        for entry in sorted(work.iterdir()):
            try:
                _move(entry, home / entry.name)
            except FileNotFoundError:
                # only SQLite's transient files can go meanwhile (a last connection
                # closed late); anything else missing is an error
                if not entry.name.endswith(_TRANSIENT):
                    raise
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)


def discard(work: Path, home: Path, *, made: bool) -> bool:
    """Remove ``work`` (from ``in_scratch(home)``) and its parent, and ``home`` when it is
    an empty folder: an execution whose files nobody keeps (a passing one in a run
    without ``--keep-all``: its workers' output tails are in its evidence). Creating the
    folder and files at home cost ~0.3 ms of CPU each on this machine's ext4 (a new
    folder's inodes), ~2.4 ms an execution (issue 27). With no scratch area (``work`` is
    ``home``: ``SHOPOPS_SCRATCH=off``, or no tmpfs with room) ``home`` is removed whole
    when ``in_scratch`` ``made`` it, and left as it is otherwise (it held someone's files
    first). Returns whether no ``home`` is left.
    """
    if work == home:
        if made:
            shutil.rmtree(home, ignore_errors=True)
        return made
    shutil.rmtree(work.parent, ignore_errors=True)
    try:
        home.rmdir()
    except FileNotFoundError:  # never made: nothing was moved there
        return True
    except OSError:  # not empty: someone else's files
        return False
    return True


#: The largest file ``_move`` copies by hand across filesystems, in bytes.
_SMALL = 1 << 20


def _move(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst`` (which must not exist): a rename on one filesystem; across
    filesystems a small regular file (at most ``_SMALL`` bytes: worker output, a trace) is
    copied with one read and one write into a new file of the same mode, and anything else
    goes through ``shutil.move``. ``shutil.copy2`` costs about four times the CPU for a
    small file (it also copies timestamps and extended attributes, which no report reads).

    Raises:
        FileNotFoundError: ``src`` is gone.
        FileExistsError: ``dst`` exists.
        OSError: the move failed otherwise.
    """
    try:
        os.rename(src, dst)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    st = os.lstat(src)
    if not stat.S_ISREG(st.st_mode) or st.st_size > _SMALL:
        shutil.move(str(src), str(dst))
        return
    with open(src, "rb") as f:
        data = memoryview(f.read())
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(st.st_mode))
    try:
        os.fchmod(fd, stat.S_IMODE(st.st_mode))  # the umask may have narrowed it
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
    os.unlink(src)
