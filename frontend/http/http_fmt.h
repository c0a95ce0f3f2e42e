/*
 * http_fmt: the bytes of a reply's head, written without vfprintf.
 *
 * evhttp (libevent 2.1) writes a reply's status line and each header line with
 * evbuffer_add_printf, and formats the Date header of every HTTP/1.1 reply with
 * evutil_date_rfc1123: together a sixth of the frontend's instructions per request
 * (callgrind). The frontend defines evbuffer_add_printf itself (libevent calls it through its
 * PLT): the two formats evhttp's reply head uses are copied directly, any other format goes to
 * libevent's evbuffer_add_vprintf, so every caller gets the same bytes as before. And the
 * frontend adds Date itself, from a string made once per second, so evhttp does not.
 * evhttp_find_header compares header names with evutil_ascii_strcasecmp, which calls
 * EVUTIL_TOLOWER_ through the PLT for every byte; the frontend defines it and
 * evutil_ascii_strncasecmp too, with the same results.
 */
#ifndef TS_HTTP_FMT_H
#define TS_HTTP_FMT_H

#include <event2/http.h>

/* Adds "Date: <now, RFC 1123>" to req's reply where evhttp would (HTTP/1.1 and later). */
void http_fmt_add_date(struct evhttp_request *req);

#endif
