/* sk_http1.c — the HTTP/1.1 protocol handler: the wire under the ASGI `http` exchange.
 *
 * Owns, per connection: the request parser, refusals (the one error sink: refuse()), the
 * request-head, body and keep-alive deadlines, starting one exchange (sk_exchange.h) per parsed
 * head, pipelining (the next buffered request starts as the previous response completes),
 * discarding an unread body, the persistence decision, 100-continue on the wire, the
 * write-timing policy (settle_output(): when output leaves) and the WebSocket upgrade's
 * detection and hand-over. Per request it implements the exchange's wire table
 * (sk_http1_wire) with the serializer (sk_resp.h): framing (Content-Length, chunked,
 * close-delimited), the connection field, trailers as a chunked trailer section.
 * Never: touches a socket or the reactor (only the sk_transport_* API), or reads an exchange's
 * state except through sk_exchange.h.
 *
 * State of the current request, besides its exchange:
 *   body (request content)  arriving -> done (c->body_done: the message ended on the wire)
 *   cont (100-continue)     NONE | EXPECTED -> SENT
 */
#include "sk_http1.h"

#include "sk_asgi.h"
#include "sk_exchange.h"
#include "sk_h2.h"
#include "sk_resp.h"
#include "sk_tlsctx.h"
#include "sk_token.h"
#include "sk_wsh.h"
#include "sk_wshs.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BODY_HIGH_WATER (64 * 1024) /* stop reading while this much request body is unconsumed */
#define DISCARD_MAX (1024 * 1024)   /* unread request body dropped to keep a connection (bytes) */

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

enum cont_state { CONT_NONE = 0, CONT_EXPECTED, CONT_SENT };

/* What a connection needs only while a request is on it: the parser, the response being written
 * and what the serializer knows of its request. Made when bytes arrive (work_new) and freed
 * whole by the tick when the connection is idle between requests (h1_idle), so an idle
 * keep-alive connection keeps only http1_conn_t (issue 37: memory per idle connection, against
 * nginx's 0.51 KiB). From the raw allocator (glibc), like the blocks it owns (head block,
 * field array, response head): the tick's malloc_trim gives their pages back together. */
typedef struct {
    sk_parser_t parser;
    sk_resp_t resp;     /* the current request's response (reset per request, storage kept) */
    sk_req_info_t info; /* what the serializer knows of the current request (force_close is
                          * decided when the head is built: server_closes_after) */
} http1_work_t;

/* One connection's HTTP/1.1 state. Freed by release() when the reactor reaps the transport. */
typedef struct {
    sk_transport_t *t;      /* borrowed: outlives this (release() runs before it is freed) */
    sk_serve_t *srv;        /* borrowed: owned by the Server, which outlives every connection */
    http1_work_t *w;        /* owned: NULL while idle, until bytes arrive (parser_idle() then) */
    sk_exchange_t *current; /* strong: the request being received/answered, NULL between */
    PyObject *client;       /* strong: scope "client", made once per connection (None for UDS) */
    PyObject *local;        /* strong: scope "server", made once per connection */
    PyObject *tls;          /* strong: the ASGI `tls` extension (sk_tls_info), made at the first
                             * request head of a TLS connection; NULL on cleartext */
    uint8_t tls_known;      /* tls was looked for (it stays NULL on cleartext) */
    uint8_t closed;         /* the transport told closed(): nothing more is sent */
    uint8_t discarding;     /* reading and dropping the rest of an answered request's body */
    uint8_t switched;       /* handed to the WebSocket handler: this handler is done */
    uint8_t held_back;      /* input was left unparsed behind unsent output: writable() feeds */
    uint8_t body_done;      /* the current request's message ended on the wire */
    uint8_t cont;           /* enum cont_state of the current request */
    uint8_t errored;        /* the current response is skirr's own error (wire error()) */
    uint8_t proto_known;    /* the first bytes were looked at for HTTP/2 (h2_switch) */
} http1_conn_t;

_Static_assert(sizeof(http1_conn_t) <= SK_TRANSPORT_HANDLER_SIZE,
               "the HTTP/1.1 handler's state fits the transport's handler slot");

static void conn_request_done(http1_conn_t *c, int keep_alive);

/* Whether the parser is between messages; a connection without its work storage is. */
static int
parser_idle(const http1_conn_t *c)
{
    return c->w == NULL || sk_parser_idle(&c->w->parser);
}

/* Makes c->w for the bytes that just arrived: 0, or -1 without memory. */
static int
work_new(http1_conn_t *c)
{
    http1_work_t *w = PyMem_RawCalloc(1, sizeof(http1_work_t));
    if (w == NULL) {
        return -1;
    }
    sk_parser_init(&w->parser, &c->srv->limits);
    c->w = w;
    return 0;
}

/* Frees c->w and what it owns; returns the bytes freed (for the tick's malloc_trim). */
static size_t
work_free(http1_conn_t *c)
{
    http1_work_t *w = c->w;
    if (w == NULL) {
        return 0;
    }
    size_t freed = sizeof(*w) + w->parser.head_cap + w->parser.fields_cap * sizeof(sk_field_t) +
                   w->resp.head.cap;
    sk_parser_free(&w->parser);
    sk_resp_free(&w->resp);
    PyMem_RawFree(w);
    c->w = NULL;
    return freed;
}

static void
drop_current(http1_conn_t *c)
{
    /* The connection is closing or refusing: the current exchange (if any) loses its wire. */
    sk_exchange_t *x = c->current;
    if (x != NULL) {
        c->current = NULL;
        sk_exchange_gone(x);
        Py_DECREF((PyObject *)x);
    }
}

/* ---- reading and writing -------------------------------------------------------------------- */

/* Flow control for request bodies: the transport reads while the current request's unconsumed
 * body is under BODY_HIGH_WATER. The body deadline (--timeout-request-body) runs exactly while
 * skirr wants body bytes: a request whose body is still arriving and not paused by flow control.
 * `progress`: body bytes (or the head) just arrived, so it starts again. */
static void
sync_reading(http1_conn_t *c, int progress)
{
    sk_exchange_t *r = c->current;
    int paused = (r != NULL && sk_exchange_buffered(r) >= BODY_HIGH_WATER);
    sk_transport_pause_reading(c->t, paused);
    int wants_body = (r != NULL && !c->body_done && !paused && c->srv->body_timeout > 0);
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
    sk_exchange_t *r = c->current;
    /* Only behind a Task skirr made (srv->task_type): its first step is the loop's next round of
     * callbacks. A task factory's Task may take its first step at any later time, and output
     * must not wait for it longer than the batch's one iteration. */
    if (r != NULL && c->srv->task_type != NULL && sk_exchange_unstarted(r) &&
        sk_transport_out_len(c->t) > 0 && sk_transport_is_open(c->t)) {
        sk_transport_hold(c->t);
    }
    else {
        sk_transport_release(c->t);
    }
}

/* New reference, or NULL without an exception: the client a refusal's access line and trace
 * event name when --proxy-headers is on (skirr-access-refusals): the scope's of the request's
 * exchange (its fields are not read again), else, for a head that passed the checks
 * (sk_parser_head_checked), the one the proxy headers among its fields give, as its scope would
 * have had it; NULL: the connection's client. */
static PyObject *
refusal_client(http1_conn_t *c, const sk_parser_t *p, const struct sockaddr *peer)
{
    sk_serve_t *srv = c->srv;
    if (!srv->proxy.enabled) {
        return NULL;
    }
    if (c->current != NULL) {
        return sk_exchange_client(c->current);
    }
    if (p == NULL || !sk_parser_head_checked(p)) {
        return NULL; /* the head not read whole or invalid: its fields are not trusted */
    }
    sk_fields_t f = {.base = p->head, .v = p->fields, .n = p->nfields};
    PyObject *client = sk_proxy_client(&srv->proxy, &f, peer, srv->unix_path != Py_None);
    if (client == NULL && PyErr_Occurred()) {
        PyErr_WriteUnraisable(srv->owner); /* out of memory: the line names the peer */
    }
    return client;
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
        const sk_parser_t *p = c->w != NULL ? &c->w->parser : NULL; /* NULL: no byte parsed */
        const struct sockaddr *peer = sk_transport_peer(c->t, &plen);
        const char *reason = why != NULL                             ? why
                             : p != NULL && p->dead && p->err_reason ? p->err_reason
                             : status == 408 && c->current != NULL
                                 ? "request content not complete in time"
                             : status == 408 ? "request head not complete in time"
                             : status == 503 ? "--limit-concurrency reached"
                                             : "server error";
        PyObject *proxied = refusal_client(c, p, peer); /* strong, or NULL */
        PyObject *client = proxied != NULL ? proxied : c->client;
        if (c->srv->access.pending != NULL) {
            /* a current request has its work storage */
            int sent = c->current == NULL || (c->w != NULL && !c->w->resp.head_written);
            uint64_t bytes =
                sent ? sk_resp_error_content_length(status, p != NULL && p->method == HTTP_HEAD)
                     : 0;
            sk_access_line_t line;
            PyObject *root = c->srv->root_path_b;
            sk_access_refusal(&c->srv->access, client, peer,
                              sk_access_line_http1(p, PyBytes_AS_STRING(root),
                                                   (size_t)PyBytes_GET_SIZE(root), &line),
                              status, bytes, reason);
        }
        if (c->srv->trace != NULL) {
            char event[160];
            snprintf(event, sizeof(event), "HTTP request refused: %d (%s)", status, reason);
            sk_access_trace(&c->srv->access, client, peer, event);
        }
        Py_XDECREF(proxied);
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
        started = c->w->resp.started && c->w->resp.head_written;
        drop_current(c);
    }
    if (!started) {
        /* The output may still hold earlier pipelined responses: the refusal goes after them. */
        /* valid on SK_EV_ERROR too; no work storage: nothing was parsed */
        int head = c->w != NULL && c->w->parser.method == HTTP_HEAD;
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
server_closes_after(http1_conn_t *c)
{
    const sk_serve_t *srv = c->srv;
    if (srv->shutting_down || c->closed ||
        (srv->max_requests != 0 && SK_LOAD(srv->total_requests) >= srv->max_requests)) {
        return 1;
    }
    if (c->body_done) {
        return 0;
    }
    if (c->cont == CONT_EXPECTED) {
        return 1;
    }
    const sk_parser_t *p = &c->w->parser; /* a request is on the connection: c->w is made */
    if (!p->has_content_length) {
        return 1; /* chunked: how much is left is unknown, so it is never read to be dropped */
    }
    return p->content_length - p->body_received > DISCARD_MAX;
}

/* ---- the request head ----------------------------------------------------------------------- */

static int
h1_head(http1_conn_t *c, sk_req_head_t *h)
{
    /* Fills h for the request whose head was just parsed (pointers into the parser's head
     * block: valid until the next request begins). Makes the connection's scope "client" and
     * "server" on its first request. 0, or -1 with an exception. */
    sk_serve_t *srv = c->srv;
    const sk_parser_t *p = &c->w->parser;
    const char *t = sk_parser_ptr(p, p->target);
    size_t tlen = p->target.len;
    if (t == NULL) { /* no head block: never for a parsed request, but keep t valid */
        t = "";
        tlen = 0;
    }
    h->method = p->method;
    h->method_name = sk_parser_method_name(p);
    /* absolute-form (RFC 9112 §3.2.2): path and query come from the URL; "/" when empty. */
    sk_http_target_split(t, tlen, &h->authority, &h->authority_len, &h->path, &h->path_len,
                         &h->query, &h->query_len);
    h->fields.base = p->head;
    h->fields.v = p->fields;
    h->fields.n = p->nfields;
    h->has_host = p->host_count > 0;
    h->http_major = 1;
    h->http_minor = p->http_minor;
    if (!c->tls_known) {
        /* once per connection: every request's scope and a WebSocket's after the upgrade
         * share it (copied into each) */
        SSL *ssl = sk_tls_ssl(sk_transport_stream(c->t));
        if (ssl != NULL && (c->tls = sk_tls_info(c->srv->st, ssl)) == NULL) {
            return -1;
        }
        c->tls_known = 1;
    }
    h->https = c->tls != NULL;
    h->tls = c->tls;
    h->extras = p->http_minor >= 1; /* 1xx and trailer sections: not to HTTP/1.0 */
    socklen_t plen_unused;
    h->peer = sk_transport_peer(c->t, &plen_unused);
    if (sk_serve_addresses(srv, c->t, &c->client, &c->local) < 0) {
        return -1;
    }
    h->client = c->client;
    h->server = c->local;
    return 0;
}

/* ---- the wire under the exchange (sk_wire_ops_t) -------------------------------------------- */

static int
congested(http1_conn_t *c)
{
    /* SK_WIRE_WAIT while the unsent output is at or over SK_OUTPUT_HIGH_WATER or a file range is
     * being sent (one at a time; writable() calls sk_exchange_drained), else 0. */
    return sk_transport_out_len(c->t) >= SK_OUTPUT_HIGH_WATER || sk_transport_file_pending(c->t)
               ? SK_WIRE_WAIT
               : 0;
}

static void
before_body(http1_conn_t *c)
{
    /* The head leaves with the first body piece: it says close when skirr will close after it
     * (RFC 9112 §9.6). */
    if (!c->w->resp.head_written) {
        c->w->resp.req.force_close = server_closes_after(c);
    }
}

static int
after_body(http1_conn_t *c, int rc)
{
    /* A close-delimited body (RFC 9112 §6.3: an HTTP/1.0 request's streamed response) is ended
     * by the close alone: until its final piece is written and then until its bytes have all
     * left, a close must say it was cut (a reset), whoever closes (sk_transport_set_close_cuts).
     * Returns rc. */
    const sk_resp_t *r = &c->w->resp;
    enum sk_close_cuts cuts = SK_CLOSE_WHOLE;
    if (r->head_written && r->framing == SK_FRAME_CLOSE) {
        cuts = r->done ? SK_CLOSE_CUTS_UNTIL_SENT : SK_CLOSE_CUTS;
    }
    sk_transport_set_close_cuts(c->t, cuts);
    return rc;
}

static int
h1w_start(void *w, int status, const sk_header_t *fields, size_t nfields, int trailers)
{
    http1_conn_t *c = w;
    c->w->info.force_close = server_closes_after(c); /* again when the head is built */
    int rc = sk_resp_start(&c->w->resp, &c->w->info, status, fields, nfields);
    if (rc == 0 && trailers) {
        rc = sk_resp_announce_trailers(&c->w->resp);
    }
    return rc;
}

static int
h1w_interim(void *w, int status, const sk_header_t *fields, size_t nfields)
{
    http1_conn_t *c = w;
    int rc = sk_resp_interim(sk_transport_out(c->t), status, fields, nfields);
    if (rc < 0) {
        return rc;
    }
    if (sk_transport_write(c->t) < 0 || c->current == NULL) {
        return SK_WIRE_GONE;
    }
    return congested(c);
}

static int
h1w_body(void *w, const char *data, size_t len, int more)
{
    http1_conn_t *c = w;
    before_body(c);
    return after_body(c, sk_resp_body(&c->w->resp, sk_transport_out(c->t), data, len, more,
                                      sk_serve_date(c->srv)));
}

static int
h1w_body_ref(void *w, PyObject *body, int more)
{
    /* The body `body` (an exact bytes object, so immutable): its framing goes to the output and
     * its bytes are queued by reference (sk_transport_send_bytes), to leave with the head in one
     * sendmsg(2): no copy into the output buffer, which then never grows to hold it. Copied as
     * any body for HEAD (whose framing sk_resp_body_ref would take for a file's) and for a piece
     * that is not the last, or when the transport takes no range now (a file range or 8 bytes
     * ranges are queued, or it is closing). */
    http1_conn_t *c = w;
    size_t len = (size_t)PyBytes_GET_SIZE(body);
    if (c->w->info.head || more) {
        return h1w_body(w, PyBytes_AS_STRING(body), len, more);
    }
    char after[SK_RESP_AFTER_MAX];
    size_t alen = 0;
    before_body(c);
    int rc = sk_resp_body_ref(&c->w->resp, sk_transport_out(c->t), len, 0, sk_serve_date(c->srv),
                              after, &alen);
    if (rc < 0) {
        return rc;
    }
    /* sk_transport_out() again after each call: a queued range starts a new output piece */
    if (c->w->resp.framing != SK_FRAME_NONE && sk_transport_send_bytes(c->t, body) < 0) {
        rc = sk_buf_append(sk_transport_out(c->t), PyBytes_AS_STRING(body), len);
    }
    if (rc == 0 && alen > 0) {
        rc = sk_buf_append(sk_transport_out(c->t), after, alen);
    }
    return after_body(c, rc < 0 ? SK_WIRE_BROKEN : 0); /* the framing is out */
}

static int
h1w_file(void *w, int fd, uint64_t off, uint64_t count, int more)
{
    /* The range goes from the file to the socket with sendfile(2) (the transport's file range):
     * never through memory, under the same backpressure, write timeout and close rules as any
     * body. */
    http1_conn_t *c = w;
    char after[SK_RESP_AFTER_MAX];
    size_t alen = 0;
    before_body(c);
    int rc = sk_resp_body_ref(&c->w->resp, sk_transport_out(c->t), count, more,
                              sk_serve_date(c->srv), after, &alen);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    if (c->w->resp.framing != SK_FRAME_NONE && count > 0) {
        if (sk_transport_sendfile(c->t, fd, off, count) < 0) { /* fd closed */
            return SK_WIRE_BUSY;
        }
    }
    else {
        close(fd);
    }
    if (alen > 0 && sk_buf_append(sk_transport_out(c->t), after, alen) < 0) {
        return SK_WIRE_BROKEN;
    }
    return after_body(c, 0);
}

static int
h1w_trailers(void *w, const sk_header_t *fields, size_t nfields, int more)
{
    /* Sent as the chunked trailer section when the request asked for trailers (TE: trailers),
     * else dropped (RFC 9110 §6.5). */
    http1_conn_t *c = w;
    return sk_resp_trailers(&c->w->resp, sk_transport_out(c->t), fields, nfields, more);
}

static int
h1w_push(void *w)
{
    /* A chunk of a response in progress leaves now, even from inside a pass (an eager first
     * step, 3.12+): nothing can join it, and the app's next chunk may be far off. */
    http1_conn_t *c = w;
    if (sk_transport_write_now(c->t) < 0 || c->current == NULL) {
        return SK_WIRE_GONE;
    }
    return congested(c);
}

static int
h1w_end(void *w)
{
    /* settle_output(): a final response with pipelined input behind it is not written alone;
     * one that requests started and not yet stepped will follow within this loop iteration
     * leaves with theirs. Then the connection goes on (conn_request_done). */
    http1_conn_t *c = w;
    if (c->errored) {
        conn_request_done(c, 0); /* skirr's own error response: close after it */
        return 0;
    }
    int keep_alive = c->w->resp.keep_alive;
    int follow = keep_alive && sk_transport_in_len(c->t) > 0;
    if (!follow) {
        int batch = SK_LOAD(c->srv->unstarted) > 0; /* a last response too: its close follows */
        int rc = batch ? sk_transport_write_later(c->t) : sk_transport_write(c->t);
        if (rc < 0 || c->current == NULL) {
            return SK_WIRE_GONE;
        }
    }
    conn_request_done(c, keep_alive);
    return 0;
}

static int
h1w_error(void *w, int status)
{
    /* RFC 9110 §15.6.1 for a 500: a complete response with connection: close. */
    http1_conn_t *c = w;
    if (sk_resp_error_opts(sk_transport_out(c->t), status, c->w->info.head, sk_serve_date(c->srv),
                           &c->srv->resp_opts) < 0) {
        sk_transport_close(c->t, SK_CLOSE_NOW);
        return SK_WIRE_GONE;
    }
    c->errored = 1;
    return 0;
}

static void
h1w_abort(void *w, int reset)
{
    /* A Content-Length or chunked body cut short never looks complete after a FIN; a
     * close-delimited one would (progress() says so): the exchange asks for the reset then. */
    http1_conn_t *c = w;
    sk_transport_abort(c->t, reset);
}

static int
h1w_progress(void *w, uint64_t *body_bytes)
{
    http1_conn_t *c = w;
    *body_bytes = c->w->resp.body_sent;
    return (c->w->resp.head_written ? SK_WIRE_HEAD_OUT : 0) |
           (c->w->resp.framing == SK_FRAME_CLOSE ? SK_WIRE_CLOSE_ENDS : 0);
}

static int
h1w_resume(void *w, int waiting)
{
    http1_conn_t *c = w;
    if (!waiting) {
        /* flow control: the body was consumed, so read and parse more */
        sync_reading(c, 0);
        if (sk_transport_in_len(c->t) > 0) {
            sk_transport_feed_soon(c->t);
        }
        return 0;
    }
    if (c->cont == CONT_EXPECTED && !c->w->resp.head_written) {
        /* RFC 9110 §10.1.1: the app wants the content, so ask the client for it. */
        c->cont = CONT_SENT;
        if (sk_buf_append(sk_transport_out(c->t), SK_CONTINUE_RESPONSE, SK_CONTINUE_RESPONSE_LEN) <
            0) {
            return SK_ENOMEM;
        }
        (void)sk_transport_write(c->t); /* the peer gone: closed() detaches the exchange */
    }
    return 0;
}

static void
h1w_stepped(void *w)
{
    settle_output(w); /* the first step's end releases held output */
}

static const sk_wire_ops_t sk_http1_wire = {
    .start = h1w_start,
    .interim = h1w_interim,
    .body = h1w_body,
    .body_ref = h1w_body_ref,
    .file = h1w_file,
    .trailers = h1w_trailers,
    .push = h1w_push,
    .end = h1w_end,
    .error = h1w_error,
    .abort = h1w_abort,
    .progress = h1w_progress,
    .resume = h1w_resume,
    .stepped = h1w_stepped,
};

static sk_exchange_t *
request_new(http1_conn_t *c)
{
    /* New reference: the exchange for the head just parsed, on this connection's wire, whose
     * per-request state starts afresh; NULL with an exception. Its app is not started yet
     * (sk_exchange_run). */
    const sk_parser_t *p = &c->w->parser;
    sk_req_head_t head;
    c->body_done = 0;
    c->errored = 0;
    c->cont = p->expect_continue ? CONT_EXPECTED : CONT_NONE;
    sk_resp_reset(&c->w->resp);
    c->w->info = (sk_req_info_t){
        .http_minor = p->http_minor,
        .head = (p->method == HTTP_HEAD),
        .keep_alive = p->keep_alive,
        .opts = &c->srv->resp_opts,
    };
    for (uint32_t i = 0; i < p->nfields; i++) {
        /* TE: trailers (RFC 9110 §10.1.4): the client accepts a trailer section */
        sk_span_t name = p->fields[i].name, value = p->fields[i].value;
        if (SK_TOKEN_IEQ(sk_parser_ptr(p, name), name.len, "te") &&
            SK_LIST_HAS_TOKEN(sk_parser_ptr(p, value), value.len, "trailers")) {
            c->w->info.te_trailers = 1;
        }
    }
    if (h1_head(c, &head) < 0) {
        return NULL;
    }
    return sk_exchange_new(c->srv, &head, &sk_http1_wire, c);
}

/* ---- the connection ------------------------------------------------------------------------- */

/* Between requests: the keep-alive deadline, or the head deadline if the next request began. */
static void
arm_idle(http1_conn_t *c, int fresh)
{
    if (sk_transport_in_len(c->t) > 0 || !parser_idle(c)) {
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
    sk_exchange_t *r = c->current;
    if (r == NULL) {
        return;
    }
    /* A body the app did not read is read and discarded so the connection stays usable, unless
     * server_closes_after() says otherwise. */
    int reuse = keep_alive && !server_closes_after(c);
    if (reuse && !c->body_done) {
        c->discarding = 1;
    }
    c->current = NULL; /* the exchange detached itself before its end */
    Py_DECREF((PyObject *)r);
    if (c->closed) {
        return;
    }
    sync_reading(c, 0);
    if (!reuse) {
        /* The client's own "close" (or HTTP/1.0 without keep-alive) on a request read whole, with
         * nothing behind it: no linger needed (SK_CLOSE_AFTER_LAST; the transport checks the
         * socket too). Anything else the server decided, or input still coming, lingers. */
        int last = c->w != NULL && !c->w->info.keep_alive && c->body_done &&
                   sk_transport_in_len(c->t) == 0;
        sk_transport_close(c->t, last ? SK_CLOSE_AFTER_LAST : SK_CLOSE_AFTER_WRITE);
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
    int status = sk_ws_handshake_check(&c->w->parser, &hs, &why);
    if (status == 400) {
        refuse_why(c, 400, why);
        return;
    }
    if (status == 426) {
        note_refusal(c, 426, why); /* the 426 itself, with its field, is the handler's */
    }
    sk_req_head_t head;
    if (status == 0 &&
        (h1_head(c, &head) < 0 || (scope = sk_exchange_scope(c->srv, &head, NULL)) == NULL)) {
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
    sk_exchange_t *to_run = NULL; /* strong: a request whose app starts once these are parsed */
    /* Runs until the parser says it needs more input (SK_EV_NONE): after a head or body event
     * the parser may have an event due with no bytes left (the end of a Content-Length body). */
    while (sk_transport_is_open(c->t)) {
        sk_exchange_t *r = c->current;
        if (r != NULL && c->body_done) {
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
        int paused = (r != NULL && sk_exchange_buffered(r) >= BODY_HIGH_WATER);
        sk_event_t ev;
        size_t n = sk_parser_execute(&c->w->parser, data + total, paused ? 0 : len - total, &ev);
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
            if (srv->limit_concurrency > 0 &&
                SK_LOAD(srv->active_requests) >= srv->limit_concurrency) {
                refuse(c, 503); /* --limit-concurrency: over capacity, try again later */
                break;
            }
            SK_ADD(srv->total_requests, 1);
            if (srv->ws.enabled && sk_ws_is_upgrade(&c->w->parser)) {
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
            to_run = (sk_exchange_t *)Py_NewRef((PyObject *)r);
        }
        else if (ev.type == SK_EV_BODY) {
            if (r != NULL && sk_exchange_body(r, ev.data, ev.len) < 0) {
                PyErr_WriteUnraisable(c->srv->owner);
                refuse(c, 500);
                break;
            }
        }
        else if (ev.type == SK_EV_END) {
            if (r != NULL) {
                c->body_done = 1;
                sk_exchange_body_end(r);
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
        if (c->current == to_run && sk_transport_is_open(c->t) && sk_exchange_run(to_run) < 0) {
            PyErr_WriteUnraisable(c->srv->owner);
            refuse(c, 500);
        }
        Py_DECREF((PyObject *)to_run);
    }
    return total;
}

/* ---- the handler table ---------------------------------------------------------------------- */

/* Whether the connection speaks HTTP/2 (RFC 9113 §3), decided once, before any parsing: on TLS
 * by ALPN ("h2" selected; with --http 2 any connection), on cleartext by the first bytes being
 * the client preface (prior knowledge, §3.3; with --http 2 any first bytes: a wrong preface gets
 * GOAWAY PROTOCOL_ERROR from the HTTP/2 handler). Returns 1 when the connection was handed to
 * the HTTP/2 handler (or closed), 0 to parse HTTP/1.1, -1 to wait for more bytes (what arrived
 * is a strict prefix of the preface). `Upgrade: h2c` is never looked at (§3.1: HTTP/1.1). */
static int
h2_switch(http1_conn_t *c, const char *data, size_t len)
{
    uint8_t mode = c->srv->h2.mode;
    if (c->proto_known || mode == SK_HTTP_1) {
        c->proto_known = 1;
        return 0;
    }
    SSL *ssl = sk_tls_ssl(sk_transport_stream(c->t));
    int h2 = mode == SK_HTTP_2;
    if (ssl != NULL) {
        const unsigned char *alpn = NULL;
        unsigned int alen = 0;
        SSL_get0_alpn_selected(ssl, &alpn, &alen);
        h2 = h2 || (alen == 2 && memcmp(alpn, "h2", 2) == 0);
    }
    else if (!h2) {
        size_t n = len < SK_H2_PREFACE_LEN ? len : SK_H2_PREFACE_LEN;
        if (memcmp(data, SK_H2_PREFACE, n) == 0) {
            if (n < SK_H2_PREFACE_LEN) {
                return -1;
            }
            h2 = 1;
        }
    }
    c->proto_known = 1;
    if (!h2) {
        return 0;
    }
    sk_transport_clear_deadline(c->t);
    if (sk_h2_start(c->t, c->srv) < 0) {
        sk_transport_close(c->t, SK_CLOSE_NOW);
    }
    else {
        c->switched = 1;
    }
    return 1;
}

static size_t
h1_data_received(void *h, const char *data, size_t len)
{
    /* Parses until the input is used up or a request blocks further parsing (its response is
     * pending, or its unconsumed body is over the high-water mark). A request whose eagerly
     * started app answered at once lets the next pipelined one go in the same pass. */
    http1_conn_t *c = h;
    size_t total = 0;
    if (!c->proto_known) {
        int sw = h2_switch(c, data, len);
        if (sw != 0) {
            return 0; /* HTTP/2 has the connection and every byte, or more bytes are needed */
        }
    }
    if (c->w == NULL && work_new(c) < 0) {
        sk_transport_close(c->t, SK_CLOSE_NOW); /* no memory for a parser: nothing was read */
        return 0;
    }
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
        SK_ADD(c->srv->metrics->bytes_in, total);
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
    sk_exchange_t *r = c->current;
    if (r != NULL) {
        if (sk_transport_out_len(c->t) < SK_OUTPUT_HIGH_WATER && !sk_transport_file_pending(c->t)) {
            sk_exchange_drained(r);
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
            sk_access_trace(&c->srv->access, NULL, sk_transport_peer(c->t, &plen),
                            "HTTP connection idle: closed for the shutdown");
        }
        sk_transport_close(c->t, SK_CLOSE_NOW);
        return;
    }
    if (c->srv->metrics != NULL) {
        static const int kinds[] = {[DL_HEAD] = SK_TIMEOUT_HEAD,
                                    [DL_KEEPALIVE] = SK_TIMEOUT_KEEPALIVE,
                                    [DL_BODY] = SK_TIMEOUT_BODY};
        SK_ADD(c->srv->metrics->timeouts[kinds[kind]], 1);
    }
    if (kind == DL_BODY) {
        /* No body byte for --timeout-request-body seconds: the app's receive() gets
         * http.disconnect; 408 (RFC 9110 §15.5.9) if its response has not begun. */
        if (c->current != NULL && !c->w->resp.head_written) {
            refuse(c, 408);
        }
        else {
            sk_transport_close(c->t, SK_CLOSE_NOW);
        }
        return;
    }
    if (kind == DL_HEAD && !c->discarding && (sk_transport_in_len(c->t) > 0 || !parser_idle(c))) {
        refuse(c, 408); /* RFC 9110 §15.5.9: some of a request head, never all of it */
        return;
    }
    if (c->srv->trace != NULL) {
        socklen_t plen;
        sk_access_trace(&c->srv->access, NULL, sk_transport_peer(c->t, &plen),
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
    if (sk_transport_in_len(c->t) > 0 || !parser_idle(c)) {
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
tls_closed(http1_conn_t *c, char *event, size_t size)
{
    /* A connection the TLS layer failed (sk_tls.h): writes the trace event saying why into
     * event (size bytes) and logs a failed handshake at DEBUG (skirr.error's logger: one line
     * per refused client, never above DEBUG so a scan cannot flood the log); a plain HTTP
     * request on the TLS port is a refusal like any 400 skirr answers (metrics, access log).
     * event is left empty when the layer did not fail (a socket error, a FIN). */
    const sk_stream_t *s = sk_transport_stream(c->t);
    const char *why = sk_tls_last_error(s);
    socklen_t plen;
    const struct sockaddr *peer = sk_transport_peer(c->t, &plen);
    event[0] = '\0';
    if (why == NULL || !sk_tls_protocol_error(s)) {
        return; /* not refused: a FIN (with or without close_notify) or a socket error */
    }
    if (sk_tls_plain_http(s)) {
        if (c->srv->metrics != NULL) {
            sk_metrics_refusal(c->srv->metrics, 400);
        }
        if (c->srv->access.pending != NULL) {
            sk_access_refusal(&c->srv->access, NULL, peer, NULL, 400,
                              sizeof(SK_TLS_PLAIN_HTTP_BODY) - 1,
                              "plain HTTP request on the TLS port");
        }
        snprintf(event, size, "HTTP request refused: 400 (plain HTTP request on the TLS port)");
        return;
    }
    int handshake = !sk_tls_established(s);
    snprintf(event, size, "HTTP connection lost (TLS %s: %s)",
             handshake ? "handshake failed" : "error", why);
    if (handshake && c->srv->logger != Py_None) {
        /* the peer as the trace line writes it: host:port, [v6]:port */
        PyObject *client = sk_asgi_address(peer); /* new: (host, port) or None */
        PyObject *where = NULL, *res = NULL;
        if (client != NULL && PyTuple_Check(client) && PyTuple_GET_SIZE(client) == 2) {
            PyObject *host = PyTuple_GET_ITEM(client, 0), *port = PyTuple_GET_ITEM(client, 1);
            /* two literal formats: the ASCII check of every format (issue 35) reads literals */
            if (PyUnicode_FindChar(host, ':', 0, PY_SSIZE_T_MAX, 1) >= 0) {
                where = PyUnicode_FromFormat("[%U]:%S", host, port);
            }
            else {
                where = PyUnicode_FromFormat("%U:%S", host, port);
            }
        }
        else if (client != NULL) {
            where = PyUnicode_FromString("unix");
        }
        if (where != NULL) {
            PyObject *msg = PyUnicode_FromString("%s - TLS handshake failed: %s");
            PyObject *text = msg ? PyUnicode_FromString(why) : NULL;
            res = text ? PyObject_CallMethodObjArgs(c->srv->logger, c->srv->st->s_debug, msg, where,
                                                    text, NULL)
                       : NULL; /* new */
            Py_XDECREF(text);
            Py_XDECREF(msg);
        }
        if (res == NULL) {
            PyErr_WriteUnraisable(c->srv->logger);
        }
        Py_XDECREF(res);
        Py_XDECREF(where);
        Py_XDECREF(client);
    }
}

static void
h1_closed(void *h, int reason)
{
    http1_conn_t *c = h;
    char tls_event[160];
    c->closed = 1;
    if (c->srv->metrics != NULL && reason == SK_CLOSED_WRITE_TIMEOUT) {
        SK_ADD(c->srv->metrics->timeouts[SK_TIMEOUT_WRITE], 1);
    }
    tls_closed(c, tls_event, sizeof(tls_event));
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
        sk_access_trace(&c->srv->access, NULL, sk_transport_peer(c->t, &plen),
                        tls_event[0] != '\0' ? tls_event
                        : known              ? why[reason]
                                             : "HTTP connection closed");
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
    drop_current(c); /* c->current becomes NULL */
}

static void
h1_release(void *h)
{
    http1_conn_t *c = h;
    assert(c->current == NULL);
    work_free(c);
    Py_CLEAR(c->client);
    Py_CLEAR(c->local);
    Py_CLEAR(c->tls);
    sk_transport_handler_free(c->t, c);
}

static size_t
h1_idle(void *h)
{
    /* Between requests only (none current, the parser between messages, no body being dropped,
     * no input held back): the work storage (parser, head block and field array, response head)
     * and the scope's addresses are made again by the next request, the parser fresh (between
     * messages it holds nothing of the last one: llhttp_init's state). The TLS extension stays:
     * its certificates' PEM strings are made once per connection (ASGI-tls-extension). */
    http1_conn_t *c = h;
    if (c->current != NULL || c->closed || c->switched || c->discarding || c->held_back ||
        !parser_idle(c)) {
        return 0;
    }
    size_t freed = work_free(c);
    Py_CLEAR(c->client);
    Py_CLEAR(c->local);
    return freed;
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
    .idle = h1_idle,
    .traverse = h1_traverse,
};

void *
sk_http1_open(void *owner, sk_transport_t *t)
{
    sk_serve_t *srv = owner;
    http1_conn_t *c = sk_transport_handler_alloc(t, sizeof(http1_conn_t));
    if (c == NULL) {
        return NULL;
    }
    c->t = t;
    c->srv = srv; /* c->w: made by the first bytes (h1_data_received) */
    sk_transport_set_deadline(t, DL_HEAD, srv->head_timeout);
    if (srv->trace != NULL) {
        socklen_t plen;
        sk_access_trace(&srv->access, NULL, sk_transport_peer(t, &plen), "HTTP connection made");
    }
    return c;
}
