/* What the publisher and the subscriber share about endpoints. */
#ifndef KV_EVENTS_ENDPOINT_H
#define KV_EVENTS_ENDPOINT_H

/* libzmq unlinks an ipc:// path before it binds there: 0 when addr
 * ("ipc://PATH" or another scheme) names nothing, or a socket no one
 * serves; -EEXIST (a file that is not a socket) or -EADDRINUSE (a live
 * socket) with detail otherwise. */
int kvi_ipc_path_free(const char *addr, const char *endpoint);

#endif
