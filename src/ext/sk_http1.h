/* sk_http1.h — the HTTP/1.1 protocol handler, serving the ASGI `http` scope.
 *
 * The first handler a transport gets (sk_reactor_config_t.open = sk_http1_open): it parses
 * requests with the byte-level parser, refuses bad ones itself, runs one ASGI application call
 * per request (the Request object, internal, is the coroutine its asyncio.Task runs) and writes
 * responses with the byte-level serializer. Its owner (the Server object) fills one
 * sk_http1_server_t and embeds it; every connection and request reads it through a borrowed
 * pointer, and each Request holds a strong reference to the owner, so it outlives them all.
 * Never: reaches into the transport or the reactor except through sk_transport.h.
 */
#ifndef SK_HTTP1_H
#define SK_HTTP1_H

#include "sk_module.h"
#include "sk_transport.h"
#include "sk_http.h"
#include "sk_access.h"
#include "sk_metrics.h"
#include "sk_proxy.h"
#include "sk_resp.h"
#include "sk_wsh.h"

/* Applications started eagerly (3.12+) per reactor callback or run_pending pass: one per ready
 * descriptor, so every request a callback reads starts in it; the rest (pipelined requests past
 * it) start from the loop's ready queue. 16 (when a callback read at most 16) made three of four
 * requests at c64 wait a loop iteration and pay asyncio's Task registration (bench/LEVERS.md). */
#define SK_MAX_EAGER SK_MAX_EVENTS

/* Finished requests' scope["extensions"] dicts (strong references), oldest first. Holds more than
 * an access-log batch (SK_ACCESS_BATCH, 64) plus a reactor callback's worth of responses: the
 * log's records hold their scopes until written, and the oldest must be free by the time it is
 * the next candidate. Full: the oldest is released. */
#define SK_EXT_RING 128
typedef struct {
    PyObject *item[SK_EXT_RING];
    unsigned head; /* index of the oldest */
    unsigned n;    /* how many are held */
} sk_ext_ring_t;

/* What the HTTP/1.1 handler serves with: configuration, the application and counters. The
 * PyObject fields are strong references owned by `owner` (its traverse/clear visit them). */
typedef struct sk_http1_server {
    sk_state *st;
    PyObject *owner;        /* the Server object embedding this struct (borrowed) */
    sk_reactor_t *reactor;  /* the owner's reactor (borrowed): sk_reactor_flush ends a batch */
    PyObject *app;          /* the ASGI 3 application */
    PyObject *loop;         /* the running event loop */
    PyObject *logger;       /* logging.Logger for application errors, or None */
    PyObject *state;        /* lifespan state (a dict or anything with copy()) or None */
    PyObject *root_path;    /* str: ASGI root_path */
    PyObject *root_path_b;  /* bytes: root_path in UTF-8 (raw_path's prefix) */
    PyObject *unix_path;    /* str for a Unix-domain socket, else None */
    PyObject *context;      /* contextvars.Context: each app task starts from a fresh copy */
    PyObject *call_soon_kw; /* ("context",): keyword names for loop.call_soon / create_task */
    PyObject *task_type;    /* asyncio.Task when the loop has no task factory, else NULL */
    PyObject *task_kw;      /* ("loop", "context", "name") (3.11) or, eager, ("loop", "eager_start",
                             * "context") (3.12+) */
    /* finished requests' scope["extensions"] for HTTP/1.0, 1.1, oldest first: the next request
     * takes the oldest once nothing else holds it and it is as made (sk_http1.c ext_scope,
     * ext_recycle) */
    sk_ext_ring_t ext_ring[2];
    int eager;           /* 3.12+ and task_type: apps start eagerly */
    int eager_budget;    /* eager starts left in this reactor callback (the owner resets it) */
    sk_limits_t limits;  /* request limits (sk_http.h) */
    double keep_alive;   /* seconds: --timeout-keep-alive */
    double head_timeout; /* seconds: --timeout-request-head */
    double body_timeout; /* seconds: --timeout-request-body; 0 = none */
    Py_ssize_t limit_concurrency; /* requests in flight before 503; 0 = unlimited */
    uint8_t shutting_down;        /* graceful shutdown: responses say close, none follow */
    Py_ssize_t active_requests;   /* app calls in flight (started, not ended) */
    Py_ssize_t unstarted;         /* request Tasks made whose first step has not run: while
                                   * any has, a final response waits for the batch
                                   * (sk_transport_write_later) */
    uint64_t total_requests;      /* requests started since the server was made */
    uint64_t ext_reused;          /* scope["extensions"] dicts handed out again (ext_scope) */
    uint64_t max_requests;        /* --limit-max-requests: from this total on, responses say
                                   * close (the server is about to stop); 0 = no limit */
    int64_t date_sec;             /* the second `date` was formatted for */
    char date[SK_DATE_LEN + 1];   /* IMF-fixdate, cached per second */
    uint8_t date_header;          /* --date-header: send `date` when the app does not */
    sk_resp_opts_t resp_opts;     /* --server-header, --header (points into resp_fields) */
    PyObject *resp_fields;        /* bytes holding resp_opts' server then extra lines, or NULL */
    sk_access_t access;           /* the access log (sk_access.h) */
    sk_proxy_t proxy;             /* --proxy-headers, --forwarded-allow-ips (sk_proxy.h) */
    PyObject *trace;              /* callable(event, client) for --log-level trace, or NULL:
                                   * connection events are not reported */
    sk_metrics_t *metrics;        /* --metrics-port counters (PyMem, owned), or NULL: off */
    sk_ws_config_t ws;            /* --ws and the --ws-* options (sk_wsh.h) */
} sk_http1_server_t;

/* The handler table (static storage). */
extern const sk_handler_ops_t sk_http1_ops;

/* sk_handler_open_fn for a reactor serving HTTP/1.1: `owner` is the sk_http1_server_t. Sets the
 * request-head deadline. The handler, or NULL when out of memory. */
void *sk_http1_open(void *owner, sk_transport_t *t);

/* Releases the scope["extensions"] dicts srv->ext_ring holds (the owner's tp_clear and
 * dealloc); may run finalizers. */
void sk_http1_ext_clear(sk_http1_server_t *srv);

/* The IMF-fixdate for now, formatted once per second (borrowed: valid until the next second),
 * or NULL with --no-date-header. For the responses of every handler the server runs. */
const char *sk_http1_date(sk_http1_server_t *srv);

#endif
