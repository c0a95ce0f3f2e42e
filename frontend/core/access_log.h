/*
 * access_log: access_log.log, one line per answered request from every transport (HTTP, OIP
 * REST, gRPC), as TorchServe's access log with the size and the request id added:
 *
 *   2026-11-25T16:00:00.123Z 127.0.0.1:40212 "POST /predictions/mlp HTTP/1.1" 200 123 1.234ms RID
 *
 * gRPC lines name the full method ("POST /org.pytorch.serve.grpc.inference.InferenceAPIsService/
 * Predictions HTTP/2") and give the gRPC status name (OK, NOT_FOUND, ...) as the status. A byte
 * count that is not known (a chunked answer) is "-". The line goes to srv->access_log's buffer
 * (rlog.h): no disk I/O on the loop. Loop thread only.
 */
#ifndef TS_ACCESS_LOG_H
#define TS_ACCESS_LOG_H

#include <stdint.h>

/* 1 when access lines are wanted (enable_access_log and the file is open). */
int access_log_on(void);
/* The clock start_us is read from: wall-clock microseconds (one clock read per line). */
int64_t access_log_clock_us(void);
/* bytes < 0: unknown. status: "200", "OK", ... start_us: access_log_clock_us() at arrival. A
 * line longer than 1 KiB (a long target) is cut, its newline kept. */
void access_log_line(const char *client, const char *method, const char *target, const char *proto,
                     const char *status, long long bytes, int64_t start_us, const char *rid);

#endif
