/*
 * handler_reply: the rules a handler's answer meets before any transport writes it (see
 * handler_reply.h). Names are compared without regard to case, as HTTP does.
 */
#include "handler_reply.h"

#include <string.h>
#include <strings.h>

#include "otf.h"

/* RFC 9110 section 5.6.2: tchar */
static int is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* The fields that frame a message or belong to one connection (RFC 9110 sections 7.6.1,
 * 8.6, RFC 9112 section 6.1): the transport writes these, never a handler. */
static const char *const framing[] = {
    "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te",
    "trailer",        "proxy-connection",
};

static int is_named(const char *key, size_t klen, const char *name)
{
    return strlen(name) == klen && strncasecmp(key, name, klen) == 0;
}

enum handler_header handler_reply_header(const char *key, size_t klen, const char *val, size_t vlen,
                                         int keep_debug)
{
    if (klen == 0)
        return HANDLER_HEADER_INVALID;
    for (size_t i = 0; i < klen; i++)
        if (!is_tchar((unsigned char)key[i]))
            return HANDLER_HEADER_INVALID;
    for (size_t i = 0; i < vlen; i++) {
        unsigned char c = (unsigned char)val[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return HANDLER_HEADER_INVALID;
    }
    for (size_t i = 0; i < sizeof(framing) / sizeof(framing[0]); i++)
        if (is_named(key, klen, framing[i]))
            return HANDLER_HEADER_FRAMING;
    size_t pl = sizeof(HANDLER_DEBUG_PREFIX) - 1;
    if (!keep_debug && klen >= pl && strncasecmp(key, HANDLER_DEBUG_PREFIX, pl) == 0)
        return HANDLER_HEADER_DEBUG;
    return HANDLER_HEADER_KEEP;
}

int32_t handler_reply_status(int32_t s)
{
    if (s == 0)
        return 200;
    return s >= 200 && s <= 599 ? s : 500;
}

void handler_reply_filter(struct otf_prediction *p, int keep_debug, struct handler_reply_dropped *d)
{
    memset(d, 0, sizeof(*d));
    int32_t st = handler_reply_status(p->status);
    if (st != p->status && p->status != 0)
        d->status_from = p->status ? p->status : -1;
    p->status = st;
    size_t n = 0;
    for (size_t i = 0; i < p->n_headers; i++) {
        const struct otf_kv *kv = &p->headers[i];
        size_t kl = kv->key.len > 0 ? (size_t)kv->key.len : 0;
        size_t vl = kv->val.len > 0 ? (size_t)kv->val.len : 0;
        switch (handler_reply_header(kv->key.p, kl, kv->val.p, vl, keep_debug)) {
        case HANDLER_HEADER_KEEP:
            p->headers[n++] = *kv;
            break;
        case HANDLER_HEADER_FRAMING:
            if (d->framing++ == 0) {
                size_t c = kl < sizeof(d->first_framing) - 1 ? kl : sizeof(d->first_framing) - 1;
                memcpy(d->first_framing, kv->key.p, c);
                d->first_framing[c] = '\0';
            }
            break;
        case HANDLER_HEADER_INVALID:
            d->invalid++;
            break;
        case HANDLER_HEADER_DEBUG:
            d->debug++;
            break;
        }
    }
    p->n_headers = n;
}
