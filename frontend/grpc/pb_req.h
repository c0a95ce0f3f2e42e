/*
 * pb_req: pure checks and rules on gRPC request messages, before and after protobuf-c reads
 * them: the NUL-byte check on a message's wire bytes, proto3's "the last entry of a map key
 * wins", and an allocator that unpacks a small message into its caller's stack. No gRPC, no
 * global state: any thread (the services call them on the loop thread), and a fuzz target calls
 * them on arbitrary bytes (tests/fuzz/grpc_pb.c).
 */
#ifndef TS_PB_REQ_H
#define TS_PB_REQ_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* Whether a string field of a message of type d (wire bytes p, n), at any depth of nested
 * messages and map entries, holds a NUL byte: protobuf-c hands strings over as C strings, which
 * end at the first NUL ("mlp\0junk" would name mlp, a datatype "FP32\0x" would be FP32). 1 with
 * the field's dotted path in name ("model_name", "inputs.datatype"), else 0; malformed bytes
 * give 0 and are left to the unpacker, which refuses them. */
int pb_req_nul_field(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n, char *name,
                     size_t namelen);

/* Map entries in wire order with keys keys[0..n) (NULL reads as ""): writes into keep the
 * indices, ascending, of the entries that count, the last one of each key, and returns how many.
 * O(n log n): a request may hold millions of entries. Up to PB_REQ_FEW_KEYS entries (a request
 * usually has one, "data" or "body") it allocates nothing. */
#define PB_REQ_FEW_KEYS 16
size_t pb_req_last_keys(const char *const *keys, size_t n, size_t *keep);

/* protobuf-c's allocations for a message unpacked and dropped within one function, taken from
 * the caller's buffer (on its stack) while they fit, from malloc past that (a large input).
 * Pass &a->alloc to the unpacker. When a->spilled is 0 the whole message lives in the buffer,
 * and its going out of scope frees it: free_unpacked (with &a->alloc) is needed only when
 * something spilled. A mid-message failure is freed by protobuf-c itself, as with malloc. */
#define PB_ARENA_BYTES 4096
struct pb_arena {
    ProtobufCAllocator alloc;
    unsigned char *base;
    size_t used, cap;
    size_t spilled; /* allocations that went to malloc */
};
void pb_arena_init(struct pb_arena *a, void *mem, size_t cap); /* mem: max_align_t-aligned */

#endif
