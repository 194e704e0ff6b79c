/* An LD_PRELOAD shim that keeps, for each watched file, its bytes as of its last fsync:
 * what a power cut right then would have left on the disk. The power-loss tests build a
 * copy of the ledger from these snapshots and resume from it.
 *
 *   SYNC_SHIM_WATCH  the ledger's path: it and PATH-wal are watched (the -shm file is
 *                    rebuilt by SQLite's recovery; the rollback journal lives only while
 *                    a new file switches to WAL)
 *   SYNC_SHIM_DIR    where the snapshots go, under the files' base names, and "log": one
 *                    line "BASENAME BYTES" per fsync or fdatasync of a watched file
 *
 * An unlinked watched file loses its snapshot too (SQLite deletes the WAL when the last
 * connection closes, after copying it into the database).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *watched_base(const char *path) {
    const char *watch = getenv("SYNC_SHIM_WATCH");
    if (watch == NULL || getenv("SYNC_SHIM_DIR") == NULL) return NULL;
    size_t n = strlen(watch);
    if (strncmp(path, watch, n) != 0) return NULL;
    if (path[n] != '\0' && strcmp(path + n, "-wal") != 0) return NULL;
    return strrchr(path, '/') + 1;
}

static void snapshot(int fd) {
    char link[64], path[PATH_MAX], out[PATH_MAX], tmp[PATH_MAX], buf[1 << 16];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, sizeof path - 1);
    if (len < 0) return;
    path[len] = '\0';
    const char *base = watched_base(path);
    if (base == NULL) return;
    const char *dir = getenv("SYNC_SHIM_DIR");
    snprintf(out, sizeof out, "%s/%s", dir, base);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, base);
    int dst = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (dst < 0) return;
    off_t at = 0;
    ssize_t got;
    while ((got = pread(fd, buf, sizeof buf, at)) > 0) {
        if (write(dst, buf, (size_t)got) != got) break;
        at += got;
    }
    close(dst);
    rename(tmp, out);
    snprintf(tmp, sizeof tmp, "%s/log", dir);
    FILE *log = fopen(tmp, "a");
    if (log != NULL) {
        fprintf(log, "%s %lld\n", base, (long long)at);
        fclose(log);
    }
}

int fsync(int fd) {
    static int (*real)(int);
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int rc = real(fd);
    if (rc == 0) snapshot(fd);
    return rc;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int rc = real(fd);
    if (rc == 0) snapshot(fd);
    return rc;
}

int unlink(const char *path) {
    static int (*real)(const char *);
    if (real == NULL) real = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    int rc = real(path);
    const char *base = rc == 0 ? watched_base(path) : NULL;
    if (base != NULL) {
        char out[PATH_MAX];
        snprintf(out, sizeof out, "%s/%s", getenv("SYNC_SHIM_DIR"), base);
        real(out);
    }
    return rc;
}
