/*
 * rlog: an append-only log file written by a background thread and rotated by size (the
 * access, model and server logs under log_location).
 *
 * rlog_write copies the line into a buffer under a mutex and returns: no system call on the
 * caller's thread in the common case. The writer thread wakes every RLOG_FLUSH_MS, or at once
 * when the buffer passes RLOG_KICK_BYTES, writes what is buffered with one write(), and rotates
 * when the file passes max_size: path.(N-1) becomes path.N, ..., path becomes path.1, and a new
 * path is opened; at most max_files rotated files are kept. Nothing is fsync'ed. Past
 * RLOG_MAX_PENDING bytes waiting (a stalled disk), lines are dropped and counted, and the count
 * is written once the disk takes lines again.
 *
 * Any thread may call rlog_write; open and close belong to one owner.
 */
#ifndef TS_RLOG_H
#define TS_RLOG_H

#include <stddef.h>

#define RLOG_FLUSH_MS 100
#define RLOG_KICK_BYTES (64 * 1024)
#define RLOG_MAX_PENDING (16 * 1024 * 1024)

struct rlog;

/* Opens (appends to) path, making its directory; starts the writer. NULL with why on failure.
 * max_size > 0 bytes; max_files >= 1. */
struct rlog *rlog_open(const char *path, long max_size, int max_files, char *why, size_t n);
/* The process's stdout and stderr already append to path (the background start points them
 * there): the writer thread rotates that file by size too, reopening it onto fds 1 and 2.
 * Nothing is written through this rlog. */
struct rlog *rlog_adopt_stdio(const char *path, long max_size, int max_files, char *why, size_t n);
void rlog_write(struct rlog *r, const char *line, size_t len);
/* Writes what is buffered, stops the thread, frees. NULL is allowed. */
void rlog_close(struct rlog *r);

/* "10MB", "512KB", "1GB", "4096" (bytes; K/M/G are powers of 1024, the B is optional). 0 or
 * -EINVAL. */
int rlog_parse_size(const char *s, long *out);

#endif
