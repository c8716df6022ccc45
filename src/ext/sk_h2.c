/* sk_h2.c — the HTTP/2 protocol handler (RFC 9113) on nghttp2: see sk_h2.h.
 *
 * Owns, per connection: the nghttp2 server session (sans-I/O: mem_recv from data_received(),
 * mem_send into the transport's output by pump(); a DATA frame's payload goes from the stream's
 * queue or file range into that output once, or from a final body held by reference as a slice
 * the transport sends in place, by send_data(), never through nghttp2's frame buffer:
 * NGHTTP2_DATA_FLAG_NO_COPY), the streams (one h2_stream_t each, nghttp2's
 * stream user data, freed when nghttp2 closes the stream), the exchanges whose app still runs
 * after their stream ended (`running`: they count against the concurrency limit), the budgets
 * (sk_h2guard.h), the idle / head / shutdown deadlines and the graceful shutdown's two GOAWAYs.
 * Per stream it implements the exchange's wire table (h2_wire) with nghttp2's submit calls.
 * Never: touches a socket or the reactor (only sk_transport_*), or reads an exchange's state
 * except through sk_exchange.h.
 *
 * Re-entrancy: nghttp2 may not be driven from inside its own callbacks, and an app started
 * eagerly (3.12+) answers inside the call that started it. So streams are started after
 * mem_recv returns (run_pending), and while data_received() is on the stack (c->in_recv) the wire
 * entries only queue (nghttp2_submit_*): data_received() pumps once at its end. Outside it every
 * entry pumps and writes; pump() may close streams (freeing them), so an entry reads nothing of
 * its stream after it.
 *
 * State of a stream's response:
 *   head  held (start() recorded it) -> submitted (HEADERS queued: s->submitted)
 *   body  pieces queued in s->body (then a file range, then s->after), or a final body held
 *         by reference alone (s->ref) -> final (s->body_end); data_read() sizes each DATA
 *         frame, send_data() moves its bytes to the output
 *   end   END_STREAM on the HEADERS (bodyless), on the last DATA, or on the trailers' HEADERS
 */
#include "sk_h2.h"

#include "sk_asgi.h"
#include "sk_exchange.h"
#include "sk_h2guard.h"
#include "sk_http.h"
#include "sk_resp.h"
#include "sk_tlsctx.h"
#include "sk_token.h"

#include <nghttp2/nghttp2.h>

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The handler's deadline kinds (sk_transport_set_deadline). */
enum {
    DL_IDLE = 1, /* no stream open: GOAWAY NO_ERROR after --timeout-keep-alive */
    DL_HEAD,     /* a request's header block begun and not complete: --timeout-request-head */
    DL_SHUTDOWN, /* the shutdown notice's PING not answered: the final GOAWAY at once */
    DL_STALL,    /* response content waits on a window the peer keeps closed: --timeout-write */
    DL_BODY,     /* a stream's request content stopped while its window is open:
                  * --timeout-request-body (per stream: the earliest stream's) */
};

/* Seconds the graceful shutdown waits for the PING after its first GOAWAY (RFC 9113 §6.8: one
 * round trip) before the final GOAWAY. */
#define SHUTDOWN_RTT 1.0
/* nghttp2's own limits (the attacks it counts itself; sk_h2guard.h counts the rest). */
/* RST_STREAM frames received in a burst (CVE-2023-44487), refilled per second: above the guard's
 * client_reset budget (sk_h2guard.c: 500, 100/s) so the guard answers first, with GOAWAY
 * ENHANCE_YOUR_CALM (nghttp2's own answer is an INTERNAL_ERROR that names no cause) */
#define RESET_BURST 2000
#define RESET_RATE 200
#define MAX_CONTINUATIONS 8       /* CONTINUATION frames per header block (CVE-2024-27316) */
#define MAX_SETTINGS 32           /* entries per SETTINGS frame */
#define MAX_OUTBOUND_ACK 1000     /* SETTINGS/PING ACKs queued unsent (a peer that never reads) */
#define DISCARD_MAX (1024 * 1024) /* request content dropped after a complete response (bytes) */
#define FIELD_OVERHEAD 32 /* RFC 9113 §6.5.2: bytes added per field to its name and value */
#define FRAME_HEAD 9      /* RFC 9113 §4.1: a frame's header (bytes) */
/* A DATA payload from a body held by reference at least this long (bytes) is queued by reference
 * (sk_transport_send_slice); a shorter one is copied, cheaper than a range of its own. */
#define SLICE_MIN 4096
/* Ranges of stream ids a client skipped that a connection remembers, 8 bytes each (the newest:
 * RFC 9113 §5.1.1 lets a client skip ids, only using one later is the error; past this many
 * ranges the oldest is forgotten, and a HEADERS naming one of its ids is ignored, as nghttp2
 * does: detection is lost, never a false error). */
#define SKIPPED_MAX 8
/* Client streams (the newest, up to the highest id a HEADERS named) whose client side ended, one
 * bit each: a HEADERS on one is a connection error STREAM_CLOSED (RFC 9113 §5.1); an older one
 * gets nghttp2's answer (STREAM_CLOSED while it keeps the closed stream, else ignored). */
#define ENDED_WINDOW 512

typedef struct h2_conn h2_conn_t;

/* One stream. Made at the first HEADERS (on_begin_headers), freed when nghttp2 closes it
 * (on_stream_close) or with the connection (release). */
typedef struct h2_stream {
    struct h2_stream *prev, *next; /* the connection's list of open streams */
    h2_conn_t *c;                  /* borrowed */
    int32_t id;
    sk_exchange_t *x; /* strong while attached: the request's exchange */
    /* the request head, as received: names and values in `head` (spans into it) */
    sk_buf_t head;
    sk_field_t *fields; /* PyMem array, nfields used */
    uint32_t nfields, fields_cap;
    sk_span_t method, path, authority, scheme;
    uint8_t has_method, has_path, has_authority, has_scheme;
    int64_t cookie_at;     /* index in fields of the joined cookie field (its first crumb), or -1 */
    sk_buf_t cookie;       /* the crumbs joined with "; " (RFC 9113 §8.2.3) */
    uint64_t head_size;    /* bytes of the header list, RFC 9113 §6.5.2's measure */
    uint8_t head_open;     /* the header block is being received */
    uint8_t too_big;       /* over --http2-max-headers-size: answered 431 */
    uint8_t head_valid;    /* the complete head passed malformed(): :method and :path are set
                            * and a refusal's access line names them (note_refusal) */
    uint8_t run_pending;   /* the exchange is to be started once mem_recv returns */
    uint8_t body_done;     /* END_STREAM received: the request content ended */
    uint8_t is_head;       /* the method was HEAD */
    size_t given;          /* request body bytes given to the exchange and not yet consumed */
    uint8_t answered;      /* the response's END_STREAM was sent: the rest of the request is
                          * dropped, up to DISCARD_MAX bytes (drop_rest) */
    uint8_t rst_sent;      /* skirr reset it (drop_rest, lingers() timed out, on_frame_not_send) */
    uint8_t reset_pending; /* abort() inside data_received(): RST_STREAM once the queue is out */
    uint64_t discarded;    /* request content bytes dropped since the response ended */
    double body_at;        /* monotonic seconds: the request body's deadline, 0 = not armed */
    double stall_at;    /* monotonic seconds: --timeout-write's due time while its own window keeps
                      * its content back (restarted only by its own DATA leaving), 0 = none */
    uint8_t timed_out;  /* --timeout-request-body ended it: the rest is reset, not read */
    uint8_t expect_100; /* 'expect: 100-continue' came with content to follow, and no 100 was
                            * sent nor content received yet (RFC 9110 §10.1.1: h2w_resume) */
    uint64_t body_recv; /* request content bytes received (--limit-request-body) */
    /* the response */
    int status;
    char status_str[4];
    sk_buf_t rh;    /* the response fields: lowercase names and values */
    sk_field_t *rf; /* PyMem array, nrf used (spans into rh) */
    uint32_t nrf, rf_cap;
    sk_buf_t th; /* the trailer fields, likewise */
    sk_field_t *tf;
    uint32_t ntf, tf_cap;
    size_t tf_size;               /* their size so far, SK_FIELD_SIZE's measure (bytes) */
    uint8_t app_date, app_server; /* the app sent date / server */
    uint8_t started;              /* start() recorded a head */
    uint8_t submitted;            /* the HEADERS are queued */
    uint8_t bodyless;             /* HEAD, 204, 304: no DATA */
    uint8_t body_end;             /* the final body piece was given */
    uint8_t trailers;             /* trailers announced */
    uint8_t file_whole;           /* the content is one file range given whole (pathsend, or a
                                   * zerocopysend alone): HEAD says its length too */
    uint8_t trailers_end;         /* the last trailers piece was given */
    uint8_t deferred;     /* the data source said NGHTTP2_ERR_DEFERRED: resume_data wakes it */
    uint8_t progress;     /* DATA of its left since sync_deadline() last looked */
    uint8_t waiting;      /* a send() waits for drain (SK_WIRE_WAIT given) */
    uint8_t own;          /* the response is skirr's own (refusal, error()) */
    uint8_t app_reset;    /* skirr reset the stream for the app (not the client's doing) */
    int64_t clen;         /* the app's content-length, or -1 */
    size_t head_out_size; /* the response field section h2w_start() measured (SK_FIELD_SIZE's
                           * measure, bytes) */
    uint64_t body_sent;   /* content bytes accepted */
    sk_buf_t body;        /* content waiting for the peer's window */
    PyObject *ref;        /* strong, or NULL: the final body given by reference (body_ref) while
                           * nothing else was queued, sent in place from ref_off: then the
                           * stream's only content (body empty, no file range) */
    size_t ref_off;       /* bytes of ref already sent */
    int fd;               /* a file range being sent (after body), or -1 */
    uint64_t foff, fleft; /* its next offset and bytes left */
    sk_buf_t after;       /* content given while the file range is pending (sent after it) */
} h2_stream_t;

/* One connection's HTTP/2 state. Freed by release() when the reactor reaps the transport. */
struct h2_conn {
    sk_transport_t *t; /* borrowed: outlives this */
    sk_serve_t *srv;   /* borrowed: owned by the Server */
    nghttp2_session *ng;
    h2_stream_t *streams; /* open streams, newest first */
    uint32_t nstreams;    /* how many */
    uint32_t heads_open;  /* streams whose header block is not complete */
    size_t given;         /* request content given to the exchanges and not yet consumed, over
                           * all streams (the sum of their s->given): bytes */
    PyObject **running;   /* strong: exchanges detached while their app still ran */
    size_t nrunning, running_cap;
    PyObject *client; /* strong: scope "client" (None for UDS) */
    PyObject *local;  /* strong: scope "server" */
    PyObject *tls;    /* strong: the ASGI `tls` extension, or NULL on cleartext */
    sk_h2guard_t guard;
    uint8_t closed;         /* the transport told closed() */
    uint8_t in_recv;        /* data_received() is on the stack: entries only queue */
    uint8_t in_pump;        /* pump() is on the stack */
    uint8_t data_paused;    /* send_data() paused mem_send at SK_OUTPUT_HIGH_WATER */
    uint8_t shutdown;       /* 1: the notice GOAWAY (2^31-1) and its PING sent; 2: the final one */
    uint8_t goaway_due;     /* the notice PING's ACK was read: the final GOAWAY once mem_recv
                             * returns (h2_data_received) */
    uint8_t ended;          /* skirr ended the session (its GOAWAY is queued): a budget went
                             * over (ENHANCE_YOUR_CALM), a skipped stream id was used
                             * (PROTOCOL_ERROR) or an ended one (STREAM_CLOSED); no byte more
                             * is read */
    uint8_t progress;       /* DATA left since the stall deadline was last set */
    uint8_t resets_pending; /* some stream has reset_pending */
    uint32_t ping_seq;      /* opaque data of the shutdown PING */
    /* RFC 9113 §5.1.1: the highest stream id a client's HEADERS named (-1: none yet), and the
     * ids it skipped on the way ([lo, hi], odd, oldest first; SKIPPED_MAX at most) */
    int32_t last_headers_id;
    int32_t skipped[SKIPPED_MAX][2];
    uint8_t nskipped;
    /* RFC 9113 §5.1: bit (id / 2) % ENDED_WINDOW of each client stream id within ENDED_WINDOW
     * streams of last_headers_id is set once the client's side of it ended (its END_STREAM or
     * RST_STREAM received); cleared as the window moves past it */
    uint8_t client_ended[ENDED_WINDOW / 8];
    /* monotonic seconds each pending deadline falls due (0 = not pending); the transport's one
     * deadline is the earliest (dl_kind at dl_at) */
    double head_at, stall_at, idle_at, dl_at;
    int dl_kind;
};

static void pump(h2_conn_t *c);

/* ---- small pieces ----------------------------------------------------------------------------- */

static int
fields_push(sk_field_t **v, uint32_t *n, uint32_t *cap, sk_field_t f)
{
    /* Appends f to the PyMem array *v. 0 or SK_ENOMEM. */
    if (*n == *cap) {
        uint32_t ncap = *cap ? *cap * 2 : 16;
        if (ncap > UINT32_MAX / 2) {
            return SK_ENOMEM;
        }
        sk_field_t *nv = PyMem_Realloc(*v, (size_t)ncap * sizeof(sk_field_t));
        if (nv == NULL) {
            return SK_ENOMEM;
        }
        *v = nv;
        *cap = ncap;
    }
    (*v)[(*n)++] = f;
    return 0;
}

static int
buf_span(sk_buf_t *b, const void *p, size_t n, sk_span_t *out)
{
    /* Appends n bytes to b and describes them as a span from b's start. 0 or SK_ENOMEM. */
    size_t off = sk_buf_len(b);
    if (off > UINT32_MAX - n || sk_buf_append(b, p, n) < 0) {
        return SK_ENOMEM;
    }
    out->off = (uint32_t)off;
    out->len = (uint32_t)n;
    return 0;
}

static const char *
span_ptr(const sk_buf_t *b, sk_span_t s)
{
    return sk_buf_head(b) != NULL ? sk_buf_head(b) + s.off : "";
}

static double
now(void)
{
    return sk_access_now();
}

static void
guard(h2_conn_t *c, int kind)
{
    /* Counts one event against the connection's budgets (sk_h2guard.h); over budget: GOAWAY
     * ENHANCE_YOUR_CALM (RFC 9113 §7), and nothing more is read (c->ended: on_frame_recv then
     * stops mem_recv). */
    if (c->ended || c->closed) {
        return;
    }
    uint32_t code = sk_h2guard_count(&c->guard, kind, now());
    if (code != 0) {
        c->ended = 1;
        (void)nghttp2_session_terminate_session(c->ng, code);
        if (c->srv->trace != NULL) {
            char event[120];
            socklen_t plen;
            snprintf(event, sizeof(event),
                     "HTTP/2 connection refused: GOAWAY ENHANCE_YOUR_CALM (%s)",
                     sk_h2guard_name(kind));
            sk_access_trace(&c->srv->access, c->client, sk_transport_peer(c->t, &plen), event);
        }
    }
}

static int
keep_running(h2_conn_t *c, sk_exchange_t *x)
{
    /* Moves the reference to x (stolen) to the running list while its app call runs (it counts
     * as a stream until then); else drops it. 0, or -1 when out of memory (dropped). */
    if (!sk_exchange_running(x)) {
        Py_DECREF((PyObject *)x);
        return 0;
    }
    if (c->nrunning == c->running_cap) {
        size_t ncap = c->running_cap ? c->running_cap * 2 : 8;
        PyObject **nv = PyMem_Realloc(c->running, ncap * sizeof(PyObject *));
        if (nv == NULL) {
            Py_DECREF((PyObject *)x);
            return -1;
        }
        c->running = nv;
        c->running_cap = ncap;
    }
    c->running[c->nrunning++] = (PyObject *)x;
    return 0;
}

static uint32_t
active_streams(h2_conn_t *c)
{
    /* The streams that count against --http2-max-concurrent-streams: those open, and those
     * whose app call still runs after the stream ended before the app's response did (a reset:
     * detach; the list is pruned here). */
    size_t k = 0;
    for (size_t i = 0; i < c->nrunning; i++) {
        PyObject *x = c->running[i];
        if (sk_exchange_running((sk_exchange_t *)x)) {
            c->running[k++] = x;
        }
        else {
            Py_DECREF(x);
        }
    }
    c->nrunning = k;
    size_t n = c->nstreams + k;
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

static void
consume(h2_conn_t *c, int32_t id, size_t n)
{
    /* Gives n bytes of request content back to the peer's windows (a WINDOW_UPDATE when nghttp2
     * judges it due): the stream's while it is open, else the connection's. */
    if (n == 0 || c->closed) {
        return;
    }
    if (nghttp2_session_consume(c->ng, id, n) != 0) {
        (void)nghttp2_session_consume_connection(c->ng, n);
    }
}

static void
give_back(h2_stream_t *s, size_t n)
{
    /* n bytes of the request content given to the stream's exchange were taken (or are no
     * longer wanted): they go back to the windows. */
    s->given -= n;
    s->c->given -= n;
    consume(s->c, s->id, n);
}

static void
ack_connection(h2_conn_t *c)
{
    /* RFC 9113 §6.9.1: nghttp2 sends the connection's WINDOW_UPDATE once half its window is
     * consumed. While the apps hold more than half of it unread (c->given: streams whose app
     * does not call receive()), the consumed bytes of the reading streams never reach that
     * half and every upload on the connection stalls. So the consumed bytes are acknowledged
     * (an increment no larger than the bytes received: the window does not grow, nghttp2
     * takes them off its own count) once they are half of what the unread content leaves:
     * with nothing unread, nghttp2's own threshold; never zero while some is left, so the
     * peer's window never closes on consumed content. */
    int64_t w = nghttp2_session_get_effective_local_window_size(c->ng);
    int64_t acked_due = (int64_t)nghttp2_session_get_effective_recv_data_length(c->ng) -
                        (int64_t)c->given; /* received, neither held nor acknowledged */
    int64_t left = w - (int64_t)c->given;
    if (acked_due > 0 && 2 * acked_due >= left) {
        (void)nghttp2_submit_window_update(c->ng, NGHTTP2_FLAG_NONE, 0, (int32_t)acked_due);
    }
}

static void
detach(h2_stream_t *s)
{
    /* The stream's exchange loses its wire (if it still had it): http.disconnect for receive(),
     * ClientDisconnected for a send(). Its unread content goes back to the windows and is
     * dropped (a reset stream's content credited back and still buffered would let a client
     * make skirr hold streams x stream window: stop 58's attack, 100 MiB a connection). */
    h2_conn_t *c = s->c;
    sk_exchange_t *x = s->x;
    give_back(s, s->given);
    if (x != NULL) {
        s->x = NULL;
        sk_exchange_drop_body(x);
        sk_exchange_gone(x);
        (void)keep_running(c, x);
    }
}

static size_t
ref_len(const h2_stream_t *s)
{
    /* Bytes of the final body held by reference (s->ref) not yet sent. */
    return s->ref != NULL ? (size_t)PyBytes_GET_SIZE(s->ref) - s->ref_off : 0;
}

static size_t
queue_len(const h2_stream_t *s)
{
    /* Content bytes queued in memory ahead of any file range: s->body's, or s->ref's. */
    return sk_buf_len(&s->body) + ref_len(s);
}

static void
stream_free(h2_stream_t *s)
{
    /* Frees s (unlinked by the caller; its exchange detached). */
    if (s->fd >= 0) {
        close(s->fd);
    }
    Py_XDECREF(s->ref);
    sk_buf_free(&s->head);
    sk_buf_free(&s->cookie);
    sk_buf_free(&s->rh);
    sk_buf_free(&s->th);
    sk_buf_free(&s->body);
    sk_buf_free(&s->after);
    PyMem_Free(s->fields);
    PyMem_Free(s->rf);
    PyMem_Free(s->tf);
    PyMem_Free(s);
}

static void
unlink_stream(h2_conn_t *c, h2_stream_t *s)
{
    if (s->prev != NULL) {
        s->prev->next = s->next;
    }
    else {
        c->streams = s->next;
    }
    if (s->next != NULL) {
        s->next->prev = s->prev;
    }
    c->nstreams--;
    if (s->head_open) {
        c->heads_open--;
    }
}

static int
wants_body(h2_conn_t *c, const h2_stream_t *s)
{
    /* 1 while --timeout-request-body runs for s: its app may read the request content, the
     * content has not ended and both the stream's window and the connection's let the peer send
     * (RFC 9113 §6.9.1: a window the apps keep closed by not reading, this stream's or others',
     * is not the peer's stall: flow_control.toml's pause). */
    return s->x != NULL && !s->body_done && !s->timed_out && c->srv->body_timeout > 0 &&
           nghttp2_session_get_stream_local_window_size(c->ng, s->id) > 0 &&
           nghttp2_session_get_local_window_size(c->ng) > 0;
}

static int
lingers(h2_conn_t *c, const h2_stream_t *s)
{
    /* 1 while a stream answered with no app to read the rest of its request (its response's
     * END_STREAM sent: drop_rest's) waits for that rest: it must keep coming within
     * --timeout-request-body (each DATA restarts it), else RST_STREAM NO_ERROR (RFC 9113 §8.1),
     * as HTTP/1.1 stops reading an unread body after the same time. Without it a client that
     * sends nothing more holds the stream, so the connection, open for good (no idle timeout
     * while a stream is open). */
    return s->x == NULL && s->answered && !s->body_done && !s->rst_sent && c->srv->body_timeout > 0;
}

static void
sync_deadline(h2_conn_t *c)
{
    /* Each pending deadline has its own due time and the transport's one deadline is the
     * earliest: idle while no stream is open (counted from the last stream's end, however
     * quickly it was answered), head while a header block is being received, the write timeout
     * while response content waits on a closed window (restarted by any DATA that leaves, and
     * per stream while its own window is closed, restarted only by its own DATA), and
     * per stream the request body's (restarted by each DATA received on it), also for the rest
     * of an answered stream's request (lingers); the shutdown's own once it began. */
    if (c->closed || !sk_transport_is_open(c->t) || c->shutdown == 1) {
        return;
    }
    double t = now();
    int progress = c->progress;
    c->progress = 0;
    if (c->heads_open > 0) {
        if (c->head_at == 0) {
            c->head_at = t + c->srv->head_timeout;
        }
    }
    else {
        c->head_at = 0;
    }
    if (c->nstreams == 0) {
        if (c->idle_at == 0) {
            c->idle_at = t + c->srv->keep_alive;
        }
    }
    else {
        c->idle_at = 0;
    }
    int kind = 0, held_back = 0;
    double at = 0, stall = 0;
    int conn_closed = nghttp2_session_get_remote_window_size(c->ng) <= 0;
    for (h2_stream_t *s = c->streams; s != NULL; s = s->next) {
        /* Response content a closed window keeps back (RFC 9113 §6.9): the connection's or the
         * stream's own. The connection's bound is restarted by any DATA that leaves (the shared
         * window); a stream whose own window is closed also has its own, restarted only by its
         * own DATA, so streams the client lets progress do not keep it open for good. */
        int queued = (queue_len(s) > 0 || s->fd >= 0) && s->submitted;
        int own = queued && nghttp2_session_get_stream_remote_window_size(c->ng, s->id) <= 0;
        held_back |= queued && (conn_closed || own);
        if (own) {
            if (s->stall_at == 0 || s->progress) {
                s->stall_at = t + c->srv->h2.write_timeout;
            }
            stall = stall == 0 || s->stall_at < stall ? s->stall_at : stall;
        }
        else {
            s->stall_at = 0;
        }
        s->progress = 0;
        if (!wants_body(c, s) && !lingers(c, s)) {
            s->body_at = 0;
            continue;
        }
        if (s->body_at == 0) {
            s->body_at = t + c->srv->body_timeout;
        }
        if (kind == 0 || s->body_at < at) {
            kind = DL_BODY;
            at = s->body_at;
        }
    }
    if (held_back) {
        if (c->stall_at == 0 || progress) {
            c->stall_at = t + c->srv->h2.write_timeout;
        }
        stall = stall == 0 || c->stall_at < stall ? c->stall_at : stall;
    }
    else {
        c->stall_at = 0;
    }
    const struct {
        int kind;
        double at;
    } other[3] = {{DL_HEAD, c->head_at}, {DL_STALL, stall}, {DL_IDLE, c->idle_at}};
    for (size_t i = 0; i < 3; i++) {
        if (other[i].at != 0 && (kind == 0 || other[i].at < at)) {
            kind = other[i].kind;
            at = other[i].at;
        }
    }
    if (kind == 0) {
        if (sk_transport_deadline_kind(c->t) != 0) {
            sk_transport_clear_deadline(c->t);
        }
    }
    else if (kind != c->dl_kind || at != c->dl_at || sk_transport_deadline_kind(c->t) != kind) {
        sk_transport_set_deadline(c->t, kind, at > t ? at - t : 0);
    }
    c->dl_kind = kind;
    c->dl_at = at;
}

/* ---- response fields ------------------------------------------------------------------------- */

static int
connection_specific(const char *name, size_t n)
{
    /* RFC 9113 §8.2.2: fields HTTP/2 does not carry; the app's are dropped, not sent. te is
     * one too: only a request may carry it (as "trailers"), so a response with it, whatever its
     * value, is malformed and a client (nghttp2's) resets the stream. */
    return SK_TOKEN_IEQ(name, n, "connection") || SK_TOKEN_IEQ(name, n, "keep-alive") ||
           SK_TOKEN_IEQ(name, n, "proxy-connection") ||
           SK_TOKEN_IEQ(name, n, "transfer-encoding") || SK_TOKEN_IEQ(name, n, "upgrade") ||
           SK_TOKEN_IEQ(name, n, "te");
}

static int
record_fields(sk_buf_t *b, sk_field_t **v, uint32_t *n, uint32_t *cap, const sk_header_t *fields,
              size_t nfields, int trailer, size_t *size)
{
    /* Validates fields and appends them to (b, v) with lowercase names (RFC 9113 §8.2.1) and
     * values without the SP and HTAB around them (§8.2.1: an HTTP/2 value must not start or end
     * with either; on HTTP/1.1 they are the field line's optional whitespace, RFC 9112 §5, so
     * the client there never sees them either), dropping connection-specific ones. trailer:
     * refuse what a trailer section may not hold (SK_ETRAILER). *size grows by each recorded
     * field's SK_FIELD_SIZE (bytes; section_fits() judges the sum). 0 or SK_E*. */
    for (size_t i = 0; i < nfields; i++) {
        const sk_header_t *f = &fields[i];
        int rc = sk_resp_check_field(f);
        if (rc < 0) {
            return rc;
        }
        if (trailer && sk_resp_trailer_forbidden(f->name, f->name_len)) {
            return SK_ETRAILER;
        }
        if (connection_specific(f->name, f->name_len)) {
            continue;
        }
        sk_field_t sf;
        const char *value = f->value;
        size_t value_len = f->value_len;
        sk_ows_trim(&value, &value_len);
        if (buf_span(b, f->name, f->name_len, &sf.name) < 0 ||
            buf_span(b, value, value_len, &sf.value) < 0 || fields_push(v, n, cap, sf) < 0) {
            return SK_ENOMEM;
        }
        char *p = sk_buf_head(b) + sf.name.off;
        for (uint32_t k = 0; k < sf.name.len; k++) {
            p[k] = (char)sk_ascii_lower((unsigned char)p[k]);
        }
        *size += SK_FIELD_SIZE(sf.name.len, sf.value.len);
    }
    return 0;
}

static int
section_fits(h2_conn_t *c, size_t size, int advisory)
{
    /* 0 when a response field section of `size` bytes (SK_FIELD_SIZE's measure: the recorded
     * fields and what skirr adds to them) is at most SK_H2_SECTION_MAX and, when `advisory`, the
     * client's SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 §6.5.2: advisory; a client that sets it
     * may refuse a larger section, so the app is told while it can still answer; skirr's own
     * responses are not held to it, they are the answer). Else SK_EFIELDSIZE. */
    uint32_t peer =
        advisory ? nghttp2_session_get_remote_settings(c->ng, NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE)
                 : UINT32_MAX;
    return size <= SK_H2_SECTION_MAX && size <= peer ? 0 : SK_EFIELDSIZE;
}

static int
parse_cl(const char *v, size_t n, int64_t *out)
{
    /* A content-length value: one decimal integer (RFC 9110 §8.6). 0 or SK_ECL. */
    sk_ows_trim(&v, &n);
    if (n == 0 || n > 18) {
        return SK_ECL;
    }
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (!sk_is_digit((unsigned char)v[i])) {
            return SK_ECL;
        }
        x = x * 10 + (v[i] - '0');
    }
    *out = x;
    return 0;
}

#define NV(n, nl, v, vl)                   \
    ((nghttp2_nv){.name = (uint8_t *)(n),  \
                  .namelen = (nl),         \
                  .value = (uint8_t *)(v), \
                  .valuelen = (vl),        \
                  .flags = NGHTTP2_NV_FLAG_NONE})

static size_t
server_lines(const char *s, size_t n, nghttp2_nv *nv, size_t room, char *lower, size_t lower_room)
{
    /* The server's own "name: value\r\n" lines (sk_resp_opts_t) as nv pairs, names lowercased
     * into lower (lower_room bytes). How many were written (at most room). */
    size_t k = 0, used = 0;
    const char *end = s + n;
    sk_header_t f;
    while (k < room && sk_resp_next_line(&s, end, &f)) {
        if (used + f.name_len > lower_room) {
            break;
        }
        for (size_t i = 0; i < f.name_len; i++) {
            lower[used + i] = (char)sk_ascii_lower((unsigned char)f.name[i]);
        }
        nv[k++] = NV(lower + used, f.name_len, f.value, f.value_len);
        used += f.name_len;
    }
    return k;
}

/* ---- the response's DATA --------------------------------------------------------------------- */

/* A DATA frame's payload is never copied into nghttp2's frame buffer: data_read() only says how
 * many bytes the frame carries (NGHTTP2_DATA_FLAG_NO_COPY) and send_data() then writes the frame
 * into the transport's output itself, its payload straight from the stream's queue or the file
 * range. nghttp2 calls the two within one nghttp2_session_mem_send() (send_data() never answers
 * NGHTTP2_ERR_WOULDBLOCK), so the queue send_data() takes from is the one data_read() measured. */

static ssize_t
data_read(nghttp2_session *ng, int32_t id,
          uint8_t *buf, // NOLINT(readability-non-const-parameter): nghttp2's type; unwritten
          size_t length, uint32_t *flags, nghttp2_data_source *src, void *user)
{
    /* nghttp2 asks how many bytes, up to `length`, of the stream's content one DATA frame
     * carries: from the final body held by reference, or from the queued bytes, then the file
     * range, then what was given after it (one source per frame, as send_data() takes them).
     * None yet: deferred until the app gives more. At the end: EOF, with the trailers as a last
     * HEADERS when announced (RFC 9113 §8.1): they are submitted here, where nghttp2 expects
     * them. Nothing is consumed here and `buf` is not written (NGHTTP2_DATA_FLAG_NO_COPY when
     * n > 0): send_data() consumes the n bytes. */
    (void)buf;
    (void)user;
    h2_stream_t *s = src->ptr;
    size_t n = 0;
    int more; /* content is left after this frame's */
    if (s->ref != NULL) {
        n = ref_len(s) < length ? ref_len(s) : length;
        more = n < ref_len(s);
    }
    else if (sk_buf_len(&s->body) > 0) {
        n = sk_buf_len(&s->body) < length ? sk_buf_len(&s->body) : length;
        more = n < sk_buf_len(&s->body) || s->fd >= 0;
    }
    else if (s->fd >= 0) {
        n = s->fleft < length ? (size_t)s->fleft : length;
        more = n < s->fleft || sk_buf_len(&s->after) > 0;
    }
    else {
        more = 0;
    }
    if (n > 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    }
    if (more || !s->body_end || (s->trailers && !s->trailers_end)) {
        if (n == 0) {
            s->deferred = 1;
            return NGHTTP2_ERR_DEFERRED;
        }
        return (ssize_t)n;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (s->trailers && s->ntf > 0) {
        nghttp2_nv nv[64];
        nghttp2_nv *v = s->ntf <= 64 ? nv : PyMem_Malloc(s->ntf * sizeof(nghttp2_nv));
        if (v != NULL) {
            for (uint32_t i = 0; i < s->ntf; i++) {
                v[i] = NV(span_ptr(&s->th, s->tf[i].name), s->tf[i].name.len,
                          span_ptr(&s->th, s->tf[i].value), s->tf[i].value.len);
            }
            if (nghttp2_submit_trailer(ng, id, v, s->ntf) == 0) {
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            }
            if (v != nv) {
                PyMem_Free(v);
            }
        }
    }
    return (ssize_t)n;
}

/* The body held by reference is `n` bytes further given: released once all of it is (an exact
 * bytes object: its release runs no Python code; the transport holds its own reference to the
 * slices it still sends). */
static void
ref_advance(h2_stream_t *s, size_t n)
{
    s->ref_off += n;
    if (ref_len(s) == 0) {
        Py_CLEAR(s->ref);
        s->ref_off = 0;
    }
}

/* send_data()'s answer once a frame is appended: NGHTTP2_ERR_PAUSE once the output reaches
 * SK_OUTPUT_HIGH_WATER, else 0. */
static int
data_sent(h2_conn_t *c, h2_stream_t *s)
{
    c->progress = 1;
    s->progress = 1;
    if (sk_transport_out_len(c->t) >= SK_OUTPUT_HIGH_WATER) {
        c->data_paused = 1;
        return NGHTTP2_ERR_PAUSE;
    }
    return 0;
}

static int
send_data(nghttp2_session *ng, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
          nghttp2_data_source *src, void *user)
{
    /* One DATA frame data_read() measured, appended whole to the transport's output: the 9-byte
     * header, the pad length when padded, `length` bytes taken from where data_read() found
     * them (the body held by reference: SLICE_MIN bytes or more of an unpadded frame queued as
     * a slice of it (sk_transport_send_slice, not copied), else or when the transport takes no
     * more slices copied, and released once all given; the queue: consumed; the file
     * range: pread(2) into the output, and once it is done what was given meanwhile goes next),
     * the padding. Nothing is appended unless all of it is: a file that shrank or fails resets
     * the stream (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE: RST_STREAM INTERNAL_ERROR; a frame the
     * new end cuts is dropped whole, where data_read() used to send its part first).
     * NGHTTP2_ERR_PAUSE once the output reaches SK_OUTPUT_HIGH_WATER: mem_send returns 0 and
     * pump() stops there, as after any frame; else 0, and mem_send goes on to the next frame
     * (without the pause, one mem_send would append every DATA frame the windows allow). */
    (void)ng;
    h2_conn_t *c = user;
    h2_stream_t *s = src->ptr;
    sk_buf_t *out = sk_transport_out(c->t);
    /* skirr sets no padding callback, so padlen is 0; a padded frame is still written as
     * nghttp2_send_data_callback says: pad length byte (padlen - 1), then padlen - 1 zeros */
    size_t pad = frame->data.padlen;
    if (s->ref != NULL && length > ref_len(s)) {
        return NGHTTP2_ERR_CALLBACK_FAILURE; /* not what data_read() measured */
    }
    if (s->ref != NULL && length >= SLICE_MIN && pad == 0) {
        /* the payload by reference (sk_transport_send_slice), behind the head in the output:
         * never copied here (a 64 KiB body cost a 64 KiB memcpy per response: bench/HTTP2.md) */
        if (sk_buf_append(out, framehd, FRAME_HEAD) < 0) {
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (sk_transport_send_slice(c->t, s->ref, s->ref_off, length) == 0) {
            ref_advance(s, length);
            return data_sent(c, s);
        }
        out->end -= FRAME_HEAD; /* no range taken: the frame is written whole below, copied */
    }
    if (sk_buf_reserve(out, FRAME_HEAD + pad + length) < 0) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    char *p = out->data + out->end;
    memcpy(p, framehd, FRAME_HEAD);
    p += FRAME_HEAD;
    if (pad > 0) {
        *p++ = (char)(pad - 1);
    }
    if (s->ref != NULL) {
        memcpy(p, PyBytes_AS_STRING(s->ref) + s->ref_off, length);
        ref_advance(s, length);
    }
    else if (sk_buf_len(&s->body) > 0) {
        if (length > sk_buf_len(&s->body)) {
            return NGHTTP2_ERR_CALLBACK_FAILURE; /* not what data_read() measured */
        }
        memcpy(p, sk_buf_head(&s->body), length);
        sk_buf_consume(&s->body, length);
    }
    else if (s->fd >= 0 && length <= s->fleft) {
        size_t got = 0;
        while (got < length) {
            ssize_t r = pread(s->fd, p + got, length - got, (off_t)(s->foff + got));
            if (r < 0 && errno == EINTR) {
                continue;
            }
            if (r <= 0) {
                /* the file shrank or failed: the response can never complete; logged as
                 * HTTP/1.1 logs it (sk_http1.c), the stream reset instead of the connection */
                close(s->fd);
                s->fd = -1;
                s->app_reset = 1;
                sk_asgi_log_error(c->srv->st, c->srv->logger,
                                  r == 0 ? "File response incomplete: the file ended before the "
                                           "bytes promised (it shrank while being sent); stream "
                                           "reset"
                                         : "File response incomplete: reading the file failed; "
                                           "stream reset",
                                  NULL);
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM INTERNAL_ERROR */
            }
            got += (size_t)r;
        }
        s->foff += length;
        s->fleft -= length;
        if (s->fleft == 0) {
            close(s->fd);
            s->fd = -1;
            sk_buf_t t = s->body; /* what was given meanwhile goes next */
            s->body = s->after;
            s->after = t;
        }
    }
    else if (length > 0) {
        return NGHTTP2_ERR_CALLBACK_FAILURE; /* not what data_read() measured */
    }
    p += length;
    if (pad > 1) {
        memset(p, 0, pad - 1);
        p += pad - 1;
    }
    out->end = (size_t)(p - out->data);
    return data_sent(c, s);
}

static inline int
sized(const h2_stream_t *s)
{
    /* 1 when submit_head() says the content's length, as HTTP/1.1 frames it: the app gave none,
     * the final piece came with the head (a single final body or file: the head leaves with
     * the first piece), no trailers follow (HTTP/1.1 sends those chunked, unsized), and the
     * status has content (not 204, 205 or 304). HEAD: only a file's (RFC 9110 §9.3.2 lets a
     * HEAD answer omit it; HTTP/1.1 says a file's length, not a body's it would have sent). */
    int no_content = s->status == 204 || s->status == 205 || s->status == 304;
    return s->clen < 0 && s->body_end && !s->trailers && !no_content &&
           (!s->is_head || s->file_whole);
}

static int
submit_head(h2_stream_t *s)
{
    /* Queues the response's HEADERS (:status, the app's fields, date and the server's own
     * fields), with END_STREAM when no DATA follows, else with the data source. 0 or
     * SK_ENOMEM. */
    h2_conn_t *c = s->c;
    const sk_resp_opts_t *o = &c->srv->resp_opts;
    /* :status, 205's content-length, date, the default server line, the app's fields, the
     * server's own lines; their names lowercased into `lower` (every line sent, however many:
     * sk_resp_opts_measure()) */
    size_t room = 5 + s->nrf + o->lines;
    nghttp2_nv stack[48];
    char lower_stack[512];
    nghttp2_nv *nv = room <= 48 ? stack : PyMem_Malloc(room * sizeof(nghttp2_nv));
    char *lower = o->names_len <= sizeof(lower_stack) ? lower_stack : PyMem_Malloc(o->names_len);
    int rv = -1;
    if (nv == NULL || lower == NULL) {
        goto done;
    }
    size_t n = 0;
    /* three digits (h2w_start() takes 200..599, own_head() skirr's own codes): snprintf's
     * "%03d" cost about 700 instructions per response, 1.5% of a small one's (callgrind) */
    s->status_str[0] = (char)('0' + s->status / 100 % 10);
    s->status_str[1] = (char)('0' + s->status / 10 % 10);
    s->status_str[2] = (char)('0' + s->status % 10);
    s->status_str[3] = '\0';
    nv[n++] = NV(":status", 7, s->status_str, 3);
    if (s->status == 205) { /* RFC 9110 §15.3.6: no content, said so (h2w_start) */
        nv[n++] = NV("content-length", 14, "0", 1);
    }
    for (uint32_t i = 0; i < s->nrf; i++) {
        nv[n++] = NV(span_ptr(&s->rh, s->rf[i].name), s->rf[i].name.len,
                     span_ptr(&s->rh, s->rf[i].value), s->rf[i].value.len);
    }
    char clen[SK_DEC_MAX_LEN];
    if (sized(s)) {
        /* the whole content is known: its length said, as HTTP/1.1 says it (RFC 9110 §8.6),
         * so a client knows a download's size; left out when the section would then pass the
         * limit the app's fields were held to (h2w_start: the field is optional in HTTP/2) */
        size_t k = sk_fmt_dec(clen, s->body_sent);
        if (section_fits(c, s->head_out_size + SK_FIELD_SIZE(14, k), !s->own) == 0) {
            nv[n++] = NV("content-length", 14, clen, k);
        }
    }
    const char *date = sk_serve_date(c->srv);
    if (!s->app_date && date != NULL) {
        nv[n++] = NV("date", 4, date, SK_DATE_LEN);
    }
    size_t used = 0, lower_room = lower == lower_stack ? sizeof(lower_stack) : o->names_len;
    if (!s->app_server) {
        if (o->server == NULL) {
            nv[n++] = NV("server", 6, "skirr", 5);
        }
        else {
            size_t k = server_lines(o->server, o->server_len, nv + n, room - n, lower, lower_room);
            for (size_t i = 0; i < k; i++) {
                used += nv[n + i].namelen;
            }
            n += k;
        }
    }
    if (o->extra != NULL && o->extra_len > 0) {
        n +=
            server_lines(o->extra, o->extra_len, nv + n, room - n, lower + used, lower_room - used);
    }
    int eos = s->bodyless || (s->body_end && queue_len(s) == 0 && s->fd < 0 && !s->trailers);
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read};
    rv = nghttp2_submit_response(c->ng, s->id, nv, n, eos ? NULL : &prd);
done:
    if (nv != stack) {
        PyMem_Free(nv);
    }
    if (lower != lower_stack) {
        PyMem_Free(lower);
    }
    if (rv != 0) {
        return SK_ENOMEM;
    }
    s->submitted = 1;
    return 0;
}

static void
kick(h2_stream_t *s)
{
    /* More content (or the end) for a stream whose data source is deferred. */
    if (s->deferred && s->submitted) {
        s->deferred = 0;
        (void)nghttp2_session_resume_data(s->c->ng, s->id);
    }
}

static int
flush_how(h2_conn_t *c, int later)
{
    /* Outside data_received(): pumps nghttp2's output into the transport's and writes it, now
     * or (later) with the loop iteration's batch (sk_transport_write_later: the responses that
     * complete in one iteration leave in one write). 0, or -1 when the connection closed. */
    if (c->in_recv) {
        return c->closed ? -1 : 0;
    }
    pump(c);
    if (!c->closed && sk_transport_out_len(c->t) > 0) {
        (void)(later ? sk_transport_write_later(c->t) : sk_transport_write(c->t));
    }
    return c->closed ? -1 : 0;
}

static int
flush(h2_conn_t *c)
{
    return flush_how(c, 0);
}

static int
congested(h2_stream_t *s)
{
    /* SK_WIRE_WAIT while the stream's queued content is at or over SK_OUTPUT_HIGH_WATER (the
     * peer's window is closed, or the transport's output is full), or a file range is pending. */
    h2_conn_t *c = s->c;
    if (queue_len(s) + sk_buf_len(&s->after) >= SK_OUTPUT_HIGH_WATER || s->fd >= 0 ||
        sk_transport_out_len(c->t) >= SK_OUTPUT_HIGH_WATER) {
        s->waiting = 1;
        return SK_WIRE_WAIT;
    }
    return 0;
}

static void
wake_drained(h2_conn_t *c)
{
    /* send() calls waiting for drain go on where their stream's queue went under the mark. */
    if (sk_transport_out_len(c->t) >= SK_OUTPUT_HIGH_WATER) {
        return;
    }
    for (h2_stream_t *s = c->streams; s != NULL; s = s->next) {
        if (s->waiting && s->x != NULL &&
            queue_len(s) + sk_buf_len(&s->after) < SK_OUTPUT_HIGH_WATER && s->fd < 0) {
            s->waiting = 0;
            sk_exchange_drained(s->x);
        }
    }
}

static int
alive(h2_conn_t *c, int32_t id)
{
    /* 1 while the connection is open and stream id still is (pump() may have closed it). */
    return !c->closed && nghttp2_session_get_stream_user_data(c->ng, id) != NULL;
}

/* ---- the wire under the exchange (sk_wire_ops_t) --------------------------------------------- */

static int
h2w_start(void *w, int status, const sk_header_t *fields, size_t nfields, int trailers)
{
    h2_stream_t *s = w;
    if (status < 200 || status > 599) {
        return SK_ESTATUS;
    }
    s->rh.start = s->rh.end = 0;
    s->nrf = 0;
    s->clen = -1;
    size_t size = 0;
    /* 204 and 205 carry no content-length of the app's (RFC 9110 §8.6; a client's HTTP/2 layer
     * resets a 204 that has one), a 205 skirr's own "content-length: 0" (§15.3.6), as HTTP/1.1
     * does (sk_resp.c); the app's is still checked */
    int no_cl = status == 204 || status == 205;
    int rc = record_fields(&s->rh, &s->rf, &s->nrf, &s->rf_cap, fields, nfields, 0, &size);
    uint32_t kept = 0;
    for (uint32_t i = 0; rc == 0 && i < s->nrf; i++) {
        const char *name = span_ptr(&s->rh, s->rf[i].name);
        size_t nl = s->rf[i].name.len;
        if (SK_TOKEN_IEQ(name, nl, "content-length")) {
            int64_t v;
            rc = s->clen >= 0 ? SK_ECL
                              : parse_cl(span_ptr(&s->rh, s->rf[i].value), s->rf[i].value.len, &v);
            if (rc == 0) {
                s->clen = v;
            }
            if (no_cl) {
                size -= SK_FIELD_SIZE(nl, s->rf[i].value.len);
                continue;
            }
        }
        else if (SK_TOKEN_IEQ(name, nl, "date")) {
            s->app_date = 1;
        }
        else if (SK_TOKEN_IEQ(name, nl, "server")) {
            s->app_server = 1;
        }
        s->rf[kept++] = s->rf[i];
    }
    if (rc == 0) {
        s->nrf = kept;
        if (no_cl) {
            s->clen = -1;
        }
    }
    if (rc == 0) { /* what submit_head() adds: :status, date, server and the extra lines */
        const sk_resp_opts_t *o = &s->c->srv->resp_opts;
        int date = !s->app_date && s->c->srv->date_header; /* as sk_serve_date() */
        size += SK_FIELD_SIZE(7, 3) + (date ? SK_FIELD_SIZE(4, SK_DATE_LEN) : 0);
        size += status == 205 ? SK_FIELD_SIZE(14, 1) : 0;
        if (!s->app_server) {
            size += o->server == NULL ? SK_FIELD_SIZE(6, 5) : o->server_size;
        }
        size += o->extra_size;
        rc = section_fits(s->c, size, !s->own);
        s->head_out_size = size;
    }
    if (rc < 0) {
        s->nrf = 0;
        s->app_date = s->app_server = 0;
        return rc;
    }
    s->status = status;
    s->started = 1;
    s->trailers = (uint8_t)(trailers != 0);
    s->bodyless = s->is_head || status == 204 || status == 205 || status == 304;
    return 0;
}

static int
submit_interim(h2_stream_t *s, int status, const sk_header_t *fields, size_t nfields)
{
    /* A 1xx as a HEADERS frame without END_STREAM (RFC 9113 §8.1), queued and flushed. 0,
     * SK_ESTATUS or SK_ENOMEM (nothing queued), or SK_WIRE_GONE (the stream or connection
     * ended: s may be freed). */
    h2_conn_t *c = s->c;
    int32_t id = s->id;
    if (status < 100 || status > 199 || status == 101) {
        return SK_ESTATUS;
    }
    sk_buf_t b = {0};
    sk_field_t *v = NULL;
    uint32_t n = 0, cap = 0;
    nghttp2_nv *nv = NULL;
    char st[4];
    size_t size = SK_FIELD_SIZE(7, 3); /* :status */
    int rc = record_fields(&b, &v, &n, &cap, fields, nfields, 0, &size);
    if (rc == 0) {
        rc = section_fits(c, size, status != 100); /* a 100 is skirr's own */
    }
    if (rc == 0) {
        nv = PyMem_Malloc(((size_t)n + 1) * sizeof(nghttp2_nv));
        rc = nv == NULL ? SK_ENOMEM : 0;
    }
    if (rc == 0) {
        snprintf(st, sizeof(st), "%03d", status);
        nv[0] = NV(":status", 7, st, 3);
        for (uint32_t i = 0; i < n; i++) {
            nv[i + 1] = NV(span_ptr(&b, v[i].name), v[i].name.len, span_ptr(&b, v[i].value),
                           v[i].value.len);
        }
        if (nghttp2_submit_headers(c->ng, NGHTTP2_FLAG_NONE, id, NULL, nv, (size_t)n + 1, NULL) <
            0) {
            rc = SK_ENOMEM;
        }
    }
    PyMem_Free(nv);
    PyMem_Free(v);
    sk_buf_free(&b);
    if (rc < 0) {
        return rc;
    }
    if (flush(c) < 0 || !alive(c, id)) {
        return SK_WIRE_GONE;
    }
    return 0;
}

static int
h2w_interim(void *w, int status, const sk_header_t *fields, size_t nfields)
{
    h2_stream_t *s = w;
    int rc = submit_interim(s, status, fields, nfields);
    return rc < 0 ? rc : congested(s);
}

static int
account(h2_stream_t *s, uint64_t len, int more)
{
    /* The content length the app promised (RFC 9110 §8.6): 0, SK_ETOOLONG or SK_ETOOSHORT. */
    if (s->clen >= 0 && !s->bodyless) {
        if (s->body_sent + len > (uint64_t)s->clen) {
            return SK_ETOOLONG;
        }
        if (!more && s->body_sent + len < (uint64_t)s->clen) {
            return SK_ETOOSHORT;
        }
    }
    return 0;
}

static int
queued(h2_stream_t *s, int more)
{
    /* A piece was queued: the head goes with the first one; the data source is woken. */
    if (!more) {
        s->body_end = 1;
    }
    if (!s->submitted) {
        if (submit_head(s) < 0) {
            return SK_ENOMEM;
        }
    }
    else {
        kick(s);
    }
    return 0;
}

static int
h2w_body(void *w, const char *data, size_t len, int more)
{
    h2_stream_t *s = w;
    if (!s->started || s->body_end) {
        return SK_ESTATE;
    }
    int rc = account(s, len, more);
    if (rc < 0) {
        return rc;
    }
    if (!s->bodyless && len > 0) {
        if (sk_buf_append(s->fd >= 0 ? &s->after : &s->body, data, len) < 0) {
            return SK_ENOMEM;
        }
    }
    s->body_sent += len;
    return queued(s, more);
}

static int
h2w_body_ref(void *w, PyObject *bytes, int more)
{
    /* The final body (an exact bytes object: immutable) held by reference while nothing else
     * is queued (no earlier piece, no file range): send_data() copies it from there into the
     * transport's output a frame at a time, so it is copied once, not into s->body first.
     * Otherwise (a piece that is not the last, HEAD, 204, 304) copied as any body. */
    h2_stream_t *s = w;
    size_t len = (size_t)PyBytes_GET_SIZE(bytes);
    if (more || len == 0 || s->bodyless || !s->started || s->body_end || s->ref != NULL ||
        sk_buf_len(&s->body) > 0 || s->fd >= 0) {
        return h2w_body(w, PyBytes_AS_STRING(bytes), len, more);
    }
    int rc = account(s, len, more);
    if (rc < 0) {
        return rc;
    }
    Py_INCREF(bytes);
    s->ref = bytes;
    s->ref_off = 0;
    s->body_sent += len;
    return queued(s, more);
}

static int
h2w_file(void *w, int fd, uint64_t off, uint64_t count, int more)
{
    /* The range is read with pread(2) one DATA frame at a time as the peer's window opens
     * (send_data: into the transport's output): never the whole file in memory. One range at a
     * time. */
    h2_stream_t *s = w;
    if (!s->started || s->body_end) {
        close(fd);
        return SK_ESTATE;
    }
    if (s->fd >= 0) {
        close(fd);
        return SK_WIRE_BUSY;
    }
    int rc = account(s, count, more);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    s->file_whole = !more && s->body_sent == 0 && !s->submitted;
    if (s->bodyless || count == 0) {
        close(fd);
    }
    else {
        s->fd = fd;
        s->foff = off;
        s->fleft = count;
    }
    s->body_sent += count;
    return queued(s, more);
}

static int
h2w_trailers(void *w, const sk_header_t *fields, size_t nfields, int more)
{
    /* Sent as a HEADERS frame with END_STREAM after the last DATA (RFC 9113 §8.1); dropped for
     * a bodyless response (its HEADERS ended the stream). */
    h2_stream_t *s = w;
    if (!s->trailers || !s->body_end || s->trailers_end) {
        return SK_ESTATE;
    }
    if (!s->bodyless) {
        int rc =
            record_fields(&s->th, &s->tf, &s->ntf, &s->tf_cap, fields, nfields, 1, &s->tf_size);
        if (rc == 0) { /* all of the trailer section so far (more=True adds to it) */
            rc = section_fits(s->c, s->tf_size, 1);
        }
        if (rc < 0) {
            return rc;
        }
    }
    if (!more) {
        s->trailers_end = 1;
        kick(s);
    }
    return 0;
}

static int
h2w_push(void *w)
{
    h2_stream_t *s = w;
    h2_conn_t *c = s->c;
    int32_t id = s->id;
    if (flush(c) < 0 || !alive(c, id)) {
        return SK_WIRE_GONE;
    }
    return congested(s);
}

static int
h2w_end(void *w)
{
    /* The app sent its whole response: the exchange is let go and the stream sends the rest as
     * the peer's window allows. An app call that runs on after its response (Starlette's
     * BackgroundTasks) counts against --http2-max-concurrent-streams no longer than its stream
     * is open (RFC 9113 §5.1.2: closed streams do not count), as on HTTP/1.1 it holds no
     * connection; only an exchange that lost its stream first (detach: a reset, Rapid Reset)
     * goes on counting while its app runs (keep_running). */
    h2_stream_t *s = w;
    h2_conn_t *c = s->c;
    Py_CLEAR(s->x);
    give_back(s, s->given);
    s->waiting = 0;
    if (!s->submitted && submit_head(s) < 0) {
        (void)nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
        s->app_reset = 1;
    }
    else {
        kick(s);
    }
    return flush_how(c, 1) < 0 ? SK_WIRE_GONE : 0;
}

static int
own_head(h2_stream_t *s, int status)
{
    /* skirr's own response in place of anything queued: text/plain with the reason phrase as
     * content (none for HEAD), recorded as the stream's head and content, ended. Not yet
     * submitted. 0, or an SK_E* code. */
    const char *reason;
    if (sk_resp_reason_phrase(status, &reason) == 0) {
        reason = "Error";
    }
    size_t rl = strlen(reason);
    char cl[24];
    int cn = snprintf(cl, sizeof(cl), "%zu", rl);
    sk_header_t f[2] = {
        {.name = "content-type",
         .name_len = 12,
         .value = "text/plain; charset=utf-8",
         .value_len = 25},
        {.name = "content-length", .name_len = 14, .value = cl, .value_len = (size_t)cn},
    };
    s->own = 1;
    s->app_date = s->app_server = 0;
    sk_buf_free(&s->body);
    Py_CLEAR(s->ref);
    s->ref_off = 0;
    s->body_sent = 0;
    s->body_end = 0;
    int rc = h2w_start(s, status, f, 2, 0);
    if (rc == 0 && !s->bodyless) {
        rc = sk_buf_append(&s->body, reason, rl);
        s->body_sent = rc == 0 ? rl : 0;
    }
    s->body_end = 1;
    return rc;
}

static int
own_response(h2_stream_t *s, int status)
{
    /* skirr's own complete response on the stream (a refusal), submitted now (queued, not
     * pumped). 0 or an SK_E* code. */
    int rc = own_head(s, status);
    if (rc == 0) {
        rc = submit_head(s);
    }
    return rc;
}

static void h2w_abort(void *w, int reset);

static int
h2w_error(void *w, int status)
{
    /* Nothing of the app's response left: skirr's own 500 in its place (sent at end()). Should
     * the head be queued already (no caller does that: the exchange asks only while the head is
     * not out), or own_head() fail (no memory: server fields over SK_H2_SECTION_MAX are refused
     * when the Server is made), the stream is reset INTERNAL_ERROR instead,
     * never left waiting, and the exchange let go, as the SK_WIRE_GONE it is told means. */
    h2_stream_t *s = w;
    if (!s->submitted) {
        if (s->fd >= 0) {
            close(s->fd);
            s->fd = -1;
        }
        if (own_head(s, status) == 0) {
            return 0;
        }
    }
    h2w_abort(s, 1);
    return SK_WIRE_GONE;
}

static void
h2w_abort(void *w, int reset)
{
    /* Part of the response is out and it cannot complete: RST_STREAM INTERNAL_ERROR (RFC 9113
     * §8.1: the peer never takes it for complete), whatever `reset` says. */
    (void)reset;
    h2_stream_t *s = w;
    h2_conn_t *c = s->c;
    s->app_reset = 1;
    if (c->in_recv) {
        /* what was queued (the HEADERS, DATA) leaves first: pump() resets after it, as
         * nghttp2 drops a stream's queued frames when its RST_STREAM is submitted */
        s->reset_pending = 1;
        c->resets_pending = 1;
    }
    else {
        (void)nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    }
    detach(s);
    (void)flush(c);
}

static int
h2w_progress(void *w, uint64_t *body_bytes)
{
    h2_stream_t *s = w;
    *body_bytes = s->body_sent;
    return s->submitted ? SK_WIRE_HEAD_OUT : 0;
}

static int
h2w_resume(void *w, int waiting)
{
    /* Flow control of the request body (RFC 9113 §5.2): what the app took goes back to the
     * stream's and the connection's windows. No WINDOW_UPDATE is sent for bytes not taken. */
    h2_stream_t *s = w;
    h2_conn_t *c = s->c;
    if (waiting) {
        /* RFC 9110 §10.1.1 (HTTP/1.1 "or later"), as HTTP/1.1 does (sk_http1.c): the app waits
         * for content the client holds back for a 100, so ask for it, once, as an interim
         * HEADERS (RFC 9113 §8.1); not once content came, the request ended or the response
         * head went out (the final status answers the expectation). */
        if (s->expect_100 && s->x != NULL && !s->body_done && !s->submitted && !s->answered) {
            s->expect_100 = 0;
            int rc = submit_interim(s, 100, NULL, 0);
            if (rc == SK_ENOMEM) {
                return SK_ENOMEM;
            }
            /* SK_WIRE_GONE: the connection closed (the exchange is detached by it) */
        }
        return 0;
    }
    if (s->x == NULL) {
        return 0;
    }
    size_t buffered = sk_exchange_buffered(s->x);
    if (s->given > buffered) {
        give_back(s, s->given - buffered);
        (void)flush(c);
    }
    return 0;
}

static void
h2w_stepped(void *w)
{
    (void)w;
}

static const sk_wire_ops_t h2_wire = {
    .start = h2w_start,
    .interim = h2w_interim,
    .body = h2w_body,
    .body_ref = h2w_body_ref,
    .file = h2w_file,
    .trailers = h2w_trailers,
    .push = h2w_push,
    .end = h2w_end,
    .error = h2w_error,
    .abort = h2w_abort,
    .progress = h2w_progress,
    .resume = h2w_resume,
    .stepped = h2w_stepped,
};

/* ---- requests -------------------------------------------------------------------------------- */

static int
conn_addresses(h2_conn_t *c)
{
    /* scope "client" and "server", made once per connection (sk_serve_addresses). 0, or -1
     * with an exception. */
    return sk_serve_addresses(c->srv, c->t, &c->client, &c->local);
}

static void
split_path(const h2_stream_t *s, const char **path, size_t *path_len, const char **query,
           size_t *query_len)
{
    /* :path (s->has_path) as the scope's raw_path and query_string: the bytes before its first
     * '?' ("/" when there are none), the bytes after it (*query NULL: no '?'); lengths in bytes.
     * Pointers into s->head (or static), valid until s->head grows. */
    const char *p = span_ptr(&s->head, s->path);
    size_t n = s->path.len;
    const char *q = memchr(p, '?', n);
    *path = p;
    *path_len = q != NULL ? (size_t)(q - p) : n;
    *query = q != NULL ? q + 1 : NULL;
    *query_len = q != NULL ? (size_t)(p + n - q - 1) : 0;
    if (*path_len == 0) {
        *path = "/";
        *path_len = 1;
    }
}

static PyObject *
refusal_client(h2_stream_t *s, const struct sockaddr *peer)
{
    /* New reference, or NULL without an exception: the client a refusal's access line and trace
     * event name when --proxy-headers is on (skirr-access-refusals): the scope's of the stream's
     * exchange (its fields are not read again), else, for a head that passed the checks
     * (s->head_valid), the one the proxy headers among its fields give, as its scope would have
     * had it; NULL: the connection's client. */
    sk_serve_t *srv = s->c->srv;
    if (!srv->proxy.enabled) {
        return NULL;
    }
    if (s->x != NULL) {
        return sk_exchange_client(s->x);
    }
    if (!s->head_valid) {
        return NULL; /* not checked, or not kept whole (431): its fields are not trusted */
    }
    sk_fields_t f = {.base = sk_buf_head(&s->head), .v = s->fields, .n = s->nfields};
    PyObject *client = sk_proxy_client(&srv->proxy, &f, peer, srv->unix_path != Py_None);
    if (client == NULL && PyErr_Occurred()) {
        PyErr_WriteUnraisable(srv->owner); /* out of memory: the line names the peer */
    }
    return client;
}

static void
note_refusal(h2_stream_t *s, int status, const char *why)
{
    /* A stream skirr answered itself: metrics, access-log record and trace event. The record
     * names the request as its app response would be logged once the head passed malformed()
     * (s->head_valid), else "-" (sk_access.h: sk_access_line_t), and the client as its scope
     * would (refusal_client). Called while the stream's exchange, if any, is attached. */
    h2_conn_t *c = s->c;
    if (c->srv->metrics != NULL) {
        sk_metrics_refusal(c->srv->metrics, status);
    }
    if (c->srv->access.pending == NULL && c->srv->trace == NULL) {
        return;
    }
    socklen_t plen;
    const struct sockaddr *peer = sk_transport_peer(c->t, &plen);
    PyObject *proxied = refusal_client(s, peer); /* strong, or NULL */
    PyObject *client = proxied != NULL ? proxied : c->client;
    if (c->srv->access.pending != NULL) {
        sk_access_line_t line = {0};
        if (s->head_valid) {
            line.method = span_ptr(&s->head, s->method);
            line.method_len = s->method.len;
            line.prefix = PyBytes_AS_STRING(c->srv->root_path_b);
            line.prefix_len = (size_t)PyBytes_GET_SIZE(c->srv->root_path_b);
            split_path(s, &line.path, &line.path_len, &line.query, &line.query_len);
            line.version = "2.0"; /* scope "2", logged as HTTP/2.0 (skirr.access) */
        }
        /* the content own_head() sends: the phrase, none for HEAD */
        sk_access_refusal(&c->srv->access, client, peer, s->head_valid ? &line : NULL, status,
                          sk_resp_error_content_length(status, s->is_head), why);
    }
    if (c->srv->trace != NULL) {
        char event[160];
        snprintf(event, sizeof(event), "HTTP/2 request refused: %d (%s)", status, why);
        sk_access_trace(&c->srv->access, client, peer, event);
    }
    Py_XDECREF(proxied);
}

static void
answer_refused(h2_stream_t *s, int status)
{
    /* skirr's own response for a refusal noted (note_refusal), or RST_STREAM without memory */
    if (own_response(s, status) < 0) {
        (void)nghttp2_submit_rst_stream(s->c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    }
}

static void
refuse_stream(h2_stream_t *s, int status, const char *why)
{
    note_refusal(s, status, why);
    answer_refused(s, status);
}

static const char *
malformed(const h2_stream_t *s)
{
    /* The request's target held to HTTP/1.1's checks (sk_http.h), so an app sees the same
     * requests over either version: NULL, or why the request is malformed (RFC 9113 §8.1.1:
     * RST_STREAM PROTOCOL_ERROR). nghttp2 checked the pseudo-header fields' presence, order and
     * :path's form (RFC 9113 §8.3). */
    const char *base = sk_buf_head(&s->head);
    if (s->has_path && sk_http_target_invalid(base + s->path.off, s->path.len) != NULL) {
        /* '#', a byte outside origin-form, a bad pct-encoding (RFC 9113 §8.3.1, RFC 9112 §3.2) */
        return ":path not allowed as HTTP/1.1's request-target";
    }
    const char *a = s->has_authority ? base + s->authority.off : NULL;
    size_t an = s->has_authority ? s->authority.len : 0;
    if (a != NULL && memchr(a, '@', an) != NULL) {
        return "userinfo in :authority"; /* RFC 9113 §8.3.1: MUST NOT include userinfo */
    }
    if (a != NULL && !sk_http_valid_authority(a, an, 0)) {
        return "invalid :authority"; /* as an HTTP/1.1 Host value (RFC 9110 §7.2) */
    }
    uint32_t hosts = 0;
    for (uint32_t i = 0; i < s->nfields; i++) {
        const sk_field_t *f = &s->fields[i];
        if (!SK_TOKEN_IEQ(base + f->name.off, f->name.len, "host")) {
            continue;
        }
        const char *v = base + f->value.off;
        if (++hosts > 1) {
            return "more than one host field"; /* RFC 9112 §3.2, as HTTP/1.1 */
        }
        if (!sk_http_valid_authority(v, f->value.len, 0)) {
            return "invalid host field";
        }
        /* RFC 9113 §8.3.1: a Host differing from :authority SHOULD be malformed (neither wins) */
        if (a != NULL && !sk_ascii_ieq(v, f->value.len, a, an)) {
            return "host field differs from :authority";
        }
    }
    return NULL;
}

static void
trace_malformed(h2_conn_t *c, const char *by, const char *why)
{
    /* --log-level trace (c->srv->trace set): one malformed request refused with RST_STREAM
     * PROTOCOL_ERROR, RFC 9113 §8.1.1; `by` names the check that found it ("" for skirr's own,
     * "nghttp2: " for the library's), `why` says what it found. */
    char event[200];
    socklen_t plen;
    snprintf(event, sizeof(event), "HTTP/2 request malformed: RST_STREAM PROTOCOL_ERROR (%s%s)", by,
             why);
    sk_access_trace(&c->srv->access, c->client, sk_transport_peer(c->t, &plen), event);
}

static void
malformed_stream(h2_conn_t *c, h2_stream_t *s, const char *why)
{
    /* RFC 9113 §8.1.1: a malformed request is a stream error PROTOCOL_ERROR; the app is never
     * called. Counted as a reset the client caused (on_frame_send: MadeYouReset). */
    if (c->srv->trace != NULL) {
        trace_malformed(c, "", why);
    }
    (void)nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_PROTOCOL_ERROR);
}

static Py_ssize_t
admitted_unstarted(const h2_conn_t *c)
{
    /* Streams head_complete admitted whose exchange run_pending has not started yet: with
     * srv->active_requests, the requests --limit-concurrency counts. Only this connection's:
     * run_pending starts them before its read returns to the reactor. */
    Py_ssize_t n = 0;
    for (const h2_stream_t *s = c->streams; s != NULL; s = s->next) {
        n += (s->run_pending && s->x != NULL);
    }
    return n;
}

static void
body_too_large(h2_stream_t *s)
{
    /* Request content past --limit-request-body, as HTTP/1.1's chunked content (RFC 9110
     * §15.5.14): the app's next receive() gives http.disconnect (an app not started yet is
     * never called); the stream is answered 413 when no response head was sent, else reset
     * (RST_STREAM INTERNAL_ERROR); the connection goes on serving its other streams. */
    s->run_pending = 0;
    if (s->submitted) {
        h2w_abort(s, 1);
        return;
    }
    /* noted while the exchange is attached: the line names its scope's client */
    note_refusal(s, 413, "content over --limit-request-body");
    detach(s);
    /* a head the app gave but not sent yet is replaced, as h2w_error's */
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    s->body_sent = 0;
    s->body_end = 0;
    answer_refused(s, 413);
}

static void
head_complete(h2_conn_t *c, h2_stream_t *s, int end_stream)
{
    /* The request's header block is complete (nghttp2 validated it, RFC 9113 §8.1.1, §8.3):
     * refused, or made into an exchange started once mem_recv returns. */
    sk_serve_t *srv = c->srv;
    if (s->too_big) {
        /* a HEAD's 431 has no content: its :method came first (RFC 9113 §8.3) if it came */
        s->is_head = s->has_method && sk_http_method_id(sk_buf_head(&s->head) + s->method.off,
                                                        s->method.len) == HTTP_HEAD;
        refuse_stream(s, 431, "request header list larger than --http2-max-headers-size");
        return;
    }
    if (active_streams(c) > c->srv->h2.max_concurrent_streams) {
        /* RFC 9113 §5.1.2: a stream over the limit, counting the streams whose app call still
         * runs after a reset (CVE-2023-44487, Rapid Reset) */
        (void)nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_REFUSED_STREAM);
        return;
    }
    if (!s->has_path || !s->has_method) {
        /* CONNECT (RFC 9113 §8.5): not an ASGI http request */
        refuse_stream(s, 501, "CONNECT is not served");
        return;
    }
    const char *why = malformed(s);
    if (why != NULL) {
        malformed_stream(c, s, why);
        return;
    }
    s->head_valid = 1;
    {
        const char *base = sk_buf_head(&s->head);
        const char *sch = base + s->scheme.off;
        int method = sk_http_method_id(base + s->method.off, s->method.len);
        s->is_head = (method == HTTP_HEAD); /* a refusal of HEAD has no content */
        if (!SK_TOKEN_IEQ(sch, s->scheme.len, "http") &&
            !SK_TOKEN_IEQ(sch, s->scheme.len, "https")) {
            /* RFC 9110 §7.4: a scheme this origin server does not serve, as HTTP/1.1's
             * absolute-form (sk_http.c): 421; http and https are both served on either kind of
             * connection, the scope's scheme being the connection's */
            refuse_stream(s, 421, ":scheme other than http or https");
            return;
        }
        if (method < 0) {
            /* RFC 9110 §9.1: a method skirr's HTTP/1.1 parser does not serve ('get', FOO, PRI) */
            refuse_stream(s, 501, "method not implemented");
            return;
        }
    }
    const char *hb = sk_buf_head(&s->head);
    if (srv->limits.max_body != 0 && hb != NULL) {
        /* RFC 9110 §15.5.14, as HTTP/1.1 (sk_http.c): a declared length over
         * --limit-request-body is answered 413 from the head, the app never called */
        const char *b = hb;
        for (uint32_t i = 0; i < s->nfields; i++) {
            const sk_field_t *f = &s->fields[i];
            int64_t cl;
            if (SK_TOKEN_IEQ(b + f->name.off, f->name.len, "content-length") &&
                parse_cl(b + f->value.off, f->value.len, &cl) == 0 &&
                (uint64_t)cl > srv->limits.max_body) {
                refuse_stream(s, 413, "content-length over --limit-request-body");
                return;
            }
        }
    }
    if (srv->limit_concurrency > 0 &&
        srv->active_requests + admitted_unstarted(c) >= srv->limit_concurrency) {
        /* the streams admitted earlier in this read count from their admission, not from
         * run_pending: a burst of HEADERS in one read gets exactly the limit served */
        refuse_stream(s, 503, "--limit-concurrency reached");
        return;
    }
    if (conn_addresses(c) < 0) {
        PyErr_WriteUnraisable(srv->owner);
        refuse_stream(s, 500, "server error");
        return;
    }
    /* the joined cookie field goes where its first crumb was */
    if (s->cookie_at >= 0) {
        sk_span_t v;
        if (buf_span(&s->head, sk_buf_head(&s->cookie), sk_buf_len(&s->cookie), &v) < 0) {
            refuse_stream(s, 500, "out of memory");
            return;
        }
        s->fields[s->cookie_at].value = v;
    }
    /* the method, NUL-terminated, last in the head block */
    sk_span_t mname;
    if (buf_span(&s->head, span_ptr(&s->head, s->method), s->method.len, &mname) < 0 ||
        sk_buf_append(&s->head, "", 1) < 0) {
        refuse_stream(s, 500, "out of memory");
        return;
    }
    const char *base = sk_buf_head(&s->head);
    const char *m = base + mname.off;
    sk_req_head_t h = {0};
    h.method = sk_http_method_id(m, mname.len);
    h.method_name = m;
    split_path(s, &h.path, &h.path_len, &h.query, &h.query_len);
    h.authority = s->has_authority ? base + s->authority.off : NULL;
    h.authority_len = s->has_authority ? s->authority.len : 0;
    h.fields.base = base;
    h.fields.v = s->fields;
    h.fields.n = s->nfields;
    h.has_host = 0;
    for (uint32_t i = 0; i < s->nfields; i++) {
        if (SK_TOKEN_IEQ(base + s->fields[i].name.off, s->fields[i].name.len, "host")) {
            h.has_host = 1;
        }
    }
    h.http_major = 2;
    h.http_minor = 0;
    h.https = c->tls != NULL;
    h.tls = c->tls;
    h.extras = 1;
    h.client = c->client;
    h.server = c->local;
    socklen_t plen2;
    h.peer = sk_transport_peer(c->t, &plen2);
    s->is_head = (h.method == HTTP_HEAD);
    srv->total_requests++;
    sk_exchange_t *x = sk_exchange_new(srv, &h, &h2_wire, s);
    if (x == NULL) {
        PyErr_WriteUnraisable(srv->owner);
        refuse_stream(s, 500, "server error");
        return;
    }
    s->x = x;
    s->run_pending = 1;
    if (end_stream) {
        s->body_done = 1;
        sk_exchange_body_end(x);
    }
    else {
        /* RFC 9110 §10.1.1: the client may wait for a 100 before sending the content; as
         * HTTP/1.1's parser (sk_http.c), an expect field whose value is exactly 100-continue
         * (any case); any other expectation is the app's to see */
        for (uint32_t i = 0; i < s->nfields; i++) {
            const sk_field_t *f = &s->fields[i];
            if (SK_TOKEN_IEQ(base + f->name.off, f->name.len, "expect") &&
                SK_TOKEN_IEQ(base + f->value.off, f->value.len, "100-continue")) {
                s->expect_100 = 1;
            }
        }
    }
}

static void
run_pending(h2_conn_t *c)
{
    /* Starts the exchanges of the requests mem_recv completed (outside nghttp2's callbacks), in
     * the order they arrived (the list is newest first). An eager app may answer inside
     * sk_exchange_run: its entries only queue (c->in_recv), so no stream is freed meanwhile. */
    h2_stream_t *last = c->streams;
    while (last != NULL && last->next != NULL) {
        last = last->next;
    }
    for (h2_stream_t *s = last; s != NULL && !c->closed; s = s->prev) {
        if (!s->run_pending) {
            continue;
        }
        s->run_pending = 0;
        sk_exchange_t *x = s->x;
        if (x == NULL) {
            continue;
        }
        Py_INCREF((PyObject *)x);
        if (sk_exchange_run(x) < 0) {
            PyErr_WriteUnraisable(c->srv->owner);
            if (s->x == x) {
                detach(s);
                refuse_stream(s, 500, "server error");
            }
        }
        Py_DECREF((PyObject *)x);
    }
}

/* ---- nghttp2 callbacks ----------------------------------------------------------------------- */

static int
was_skipped(const h2_conn_t *c, int32_t id)
{
    for (uint8_t i = 0; i < c->nskipped; i++) {
        if (id >= c->skipped[i][0] && id <= c->skipped[i][1]) {
            return 1;
        }
    }
    return 0;
}

/* 1 if id (odd, <= last_headers_id) is within the window client_ended covers. */
static int
ended_in_window(const h2_conn_t *c, int32_t id)
{
    return id <= c->last_headers_id && (int64_t)c->last_headers_id - id < 2 * ENDED_WINDOW;
}

static void
ended_mark(h2_conn_t *c, int32_t id, int ended)
{
    uint32_t k = ((uint32_t)id >> 1) % ENDED_WINDOW;
    if (ended) {
        c->client_ended[k >> 3] |= (uint8_t)(1u << (k & 7));
    }
    else {
        c->client_ended[k >> 3] &= (uint8_t) ~(1u << (k & 7));
    }
}

static int
client_ended(const h2_conn_t *c, int32_t id)
{
    uint32_t k = ((uint32_t)id >> 1) % ENDED_WINDOW;
    return ended_in_window(c, id) && (c->client_ended[k >> 3] >> (k & 7)) & 1;
}

static void
end_session(h2_conn_t *c, nghttp2_session *ng, uint32_t code, const char *event)
{
    /* skirr ends the session from a callback: GOAWAY `code` queued, and the session ignores the
     * rest of its input from here (nghttp2's IGN_ALL state: this frame included); no byte more
     * is given to it (c->ended) */
    c->ended = 1;
    (void)nghttp2_session_terminate_session(ng, code);
    if (c->srv->trace != NULL) {
        socklen_t plen;
        sk_access_trace(&c->srv->access, c->client, sk_transport_peer(c->t, &plen), event);
    }
}

static int
on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *user)
{
    /* RFC 9113 §5.1.1: a new stream id closes every idle stream below it; a HEADERS that names
     * one of those ids (the client skipped it, then went back) is a connection error
     * PROTOCOL_ERROR. nghttp2 1.52 ignores such a HEADERS instead (it cannot tell a skipped id
     * from a stream it closed, whose late trailers are no error: the client may not have seen
     * the reset yet), so the request is never answered; skirr remembers the ids the client
     * skipped and ends the connection itself. nghttp2 calls this once per frame it reads,
     * after the frame's 9-byte head (for a padded or PRIORITY-flagged HEADERS, before its pad
     * length and priority fields are read; only the head is used here) and before it acts on
     * the frame; a frame it refuses at its head (a size error) may not get here, and those end
     * the connection anyway. Even stream ids and 0 are nghttp2's to answer.
     * RFC 9113 §5.1: a HEADERS on a stream whose client side ended (END_STREAM or RST_STREAM
     * received) is a connection error STREAM_CLOSED; nghttp2 answers it only while it keeps
     * the closed stream (about --http2-max-concurrent-streams of them) and ignores it after,
     * leaving that request unanswered, so skirr remembers which of the last ENDED_WINDOW
     * streams the client ended. Late trailers on a stream the server reset while the client
     * was still sending are no error (the client may not have seen the reset): never marked. */
    h2_conn_t *c = user;
    int32_t id = hd->stream_id;
    if (hd->type != NGHTTP2_HEADERS || (id & 1) == 0 || c->ended || c->closed) {
        return 0;
    }
    if (id > c->last_headers_id) {
        /* last_headers_id is odd (or -1) and below id <= 2^31-1: + 2 cannot overflow */
        if (id > c->last_headers_id + 2) {
            if (c->nskipped == SKIPPED_MAX) { /* forget the oldest range */
                memmove(c->skipped[0], c->skipped[1], sizeof(c->skipped[0]) * (SKIPPED_MAX - 1));
                c->nskipped--;
            }
            c->skipped[c->nskipped][0] = c->last_headers_id + 2;
            c->skipped[c->nskipped][1] = id - 2;
            c->nskipped++;
        }
        /* the ids entering the window take the slots of ids leaving it: not ended */
        if ((int64_t)id - c->last_headers_id >= 2 * ENDED_WINDOW) {
            memset(c->client_ended, 0, sizeof(c->client_ended));
        }
        else {
            for (int64_t k = (int64_t)c->last_headers_id + 2; k <= id; k += 2) {
                ended_mark(c, (int32_t)k, 0);
            }
        }
        c->last_headers_id = id;
        return 0;
    }
    char event[120];
    if (was_skipped(c, id)) {
        snprintf(event, sizeof(event),
                 "HTTP/2 connection refused: GOAWAY PROTOCOL_ERROR (HEADERS on stream %d, which "
                 "the client skipped)",
                 (int)id);
        end_session(c, ng, NGHTTP2_PROTOCOL_ERROR, event);
    }
    else if (client_ended(c, id)) {
        snprintf(event, sizeof(event),
                 "HTTP/2 connection refused: GOAWAY STREAM_CLOSED (HEADERS on stream %d, which "
                 "the client ended)",
                 (int)id);
        end_session(c, ng, NGHTTP2_STREAM_CLOSED, event);
    }
    return 0;
}

static int
on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *user)
{
    h2_conn_t *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
        return 0;
    }
    h2_stream_t *s = PyMem_Calloc(1, sizeof(h2_stream_t));
    if (s == NULL) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    s->c = c;
    s->id = frame->hd.stream_id;
    s->fd = -1;
    s->clen = -1;
    s->cookie_at = -1;
    s->head_open = 1;
    if (nghttp2_session_set_stream_user_data(ng, s->id, s) != 0) {
        PyMem_Free(s);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    s->next = c->streams;
    if (c->streams != NULL) {
        c->streams->prev = s;
    }
    c->streams = s;
    c->nstreams++;
    c->heads_open++;
    return 0;
}

static int
on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
          const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
    /* One field of a request's header block (nghttp2 checked it: RFC 9113 §8.2.1, §8.3). */
    (void)flags;
    h2_conn_t *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
        return 0; /* a trailer section: not given to the app */
    }
    h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
    if (s == NULL || s->too_big) {
        return 0;
    }
    s->head_size += namelen + valuelen + FIELD_OVERHEAD;
    if (s->head_size > c->srv->h2.max_headers_size) {
        s->too_big = 1; /* the block is still decoded (HPACK state), then answered 431 */
        return 0;
    }
    const char *n = (const char *)name, *v = (const char *)value;
    sk_span_t vs;
    if (namelen > 0 && n[0] == ':') {
        sk_span_t *slot = NULL;
        uint8_t *has = NULL;
        if (namelen == 7 && memcmp(n, ":method", 7) == 0) {
            slot = &s->method, has = &s->has_method;
        }
        else if (namelen == 5 && memcmp(n, ":path", 5) == 0) {
            slot = &s->path, has = &s->has_path;
        }
        else if (namelen == 10 && memcmp(n, ":authority", 10) == 0) {
            slot = &s->authority, has = &s->has_authority;
        }
        else if (namelen == 7 && memcmp(n, ":scheme", 7) == 0) {
            slot = &s->scheme, has = &s->has_scheme;
        }
        if (slot != NULL) {
            if (buf_span(&s->head, v, valuelen, slot) < 0) {
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
            }
            *has = 1;
        }
        return 0;
    }
    if (namelen == 6 && memcmp(n, "cookie", 6) == 0) {
        /* RFC 9113 §8.2.3: the crumbs become one field, joined with "; " */
        if ((s->cookie_at >= 0 && sk_buf_append(&s->cookie, "; ", 2) < 0) ||
            sk_buf_append(&s->cookie, v, valuelen) < 0) {
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        if (s->cookie_at >= 0) {
            return 0;
        }
        s->cookie_at = s->nfields;
        valuelen = 0; /* the value is set when the block is complete */
    }
    sk_field_t f;
    if (buf_span(&s->head, n, namelen, &f.name) < 0 || buf_span(&s->head, v, valuelen, &vs) < 0 ||
        (f.value = vs, fields_push(&s->fields, &s->nfields, &s->fields_cap, f)) < 0) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return 0;
}

static int
on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *user)
{
    h2_conn_t *c = user;
    h2_stream_t *s = frame->hd.stream_id != 0
                         ? nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id)
                         : NULL;
    int end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    int32_t sid = frame->hd.stream_id;
    if ((sid & 1) && ended_in_window(c, sid) &&
        (((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) && end_stream) ||
         frame->hd.type == NGHTTP2_RST_STREAM)) {
        ended_mark(c, sid, 1); /* the client's side of the stream ended (RFC 9113 §5.1) */
    }
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        if (s == NULL) {
            break;
        }
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
            s->head_open = 0;
            c->heads_open--;
            head_complete(c, s, end_stream);
        }
        else if (end_stream && s->x != NULL && !s->body_done) { /* trailers end the body */
            s->body_done = 1;
            sk_exchange_body_end(s->x);
        }
        else if (end_stream) {
            s->body_done = 1;
        }
        break;
    case NGHTTP2_DATA:
        if (frame->hd.length == 0 && !end_stream) {
            guard(c, SK_H2G_EMPTY_DATA);
        }
        if (s != NULL && end_stream) {
            s->body_done = 1;
            if (s->x != NULL) {
                sk_exchange_body_end(s->x);
            }
        }
        break;
    case NGHTTP2_RST_STREAM: guard(c, SK_H2G_CLIENT_RESET); break;
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK)) {
            guard(c, SK_H2G_SETTINGS);
        }
        break;
    case NGHTTP2_PING:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK)) {
            guard(c, SK_H2G_PING);
        }
        else if (c->shutdown == 1) {
            /* RFC 9113 §6.8: one round trip after the notice, the real last stream id; not
             * submitted here: nghttp2 accepts new streams until the GOAWAY is sent, so the rest
             * of this read could open streams above the id it names (found by fuzz_h2.c) */
            c->goaway_due = 1;
        }
        break;
    case NGHTTP2_PRIORITY: guard(c, SK_H2G_PRIORITY); break;
    case NGHTTP2_WINDOW_UPDATE: guard(c, SK_H2G_WINDOW_UPDATE); break;
    default: break;
    }
    /* A budget went over (guard terminated the session): the rest of this read is not
     * processed. Not only to save the work: nghttp2 resets its input state after this callback,
     * so it would go on parsing, and a later frame that is itself a connection error (a PRIORITY
     * of the wrong length) finds the session terminated already and fails an assertion of
     * nghttp2 1.52 (abort(): the whole server). The failure makes mem_recv return at once; the
     * GOAWAY ENHANCE_YOUR_CALM stays queued (found by fuzz_h2.c). */
    return c->ended ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

static void
drop_rest(nghttp2_session *ng, h2_stream_t *s)
{
    /* RFC 9113 §8.1: the response is complete and the rest of the request is not wanted. Up to
     * DISCARD_MAX more bytes are read and dropped (the windows reopen as for read content), so
     * a body a little longer than what the app read ends normally; past that, or when the
     * stream's window is used up with no update to come, RST_STREAM NO_ERROR. Not at once:
     * some clients (curl 7.88) fail a request whose upload a RST_STREAM cuts short, the
     * response notwithstanding. Called once mem_recv returned (the window's accounting done). */
    if (s->answered && !s->body_done && !s->rst_sent &&
        (s->timed_out || s->discarded > DISCARD_MAX ||
         nghttp2_session_get_stream_local_window_size(ng, s->id) <= 0)) {
        s->rst_sent = 1;
        (void)nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
    }
}

static int
on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
              void *user)
{
    /* Request content: to the exchange (the window reopens as the app takes it: resume), or,
     * with no exchange to take it, back to the windows at once. */
    (void)flags;
    h2_conn_t *c = user;
    h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, id);
    if (s == NULL || s->x == NULL) {
        consume(c, id, len);
        if (s != NULL && s->answered) {
            s->discarded += len;
            s->body_at = 0; /* lingers(): the rest keeps coming */
        }
        return 0;
    }
    uint64_t max = c->srv->limits.max_body;
    if (max != 0 && len > max - s->body_recv) {
        consume(c, id, len);
        body_too_large(s);
        return 0;
    }
    s->body_recv += len;
    s->expect_100 = 0; /* the client sends the content without waiting for a 100 */
    /* counted as given before the exchange has it: a receive() waiting for it takes it at once,
     * and h2w_resume() gives back what was given and taken then; counted after, those bytes
     * were never given back, and a window no larger than them stayed closed for good */
    s->given += len;
    c->given += len;
    if (sk_exchange_body(s->x, (const char *)data, len) < 0) {
        /* nothing of it queued nor taken */
        PyErr_WriteUnraisable(c->srv->owner);
        give_back(s, len);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    s->body_at = 0; /* a body byte: sync_deadline re-arms --timeout-request-body */
    return 0;
}

static int
on_frame_send(nghttp2_session *ng, const nghttp2_frame *frame, void *user)
{
    h2_conn_t *c = user;
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
        if (frame->rst_stream.error_code != NGHTTP2_NO_ERROR && (s == NULL || !s->app_reset)) {
            guard(c, SK_H2G_SERVER_RESET); /* MadeYouReset (CVE-2025-8671) */
        }
        return 0;
    }
    if (frame->hd.type == NGHTTP2_DATA) {
        /* the DATA the server sends pays for the frames a reader answers it with: a Go or
         * grpc-go client's WINDOW_UPDATE per 4 KiB read (one token per 2 KiB: a stream's and
         * the connection's), grpc's BDP PING per DATA (sk_h2guard.h) */
        sk_h2guard_credit(&c->guard, SK_H2G_WINDOW_UPDATE,
                          (uint32_t)((frame->hd.length + 2047) / 2048));
        sk_h2guard_credit(&c->guard, SK_H2G_PING, 1);
    }
    if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
        if (s != NULL && !s->body_done && s->x == NULL) {
            s->answered = 1;
            drop_rest(ng, s);
        }
    }
    return 0;
}

static int
on_invalid_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, int lib_error_code,
                      void *user)
{
    /* nghttp2 refused a frame and answers it itself (RST_STREAM for a stream error, GOAWAY for
     * a connection error); skirr is told only here, and --log-level trace says why. A request
     * whose fields break RFC 9113 §8 (nghttp2's checks: pseudo-header fields missing, repeated,
     * unknown or after a regular field, an uppercase or invalid name or value, a
     * connection-specific field, te other than trailers, a content-length that is not one
     * number or disagrees with END_STREAM) is a stream error PROTOCOL_ERROR: the same event as
     * skirr's own checks give (malformed_stream), the reason nghttp2's words. */
    (void)ng;
    h2_conn_t *c = user;
    if (c->srv->trace == NULL) {
        return 0;
    }
    static const char *const types[] = {"DATA",          "HEADERS",      "PRIORITY", "RST_STREAM",
                                        "SETTINGS",      "PUSH_PROMISE", "PING",     "GOAWAY",
                                        "WINDOW_UPDATE", "CONTINUATION"};
    if (frame->hd.type == NGHTTP2_HEADERS && (lib_error_code == NGHTTP2_ERR_HTTP_HEADER ||
                                              lib_error_code == NGHTTP2_ERR_HTTP_MESSAGING)) {
        trace_malformed(c, "nghttp2: ", nghttp2_strerror(lib_error_code));
        return 0;
    }
    char event[200];
    const char *type =
        frame->hd.type < sizeof(types) / sizeof(types[0]) ? types[frame->hd.type] : "frame";
    snprintf(event, sizeof(event), "HTTP/2 %s on stream %d refused (nghttp2: %s)", type,
             (int)frame->hd.stream_id, nghttp2_strerror(lib_error_code));
    socklen_t plen;
    sk_access_trace(&c->srv->access, c->client, sk_transport_peer(c->t, &plen), event);
    return 0;
}

static int
on_frame_not_send(nghttp2_session *ng, const nghttp2_frame *frame, int lib_error_code, void *user)
{
    /* nghttp2 could not send a frame it had queued: for a response's HEADERS (the head, or the
     * trailers) that is a header block over its send limit (NGHTTP2_ERR_FRAME_SIZE_ERROR), or
     * a session nghttp2 is ending (a connection error it answered with GOAWAY in the read that
     * also opened the stream: NGHTTP2_ERR_SESSION_CLOSING), and the stream would wait for good
     * for a head or trailers that never come. section_fits() refuses an oversized section to
     * the app before it is queued; should one still get here, the stream is reset
     * INTERNAL_ERROR (RFC 9113 §8.1: never taken for complete), and its app, if still there,
     * loses the stream (ClientDisconnected). */
    h2_conn_t *c = user;
    if (frame->hd.type != NGHTTP2_HEADERS) {
        return 0;
    }
    h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
    if (s == NULL || s->rst_sent) {
        return 0;
    }
    s->app_reset = 1; /* the server's own reset, not the peer's doing (guard: MadeYouReset) */
    s->rst_sent = 1;
    (void)nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                    NGHTTP2_INTERNAL_ERROR);
    if (c->srv->trace != NULL) {
        char event[160];
        socklen_t plen;
        snprintf(event, sizeof(event),
                 "HTTP/2 stream reset: a response header block nghttp2 cannot send (%s)",
                 lib_error_code == NGHTTP2_ERR_FRAME_SIZE_ERROR ? "over 64 KiB"
                                                                : nghttp2_strerror(lib_error_code));
        sk_access_trace(&c->srv->access, c->client, sk_transport_peer(c->t, &plen), event);
    }
    detach(s);
    return 0;
}

static int
on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *user)
{
    /* The stream ended (both ends, or a reset either way): a request still attached gets
     * http.disconnect; the stream is freed. */
    (void)error_code;
    h2_conn_t *c = user;
    h2_stream_t *s = nghttp2_session_get_stream_user_data(ng, id);
    if (s == NULL) {
        return 0;
    }
    (void)nghttp2_session_set_stream_user_data(ng, id, NULL);
    unlink_stream(c, s);
    c->idle_at = 0; /* the idle deadline counts from the last stream's end */
    s->run_pending = 0;
    detach(s);
    stream_free(s);
    return 0;
}

/* ---- the connection -------------------------------------------------------------------------- */

static void
pump(h2_conn_t *c)
{
    /* Moves nghttp2's output into the transport's until it has no more or the transport's
     * output reaches SK_OUTPUT_HIGH_WATER (writable() pumps again): the frames mem_send returns
     * are appended here, the DATA frames by send_data() from within mem_send (which then returns
     * the bytes of a frame that follows them, or 0: nothing more, or send_data() paused at the
     * mark: c->data_paused). Closes after the write once nghttp2 wants neither to read nor to
     * write (GOAWAY done, no stream left). Appends only: called where a write follows, at
     * data_received()'s end (the transport writes when it returns; sk_h2_start runs inside the
     * HTTP/1.1 handler's) and in flush_how(). Every other entry (writable, deadline, shutdown,
     * the wire) calls flush_how(): output appended and not written would wait for an event that
     * may never come (the window is open, nothing is read). */
    if (c->in_pump || c->closed) {
        return;
    }
    c->in_pump = 1;
    if (!c->ended) {
        ack_connection(c);
    }
    int fatal = 0;
    for (int round = 0; round < 2 && !fatal; round++) {
        int empty = 0; /* nghttp2 had nothing more to send */
        while (sk_transport_out_len(c->t) < SK_OUTPUT_HIGH_WATER) {
            const uint8_t *data;
            c->data_paused = 0;
            ssize_t n = nghttp2_session_mem_send(c->ng, &data);
            if (n < 0) {
                fatal = 1;
                break;
            }
            if (n == 0) {
                /* send_data() appends DATA frames itself, inside mem_send, which then goes on
                 * to the next frame: 0 is "nothing more" unless send_data() paused it at the
                 * mark (its frame appended; the loop's condition ends the round) */
                if (c->data_paused) {
                    continue;
                }
                empty = 1;
                break;
            }
            /* not progress for the write timeout (DL_STALL): only DATA that leaves is
             * (data_sent); a PING ACK or a new stream's HEADERS would otherwise keep a stalled
             * connection open for good */
            if (sk_buf_append(sk_transport_out(c->t), data, (size_t)n) < 0) {
                fatal = 1;
                break;
            }
        }
        if (!c->resets_pending || !empty) {
            break; /* none, or the output is full: they wait for the next pump (a reset
                    * submitted now would drop what their streams still have queued) */
        }
        /* the resets abort() deferred, now that what their streams queued is out */
        c->resets_pending = 0;
        for (h2_stream_t *s = c->streams; s != NULL; s = s->next) {
            if (s->reset_pending) {
                s->reset_pending = 0;
                (void)nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id,
                                                NGHTTP2_INTERNAL_ERROR);
            }
        }
    }
    c->in_pump = 0;
    if (fatal) {
        sk_transport_close(c->t, SK_CLOSE_NOW);
        return;
    }
    wake_drained(c);
    if (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng) &&
        sk_transport_is_open(c->t)) {
        sk_transport_close(c->t, SK_CLOSE_AFTER_WRITE);
        return;
    }
    sync_deadline(c);
}

static size_t
h2_data_received(void *h, const char *data, size_t len)
{
    h2_conn_t *c = h;
    c->in_recv = 1;
    /* Once skirr ended the session (c->ended: a budget went over, also from on_frame_send's
     * reset count, or a skipped or ended stream id was used), no byte more reaches nghttp2: its
     * session is terminated, and a connection error found in later input fails an assertion of
     * nghttp2 1.52 (on_frame_recv or on_begin_frame stops the read that ended it). */
    ssize_t rv =
        c->ended ? (ssize_t)len : nghttp2_session_mem_recv(c->ng, (const uint8_t *)data, len);
    if (rv < 0 && !c->closed && !c->ended) {
        /* fatal for the session: a bad preface (RFC 9113 §3.4) is a PROTOCOL_ERROR, a flood of
         * unsent ACKs or a failure of skirr's own an immediate end */
        if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_NOMEM) {
            c->in_recv = 0;
            sk_transport_close(c->t, SK_CLOSE_NOW);
            return len;
        }
        uint32_t code = NGHTTP2_INTERNAL_ERROR;
        if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
            code = NGHTTP2_PROTOCOL_ERROR;
        }
        else if (rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
            code = NGHTTP2_ENHANCE_YOUR_CALM; /* a header block that never ends (CVE-2024-27316) */
        }
        (void)nghttp2_session_terminate_session(c->ng, code);
    }
    if (c->goaway_due && !c->closed) {
        /* the shutdown's final GOAWAY, naming every stream this read opened (they are served):
         * pump() sends it next, and nghttp2 ignores new streams from then on */
        c->goaway_due = 0;
        c->shutdown = 2;
        (void)nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
                                    nghttp2_session_get_last_proc_stream_id(c->ng),
                                    NGHTTP2_NO_ERROR, NULL, 0);
    }
    if (c->srv->metrics != NULL) {
        c->srv->metrics->bytes_in += len;
    }
    if (!c->closed && !c->ended) {
        run_pending(c);
    }
    for (h2_stream_t *s = c->streams; s != NULL && !c->closed; s = s->next) {
        drop_rest(c->ng, s); /* the window's accounting is complete once mem_recv returned */
    }
    c->in_recv = 0;
    pump(c);
    return len;
}

static void
h2_writable(void *h)
{
    h2_conn_t *c = h;
    if (flush_how(c, 1) == 0) {
        wake_drained(c);
    }
}

static void
body_timeouts(h2_conn_t *c)
{
    /* --timeout-request-body passed for the streams whose body deadline is due (as HTTP/1.1,
     * flow_control.toml's skirr-timeout-request-body): the app's receive() gets
     * http.disconnect; the stream is answered 408 (RFC 9110 §15.5.9) then reset NO_ERROR once
     * it left (RFC 9113 §8.1), or, when its response began, reset INTERNAL_ERROR. A stream
     * answered already whose rest did not come in time (lingers) is reset NO_ERROR. The
     * connection and its other streams go on. */
    double t = now() + 0.001; /* the reactor's clock may round the deadline down */
    for (h2_stream_t *s = c->streams; s != NULL && !c->closed; s = s->next) {
        if (lingers(c, s) && s->body_at != 0 && s->body_at <= t) {
            /* answered: the rest of the request did not come in time; nothing to tell an app */
            s->body_at = 0;
            s->rst_sent = 1;
            if (c->srv->metrics != NULL) {
                c->srv->metrics->timeouts[SK_TIMEOUT_BODY]++;
            }
            (void)nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
            continue;
        }
        if (!wants_body(c, s) || s->body_at == 0 || s->body_at > t) {
            continue;
        }
        s->body_at = 0;
        s->timed_out = 1;
        if (c->srv->metrics != NULL) {
            c->srv->metrics->timeouts[SK_TIMEOUT_BODY]++;
        }
        if (!s->submitted) {
            /* noted while the exchange is attached: the line names its scope's client */
            note_refusal(s, 408, "request content not complete in time");
        }
        detach(s);
        if (!s->submitted) {
            answer_refused(s, 408);
        }
        else {
            s->app_reset = 1;
            (void)nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, s->id,
                                            NGHTTP2_INTERNAL_ERROR);
        }
    }
    (void)flush(c);
}

static void
h2_deadline(void *h, int kind)
{
    h2_conn_t *c = h;
    if (kind == DL_STALL) {
        /* the peer kept a window closed for --timeout-write seconds: as a socket that takes no
         * bytes (sk_transport.h's write timeout), the connection goes; send() calls waiting
         * raise ClientDisconnected */
        if (c->srv->metrics != NULL) {
            c->srv->metrics->timeouts[SK_TIMEOUT_WRITE]++;
        }
        if (c->srv->trace != NULL) {
            socklen_t plen;
            sk_access_trace(&c->srv->access, c->client, sk_transport_peer(c->t, &plen),
                            "HTTP/2 connection closed (--timeout-write: flow-control window "
                            "closed)");
        }
        (void)nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
        (void)flush(c);
        if (!c->closed && sk_transport_is_open(c->t)) {
            sk_transport_close(c->t, SK_CLOSE_AFTER_WRITE);
        }
        return;
    }
    c->dl_kind = 0;
    if (kind == DL_BODY) {
        body_timeouts(c);
        return;
    }
    if (c->srv->metrics != NULL && kind != DL_SHUTDOWN) {
        c->srv->metrics->timeouts[kind == DL_IDLE ? SK_TIMEOUT_KEEPALIVE : SK_TIMEOUT_HEAD]++;
    }
    if (c->srv->trace != NULL) {
        socklen_t plen;
        sk_access_trace(&c->srv->access, c->client, sk_transport_peer(c->t, &plen),
                        kind == DL_IDLE   ? "HTTP/2 connection idle: --timeout-keep-alive"
                        : kind == DL_HEAD ? "HTTP/2 connection closed: --timeout-request-head"
                                          : "HTTP/2 connection: final GOAWAY for the shutdown");
    }
    if (kind == DL_SHUTDOWN) {
        c->shutdown = 2;
        (void)nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
                                    nghttp2_session_get_last_proc_stream_id(c->ng),
                                    NGHTTP2_NO_ERROR, NULL, 0);
        (void)flush(c);
        return;
    }
    /* idle: GOAWAY NO_ERROR; a header block never completed: the same, and the connection goes */
    (void)nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
    (void)flush(c);
    if (!c->closed && sk_transport_is_open(c->t)) {
        sk_transport_close(c->t, SK_CLOSE_AFTER_WRITE);
    }
}

static void
h2_shutdown(void *h)
{
    /* RFC 9113 §6.8: GOAWAY with 2^31-1 and a PING; at its ACK (or SHUTDOWN_RTT) the GOAWAY
     * with the last stream id; streams in flight finish, then the connection closes. */
    h2_conn_t *c = h;
    if (c->closed || c->shutdown != 0) {
        return;
    }
    c->shutdown = 1;
    uint8_t opaque[8] = {'s', 'k', 'i', 'r', 'r', 'b', 'y', 'e'};
    if (nghttp2_submit_shutdown_notice(c->ng) != 0 ||
        nghttp2_submit_ping(c->ng, NGHTTP2_FLAG_NONE, opaque) != 0) {
        sk_transport_close(c->t, SK_CLOSE_NOW);
        return;
    }
    sk_transport_set_deadline(c->t, DL_SHUTDOWN, SHUTDOWN_RTT);
    (void)flush(c);
}

static void
h2_closed(void *h, int reason)
{
    h2_conn_t *c = h;
    c->closed = 1;
    if (c->srv->metrics != NULL && reason == SK_CLOSED_WRITE_TIMEOUT) {
        c->srv->metrics->timeouts[SK_TIMEOUT_WRITE]++;
    }
    if (c->srv->trace != NULL) {
        socklen_t plen;
        sk_access_trace(&c->srv->access, c->client, sk_transport_peer(c->t, &plen),
                        reason == SK_CLOSED_PEER ? "HTTP/2 connection lost (closed by the client)"
                        : reason == SK_CLOSED_WRITE_TIMEOUT
                            ? "HTTP/2 connection closed (--timeout-write: no progress)"
                            : "HTTP/2 connection closed");
    }
    for (h2_stream_t *s = c->streams; s != NULL; s = s->next) {
        s->run_pending = 0;
        detach(s);
    }
}

static void
h2_release(void *h)
{
    h2_conn_t *c = h;
    h2_stream_t *s = c->streams;
    while (s != NULL) {
        h2_stream_t *next = s->next;
        if (s->x != NULL) { /* never for a closed connection: closed() detached them */
            Py_CLEAR(s->x);
        }
        stream_free(s);
        s = next;
    }
    c->streams = NULL;
    nghttp2_session_del(c->ng);
    for (size_t i = 0; i < c->nrunning; i++) {
        Py_DECREF(c->running[i]);
    }
    PyMem_Free(c->running);
    Py_CLEAR(c->client);
    Py_CLEAR(c->local);
    Py_CLEAR(c->tls);
    PyMem_Free(c);
}

static int
h2_traverse(void *h, visitproc visit, void *arg)
{
    h2_conn_t *c = h;
    for (h2_stream_t *s = c->streams; s != NULL; s = s->next) {
        Py_VISIT(s->x);
    }
    for (size_t i = 0; i < c->nrunning; i++) {
        Py_VISIT(c->running[i]);
    }
    return 0;
}

const sk_handler_ops_t sk_h2_ops = {
    .data_received = h2_data_received,
    .writable = h2_writable,
    .deadline = h2_deadline,
    .shutdown = h2_shutdown,
    .closed = h2_closed,
    .release = h2_release,
    .traverse = h2_traverse,
};

static void *
ng_malloc(size_t size, void *user)
{
    (void)user;
    return PyMem_RawMalloc(size);
}

static void
ng_free(void *ptr, void *user)
{
    (void)user;
    PyMem_RawFree(ptr);
}

static void *
ng_calloc(size_t n, size_t size, void *user)
{
    (void)user;
    return PyMem_RawCalloc(n, size);
}

static void *
ng_realloc(void *ptr, size_t size, void *user)
{
    (void)user;
    return PyMem_RawRealloc(ptr, size);
}

int
sk_h2_start(sk_transport_t *t, sk_serve_t *srv)
{
    nghttp2_session_callbacks *cbs = NULL;
    nghttp2_option *opt = NULL;
    int rc = -1;
    h2_conn_t *c = PyMem_Calloc(1, sizeof(h2_conn_t));
    if (c == NULL) {
        goto done;
    }
    c->t = t;
    c->srv = srv;
    sk_h2guard_init(&c->guard, &srv->h2.guard, now());
    c->last_headers_id = -1;
    if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0) {
        goto done;
    }
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, on_frame_not_send);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame_recv);
    nghttp2_session_callbacks_set_send_data_callback(cbs, send_data);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_stream_reset_rate_limit(opt, RESET_BURST, RESET_RATE);
    nghttp2_option_set_max_continuations(opt, MAX_CONTINUATIONS);
    nghttp2_option_set_max_settings(opt, MAX_SETTINGS);
    nghttp2_option_set_max_outbound_ack(opt, MAX_OUTBOUND_ACK);
    nghttp2_mem mem = {
        .malloc = ng_malloc, .free = ng_free, .calloc = ng_calloc, .realloc = ng_realloc};
    if (nghttp2_session_server_new3(&c->ng, cbs, c, opt, &mem) != 0) {
        c->ng = NULL;
        goto done;
    }
    const sk_h2_config_t *cfg = &srv->h2;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg->max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, cfg->initial_window},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, cfg->max_frame_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, cfg->max_headers_size},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    };
    if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) != 0) {
        goto done;
    }
    /* the connection's window (RFC 9113 §6.9.1, 65535 until a WINDOW_UPDATE on stream 0)
     * bounds the request content buffered for the apps over all streams; larger than one
     * stream's, so a stream whose app does not read holds back only its own upload */
    if (cfg->connection_window > NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE &&
        nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0,
                                              (int32_t)cfg->connection_window) != 0) {
        goto done;
    }
    SSL *ssl = sk_tls_ssl(sk_transport_stream(t));
    if (ssl != NULL && (c->tls = sk_tls_info(c->srv->st, ssl)) == NULL) {
        PyErr_Clear();
        goto done;
    }
    sk_transport_switch(t, &sk_h2_ops, c);
    if (srv->trace != NULL) {
        socklen_t plen;
        sk_access_trace(&srv->access, NULL, sk_transport_peer(t, &plen),
                        ssl != NULL ? "HTTP/2 connection (ALPN h2)"
                                    : "HTTP/2 connection (prior knowledge)");
    }
    c->in_recv = 1; /* the switch's caller is in data_received(): its end writes */
    pump(c);
    c->in_recv = 0;
    c = NULL; /* the transport's now */
    rc = 0;
done:
    if (c != NULL) {
        if (c->ng != NULL) {
            nghttp2_session_del(c->ng);
        }
        Py_CLEAR(c->tls);
        PyMem_Free(c);
    }
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    return rc;
}
