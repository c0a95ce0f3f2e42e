/*
 * proc_info: what /proc says about a worker process and the kernel (proc_info.h).
 */
#include "proc_info.h"

#include <stdio.h>
#include <unistd.h>

long worker_rss_kb(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long size = 0, rss = 0;
    if (fscanf(f, "%ld %ld", &size, &rss) != 2)
        rss = 0;
    fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

unsigned long oom_kill_count(void)
{
    FILE *f = fopen("/proc/vmstat", "r");
    if (!f)
        return 0;
    char line[128];
    unsigned long v = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "oom_kill %lu", &v) == 1)
            break;
    fclose(f);
    return v;
}
