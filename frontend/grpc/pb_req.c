/*
 * pb_req: see pb_req.h.
 *
 * The NUL check walks the wire format itself (tag, then a varint, 8 or 4 bytes, or a
 * length-delimited field) and descends into length-delimited fields the descriptor calls
 * messages, map entries included. It runs before the unpacker, on bytes nobody has checked, so
 * every length is compared with what is left before it is used, and the depth is bounded (our
 * messages nest three levels; protobuf's own parsers stop at 100).
 */
#include "pb_req.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PB_MAX_DEPTH 32

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* name[at..] = ("." if at) + field, cut to namelen - 1 bytes; the new length (at < namelen) */
static size_t path_append(char *name, size_t namelen, size_t at, const char *field)
{
    size_t room = namelen - 1 - at;
    if (at && room) {
        name[at++] = '.';
        room--;
    }
    size_t n = strlen(field);
    if (n > room)
        n = room;
    memcpy(name + at, field, n);
    name[at + n] = '\0';
    return at + n;
}

/* 1 found (path written from name + at), 0 not found, -1 malformed */
static int nul_walk(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                    int depth, char *name, size_t namelen, size_t at)
{
    while (p < end) {
        uint64_t key, len;
        if (read_varint(&p, end, &key) != 0)
            return -1;
        switch (key & 7) {
        case 0:
            if (read_varint(&p, end, &len) != 0)
                return -1;
            break;
        case 1:
            if (end - p < 8)
                return -1;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return -1;
            p += 4;
            break;
        case 2: {
            if (read_varint(&p, end, &len) != 0 || len > (uint64_t)(end - p))
                return -1;
            const ProtobufCFieldDescriptor *f =
                key >> 3 <= UINT32_MAX
                    ? protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3))
                    : NULL;
            if (f && (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE)) {
                size_t next = at;
                if (at < namelen) /* a path longer than name is cut */
                    next = path_append(name, namelen, at, f->name);
                if (f->type == PROTOBUF_C_TYPE_STRING && memchr(p, 0, len))
                    return 1;
                if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                    if (depth == PB_MAX_DEPTH)
                        return -1;
                    int rc = nul_walk(f->descriptor, p, p + len, depth + 1, name, namelen, next);
                    if (rc)
                        return rc;
                }
                if (at < namelen)
                    name[at] = '\0';
            }
            p += len;
            break;
        }
        default:
            return -1;
        }
    }
    return 0;
}

int pb_req_nul_field(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n, char *name,
                     size_t namelen)
{
    if (namelen)
        name[0] = '\0';
    return nul_walk(d, p, p + n, 0, name, namelen, 0) == 1;
}

static int by_key_then_index(const void *a, const void *b, void *arg)
{
    const char *const *keys = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int c = strcmp(keys[i] ? keys[i] : "", keys[j] ? keys[j] : "");
    if (c)
        return c;
    return i < j ? -1 : i > j;
}

size_t pb_req_last_keys(const char *const *keys, size_t n, size_t *keep)
{
    if (!n)
        return 0;
    if (n <= PB_REQ_FEW_KEYS) { /* the rule as it reads, with no allocation and no sort */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            const char *a = keys[i] ? keys[i] : "";
            size_t j = i + 1;
            while (j < n && strcmp(a, keys[j] ? keys[j] : ""))
                j++;
            if (j == n)
                keep[m++] = i;
        }
        return m;
    }
    size_t *order = xmalloc(n * sizeof(*order));
    unsigned char *last = xcalloc(n, 1);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof(*order), by_key_then_index, (void *)keys);
    for (size_t k = 0; k < n; k++) {
        const char *a = keys[order[k]] ? keys[order[k]] : "";
        const char *b = k + 1 < n && keys[order[k + 1]] ? keys[order[k + 1]] : "";
        if (k + 1 == n || strcmp(a, b))
            last[order[k]] = 1;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (last[i])
            keep[m++] = i;
    free(order);
    free(last);
    return m;
}

static void *arena_alloc(void *data, size_t size)
{
    struct pb_arena *a = data;
    const size_t align = _Alignof(max_align_t);
    if (size == 0) /* a piece at base + cap would not read as the buffer's in arena_free */
        size = 1;
    size_t at = (a->used + align - 1) & ~(align - 1);
    if (at <= a->cap && size <= a->cap - at) {
        a->used = at + size;
        return a->base + at;
    }
    a->spilled++;
    return malloc(size); /* NULL fails the unpack, as protobuf-c's own allocator does */
}

static void arena_free(void *data, void *p)
{
    struct pb_arena *a = data;
    uintptr_t at = (uintptr_t)p, lo = (uintptr_t)a->base;
    if (at < lo || at >= lo + a->cap) /* the buffer's pieces go with the buffer */
        free(p);
}

void pb_arena_init(struct pb_arena *a, void *mem, size_t cap)
{
    a->alloc.alloc = arena_alloc;
    a->alloc.free = arena_free;
    a->alloc.allocator_data = a;
    a->base = mem;
    a->used = 0;
    a->cap = cap;
    a->spilled = 0;
}
