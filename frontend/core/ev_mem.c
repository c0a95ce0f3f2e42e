/*
 * ev_mem: the allocator libevent uses in the frontend (see ev_mem.h).
 *
 * A block is a 16-byte header (its class, or LARGE) before the bytes handed out, so every
 * pointer keeps malloc's 16-byte alignment. A free pushes the block on the calling thread's list
 * of its class, a malloc pops one; a block freed on another thread than the one that made it
 * simply joins that thread's list.
 */
#include "ev_mem.h"

#include <event2/event.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* clang says ASan with __has_feature, gcc with __SANITIZE_ADDRESS__ */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_HAS_ASAN 1
#endif
#endif
#ifndef TS_HAS_ASAN
#define TS_HAS_ASAN 0
#endif

#define HDR 16
#define LARGE 0xffu
#define LIST_BYTES (256u << 10) /* the most one thread's list of one class keeps */

static const uint32_t class_size[] = {32,  64,  96,   128,  192,  256, 384,
                                      512, 768, 1024, 1536, 2048, 4096};
#define N_CLASSES (sizeof(class_size) / sizeof(class_size[0]))

struct free_block {
    struct free_block *next;
};

static __thread struct {
    struct free_block *head;
    uint32_t n;
} lists[N_CLASSES];

static int installed;

static unsigned class_of(size_t n)
{
    if (n <= 128) /* most: header names and values, the header entries */
        return n ? (unsigned)(n - 1) >> 5 : 0;
    for (unsigned c = 4; c < N_CLASSES; c++)
        if (n <= class_size[c])
            return c;
    return LARGE;
}

static unsigned block_class(const void *p)
{
    return *(const uint32_t *)((const char *)p - HDR);
}

static void *mem_malloc(size_t n)
{
    unsigned c = class_of(n);
    if (c != LARGE && lists[c].head) {
        struct free_block *b = lists[c].head;
        lists[c].head = b->next;
        lists[c].n--;
        return b;
    }
    if (n > SIZE_MAX - HDR)
        return NULL;
    char *h = malloc(HDR + (c == LARGE ? n : class_size[c]));
    if (!h)
        return NULL;
    *(uint32_t *)h = c;
    return h + HDR;
}

static void mem_free(void *p)
{
    if (!p)
        return;
    unsigned c = block_class(p);
    if (c != LARGE && lists[c].n < LIST_BYTES / class_size[c]) {
        struct free_block *b = p;
        b->next = lists[c].head;
        lists[c].head = b;
        lists[c].n++;
        return;
    }
    free((char *)p - HDR);
}

static void *mem_realloc(void *p, size_t n)
{
    if (!p)
        return mem_malloc(n);
    unsigned c = block_class(p);
    if (c != LARGE) {
        if (n <= class_size[c])
            return p;
        void *q = mem_malloc(n);
        if (q) {
            memcpy(q, p, class_size[c]);
            mem_free(p);
        }
        return q;
    }
    if (n > SIZE_MAX - HDR)
        return NULL;
    char *h = realloc((char *)p - HDR, HDR + n); /* a large block stays large */
    return h ? h + HDR : NULL;
}

int ev_mem_install(void)
{
#if defined(__SANITIZE_ADDRESS__) || TS_HAS_ASAN
    (void)mem_realloc; /* kept for the unit test, which calls the functions directly */
    return -1;
#else
    event_set_mem_functions(mem_malloc, mem_realloc, mem_free);
    installed = 1;
    return 0;
#endif
}

void ev_mem_free(void *p)
{
    if (installed)
        mem_free(p);
    else
        free(p);
}
