/*
 * proc_info: what /proc says about a worker process and the kernel.
 */
#ifndef TS_PROC_INFO_H
#define TS_PROC_INFO_H

#include <sys/types.h>

/* Resident set size of a pid in kilobytes, 0 if unknown (/proc/PID/statm). */
long worker_rss_kb(pid_t pid);
/* Processes the kernel's OOM killer has killed since boot (/proc/vmstat), 0 if unknown. */
unsigned long oom_kill_count(void);

#endif
