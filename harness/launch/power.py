"""Power cuts: the ``LD_PRELOAD`` shim that records what a worker made durable, and the
harness's side of the model — a baseline of the state folder, and the cut that puts the
folder back to what was durable (``docs/design.md``, "Power cuts").

The model (the shim's comment, ``power_shim.c``, says the same from its side):

* a regular file's **content** is durable as of its last ``fsync``/``fdatasync`` (of any
  descriptor on it) — the shim copies it then into the shadow folder, keyed by inode;
* a **name** (the path of a regular file) is durable as of the last ``fsync`` of that file
  through that path (a newly created file's fsync commits its directory entry, as ext4 and
  XFS do in practice) or the last ``fsync`` of its directory (every entry then, and the
  names gone from it are forgotten);
* ``sync()`` and ``syncfs()`` make everything under the folder durable; so does the
  harness itself, before the first worker and after it writes the folder (a storage
  fault), as if it called ``sync``;
* directories are never removed by a cut; nothing else (``msync``, ``sync_file_range``,
  ``O_SYNC`` writes without ``fsync``, a rename or unlink without a directory ``fsync``)
  makes anything durable: stricter than a real disk, never laxer.

At a cut every regular file under the folder is removed, then every durable name is written
back with its inode's durable content (empty when the name is durable but the content never
was: the metadata reached the disk, the data did not).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENV_DIR", "ENV_SHADOW", "SHIM_SOURCE", "Cut", "PowerUnavailable", "baseline",
           "cut", "env_for", "shim_path"]

#: The state folder the shim watches, and the harness-owned shadow it writes.
ENV_DIR = "SHOPOPS_POWER_DIR"
ENV_SHADOW = "SHOPOPS_POWER_SHADOW"
SHIM_SOURCE = Path(__file__).with_name("power_shim.c")
_CACHE_ENV = "SHOPOPS_POWER_CACHE"


class PowerUnavailable(RuntimeError):
    """The shim could not be built (no C compiler, or it failed): power cuts cannot run."""


@dataclass(frozen=True)
class Cut:
    """What a power cut did to the state folder: ``restored`` files written back from their
    last sync (names), ``lost`` files removed or rolled back (changed since their sync)."""

    restored: tuple[str, ...]
    lost: tuple[str, ...]

    def line(self) -> str:
        """One line for the trace."""
        lost = ", ".join(self.lost[:6]) + (" …" if len(self.lost) > 6 else "")
        return (f"power cut: {len(self.restored)} file(s) back to their last sync"
                + (f"; lost unsynced: {lost}" if self.lost else "; nothing unsynced lost"))


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
        PowerUnavailable: no compiler on ``PATH``, or the build failed (its stderr).
    """
    global _built
    if _built is not None and _built.exists():
        return _built
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
    _built = target
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


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev}-{st.st_ino}"


def _files(state: Path, shadow: Path) -> list[Path]:
    """Every regular file and symlink under ``state``, the shadow excluded."""
    out: list[Path] = []
    skip = shadow.resolve()
    for root, dirs, names in os.walk(state):
        dirs[:] = [d for d in dirs if (Path(root) / d).resolve() != skip]
        for name in names:
            p = Path(root) / name
            if p.is_symlink() or p.is_file():
                out.append(p)
    return out


def baseline(state: Path, shadow: Path) -> None:
    """Make everything under ``state`` durable now, as ``sync()`` would (the harness calls it
    before the first worker and after it writes the folder itself)."""
    (shadow / "data").mkdir(parents=True, exist_ok=True)
    names = shadow / "names"
    names.mkdir(exist_ok=True)
    for stale in names.iterdir():
        stale.unlink()
    for path in _files(state, shadow):
        if path.is_symlink():
            continue
        st = path.stat()
        shutil.copyfile(path, shadow / "data" / _key(st))
        rel = str(path.relative_to(state)).encode()
        (names / rel.hex()).write_text(_key(st))
    _owned_like(state, shadow)


def _owned_like(state: Path, shadow: Path) -> None:
    """The shadow belongs to whoever owns the state folder (a sealed execution's uid: its
    worker's shim writes the shadow), when we may give it away (root)."""
    if os.geteuid() != 0:
        return
    owner = state.stat()
    for root, dirs, names in os.walk(shadow):
        for p in [root, *(os.path.join(root, n) for n in dirs + names)]:
            os.chown(p, owner.st_uid, owner.st_gid, follow_symlinks=False)


def cut(state: Path, shadow: Path) -> Cut:
    """Put ``state`` back to what was durable (module docstring) and say what changed.
    Call it only when no process has the folder's files open (the worker was killed and
    reaped)."""
    durable: dict[str, bytes] = {}
    names = shadow / "names"
    if names.is_dir():
        for entry in names.iterdir():
            if ".tmp." in entry.name:
                continue
            try:
                rel = bytes.fromhex(entry.name).decode()
                key = entry.read_text().strip()
            except (ValueError, OSError):
                continue
            data = shadow / "data" / key
            durable[rel] = data.read_bytes() if data.is_file() else b""
    lost: list[str] = []
    for path in _files(state, shadow):
        rel = str(path.relative_to(state))
        if rel in durable and not path.is_symlink():
            if path.read_bytes() != durable[rel]:
                lost.append(rel)
                with open(path, "r+b") as f:  # in place: the file keeps its inode, as on disk
                    f.write(durable[rel])
                    f.truncate()
            continue
        lost.append(rel)
        path.unlink()
    for rel, content in sorted(durable.items()):
        target = state / rel
        if not target.exists():  # a durable name removed since: back as it was durable
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            if os.geteuid() == 0:  # the worker's, as it was (a sealed execution's uid)
                owner = state.stat()
                os.chown(target, owner.st_uid, owner.st_gid)
    return Cut(tuple(sorted(durable)), tuple(sorted(lost)))
