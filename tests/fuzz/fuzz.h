/*
 * fuzz: what the libFuzzer targets of tests/fuzz/ share. Each target defines
 * LLVMFuzzerTestOneInput; a failed FUZZ_CHECK aborts, which libFuzzer reports as a crash with the
 * input that caused it. Parsers that read a path get their input through fuzz_file (a memfd, no
 * disk traffic); the archive and manifest targets work in a private directory from fuzz_dir,
 * removed at exit.
 */
#ifndef TS_FUZZ_H
#define TS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "util.h"

/* The bytes as the content of a file; returns its path ("/proc/self/fd/N"), valid until the
 * next call. One memfd per process, rewritten each time. */
static inline const char *fuzz_file(const void *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz-input", MFD_CLOEXEC);
        FUZZ_CHECK(fd >= 0);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    }
    FUZZ_CHECK(ftruncate(fd, 0) == 0);
    FUZZ_CHECK(pwrite(fd, data, size, 0) == (ssize_t)size);
    return path;
}

static inline char *fuzz_dir_path(void)
{
    static char path[256];
    return path;
}

static inline void fuzz_dir_remove(void)
{
    if (fuzz_dir_path()[0])
        ts_rmtree(fuzz_dir_path());
}

/* A private directory for this process (under /dev/shm when there is one), removed at exit. */
static inline const char *fuzz_dir(void)
{
    char *path = fuzz_dir_path();
    if (!path[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, 256, "%s/ts-fuzz.XXXXXX", base);
        FUZZ_CHECK(mkdtemp(path));
        atexit(fuzz_dir_remove);
    }
    return path;
}

/* A frame cut anywhere (the last byte, half of it, all but the first) is incomplete, never an
 * error or another frame; a smaller field limit refuses it or agrees. decode(p, len, max_field)
 * decodes, frees what it decoded and returns the decoder's result. */
static inline void fuzz_check_frame_cuts(const uint8_t *data, size_t size, long n,
                                         long (*decode)(const uint8_t *, size_t, size_t))
{
    size_t cuts[3] = {(size_t)n - 1, (size_t)n / 2, 1};
    for (int k = 0; k < 3; k++) {
        if (cuts[k] >= (size_t)n || !cuts[k])
            continue;
        uint8_t *cut = xmalloc(cuts[k]);
        memcpy(cut, data, cuts[k]);
        FUZZ_CHECK(decode(cut, cuts[k], 1 << 20) == TS_E_INCOMPLETE);
        free(cut);
    }
    long m = decode(data, size, 16);
    FUZZ_CHECK(m == n || m == TS_E_TOO_LARGE);
}

#endif
