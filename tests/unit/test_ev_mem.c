#include "../../frontend/core/ev_mem.c"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sys/queue.h>

#include "tap.h"

/* Every size gets a 16-byte-aligned block it can fill, of its class or larger. */
TEST(blocks_hold_their_size_aligned)
{
    for (size_t n = 0; n <= 5000; n += 7) {
        unsigned char *p = mem_malloc(n);
        CHECK(p != NULL && ((uintptr_t)p & 15) == 0);
        memset(p, 0xab, n);
        unsigned c = block_class(p);
        CHECK(c == class_of(n));
        CHECK(c == LARGE ? n > 4096 : n <= class_size[c]);
        mem_free(p);
    }
}

/* A freed block is the next one of its class handed out; no list keeps more than 256 KiB. */
TEST(freed_blocks_are_reused_and_lists_bounded)
{
    void *a = mem_malloc(40);
    mem_free(a);
    CHECK(mem_malloc(50) == a); /* the same class (64) */
    mem_free(a);
    enum { N = 3000 };
    static void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = mem_malloc(1000);
    for (int i = 0; i < N; i++)
        mem_free(p[i]);
    unsigned c = class_of(1000);
    CHECK(lists[c].n == LIST_BYTES / class_size[c]);
    unsigned k = 0;
    for (struct free_block *b = lists[c].head; b; b = b->next)
        k++;
    CHECK(k == lists[c].n);
}

/* realloc keeps the bytes across classes, into and out of the large blocks. */
TEST(realloc_keeps_contents)
{
    unsigned char *p = mem_realloc(NULL, 10);
    for (int i = 0; i < 10; i++)
        p[i] = (unsigned char)i;
    size_t sizes[] = {20, 32, 33, 700, 4096, 5000, 100000, 50, 3};
    size_t have = 10;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        p = mem_realloc(p, sizes[s]);
        CHECK(p != NULL);
        size_t keep = have < sizes[s] ? have : sizes[s];
        int same = 1;
        for (size_t i = 0; i < keep; i++)
            same &= p[i] == (unsigned char)(i * 7 % 251);
        if (s > 0)
            CHECK(same);
        for (size_t i = 0; i < sizes[s]; i++)
            p[i] = (unsigned char)(i * 7 % 251);
        have = sizes[s];
    }
    mem_free(p);
    CHECK(mem_realloc(NULL, SIZE_MAX) == NULL);
}

/* Installed, libevent's buffers and header lists run on it; ev_mem_free frees what libevent
 * returns for the caller to free. */
TEST(libevent_runs_on_it)
{
    ev_mem_free(NULL);
    int on = ev_mem_install() == 0;
    struct evbuffer *b = evbuffer_new();
    char chunk[3000];
    for (size_t i = 0; i < sizeof(chunk); i++)
        chunk[i] = (char)('a' + i % 26);
    for (int i = 0; i < 200; i++)
        CHECK(evbuffer_add(b, chunk, 1 + (size_t)i * 13 % sizeof(chunk)) == 0);
    char out[3000];
    size_t total = evbuffer_get_length(b);
    while (evbuffer_get_length(b)) {
        int n = evbuffer_remove(b, out, sizeof(out));
        CHECK(n > 0);
        total -= (size_t)n;
    }
    CHECK(total == 0);
    evbuffer_free(b);
    struct evkeyvalq h;
    TAILQ_INIT(&h);
    for (int i = 0; i < 100; i++)
        evhttp_add_header(&h, "X-Header", "value");
    CHECK(evhttp_find_header(&h, "x-header") != NULL);
    evhttp_clear_headers(&h);
    char *d = evhttp_uridecode("a%20b", 0, NULL);
    CHECK(d && strcmp(d, "a b") == 0);
    CHECK(!on || block_class(d) == class_of(4)); /* one of ours when installed */
    ev_mem_free(d);
}

int main(void)
{
    RUN(blocks_hold_their_size_aligned);
    RUN(freed_blocks_are_reused_and_lists_bounded);
    RUN(realloc_keeps_contents);
    RUN(libevent_runs_on_it);
    return tap_done();
}
