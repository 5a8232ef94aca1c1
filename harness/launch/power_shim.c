/* The power-cut shim (harness/launch/power.py builds it; docs/design.md, "Power cuts").
 *
 * Loaded with LD_PRELOAD into a worker (and into the fork server, whose children inherit
 * it), it is inert unless SHOPOPS_POWER_DIR and SHOPOPS_POWER_SHADOW are both set in the
 * process's environment at the time of the call. Then, after a successful
 *   fsync(fd) / fdatasync(fd) of a regular file under SHOPOPS_POWER_DIR: it copies the
 *     file's whole content to SHADOW/data/<dev>-<ino> (written to a temporary name, then
 *     renamed: atomic) and records the file's current path as a durable name
 *     (SHADOW/names/<hex of the path relative to the dir> holding "<dev>-<ino>");
 *   fsync(fd) / fdatasync(fd) of a directory under (or equal to) SHOPOPS_POWER_DIR: it
 *     records every regular file of that directory as a durable name of its inode, and
 *     forgets the durable names of that directory that are no longer there;
 *   sync() / syncfs(fd): does both for every file and directory under SHOPOPS_POWER_DIR.
 * The harness restores the dir from SHADOW after a power cut (power.py, cut). Everything
 * else (write, rename, unlink, msync, sync_file_range, O_SYNC writes) is not a sync here.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*fd_fn)(int);
typedef void (*void_fn)(void);

static fd_fn real_fn(const char *name) { return (fd_fn)dlsym(RTLD_NEXT, name); }

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
        ssize_t w = write(fd, buf, len);
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

/* Record `rel` (a regular file, dir-relative) as a durable name of inode `st`. */
static void record_name(const char *shadow, const char *rel, const struct stat *st) {
    char enc[2 * PATH_MAX + 1], path[3 * PATH_MAX], key[64];
    hex(rel, enc, sizeof enc);
    snprintf(path, sizeof path, "%s/names/%s", shadow, enc);
    snprintf(key, sizeof key, "%llu-%llu", (unsigned long long)st->st_dev,
             (unsigned long long)st->st_ino);
    atomic_text(path, key);
}

static void snapshot_file(int fd, const char *shadow, const char *rel, const struct stat *st) {
    char data[PATH_MAX + 96], proc[64];
    snprintf(data, sizeof data, "%s/data/%llu-%llu", shadow, (unsigned long long)st->st_dev,
             (unsigned long long)st->st_ino);
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int src = open(proc, O_RDONLY | O_CLOEXEC); /* a write-only fd can still be copied */
    if (src < 0) return;
    atomic_copy_fd(src, data);
    close(src);
    record_name(shadow, rel, st);
}

/* Every regular file of directory `path` (dir-relative `rel`) becomes a durable name of its
 * inode; durable names of that directory whose file is gone are forgotten. */
static void snapshot_dir(const char *path, const char *shadow, const char *rel) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char child[PATH_MAX * 2], crel[PATH_MAX * 2];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        snprintf(crel, sizeof crel, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        struct stat st;
        if (lstat(child, &st) == 0 && S_ISREG(st.st_mode)) record_name(shadow, crel, &st);
    }
    closedir(d);
    /* forget names in this directory that are no longer there */
    char names[PATH_MAX + 16];
    snprintf(names, sizeof names, "%s/names", shadow);
    DIR *n = opendir(names);
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
            snprintf(crel, sizeof crel, "%s/%s", names, e->d_name);
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
    char child[PATH_MAX * 2], crel[PATH_MAX * 2];
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
            if (fd >= 0) { snapshot_file(fd, shadow, crel, &st); close(fd); }
        }
    }
    closedir(d);
    snapshot_dir(path, shadow, rel);
}

static void after_sync(int fd) {
    char dir[PATH_MAX], shadow[PATH_MAX], proc[64], path[PATH_MAX];
    if (!config(dir, shadow)) return;
    int saved = errno;
    struct stat st;
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, path, sizeof path - 1);
    if (n > 0 && fstat(fd, &st) == 0) {
        path[n] = '\0';
        const char *rel = relative(dir, path);
        if (rel && !relative(shadow, path)) {
            ensure_dirs(shadow);
            /* a file unlinked while open has no name left to make durable */
            if (S_ISREG(st.st_mode) && *rel && st.st_nlink > 0)
                snapshot_file(fd, shadow, rel, &st);
            else if (S_ISDIR(st.st_mode)) snapshot_dir(path, shadow, rel);
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
