"""Power cuts: the ``LD_PRELOAD`` shim that records what a worker made durable, and the
harness's side of the model — a baseline of the state folder, and the cut that puts the
folder back to what was durable (``docs/design.md``, "Power cuts").

The model (the shim's comment, ``power_shim.c``, says the same from its side, and why):

* an **inode** is keyed ``<dev>-<ino>-<fp>``, ``fp`` a hash of its file handle (which holds
  its generation), so a new file given a deleted file's inode number never inherits its
  content (``_key``: the harness and the shim must compute the same key);
* a regular file's **content** is durable as of its last ``fsync``/``fdatasync`` (of any
  descriptor on it, named or not: an ``O_TMPFILE`` linked later keeps it) — the shim
  copies it then into the shadow folder; a ``write`` on an ``O_DSYNC``/``O_SYNC``
  descriptor (or ``pwritev2`` with ``RWF_DSYNC``), or ``msync(MS_SYNC)`` of a shared
  mapping, makes durable the bytes it covers and the file's size, nothing else of it;
* a **name** (the path of a regular file) is durable as of the last sync above of that file
  through that path (a newly created file's fsync commits its directory entry, as ext4 and
  XFS do in practice) or the last ``fsync`` of its directory (every entry then, and the
  names gone from it are forgotten);
* ``sync()`` and ``syncfs()`` make everything under the folder durable; so does the
  harness itself, before the first worker and after it writes the folder (a storage
  fault), as if it called ``sync``;
* directories are never removed by a cut; nothing else (``sync_file_range``, ``close``,
  ``O_DIRECT`` writes, a rename or unlink without a directory ``fsync``) makes anything
  durable: stricter than a real disk, never laxer.

At a cut every regular file under the folder is removed, then every durable name is written
back with its inode's durable content (empty when the name is durable but the content never
was: the metadata reached the disk, the data did not).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import secrets
import shutil
import stat
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENV_DIR", "ENV_SHADOW", "SHIM_SOURCE", "Cut", "PowerUnavailable", "baseline",
           "cut", "env_for", "shim_path", "synced"]

#: The state folder the shim watches, and the harness-owned shadow it writes.
ENV_DIR = "SHOPOPS_POWER_DIR"
ENV_SHADOW = "SHOPOPS_POWER_SHADOW"
SHIM_SOURCE = Path(__file__).with_name("power_shim.c")
_CACHE_ENV = "SHOPOPS_POWER_CACHE"


class PowerUnavailable(RuntimeError):
    """The shim could not be built (no C compiler, or it failed): power cuts cannot run."""


@dataclass(frozen=True)
class Cut:
    """What a power cut did to the state folder: ``restored`` the durable names (written
    back from their last sync), ``lost`` files removed or rolled back (changed since their
    sync), ``back`` durable names that had been removed or renamed away without a directory
    sync and come back (a SQLite rollback journal deleted at commit: a hot journal)."""

    restored: tuple[str, ...]
    lost: tuple[str, ...]
    back: tuple[str, ...] = ()

    def line(self) -> str:
        """One line for the trace."""
        def few(names: tuple[str, ...]) -> str:
            return ", ".join(names[:6]) + (" …" if len(names) > 6 else "")
        return (f"power cut: {len(self.restored)} file(s) back to their last sync"
                + (f"; lost unsynced: {few(self.lost)}" if self.lost
                   else "; nothing unsynced lost")
                + (f"; back, their removal never synced: {few(self.back)}" if self.back
                   else ""))


def _cache_dir() -> Path:
    given = os.environ.get(_CACHE_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "shopops-chaos"


_built: Path | None = None


def shim_path() -> Path:
    """The compiled shim (``power-<sha256 of the source>.so`` in ``$SHOPOPS_POWER_CACHE`` or
    ``~/.cache/shopops-chaos``), built with ``cc``/``gcc`` at first use and reused after.

    Raises:
        PowerUnavailable: no compiler on ``PATH``, the cache folder cannot be written, or the
            build failed (its stderr).
    """
    global _built
    if _built is not None and _built.exists():
        return _built
    try:
        _built = _build()
    except OSError as exc:
        raise PowerUnavailable(f"building {SHIM_SOURCE.name}: {exc}") from None
    return _built


def _build() -> Path:
    source = SHIM_SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    cache = _cache_dir()
    target = cache / f"power-{digest}.so"
    if not target.exists():
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise PowerUnavailable("power cuts need a C compiler (cc or gcc) to build "
                                   f"{SHIM_SOURCE.name}; install build-essential")
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".power-", suffix=".so", dir=cache)
        os.close(fd)
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", tmp,
                               str(SHIM_SOURCE), "-ldl"], capture_output=True, text=True)
        if done.returncode != 0:
            os.unlink(tmp)
            raise PowerUnavailable(f"building {SHIM_SOURCE.name} failed: "
                                   f"{done.stderr.strip()[:500]}")
        os.replace(tmp, target)  # atomic: a parallel build wins or loses whole
    return target


def env_for(state: Path, shadow: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the shim preloaded (first in ``LD_PRELOAD``) and watching ``state``,
    recording into ``shadow`` (both made absolute and resolved: the shim compares the
    kernel's paths of the descriptors it sees)."""
    out = dict(env)
    shim = str(shim_path())
    preload = [p for p in out.get("LD_PRELOAD", "").split(":") if p and p != shim]
    out["LD_PRELOAD"] = ":".join([shim, *preload])
    out[ENV_DIR] = str(state.resolve())
    out[ENV_SHADOW] = str(shadow.resolve())
    return out


_AT_EMPTY_PATH = 0x1000
_MAX_HANDLE_SZ = 128
_libc = ctypes.CDLL(None, use_errno=True)


def _key(fd: int, st: os.stat_result) -> str:
    """The shim's key of the inode open as ``fd`` (``key_of`` in ``power_shim.c``, which
    must agree): ``<dev>-<ino>-<fp>``, ``fp`` the FNV-1a 64 hash of the inode's file handle
    (``name_to_handle_at``: it carries the inode's generation, so a reused inode number is a
    new key), 0 where the file system gives no handle."""
    buf = ctypes.create_string_buffer(8 + _MAX_HANDLE_SZ)
    struct.pack_into("I", buf, 0, _MAX_HANDLE_SZ)
    mount = ctypes.c_int()
    fp = 0
    if _libc.name_to_handle_at(fd, b"", buf, ctypes.byref(mount), _AT_EMPTY_PATH) == 0:
        size = min(struct.unpack_from("I", buf, 0)[0], _MAX_HANDLE_SZ)
        fp = 1469598103934665603
        for byte in buf.raw[4:8 + size]:  # handle_type's bytes, then the handle's
            fp = ((fp ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{st.st_dev}-{st.st_ino}-{fp}"


# -- the folder, through descriptors ---------------------------------------------------------
# A sealed worker owns the state folder and the shadow, and the harness that cuts is root:
# every path is walked one component at a time from a directory descriptor, never following
# a symlink (O_NOFOLLOW), and a name read from the shadow must be a plain relative path. A
# planted symlink or a "../" name is skipped, never followed (docs/security.md).

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KEY = re.compile(r"^[0-9]+-[0-9]+-[0-9]+$")


def _parts(rel: str) -> list[str] | None:
    """``rel``'s components, or ``None`` unless it is a plain relative path."""
    parts = rel.split("/")
    if not rel or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        return None
    return parts


def _open_dir(base: int, parts: list[str], *, create: bool = False) -> int:
    """A descriptor on ``base``/``parts`` (made with ``create``), never through a symlink.

    Raises:
        OSError: a component is missing (without ``create``), a symlink, or not a folder.
    """
    fd = os.dup(base)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    if os.geteuid() == 0:  # owned like the folder it is made in
                        above = os.fstat(fd)
                        os.chown(part, above.st_uid, above.st_gid, dir_fd=fd,
                                 follow_symlinks=False)
                except FileExistsError:
                    pass
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _read(dir_fd: int, name: str) -> tuple[bytes, str] | None:
    """A regular file's content and its inode's key (``_key``), or ``None`` (missing, a
    symlink, not a file)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        return (f.read(), _key(fd, st)) if stat.S_ISREG(st.st_mode) else None


def _replace(dir_fd: int, name: str, data: bytes) -> None:
    """Write ``name`` in ``dir_fd`` whole: a fresh temporary (``O_EXCL``, no follow), then
    renamed over it (a symlink there is replaced, not followed)."""
    tmp = f".{name}.harness.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _walk(dir_fd: int, prefix: str, skip: tuple[int, int] | None
          ) -> list[tuple[str, int, str, bool]]:
    """Every entry under ``dir_fd`` that is not a folder: ``(rel, parent fd, name, regular)``
    (parent fds stay open: the caller closes them, ``_close``); the shadow (``skip``: its
    dev and inode) and symlinked folders are not entered."""
    out: list[tuple[str, int, str, bool]] = []
    with os.scandir(dir_fd) as entries:
        listed = list(entries)
    for e in listed:
        rel = f"{prefix}{e.name}"
        if e.is_dir(follow_symlinks=False):
            st = e.stat(follow_symlinks=False)
            if skip is not None and (st.st_dev, st.st_ino) == skip:
                continue
            try:
                sub = os.open(e.name, _DIR, dir_fd=dir_fd)
            except OSError:
                continue
            out += _walk(sub, f"{rel}/", skip)
            out.append(("", sub, "", False))  # only to be closed
        else:
            out.append((rel, dir_fd, e.name, e.is_file(follow_symlinks=False)))
    return out


def _close(entries: list[tuple[str, int, str, bool]]) -> None:
    for rel, fd, _, _ in entries:
        if not rel:
            os.close(fd)


def _id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def baseline(state: Path, shadow: Path) -> None:
    """Make everything under ``state`` durable now, as ``sync()`` would (the harness calls it
    before the first worker and after it writes the folder itself)."""
    shadow.mkdir(mode=0o700, exist_ok=True)
    with _shadow_dirs(state, shadow) as (top, data, names):
        for stale in os.listdir(names):
            os.unlink(stale, dir_fd=names)
        entries = _walk(top, "", _id(shadow))
        try:
            for rel, parent, name, regular in entries:
                got = _read(parent, name) if rel and regular else None
                if got is not None:
                    _record(data, names, rel, got)
        finally:
            _close(entries)
    _owned_like(state, shadow)


def synced(state: Path, shadow: Path, paths: list[Path]) -> None:
    """Make ``paths`` (files under ``state`` the harness itself wrote) durable now, names and
    content, as if the harness had fsynced them and their folder; the rest of the folder
    stays as it was last synced. Paths outside ``state`` or not regular files are skipped."""
    with _shadow_dirs(state, shadow) as (top, data, names):
        for path in paths:
            try:
                rel = str(path.relative_to(state))
            except ValueError:
                continue
            parts = _parts(rel)
            if parts is None:
                continue
            try:
                parent = _open_dir(top, parts[:-1])
            except OSError:
                continue
            try:
                got = _read(parent, parts[-1])
            finally:
                os.close(parent)
            if got is not None:
                _record(data, names, rel, got)
    _owned_like(state, shadow)


@contextlib.contextmanager
def _shadow_dirs(state: Path, shadow: Path) -> Iterator[tuple[int, int, int]]:
    """Descriptors of ``state`` and of the shadow's ``data`` and ``names`` folders (made if
    missing), closed on leaving."""
    root = os.open(shadow, _DIR)
    fds = [root]
    try:
        fds.append(os.open(state, _DIR))
        fds.append(_open_dir(root, ["data"], create=True))
        fds.append(_open_dir(root, ["names"], create=True))
        yield fds[1], fds[2], fds[3]
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _record(data: int, names: int, rel: str, got: tuple[bytes, str]) -> None:
    """Record ``rel``'s content ``got`` (content, key) as durable, under its name."""
    content, key = got
    _replace(data, key, content)
    _replace(names, rel.encode().hex(), key.encode())


def _owned_like(state: Path, shadow: Path) -> None:
    """The shadow belongs to whoever owns the state folder (a sealed execution's uid: its
    worker's shim writes the shadow), when we may give it away (root)."""
    if os.geteuid() != 0:
        return
    owner = os.stat(state, follow_symlinks=False)
    # Through descriptors only, never a path: the shadow is the worker's, and a folder in it
    # swapped for a symlink while root walks it would hand root's files to the worker (found
    # by an attack). The layout is flat (``data/``, ``names/``): nothing deeper is entered.
    root = os.open(shadow, _DIR)
    try:
        os.fchown(root, owner.st_uid, owner.st_gid)
        for sub in ("data", "names"):
            try:
                fd = _open_dir(root, [sub])
            except OSError:  # missing, or not a folder of its own: not followed
                continue
            try:
                os.fchown(fd, owner.st_uid, owner.st_gid)
                for name in os.listdir(fd):
                    with contextlib.suppress(OSError):
                        os.chown(name, owner.st_uid, owner.st_gid, dir_fd=fd,
                                 follow_symlinks=False)
            finally:
                os.close(fd)
    finally:
        os.close(root)


def _durable(shadow: Path) -> dict[str, bytes]:
    """Every durable name (a plain relative path) and its durable content, from the shadow;
    anything else there (a symlink, a bad name or key) is skipped."""
    durable: dict[str, bytes] = {}
    try:
        root = os.open(shadow, _DIR)
    except OSError:
        return durable
    try:
        try:
            names = _open_dir(root, ["names"])
        except OSError:
            return durable
        try:
            data = _open_dir(root, ["data"])
        except OSError:
            data = None
        try:
            for entry in os.listdir(names):
                got = _read(names, entry)
                try:
                    rel = bytes.fromhex(entry).decode()
                except ValueError:
                    continue
                key = got[0].decode("ascii", "replace").strip() if got else ""
                if _parts(rel) is None or not _KEY.match(key):
                    continue
                content = _read(data, key) if data is not None else None
                durable[rel] = content[0] if content is not None else b""
        finally:
            os.close(names)
            if data is not None:
                os.close(data)
    finally:
        os.close(root)
    return durable


def cut(state: Path, shadow: Path) -> Cut:
    """Put ``state`` back to what was durable (module docstring) and say what changed.
    Call it only when no process has the folder's files open (the worker was killed and
    reaped).

    Raises:
        OSError: ``state`` is not a folder (or a symlink to one).
    """
    durable = _durable(shadow)
    owner = os.stat(state, follow_symlinks=False)
    top = os.open(state, _DIR)
    lost: list[str] = []
    back: list[str] = []
    relinked: set[str] = set()
    try:
        entries = _walk(top, "", _id(shadow))
        try:
            for rel, parent, name, regular in entries:
                if not rel:
                    continue
                want = durable.get(rel) if regular else None
                if want is None:
                    lost.append(rel)
                    os.unlink(name, dir_fd=parent)
                    continue
                fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=parent)
                with os.fdopen(fd, "r+b") as f:  # in place: it keeps its inode, as on disk
                    if f.read() == want:
                        continue
                    lost.append(rel)
                    if os.fstat(f.fileno()).st_nlink > 1:  # never written through a hard
                        relinked.add(rel)  # link (it may be a file outside the folder):
                        os.unlink(name, dir_fd=parent)  # the name is made anew below
                        continue
                    f.seek(0)
                    f.write(want)
                    f.truncate()
        finally:
            _close(entries)
        for rel, content in sorted(durable.items()):
            *folders, name = rel.split("/")
            try:
                parent = _open_dir(top, folders, create=True)
            except OSError:  # a symlink or a file where its folder was: not followed
                continue
            try:
                try:
                    os.stat(name, dir_fd=parent, follow_symlinks=False)
                    continue  # there (rewritten above)
                except FileNotFoundError:
                    pass
                _replace(parent, name, content)  # a durable name removed since: back
                if rel not in relinked:
                    back.append(rel)
                if os.geteuid() == 0:  # the worker's, as it was (a sealed execution's uid)
                    os.chown(name, owner.st_uid, owner.st_gid, dir_fd=parent,
                             follow_symlinks=False)
            finally:
                os.close(parent)
    finally:
        os.close(top)
    return Cut(tuple(sorted(durable)), tuple(sorted(lost)), tuple(back))
