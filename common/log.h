/*
 * log: one logger for both processes. Line format: `pid:role time level [request-id] message`,
 * role 'F' frontend, 'W' worker. The level is checked before formatting (LOG_* macros), and
 * control characters in a line are escaped (log_escape).
 * Thread-safe (one fprintf per line). Pure modules never log; their callers do.
 */
#ifndef TS_LOG_H
#define TS_LOG_H

#include <stdio.h>

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

extern int log_min_level;

/* Copies s[0..n) into dst (at most cap bytes, an escape never cut) with what could forge or
 * hide a log line escaped: control characters (CR, LF, ESC, BEL, NUL, ...; not TAB) and DEL as
 * \r, \n or \xNN, and the UTF-8 C1 controls (U+0080..U+009F, which terminals also obey) as
 * \xC2\xNN. Returns the bytes written. Every log line goes through it (log_write, the workers'
 * output, the access log), whatever a URL, a name, a header or a handler's print held. */
size_t log_escape(char *dst, size_t cap, const char *s, size_t n);

/* role: 'F' or 'W'. out: the stream to write to (stderr by default). */
void log_init(char role, FILE *out);
void log_set_level_name(const char *name);
void log_write(int level, const char *req_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LOG_AT(lvl, rid, ...)                                                                      \
    do {                                                                                           \
        if ((lvl) >= log_min_level)                                                                \
            log_write((lvl), (rid), __VA_ARGS__);                                                  \
    } while (0)
#define LOG_DEBUG(...) LOG_AT(LOG_LEVEL_DEBUG, NULL, __VA_ARGS__)
#define LOG_INFO(...) LOG_AT(LOG_LEVEL_INFO, NULL, __VA_ARGS__)
#define LOG_WARN(...) LOG_AT(LOG_LEVEL_WARN, NULL, __VA_ARGS__)
#define LOG_ERROR(...) LOG_AT(LOG_LEVEL_ERROR, NULL, __VA_ARGS__)
#define LOG_REQ(lvl, rid, ...) LOG_AT(lvl, rid, __VA_ARGS__)

#endif
