/* pb_req's pure pieces on their own (frontend/grpc/pb_req.c): the stack arena protobuf-c unpacks
 * requests into, and the map's last-wins rule on both of its paths (in place up to
 * PB_REQ_FEW_KEYS entries, sorted past that). The NUL check and whole messages are the grpc_pb
 * fuzz target's. */
#include "../../frontend/grpc/pb_req.c"
#include "tap.h"

static int in_buffer(const struct pb_arena *a, const void *p)
{
    uintptr_t at = (uintptr_t)p, lo = (uintptr_t)a->base;
    return at >= lo && at < lo + a->cap;
}

/* Pieces come from the buffer, aligned and apart, until it is full; then from malloc, counted,
 * and the arena's free releases those (LeakSanitizer) and leaves the buffer's alone. */
TEST(arena_hands_out_the_buffer_then_malloc)
{
    _Alignas(max_align_t) unsigned char mem[256];
    struct pb_arena a;
    pb_arena_init(&a, mem, sizeof(mem));
    ProtobufCAllocator *al = &a.alloc;
    unsigned char *p1 = al->alloc(al->allocator_data, 10);
    unsigned char *p2 = al->alloc(al->allocator_data, 3);
    CHECK(in_buffer(&a, p1) && in_buffer(&a, p2) && p2 >= p1 + 10);
    CHECK((uintptr_t)p2 % _Alignof(max_align_t) == 0);
    CHECK_EQ_INT(a.spilled, 0);
    memset(p1, 0xab, 10);
    memset(p2, 0xcd, 3);
    unsigned char *big = al->alloc(al->allocator_data, 1000);
    CHECK(big && !in_buffer(&a, big));
    CHECK_EQ_INT(a.spilled, 1);
    memset(big, 0, 1000);
    al->free(al->allocator_data, p1); /* the buffer's: nothing to do */
    al->free(al->allocator_data, big);
    al->free(al->allocator_data, NULL);
    CHECK(p1[0] == 0xab && p2[2] == 0xcd);
}

/* A zero-size piece asked for when the buffer is full must not be base + cap, which the free
 * would take for malloc's: it spills like any piece that does not fit. */
TEST(arena_zero_size_piece_at_a_full_buffer)
{
    _Alignas(max_align_t) unsigned char mem[64];
    struct pb_arena a;
    pb_arena_init(&a, mem, sizeof(mem));
    ProtobufCAllocator *al = &a.alloc;
    CHECK(in_buffer(&a, al->alloc(al->allocator_data, 64)));
    void *z = al->alloc(al->allocator_data, 0);
    CHECK(z && z != (void *)(mem + sizeof(mem)));
    CHECK_EQ_INT(a.spilled, 1);
    al->free(al->allocator_data, z);
}

/* The rule as it reads (an entry counts unless a later one has its key, NULL reading as ""),
 * against pb_req_last_keys for 1 to 40 entries over a few keys: both paths. */
TEST(last_keys_on_both_paths)
{
    static const char *const names[] = {"data", "body", "", NULL, "x"};
    uint32_t x = 5;
    for (int round = 0; round < 2000; round++) {
        size_t n = 1 + round % 40;
        const char *keys[40];
        size_t keep[40];
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            keys[i] = names[(x >> 8) % 5];
        }
        size_t m = pb_req_last_keys(keys, n, keep), k = 0;
        for (size_t i = 0; i < n; i++) {
            int later = 0;
            for (size_t j = i + 1; j < n && !later; j++)
                later = !strcmp(keys[i] ? keys[i] : "", keys[j] ? keys[j] : "");
            if (!later) {
                CHECK(k < m && keep[k] == i);
                k++;
            }
        }
        CHECK_EQ_INT(k, m);
    }
}

int main(void)
{
    RUN(arena_hands_out_the_buffer_then_malloc);
    RUN(arena_zero_size_piece_at_a_full_buffer);
    RUN(last_keys_on_both_paths);
    return tap_done();
}
