/*
 * http_server: the three HTTP listeners (inference, management, metrics) on the loop's evhttp
 * and the router that hands each request to the API of its listener (http_inference,
 * http_management, http_metrics) once it has passed the checks every request meets. The
 * replies every API sends are http_reply's. Loop thread only.
 */
#ifndef TS_HTTP_SERVER_H
#define TS_HTTP_SERVER_H

int http_servers_start(void);
void http_servers_stop(void);

#endif
