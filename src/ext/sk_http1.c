/* sk_http1.c — the HTTP/1.1 protocol handler and the ASGI `http` Request.
 *
 * Owns, per connection: the request parser, refusals (the one error sink: refuse()), the
 * request-head and keep-alive deadlines, starting one Request per parsed head, pipelining (the
 * next buffered request starts as the previous response completes), the persistence decision and
 * the write-timing policy (settle_output(): when output leaves). Per request: the scope (a fresh
 * mutable dict), the body queue and receive() events, validating send() messages and handing them
 * to the serializer, 100-continue, the fairness quota, and driving the app: the Request is the
 * coroutine its asyncio.Task runs, so it sees the app end in the same step (500 before the
 * response head, abort after it, quiet server-generated disconnects and cancellations).
 * Never: touches a socket or the reactor (only the sk_transport_* API), or lets an application's
 * failure reach another request or the server.
 *
 * States of a Request (each an enum, changed only by its set_*() function):
 *   rx   (request message)  BODY -> COMPLETE (message ended) -> DELIVERED (final event given)
 *   tx   (response)         OPEN -> COMPLETE | FAILED (cannot be completed) | GONE (client left)
 *   app  (application call) NEW -> STARTED (task made) -> RUNNING (the app was called, in the
 *                           task's first step) -> DONE; the request counts in active_requests
 *                           exactly while STARTED or RUNNING
 *   cont (100-continue)     NONE | EXPECTED -> SENT
 */
#include "sk_http1.h"

#include "sk_asgi.h"
#include "sk_resp.h"
#include "sk_token.h"
#include "sk_wsh.h"
#include "sk_wshs.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define BODY_HIGH_WATER (64 * 1024) /* stop reading while this much request body is unconsumed */
#define FAIRNESS_QUOTA 128          /* ready receive/send operations per request before one yield */
#define DISCARD_MAX (1024 * 1024)   /* unread request body dropped to keep a connection (bytes) */
/* A final response body of at least this many bytes, given as bytes, is sent by reference
 * (body_by_ref): no copy into the connection's output buffer, which then never grows to hold it.
 * Below it the copy costs less than a second iovec, and a small response keeps its one send(). */
#define BODY_BY_REF_MIN (16 * 1024)

/* The handler's deadline kinds (sk_transport_set_deadline). RFC 9112 §9.5 leaves timeouts to the
 * server. */
enum {
    DL_HEAD = 1,  /* request head not complete: 408 if any byte arrived, then close */
    DL_KEEPALIVE, /* idle between requests: close quietly */
    DL_BODY,      /* no request body byte while skirr wants one: 408 if no response began */
    DL_SHUTDOWN,  /* idle when the graceful shutdown began: close quietly after SHUTDOWN_GRACE */
};

/* How long a connection idle between requests stays open once the graceful shutdown begins
 * (seconds; at most --timeout-keep-alive). A request that the client sent as the shutdown began
 * (a keep-alive client reuses the connection at once) is then answered with 'connection: close'
 * instead of meeting a closed connection: a client may not retry a non-idempotent request on a
 * new connection (RFC 9110 §9.2.2), so closing at once lost it during a rolling restart. */
#define SHUTDOWN_GRACE 1.0

enum rx_state { RX_BODY = 0, RX_COMPLETE, RX_DELIVERED };
enum tx_state { TX_OPEN = 0, TX_COMPLETE, TX_FAILED, TX_GONE };
enum app_state { APP_NEW = 0, APP_STARTED, APP_RUNNING, APP_DONE };
enum cont_state { CONT_NONE = 0, CONT_EXPECTED, CONT_SENT };

typedef struct RequestObject RequestObject;

/* One connection's HTTP/1.1 state. Freed by release() when the reactor reaps the transport. */
typedef struct {
    sk_transport_t *t; /* borrowed: outlives this (release() runs before it is freed) */
    sk_serve_t *srv;   /* borrowed: owned by the Server, which outlives every connection */
    sk_parser_t parser;
    RequestObject *current; /* strong: the request being received/answered, NULL between */
    PyObject *client;       /* strong: scope "client", made once per connection (None for UDS) */
    PyObject *local;        /* strong: scope "server", made once per connection */
    uint8_t closed;         /* the transport told closed(): nothing more is sent */
    uint8_t discarding;     /* reading and dropping the rest of an answered request's body */
    uint8_t switched;       /* handed to the WebSocket handler: this handler is done */
    uint8_t held_back;      /* input was left unparsed behind unsent output: writable() feeds */
} http1_conn_t;

struct RequestObject {
    PyObject_HEAD sk_state *st;
    PyObject *owner;    /* strong: the Server, keeping srv alive */
    sk_serve_t *srv;    /* borrowed from owner */
    http1_conn_t *conn; /* NULL once detached (connection closed or moved on) */
    PyObject *task;     /* strong while running: the asyncio.Task whose coroutine is this */
    PyObject *coro;     /* strong while running: what the app call returned, driven by this */
    PyObject *receive_waiters; /* list of futures waiting in receive(), first served first */
    PyObject *drain_waiters;   /* list of futures waiting in send() for output to drain */
    PyObject *body;            /* list of bytes not yet delivered by receive() */
    PyObject *scope;           /* built at the head, handed to the app at the first step */
    PyObject *ext;             /* strong: scope["extensions"], recycled when the request is freed */
    size_t body_buffered;      /* bytes in body */
    unsigned ops;              /* ready operations since the last yield (fairness quota) */
    enum rx_state rx;
    enum tx_state tx;
    enum app_state app;
    enum cont_state cont;
    uint8_t keep_alive;        /* the request allows a persistent connection */
    uint8_t http_minor;        /* 0 or 1 */
    uint8_t is_head;           /* method HEAD */
    uint8_t raised_disconnect; /* skirr raised ClientDisconnected into the app (not logged) */
    uint8_t in_send;           /* a send() is reading its message (which may run app code) */
    uint8_t te_trailers;       /* the request's TE field lists "trailers" (RFC 9110 §10.1.4) */
    sk_resp_t resp;
    sk_access_req_t acc; /* the access log's record (sk_access.h), while the log is on */
};

static void conn_request_done(http1_conn_t *c, int keep_alive);
static void request_detach(RequestObject *r);

/* ---- state transitions ---------------------------------------------------------------------- */

static void
set_rx(RequestObject *r, enum rx_state to)
{
    assert(to > r->rx);
    r->rx = to;
}

static void
set_tx(RequestObject *r, enum tx_state to)
{
    assert(r->tx == TX_OPEN && to != TX_OPEN); /* every end of a response is final */
    r->tx = to;
    if ((r->acc.scope != NULL || r->srv->metrics != NULL) &&
        (r->resp.head_written || to == TX_COMPLETE)) {
        /* the access log and metrics: what the client saw (a 500 skirr sent for the app, if no
         * head left) */
        int status = r->resp.head_written ? r->resp.status : 500;
        /* content bytes: the app's, or those of skirr's 500 (answer_500), as for a refusal */
        uint64_t sent = r->resp.head_written ? r->resp.body_sent
                                             : sk_resp_error_content_length(500, r->is_head);
        sk_access_exchange_end(r->srv, &r->acc, status, sent);
    }
}

/* The only place active_requests changes (+1 entering STARTED, -1 leaving STARTED/RUNNING) and
 * unstarted (+1 entering STARTED, -1 leaving it). */
static void
set_app(RequestObject *r, enum app_state to)
{
    assert(to > r->app);
    enum app_state from = r->app;
    int was_running = (from == APP_STARTED || from == APP_RUNNING);
    int running = (to == APP_STARTED || to == APP_RUNNING);
    r->app = to;
    if (running && !was_running) {
        r->srv->active_requests++;
    }
    else if (was_running && !running) {
        r->srv->active_requests--;
    }
    assert(r->srv->active_requests >= 0);
    r->srv->unstarted += (to == APP_STARTED) - (from == APP_STARTED);
    assert(r->srv->unstarted >= 0);
}

/* ---- reading and writing -------------------------------------------------------------------- */

/* Flow control for request bodies: the transport reads while the current request's unconsumed
 * body is under BODY_HIGH_WATER. The body deadline (--timeout-request-body) runs exactly while
 * skirr wants body bytes: a request whose body is still arriving and not paused by flow control.
 * `progress`: body bytes (or the head) just arrived, so it starts again. */
static void
sync_reading(http1_conn_t *c, int progress)
{
    RequestObject *r = c->current;
    int paused = (r != NULL && r->body_buffered >= BODY_HIGH_WATER);
    sk_transport_pause_reading(c->t, paused);
    int wants_body = (r != NULL && r->rx == RX_BODY && !paused && c->srv->body_timeout > 0);
    int kind = sk_transport_deadline_kind(c->t);
    if (wants_body && (progress || kind != DL_BODY)) {
        sk_transport_set_deadline(c->t, DL_BODY, c->srv->body_timeout);
    }
    else if (!wants_body && kind == DL_BODY) {
        sk_transport_clear_deadline(c->t);
    }
}

/* The write-timing policy of HTTP/1.1, in one place. Output leaves at once (sk_transport_write),
 * except:
 *  - inside a pass over received bytes: the transport writes when data_received() returns, so
 *    the responses of requests answered within one pass leave in one write (but a chunk of a
 *    response in progress, `more_body`, leaves at once: sk_transport_write_now);
 *  - while a request started behind unsent responses (pipelining) has not taken its first step
 *    (a Task skirr made, not a task factory's): if it answers within that step its response
 *    joins them (one write per batch); its first step's end releases the output either way;
 *  - a final response with pipelined input behind it (send_body()): it is not written on its
 *    own, since the next request starts at once and this rule applies to it;
 *  - a final keep-alive response while requests started in this loop iteration have not taken
 *    their first step (srv->unstarted): it joins the batch (sk_transport_write_later) that the
 *    last of those steps ends (step_end: sk_reactor_flush), or at the latest the next
 *    iteration. The responses of one iteration then leave back to back, so the client is
 *    woken once for them rather than once per app step (bench/LEVERS.md, the flush list);
 *  - inside a reactor callback: what each pass wrote leaves at the callback's end, with the
 *    other connections' (sk_transport.c).
 * Called at the end of every pass and of every app step. */
static void
settle_output(http1_conn_t *c)
{
    RequestObject *r = c->current;
    /* Only behind a Task skirr made (srv->task_type): its first step is the loop's next round of
     * callbacks. A task factory's Task may take its first step at any later time, and output
     * must not wait for it longer than the batch's one iteration. */
    if (r != NULL && r->app == APP_STARTED && c->srv->task_type != NULL &&
        sk_transport_out_len(c->t) > 0 && sk_transport_is_open(c->t)) {
        sk_transport_hold(c->t);
    }
    else {
        sk_transport_release(c->t);
    }
}

/* A refusal's metrics, access-log record and trace event (why: its reason, or NULL to take it
 * from the parser or the status). The response itself is written by the caller. */
static void
note_refusal(http1_conn_t *c, int status, const char *why)
{
    if (c->srv->metrics != NULL) {
        sk_metrics_refusal(c->srv->metrics, status);
    }
    if (c->srv->access.pending != NULL || c->srv->trace != NULL) {
        socklen_t plen;
        const sk_parser_t *p = &c->parser;
        const struct sockaddr_storage *peer = sk_transport_peer(c->t, &plen);
        const char *reason = why != NULL                ? why
                             : p->dead && p->err_reason ? p->err_reason
                             : status == 408 && c->current != NULL
                                 ? "request content not complete in time"
                             : status == 408 ? "request head not complete in time"
                             : status == 503 ? "--limit-concurrency reached"
                                             : "server error";
        if (c->srv->access.pending != NULL) {
            int sent = c->current == NULL || !c->current->resp.head_written;
            uint64_t bytes =
                sent ? sk_resp_error_content_length(status, p->method == HTTP_HEAD) : 0;
            sk_access_refusal(c->srv, c->client, peer, p, status, bytes, reason);
        }
        if (c->srv->trace != NULL) {
            char event[160];
            snprintf(event, sizeof(event), "HTTP request refused: %d (%s)", status, reason);
            sk_access_trace(c->srv, c->client, peer, event);
        }
    }
}

/* The one error sink: answers status (never reaching the app) and closes after the write; why
 * as for note_refusal(). */
static void
refuse_why(http1_conn_t *c, int status, const char *why)
{
    int started = 0;
    note_refusal(c, status, why);
    if (c->current) {
        started = c->current->resp.started && c->current->resp.head_written;
        request_detach(c->current);
    }
    if (!started) {
        /* The output may still hold earlier pipelined responses: the refusal goes after them. */
        int head = (c->parser.method == HTTP_HEAD); /* valid on SK_EV_ERROR too */
        if (sk_resp_error_opts(sk_transport_out(c->t), status, head, sk_serve_date(c->srv),
                               &c->srv->resp_opts) < 0) {
            sk_transport_close(c->t, SK_CLOSE_NOW);
            return;
        }
    }
    sk_transport_close(c->t, SK_CLOSE_AFTER_WRITE);
}

static void
refuse(http1_conn_t *c, int status)
{
    refuse_why(c, status, NULL);
}

/* Whether skirr closes the connection after r's response whatever the response says: during a
 * graceful shutdown, when the client may still wait for a 100 Continue that never came (RFC 9110
 * §10.1.1), or when more than DISCARD_MAX bytes of request content (or an unknown amount: the
 * rest of a chunked body) would have to be read and dropped. The one place persistence is decided on skirr's side (RFC 9112 §9.6: a server that
 * will close says so in the response, so the head is built with it: send_body). */
static int
server_closes_after(http1_conn_t *c, RequestObject *r)
{
    const sk_serve_t *srv = c->srv;
    if (srv->shutting_down || c->closed ||
        (srv->max_requests != 0 && srv->total_requests >= srv->max_requests)) {
        return 1;
    }
    if (r->rx != RX_BODY) {
        return 0;
    }
    if (r->cont == CONT_EXPECTED) {
        return 1;
    }
    const sk_parser_t *p = &c->parser;
    if (!p->has_content_length) {
        return 1; /* chunked: how much is left is unknown, so it is never read to be dropped */
    }
    return p->content_length - p->body_received > DISCARD_MAX;
}

/* The app failed mid-response: close without the message ever looking complete. */
static void
abort_response(http1_conn_t *c, RequestObject *r)
{
    /* A close-delimited body would look complete after a FIN: reset instead. */
    sk_transport_abort(c->t, r->resp.head_written && r->resp.framing == SK_FRAME_CLOSE);
}

/* Answers r with 500 (RFC 9110 §15.6.1) and closes after it: nothing of the app's response was
 * written. */
static void
answer_500(http1_conn_t *c, RequestObject *r)
{
    if (sk_resp_error_opts(sk_transport_out(c->t), 500, r->is_head, sk_serve_date(c->srv),
                           &c->srv->resp_opts) < 0) {
        sk_transport_close(c->t, SK_CLOSE_NOW);
        return;
    }
    set_tx(r, TX_COMPLETE);
    conn_request_done(c, 0);
}

/* ---- scope ---------------------------------------------------------------------------------- */

/* The response extensions skirr implements (ASGI www 2.5 extensions), in scope order. Early
 * hints and trailers need HTTP/1.1 (RFC 8297 §2: no 1xx to HTTP/1.0; a trailer section needs
 * chunked), so an HTTP/1.0 request is offered only the first two, the file extensions. */
#define EXT_COUNT(http_minor) ((http_minor) >= 1 ? 4 : 2)

static inline PyObject *
ext_name(sk_state *st, size_t i)
{
    /* Borrowed reference: the i-th extension's name (i < 4). */
    PyObject *names[] = {st->s_http_response_pathsend, st->s_http_response_zerocopysend,
                         st->s_http_response_trailers, st->s_http_response_early_hint};
    return names[i];
}

static PyObject *
ext_pop(sk_ext_ring_t *r)
{
    /* New reference (the ring's, moved): the oldest dict in r, taken out; r is not empty. */
    PyObject *ext = r->item[r->head];
    r->item[r->head] = NULL;
    r->head = (r->head + 1) % SK_EXT_RING;
    r->n--;
    return ext;
}

static void
ext_push(sk_ext_ring_t *r, PyObject *ext)
{
    /* Puts ext (the reference moves) last in r; r is not full. */
    r->item[(r->head + r->n) % SK_EXT_RING] = ext;
    r->n++;
}

static int
ext_as_made(sk_state *st, PyObject *ext, uint8_t http_minor, int alone)
{
    /* 1 when ext, a scope["extensions"] ext_scope made, holds exactly the names it was made
     * with, in order, each an exact empty dict, so it reads as a new one would; with `alone`,
     * also when ext is referenced by the caller alone and each value by ext alone, so no one
     * can reach it or anything in it: then handing it to the next request is
     * indistinguishable from making a new one. Else 0. */
    Py_ssize_t pos = 0;
    size_t i = 0;
    PyObject *name, *value;
    int ok = (!alone || Py_REFCNT(ext) == 1) && PyDict_GET_SIZE(ext) == EXT_COUNT(http_minor);
    while (ok && PyDict_Next(ext, &pos, &name, &value)) {
        ok = name == ext_name(st, i++) && PyDict_CheckExact(value) &&
             (!alone || Py_REFCNT(value) == 1) && PyDict_GET_SIZE(value) == 0;
    }
    return ok;
}

static PyObject *
ext_scope(sk_serve_t *srv, uint8_t http_minor)
{
    /* New reference: scope["extensions"], each extension's value {}. The oldest dict of a
     * finished request (ext_recycle) when the ring alone holds it and it is as made
     * (ext_as_made); when the oldest is still held (an access-log record not yet written, an
     * app that kept it) it goes to the back of the line once and the next is tried; else a new
     * one. Releases nothing, so no finalizer runs while a scope is built. NULL with an
     * exception. */
    sk_ext_ring_t *r = &srv->ext_ring[http_minor >= 1];
    for (int tries = 0; tries < 2 && r->n > 0; tries++) {
        PyObject *oldest = r->item[r->head];
        if (Py_REFCNT(oldest) == 1) {
            if (!ext_as_made(srv->st, oldest, http_minor, 1)) {
                break; /* written to or kept from after it was put in line: ext_recycle drops it */
            }
            srv->ext_reused++;
            return ext_pop(r);
        }
        if (tries > 0 || r->n == 1) {
            break;
        }
        ext_push(r, ext_pop(r)); /* held: to the back of the line (once per call) */
    }
    PyObject *ext = PyDict_New();
    if (ext == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < EXT_COUNT(http_minor); i++) {
        PyObject *empty = PyDict_New();
        if (empty == NULL || PyDict_SetItem(ext, ext_name(srv->st, i), empty) < 0) {
            Py_XDECREF(empty);
            Py_DECREF(ext);
            return NULL;
        }
        Py_DECREF(empty);
    }
    return ext;
}

static void
ext_recycle(sk_serve_t *srv, PyObject *ext, uint8_t http_minor)
{
    /* Takes ext (a strong reference, or NULL) from a request that is being freed. Released now
     * when it no longer reads as made (an app wrote into it), else put last in the ring, after
     * releasing the oldest dicts that are free but no longer as made and, when full, the
     * oldest of all. Whether it is handed out again is decided when it is the oldest
     * (ext_scope): an app that kept the dict, one of its values or the scope never shares it
     * with a later request. Releasing may run code (a finalizer an app stored in a dict); the
     * ring is consistent around every release. */
    if (ext == NULL) {
        return;
    }
    if (!ext_as_made(srv->st, ext, http_minor, 0)) {
        Py_DECREF(ext);
        return;
    }
    sk_ext_ring_t *r = &srv->ext_ring[http_minor >= 1];
    while (r->n > 0 &&
           (r->n == SK_EXT_RING || (Py_REFCNT(r->item[r->head]) == 1 &&
                                    !ext_as_made(srv->st, r->item[r->head], http_minor, 1)))) {
        Py_DECREF(ext_pop(r)); /* re-checked after: the release may have pushed others */
    }
    ext_push(r, ext);
}

void
sk_http1_ext_clear(sk_serve_t *srv)
{
    /* Releases every dict the rings hold (the owner's tp_clear). */
    for (int v = 0; v < 2; v++) {
        while (srv->ext_ring[v].n > 0) {
            Py_DECREF(ext_pop(&srv->ext_ring[v]));
        }
    }
}

static PyObject *
build_scope(http1_conn_t *c, PyObject **ext_out)
{
    /* New reference: the request's scope dict; NULL with an exception. With ext_out, it also
     * receives a new reference to scope["extensions"] (for ext_recycle). */
    sk_serve_t *srv = c->srv;
    sk_state *st = srv->st;
    sk_parser_t *p = &c->parser;
    PyObject *scope = NULL, *v = NULL, *ext = NULL;
    const char *t = sk_parser_ptr(p, p->target);
    size_t tlen = p->target.len;
    if (t == NULL) { /* no head block: never for a parsed request, but keep t valid */
        t = "";
        tlen = 0;
    }

    scope = PyDict_Copy(st->scope_proto);
    if (scope == NULL) {
        goto error;
    }
#define SET(key, expr)                                        \
    do {                                                      \
        v = (expr);                                           \
        if (v == NULL || PyDict_SetItem(scope, (key), v) < 0) \
            goto error;                                       \
        Py_CLEAR(v);                                          \
    } while (0)

    SET(st->s_asgi, PyDict_Copy(st->asgi_proto));
    if (p->http_minor == 0) {
        SET(st->s_http_version, Py_NewRef(st->s_1_0));
    }
    if (p->method < SK_METHOD_CACHE && st->methods[p->method] != NULL) {
        SET(st->s_method, Py_NewRef(st->methods[p->method]));
    }
    else {
        SET(st->s_method, PyUnicode_FromString(sk_parser_method_name(p)));
    }
    /* absolute-form (RFC 9112 §3.2.2): path and query come from the URL; "/" when empty. */
    const char *authority = NULL;
    size_t authority_len = 0;
    if (tlen > 0 && t[0] != '/' && t[0] != '*') {
        const char *sep = NULL;
        for (size_t i = 0; i + 2 < tlen; i++) {
            if (t[i] == ':' && t[i + 1] == '/' && t[i + 2] == '/') {
                sep = t + i + 3;
                break;
            }
        }
        if (sep != NULL) {
            const char *end = t + tlen;
            const char *ps = sep;
            while (ps < end && *ps != '/' && *ps != '?') {
                ps++;
            }
            authority = sep;
            authority_len = (size_t)(ps - sep);
            tlen = (size_t)(end - ps);
            t = ps;
        }
    }
    const char *q = tlen > 0 ? memchr(t, '?', tlen) : NULL;
    size_t plen = q ? (size_t)(q - t) : tlen;
    const char *path_p = t;
    static const char slash[] = "/";
    if (plen == 0 && (tlen == 0 || t[0] == '?')) {
        path_p = slash;
        plen = sizeof(slash) - 1;
    }
    SET(st->s_path, sk_asgi_path(srv->root_path, path_p, plen));
    Py_ssize_t rlen = PyBytes_GET_SIZE(srv->root_path_b);
    if (rlen == 0) {
        SET(st->s_raw_path, PyBytes_FromStringAndSize(path_p, (Py_ssize_t)plen));
    }
    else {
        v = PyBytes_FromStringAndSize(NULL, rlen + (Py_ssize_t)plen);
        if (v == NULL) {
            goto error;
        }
        memcpy(PyBytes_AS_STRING(v), PyBytes_AS_STRING(srv->root_path_b), (size_t)rlen);
        memcpy(PyBytes_AS_STRING(v) + rlen, path_p, plen);
        if (PyDict_SetItem(scope, st->s_raw_path, v) < 0) {
            goto error;
        }
        Py_CLEAR(v);
    }
    if (q != NULL) {
        SET(st->s_query_string, PyBytes_FromStringAndSize(q + 1, (Py_ssize_t)(t + tlen - q - 1)));
    }
    else {
        SET(st->s_query_string, Py_NewRef(st->empty_bytes));
    }
    SET(st->s_root_path, Py_NewRef(srv->root_path));
    SET(st->s_headers, sk_asgi_headers(p, authority, authority_len));
    if (c->client == NULL) {
        socklen_t plen_unused;
        const struct sockaddr_storage *peer = sk_transport_peer(c->t, &plen_unused);
        c->client = (srv->unix_path != Py_None) ? Py_NewRef(Py_None) : sk_asgi_address(peer);
        if (c->client == NULL) {
            goto error;
        }
    }
    if (srv->proxy.enabled) {
        /* --proxy-headers: a trusted peer's Forwarded / X-Forwarded-* (sk_proxy.h) */
        socklen_t plen_unused;
        PyObject *client = c->client;
        int https = -1;
        if (sk_proxy_apply(&srv->proxy, p, sk_transport_peer(c->t, &plen_unused),
                           srv->unix_path != Py_None, &client, &https) < 0) {
            goto error;
        }
        if (https >= 0) {
            SET(st->s_scheme, PyUnicode_FromString(https ? "https" : "http"));
        }
        SET(st->s_client, client == c->client ? Py_NewRef(client) : client);
    }
    else {
        SET(st->s_client, Py_NewRef(c->client));
    }
    if (c->local == NULL) {
        struct sockaddr_storage ss;
        if (srv->unix_path != Py_None) {
            c->local = PyTuple_Pack(2, srv->unix_path, Py_None);
        }
        else if (sk_transport_local(c->t, &ss) == 0) {
            c->local = sk_asgi_address(&ss);
        }
        else {
            c->local = Py_NewRef(Py_None);
        }
        if (c->local == NULL) {
            goto error;
        }
    }
    SET(st->s_server, Py_NewRef(c->local));
    ext = ext_scope(srv, p->http_minor); /* kept to the end: ext_out's */
    if (ext == NULL || PyDict_SetItem(scope, st->s_extensions, ext) < 0) {
        goto error;
    }
    if (srv->state != Py_None) {
        SET(st->s_state, PyDict_Check(srv->state)
                             ? PyDict_Copy(srv->state)
                             : PyObject_CallMethodNoArgs(srv->state, st->s_copy));
    }
#undef SET
    if (ext_out != NULL) {
        *ext_out = ext; /* the reference moves */
    }
    else {
        Py_DECREF(ext);
    }
    return scope;
error:
    Py_XDECREF(v);
    Py_XDECREF(ext);
    Py_XDECREF(scope);
    return NULL;
}

/* ---- request helpers ------------------------------------------------------------------------ */

static PyObject *
ready(RequestObject *r, PyObject *value)
{
    /* New reference: an awaitable returning value (stolen; NULL = None). After FAIRNESS_QUOTA
     * ready operations of this request it yields to the loop once first. */
    if (++r->ops >= FAIRNESS_QUOTA) {
        r->ops = 0;
        return sk_ready_new(r->st, value, 1);
    }
    if (value == NULL) {
        return Py_NewRef(r->st->send_done);
    }
    return sk_ready_new(r->st, value, 0);
}

static PyObject *
raise_disconnected(RequestObject *r)
{
    /* Always NULL with skirr.ClientDisconnected set. */
    r->raised_disconnect = 1;
    PyErr_SetString(r->st->ClientDisconnected, "client disconnected");
    return NULL;
}

static PyObject *
add_waiter(RequestObject *r, PyObject **list)
{
    /* New reference: a new future of the loop appended to *list (sk_asgi_add_waiter). */
    return sk_asgi_add_waiter(r->st, r->srv->loop, list);
}

static PyObject *
sent_or_wait(RequestObject *r)
{
    /* New reference: what a send() that wrote and may be repeated returns (a body chunk with
     * more_body, an early hint): a waiter while the unsent output is at or over
     * SK_OUTPUT_HIGH_WATER or a file range is being sent (one at a time; the transport's
     * writable() entry resolves it), else a completed awaitable; NULL with an exception. Rule
     * skirr-flow-every-send-waits: a client that reads nothing cannot make the app queue
     * without bound. */
    sk_transport_t *t = r->conn->t;
    if (sk_transport_out_len(t) >= SK_OUTPUT_HIGH_WATER || sk_transport_file_pending(t)) {
        return add_waiter(r, &r->drain_waiters); /* each sender waits: one list for all */
    }
    return ready(r, NULL);
}

/* Every waiter of a request that will get no more events: receive() gets http.disconnect (or
 * what is left of the body), send() waiting for drain completes (the response is complete) or
 * raises ClientDisconnected (it is not). */
static void wake_receivers(RequestObject *r);

static void
release_waiters(RequestObject *r)
{
    wake_receivers(r);
    if (r->drain_waiters != NULL) {
        int ok = (r->tx == TX_COMPLETE);
        if (!ok) {
            r->raised_disconnect = 1;
        }
        sk_asgi_resolve_all(r->st, &r->drain_waiters, Py_None,
                            ok ? NULL : r->st->ClientDisconnected);
    }
}

/* ---- receive -------------------------------------------------------------------------------- */

static int
next_message(RequestObject *r, PyObject **out)
{
    /* The next receive() event if one is ready: 1 (new reference in *out), 0 (none yet), -1
     * (exception set). */
    sk_state *st = r->st;
    PyObject *msg = NULL, *data = NULL;
    *out = NULL;
    /* ASGI www 2.5 "Disconnect - receive event": after the response was sent, http.disconnect,
     * even with content the app never read (skirr reads and drops it, or closes). */
    if ((r->body_buffered > 0 || r->rx == RX_COMPLETE) && r->tx != TX_COMPLETE) {
        Py_ssize_t n = r->body ? PyList_GET_SIZE(r->body) : 0;
        if (n == 0) {
            data = Py_NewRef(st->empty_bytes);
        }
        else if (n == 1) {
            data = Py_NewRef(PyList_GET_ITEM(r->body, 0));
        }
        else {
            data = PyObject_CallMethod(st->empty_bytes, "join", "O", r->body);
        }
        if (data == NULL || (r->body && PyList_SetSlice(r->body, 0, n, NULL) < 0)) {
            goto error;
        }
        r->body_buffered = 0;
        int more = (r->rx == RX_BODY);
        msg = PyDict_New();
        if (msg == NULL || PyDict_SetItem(msg, st->s_type, st->s_http_request) < 0 ||
            PyDict_SetItem(msg, st->s_body, data) < 0 ||
            PyDict_SetItem(msg, st->s_more_body, more ? Py_True : Py_False) < 0) {
            goto error;
        }
        if (!more) {
            set_rx(r, RX_DELIVERED);
        }
        Py_DECREF(data);
        if (r->conn != NULL) {
            /* flow control: the body was consumed, so read and parse more */
            sync_reading(r->conn, 0);
            if (sk_transport_in_len(r->conn->t) > 0) {
                sk_transport_feed_soon(r->conn->t);
            }
        }
        *out = msg;
        return 1;
    }
    if (r->tx != TX_OPEN || r->conn == NULL) {
        msg = PyDict_Copy(st->disconnect_msg);
        if (msg == NULL) {
            return -1;
        }
        *out = msg;
        return 1;
    }
    return 0;
error:
    Py_XDECREF(data);
    Py_XDECREF(msg);
    return -1;
}

static int
next_message_of(void *r, PyObject **out)
{
    return next_message((RequestObject *)r, out);
}

static void
wake_receivers(RequestObject *r)
{
    /* Hands the events that are ready to the waiting receive() calls, first come first served;
     * once the exchange is over every waiter gets http.disconnect (sk_asgi_wake_receivers). */
    sk_asgi_wake_receivers(r->st, &r->receive_waiters, next_message_of, r);
}

static PyObject *
request_receive(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference: an awaitable for the next event (ASGI www 2.5 http.request /
     * http.disconnect); NULL with an exception. Concurrent receive() calls are served in the
     * order they were made. */
    RequestObject *r = (RequestObject *)op;
    PyObject *msg = NULL;
    if (r->receive_waiters == NULL || PyList_GET_SIZE(r->receive_waiters) == 0) {
        int rc = next_message(r, &msg);
        if (rc != 0) {
            return rc > 0 ? ready(r, msg) : NULL;
        }
    }
    http1_conn_t *c = r->conn;
    if (r->cont == CONT_EXPECTED && !r->resp.head_written && c != NULL) {
        /* RFC 9110 §10.1.1: the app wants the content, so ask the client for it. */
        r->cont = CONT_SENT;
        if (sk_buf_append(sk_transport_out(c->t), SK_CONTINUE_RESPONSE, SK_CONTINUE_RESPONSE_LEN) <
            0) {
            return PyErr_NoMemory();
        }
        (void)sk_transport_write(c->t);
        if (r->conn == NULL) { /* the write found the peer gone */
            return ready(r, PyDict_Copy(r->st->disconnect_msg));
        }
    }
    return add_waiter(r, &r->receive_waiters);
}

/* ---- send ----------------------------------------------------------------------------------- */

static int
fields_from(PyObject *headers, sk_header_t *stack, size_t nstack, sk_header_t **out,
            PyObject **keep_out, Py_ssize_t *n_out)
{
    /* ASGI `headers` (an iterable of [name, value] bytes pairs) as serializer fields: *out is
     * `stack` or, for more than nstack, a PyMem array the caller frees when it is not `stack`;
     * *keep_out (new reference, also on failure when made) keeps every name and value alive.
     * Snapshots (tuples) of the list and of each pair: converting a pair may run the app's code
     * (__iter__), which must not be able to free a name or value already taken. 0, or -1 with
     * TypeError. */
    PyObject *seq = PySequence_Tuple(headers);
    int rc = -1;
    if (seq == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_SetString(PyExc_TypeError,
                            "ASGI 'headers' must be an iterable of [name, value] pairs");
        }
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    sk_header_t *hdrs = stack;
    *keep_out = PyTuple_New(n);
    if (*keep_out == NULL) {
        goto done;
    }
    if (n > (Py_ssize_t)nstack) {
        hdrs = PyMem_Malloc((size_t)n * sizeof(sk_header_t));
        if (hdrs == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        *out = hdrs;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Tuple(PyTuple_GET_ITEM(seq, i));
        if (pair == NULL) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_SetString(PyExc_TypeError, "each ASGI header must be a [name, value] pair");
            }
            goto done;
        }
        PyTuple_SET_ITEM(*keep_out, i, pair); /* keep owns it: alive until the head is built */
        if (PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "each ASGI header must be a [name, value] pair");
            goto done;
        }
        PyObject *name = PyTuple_GET_ITEM(pair, 0);  /* borrowed from pair */
        PyObject *value = PyTuple_GET_ITEM(pair, 1); /* borrowed from pair */
        if (!PyBytes_Check(name) || !PyBytes_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "ASGI header names and values must be bytes");
            goto done;
        }
        hdrs[i].name = PyBytes_AS_STRING(name);
        hdrs[i].name_len = (size_t)PyBytes_GET_SIZE(name);
        hdrs[i].value = PyBytes_AS_STRING(value);
        hdrs[i].value_len = (size_t)PyBytes_GET_SIZE(value);
    }
    *n_out = n;
    rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

static int start_trailers(RequestObject *r, PyObject *msg, int *trailers);

static PyObject *
send_start(RequestObject *r, PyObject *msg)
{
    /* New reference to the completion awaitable, or NULL with an exception. */
    sk_header_t stack_hdrs[32];
    sk_header_t *hdrs = stack_hdrs;
    PyObject *status_o = NULL, *headers = NULL, *keep = NULL, *res = NULL;
    if (r->resp.started) {
        PyErr_SetString(
            PyExc_RuntimeError,
            "Unexpected ASGI message 'http.response.start' sent, after response already started.");
        goto error;
    }
    if (r->conn == NULL || r->tx == TX_GONE) {
        raise_disconnected(r);
        goto error;
    }
    int rc = sk_asgi_msg_get(msg, r->st->s_status, &status_o);
    if (rc <= 0) {
        if (rc == 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "'http.response.start' message is missing 'status'");
        }
        goto error;
    }
    if (!PyLong_Check(status_o)) {
        PyErr_Format(PyExc_TypeError, "ASGI 'status' must be an int, not %.100s",
                     Py_TYPE(status_o)->tp_name);
        goto error;
    }
    int overflow = 0;
    long status = PyLong_AsLongAndOverflow(status_o, &overflow);
    if (status == -1 && PyErr_Occurred()) {
        goto error;
    }
    if (overflow || status < 200 || status > 599) {
        /* http.response.start carries the final response (ASGI www 2.5): a 1xx would leave the
         * client waiting for a final response that never comes. */
        PyErr_Format(PyExc_RuntimeError, "ASGI 'status' must be in 200..599, got %S", status_o);
        goto error;
    }
    if (sk_asgi_msg_get(msg, r->st->s_headers, &headers) < 0) {
        goto error;
    }
    Py_ssize_t n = 0;
    if (headers != NULL &&
        fields_from(headers, stack_hdrs, sizeof(stack_hdrs) / sizeof(stack_hdrs[0]), &hdrs, &keep,
                    &n) < 0) {
        goto error;
    }
    if (r->conn == NULL) { /* the conversions above ran Python code, which may have closed it */
        raise_disconnected(r);
        goto error;
    }
    int trailers = 0;
    if (start_trailers(r, msg, &trailers) < 0) {
        goto error;
    }
    sk_req_info_t info = {
        .http_minor = r->http_minor,
        .head = r->is_head,
        .keep_alive = r->keep_alive,
        .force_close = server_closes_after(r->conn, r), /* again when the head is built */
        .opts = &r->srv->resp_opts,
        .te_trailers = r->te_trailers,
    };
    rc = sk_resp_start(&r->resp, &info, (int)status, hdrs, (size_t)n);
    if (rc == 0 && trailers) {
        rc = sk_resp_announce_trailers(&r->resp);
    }
    if (rc < 0) {
        if (rc == SK_ENOMEM) {
            PyErr_NoMemory();
        }
        else {
            PyErr_SetString(PyExc_RuntimeError, sk_strerror(rc));
        }
        goto error;
    }
    if (r->acc.scope != NULL && headers != NULL) {
        Py_XSETREF(r->acc.resp_headers, Py_NewRef(headers)); /* %({name}o)s of the access log */
    }
    res = ready(r, NULL);
    goto done;
error:
    res = NULL;
done:
    if (hdrs != stack_hdrs) {
        PyMem_Free(hdrs);
    }
    Py_XDECREF(status_o);
    Py_XDECREF(headers);
    Py_XDECREF(keep);
    return res;
}

/* The response cannot be completed: a clean 500 if nothing of it was written, else an abort
 * (never a message that looks complete). */
static void
fail_response(RequestObject *r, http1_conn_t *c)
{
    if (r->resp.head_written) {
        set_tx(r, TX_FAILED);
        abort_response(c, r); /* the message must never look complete */
    }
    else {
        answer_500(c, r); /* nothing of it was written: the client gets a clean 500 */
    }
}

/* A body (or file) event the serializer refused: rc is its SK_E* code; a length mismatch fails
 * the response. Always sets the exception send() raises. */
static void
body_refused(RequestObject *r, http1_conn_t *c, int rc)
{
    if (rc == SK_ETOOLONG || rc == SK_ETOOSHORT) {
        fail_response(r, c);
        PyErr_SetString(PyExc_RuntimeError, rc == SK_ETOOLONG
                                                ? "Response content longer than Content-Length"
                                                : "Response content shorter than Content-Length");
    }
    else if (rc == SK_ENOMEM) {
        PyErr_NoMemory();
    }
    else {
        PyErr_SetString(PyExc_RuntimeError, sk_strerror(rc));
    }
}

/* 0 if a body-like event of `type` may be sent now, else -1 with the exception send() raises. */
static int
body_allowed(RequestObject *r, const char *type)
{
    if (!r->resp.started) {
        PyErr_Format(PyExc_RuntimeError,
                     "Unexpected ASGI message '%s' sent, before 'http.response.start'.", type);
        return -1;
    }
    if (r->tx == TX_COMPLETE || r->tx == TX_FAILED) {
        PyErr_Format(PyExc_RuntimeError,
                     "Unexpected ASGI message '%s' sent, after response already completed.", type);
        return -1;
    }
    if (r->conn == NULL || r->tx == TX_GONE) {
        raise_disconnected(r);
        return -1;
    }
    return 0;
}

static PyObject *
response_queued(RequestObject *r, http1_conn_t *c, int more)
{
    /* New reference: the completion awaitable of a send() whose bytes were just queued (more = 0:
     * they complete the response); NULL with ClientDisconnected. Writes them, finishes the
     * exchange when complete, and applies backpressure otherwise. */
    if (!more) {
        set_tx(r, TX_COMPLETE);
    }
    /* settle_output(): a final response with pipelined input behind it is not written alone;
     * one that requests started and not yet stepped will follow within this loop iteration
     * leaves with theirs. */
    int follow = !more && r->resp.keep_alive && sk_transport_in_len(c->t) > 0;
    if (!follow) {
        int batch = !more && r->resp.keep_alive && r->srv->unstarted > 0;
        /* A chunk of a response in progress leaves now, even from inside a pass (an eager first
         * step, 3.12+): nothing can join it, and the app's next chunk may be far off. */
        int rc = batch  ? sk_transport_write_later(c->t)
                 : more ? sk_transport_write_now(c->t)
                        : sk_transport_write(c->t);
        if (rc < 0 || r->conn == NULL) {
            return raise_disconnected(r);
        }
    }
    if (!more) {
        conn_request_done(c, r->resp.keep_alive);
        release_waiters(r); /* receive() sees http.disconnect; senders waiting for drain go on */
        return ready(r, NULL);
    }
    return sent_or_wait(r);
}

static int
body_by_ref(RequestObject *r, http1_conn_t *c, PyObject *body)
{
    /* The final body `body` (an exact bytes object, so immutable) of a response to anything
     * but HEAD (whose framing sk_resp_body_ref would take for a file's): its framing goes to the
     * output and its bytes are queued by reference (sk_transport_send_bytes), to leave with the
     * head in one sendmsg(2); appended as any body when the transport takes no range now (one is
     * queued, or it is closing). 0, or the serializer's SK_E* code with nothing appended (as
     * sk_resp_body's), or SK_ENOMEM once the framing is out (the response is failed here: it
     * must never look complete). */
    char after[SK_RESP_AFTER_MAX];
    size_t alen = 0;
    size_t len = (size_t)PyBytes_GET_SIZE(body);
    int rc = sk_resp_body_ref(&r->resp, sk_transport_out(c->t), len, 0, sk_serve_date(r->srv),
                              after, &alen);
    if (rc < 0) {
        return rc;
    }
    if (r->resp.framing != SK_FRAME_NONE && sk_transport_send_bytes(c->t, body) < 0) {
        rc = sk_buf_append(sk_transport_out(c->t), PyBytes_AS_STRING(body), len);
    }
    if (rc == 0 && alen > 0) {
        rc = sk_buf_append(sk_transport_out(c->t), after, alen);
    }
    if (rc < 0) {
        fail_response(r, c);
    }
    return rc;
}

static PyObject *
send_body(RequestObject *r, PyObject *msg)
{
    /* New reference to the completion awaitable (a Future while draining), or NULL with an
     * exception. */
    PyObject *body = NULL, *more_o = NULL, *res = NULL;
    Py_buffer view = {0};
    int have_view = 0;
    if (body_allowed(r, "http.response.body") < 0) {
        goto error;
    }
    if (sk_asgi_msg_get(msg, r->st->s_body, &body) < 0) {
        goto error;
    }
    if (body != NULL) {
        if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Format(PyExc_TypeError, "ASGI 'body' must be bytes, not %.100s",
                         Py_TYPE(body)->tp_name);
            goto error;
        }
        have_view = 1;
    }
    if (sk_asgi_msg_get(msg, r->st->s_more_body, &more_o) < 0) {
        goto error;
    }
    int more = more_o ? PyObject_IsTrue(more_o) : 0;
    if (more < 0) {
        goto error;
    }
    http1_conn_t *c = r->conn;
    if (c == NULL) { /* the conversions above ran Python code, which may have closed it */
        raise_disconnected(r);
        goto error;
    }
    if (!r->resp.head_written) {
        r->resp.req.force_close = server_closes_after(c, r); /* announced: RFC 9112 §9.6 */
    }
    int rc;
    if (have_view && !more && view.len >= BODY_BY_REF_MIN && PyBytes_CheckExact(body) &&
        !r->is_head) {
        rc = body_by_ref(r, c, body);
    }
    else {
        rc = sk_resp_body(&r->resp, sk_transport_out(c->t), have_view ? view.buf : "",
                          have_view ? (size_t)view.len : 0, more, sk_serve_date(r->srv));
    }
    if (rc < 0) {
        body_refused(r, c, rc);
        goto error;
    }
    /* the final body completes the response, unless trailers were announced (they do) */
    res = response_queued(r, c, more || r->resp.trailers);
    goto done;
error:
    res = NULL;
done:
    if (have_view) {
        PyBuffer_Release(&view);
    }
    Py_XDECREF(body);
    Py_XDECREF(more_o);
    return res;
}

/* ---- send: the response extensions (ASGI www 2.5 extensions) ------------------------------- */

static int
start_trailers(RequestObject *r, PyObject *msg, int *trailers)
{
    /* http.response.start's `trailers` (default False) into *trailers. 0, or -1 with an
     * exception. */
    PyObject *v = NULL;
    int rc = sk_asgi_msg_get(msg, r->st->s_trailers, &v);
    *trailers = 0;
    if (rc <= 0) {
        return rc;
    }
    *trailers = PyObject_IsTrue(v);
    Py_DECREF(v);
    return *trailers < 0 ? -1 : 0;
}

static int
msg_offset(PyObject *msg, PyObject *key, const char *what, uint64_t *out)
{
    /* An optional non-negative int of a message: 1 (*out set), 0 (absent or None), -1 with
     * TypeError/ValueError. */
    PyObject *v = NULL;
    int rc = sk_asgi_msg_get(msg, key, &v);
    if (rc <= 0) {
        return rc;
    }
    if (v == Py_None) {
        Py_DECREF(v);
        return 0;
    }
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "ASGI '%s' must be an int, not %.100s", what,
                     Py_TYPE(v)->tp_name);
        Py_DECREF(v);
        return -1;
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "ASGI '%s' must be a non-negative int (bytes)", what);
        return -1;
    }
    *out = (uint64_t)u;
    return 1;
}

/* File systems whose files' stat size is not their length (procfs and debugfs report 0 for a file
 * with content, sysfs 4096 for a few bytes): what a file response sends from them would be empty
 * or cut short. statfs(2) f_type values, <linux/magic.h>. */
static const unsigned long PSEUDO_FS[] = {
    PROC_SUPER_MAGIC, SYSFS_MAGIC,    DEBUGFS_MAGIC,      TRACEFS_MAGIC,       SECURITYFS_MAGIC,
    SELINUX_MAGIC,    SMACK_MAGIC,    CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, BPF_FS_MAGIC,
    PSTOREFS_MAGIC,   EFIVARFS_MAGIC, BINFMTFS_MAGIC,
};

static int
on_pseudo_fs(int fd)
{
    /* 1 if the file open on `fd` lives on one of PSEUDO_FS, else 0 (also when fstatfs fails:
     * the size check and sendfile(2) still judge it). */
    struct statfs fs;
    if (fstatfs(fd, &fs) < 0) {
        return 0;
    }
    for (size_t i = 0; i < sizeof(PSEUDO_FS) / sizeof(PSEUDO_FS[0]); i++) {
        if ((unsigned long)fs.f_type == PSEUDO_FS[i]) {
            return 1;
        }
    }
    return 0;
}

static int
file_from_message(RequestObject *r, PyObject *msg, int by_path, int *fd, uint64_t *off,
                  uint64_t *count)
{
    /* Opens what a pathsend (by_path) or zerocopysend message names: *fd a new descriptor of
     * ours (O_CLOEXEC, blocking) on a regular file, *off and *count the range to send (bytes;
     * zerocopysend without `offset` starts at the file's position and moves it past the range,
     * as os.sendfile(offset=None) would). 0, or -1 with an exception: TypeError/ValueError for a
     * malformed message, RuntimeError naming the file for one that cannot be sent.
     * Nothing here can block the loop on what the app names: the path must be absolute (ASGI
     * extensions, Path Send: never resolved against the working directory), it is opened with
     * O_NONBLOCK (a FIFO with no writer, a tty or a device would otherwise block open(2)) and
     * O_NOCTTY, and the descriptor is judged by fstat(2) before anything reads it: only a
     * regular file, not on a pseudo file system (PSEUDO_FS), open for reading, is sent. */
    sk_state *st = r->st;
    PyObject *v = NULL, *path_b = NULL;
    const char *type = by_path ? "http.response.pathsend" : "http.response.zerocopysend";
    struct stat sb;
    int rc = sk_asgi_msg_get(msg, by_path ? st->s_path : st->s_file, &v);
    int have_off = 0, have_count = 0;
    *fd = -1;
    if (rc <= 0) {
        if (rc == 0) {
            PyErr_Format(PyExc_TypeError, "'%s' message is missing '%s'", type,
                         by_path ? "path" : "file");
        }
        goto error;
    }
    if (by_path) {
        if (!PyUnicode_FSConverter(v, &path_b)) {
            goto error;
        }
        if (PyBytes_AS_STRING(path_b)[0] != '/') {
            PyErr_Format(PyExc_RuntimeError, "%s: %R is not an absolute path", type, v);
            goto error;
        }
        *fd = open(PyBytes_AS_STRING(path_b), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (*fd < 0) {
            PyErr_Format(PyExc_RuntimeError, "%s: cannot open %R: %s", type, v, strerror(errno));
            goto error;
        }
    }
    else {
        int app_fd = PyObject_AsFileDescriptor(v); /* an int or an object with fileno() */
        if (app_fd < 0) {
            goto error;
        }
        *fd = fcntl(app_fd, F_DUPFD_CLOEXEC, 0); /* ours to close; the app keeps its own */
        if (*fd < 0) {
            PyErr_Format(PyExc_RuntimeError, "%s: file descriptor %d: %s", type, app_fd,
                         strerror(errno));
            goto error;
        }
        have_off = msg_offset(msg, st->s_offset, "offset", off);
        have_count = have_off < 0 ? -1 : msg_offset(msg, st->s_count, "count", count);
        if (have_off < 0 || have_count < 0) {
            goto error;
        }
    }
    if (fstat(*fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        PyErr_Format(PyExc_RuntimeError, "%s: %R is not a regular file", type, v);
        goto error;
    }
    if (on_pseudo_fs(*fd)) {
        PyErr_Format(PyExc_RuntimeError,
                     "%s: %R is on a pseudo file system (procfs, sysfs, ...) whose size is not "
                     "its length: read it and send http.response.body",
                     type, v);
        goto error;
    }
    int fl = fcntl(*fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & O_PATH)) {
        PyErr_Format(PyExc_RuntimeError, "%s: %R is not open for reading", type, v);
        goto error;
    }
    if (by_path && fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        /* our own descriptor on a regular file: blocking again, as sendfile(2) expects (a
         * zerocopysend descriptor shares its flags with the app's: left as the app set them) */
        PyErr_Format(PyExc_RuntimeError, "%s: %R: %s", type, v, strerror(errno));
        goto error;
    }
    if (!have_off) {
        off_t pos = by_path ? 0 : lseek(*fd, 0, SEEK_CUR);
        *off = pos > 0 ? (uint64_t)pos : 0;
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint64_t avail = *off < size ? size - *off : 0;
    if (!have_count) {
        *count = avail;
    }
    else if (*count > avail) {
        PyErr_Format(PyExc_RuntimeError,
                     "%s: %R has %llu bytes from offset %llu, fewer than the count %llu", type, v,
                     (unsigned long long)avail, (unsigned long long)*off,
                     (unsigned long long)*count);
        goto error;
    }
    if (!by_path && !have_off) {
        (void)lseek(*fd, (off_t)(*off + *count), SEEK_SET); /* shared with the app's descriptor */
    }
    Py_DECREF(v);
    Py_XDECREF(path_b);
    return 0;
error:
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    Py_XDECREF(v);
    Py_XDECREF(path_b);
    return -1;
}

static PyObject *
send_file(RequestObject *r, PyObject *msg, int by_path)
{
    /* New reference: the completion awaitable of http.response.pathsend (by_path: the whole
     * file, the final body) or http.response.zerocopysend (a range, `more_body` allowed); NULL
     * with an exception. The bytes go from the file to the socket with sendfile(2) (the
     * transport's file range): never through memory, under the same backpressure, write timeout
     * and close rules as any body. A file that cannot be sent fails the response (500 before the
     * head, else an abort) and raises RuntimeError, which the app's log shows. */
    const char *type = by_path ? "http.response.pathsend" : "http.response.zerocopysend";
    PyObject *more_o = NULL, *res = NULL;
    int fd = -1, more = 0;
    uint64_t off = 0, count = 0;
    char after[SK_RESP_AFTER_MAX];
    size_t alen = 0;
    if (body_allowed(r, type) < 0) {
        goto error;
    }
    if (!by_path) {
        if (sk_asgi_msg_get(msg, r->st->s_more_body, &more_o) < 0) {
            goto error;
        }
        more = more_o ? PyObject_IsTrue(more_o) : 0;
        if (more < 0) {
            goto error;
        }
    }
    if (file_from_message(r, msg, by_path, &fd, &off, &count) < 0) {
        if (r->conn != NULL && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
            /* the file cannot be sent: this response never completes (moved aside: failing it
             * may call the access log) */
            PyObject *typ, *val, *tb;
            PyErr_Fetch(&typ, &val, &tb);
            fail_response(r, r->conn);
            PyErr_Restore(typ, val, tb);
        }
        goto error;
    }
    http1_conn_t *c = r->conn;
    if (c == NULL || r->tx != TX_OPEN) { /* Python code ran above (fileno(), __index__) */
        raise_disconnected(r);
        goto error;
    }
    if (!r->resp.head_written) {
        r->resp.req.force_close = server_closes_after(c, r); /* announced: RFC 9112 §9.6 */
    }
    int rc = sk_resp_body_ref(&r->resp, sk_transport_out(c->t), count, more, sk_serve_date(r->srv),
                              after, &alen);
    if (rc < 0) {
        body_refused(r, c, rc);
        goto error;
    }
    if (r->resp.framing != SK_FRAME_NONE && count > 0) {
        int owned = fd; /* the transport's from here, also on failure */
        fd = -1;
        if (sk_transport_sendfile(c->t, owned, off, count) < 0) {
            fail_response(r, c);
            PyErr_Format(PyExc_RuntimeError, "%s: a file range is still being sent", type);
            goto error;
        }
    }
    if (alen > 0 && sk_buf_append(sk_transport_out(c->t), after, alen) < 0) {
        fail_response(r, c);
        PyErr_NoMemory();
        goto error;
    }
    res = response_queued(r, c, more || r->resp.trailers);
    goto done;
error:
    res = NULL;
done:
    if (fd >= 0) {
        close(fd);
    }
    Py_XDECREF(more_o);
    return res;
}

static PyObject *
send_trailers(RequestObject *r, PyObject *msg)
{
    /* New reference: the completion awaitable of http.response.trailers; NULL with an exception.
     * Sent as the chunked trailer section when the request asked for trailers (TE: trailers),
     * else dropped (RFC 9110 §6.5); a field RFC 9110 §6.5.1 keeps out of trailers fails the
     * response (RuntimeError naming it). The last one (more_trailers False) completes it. */
    sk_header_t stack_hdrs[8];
    sk_header_t *hdrs = stack_hdrs;
    PyObject *headers = NULL, *keep = NULL, *more_o = NULL, *res = NULL;
    Py_ssize_t n = 0;
    if (body_allowed(r, "http.response.trailers") < 0) {
        goto error;
    }
    if (!r->resp.trailers || !r->resp.done) {
        PyErr_SetString(PyExc_RuntimeError,
                        !r->resp.trailers
                            ? "Unexpected ASGI message 'http.response.trailers' sent, but "
                              "'http.response.start' did not say 'trailers': True."
                            : "Unexpected ASGI message 'http.response.trailers' sent, before the "
                              "final body (more_body False).");
        goto error;
    }
    if (sk_asgi_msg_get(msg, r->st->s_headers, &headers) < 0 ||
        sk_asgi_msg_get(msg, r->st->s_more_trailers, &more_o) < 0) {
        goto error;
    }
    if (headers != NULL &&
        fields_from(headers, stack_hdrs, sizeof(stack_hdrs) / sizeof(stack_hdrs[0]), &hdrs, &keep,
                    &n) < 0) {
        goto error;
    }
    int more = more_o ? PyObject_IsTrue(more_o) : 0;
    if (more < 0) {
        goto error;
    }
    http1_conn_t *c = r->conn;
    if (c == NULL || r->tx != TX_OPEN) { /* the conversions above ran Python code */
        raise_disconnected(r);
        goto error;
    }
    int rc = sk_resp_trailers(&r->resp, sk_transport_out(c->t), hdrs, (size_t)n, more);
    if (rc < 0) {
        if (rc == SK_ENOMEM) {
            PyErr_NoMemory();
            goto error;
        }
        fail_response(r, c); /* the trailer section cannot be completed as the app meant it */
        for (Py_ssize_t i = 0; rc == SK_ETRAILER && i < n; i++) {
            if (sk_resp_trailer_forbidden(hdrs[i].name, hdrs[i].name_len)) {
                PyObject *name =
                    PyUnicode_DecodeLatin1(hdrs[i].name, (Py_ssize_t)hdrs[i].name_len, NULL);
                if (name != NULL) {
                    PyErr_Format(PyExc_RuntimeError, "%s: %U", sk_strerror(rc), name);
                    Py_DECREF(name);
                }
                goto error;
            }
        }
        PyErr_SetString(PyExc_RuntimeError, sk_strerror(rc));
        goto error;
    }
    res = response_queued(r, c, more);
    goto done;
error:
    res = NULL;
done:
    if (hdrs != stack_hdrs) {
        PyMem_Free(hdrs);
    }
    Py_XDECREF(headers);
    Py_XDECREF(keep);
    Py_XDECREF(more_o);
    return res;
}

static PyObject *
send_early_hint(RequestObject *r, PyObject *msg)
{
    /* New reference: the completion awaitable of http.response.early_hint (a future while the
     * unsent output is at or over SK_OUTPUT_HIGH_WATER); NULL with an exception. Each sends
     * "103 Early Hints" with one link field per `links` item (RFC 8297), at once, before the
     * final response; to an HTTP/1.0 client nothing (RFC 8297 §2, RFC 9110 §15.2: no 1xx to
     * HTTP/1.0; the extension is not offered there). After http.response.start: RuntimeError. */
    sk_header_t stack_hdrs[8];
    sk_header_t *hdrs = stack_hdrs;
    PyObject *links = NULL, *seq = NULL, *res = NULL;
    if (r->resp.started) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Unexpected ASGI message 'http.response.early_hint' sent, after "
                        "'http.response.start'.");
        goto error;
    }
    int rc = sk_asgi_msg_get(msg, r->st->s_links, &links);
    if (rc <= 0) {
        if (rc == 0) {
            PyErr_SetString(PyExc_TypeError,
                            "'http.response.early_hint' message is missing 'links'");
        }
        goto error;
    }
    seq = PySequence_Tuple(links);
    if (seq == NULL) {
        goto error;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n > (Py_ssize_t)(sizeof(stack_hdrs) / sizeof(stack_hdrs[0]))) {
        hdrs = PyMem_Malloc((size_t)n * sizeof(sk_header_t));
        if (hdrs == NULL) {
            PyErr_NoMemory();
            goto error;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *link = PyTuple_GET_ITEM(seq, i); /* borrowed from seq */
        if (!PyBytes_Check(link)) {
            PyErr_Format(PyExc_TypeError, "ASGI 'links' items must be bytes, not %.100s",
                         Py_TYPE(link)->tp_name);
            goto error;
        }
        hdrs[i].name = "link";
        hdrs[i].name_len = sizeof("link") - 1;
        hdrs[i].value = PyBytes_AS_STRING(link);
        hdrs[i].value_len = (size_t)PyBytes_GET_SIZE(link);
    }
    http1_conn_t *c = r->conn;
    if (c == NULL || r->tx != TX_OPEN) {
        raise_disconnected(r);
        goto error;
    }
    if (r->http_minor == 0 || n == 0) {
        res = ready(r, NULL); /* nothing to send */
        goto done;
    }
    rc = sk_resp_interim(sk_transport_out(c->t), 103, hdrs, (size_t)n);
    if (rc < 0) {
        if (rc == SK_ENOMEM) {
            PyErr_NoMemory();
        }
        else {
            PyErr_Format(PyExc_RuntimeError, "'http.response.early_hint': %s", sk_strerror(rc));
        }
        goto error;
    }
    if (sk_transport_write(c->t) < 0 || r->conn == NULL) {
        raise_disconnected(r);
        goto error;
    }
    res = sent_or_wait(r);
    goto done;
error:
    res = NULL;
done:
    if (hdrs != stack_hdrs) {
        PyMem_Free(hdrs);
    }
    Py_XDECREF(links);
    Py_XDECREF(seq);
    return res;
}

static PyObject *
request_send(PyObject *op, PyObject *msg)
{
    /* New reference: an awaitable completing when the message is accepted; NULL with
     * RuntimeError/TypeError for an invalid or out-of-order message (or a send() re-entered from
     * the code of its own message), or ClientDisconnected. */
    RequestObject *r = (RequestObject *)op;
    PyObject *type = NULL;
    PyObject *res = NULL;
    if (r->in_send) {
        /* The message's own code (a __bool__, __iter__, __index__ ... run while it is read)
         * called send(): the outer send must find the state it started from. */
        PyErr_SetString(PyExc_RuntimeError, "send() called again while a send() of this request "
                                            "is still reading its message");
        return NULL;
    }
    r->in_send = 1;
    int rc = sk_asgi_msg_get(msg, r->st->s_type, &type);
    if (rc <= 0) {
        if (rc == 0) {
            PyErr_SetString(PyExc_RuntimeError, "ASGI message has no 'type'");
        }
        goto done;
    }
    if (PyUnicode_Check(type) && PyUnicode_Compare(type, r->st->s_http_response_body) == 0) {
        res = send_body(r, msg);
    }
    else if (PyUnicode_Check(type) && PyUnicode_Compare(type, r->st->s_http_response_start) == 0) {
        res = send_start(r, msg);
    }
    else if (PyUnicode_Check(type) &&
             PyUnicode_Compare(type, r->st->s_http_response_pathsend) == 0) {
        res = send_file(r, msg, 1);
    }
    else if (PyUnicode_Check(type) &&
             PyUnicode_Compare(type, r->st->s_http_response_zerocopysend) == 0) {
        res = send_file(r, msg, 0);
    }
    else if (PyUnicode_Check(type) &&
             PyUnicode_Compare(type, r->st->s_http_response_trailers) == 0) {
        res = send_trailers(r, msg);
    }
    else if (PyUnicode_Check(type) &&
             PyUnicode_Compare(type, r->st->s_http_response_early_hint) == 0) {
        res = send_early_hint(r, msg);
    }
    else if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message type %R", type);
    }

done:
    r->in_send = 0;
    Py_XDECREF(type);
    return res;
}

/* ---- the app task --------------------------------------------------------------------------- */

/* The Request object is the coroutine its asyncio.Task runs: it drives what the app call returned
 * (a coroutine through am_send, or any awaitable's __await__ iterator) and, the moment that ends,
 * finishes the exchange in the same step: no done callback, no extra loop iteration. The app's
 * own coroutine still runs inside the request's Task (asyncio.current_task() is that Task). */

static int
task_cancelling(RequestObject *r)
{
    /* 1 when someone called cancel() on the request's Task (an eager start, 3.12+, still inside
     * its first step has none yet: the current Task is asked); see sk_asgi_task_cancelling. */
    return sk_asgi_task_cancelling(r->task);
}

static void
request_finish(RequestObject *r, PyObject *exc, int cancelled)
{
    /* The app ended: returned (exc NULL), raised exc (borrowed), or was cancelled. Reports it and
     * answers what the app left unanswered: a clean 500 before the response head (RFC 9110
     * §15.6.1), an abort after it (no truncated response sent as complete). Idempotent. */
    if (r->app == APP_DONE || r->app == APP_NEW) {
        return;
    }
    set_app(r, APP_DONE);
    Py_CLEAR(r->task);
    if (exc != NULL) {
        int quiet =
            r->raised_disconnect && PyErr_GivenExceptionMatches(exc, r->st->ClientDisconnected);
        if (!quiet) {
            sk_asgi_log_error(r->st, r->srv->logger, "Exception in ASGI application", exc);
        }
    }
    else if (!cancelled && r->tx == TX_OPEN) {
        sk_asgi_log_error(r->st, r->srv->logger,
                          r->resp.started ? "ASGI callable returned without completing response."
                                          : "ASGI callable returned without starting response.",
                          NULL);
    }
    http1_conn_t *c = r->conn;
    if (c != NULL && r->tx != TX_COMPLETE) {
        if (!r->resp.head_written) {
            answer_500(c, r);
        }
        else {
            abort_response(c, r);
        }
    }
    release_waiters(r);
}

static PySendResult
request_ended(RequestObject *r, PySendResult res, PyObject **result)
{
    /* Turns the end of the app's coroutine into the end of the request's: a return or any
     * exception, BaseExceptions such as SystemExit and KeyboardInterrupt included, finishes the
     * exchange and returns None to the Task (the exception is the request's failure, reported
     * here: it never reaches the loop and never stops the server). Only cancellation finishes it
     * and propagates, so the Task ends cancelled. */
    if (res == PYGEN_NEXT) {
        return res;
    }
    Py_CLEAR(r->coro);
    if (res == PYGEN_RETURN) {
        Py_CLEAR(*result);
        request_finish(r, NULL, 0);
        *result = Py_NewRef(Py_None);
        return PYGEN_RETURN;
    }
    PyObject *typ, *val, *tb;
    PyErr_Fetch(&typ, &val, &tb);
    PyErr_NormalizeException(&typ, &val, &tb);
    if (val != NULL && tb != NULL) {
        PyException_SetTraceback(val, tb);
    }
    int cancelled = PyErr_GivenExceptionMatches(val, r->st->CancelledError);
    /* A CancelledError the app raised itself (no one called cancel() on its Task) is its
     * failure and logged; a cancelled Task's is not. */
    request_finish(r, cancelled && task_cancelling(r) ? NULL : val, cancelled);
    if (cancelled) {
        PyErr_Restore(typ, val, tb);
        *result = NULL;
        return PYGEN_ERROR;
    }
    Py_XDECREF(typ);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    *result = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

static PyMethodDef receive_def;
static PyMethodDef send_def;

static int
call_app(RequestObject *r)
{
    /* The first step: calls app(scope, receive, send) inside the request's own Task, so even its
     * synchronous part runs in the request's fresh context, never nested in another request's
     * step. r->coro becomes what to drive. 0, or -1 with an exception (the app's own). */
    PyObject *scope = r->scope; /* moved out: the app owns the scope from now on */
    PyObject *receive = NULL, *send = NULL, *ret = NULL;
    int rc = -1;
    r->scope = NULL;
    set_app(r, APP_RUNNING);
    receive = PyCFunction_New(&receive_def, (PyObject *)r);
    send = PyCFunction_New(&send_def, (PyObject *)r);
    if (scope == NULL || receive == NULL || send == NULL) {
        goto done;
    }
    PyObject *args[3] = {scope, receive, send};
    ret = PyObject_Vectorcall(r->srv->app, args, 3, NULL);
    if (ret == NULL) {
        goto done;
    }
    r->coro = sk_asgi_awaitable_iter(ret);
    if (r->coro == NULL && PyCoro_CheckExact(ret)) {
        /* not driven: close it, so no "coroutine was never awaited" warning follows */
        PyObject *typ, *val, *tb;
        PyErr_Fetch(&typ, &val, &tb);
        PyObject *cr = PyObject_CallMethodNoArgs(ret, r->st->s_close);
        Py_XDECREF(cr);
        PyErr_Restore(typ, val, tb);
    }
    rc = r->coro != NULL ? 0 : -1;
done:
    Py_XDECREF(scope);
    Py_XDECREF(receive);
    Py_XDECREF(send);
    Py_XDECREF(ret);
    return rc;
}

static void
step_end(RequestObject *r)
{
    if (r->conn != NULL) {
        settle_output(r->conn); /* the first step's end releases held output */
    }
    if (r->srv->unstarted == 0) {
        sk_reactor_flush(r->srv->reactor); /* the last request started has stepped: the batch
                                            * of responses waiting for it leaves (at the reactor
                                            * callback's end when this step ran inside it) */
    }
    /* or its first has waited --write-batch-delay: also inside a reactor callback, where 3.12+
     * starts apps eagerly */
    sk_reactor_flush_due(r->srv->reactor);
}

static PySendResult
request_am_send(PyObject *op, PyObject *arg, PyObject **result)
{
    /* am_send: one step of the app. PYGEN_NEXT with what it yielded (new reference), PYGEN_RETURN
     * with None, or PYGEN_ERROR with an exception set. */
    RequestObject *r = (RequestObject *)op;
    PySendResult res;
    *result = NULL;
    if (r->app == APP_STARTED) {
        res = call_app(r) < 0 ? PYGEN_ERROR : PyIter_Send(r->coro, arg, result);
    }
    else if (r->coro == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited request coroutine");
        return PYGEN_ERROR;
    }
    else {
        res = PyIter_Send(r->coro, arg, result);
    }
    res = request_ended(r, res, result);
    step_end(r);
    return res;
}

static PyObject *
request_send_value(PyObject *op, PyObject *arg)
{
    /* New reference: coroutine.send(value): the yielded value, or NULL with StopIteration. */
    PyObject *result = NULL;
    PySendResult res = request_am_send(op, arg, &result);
    return sk_asgi_method_result(res, result);
}

static PyObject *
request_iternext(PyObject *op)
{
    /* New reference: next(coroutine), as send(None). */
    return request_send_value(op, Py_None);
}

static PyObject *
request_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    /* New reference: coroutine.throw(...) passed on to the app (Task.cancel() comes this way);
     * the yielded value, or NULL with StopIteration or the exception the app let out. */
    RequestObject *r = (RequestObject *)op;
    PyObject *result = NULL;
    PySendResult res;
    if (r->coro == NULL) {
        sk_asgi_raise_thrown(args, nargs);
        if (r->app != APP_STARTED) {
            return NULL;
        }
        /* thrown in before the first step (a Task cancelled before it ran): the app is never
         * called, and the exchange ends as for an app that raised it */
        Py_CLEAR(r->scope);
        res = request_ended(r, PYGEN_ERROR, &result);
        step_end(r);
        return sk_asgi_method_result(res, result);
    }
    PyObject *meth = PyObject_GetAttr(r->coro, r->st->s_throw);
    if (meth == NULL) {
        /* an __await__ iterator without throw(): the exception goes to the app as raised */
        PyErr_Clear();
        sk_asgi_raise_thrown(args, nargs);
        res = PYGEN_ERROR;
    }
    else {
        result = PyObject_Vectorcall(meth, args, (size_t)nargs, NULL);
        Py_DECREF(meth);
        if (result != NULL) {
            res = PYGEN_NEXT;
        }
        else if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
            PyErr_Clear();
            result = Py_NewRef(Py_None);
            res = PYGEN_RETURN;
        }
        else {
            res = PYGEN_ERROR;
        }
    }
    res = request_ended(r, res, &result);
    step_end(r);
    return sk_asgi_method_result(res, result);
}

static PyObject *
request_close(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None: coroutine.close(): closes the app's coroutine; the exchange is
     * finished as a cancelled one (500 or abort, nothing logged). */
    RequestObject *r = (RequestObject *)op;
    PyObject *coro = r->coro;
    r->coro = NULL;
    int failed = 0;
    if (coro != NULL) {
        PyObject *meth = PyObject_GetAttr(coro, r->st->s_close);
        PyObject *res = meth ? PyObject_CallNoArgs(meth) : NULL;
        if (meth == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
        }
        else if (res == NULL) {
            failed = 1;
        }
        Py_XDECREF(meth);
        Py_XDECREF(res);
        Py_DECREF(coro);
    }
    if (failed) {
        PyObject *typ, *val, *tb;
        PyErr_Fetch(&typ, &val, &tb);
        request_finish(r, NULL, 1);
        PyErr_Restore(typ, val, tb);
        return NULL;
    }
    request_finish(r, NULL, 1);
    Py_RETURN_NONE;
}

static PyObject *
request_await(PyObject *op)
{
    /* New reference: __await__ returns the request itself (it is its own iterator). */
    return Py_NewRef(op);
}

static PyMethodDef receive_def = {
    "receive", request_receive, METH_NOARGS,
    "ASGI receive(): awaitable of the next http.request / http.disconnect event."};
static PyMethodDef send_def = {"send", request_send, METH_O,
                               "ASGI send(message): http.response.start / http.response.body."};

static RequestObject *
request_new(http1_conn_t *c)
{
    /* New reference: the request for the head just parsed, with its scope; NULL with an
     * exception. The app is not called yet (request_run). */
    sk_serve_t *srv = c->srv;
    sk_state *st = srv->st;
    sk_parser_t *p = &c->parser;
    RequestObject *r = (RequestObject *)st->request_type->tp_alloc(st->request_type, 0);
    if (r == NULL) {
        return NULL;
    }
    r->st = st;
    st->live_requests++;
    r->owner = Py_NewRef(srv->owner);
    r->srv = srv;
    r->conn = c;
    r->cont = p->expect_continue ? CONT_EXPECTED : CONT_NONE;
    r->keep_alive = p->keep_alive;
    r->http_minor = p->http_minor;
    r->is_head = (p->method == HTTP_HEAD);
    for (uint32_t i = 0; i < p->nfields; i++) {
        /* TE: trailers (RFC 9110 §10.1.4): the client accepts a trailer section */
        sk_span_t name = p->fields[i].name, value = p->fields[i].value;
        if (SK_TOKEN_IEQ(sk_parser_ptr(p, name), name.len, "te") &&
            SK_LIST_HAS_TOKEN(sk_parser_ptr(p, value), value.len, "trailers")) {
            r->te_trailers = 1;
        }
    }
    r->scope = build_scope(c, &r->ext);
    if (r->scope == NULL) {
        r->conn = NULL;
        Py_DECREF(r);
        return NULL;
    }
    sk_access_exchange_begin(srv, &r->acc, r->scope, p->method);
    return r;
}

#if PY_VERSION_HEX < 0x030C0000
static PyObject *
task_name(sk_state *st)
{
    /* New reference: a request Task's name on 3.11, "skirr-request-N" with N counting the
     * process's request Tasks from 1 (asyncio's own default, "Task-N" from PyUnicode_FromFormat,
     * costs about 1.4k instructions per Task). Written into an ASCII str directly. NULL with an
     * exception. */
    static const char prefix[] = "skirr-request-";
    char digits[24];
    size_t nd = 0;
    unsigned long long n = ++st->task_names;
    do {
        digits[nd++] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    PyObject *name = PyUnicode_New((Py_ssize_t)(sizeof(prefix) - 1 + nd), 127);
    if (name == NULL) {
        return NULL;
    }
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(name);
    memcpy(d, prefix, sizeof(prefix) - 1);
    d += sizeof(prefix) - 1;
    while (nd > 0) {
        *d++ = (Py_UCS1)digits[--nd];
    }
    return name;
}
#endif

static int
request_run(RequestObject *r)
{
    /* Starts the request's Task (the app itself is called in its first step: call_app). 0, or
     * -1 with an exception set (the caller answers 500). */
    sk_state *st = r->st;
    sk_serve_t *srv = r->srv;
    PyObject *task = NULL;
    /* A fresh copy of the server's context, never the caller's: this may run inside the previous
     * request's send() (a pipelined request started at once), whose context must not leak. */
    PyObject *ctx = PyContext_Copy(srv->context);
    if (ctx == NULL) {
        return -1;
    }
    set_app(r, APP_STARTED);
    if (srv->task_type != NULL) {
        int eager = srv->eager && srv->eager_budget > 0;
        srv->eager_budget -= eager;
        PyObject *targs[4] = {(PyObject *)r, srv->loop, ctx, ctx};
#if PY_VERSION_HEX >= 0x030C0000
        if (srv->eager) {
            targs[2] = eager ? Py_True : Py_False;
        }
        task = PyObject_Vectorcall(srv->task_type, targs, 1, srv->task_kw);
#else
        (void)eager;
        targs[3] = task_name(st); /* loop, context, name */
        task = targs[3] ? PyObject_Vectorcall(srv->task_type, targs, 1, srv->task_kw) : NULL;
        Py_XDECREF(targs[3]);
#endif
    }
    else {
        PyObject *targs[3] = {srv->loop, (PyObject *)r, ctx};
        task = PyObject_VectorcallMethod(st->s_create_task, targs, 2, srv->call_soon_kw);
    }
    Py_DECREF(ctx);
    if (task == NULL) {
        /* No task drives it: the app was never called (or its first step was lost with the
         * task); either way it is no longer in flight. */
        Py_CLEAR(r->scope);
        Py_CLEAR(r->coro);
        if (r->app == APP_STARTED || r->app == APP_RUNNING) {
            set_app(r, APP_DONE);
        }
        return -1;
    }
    if (r->app != APP_DONE) { /* an eager start may already have finished it */
        r->task = task;
    }
    else {
        Py_DECREF(task);
    }
    return 0;
}

static int
request_body(RequestObject *r, const char *data, size_t len)
{
    /* Queues a piece of request content (copied: the input buffer is reused). 0 or -1. */
    if (len == 0) {
        return 0;
    }
    if (r->body == NULL) {
        r->body = PyList_New(0);
        if (r->body == NULL) {
            return -1;
        }
    }
    PyObject *b = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    if (b == NULL) {
        return -1;
    }
    int rc = PyList_Append(r->body, b);
    Py_DECREF(b);
    if (rc < 0) {
        return -1;
    }
    r->body_buffered += len;
    wake_receivers(r);
    return 0;
}

static void
request_detach(RequestObject *r)
{
    /* The connection is closing or refusing: a response not complete is lost (GONE); waiters
     * wake (receive() with http.disconnect, a drain wait with ClientDisconnected). */
    Py_INCREF(r); /* the connection's reference may be dropped below */
    http1_conn_t *c = r->conn;
    if (r->tx == TX_OPEN) {
        set_tx(r, TX_GONE);
    }
    if (c != NULL) {
        r->conn = NULL;
        if (c->current == r) {
            c->current = NULL;
            Py_DECREF(r);
        }
    }
    release_waiters(r);
    Py_DECREF(r);
}

/* ---- the connection ------------------------------------------------------------------------- */

/* Between requests: the keep-alive deadline, or the head deadline if the next request began. */
static void
arm_idle(http1_conn_t *c, int fresh)
{
    if (sk_transport_in_len(c->t) > 0 || !sk_parser_idle(&c->parser)) {
        if (fresh || sk_transport_deadline_kind(c->t) != DL_HEAD) {
            sk_transport_set_deadline(c->t, DL_HEAD, c->srv->head_timeout);
        }
    }
    else {
        sk_transport_set_deadline(c->t, DL_KEEPALIVE, c->srv->keep_alive);
    }
}

static void
conn_request_done(http1_conn_t *c, int keep_alive)
{
    /* The current response completed (keep_alive: it allows the connection to persist). Decides
     * whether the connection persists and starts the next pipelined request if one is buffered. */
    sk_serve_t *srv = c->srv;
    RequestObject *r = c->current;
    if (r == NULL) {
        return;
    }
    assert(r->tx == TX_COMPLETE && r->conn == c);
    /* A body the app did not read is read and discarded so the connection stays usable, unless
     * server_closes_after() says otherwise. */
    int reuse = keep_alive && !server_closes_after(c, r);
    if (reuse && r->rx == RX_BODY) {
        c->discarding = 1;
    }
    r->conn = NULL;
    c->current = NULL;
    Py_DECREF(r);
    if (c->closed) {
        return;
    }
    sync_reading(c, 0);
    if (!reuse) {
        sk_transport_close(c->t, SK_CLOSE_AFTER_WRITE);
        return;
    }
    arm_idle(c, 0);
    if (sk_transport_in_len(c->t) > 0) {
        /* A pipelined request is buffered: start it now rather than a loop iteration later
         * (inside a pass, the pass on the stack owns the input: soon instead). Lazily, as this
         * may run inside the previous app's send(): its app never runs nested in another's, and
         * its Task gets a fresh copy of the server's context. */
        int budget = srv->eager_budget;
        srv->eager_budget = 0;
        sk_transport_feed(c->t);
        srv->eager_budget = budget;
    }
}

/* A WebSocket opening handshake (RFC 6455 §4.2.1), with --ws auto: a malformed one is refused
 * with 400 here; a valid one (or a wrong version, 426) goes to the WebSocket handler, which takes
 * the connection over (sk_wsh.h). The request never reaches the app as HTTP. */
static void
upgrade_websocket(http1_conn_t *c)
{
    sk_ws_handshake_t hs;
    const char *why;
    PyObject *scope = NULL;
    int status = sk_ws_handshake_check(&c->parser, &hs, &why);
    if (status == 400) {
        refuse_why(c, 400, why);
        return;
    }
    if (status == 426) {
        note_refusal(c, 426, why); /* the 426 itself, with its field, is the handler's */
    }
    if (status == 0 && (scope = build_scope(c, NULL)) == NULL) {
        PyErr_WriteUnraisable(c->srv->owner);
        refuse(c, 500);
        return;
    }
    if (sk_wsh_start(c->t, c->srv, status, scope, hs.key, hs.key_len) < 0) {
        PyErr_WriteUnraisable(c->srv->owner);
        refuse(c, 500);
    }
    else {
        c->switched = 1;
    }
    Py_XDECREF(scope);
}

/* Parses one request's worth of events and starts its app (which, when started eagerly, may
 * answer before this returns). Returns bytes consumed. */
static size_t
parse_one(http1_conn_t *c, const char *data, size_t len)
{
    size_t total = 0;
    RequestObject *to_run = NULL; /* strong: a request whose app starts once these are parsed */
    /* Runs until the parser says it needs more input (SK_EV_NONE): after a head or body event
     * the parser may have an event due with no bytes left (the end of a Content-Length body). */
    while (sk_transport_is_open(c->t)) {
        RequestObject *r = c->current;
        if (r != NULL && r->rx != RX_BODY) {
            break;
        }
        if (r == NULL && (sk_transport_out_len(c->t) >= SK_OUTPUT_HIGH_WATER ||
                          sk_transport_file_pending(c->t))) {
            /* earlier responses are not read yet (or a file of one is being sent: one range at
             * a time): start no new request (bounded memory) */
            break;
        }
        /* Over the body mark no more bytes are fed; but the end of a Content-Length body whose
         * last byte was in the last piece carries none and is due now: collect it with an
         * empty execute, or the app's next receive() waits for bytes that never come. */
        int paused = (r != NULL && r->body_buffered >= BODY_HIGH_WATER);
        sk_event_t ev;
        size_t n = sk_parser_execute(&c->parser, data + total, paused ? 0 : len - total, &ev);
        total += n;
        if (ev.type == SK_EV_NONE) {
            break;
        }
        if (ev.type == SK_EV_HEAD) {
            sk_serve_t *srv = c->srv;
            int kind = sk_transport_deadline_kind(c->t);
            if (kind == DL_HEAD || kind == DL_KEEPALIVE || kind == DL_SHUTDOWN) {
                sk_transport_clear_deadline(c->t);
            }
            if (srv->limit_concurrency > 0 && srv->active_requests >= srv->limit_concurrency) {
                refuse(c, 503); /* --limit-concurrency: over capacity, try again later */
                break;
            }
            srv->total_requests++;
            if (srv->ws.enabled && sk_ws_is_upgrade(&c->parser)) {
                upgrade_websocket(c);
                return total; /* the connection (and the rest of the input) moved on, or closed */
            }
            r = request_new(c);
            if (r == NULL) {
                PyErr_WriteUnraisable(srv->owner);
                refuse(c, 500);
                break;
            }
            assert(c->current == NULL); /* one request at a time: parse_one stops at a head */
            c->current = r;             /* strong: released by detach or conn_request_done */
            to_run = (RequestObject *)Py_NewRef(r);
        }
        else if (ev.type == SK_EV_BODY) {
            if (r != NULL && request_body(r, ev.data, ev.len) < 0) {
                PyErr_WriteUnraisable(c->srv->owner);
                refuse(c, 500);
                break;
            }
        }
        else if (ev.type == SK_EV_END) {
            if (r != NULL) {
                set_rx(r, RX_COMPLETE);
                wake_receivers(r);
            }
            c->discarding = 0;
        }
        else { /* SK_EV_ERROR: the one error sink */
            refuse(c, ev.status);
            break;
        }
    }
    if (sk_transport_is_open(c->t)) {
        sync_reading(c, total > 0);
    }
    if (to_run != NULL) {
        if (to_run->conn == c && sk_transport_is_open(c->t) && request_run(to_run) < 0) {
            PyErr_WriteUnraisable(c->srv->owner);
            refuse(c, 500);
        }
        Py_DECREF(to_run);
    }
    return total;
}

/* ---- the handler table ---------------------------------------------------------------------- */

static size_t
h1_data_received(void *h, const char *data, size_t len)
{
    /* Parses until the input is used up or a request blocks further parsing (its response is
     * pending, or its unconsumed body is over the high-water mark). A request whose eagerly
     * started app answered at once lets the next pipelined one go in the same pass. */
    http1_conn_t *c = h;
    size_t total = 0;
    int idle_kind = sk_transport_deadline_kind(c->t);
    if (idle_kind == DL_KEEPALIVE || idle_kind == DL_SHUTDOWN) {
        sk_transport_set_deadline(c->t, DL_HEAD, c->srv->head_timeout); /* a head has begun */
    }
    size_t n;
    do {
        n = parse_one(c, data + total, len - total);
        total += n;
        if (c->switched) {
            return total; /* the WebSocket handler has the connection and the rest */
        }
        /* n == 0: parsing is held back (unsent output over the mark, a file being sent) */
    } while (n > 0 && sk_transport_is_open(c->t) && c->current == NULL && total < len &&
             c->srv->eager_budget > 0 && c->srv->eager);
    if (c->srv->metrics != NULL) {
        c->srv->metrics->bytes_in += total;
    }
    if (!sk_transport_is_open(c->t)) {
        return total;
    }
    if (c->current == NULL && total < len) {
        if (n > 0) {
            sk_transport_feed_soon(c->t); /* the rest waits for no request: next iteration */
        }
        else {
            /* held back by unsent output: writable() feeds the rest once it is sent (perhaps
             * in this pass's own write, before the rest is buffered: hence the flag) */
            c->held_back = 1;
        }
    }
    settle_output(c);
    return total;
}

static void
h1_writable(void *h)
{
    http1_conn_t *c = h;
    RequestObject *r = c->current;
    if (r != NULL) {
        if (r->drain_waiters != NULL && sk_transport_out_len(c->t) < SK_OUTPUT_HIGH_WATER &&
            !sk_transport_file_pending(c->t)) {
            sk_asgi_resolve_all(r->st, &r->drain_waiters, Py_None, NULL);
        }
        return;
    }
    arm_idle(c, 1);
    if (sk_transport_in_len(c->t) > 0 || c->held_back) {
        c->held_back = 0;
        sk_transport_feed_soon(c->t); /* pipelined requests held back by unread responses */
    }
}

static void
h1_deadline(void *h, int kind)
{
    http1_conn_t *c = h;
    if (kind == DL_SHUTDOWN) {
        if (c->srv->trace != NULL) {
            socklen_t plen;
            sk_access_trace(c->srv, NULL, sk_transport_peer(c->t, &plen),
                            "HTTP connection idle: closed for the shutdown");
        }
        sk_transport_close(c->t, SK_CLOSE_NOW);
        return;
    }
    if (c->srv->metrics != NULL) {
        static const int kinds[] = {[DL_HEAD] = SK_TIMEOUT_HEAD,
                                    [DL_KEEPALIVE] = SK_TIMEOUT_KEEPALIVE,
                                    [DL_BODY] = SK_TIMEOUT_BODY};
        c->srv->metrics->timeouts[kinds[kind]]++;
    }
    if (kind == DL_BODY) {
        /* No body byte for --timeout-request-body seconds: the app's receive() gets
         * http.disconnect; 408 (RFC 9110 §15.5.9) if its response has not begun. */
        RequestObject *r = c->current;
        if (r != NULL && !r->resp.head_written) {
            refuse(c, 408);
        }
        else {
            sk_transport_close(c->t, SK_CLOSE_NOW);
        }
        return;
    }
    if (kind == DL_HEAD && !c->discarding &&
        (sk_transport_in_len(c->t) > 0 || !sk_parser_idle(&c->parser))) {
        refuse(c, 408); /* RFC 9110 §15.5.9: some of a request head, never all of it */
        return;
    }
    if (c->srv->trace != NULL) {
        socklen_t plen;
        sk_access_trace(c->srv, NULL, sk_transport_peer(c->t, &plen),
                        kind == DL_KEEPALIVE ? "HTTP connection idle: --timeout-keep-alive"
                                             : "HTTP connection idle: --timeout-request-head");
    }
    sk_transport_close(c->t, SK_CLOSE_NOW); /* idle, or no byte of a head at all */
}

static void
h1_shutdown(void *h)
{
    /* Graceful shutdown: a request in flight finishes (its response says close: server_closes_after)
     * and a partial request head gets its head deadline as before. A connection idle between
     * requests stays open for SHUTDOWN_GRACE (bounded by --timeout-keep-alive), so a request
     * already on its way is answered, with 'connection: close'; then it closes quietly. */
    http1_conn_t *c = h;
    if (c->current != NULL || sk_transport_out_len(c->t) != 0) {
        return;
    }
    if (sk_transport_in_len(c->t) > 0 || !sk_parser_idle(&c->parser)) {
        return; /* a head has begun: DL_HEAD runs; its response will say close */
    }
    double grace = c->srv->keep_alive < SHUTDOWN_GRACE ? c->srv->keep_alive : SHUTDOWN_GRACE;
    if (grace <= 0) {
        sk_transport_close(c->t, SK_CLOSE_NOW);
        return;
    }
    sk_transport_set_deadline(c->t, DL_SHUTDOWN, grace);
}

static void
h1_closed(void *h, int reason)
{
    http1_conn_t *c = h;
    c->closed = 1;
    if (c->srv->metrics != NULL && reason == SK_CLOSED_WRITE_TIMEOUT) {
        c->srv->metrics->timeouts[SK_TIMEOUT_WRITE]++;
    }
    if (c->srv->trace != NULL) {
        static const char *const why[] = {
            [SK_CLOSED_PEER] = "HTTP connection lost (closed by the client)",
            [SK_CLOSED_WRITE_TIMEOUT] = "HTTP connection closed (--timeout-write: no progress)",
            [SK_CLOSED_LINGER_DONE] = "HTTP connection closed by the server",
            [SK_CLOSED_BY_HANDLER] = "HTTP connection closed by the server",
            [SK_CLOSED_SERVER] = "HTTP connection closed (server stopping)",
            [SK_CLOSED_NO_MEMORY] = "HTTP connection closed (out of memory)",
            [SK_CLOSED_FILE_SHORT] = "HTTP connection reset (the file being sent shrank)",
            [SK_CLOSED_FILE_ERROR] = "HTTP connection reset (the file being sent failed)",
        };
        int known = reason > 0 && reason <= SK_CLOSED_FILE_ERROR;
        socklen_t plen;
        sk_access_trace(c->srv, NULL, sk_transport_peer(c->t, &plen),
                        known ? why[reason] : "HTTP connection closed");
    }
    if (reason == SK_CLOSED_FILE_SHORT || reason == SK_CLOSED_FILE_ERROR) {
        /* pathsend/zerocopysend: the response could not be completed (it was reset) */
        sk_asgi_log_error(c->srv->st, c->srv->logger,
                          reason == SK_CLOSED_FILE_SHORT
                              ? "File response incomplete: the file ended before the bytes "
                                "promised (it shrank while being sent); connection reset"
                              : "File response incomplete: reading the file failed; connection "
                                "reset",
                          NULL);
    }
    if (c->current) {
        request_detach(c->current); /* c->current becomes NULL */
    }
}

static void
h1_release(void *h)
{
    http1_conn_t *c = h;
    assert(c->current == NULL);
    sk_parser_free(&c->parser);
    Py_CLEAR(c->client);
    Py_CLEAR(c->local);
    PyMem_Free(c);
}

static int
h1_traverse(void *h, visitproc visit, void *arg)
{
    http1_conn_t *c = h;
    Py_VISIT(c->current);
    return 0;
}

const sk_handler_ops_t sk_http1_ops = {
    .data_received = h1_data_received,
    .writable = h1_writable,
    .deadline = h1_deadline,
    .shutdown = h1_shutdown,
    .closed = h1_closed,
    .release = h1_release,
    .traverse = h1_traverse,
};

void *
sk_http1_open(void *owner, sk_transport_t *t)
{
    sk_serve_t *srv = owner;
    http1_conn_t *c = PyMem_Calloc(1, sizeof(http1_conn_t));
    if (c == NULL) {
        return NULL;
    }
    c->t = t;
    c->srv = srv;
    sk_parser_init(&c->parser, &srv->limits);
    sk_transport_set_deadline(t, DL_HEAD, srv->head_timeout);
    if (srv->trace != NULL) {
        socklen_t plen;
        sk_access_trace(srv, NULL, sk_transport_peer(t, &plen), "HTTP connection made");
    }
    return c;
}

/* ---- type ----------------------------------------------------------------------------------- */

static int
request_traverse(PyObject *op, visitproc visit, void *arg)
{
    RequestObject *r = (RequestObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(r->owner);
    Py_VISIT(r->task);
    Py_VISIT(r->coro);
    Py_VISIT(r->receive_waiters);
    Py_VISIT(r->drain_waiters);
    Py_VISIT(r->body);
    Py_VISIT(r->scope);
    Py_VISIT(r->ext);
    return sk_access_req_traverse(&r->acc, visit, arg);
}

static int
request_clear(PyObject *op)
{
    RequestObject *r = (RequestObject *)op;
    if (r->owner != NULL && (r->app == APP_STARTED || r->app == APP_RUNNING)) {
        /* dropped unfinished (its Task was destroyed with the loop): no longer in flight */
        set_app(r, APP_DONE);
    }
    Py_CLEAR(r->task);
    Py_CLEAR(r->coro);
    Py_CLEAR(r->receive_waiters);
    Py_CLEAR(r->drain_waiters);
    Py_CLEAR(r->body);
    Py_CLEAR(r->scope);
    sk_access_req_clear(&r->acc);
    /* last but the server: the app's coroutine and the scope, which reach the dict, are gone */
    PyObject *ext = r->ext;
    r->ext = NULL;
    if (r->owner != NULL) {
        ext_recycle(r->srv, ext, r->http_minor);
    }
    else {
        Py_XDECREF(ext);
    }
    Py_CLEAR(r->owner);
    return 0;
}

static void
request_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((RequestObject *)op)->st != NULL) {
        ((RequestObject *)op)->st->live_requests--;
    }
    request_clear(op);
    sk_resp_free(&((RequestObject *)op)->resp);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef request_methods[] = {
    {"send", request_send_value, METH_O, "coroutine.send(value): one step of the app."},
    {"throw", (PyCFunction)(void (*)(void))request_throw, METH_FASTCALL,
     "coroutine.throw(exc): raise exc inside the app (Task.cancel() comes this way)."},
    {"close", request_close, METH_NOARGS, "coroutine.close(): close the app's coroutine."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot request_slots[] = {
    {Py_am_await, request_await},
    {Py_am_send, request_am_send},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, request_iternext},
    {Py_tp_methods, request_methods},
    {Py_tp_traverse, request_traverse},
    {Py_tp_clear, request_clear},
    {Py_tp_dealloc, request_dealloc},
    {Py_tp_doc,
     (void *)"One HTTP request/response exchange (internal); the coroutine its Task runs."},
    {0, NULL},
};

PyType_Spec sk_request_spec = {
    .name = "skirr._native.Request",
    .basicsize = sizeof(RequestObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = request_slots,
};
