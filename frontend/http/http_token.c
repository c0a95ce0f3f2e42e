/*
 * http_token: which requests need a token and whether theirs is good (see http_token.h).
 */
#include "http_token.h"

#include <event2/http.h>
#include <string.h>

#include "http_reply.h"
#include "mgmt/auth.h"

int http_token_free_path(struct evhttp_request *req, const struct http_path *p)
{
    return (p->n == 0 && evhttp_request_get_command(req) == EVHTTP_REQ_OPTIONS) ||
           (p->n == 1 && !strcmp(p->seg[0], "api-description"));
}

int http_token_refused(struct evhttp_request *req, const struct http_path *p, int scope)
{
    if (scope < 0 || !auth_enabled() || http_token_free_path(req, p))
        return 0; /* scope < 0: a listener without a token (metrics, HTTP_NO_TOKEN) */
    if (scope == AUTH_MANAGEMENT && p->n == 1 && !strcmp(p->seg[0], "token"))
        scope = AUTH_API;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    return auth_check((enum auth_scope)scope, h) != 0;
}
