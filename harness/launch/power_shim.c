/* The power-cut shim (harness/launch/power.py builds it; docs/design.md, "Power cuts").
 *
 * Loaded with LD_PRELOAD into a worker (and into the fork server, whose children inherit
 * it), it is inert unless SHOPOPS_POWER_DIR and SHOPOPS_POWER_SHADOW are both set in the
 * process's environment at the time of the call. It records in SHADOW what the worker made
 * durable under SHOPOPS_POWER_DIR; the harness puts the dir back to it after a power cut
 * (power.py, cut). The shadow holds
 *   data/<key>   an inode's durable content, key "<dev>-<ino>-<fp>": fp is an FNV-1a hash of
 *                the inode's file handle (name_to_handle_at(2): ext4, XFS, btrfs and tmpfs
 *                put the inode's generation in it), so an inode number the kernel reuses
 *                for a new file is a new key and never inherits a deleted file's content
 *                (0 where the file system gives no handle: then only dev-ino tells them
 *                apart). No file is opened for it: closing a descriptor would drop the
 *                worker's POSIX locks (SQLite's);
 *   names/<hex of the dir-relative path>   a durable name, holding the key of its inode.
 *
 * What makes what durable (the model; every call is counted only once it succeeded):
 *   fsync(fd) / fdatasync(fd) of a regular file under the dir: its whole content (even with
 *     no name: an O_TMPFILE file or an unlinked one, whose content a linkat(2) may give a
 *     name later) and, when the descriptor's path still names that inode, that name (a new
 *     file's fsync commits its directory entry, as ext4 and XFS do in practice);
 *   fsync(fd) / fdatasync(fd) of a directory under (or equal to) the dir: every regular file
 *     in it becomes a durable name of its inode, and its durable names no longer there are
 *     forgotten (this is how an O_TMPFILE linked with linkat gets its durable name);
 *   a write(2)/pwrite/writev/pwritev/pwritev2 on a descriptor opened O_DSYNC or O_SYNC, or
 *     pwritev2 with RWF_DSYNC/RWF_SYNC: the bytes it wrote, at the offset it wrote them, and
 *     the file's size, are durable when it returns (open(2): "as though each write(2) was
 *     followed by a call to fdatasync"; the kernel syncs the written range only, so other
 *     unsynced bytes of the file stay unsynced here too), and the name as for fdatasync;
 *   msync(addr, len, MS_SYNC) of a readable shared mapping of a named regular file: the
 *     mapped bytes of that range and the file's size (msync(2); the kernel's
 *     vfs_fsync_range of that range), and the name; MS_ASYNC alone makes nothing durable;
 *   sync() / syncfs(fd): every file and directory under the dir, recursively.
 * Nothing else is a sync here: not close, rename, unlink, sync_file_range(2) (its man page:
 * it does not make data durable), O_DIRECT writes, fsync of a directory outside the dir.
 * Not seen (so their data counts as never synced: a stricter result): stdio writes on an
 * O_SYNC stream (glibc calls its own write, not the exported one), copy_file_range, sendfile
 * and splice into an O_SYNC file, io_uring and AIO, raw system calls, static binaries.
 * Content synced outside the dir (a file, or an O_TMPFILE, moved or linked in later) is
 * not recorded either.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef RWF_DSYNC
#define RWF_DSYNC 0x00000002
#endif
#ifndef RWF_SYNC
#define RWF_SYNC 0x00000004
#endif
#ifndef RWF_APPEND
#define RWF_APPEND 0x00000010
#endif

typedef int (*fd_fn)(int);
typedef void (*void_fn)(void);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*pwritev2_fn)(int, const struct iovec *, int, off_t, int);
typedef int (*msync_fn)(void *, size_t, int);

static fd_fn real_fn(const char *name) { return (fd_fn)dlsym(RTLD_NEXT, name); }
#define REAL(type, name) \
    static type real; \
    if (!real) real = (type)dlsym(RTLD_NEXT, name)

/* The shim's own writes of the shadow go to libc's write, never through its wrappers. */
static ssize_t real_write(int fd, const void *buf, size_t n) {
    REAL(write_fn, "write");
    return real(fd, buf, n);
}

static ssize_t real_pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite_fn, "pwrite");
    return real(fd, buf, n, off);
}

/* Both variables set and not empty: the cheap test made before any system call. */
static int active(void) {
    const char *d = getenv("SHOPOPS_POWER_DIR"), *s = getenv("SHOPOPS_POWER_SHADOW");
    return d && s && *d && *s;
}

/* The state dir and the shadow, from the environment now (a forked worker sets them after
 * the fork server loaded us); 0 when either is unset. */
static int config(char *dir, char *shadow) {
    const char *d = getenv("SHOPOPS_POWER_DIR"), *s = getenv("SHOPOPS_POWER_SHADOW");
    if (!d || !s || !*d || !*s || strlen(d) >= PATH_MAX || strlen(s) >= PATH_MAX) return 0;
    strcpy(dir, d);
    strcpy(shadow, s);
    return 1;
}

/* The path of dir-relative `rel` when `path` lies under `dir` (or is it: rel ""), else 0. */
static const char *relative(const char *dir, const char *path) {
    size_t n = strlen(dir);
    if (strncmp(dir, path, n) != 0) return 0;
    if (path[n] == '\0') return path + n;
    if (path[n] != '/') return 0;
    return path + n + 1;
}

static int write_all(int fd, const char *buf, size_t len) {
    while (len) {
        ssize_t w = real_write(fd, buf, len);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        buf += w; len -= (size_t)w;
    }
    return 0;
}

/* Copy everything readable from `src` to `final` through a temporary file, atomically. */
static void atomic_copy_fd(int src, const char *final) {
    char tmp[PATH_MAX + 32], buf[65536];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", final, (int)getpid());
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) return;
    off_t off = 0;
    for (;;) {
        ssize_t r = pread(src, buf, sizeof buf, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (write_all(out, buf, (size_t)r) < 0) { close(out); unlink(tmp); return; }
        off += r;
    }
    close(out);
    rename(tmp, final);
}

static void atomic_text(const char *final, const char *text) {
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", final, (int)getpid());
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) return;
    int bad = write_all(out, text, strlen(text));
    close(out);
    if (bad) unlink(tmp); else rename(tmp, final);
}

static void hex(const char *in, char *out, size_t cap) {
    static const char digits[] = "0123456789abcdef";
    size_t j = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && j + 2 < cap; p++) {
        out[j++] = digits[*p >> 4];
        out[j++] = digits[*p & 15];
    }
    out[j] = '\0';
}

static void ensure_dirs(const char *shadow) {
    char p[PATH_MAX + 16];
    mkdir(shadow, 0700);
    snprintf(p, sizeof p, "%s/data", shadow); mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/names", shadow); mkdir(p, 0700);
}

/* An inode's key "<dev>-<ino>-<fp>" (see the top): `at`/`name`/`flags` as for
 * name_to_handle_at (a descriptor: AT_EMPTY_PATH and ""). power.py computes the same. */
static void key_of(int at, const char *name, int flags, const struct stat *st, char *key,
                   size_t cap) {
    union {
        struct file_handle h;
        unsigned char raw[sizeof(struct file_handle) + MAX_HANDLE_SZ];
    } u;
    int mount;
    uint64_t fp = 0;
    u.h.handle_bytes = MAX_HANDLE_SZ;
    if (name_to_handle_at(at, name, &u.h, &mount, flags) == 0) {
        /* FNV-1a 64 over handle_type's bytes and the handle's (they follow handle_bytes) */
        size_t from = offsetof(struct file_handle, handle_type);
        size_t to = offsetof(struct file_handle, f_handle) + u.h.handle_bytes;
        fp = 1469598103934665603ULL;
        for (size_t i = from; i < to && i < sizeof u.raw; i++)
            fp = (fp ^ u.raw[i]) * 1099511628211ULL;
    }
    snprintf(key, cap, "%llu-%llu-%llu", (unsigned long long)st->st_dev,
             (unsigned long long)st->st_ino, (unsigned long long)fp);
}

/* Record `rel` (a regular file, dir-relative) as a durable name of the inode `key`. */
static void record_name(const char *shadow, const char *rel, const char *key) {
    char enc[2 * PATH_MAX + 1], path[3 * PATH_MAX];
    hex(rel, enc, sizeof enc);
    snprintf(path, sizeof path, "%s/names/%s", shadow, enc);
    atomic_text(path, key);
}

/* Whether `path` (absolute) is a name of the inode `st` now: a descriptor's path from
 * /proc is not, once the file was unlinked, or for an O_TMPFILE even after a linkat ("/dir/
 * #<ino> (deleted)"). */
static int names(const char *path, const struct stat *st) {
    struct stat now;
    return lstat(path, &now) == 0 && S_ISREG(now.st_mode) && now.st_dev == st->st_dev
           && now.st_ino == st->st_ino;
}

/* The whole content of the file open as `fd` becomes the durable content of `key`. */
static void snapshot_content(int fd, const char *shadow, const char *key) {
    char data[PATH_MAX + 96], proc[64];
    snprintf(data, sizeof data, "%s/data/%s", shadow, key);
    int flags = fcntl(fd, F_GETFL);
    /* its own descriptor when it can: pread moves no offset (O_DIRECT wants aligned reads) */
    if (flags >= 0 && (flags & O_ACCMODE) != O_WRONLY && !(flags & O_DIRECT)) {
        atomic_copy_fd(fd, data);
        return;
    }
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    /* a write-only fd can still be copied (closing this one drops the worker's POSIX locks
     * on the file, as sync()'s walk does: only for write-only and O_DIRECT descriptors) */
    int src = open(proc, O_RDONLY | O_CLOEXEC);
    if (src < 0) return;
    atomic_copy_fd(src, data);
    close(src);
}

/* Bytes `iov` (`n` of them) written at `off` of a file now `size` long become durable in
 * `key`'s content, which takes that size (the bytes beyond what was ever durable read as
 * zeros: the size reached the disk, their data did not). Patched in place: a worker killed
 * halfway leaves part of a write it never saw return, as a cut during it could. */
static void patch(const char *shadow, const char *key, off_t size, off_t off,
                  const struct iovec *iov, int cnt, size_t n) {
    char data[PATH_MAX + 96];
    snprintf(data, sizeof data, "%s/data/%s", shadow, key);
    int out = open(data, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (out < 0) return;
    if (ftruncate(out, size) == 0) {
        for (int i = 0; i < cnt && n > 0 && off < size; i++) {
            size_t len = iov[i].iov_len < n ? iov[i].iov_len : n;
            if ((off_t)len > size - off) len = (size_t)(size - off);
            const char *p = iov[i].iov_base;
            for (size_t done = 0; done < len;) {
                ssize_t w = real_pwrite(out, p + done, len - done, off + (off_t)done);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) break;
                done += (size_t)w;
            }
            off += (off_t)len;
            n -= len;
        }
    }
    close(out);
}

/* Every regular file of directory `path` (dir-relative `rel`) becomes a durable name of its
 * inode; durable names of that directory whose file is gone are forgotten. */
static void snapshot_dir(const char *path, const char *shadow, const char *rel) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char child[PATH_MAX * 2], crel[PATH_MAX * 2], key[96];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        snprintf(crel, sizeof crel, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        struct stat st;
        if (lstat(child, &st) == 0 && S_ISREG(st.st_mode)) {
            key_of(AT_FDCWD, child, 0, &st, key, sizeof key);
            record_name(shadow, crel, key);
        }
    }
    closedir(d);
    /* forget names in this directory that are no longer there */
    char names_dir[PATH_MAX + 16];
    snprintf(names_dir, sizeof names_dir, "%s/names", shadow);
    DIR *n = opendir(names_dir);
    if (!n) return;
    while ((e = readdir(n))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len % 2 || strstr(e->d_name, ".tmp.")) continue;
        char dec[PATH_MAX];
        if (len / 2 >= sizeof dec) continue;
        for (size_t i = 0; i < len / 2; i++) {
            unsigned v;
            sscanf(e->d_name + 2 * i, "%2x", &v);
            dec[i] = (char)v;
        }
        dec[len / 2] = '\0';
        char *slash = strrchr(dec, '/');
        size_t plen = slash ? (size_t)(slash - dec) : 0;
        if (plen != strlen(rel) || strncmp(dec, rel, plen) != 0) continue;
        snprintf(child, sizeof child, "%s/%s", path, slash ? slash + 1 : dec);
        struct stat st;
        if (lstat(child, &st) != 0 || !S_ISREG(st.st_mode)) {
            snprintf(crel, sizeof crel, "%s/%s", names_dir, e->d_name);
            unlink(crel);
        }
    }
    closedir(n);
}

/* sync()/syncfs(): every file and directory under the state dir, recursively. */
static void snapshot_tree(const char *path, const char *shadow, const char *rel) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char child[PATH_MAX * 2], crel[PATH_MAX * 2], key[96];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        if (!strcmp(child, shadow)) continue;
        snprintf(crel, sizeof crel, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        struct stat st;
        if (lstat(child, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            snapshot_tree(child, shadow, crel);
        } else if (S_ISREG(st.st_mode)) {
            int fd = open(child, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                key_of(fd, "", AT_EMPTY_PATH, &st, key, sizeof key);
                snapshot_content(fd, shadow, key);  /* its name: snapshot_dir below */
                close(fd);
            }
        }
    }
    closedir(d);
    snapshot_dir(path, shadow, rel);
}

/* The descriptor's kernel path under the state dir (not in the shadow) and its stat; 0 when
 * it is elsewhere or unknown. */
static int watched(int fd, const char *dir, const char *shadow, char *path, struct stat *st,
                   const char **rel) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, path, PATH_MAX - 1);
    if (n <= 0 || fstat(fd, st) != 0) return 0;
    path[n] = '\0';
    *rel = relative(dir, path);
    return *rel && !relative(shadow, path);
}

static void after_sync(int fd) {
    char dir[PATH_MAX], shadow[PATH_MAX], path[PATH_MAX], key[96];
    if (!config(dir, shadow)) return;
    int saved = errno;
    struct stat st;
    const char *rel;
    if (watched(fd, dir, shadow, path, &st, &rel)) {
        ensure_dirs(shadow);
        if (S_ISREG(st.st_mode)) {
            key_of(fd, "", AT_EMPTY_PATH, &st, key, sizeof key);
            snapshot_content(fd, shadow, key);
            if (*rel && names(path, &st)) record_name(shadow, rel, key);
        } else if (S_ISDIR(st.st_mode)) {
            snapshot_dir(path, shadow, rel);
        }
    }
    errno = saved;
}

static void after_sync_all(void) {
    char dir[PATH_MAX], shadow[PATH_MAX];
    if (!config(dir, shadow)) return;
    int saved = errno;
    ensure_dirs(shadow);
    snapshot_tree(dir, shadow, "");
    errno = saved;
}

/* Whether a write of `fd` (with pwritev2's `rwf` flags) is synchronous: O_DSYNC is in
 * O_SYNC's bits too. Sets *append when the kernel appends whatever offset was given. */
static int synchronous(int fd, int rwf, int *append) {
    if (!active()) return 0;
    int saved = errno, flags = fcntl(fd, F_GETFL);
    errno = saved;
    if (flags < 0) return 0;
    *append = (flags & O_APPEND) || (rwf & RWF_APPEND);
    return (flags & O_DSYNC) || (rwf & (RWF_DSYNC | RWF_SYNC));
}

/* A synchronous write of `n` bytes `iov` returned: at `off`, or (off < 0) where the file
 * offset was, or (append) at the end. */
static void after_sync_write(int fd, off_t off, int append, const struct iovec *iov, int cnt,
                             size_t n) {
    char dir[PATH_MAX], shadow[PATH_MAX], path[PATH_MAX], key[96];
    if (!config(dir, shadow)) return;
    int saved = errno;
    struct stat st;
    const char *rel;
    if (watched(fd, dir, shadow, path, &st, &rel) && S_ISREG(st.st_mode)) {
        if (append) off = st.st_size - (off_t)n;
        else if (off < 0) off = lseek(fd, 0, SEEK_CUR) - (off_t)n;
        if (off >= 0) {
            ensure_dirs(shadow);
            key_of(fd, "", AT_EMPTY_PATH, &st, key, sizeof key);
            patch(shadow, key, st.st_size, off, iov, cnt, n);
            if (*rel && names(path, &st)) record_name(shadow, rel, key);
        }
    }
    errno = saved;
}

/* msync(MS_SYNC) of [addr, addr + len) returned: each readable shared mapping of a named
 * regular file under the dir in that range gives its bytes (read from the mapping itself:
 * no descriptor opened). */
static void after_msync(uintptr_t addr, size_t len) {
    char dir[PATH_MAX], shadow[PATH_MAX], line[PATH_MAX + 256], key[96];
    if (!config(dir, shadow)) return;
    int saved = errno;
    FILE *maps = fopen("/proc/self/maps", "re");
    if (!maps) { errno = saved; return; }
    while (fgets(line, sizeof line, maps)) {
        unsigned long start, end, maj, mnr;
        unsigned long long pgoff, ino;
        char perms[8];
        int at = 0;
        if (sscanf(line, "%lx-%lx %7s %llx %lx:%lx %llu %n", &start, &end, perms, &pgoff,
                   &maj, &mnr, &ino, &at) < 7 || !at || ino == 0) continue;
        if (end <= addr || start >= addr + len || perms[0] != 'r' || perms[3] != 's')
            continue;
        char *path = line + at;
        path[strcspn(path, "\n")] = '\0';
        struct stat st;
        const char *rel = relative(dir, path);
        if (!rel || !*rel || relative(shadow, path) || lstat(path, &st) != 0
            || !S_ISREG(st.st_mode) || st.st_ino != ino || major(st.st_dev) != maj
            || minor(st.st_dev) != mnr) continue;
        uintptr_t from = start > addr ? start : addr, to = end < addr + len ? end : addr + len;
        off_t off = (off_t)(pgoff + (from - start));
        size_t n = to - from;
        if (off >= st.st_size) n = 0;  /* past the end: no byte, but the size */
        else if ((off_t)n > st.st_size - off) n = (size_t)(st.st_size - off);
        struct iovec v = {(void *)from, n};
        ensure_dirs(shadow);
        key_of(AT_FDCWD, path, 0, &st, key, sizeof key);
        patch(shadow, key, st.st_size, off, &v, 1, n);
        record_name(shadow, rel, key);
    }
    fclose(maps);
    errno = saved;
}

int fsync(int fd) {
    static fd_fn real;
    if (!real) real = real_fn("fsync");
    int rc = real(fd);
    if (rc == 0) after_sync(fd);
    return rc;
}

int fdatasync(int fd) {
    static fd_fn real;
    if (!real) real = real_fn("fdatasync");
    int rc = real(fd);
    if (rc == 0) after_sync(fd);
    return rc;
}

int syncfs(int fd) {
    static fd_fn real;
    if (!real) real = real_fn("syncfs");
    int rc = real(fd);
    if (rc == 0) after_sync_all();
    return rc;
}

void sync(void) {
    static void_fn real;
    if (!real) real = (void_fn)dlsym(RTLD_NEXT, "sync");
    real();
    after_sync_all();
}

ssize_t write(int fd, const void *buf, size_t n) {
    ssize_t rc = real_write(fd, buf, n);
    int append;
    if (rc > 0 && synchronous(fd, 0, &append)) {
        struct iovec v = {(void *)buf, (size_t)rc};
        after_sync_write(fd, -1, append, &v, 1, (size_t)rc);
    }
    return rc;
}

/* `slot` caches libc's function `name` (one per exported name: pwrite and pwrite64 are
 * distinct symbols a program may call either of). */
static ssize_t pwrite_any(pwrite_fn *slot, const char *name, int fd, const void *buf,
                          size_t n, off_t off) {
    if (!*slot) *slot = (pwrite_fn)dlsym(RTLD_NEXT, name);
    ssize_t rc = (*slot)(fd, buf, n, off);
    int append;
    if (rc > 0 && synchronous(fd, 0, &append)) {
        struct iovec v = {(void *)buf, (size_t)rc};
        after_sync_write(fd, off, append, &v, 1, (size_t)rc);
    }
    return rc;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    static pwrite_fn real;
    return pwrite_any(&real, "pwrite", fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    static pwrite_fn real;
    return pwrite_any(&real, "pwrite64", fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(writev_fn, "writev");
    ssize_t rc = real(fd, iov, cnt);
    int append;
    if (rc > 0 && synchronous(fd, 0, &append))
        after_sync_write(fd, -1, append, iov, cnt, (size_t)rc);
    return rc;
}

static ssize_t pwritev_any(pwritev_fn *slot, const char *name, int fd,
                           const struct iovec *iov, int cnt, off_t off) {
    if (!*slot) *slot = (pwritev_fn)dlsym(RTLD_NEXT, name);
    ssize_t rc = (*slot)(fd, iov, cnt, off);
    int append;
    if (rc > 0 && synchronous(fd, 0, &append))
        after_sync_write(fd, off, append, iov, cnt, (size_t)rc);
    return rc;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    static pwritev_fn real;
    return pwritev_any(&real, "pwritev", fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
    static pwritev_fn real;
    return pwritev_any(&real, "pwritev64", fd, iov, cnt, off);
}

/* pwritev2: offset -1 is the file offset; RWF_DSYNC/RWF_SYNC make this one write durable. */
static ssize_t pwritev2_any(pwritev2_fn *slot, const char *name, int fd,
                            const struct iovec *iov, int cnt, off_t off, int rwf) {
    if (!*slot) *slot = (pwritev2_fn)dlsym(RTLD_NEXT, name);
    ssize_t rc = (*slot)(fd, iov, cnt, off, rwf);
    int append;
    if (rc > 0 && synchronous(fd, rwf, &append))
        after_sync_write(fd, off < 0 ? -1 : off, append, iov, cnt, (size_t)rc);
    return rc;
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int rwf) {
    static pwritev2_fn real;
    return pwritev2_any(&real, "pwritev2", fd, iov, cnt, off, rwf);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int rwf) {
    static pwritev2_fn real;
    return pwritev2_any(&real, "pwritev64v2", fd, iov, cnt, off, rwf);
}

int msync(void *addr, size_t len, int flags) {
    REAL(msync_fn, "msync");
    int rc = real(addr, len, flags);
    if (rc == 0 && (flags & MS_SYNC) && len > 0) after_msync((uintptr_t)addr, len);
    return rc;
}
