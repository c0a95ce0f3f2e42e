/*
 * pb_req: pure checks and rules on gRPC request messages, before and after protobuf-c reads
 * them: the NUL-byte check on a message's wire bytes, and proto3's "the last entry of a map key
 * wins". No gRPC, no global state: any thread (the services call them on the loop thread), and
 * a fuzz target calls them on arbitrary bytes (tests/fuzz/grpc_pb.c).
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
 * O(n log n): a request may hold millions of entries. */
size_t pb_req_last_keys(const char *const *keys, size_t n, size_t *keep);

#endif
