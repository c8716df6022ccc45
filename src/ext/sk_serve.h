/* sk_serve.h — what a server serves with: the application, the event loop, the options and the
 * counters every wire handler (HTTP/1.1, WebSocket; HTTP/2 streams next) and every ASGI session
 * reads. Its owner (the Server object, sk_server.c) fills one sk_serve_t and embeds it; every
 * connection, request and WebSocket session reads it through a borrowed pointer, and each ASGI
 * Task holds a strong reference to the owner, so it outlives them all.
 * Threads: all of it belongs to the thread of the server's event loop (srv->thread), except the
 * sk_shared_* counters, which any thread may read.
 * Includes no handler's header: handlers include this one, so none reads another's settings.
 */
#ifndef SK_SERVE_H
#define SK_SERVE_H

#include "sk_module.h"
#include "sk_transport.h"
#include "sk_http.h"
#include "sk_access.h"
#include "sk_metrics.h"
#include "sk_proxy.h"
#include "sk_resp.h"
#include "sk_h2guard.h"

/* The WebSocket options (uvicorn's names), filled by the Server from its arguments. */
typedef struct {
    uint8_t enabled;      /* --ws auto: 1; --ws none: 0 (an upgrade is served as plain HTTP) */
    uint64_t max_size;    /* --ws-max-size: bytes of payload per received message; 0 = none */
    Py_ssize_t max_queue; /* --ws-max-queue: received messages held for the app before reading
                             * stops (flow control) */
    double ping_interval; /* --ws-ping-interval: seconds between server pings; 0 = none */
    uint8_t per_message_deflate; /* --ws-per-message-deflate: accept a permessage-deflate offer
                                  * (RFC 7692, sk_wspmd.h) */
    double ping_timeout; /* --ws-ping-timeout: seconds a ping waits for its pong; 0 = forever */
} sk_ws_config_t;

/* --http: which protocols a connection may speak (RFC 9113 §3). */
enum sk_http_mode {
    SK_HTTP_AUTO = 0, /* HTTP/1.1, or HTTP/2 by prior knowledge (cleartext) or ALPN h2 (TLS) */
    SK_HTTP_1 = 1,    /* HTTP/1.1 only (ALPN offers http/1.1 only) */
    SK_HTTP_2 = 2,    /* HTTP/2 only (ALPN offers h2 only; cleartext needs the preface) */
};

/* The HTTP/2 options (granian's names), filled by the Server from its arguments (sk_h2.h). */
typedef struct {
    uint8_t mode; /* --http: enum sk_http_mode */
    uint32_t
        max_concurrent_streams; /* --http2-max-concurrent-streams: SETTINGS_MAX_CONCURRENT_STREAMS
                                      * and the streams whose app call has not ended (>= 1) */
    uint32_t max_headers_size;  /* --http2-max-headers-size: SETTINGS_MAX_HEADER_LIST_SIZE,
                                      * bytes (RFC 9113 §6.5.2: names + values + 32 per field) */
    uint32_t initial_window;    /* --http2-initial-stream-window-size: bytes of request body a
                                      * stream may have unread (1..2^31-1) */
    uint32_t connection_window; /* --http2-initial-connection-window-size: bytes of request
                                 * body a connection's streams together may have unread
                                 * (65535..2^31-1; RFC 9113 §6.9.1) */
    uint32_t max_frame_size;    /* --http2-max-frame-size: SETTINGS_MAX_FRAME_SIZE, bytes
                                      * (2^14..2^24-1) */
    double write_timeout;       /* --timeout-write: seconds response content may wait on a
                                 * flow-control window the peer keeps closed before the
                                 * connection is closed */
    sk_h2guard_limits_t guard;  /* the per-connection budgets (sk_h2guard.h) */
} sk_h2_config_t;

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
/* One ring per form of the dict: with or without the wire extras, with or without the TLS entry
 * (sk_serve_t.ext_ring[(extras != 0) + 2 * tls]). */
#define SK_EXT_RINGS 4
typedef struct {
    PyObject *item[SK_EXT_RING];
    /* 1: item[i] was referenced by the ring alone, and as made, when it was put in: no request,
     * app or thread holds it or anything in it, so only its size is looked at again (the
     * garbage collector may empty it: sk_exchange.c ext_sealed_intact). The gc module's
     * introspection (gc.get_objects) could reach it too: what an app changes through that is
     * outside ASGI, as for any server's or loop's internals. Never set without the GIL. */
    uint8_t sealed[SK_EXT_RING];
    unsigned head; /* index of the oldest */
    unsigned n;    /* how many are held */
} sk_ext_ring_t;

/* What every wire handler and ASGI session serves with: configuration, the application and
 * counters. The
 * PyObject fields are strong references owned by `owner` (its traverse/clear visit them). */
typedef struct sk_serve {
    sk_state *st;
    PyObject *owner;       /* the Server object embedding this struct (borrowed) */
    unsigned long thread;  /* PyThread_get_thread_ident() of the thread that made the Server:
                             * its event loop's, the only one that may drive it, its requests
                             * and sessions (sk_serve_check_thread) */
    sk_reactor_t *reactor; /* the owner's reactor (borrowed): sk_reactor_flush ends a batch */
    PyObject *app;         /* the ASGI 3 application */
    PyObject *loop;        /* the running event loop */
    PyObject *logger;      /* logging.Logger for application errors, or None */
    PyObject *state;       /* lifespan state (a dict or anything with copy()) or None */
    PyObject *root_path;   /* str: ASGI root_path */
    PyObject *root_path_b; /* bytes: root_path in UTF-8 (raw_path's prefix) */
    PyObject *last_host;   /* bytes: the last request's Host value, which the next request's
                            * scope shares when it sends the same (sk_asgi_headers: clients of
                            * one server mostly do; issue 37), or NULL */
    PyObject *unix_path;   /* str for a Unix-domain socket, else None */
    /* The scope's "server" of the last connection that asked (sk_serve_addresses), and its
     * address: every connection accepted on one address shares one tuple (not one each: issue
     * 37, memory per idle connection). NULL until the first. */
    PyObject *local_last;
    struct sockaddr_storage local_last_addr;
    PyObject *context;      /* contextvars.Context: each app task starts from a fresh copy */
    PyObject *call_soon_kw; /* ("context",): keyword names for loop.call_soon / create_task */
    PyObject *task_type;    /* asyncio.Task when the loop has no task factory, else NULL */
    PyObject *task_kw;      /* ("loop", "context", "name") (3.11) or, eager, ("loop", "eager_start",
                             * "context") (3.12+) */
    /* finished requests' scope["extensions"] for HTTP/1.0, 1.1, oldest first: the next request
     * takes the oldest once nothing else holds it and it is as made (sk_exchange.c ext_scope,
     * ext_recycle) */
    sk_ext_ring_t ext_ring[SK_EXT_RINGS];
    int eager;           /* 3.12+ and task_type: apps start eagerly */
    int eager_budget;    /* eager starts left in this reactor callback (the owner resets it) */
    sk_limits_t limits;  /* request limits (sk_http.h) */
    double keep_alive;   /* seconds: --timeout-keep-alive */
    double head_timeout; /* seconds: --timeout-request-head */
    double body_timeout; /* seconds: --timeout-request-body; 0 = none */
    Py_ssize_t limit_concurrency; /* requests in flight before 503; 0 = unlimited */
    uint8_t shutting_down;        /* graceful shutdown: responses say close, none follow */
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
    sk_ws_config_t ws;            /* --ws and the --ws-* options */
    sk_h2_config_t h2;            /* --http and the --http2-* options */

    /* Counters Python may read from another thread (Server.metrics() in the metrics listener's
     * thread, the getters): sk_shared_* (sk_module.h). */
    sk_shared_ssize_t active_requests; /* app calls in flight (started, not ended) */
    sk_shared_ssize_t unstarted;       /* request Tasks made whose first step has not run: while
                                        * any has, a final response waits for the batch
                                        * (sk_transport_write_later); also changed where a
                                        * request is freed, maybe on another thread */
    sk_shared_u64_t total_requests;    /* requests started since the server was made */
    sk_shared_u64_t ext_reused;        /* scope["extensions"] dicts handed out again (ext_scope) */
} sk_serve_t;

/* 1 when the calling thread is the one the server belongs to (srv->thread), else 0. */
static inline int
sk_serve_on_thread(const sk_serve_t *srv)
{
    return PyThread_get_thread_ident() == srv->thread;
}

/* The ASGI callables' refusal: `what` (a "send()", "receive()") called from another thread. */
#define SK_ASGI_THREAD_HINT                                                   \
    "the ASGI send/receive callables belong to the event loop's thread (use " \
    "asyncio.run_coroutine_threadsafe / anyio.from_thread)"

/* 0 when called on the thread the server belongs to; else -1 with RuntimeError("skirr: <what>
 * called from another thread; <hint>"). For every Python-facing entry point of an object bound
 * to the server's loop (the ASGI send and receive callables, a request's or session's coroutine
 * steps, the Server's methods that change it): asyncio objects are not thread-safe, and the
 * server's own state is its loop thread's alone. Only the request that misused it fails.
 * sk_serve_thread_refused raises that error and returns -1. */
int sk_serve_thread_refused(const char *what, const char *hint);
static inline int
sk_serve_check_thread(const sk_serve_t *srv, const char *what, const char *hint)
{
    return sk_serve_on_thread(srv) ? 0 : sk_serve_thread_refused(what, hint);
}

/* The IMF-fixdate for now (RFC 9110 §5.6.7), formatted once per second: borrowed, valid until
 * the next second; NULL with --no-date-header. For the responses of every handler the server
 * runs. */
const char *sk_serve_date(sk_serve_t *srv);

/* A connection's scope "client" and "server", made once and kept by its handler: *client (when
 * NULL) becomes a new reference to (host, port), or None on a Unix-domain socket; *local (when
 * NULL) a new reference to (host, port), (path, None) or None (ASGI www 2.5 "client",
 * "server"). Values already set are kept. 0, or -1 with an exception (what was made before the
 * error stays set, for the handler to release). For every handler (HTTP/1.1, HTTP/2). */
int sk_serve_addresses(sk_serve_t *srv, sk_transport_t *t, PyObject **client, PyObject **local);

#endif
