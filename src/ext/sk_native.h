/* sk_native.h — private declarations shared by the files of the skirr._native extension.
 *
 * Owns: the module state (every heap type, exception type and interned string), the connection
 * struct of the native reactor, and the Server and Request object layouts.
 * Never: exposes anything to other extensions; no global mutable state (everything hangs off the
 * module state, reached through the defining type).
 *
 * Files: sk_module.c (module init, state, the ready awaitable), sk_server.c (the reactor: epoll,
 * sockets, timers, connection lifetime), sk_request.c (ASGI: scope, receive, send, app task).
 */
#ifndef SK_NATIVE_H
#define SK_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sk_core.h"
#include "sk_http.h"
#include "sk_resp.h"

/* Tuning constants (bytes unless said otherwise). */
#define SK_READ_SIZE (64 * 1024) /* one recv() into the server's shared read buffer */
#define SK_MAX_EVENTS 16         /* ready descriptors handled per reactor callback */
#define SK_MAX_ACCEPTS 16        /* accept4() calls per listening-socket readiness */
#define SK_WRITE_HIGH_WATER \
    (64 * 1024) /* send(more_body=True) waits while unsent output exceeds this */
#define SK_BODY_HIGH_WATER (64 * 1024) /* stop reading while this much request body is unconsumed */
#define SK_INPUT_HIGH_WATER \
    (64 * 1024)               /* stop reading while this much unparsed input is buffered */
#define SK_FAIRNESS_QUOTA 128 /* ready receive/send operations per request before one yield */
#define SK_METHOD_CACHE 64    /* llhttp method ids cached as interned str */
#define SK_MAX_EAGER 16       /* applications started eagerly per reactor callback */
#define SK_DISCARD_MAX (1024 * 1024) /* unread request body dropped to keep a connection (bytes) */

/* What a connection's one deadline means (RFC 9112 §9.5 leaves timeouts to the server). */
enum sk_timer_kind {
    SK_TIMER_NONE = 0,
    SK_TIMER_KEEPALIVE, /* idle between requests: close quietly */
    SK_TIMER_HEAD,      /* request head not complete: 408 if any byte arrived, then close */
    SK_TIMER_WRITE,     /* unsent output made no progress: the peer is gone (ClientDisconnected) */
    SK_TIMER_LINGER,    /* half-closed by us: stop discarding input and close */
};

typedef struct ServerObject ServerObject;
typedef struct RequestObject RequestObject;
typedef struct sk_conn sk_conn_t;

typedef struct {
    PyTypeObject *server_type;
    PyTypeObject *request_type;
    PyTypeObject *ready_type;
    PyObject *ClientDisconnected;
    PyObject *CancelledError; /* asyncio.CancelledError: a cancelled app is not an app error */
    PyObject *send_done;      /* a Ready holding None, shared: stateless, so safe to reuse */
    PyObject *asgi_proto;     /* {"version": "3.0", "spec_version": "2.5"}, copied per request */
    PyObject *scope_proto;    /* fixed scope items, copied per request */
    PyObject *disconnect_msg; /* {"type": "http.disconnect"} prototype, copied per use */
    PyObject *empty_bytes;
    PyObject *methods[SK_METHOD_CACHE];
    /* interned strings */
    PyObject *s_type, *s_asgi, *s_http_version, *s_method, *s_scheme, *s_path, *s_raw_path;
    PyObject *s_query_string, *s_root_path, *s_headers, *s_client, *s_server, *s_state;
    PyObject *s_body, *s_more_body, *s_status, *s_http, *s_1_0, *s_1_1;
    PyObject *s_http_request, *s_http_disconnect, *s_http_response_start, *s_http_response_body;
    PyObject *s_create_task, *s_create_future, *s_throw, *s_close, *s_set_result;
    PyObject *s_set_exception, *s_done, *s_add_reader;
    PyObject *s_remove_reader, *s_call_soon, *s_error, *s_copy;
    /* Live-object counters for the leak and lifetime checks (skirr._native._live()). */
    Py_ssize_t live_servers, live_conns, live_requests, live_ready;
} sk_state;

/* The module state for any object whose type was defined by this module. Borrowed pointer. */
sk_state *sk_get_state_by_type(PyTypeObject *tp);

/* One client connection of the native reactor. Plain C: Python sees it only through the Request
 * that is currently attached to it. Freed by the server's reap step once closed (never while a
 * stack frame may still use it: see server_reap in sk_server.c). */
struct sk_conn {
    int fd;
    ServerObject *server; /* borrowed: the server closes every connection before it goes */
    sk_parser_t parser;
    sk_buf_t in;            /* received bytes not yet parsed (pipelining, flow control) */
    sk_buf_t out;           /* serialized bytes not yet accepted by the kernel */
    RequestObject *current; /* strong: the request being received/answered, NULL between requests */
    PyObject *client;       /* strong: scope "client", cached per connection (None for UDS) */
    PyObject *local;        /* strong: scope "server", cached per connection */
    uint32_t epoll_events;  /* mask currently registered */
    uint8_t closed;         /* fd closed, waiting to be reaped */
    uint8_t close_after_write; /* close once out is flushed */
    uint8_t pending;           /* on the server's pending list */
    uint8_t out_deferred; /* out waits for the first step of the current request, not EPOLLOUT */
    uint8_t in_idle;      /* on the server's timer list (deadline and timer_kind valid) */
    uint8_t timer_kind;   /* enum sk_timer_kind */
    uint8_t lingering;    /* half-closed by us: reading and discarding until EOF or timeout */
    uint8_t parsing;      /* inside conn_parse: an eagerly run app's writes wait for its end */
    uint8_t discarding;   /* reading and dropping the rest of an answered request's body */
    double deadline;      /* monotonic seconds, while in_idle */
    uint64_t requests;    /* requests started on this connection */
    sk_conn_t *idle_prev, *idle_next;
    sk_conn_t *all_prev, *all_next;
    sk_conn_t *pending_next;
    sk_conn_t *reap_next;
    struct sockaddr_storage peer;
    socklen_t peer_len;
};

struct ServerObject {
    PyObject_HEAD sk_state *st; /* borrowed from the module (the type keeps the module alive) */
    PyObject *app;
    PyObject *loop;
    PyObject *logger;
    PyObject *state;        /* lifespan state or None */
    PyObject *root_path;    /* str */
    PyObject *root_path_b;  /* bytes, UTF-8 */
    PyObject *unix_path;    /* str or None */
    PyObject *on_ready;     /* bound reactor callback given to loop.add_reader */
    PyObject *run_pending;  /* bound callback given to loop.call_soon */
    PyObject *context;      /* contextvars.Context at start(): every app task starts from a copy */
    PyObject *call_soon_kw; /* ("context",): keyword names for loop.call_soon */
    PyObject *task_type;    /* asyncio.Task when the loop has no task factory, else NULL */
    PyObject *task_kw;      /* ("loop", "context"); eager: ("loop", "eager_start", "context") */
    int eager;              /* apps start eagerly (3.12+, task_type set) */
    int eager_budget;       /* eager starts left in this reactor callback */
    int listen_fd;
    int epfd;
    int timerfd;
    uint8_t started, accepting, shutting_down, closed, pending_scheduled, accept_paused;
    sk_limits_t limits;
    double keep_alive;            /* seconds: --timeout-keep-alive */
    double head_timeout;          /* seconds: --timeout-request-head */
    double write_timeout;         /* seconds: --timeout-write */
    Py_ssize_t limit_concurrency; /* requests in flight before 503; 0 = unlimited */
    Py_ssize_t limit_connections; /* open connections before accepting pauses; 0 = unlimited */
    uint64_t total_requests;      /* requests started since the server was made */
    Py_ssize_t connections;
    Py_ssize_t active_requests;
    sk_conn_t *all_head;
    sk_conn_t *idle_head, *idle_tail;
    sk_conn_t *pending_head, *pending_tail;
    sk_conn_t *reap_head;
    int64_t date_sec;
    char date[30];
    char readbuf[SK_READ_SIZE];
};

struct RequestObject {
    PyObject_HEAD sk_state *st;
    ServerObject *server;     /* strong */
    sk_conn_t *conn;          /* NULL once detached (connection closed or moved on) */
    PyObject *task;           /* strong while running: the asyncio.Task whose coroutine is this */
    PyObject *coro;           /* strong while running: what the app call returned, driven by this */
    PyObject *receive_waiter; /* future resolved with the next receive() event */
    PyObject *drain_waiter; /* future resolved when unsent output drops below the high-water mark */
    PyObject *body;         /* list of bytes not yet delivered by receive() */
    PyObject *scope;        /* built at the head, handed to the app by sk_request_run() */
    size_t body_buffered;   /* bytes in body */
    unsigned ops;           /* ready operations since the last yield (fairness quota) */
    uint8_t body_complete;  /* the request message ended */
    uint8_t disconnected;   /* the client went away before the exchange ended */
    uint8_t expect_continue, continue_sent;
    uint8_t response_complete;
    uint8_t final_delivered;   /* receive() returned the event with more_body False */
    uint8_t keep_alive;        /* the request allows a persistent connection */
    uint8_t http_minor;        /* 0 or 1 */
    uint8_t is_head;           /* method HEAD */
    uint8_t raised_disconnect; /* skirr raised ClientDisconnected into the app */
    uint8_t failed;            /* the response cannot be completed (abort after app error) */
    uint8_t stepped;           /* its Task has run the app at least once */
    uint8_t running; /* the app was called and has not ended (counted in active_requests) */
    sk_resp_t resp;
};

/* sk_module.c */
/* A ready awaitable returning value (stolen) after yielding to the loop first if yield_first.
 * New reference, or NULL with an exception. */
PyObject *sk_ready_new(sk_state *st, PyObject *value, int yield_first);

/* sk_server.c (used by sk_request.c) */
int sk_conn_write(sk_conn_t *c);  /* flush out; -1 if the peer is gone (conn closed) */
void sk_conn_close(sk_conn_t *c); /* close now; detaches the current request */
void sk_conn_request_done(sk_conn_t *c, int keep_alive); /* the current response completed */
void sk_conn_update_events(sk_conn_t *c);    /* re-derive the epoll mask (flow control) */
void sk_conn_schedule(sk_conn_t *c);         /* parse buffered input soon (loop.call_soon) */
void sk_conn_flush_deferred(sk_conn_t *c);   /* write output held for coalescing, if any */
const char *sk_server_date(ServerObject *s); /* IMF-fixdate for now, cached per second */
void sk_server_abort_response(sk_conn_t *c); /* app failed mid-response: close without completing */

/* sk_request.c (used by sk_server.c) */
/* Builds the request and its scope for the head just parsed. New reference, or NULL with an
 * exception set (the caller refuses with 500). */
RequestObject *sk_request_new(ServerObject *s, sk_conn_t *c);
/* Calls the app and starts its task; 0, or -1 (the caller refuses with 500). Deferred until the
 * bytes in hand are parsed, so a request refused within them never reaches the app. */
int sk_request_run(RequestObject *r);
int sk_request_body(RequestObject *r, const char *data, size_t len); /* 0, -1 with exception */
void sk_request_end(RequestObject *r);
void sk_request_disconnect(RequestObject *r); /* connection closed: wake waiters, detach */

#endif
