"""The power-cut model's edges (``power_shim.c``'s header, ``docs/design.md`` "Power cuts"):
writes that are durable without an ``fsync`` (``O_DSYNC``/``O_SYNC``, ``RWF_DSYNC``,
``msync(MS_SYNC)``) survive a cut and only the bytes they wrote do; an ``O_TMPFILE`` synced
then linked keeps its content; an inode number the kernel reuses never brings a deleted
file's content back; and what is not a sync (``sync_file_range``, plain writes) is still
lost. Each program runs in a real interpreter under the shim and is SIGKILLed, then cut."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_power import _run_then_cut

from harness.launch import power


def test_o_dsync_and_o_sync_writes_are_durable_when_they_return(tmp_path: Path) -> None:
    """Without the shim counting them, none of these files had a durable name or content:
    the cut removed them all (a false fail of a loop that syncs this way)."""
    state, cut, _ = _run_then_cut(tmp_path, """
        import os
        W, C = os.O_WRONLY | os.O_CREAT, os.O_RDWR | os.O_CREAT
        fd = os.open("dsync", W | os.O_DSYNC, 0o600)
        os.write(fd, b"one")                      # durable: bytes 0-2, size 3
        plain = os.open("dsync", os.O_WRONLY)
        os.pwrite(plain, b"XXXX", 10)             # page cache only: not durable
        os.pwrite(plain, b"Y", 1)                 # nor this, inside the durable range
        fd = os.open("sync", W | os.O_SYNC, 0o600)
        os.write(fd, b"a"); os.writev(fd, [b"b", b"c"])
        fd = os.open("log", W | os.O_APPEND | os.O_DSYNC, 0o600)
        os.write(fd, b"1\\n"); os.write(fd, b"2\\n")
        fd = os.open("rwf", C, 0o600)             # one write made durable by its flag
        os.pwritev(fd, [b"kept"], 0, os.RWF_DSYNC)
        os.write(fd, b"lost")                     # at offset 0 again: never synced
        with open("plain", "wb") as f:
            f.write(b"never synced")
    """)
    assert (state / "dsync").read_bytes() == b"one"
    assert (state / "sync").read_bytes() == b"abc"
    assert (state / "log").read_bytes() == b"1\n2\n"
    assert (state / "rwf").read_bytes() == b"kept"
    assert not (state / "plain").exists()
    assert cut.lost == ("dsync", "plain", "rwf")


def test_msync_ms_sync_makes_the_mapped_range_durable_and_sync_file_range_does_not(
        tmp_path: Path) -> None:
    """``mmap.flush`` is ``msync(MS_SYNC)``: the flushed page survives, the page written
    after it does not. ``sync_file_range`` writes back but promises nothing (its man page):
    a file synced only by it is lost."""
    state, _, _ = _run_then_cut(tmp_path, """
        import ctypes, mmap, os
        page = mmap.PAGESIZE
        with open("mapped", "w+b") as f:
            f.write(b"." * 2 * page); f.flush(); os.fsync(f.fileno())
            m = mmap.mmap(f.fileno(), 2 * page)
        m[0:4] = b"sync"; m[page:page + 4] = b"late"
        m.flush(0, page)                          # msync(MS_SYNC) of the first page only
        m[4:8] = b"gone"                          # after it: not durable
        libc = ctypes.CDLL(None, use_errno=True)
        libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                         ctypes.c_uint]
        with open("ranged", "wb") as f:
            f.write(b"written back, not durable"); f.flush()
            assert libc.sync_file_range(f.fileno(), 0, 0, 1 | 2 | 4) == 0
    """)
    page = os.sysconf("SC_PAGE_SIZE")
    assert (state / "mapped").read_bytes() == b"sync" + b"." * (2 * page - 4)
    assert not (state / "ranged").exists()


def _tmpfile_supported(folder: Path) -> bool:
    try:
        os.close(os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600))
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return False
        raise
    return True


def test_an_o_tmpfile_synced_then_linked_keeps_its_synced_content(tmp_path: Path) -> None:
    """Content synced while the file had no name, then the name by linkat and the folder's
    fsync: the synced content comes back under that name (it came back empty), a later
    fsync of the linked file counts too, and no "#<ino> (deleted)" name is ever made (the
    descriptor's /proc path, which is not a name of the file)."""
    if not _tmpfile_supported(tmp_path):
        pytest.skip(f"no O_TMPFILE on {tmp_path}'s file system")
    state, cut, _ = _run_then_cut(tmp_path / "linked", """
        import os
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
        os.write(fd, b"synced"); os.fsync(fd)
        d = os.open(".", os.O_RDONLY)            # a dir fd: os.link calls linkat
        os.link(f"/proc/self/fd/{fd}", "ckpt", src_dir_fd=d)  # (AT_SYMLINK_FOLLOW)
        os.fsync(d)
        os.write(fd, b" more"); os.fsync(fd)
        os.write(fd, b" never synced")
        other = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
        os.write(other, b"synced, never named"); os.fsync(other)
    """)
    assert sorted(p.name for p in state.iterdir()) == ["ckpt"]
    assert (state / "ckpt").read_bytes() == b"synced more"
    assert cut.restored == ("ckpt",)
    # the folder never synced after the link: the name was never durable
    state, _, _ = _run_then_cut(tmp_path / "unlinked", """
        import os
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
        os.write(fd, b"synced"); os.fsync(fd)
        d = os.open(".", os.O_RDONLY)
        os.link(f"/proc/self/fd/{fd}", "ckpt", src_dir_fd=d)
    """)
    assert sorted(p.name for p in state.iterdir()) == []


#: Worker code: ``take(ino, name)`` makes empty files until the kernel hands one the freed
#: inode number ``ino`` (ext4 takes the lowest free one of the group: the shim's own shadow
#: files, freed by its renames, may come first) and names that one ``name``; when another
#: process on the machine got it first, an empty ``name`` and "none" (the test skips).
_TAKE = """
        import os
        def take(ino, name):
            tries = []
            for i in range(2000):
                tries.append(f"try{i}")
                open(tries[-1], "wb").close()
                if os.stat(tries[-1]).st_ino == ino:
                    os.rename(tries.pop(), name)
                    break
            for t in tries:
                os.unlink(t)
            if os.path.exists(name):
                print(os.stat(name).st_ino)
            else:  # another process took it first: the test skips, the code goes on
                open(name, "wb").close()
                print("none")
"""


def _reuse_or_skip(said: list[str]) -> None:
    old, new = said
    if old != new:
        pytest.skip(f"the file system did not reuse inode {old} (gave {new})")


def test_a_reused_inode_number_never_brings_back_a_deleted_files_content(
        tmp_path: Path) -> None:
    """ext4 gives a new file the inode number of one just deleted. The new file's name is
    durable (the folder's fsync) but its content never was: it comes back empty, not with
    the deleted file's synced content (keyed by inode number alone, it did)."""
    state, _, said = _run_then_cut(tmp_path, _TAKE + """
        def dirsync():
            d = os.open(".", os.O_RDONLY); os.fsync(d); os.close(d)
        with open("old", "wb") as f:
            f.write(b"the deleted file's content"); f.flush(); os.fsync(f.fileno())
        dirsync()
        ino = os.stat("old").st_ino
        print(ino)
        os.unlink("old")
        dirsync()
        take(ino, "new")
        with open("new", "r+b") as f:
            f.write(b"never synced")
        dirsync()
    """)
    _reuse_or_skip(said)
    assert sorted(p.name for p in state.iterdir()) == ["new"]
    assert (state / "new").read_bytes() == b""


def test_a_reused_inode_number_keeps_each_files_own_content(tmp_path: Path) -> None:
    """The deleted file's removal was never synced, so it comes back — with its own
    content, not the content of the new file that reused its inode number and synced."""
    state, cut, said = _run_then_cut(tmp_path, _TAKE + """
        with open("old", "wb") as f:
            f.write(b"old"); f.flush(); os.fsync(f.fileno())
        ino = os.stat("old").st_ino
        print(ino)
        os.unlink("old")
        take(ino, "new")
        with open("new", "r+b") as f:
            f.write(b"new"); f.flush(); os.fsync(f.fileno())
    """)
    _reuse_or_skip(said)
    assert (state / "old").read_bytes() == b"old"
    assert (state / "new").read_bytes() == b"new"
    assert cut.back == ("old",)


def test_the_harness_and_the_shim_key_an_inode_alike(tmp_path: Path) -> None:
    """A file the harness made durable (``baseline``), renamed by the worker and the folder
    synced: the shim's name must find the harness's content (another key: it came back
    empty)."""
    state, shadow = tmp_path / "state", tmp_path / "shadow"
    state.mkdir()
    (state / "ckpt.json").write_bytes(b"from the harness")
    power.baseline(state, shadow)
    env = power.env_for(state, shadow, {k: v for k, v in os.environ.items()
                                        if not k.startswith("SHOPOPS_")})
    subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import os
        os.rename("ckpt.json", "moved.json")
        d = os.open(".", os.O_RDONLY); os.fsync(d)
    """)], cwd=state, env=env, check=True)
    power.cut(state, shadow)
    assert sorted(p.name for p in state.iterdir()) == ["moved.json"]
    assert (state / "moved.json").read_bytes() == b"from the harness"


_C_WORKER = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
int main(void) {
    int fd = open("c_dsync", O_WRONLY | O_CREAT | O_DSYNC, 0600);
    struct iovec v[2] = {{"de", 2}, {"f", 1}};
    if (write(fd, "abc", 3) != 3 || writev(fd, v, 2) != 3 || pwrite(fd, "X", 1, 0) != 1)
        return 1;
    int plain = open("c_dsync", O_WRONLY);
    pwrite(plain, "unsynced", 8, 6);              /* past the durable size: lost */
    int m = open("c_mapped", O_RDWR | O_CREAT, 0600);
    if (ftruncate(m, 4096) != 0 || fsync(m) != 0) return 2;
    char *p = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
    if (p == MAP_FAILED) return 3;
    memcpy(p, "async", 5);
    if (msync(p, 4096, MS_ASYNC) != 0) return 4;  /* starts write-back, promises nothing */
    int t = open(".", O_TMPFILE | O_RDWR, 0600);
    if (t < 0) return 0;                          /* no O_TMPFILE here: the rest is moot */
    if (write(t, "tmp", 3) != 3 || fdatasync(t) != 0) return 5;
    if (linkat(t, "", AT_FDCWD, "c_tmp", AT_EMPTY_PATH) != 0) {  /* needs CAP_DAC_... */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", t);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, "c_tmp", AT_SYMLINK_FOLLOW) != 0) return 6;
    }
    int d = open(".", O_RDONLY | O_DIRECTORY);
    return fsync(d) != 0 ? 7 : 0;
}
"""


def test_a_c_program_is_seen_through_the_same_calls(tmp_path: Path) -> None:
    """A C worker calling libc directly: O_DSYNC through write, writev and pwrite keeps its
    bytes and nothing past them, msync(MS_ASYNC) makes nothing durable, and an O_TMPFILE
    linked with linkat(AT_EMPTY_PATH) (or its /proc path) keeps its fdatasync'ed content."""
    source, binary = tmp_path / "worker.c", tmp_path / "worker"
    source.write_text(_C_WORKER)
    cc = subprocess.run(["cc", "-O1", "-o", str(binary), str(source)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    state, _, said = _run_then_cut(tmp_path / "run", f"""
        import subprocess
        print(subprocess.run([{str(binary)!r}]).returncode)
    """)
    assert said == ["0"]
    assert (state / "c_dsync").read_bytes() == b"Xbcdef"
    assert (state / "c_mapped").read_bytes() == b"\0" * 4096
    if _tmpfile_supported(tmp_path):
        assert (state / "c_tmp").read_bytes() == b"tmp"
