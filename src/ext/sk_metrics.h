/* sk_metrics.h — the native counters behind --metrics-port (Prometheus, served from Python).
 *
 * Owns: plain counters the HTTP/1.1 handler bumps (requests by method and status class, bytes in
 * and out, refusals by status, timeouts by kind, a request-duration histogram, client
 * disconnects by kind and what the application's call ended with) and their
 * snapshot as a dict. Open connections and requests in flight are read from the reactor and the
 * handler when the snapshot is taken.
 * Never: allocates or calls Python on the request path; costs one NULL test per hook when
 * metrics are off (the Server holds no sk_metrics_t then).
 * Threading: bumped on the event loop's thread alone; the snapshot is taken on any thread (the
 * metrics listener's calls Server.metrics()). Under the GIL both hold it; on a free-threaded
 * build every counter is an sk_shared_u64_t (sk_module.h: a C11 atomic), so the snapshot reads
 * each whole, while the loop goes on bumping them (not one instant across counters).
 */
#ifndef SK_METRICS_H
#define SK_METRICS_H

#include "sk_module.h"

#define SK_M_METHODS 8   /* GET HEAD POST PUT DELETE PATCH OPTIONS other */
#define SK_M_CLASSES 5   /* 1xx .. 5xx */
#define SK_M_REFUSALS 11 /* 400 408 413 414 426 431 500 501 503 505 other */
#define SK_M_BUCKETS 12  /* finite histogram bounds (seconds); +Inf is the count */

enum sk_timeout_kind {
    SK_TIMEOUT_HEAD = 0,
    SK_TIMEOUT_KEEPALIVE,
    SK_TIMEOUT_WRITE,
    SK_TIMEOUT_BODY,
    SK_TIMEOUTS
};

/* A client that left before its response (a WebSocket: its session) completed: the exchange's
 * kind, and how the application's call ended (issue 36 item 1). */
enum sk_disconnect_kind { SK_DISC_HTTP = 0, SK_DISC_WEBSOCKET, SK_DISC_KINDS };
enum sk_disconnect_app {
    SK_DISC_APP_NONE = 0, /* returned, or its Task was cancelled: no exception */
    SK_DISC_APP_ABSORBED, /* raised the disconnect or a wrapper of it: the departure, at debug */
    SK_DISC_APP_ERROR,    /* raised anything else: an application failure, at error */
    SK_DISC_APPS
};

typedef struct sk_metrics {
    sk_shared_u64_t requests[SK_M_METHODS][SK_M_CLASSES];
    sk_shared_u64_t refusals[SK_M_REFUSALS];
    sk_shared_u64_t timeouts[SK_TIMEOUTS];
    sk_shared_u64_t disconnects[SK_DISC_KINDS][SK_DISC_APPS];
    sk_shared_u64_t bytes_in, bytes_out;   /* bytes: request bytes consumed; content sent */
    sk_shared_u64_t buckets[SK_M_BUCKETS]; /* non-cumulative counts per bucket */
    sk_shared_u64_t count;                 /* observations (the +Inf bucket) */
    sk_shared_double_t sum;                /* seconds */
} sk_metrics_t;

/* The method's index for requests[] from its llhttp method number. */
int sk_metrics_method(int llhttp_method);
/* A response finished with status after seconds, with bytes of content. */
void sk_metrics_response(sk_metrics_t *m, int method, int status, uint64_t bytes, double seconds);
/* A refusal with this status. */
void sk_metrics_refusal(sk_metrics_t *m, int status);
/* New reference: {"requests": {(method, "2xx"): n, ...}, "refusals": {status: n}, "timeouts":
 * {kind: n}, "disconnects": {(kind, app_exception): n} (every pair, from "http"/"websocket" and
 * "none"/"absorbed"/"error"), "bytes_in", "bytes_out", "buckets": [(bound, cumulative n), ...], "count", "sum",
 * "connections", "in_flight"}; NULL with an exception. */
PyObject *sk_metrics_snapshot(const sk_metrics_t *m, Py_ssize_t connections, Py_ssize_t in_flight);

#endif
