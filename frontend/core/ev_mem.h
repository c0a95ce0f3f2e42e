/*
 * ev_mem: the allocator libevent uses in the frontend (event_set_mem_functions).
 *
 * evhttp allocates per request: the request, two header lists with a key and a value string per
 * header, evbuffers and their chains; about 55 allocations and 75 frees per /predictions request.
 * Through glibc they cost about 16k instructions per request, a fifth of the frontend's
 * (callgrind). ev_mem keeps freed blocks of 13 size classes (32 B to 4 KiB) on per-thread lists
 * and hands them out again: a pop or a push. Each list keeps at most 256 KiB; larger blocks and
 * the excess go to glibc. Not installed under AddressSanitizer, which must see every block.
 */
#ifndef TS_EV_MEM_H
#define TS_EV_MEM_H

/* Installs it; before any other libevent call (libevent's rule). 0, or -1 when not installed. */
int ev_mem_install(void);

/* Frees what libevent returned for the caller to free (evhttp_uridecode, ...), whichever
 * allocator libevent was given. */
void ev_mem_free(void *p);

#endif
