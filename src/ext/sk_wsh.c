/* sk_wsh.c — the WebSocket wire over HTTP/1.1: RFC 6455 after a 101 (see sk_wsh.h).
 *
 * Owns, per connection (one ws1_t, the transport's handler): the handshake's answer on the
 * HTTP/1.1 wire (101 with Sec-WebSocket-Accept, 426, 403/500, a denial response), the frame
 * parser and the message being reassembled, permessage-deflate (sk_wspmd.h), pings and pongs,
 * the close handshake and its timeout, keepalive pings, and a protocol error held behind the
 * messages the app has not taken yet. What a message or an event is to the app is the ASGI
 * session's (sk_wssession.h), which this wire serves through sk_wss_wire_ops_t and answers
 * through the sk_wss_* functions.
 * Never: reaches into the transport or the reactor except through sk_transport.h.
 *
 * States of the wire (ws1_state, changed only by set_state()):
 *   HANDSHAKE (no answer yet) -> OPEN (101 sent) | RESPONSE (denial response started)
 *   | DONE (403/500/denial complete, or the connection went away);
 *   OPEN -> CLOSING (the server sent its Close, waits for the peer's) -> DONE;
 *   OPEN -> DONE (the peer's Close answered, a protocol error, or the connection went away).
 * A protocol error behind messages the app has not taken yet (sk_wss_backlog) is held
 * (held_code, still OPEN, reading stopped) until the app has received them and called receive()
 * again (receiving()), its task ended (fail(), close()), or CLOSE_TIMEOUT passed: the app's
 * answers to those messages go out before the Close.
 */
#include "sk_wsh.h"

#include "sk_serve.h"
#include "sk_resp.h"
#include "sk_token.h"
#include "sk_ws.h"
#include "sk_wshs.h"
#include "sk_wspmd.h"
#include "sk_wssession.h"

#include <assert.h>
#include <string.h>

#define BUF_KEEP (64 * 1024) /* a message buffer over this is freed after use */
#define CLOSE_TIMEOUT 10.0   /* seconds the peer has to answer the server's Close */

/* The handler's deadline kinds (sk_transport_set_deadline). */
enum {
    DL_PING = 1, /* --ws-ping-interval passed: send a ping */
    DL_PONG,     /* --ws-ping-timeout passed without the pong: fail the connection */
    DL_CLOSE,    /* the peer did not answer the server's Close in CLOSE_TIMEOUT: close */
    DL_HELD,     /* a held protocol error waited CLOSE_TIMEOUT for the app: fail now */
};

enum ws1_state { WS_HANDSHAKE = 0, WS_RESPONSE, WS_OPEN, WS_CLOSING, WS_DONE };

/* What only the handshake needs: freed once the 101 is sent (issue 37: an open WebSocket keeps
 * none of it). */
typedef struct {
    char accept[SK_WS_ACCEPT_LEN]; /* the 101's Sec-WebSocket-Accept (RFC 6455 §4.2.2) */
    uint8_t pmd_offered;           /* the handshake offered acceptable permessage-deflate params */
    sk_pmd_params_t pmd_params;    /* those parameters (RFC 7692 §7.1) */
    sk_resp_t resp;                /* the denial response (websocket.http.response.*) */
} ws1_hs_t;

/* permessage-deflate once negotiated. */
typedef struct {
    sk_pmd_t z;    /* the zlib streams */
    sk_buf_t zout; /* a compressed message to send */
} ws1_pmd_t;

typedef struct {
    sk_serve_t *srv;   /* borrowed: the session's owner keeps it alive */
    sk_transport_t *t; /* borrowed; NULL once the transport closed */
    sk_wss_t *session; /* strong: released in ws_release() */
    enum ws1_state state;
    uint8_t paused;         /* reading stopped: the session's flow control, or held_code */
    int held_code;          /* a protocol error's close code waiting for the app, or 0 */
    uint8_t msg_opcode;     /* SK_WS_TEXT/SK_WS_BINARY of the message being reassembled */
    uint8_t msg_compressed; /* it has RSV1: permessage-deflate (inflated as it arrives) */
    uint32_t pings;         /* server pings sent (their payload) */
    ws1_pmd_t *pmd;         /* PyMem, owned: permessage-deflate once negotiated, else NULL */
    ws1_hs_t *hs;           /* PyMem, owned: until the 101 is sent (state HANDSHAKE and
                                 * RESPONSE, and DONE after them), else NULL */
    sk_ws_parser_t parser;
    sk_buf_t msg; /* the message being reassembled */
} ws1_t;

extern const sk_handler_ops_t sk_wsh_ops;

static void
hs_free(ws1_t *w)
{
    /* Frees what only the handshake needed (w->hs), once the 101 is out or the wire is freed. */
    if (w->hs != NULL) {
        sk_resp_free(&w->hs->resp);
        PyMem_Free(w->hs);
        w->hs = NULL;
    }
}

static void
set_state(ws1_t *w, enum ws1_state to)
{
    assert(to != WS_HANDSHAKE && w->state != WS_DONE);
    if (w->state == WS_RESPONSE && w->hs != NULL && w->hs->resp.head_written) {
        /* the denial response ended */
        sk_wss_answered(w->session, w->hs->resp.status, w->hs->resp.body_sent);
    }
    w->state = to;
}

/* ---- writing frames ------------------------------------------------------------------------- */

static void
fail(ws1_t *w, int code, const char *reason)
{
    /* Fails (or finishes) the connection from the server's side: a Close with code (0: an empty
     * payload) and reason, then close after the write (RFC 6455 §7.1.7). */
    if (w->t == NULL || !sk_transport_is_open(w->t)) {
        return;
    }
    sk_transport_t *t = w->t;
    const char *rs = reason ? reason : "";
    if (sk_ws_close_frame(sk_transport_out(t), code, rs, strlen(rs)) < 0) {
        (void)sk_ws_close_frame(sk_transport_out(t), code, "", 0);
    }
    if (w->state != WS_DONE) {
        set_state(w, WS_DONE);
    }
    sk_wss_closed(w->session, 0, code ? code : SK_WS_NO_STATUS, reason,
                  reason ? strlen(reason) : 0);
    sk_transport_close(t, SK_CLOSE_AFTER_WRITE);
}

static void
fail_in_order(ws1_t *w, int code)
{
    /* A protocol error of the peer's (1002, 1007, 1009): fails the connection (RFC 6455 §7.1.7),
     * but not ahead of the messages decoded before it. While one waits in the queue or the app
     * has not come back to receive() since the last, the error is held: nothing more is read
     * and the Close waits for release_held() (or DL_HELD, CLOSE_TIMEOUT from now). */
    if (!sk_wss_backlog(w->session) || w->state != WS_OPEN || w->t == NULL || w->held_code) {
        fail(w, code, NULL);
        return;
    }
    w->held_code = code;
    if (!w->paused) {
        w->paused = 1;
        sk_transport_pause_reading(w->t, 1);
    }
    sk_transport_set_deadline(w->t, DL_HELD, CLOSE_TIMEOUT);
}

static int
release_held(ws1_t *w, int now)
{
    /* Sends a held protocol error's Close once the app has every message before it (now: at
     * once, whatever the app has). 1 if one was held (the connection is failed), else 0. */
    if (!w->held_code) {
        return 0;
    }
    if (!now && sk_wss_backlog(w->session)) {
        return 1;
    }
    int code = w->held_code;
    w->held_code = 0;
    fail(w, code, NULL);
    return 1;
}

static int
start_close(ws1_t *w, int code, const char *reason, size_t reason_len)
{
    /* The server's side of the close handshake (RFC 6455 §5.5.1, §7.1.2): a Close with code and
     * reason, then CLOSING until the peer's Close arrives (the TCP connection is closed then) or
     * CLOSE_TIMEOUT passes. 0, or -1 when nothing could be sent (out of memory). */
    if (sk_ws_close_frame(sk_transport_out(w->t), code, reason, reason_len) < 0) {
        return -1;
    }
    set_state(w, WS_CLOSING);
    sk_wss_closing(w->session);
    sk_transport_set_deadline(w->t, DL_CLOSE, CLOSE_TIMEOUT);
    (void)sk_transport_write(w->t);
    return 0;
}

static void
arm_ping(ws1_t *w)
{
    if (w->t != NULL && w->state == WS_OPEN && w->srv->ws.ping_interval > 0) {
        sk_transport_set_deadline(w->t, DL_PING, w->srv->ws.ping_interval);
    }
}

/* ---- the handler table ---------------------------------------------------------------------- */

static int
message_end(ws1_t *w)
{
    /* Gives the reassembled message to the session. 0 or -1 (exception set). */
    size_t n = sk_buf_len(&w->msg);
    int rc =
        sk_wss_message(w->session, w->msg_opcode == SK_WS_TEXT, n ? sk_buf_head(&w->msg) : "", n);
    sk_buf_consume(&w->msg, n);
    if (w->msg.cap > BUF_KEEP) {
        sk_buf_free(&w->msg); /* a big message's storage is not kept for the connection's life */
    }
    return rc;
}

static void
inflate_failed(ws1_t *w, int rc)
{
    /* A compressed message that cannot be inflated: 1009 past --ws-max-size (RFC 6455 §7.4.1),
     * 1007 for data that is not DEFLATE (as the websockets library answers), 1011 out of
     * memory. */
    if (rc == SK_ETOOLONG || rc == SK_ESTATE) {
        fail_in_order(w, rc == SK_ETOOLONG ? SK_WS_TOO_BIG : SK_WS_INVALID_DATA);
    }
    else {
        fail(w, 1011, NULL);
    }
}

static size_t
ws_data_received(void *h, const char *data, size_t len)
{
    ws1_t *w = h;
    size_t off = 0;
    if (w->state == WS_HANDSHAKE || w->state == WS_RESPONSE) {
        return 0; /* frames wait for the 101 (kept by the transport, in order) */
    }
    if (w->state == WS_DONE || w->held_code) {
        return len; /* nothing after a failure is read */
    }
    while (off < len || sk_ws_parser_idle(&w->parser) == 0) {
        if (w->t == NULL || !sk_transport_is_open(w->t) || w->paused) {
            break;
        }
        sk_ws_event_t ev;
        /* The parser unmasks in place: the transport's input (its read buffer or input buffer)
         * is writable memory, and only consumed bytes change. */
        size_t n = sk_ws_parser_execute(&w->parser, (char *)data + off, len - off, &ev);
        off += n;
        if (ev.type == SK_WS_EV_NONE) {
            break;
        }
        if (ev.type == SK_WS_EV_MESSAGE) {
            w->msg_opcode = (uint8_t)ev.opcode;
            w->msg_compressed = (uint8_t)ev.compressed;
        }
        else if (ev.type == SK_WS_EV_DATA) {
            int rc = w->msg_compressed ? sk_pmd_inflate(&w->pmd->z, ev.data, ev.len, 0, &w->msg,
                                                        w->srv->ws.max_size)
                                       : sk_buf_append(&w->msg, ev.data, ev.len);
            if (rc < 0) {
                inflate_failed(w, rc);
                off = len;
                break;
            }
        }
        else if (ev.type == SK_WS_EV_MESSAGE_END) {
            if (w->msg_compressed) {
                /* RFC 7692 §7.2.2: the tail, then the text's UTF-8 check (RFC 6455 §8.1) */
                int rc = sk_pmd_inflate(&w->pmd->z, NULL, 0, 1, &w->msg, w->srv->ws.max_size);
                if (rc < 0) {
                    inflate_failed(w, rc);
                    off = len;
                    break;
                }
                if (w->msg_opcode == SK_WS_TEXT &&
                    !sk_ws_utf8_valid(sk_buf_len(&w->msg) ? sk_buf_head(&w->msg) : "",
                                      sk_buf_len(&w->msg))) {
                    fail_in_order(w, SK_WS_INVALID_DATA);
                    off = len;
                    break;
                }
            }
            if (w->state == WS_OPEN && message_end(w) < 0) {
                PyErr_WriteUnraisable((PyObject *)w->session);
                fail(w, 1011, "server error");
                break;
            }
            sk_buf_consume(&w->msg, sk_buf_len(&w->msg)); /* dropped when not open */
        }
        else if (ev.type == SK_WS_EV_PING) {
            /* RFC 6455 §5.5.2: a Pong with the same payload, the app not involved. */
            if (w->state == WS_OPEN &&
                sk_ws_frame(sk_transport_out(w->t), 1, SK_WS_PONG, ev.data, ev.len) < 0) {
                fail(w, 1011, "out of memory");
                break;
            }
        }
        else if (ev.type == SK_WS_EV_PONG) {
            if (sk_transport_deadline_kind(w->t) == DL_PONG) {
                arm_ping(w); /* the keepalive ping was answered */
            }
        }
        else if (ev.type == SK_WS_EV_CLOSE) {
            /* RFC 6455 §5.5.1: answer the peer's Close (with its code; none for 1005) unless the
             * server's went first, then close the TCP connection (§7.1.1: the server does). */
            if (w->state == WS_OPEN) {
                (void)sk_ws_close_frame(sk_transport_out(w->t),
                                        ev.code == SK_WS_NO_STATUS ? 0 : ev.code, "", 0);
            }
            set_state(w, WS_DONE);
            sk_wss_closed(w->session, 1, ev.code, ev.data, ev.len);
            sk_transport_close(w->t, SK_CLOSE_AFTER_WRITE);
            off = len;
            break;
        }
        else { /* SK_WS_EV_ERROR: fail the connection with the code the codec names */
            fail_in_order(w, ev.code);
            off = len;
            break;
        }
    }
    return off;
}

static void
ws_writable(void *h)
{
    ws1_t *w = h;
    if (w->t != NULL && sk_transport_out_len(w->t) < SK_OUTPUT_HIGH_WATER) {
        sk_wss_drained(w->session);
    }
}

static void
ws_deadline(void *h, int kind)
{
    ws1_t *w = h;
    if (kind == DL_PING && w->state == WS_OPEN) {
        /* --ws-ping-interval: a keepalive ping, answered within --ws-ping-timeout */
        uint8_t payload[4];
        w->pings++;
        for (int i = 0; i < 4; i++) {
            payload[i] = (uint8_t)(w->pings >> (8 * (3 - i)));
        }
        if (sk_ws_frame(sk_transport_out(w->t), 1, SK_WS_PING, payload, sizeof(payload)) < 0 ||
            sk_transport_write(w->t) < 0 || w->t == NULL) {
            return;
        }
        if (w->srv->ws.ping_timeout > 0) {
            sk_transport_set_deadline(w->t, DL_PONG, w->srv->ws.ping_timeout);
        }
        else {
            arm_ping(w);
        }
    }
    else if (kind == DL_PONG) {
        fail(w, 1011, "keepalive ping timeout"); /* as the websockets library says it */
    }
    else if (kind == DL_HELD) {
        (void)release_held(w, 1); /* the app did not come back to receive() in time */
    }
    else if (kind == DL_CLOSE) {
        /* the peer never answered the server's Close */
        sk_wss_closed(w->session, 0, SK_WS_ABNORMAL, NULL, 0);
        sk_transport_close(w->t, SK_CLOSE_NOW);
    }
}

static void
ws_shutdown(void *h)
{
    ws1_t *w = h;
    if (release_held(w, 1)) {
        return;
    }
    if (w->state == WS_OPEN) {
        /* RFC 6455 §7.4.1: 1012, the server is restarting (uvicorn sends the same) */
        (void)start_close(w, 1012, "", 0);
    }
}

static void
ws_closed(void *h, int reason)
{
    ws1_t *w = h;
    w->t = NULL;
    if (reason == SK_CLOSED_LINGER_DONE) {
        /* a close of the server's own (a denial the app finished, a Close handshake) after every
         * byte was written: a send() still waiting for drain completed, its bytes went out */
        sk_wss_drained(w->session);
    }
    if (w->state != WS_DONE) {
        set_state(w, WS_DONE);
    }
    sk_wss_gone(w->session); /* RFC 6455 §7.1.5: no Close received: 1006 */
}

static void
ws_release(void *h)
{
    /* Frees the wire (made in sk_wsh_start()) and its reference to the session. */
    ws1_t *w = h;
    sk_buf_free(&w->msg);
    hs_free(w);
    if (w->pmd != NULL) {
        sk_pmd_free(&w->pmd->z);
        sk_buf_free(&w->pmd->zout);
        PyMem_Free(w->pmd);
    }
    Py_XDECREF((PyObject *)w->session);
    PyMem_Free(w);
}

static size_t
ws_idle(void *h)
{
    /* Nothing unsent or unread: a message buffer that is empty (no message half reassembled, no
     * compressed one waiting) gives its storage back. */
    ws1_t *w = h;
    size_t freed = 0;
    if (sk_buf_len(&w->msg) == 0) {
        freed += w->msg.cap;
        sk_buf_free(&w->msg);
    }
    if (w->pmd != NULL && sk_buf_len(&w->pmd->zout) == 0) {
        freed += w->pmd->zout.cap;
        sk_buf_free(&w->pmd->zout);
    }
    return freed;
}

static int
ws_traverse(void *h, visitproc visit, void *arg)
{
    ws1_t *w = h;
    return w->session != NULL ? sk_wss_traverse(w->session, visit, arg) : 0;
}

const sk_handler_ops_t sk_wsh_ops = {
    .data_received = ws_data_received,
    .writable = ws_writable,
    .deadline = ws_deadline,
    .shutdown = ws_shutdown,
    .closed = ws_closed,
    .release = ws_release,
    .traverse = ws_traverse,
    .idle = ws_idle,
};

static int
resp_error(int rc)
{
    /* Sets the exception for an sk_resp_* error code; always -1. */
    if (rc == SK_ENOMEM) {
        PyErr_NoMemory();
    }
    else {
        PyErr_SetString(PyExc_RuntimeError, sk_strerror(rc));
    }
    return -1;
}

/* The fields the opening handshake owns (RFC 6455 §4.2.2): skirr writes them from the client's
 * handshake and its own negotiation, so an app's copy would repeat or contradict them (a second
 * Sec-WebSocket-Accept or Upgrade fails the handshake, RFC 6455 §4.1; RFC 9110 §5.3 reads
 * repeated fields as one list). The app's copy raises RuntimeError rather than being dropped:
 * what it asked for would silently not happen. */
static const struct {
    const char *name;
    size_t len;
    uint8_t in_101_only; /* a denial response may carry it: a 426's upgrade (RFC 9110 §7.8);
                          * its connection follows the HTTP response rules */
    const char *hint;    /* how the app says it instead, or "" */
} HANDSHAKE_FIELDS[] = {
    {"connection", sizeof("connection") - 1, 1, ""},
    {"upgrade", sizeof("upgrade") - 1, 1, ""},
    {"sec-websocket-accept", sizeof("sec-websocket-accept") - 1, 0, ""},
    {"sec-websocket-extensions", sizeof("sec-websocket-extensions") - 1, 0,
     ": skirr negotiates permessage-deflate itself"},
    {"sec-websocket-protocol", sizeof("sec-websocket-protocol") - 1, 0,
     ": use websocket.accept's 'subprotocol'"},
};

static int
wire_fields_refused(const sk_header_t *hdrs, size_t n, int accepting, const char *type)
{
    /* hdrs[0..n): the app's fields for `type` (the 101 when accepting, else the denial response).
     * -1 with RuntimeError naming the first one the handshake owns (HANDSHAKE_FIELDS); else 0. */
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof(HANDSHAKE_FIELDS) / sizeof(HANDSHAKE_FIELDS[0]); k++) {
            if ((accepting || !HANDSHAKE_FIELDS[k].in_101_only) &&
                sk_token_ieq(hdrs[i].name, hdrs[i].name_len, HANDSHAKE_FIELDS[k].name,
                             HANDSHAKE_FIELDS[k].len)) {
                PyErr_Format(PyExc_RuntimeError,
                             "'%s' header '%s' is the server's to send%s "
                             "(RFC 6455 section 4.2.2)",
                             type, HANDSHAKE_FIELDS[k].name, HANDSHAKE_FIELDS[k].hint);
                return -1;
            }
        }
    }
    return 0;
}

/* Fills the sk_header_t at h (evaluated once) with a literal name. */
#define SET_HDR(h, n, v, vl) (*(h) = (sk_header_t){(n), sizeof(n) - 1, (v), (vl)})

/* ---- the session's table -------------------------------------------------------------------- */

static int
over_mark(ws1_t *w)
{
    /* After a write: SK_WSS_GONE when the connection went away, 1 when the output is at or over
     * its high-water mark, else 0. */
    if (w->t == NULL) {
        return SK_WSS_GONE;
    }
    return sk_transport_out_len(w->t) >= SK_OUTPUT_HIGH_WATER;
}

static int
wire_accept(void *wire, const char *sp, size_t splen, sk_header_t *hdrs, size_t n)
{
    /* The 101 (RFC 6455 §4.2.2) with Sec-WebSocket-Accept, the app's subprotocol and headers
     * (content-length and a chunked transfer-encoding dropped, as for any 1xx; date and server
     * replace skirr's), permessage-deflate when offered and enabled. */
    ws1_t *w = wire;
    if (w->t == NULL) {
        return SK_WSS_GONE;
    }
    /* The server's fields go in the free slots just before the app's headers. */
    sk_header_t own[SK_WSS_ACCEPT_ROOM];
    size_t k = 0;
    SET_HDR(&own[k++], "upgrade", "websocket", sizeof("websocket") - 1);
    SET_HDR(&own[k++], "connection", "Upgrade", sizeof("Upgrade") - 1);
    SET_HDR(&own[k++], "sec-websocket-accept", w->hs->accept, SK_WS_ACCEPT_LEN);
    if (sp != NULL) {
        SET_HDR(&own[k++], "sec-websocket-protocol", sp, splen);
    }
    char ext[SK_PMD_RESPONSE_MAX];
    size_t ext_len = 0;
    if (w->hs->pmd_offered && w->srv->ws.per_message_deflate) {
        ext_len = sk_pmd_response(&w->hs->pmd_params, ext, sizeof(ext));
        if (ext_len > 0) {
            SET_HDR(&own[k++], "sec-websocket-extensions", ext, ext_len);
        }
    }
    sk_header_t *all = hdrs - k;
    memcpy(all, own, k * sizeof(sk_header_t));
    sk_req_info_t info = {.http_minor = 1, .keep_alive = 1, .opts = &w->srv->resp_opts};
    sk_resp_t resp = {0};
    int r = sk_resp_start(&resp, &info, 101, all, n + k);
    if (r == 0) {
        r = sk_resp_body(&resp, sk_transport_out(w->t), "", 0, 0, sk_serve_date(w->srv));
    }
    if (r == 0 && ext_len > 0) {
        /* RFC 7692 §6: from now on RSV1 marks a compressed message */
        w->pmd = PyMem_Calloc(1, sizeof(ws1_pmd_t));
        if (w->pmd == NULL) {
            r = SK_ENOMEM;
        }
        else {
            sk_pmd_init(&w->pmd->z, &w->hs->pmd_params);
            /* a compressed message's inflated size is bounded at --ws-max-size as it is
             * inflated (handle_data); on the wire it may be a little longer */
            uint64_t max = w->srv->ws.max_size;
            sk_ws_limits_t limits = {.max_message = max,
                                     .max_compressed = max ? sk_ws_deflate_bound(max) : 0,
                                     .allow_rsv1 = 1};
            sk_ws_parser_init(&w->parser, &limits); /* no frame was parsed yet */
        }
    }
    sk_resp_free(&resp);
    if (r < 0) {
        return resp_error(r);
    }
    set_state(w, WS_OPEN);
    hs_free(w);
    sk_wss_answered(w->session, 101, 0);
    arm_ping(w);
    if (sk_transport_write(w->t) < 0 || w->t == NULL) {
        return SK_WSS_GONE;
    }
    if (sk_transport_in_len(w->t) > 0) {
        sk_transport_feed_soon(w->t); /* frames that came behind the request head */
    }
    return 0;
}

static void
wire_refuse(void *wire, int status)
{
    /* 403 or 500 in skirr's own words, then closes after it. */
    ws1_t *w = wire;
    if (w->t != NULL && sk_transport_is_open(w->t)) {
        if (sk_resp_error_opts(sk_transport_out(w->t), status, 0, sk_serve_date(w->srv),
                               &w->srv->resp_opts) < 0) {
            sk_transport_close(w->t, SK_CLOSE_NOW);
        }
        else {
            sk_wss_answered(w->session, status, sk_resp_error_content_length(status, 0));
            sk_transport_close(w->t, SK_CLOSE_AFTER_WRITE);
        }
    }
    if (w->state != WS_DONE) {
        set_state(w, WS_DONE);
    }
}

static int
wire_deny_start(void *wire, int status, const sk_header_t *hdrs, size_t n)
{
    ws1_t *w = wire;
    assert(w->hs != NULL); /* the session denies only before it accepted */
    sk_req_info_t info = {.http_minor = 1, .force_close = 1, .opts = &w->srv->resp_opts};
    int r = sk_resp_start(&w->hs->resp, &info, status, hdrs, n);
    if (r < 0) {
        return resp_error(r);
    }
    set_state(w, WS_RESPONSE);
    return over_mark(w);
}

static int
wire_deny_body(void *wire, const char *data, size_t len, int more)
{
    ws1_t *w = wire;
    if (w->t == NULL) {
        return SK_WSS_GONE;
    }
    int r =
        sk_resp_body(&w->hs->resp, sk_transport_out(w->t), data, len, more, sk_serve_date(w->srv));
    if (r < 0) {
        if (w->hs->resp.head_written) {
            set_state(w, WS_DONE);
            sk_transport_abort(w->t, 0); /* the response can never be completed */
        }
        return resp_error(r);
    }
    if (!more) {
        set_state(w, WS_DONE);
        sk_transport_close(w->t, SK_CLOSE_AFTER_WRITE);
        return 0;
    }
    if (sk_transport_write(w->t) < 0) {
        return SK_WSS_GONE;
    }
    return over_mark(w);
}

static void
wire_deny_abort(void *wire)
{
    /* The app's denial response ended unfinished. Before its head went out nothing was sent: the
     * client gets skirr's 500, as for an app that failed before answering (and the access log
     * its line). After, the connection is aborted: the response can never be completed. */
    ws1_t *w = wire;
    if (w->state == WS_RESPONSE && w->hs != NULL && !w->hs->resp.head_written) {
        wire_refuse(wire, 500);
        return;
    }
    if (w->state != WS_DONE) {
        set_state(w, WS_DONE);
    }
    if (w->t != NULL) {
        sk_transport_abort(w->t, 0);
    }
}

static int
wire_send(void *wire, int text, const char *d, size_t n)
{
    /* One final frame (RFC 6455 §5.6), compressed when negotiated. */
    ws1_t *w = wire;
    if (w->t == NULL) {
        return SK_WSS_GONE;
    }
    sk_buf_t *out = sk_transport_out(w->t);
    if (w->pmd != NULL) {
        /* RFC 7692 §7.2.1: the message compressed, RSV1 on its (only) frame */
        sk_buf_t *zout = &w->pmd->zout;
        sk_buf_consume(zout, sk_buf_len(zout));
        int rc = sk_pmd_deflate(&w->pmd->z, d, n, zout);
        if (rc < 0) {
            return resp_error(rc);
        }
        d = sk_buf_len(zout) ? sk_buf_head(zout) : "";
        n = sk_buf_len(zout);
    }
    if (sk_ws_frame_header(out, 1, text ? SK_WS_TEXT : SK_WS_BINARY, w->pmd != NULL, (uint64_t)n) <
            0 ||
        sk_buf_append(out, d, n) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    if (w->pmd != NULL && w->pmd->zout.cap > BUF_KEEP) {
        sk_buf_free(&w->pmd->zout);
    }
    if (sk_transport_write(w->t) < 0) {
        return SK_WSS_GONE;
    }
    return over_mark(w);
}

static int
wire_close(void *wire, int code, const char *reason, size_t reason_len)
{
    ws1_t *w = wire;
    if (release_held(w, 1)) {
        return 0; /* the peer's protocol error is what ends the connection: no close handshake */
    }
    if (start_close(w, code, reason, reason_len) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
wire_fail(void *wire, int code)
{
    ws1_t *w = wire;
    if (!release_held(w, 1)) {
        fail(w, code, NULL);
    }
}

static void
wire_receiving(void *wire)
{
    (void)release_held((ws1_t *)wire, 0);
}

static void
wire_pause_reading(void *wire, int paused)
{
    /* The session's flow control; a held protocol error keeps reading stopped. */
    ws1_t *w = wire;
    if (w->t == NULL || w->held_code || paused == w->paused) {
        return;
    }
    w->paused = (uint8_t)paused;
    sk_transport_pause_reading(w->t, paused);
    if (!paused && sk_transport_in_len(w->t) > 0) {
        sk_transport_feed_soon(w->t);
    }
}

static const sk_wss_wire_ops_t sk_wsh_wire = {
    .accept = wire_accept,
    .refuse = wire_refuse,
    .deny_start = wire_deny_start,
    .deny_body = wire_deny_body,
    .deny_abort = wire_deny_abort,
    .send = wire_send,
    .close = wire_close,
    .fail = wire_fail,
    .receiving = wire_receiving,
    .pause_reading = wire_pause_reading,
    .fields_refused = wire_fields_refused,
};

/* ---- the handshake -------------------------------------------------------------------------- */

static int
answer_426(sk_transport_t *t, sk_serve_t *srv)
{
    /* RFC 6455 §4.4: 426 naming the version skirr speaks; closes after it. 0 or -1. */
    sk_header_t h[1];
    SET_HDR(&h[0], "sec-websocket-version", "13", 2);
    sk_req_info_t info = {.http_minor = 1, .force_close = 1, .opts = &srv->resp_opts};
    sk_resp_t resp = {0};
    const char *body; /* as skirr's other refusals: the reason phrase, from the one table */
    if (sk_resp_reason_phrase(426, &body) == 0) {
        body = "Error";
    }
    int r = sk_resp_start(&resp, &info, 426, h, 1);
    if (r == 0) {
        r = sk_resp_body(&resp, sk_transport_out(t), body, strlen(body), 0, sk_serve_date(srv));
    }
    sk_resp_free(&resp);
    sk_transport_close(t, r == 0 ? SK_CLOSE_AFTER_WRITE : SK_CLOSE_NOW);
    return 0;
}

static void
negotiate(ws1_t *w, sk_state *st, PyObject *scope)
{
    /* The first acceptable permessage-deflate offer among the sec-websocket-extensions fields of
     * the scope's `headers` (names lowercase, in order, as received), into w->hs->pmd_params. */
    static const char name[] = "sec-websocket-extensions";
    PyObject *headers = PyDict_Check(scope) ? PyDict_GetItemWithError(scope, st->s_headers) : NULL;
    if (headers == NULL || !PyList_Check(headers)) {
        PyErr_Clear();
        return;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(headers) && !w->hs->pmd_offered; i++) {
        PyObject *pair = PyList_GET_ITEM(headers, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 1)) ||
            PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 0)) != (Py_ssize_t)(sizeof(name) - 1) ||
            memcmp(PyBytes_AS_STRING(PyTuple_GET_ITEM(pair, 0)), name, sizeof(name) - 1) != 0) {
            continue;
        }
        PyObject *value = PyTuple_GET_ITEM(pair, 1);
        w->hs->pmd_offered = (uint8_t)sk_pmd_negotiate(
            PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value), &w->hs->pmd_params);
    }
}

int
sk_wsh_start(sk_transport_t *t, sk_serve_t *srv, int status, PyObject *scope, const char *key,
             size_t key_len)
{
    if (status == 426) {
        return answer_426(t, srv);
    }
    ws1_t *w = PyMem_Calloc(1, sizeof(ws1_t));
    if (w != NULL && (w->hs = PyMem_Calloc(1, sizeof(ws1_hs_t))) == NULL) {
        PyMem_Free(w);
        w = NULL;
    }
    if (w == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->srv = srv;
    w->t = t;
    sk_ws_limits_t limits = {.max_message = srv->ws.max_size, .allow_rsv1 = 0};
    sk_ws_parser_init(&w->parser, &limits);
    sk_ws_accept(key, key_len, w->hs->accept);
    negotiate(w, srv->st, scope); /* before the session makes the scope its own */
    w->session = sk_wss_new(srv, scope, &sk_wsh_wire, w);
    if (w->session == NULL) {
        hs_free(w);
        PyMem_Free(w);
        return -1;
    }
    sk_transport_clear_deadline(t);
    sk_transport_pause_reading(t, 0);
    sk_transport_switch(t, &sk_wsh_ops, w); /* freed in ws_release() */
    sk_wss_start(w->session);
    return 0;
}
