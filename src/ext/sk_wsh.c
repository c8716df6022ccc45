/* sk_wsh.c — the WebSocket protocol handler and the ASGI `websocket` session (see sk_wsh.h).
 *
 * Owns, per connection (one WebSocket object, which is both the transport's handler and the
 * object behind the app's receive/send): the websocket scope, the handshake answer, the frame
 * parser and the message being reassembled, the queue of received events and its flow control,
 * the close handshake, keepalive pings, the app's Task (started with a fresh copy of the
 * server's context; its done callback answers what the app left unanswered), and the
 * handshake answer's access-log record and metrics (record_answer(), once per session).
 * Never: touches a socket or the reactor (only the sk_transport_* API), or lets an application's
 * failure reach another connection or the server.
 *
 * States of a session (ws_state, changed only by set_state()):
 *   HANDSHAKE (app runs, no answer yet) -> OPEN (101 sent) | RESPONSE (denial response started)
 *   | DONE (403/500/denial complete, or the connection went away);
 *   OPEN -> CLOSING (the server sent its Close, waits for the peer's) -> DONE;
 *   OPEN -> DONE (the peer's Close answered, a protocol error, or the connection went away).
 * A protocol error behind messages the app has not taken yet is held (held_code, still OPEN,
 * reading stopped) until the app has received them and called receive() again, its task ended,
 * or CLOSE_TIMEOUT passed: the app's answers to those messages go out before the Close.
 */
#include "sk_wsh.h"

#include "sk_asgi.h"
#include "sk_access.h"
#include "sk_serve.h"
#include "sk_resp.h"
#include "sk_token.h"
#include "sk_ws.h"
#include "sk_wshs.h"
#include "sk_wspmd.h"

#include <assert.h>
#include <string.h>

#define QUEUE_HIGH_WATER (64 * 1024) /* received payload bytes waiting for the app: stop reading */
#define CLOSE_TIMEOUT 10.0           /* seconds the peer has to answer the server's Close */

/* The handler's deadline kinds (sk_transport_set_deadline). */
enum {
    DL_PING = 1, /* --ws-ping-interval passed: send a ping */
    DL_PONG,     /* --ws-ping-timeout passed without the pong: fail the connection */
    DL_CLOSE,    /* the peer did not answer the server's Close in CLOSE_TIMEOUT: close */
    DL_HELD,     /* a held protocol error waited CLOSE_TIMEOUT for the app: fail now */
};

enum ws_state { WS_HANDSHAKE = 0, WS_RESPONSE, WS_OPEN, WS_CLOSING, WS_DONE };

typedef struct {
    PyObject_HEAD sk_state *st;
    PyObject *owner;           /* strong: the Server, keeping srv alive */
    sk_serve_t *srv;           /* borrowed from owner */
    sk_transport_t *t;         /* borrowed; NULL once the transport closed */
    PyObject *scope;           /* strong until the app is called */
    PyObject *task;            /* strong while the app runs */
    PyObject *coro;            /* strong: what the app call returned, driven by w's own steps */
    PyObject *app_exc;         /* strong: what the app raised, until ws_app_done() reports it */
    PyObject *queue;           /* list of received events not yet given to receive() */
    PyObject *receive_waiters; /* list of futures waiting in receive(), first served first */
    PyObject *drain_waiters;   /* list of futures waiting in send() for output to drain */
    PyObject *disconnect;      /* the websocket.disconnect event, once the connection ended */
    PyObject *offered;         /* tuple of str: the client's Sec-WebSocket-Protocol elements */
    enum ws_state state;
    uint8_t connect_given;      /* websocket.connect was returned by receive() */
    uint8_t app_running;        /* counted in srv->active_requests */
    uint8_t raised_disconnect;  /* skirr raised ClientDisconnected into the app (not logged) */
    uint8_t paused;             /* reading stopped: the queue is over its marks */
    uint8_t app_has_message;    /* receive() gave a message and was not called again since */
    int held_code;              /* a protocol error's close code waiting for the app, or 0 */
    uint8_t msg_opcode;         /* SK_WS_TEXT/SK_WS_BINARY of the message being reassembled */
    uint8_t msg_compressed;     /* it has RSV1: permessage-deflate (inflated as it arrives) */
    uint8_t pmd_offered;        /* the handshake offered acceptable permessage-deflate params */
    sk_pmd_params_t pmd_params; /* those parameters (RFC 7692 §7.1) */
    sk_pmd_t *pmd;              /* PyMem, owned: the zlib streams once negotiated, else NULL */
    sk_buf_t zout;              /* a compressed message to send */
    size_t queued_bytes;        /* payload bytes of the queued messages */
    uint32_t pings;             /* server pings sent (their payload) */
    sk_ws_parser_t parser;
    sk_buf_t msg;        /* the message being reassembled */
    sk_resp_t resp;      /* the denial response (websocket.http.response.*) */
    sk_access_req_t acc; /* the handshake's access-log record and metrics start (sk_access.h) */
    uint8_t answered;    /* the handshake's answer was recorded (record_answer) */
    char accept[SK_WS_ACCEPT_LEN];
} WebSocketObject;

extern const sk_handler_ops_t sk_wsh_ops;

static void
record_answer(WebSocketObject *w, int status, uint64_t bytes)
{
    /* The handshake's answer, once, as the client saw it (101, 403, 500, or a denial response's
     * status with its content bytes): the access log's record and the metrics' response, each
     * only while on. The record is a response record whose scope is the websocket scope. */
    if (w->answered) {
        return;
    }
    w->answered = 1;
    sk_access_exchange_end(&w->srv->access, &w->acc, status, bytes);
}

static void
set_state(WebSocketObject *w, enum ws_state to)
{
    assert(to != WS_HANDSHAKE && w->state != WS_DONE);
    if (w->state == WS_RESPONSE && w->resp.head_written) {
        record_answer(w, w->resp.status, w->resp.body_sent); /* the denial response ended */
    }
    w->state = to;
}

/* ---- futures -------------------------------------------------------------------------------- */

static void
release_drain(WebSocketObject *w, int gone)
{
    /* Wakes every send() waiting for drain: done, or ClientDisconnected when gone. */
    if (w->drain_waiters != NULL && gone) {
        w->raised_disconnect = 1;
    }
    sk_asgi_resolve_all(w->st, &w->drain_waiters, Py_None, gone ? w->st->ClientDisconnected : NULL);
}

/* ---- receive -------------------------------------------------------------------------------- */

static void
sync_reading(WebSocketObject *w)
{
    /* Flow control: reading stops while --ws-max-queue messages or QUEUE_HIGH_WATER bytes wait
     * for the app, and resumes (with the buffered input offered again) below both. */
    if (w->t == NULL || w->held_code) {
        return; /* a held protocol error: nothing more is read */
    }
    Py_ssize_t n = w->queue ? PyList_GET_SIZE(w->queue) : 0;
    int full = n >= w->srv->ws.max_queue || w->queued_bytes >= QUEUE_HIGH_WATER;
    if (full != w->paused) {
        w->paused = (uint8_t)full;
        sk_transport_pause_reading(w->t, full);
        if (!full && sk_transport_in_len(w->t) > 0) {
            sk_transport_feed_soon(w->t);
        }
    }
}

static int
next_event(WebSocketObject *w, PyObject **out)
{
    /* The next receive() event if one is ready: 1 (new reference in *out), 0 (none), -1. */
    sk_state *st = w->st;
    *out = NULL;
    if (!w->connect_given) {
        w->connect_given = 1;
        *out = PyDict_New();
        if (*out == NULL || PyDict_SetItem(*out, st->s_type, st->s_websocket_connect) < 0) {
            Py_CLEAR(*out);
            return -1;
        }
        return 1;
    }
    if (w->queue != NULL && PyList_GET_SIZE(w->queue) > 0) {
        PyObject *ev = Py_NewRef(PyList_GET_ITEM(w->queue, 0));
        if (PySequence_DelItem(w->queue, 0) < 0) {
            Py_DECREF(ev);
            return -1;
        }
        PyObject *data = NULL;
        if (sk_asgi_msg_get(ev, st->s_bytes, &data) < 0 ||
            (data == NULL && sk_asgi_msg_get(ev, st->s_text, &data) < 0)) {
            Py_DECREF(ev);
            return -1;
        }
        if (data != NULL) {
            Py_ssize_t len = PyBytes_Check(data) ? PyBytes_GET_SIZE(data)
                                                 : PyUnicode_GET_LENGTH(data); /* an estimate */
            w->queued_bytes -= (size_t)len > w->queued_bytes ? w->queued_bytes : (size_t)len;
            Py_DECREF(data);
        }
        if (PyList_GET_SIZE(w->queue) == 0) {
            w->queued_bytes = 0;
        }
        sync_reading(w);
        w->app_has_message = 1;
        *out = ev;
        return 1;
    }
    if (w->disconnect != NULL) {
        *out = PyDict_Copy(w->disconnect);
        return *out ? 1 : -1;
    }
    return 0;
}

static int
next_event_of(void *w, PyObject **out)
{
    return next_event((WebSocketObject *)w, out);
}

static void
wake_receivers(WebSocketObject *w)
{
    /* Hands ready events to waiting receive() calls, first come first served. */
    sk_asgi_wake_receivers(w->st, &w->receive_waiters, next_event_of, w);
}

static int
queue_event(WebSocketObject *w, PyObject *ev, size_t bytes)
{
    /* Queues ev (borrowed) for receive(). 0 or -1. */
    if (w->queue == NULL && (w->queue = PyList_New(0)) == NULL) {
        return -1;
    }
    if (PyList_Append(w->queue, ev) < 0) {
        return -1;
    }
    w->queued_bytes += bytes;
    wake_receivers(w);
    return 0;
}

static void
ended(WebSocketObject *w, int code, const char *reason, size_t reason_len)
{
    /* The connection ended (or the close handshake began from the peer): receive() gives
     * websocket.disconnect with code (and reason, ASGI websocket 2.3+) once the queue is empty.
     * Only the first end counts. */
    sk_state *st = w->st;
    if (w->disconnect != NULL) {
        return;
    }
    PyObject *ev = PyDict_New();
    PyObject *c = PyLong_FromLong(code);
    PyObject *r = PyUnicode_DecodeUTF8(reason ? reason : "", (Py_ssize_t)reason_len, "replace");
    if (ev == NULL || c == NULL || r == NULL ||
        PyDict_SetItem(ev, st->s_type, st->s_websocket_disconnect) < 0 ||
        PyDict_SetItem(ev, st->s_code, c) < 0 || PyDict_SetItem(ev, st->s_reason, r) < 0) {
        PyErr_WriteUnraisable((PyObject *)w);
        Py_CLEAR(ev);
    }
    Py_XDECREF(c);
    Py_XDECREF(r);
    if (ev == NULL) { /* out of memory: a bare event from the module's own objects */
        ev = PyDict_New();
        if (ev == NULL || PyDict_SetItem(ev, st->s_type, st->s_websocket_disconnect) < 0) {
            PyErr_WriteUnraisable((PyObject *)w);
            Py_CLEAR(ev);
            return;
        }
    }
    w->disconnect = ev;
    wake_receivers(w);
}

/* ---- writing frames ------------------------------------------------------------------------- */

static void
fail(WebSocketObject *w, int code, const char *reason)
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
    ended(w, code ? code : SK_WS_NO_STATUS, reason, reason ? strlen(reason) : 0);
    if (w->state != WS_DONE) {
        set_state(w, WS_DONE);
    }
    sk_transport_close(t, SK_CLOSE_AFTER_WRITE);
}

static void
fail_in_order(WebSocketObject *w, int code)
{
    /* A protocol error of the peer's (1002, 1007, 1009): fails the connection (RFC 6455 §7.1.7),
     * but not ahead of the messages decoded before it. While one waits in the queue or the app
     * has not come back to receive() since the last, the error is held: nothing more is read
     * and the Close waits for release_held() (or DL_HELD, CLOSE_TIMEOUT from now). */
    int waiting = (w->queue != NULL && PyList_GET_SIZE(w->queue) > 0) || w->app_has_message;
    if (!waiting || w->state != WS_OPEN || w->t == NULL || w->held_code) {
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
release_held(WebSocketObject *w, int now)
{
    /* Sends a held protocol error's Close once the app has every message before it (now: at
     * once, whatever the app has). 1 if one was held (the connection is failed), else 0. */
    if (!w->held_code) {
        return 0;
    }
    if (!now && ((w->queue != NULL && PyList_GET_SIZE(w->queue) > 0) || w->app_has_message)) {
        return 1;
    }
    int code = w->held_code;
    w->held_code = 0;
    fail(w, code, NULL);
    return 1;
}

static int
start_close(WebSocketObject *w, int code, const char *reason, size_t reason_len)
{
    /* The server's side of the close handshake (RFC 6455 §5.5.1, §7.1.2): a Close with code and
     * reason, then CLOSING until the peer's Close arrives (the TCP connection is closed then) or
     * CLOSE_TIMEOUT passes. 0, or -1 when nothing could be sent (out of memory). */
    if (sk_ws_close_frame(sk_transport_out(w->t), code, reason, reason_len) < 0) {
        return -1;
    }
    set_state(w, WS_CLOSING);
    sk_transport_set_deadline(w->t, DL_CLOSE, CLOSE_TIMEOUT);
    (void)sk_transport_write(w->t);
    return 0;
}

static void
arm_ping(WebSocketObject *w)
{
    if (w->t != NULL && w->state == WS_OPEN && w->srv->ws.ping_interval > 0) {
        sk_transport_set_deadline(w->t, DL_PING, w->srv->ws.ping_interval);
    }
}

/* ---- the handler table ---------------------------------------------------------------------- */

static int
message_end(WebSocketObject *w)
{
    /* Queues the reassembled message as websocket.receive. 0 or -1 (exception set). */
    sk_state *st = w->st;
    size_t n = sk_buf_len(&w->msg);
    const char *d = n ? sk_buf_head(&w->msg) : "";
    PyObject *data = w->msg_opcode == SK_WS_TEXT
                         ? PyUnicode_DecodeUTF8(d, (Py_ssize_t)n, "strict") /* checked: §8.1 */
                         : PyBytes_FromStringAndSize(d, (Py_ssize_t)n);
    PyObject *ev = PyDict_New();
    int rc = -1;
    if (data != NULL && ev != NULL &&
        PyDict_SetItem(ev, st->s_type, st->s_websocket_receive) == 0 &&
        PyDict_SetItem(ev, w->msg_opcode == SK_WS_TEXT ? st->s_text : st->s_bytes, data) == 0) {
        rc = queue_event(w, ev, n);
    }
    Py_XDECREF(data);
    Py_XDECREF(ev);
    sk_buf_consume(&w->msg, n);
    if (w->msg.cap > QUEUE_HIGH_WATER) {
        sk_buf_free(&w->msg); /* a big message's storage is not kept for the connection's life */
    }
    return rc;
}

static void
inflate_failed(WebSocketObject *w, int rc)
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
    WebSocketObject *w = h;
    size_t off = 0;
    if (w->state == WS_HANDSHAKE || w->state == WS_RESPONSE) {
        return 0; /* frames wait for the 101 (kept by the transport, in order) */
    }
    if (w->state == WS_DONE || w->held_code) {
        return len; /* nothing after a failure is read */
    }
    Py_INCREF(w);
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
            int rc = w->msg_compressed
                         ? sk_pmd_inflate(w->pmd, ev.data, ev.len, 0, &w->msg, w->srv->ws.max_size)
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
                int rc = sk_pmd_inflate(w->pmd, NULL, 0, 1, &w->msg, w->srv->ws.max_size);
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
                PyErr_WriteUnraisable((PyObject *)w);
                fail(w, 1011, "server error");
                break;
            }
            sk_buf_consume(&w->msg, sk_buf_len(&w->msg));
            sync_reading(w);
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
            ended(w, ev.code, ev.data, ev.len);
            set_state(w, WS_DONE);
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
    Py_DECREF(w);
    return off;
}

static void
ws_writable(void *h)
{
    WebSocketObject *w = h;
    if (w->drain_waiters != NULL && w->t != NULL &&
        sk_transport_out_len(w->t) < SK_OUTPUT_HIGH_WATER) {
        release_drain(w, 0);
    }
}

static void
ws_deadline(void *h, int kind)
{
    WebSocketObject *w = h;
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
        ended(w, SK_WS_ABNORMAL, NULL, 0); /* the peer never answered the server's Close */
        sk_transport_close(w->t, SK_CLOSE_NOW);
    }
}

static void
ws_shutdown(void *h)
{
    WebSocketObject *w = h;
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
    WebSocketObject *w = h;
    (void)reason;
    w->t = NULL;
    if (w->state != WS_DONE) {
        set_state(w, WS_DONE);
    }
    ended(w, SK_WS_ABNORMAL, NULL, 0); /* RFC 6455 §7.1.5: no Close received: 1006 */
    release_drain(w, 1);
}

static void
ws_release(void *h)
{
    Py_DECREF((PyObject *)h); /* the transport's reference, taken in sk_wsh_start() */
}

static int
ws_traverse(void *h, visitproc visit, void *arg)
{
    Py_VISIT((PyObject *)h);
    return 0;
}

const sk_handler_ops_t sk_wsh_ops = {
    .data_received = ws_data_received,
    .writable = ws_writable,
    .deadline = ws_deadline,
    .shutdown = ws_shutdown,
    .closed = ws_closed,
    .release = ws_release,
    .traverse = ws_traverse,
};

/* ---- send ----------------------------------------------------------------------------------- */

static PyObject *
raise_disconnected(WebSocketObject *w)
{
    /* Always NULL with skirr.ClientDisconnected set. */
    w->raised_disconnect = 1;
    PyErr_SetString(w->st->ClientDisconnected, "client disconnected");
    return NULL;
}

static int
get_headers(PyObject *msg, sk_state *st, PyObject **keep, sk_header_t **hdrs, size_t *n,
            size_t extra)
{
    /* msg["headers"] (absent: none) as *n sk_header_t in a PyMem array with `extra` free slots
     * first (for the server's own fields); *keep holds the objects they point into. 0, or -1
     * with TypeError for anything but an iterable of [bytes, bytes] pairs. */
    PyObject *headers = NULL;
    *keep = NULL;
    *hdrs = NULL;
    *n = 0;
    if (sk_asgi_msg_get(msg, st->s_headers, &headers) < 0) {
        return -1;
    }
    *keep = headers ? PySequence_Tuple(headers) : PyTuple_New(0);
    Py_XDECREF(headers);
    if (*keep == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_SetString(PyExc_TypeError,
                            "ASGI 'headers' must be an iterable of [name, value] pairs");
        }
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(*keep);
    *hdrs = PyMem_Calloc((size_t)count + extra + 1, sizeof(sk_header_t));
    if (*hdrs == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PySequence_Tuple(PyTuple_GET_ITEM(*keep, i));
        if (pair == NULL || PyTuple_GET_SIZE(pair) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 1))) {
            Py_XDECREF(pair);
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError,
                            "each ASGI header must be a [name, value] pair of bytes");
            goto error;
        }
        PyTuple_SetItem(*keep, i, pair); /* the tuple is new and ours: keeps pair alive */
        sk_header_t *hd = &(*hdrs)[extra + (size_t)i];
        hd->name = PyBytes_AS_STRING(PyTuple_GET_ITEM(pair, 0));
        hd->name_len = (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 0));
        hd->value = PyBytes_AS_STRING(PyTuple_GET_ITEM(pair, 1));
        hd->value_len = (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 1));
    }
    *n = (size_t)count + extra;
    return 0;
error:
    PyMem_Free(*hdrs);
    *hdrs = NULL;
    Py_CLEAR(*keep);
    return -1;
}

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
handshake_fields_refused(const sk_header_t *hdrs, size_t n, const char *type, int in_101)
{
    /* hdrs[0..n): the app's fields for `type` (the 101 when in_101, else the denial response).
     * -1 with RuntimeError naming the first one the handshake owns (HANDSHAKE_FIELDS); else 0. */
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof(HANDSHAKE_FIELDS) / sizeof(HANDSHAKE_FIELDS[0]); k++) {
            if ((in_101 || !HANDSHAKE_FIELDS[k].in_101_only) &&
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

static int
send_accept(WebSocketObject *w, PyObject *msg)
{
    /* websocket.accept: the 101 (RFC 6455 §4.2.2) with Sec-WebSocket-Accept, the app's
     * subprotocol (one the client offered) and headers (none the handshake owns; content-length
     * and a chunked transfer-encoding dropped, as for any 1xx; date and server replace skirr's).
     * 0, or -1 with TypeError (malformed) or RuntimeError (a value the handshake refuses). */
    sk_state *st = w->st;
    PyObject *sub = NULL, *keep = NULL;
    sk_header_t *hdrs = NULL;
    size_t n = 0;
    const char *sp = NULL;
    Py_ssize_t splen = 0;
    int rc = -1;
    if (sk_asgi_msg_get(msg, st->s_subprotocol, &sub) < 0) {
        goto done;
    }
    if (sub != NULL && sub != Py_None) {
        if (!PyUnicode_Check(sub) || (sp = PyUnicode_AsUTF8AndSize(sub, &splen)) == NULL) {
            PyErr_SetString(PyExc_TypeError, "ASGI 'subprotocol' must be a str or None");
            goto done;
        }
        int found = 0;
        for (Py_ssize_t i = 0; w->offered != NULL && i < PyTuple_GET_SIZE(w->offered) && !found;
             i++) {
            found = PyUnicode_Compare(sub, PyTuple_GET_ITEM(w->offered, i)) == 0;
        }
        if (!found) {
            /* RFC 6455 §4.2.2: the subprotocol is one of the client's; §4.1: else the client
             * fails the connection. */
            PyErr_Format(PyExc_RuntimeError,
                         "ASGI 'subprotocol' %R is not one the client offered in "
                         "Sec-WebSocket-Protocol (RFC 6455 section 4.2.2)",
                         sub);
            goto done;
        }
    }
    if (get_headers(msg, st, &keep, &hdrs, &n, 5) < 0 ||
        handshake_fields_refused(hdrs + 5, n - 5, "websocket.accept", 1) < 0) {
        goto done;
    }
    if (w->acc.scope != NULL) {
        Py_XSETREF(w->acc.resp_headers, Py_NewRef(keep)); /* %({name}o)s of the access log */
    }
    if (w->t == NULL) { /* the conversions ran Python code */
        raise_disconnected(w);
        goto done;
    }
    /* The server's fields go in the free slots just before the app's headers. */
    sk_header_t own[5];
    size_t k = 0;
    SET_HDR(&own[k++], "upgrade", "websocket", sizeof("websocket") - 1);
    SET_HDR(&own[k++], "connection", "Upgrade", sizeof("Upgrade") - 1);
    SET_HDR(&own[k++], "sec-websocket-accept", w->accept, SK_WS_ACCEPT_LEN);
    if (sp != NULL) {
        SET_HDR(&own[k++], "sec-websocket-protocol", sp, (size_t)splen);
    }
    char ext[SK_PMD_RESPONSE_MAX];
    size_t ext_len = 0;
    if (w->pmd_offered && w->srv->ws.per_message_deflate) {
        ext_len = sk_pmd_response(&w->pmd_params, ext, sizeof(ext));
        if (ext_len > 0) {
            SET_HDR(&own[k++], "sec-websocket-extensions", ext, ext_len);
        }
    }
    memcpy(hdrs + (5 - k), own, k * sizeof(sk_header_t));
    sk_req_info_t info = {.http_minor = 1, .keep_alive = 1, .opts = &w->srv->resp_opts};
    sk_resp_t resp = {0};
    int r = sk_resp_start(&resp, &info, 101, hdrs + (5 - k), n - (5 - k));
    if (r == 0) {
        r = sk_resp_body(&resp, sk_transport_out(w->t), "", 0, 0, sk_serve_date(w->srv));
    }
    if (r == 0 && ext_len > 0) {
        /* RFC 7692 §6: from now on RSV1 marks a compressed message */
        w->pmd = PyMem_Calloc(1, sizeof(sk_pmd_t));
        if (w->pmd == NULL) {
            r = SK_ENOMEM;
        }
        else {
            sk_pmd_init(w->pmd, &w->pmd_params);
            sk_ws_limits_t limits = {.max_message = w->srv->ws.max_size, .allow_rsv1 = 1};
            sk_ws_parser_init(&w->parser, &limits); /* no frame was parsed yet */
        }
    }
    sk_resp_free(&resp);
    if (r < 0) {
        resp_error(r);
        goto done;
    }
    set_state(w, WS_OPEN);
    record_answer(w, 101, 0);
    arm_ping(w);
    if (sk_transport_write(w->t) < 0 || w->t == NULL) {
        raise_disconnected(w);
        goto done;
    }
    if (sk_transport_in_len(w->t) > 0) {
        sk_transport_feed_soon(w->t); /* frames that came behind the request head */
    }
    rc = 0;
done:
    PyMem_Free(hdrs);
    Py_XDECREF(keep);
    Py_XDECREF(sub);
    return rc;
}

static int
send_denial(WebSocketObject *w, PyObject *msg, int start)
{
    /* websocket.http.response.start / .body (the denial-response extension): an HTTP response
     * instead of the 101, the connection closed after it. 0 or -1. */
    sk_state *st = w->st;
    PyObject *obj = NULL, *keep = NULL;
    sk_header_t *hdrs = NULL;
    Py_buffer view = {0};
    size_t n = 0;
    int rc = -1;
    if (start) {
        int got = sk_asgi_msg_get(msg, st->s_status, &obj);
        if (got <= 0) {
            if (got == 0) {
                PyErr_SetString(PyExc_RuntimeError,
                                "'websocket.http.response.start' message is missing 'status'");
            }
            goto done;
        }
        if (!PyLong_Check(obj)) {
            PyErr_Format(PyExc_TypeError, "ASGI 'status' must be an int, not %.100s",
                         Py_TYPE(obj)->tp_name);
            goto done;
        }
        int overflow = 0;
        long status = PyLong_AsLongAndOverflow(obj, &overflow);
        if (status == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (overflow || status < 200 || status > 599) { /* checked before narrowing to int */
            PyErr_Format(PyExc_RuntimeError, "ASGI 'status' must be in 200..599, got %S", obj);
            goto done;
        }
        if (get_headers(msg, st, &keep, &hdrs, &n, 0) < 0 ||
            handshake_fields_refused(hdrs, n, "websocket.http.response.start", 0) < 0) {
            goto done;
        }
        if (w->acc.scope != NULL) {
            Py_XSETREF(w->acc.resp_headers, Py_NewRef(keep)); /* %({name}o)s of the access log */
        }
        sk_req_info_t info = {.http_minor = 1, .force_close = 1, .opts = &w->srv->resp_opts};
        int r = sk_resp_start(&w->resp, &info, (int)status, hdrs, n);
        if (r < 0) {
            resp_error(r);
            goto done;
        }
        set_state(w, WS_RESPONSE);
        rc = 0;
        goto done;
    }
    if (sk_asgi_msg_get(msg, st->s_body, &obj) < 0) {
        goto done;
    }
    if (obj != NULL && PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    PyObject *more_o = NULL;
    if (sk_asgi_msg_get(msg, st->s_more_body, &more_o) < 0) {
        goto done;
    }
    int more = more_o ? PyObject_IsTrue(more_o) : 0;
    Py_XDECREF(more_o);
    if (more < 0) {
        goto done;
    }
    if (w->t == NULL) {
        raise_disconnected(w);
        goto done;
    }
    int r = sk_resp_body(&w->resp, sk_transport_out(w->t), obj ? view.buf : "",
                         obj ? (size_t)view.len : 0, more, sk_serve_date(w->srv));
    if (r < 0) {
        if (w->resp.head_written) {
            set_state(w, WS_DONE);
            sk_transport_abort(w->t, 0); /* the response can never be completed */
        }
        resp_error(r);
        goto done;
    }
    if (!more) {
        set_state(w, WS_DONE);
        sk_transport_close(w->t, SK_CLOSE_AFTER_WRITE);
    }
    else if (sk_transport_write(w->t) < 0 || w->t == NULL) {
        raise_disconnected(w);
        goto done;
    }
    rc = 0;
done:
    if (view.obj != NULL) {
        PyBuffer_Release(&view);
    }
    PyMem_Free(hdrs);
    Py_XDECREF(keep);
    Py_XDECREF(obj);
    return rc;
}

static void
answer_status(WebSocketObject *w, int status)
{
    /* Answers the handshake with a refusal (403: the app closed before accepting; 500: it failed
     * or returned without answering) and closes after it. */
    if (w->t != NULL && sk_transport_is_open(w->t)) {
        if (sk_resp_error_opts(sk_transport_out(w->t), status, 0, sk_serve_date(w->srv),
                               &w->srv->resp_opts) < 0) {
            sk_transport_close(w->t, SK_CLOSE_NOW);
        }
        else {
            record_answer(w, status, sk_resp_error_content_length(status, 0));
            sk_transport_close(w->t, SK_CLOSE_AFTER_WRITE);
        }
    }
    if (w->state != WS_DONE) {
        set_state(w, WS_DONE);
    }
    ended(w, SK_WS_ABNORMAL, NULL, 0);
}

static int
send_close(WebSocketObject *w, PyObject *msg)
{
    /* websocket.close: 403 before accept (ASGI websocket 2.4), else the server's Close frame
     * (RFC 6455 §5.5.1) with code (default 1000) and reason, and a wait for the peer's. 0 or -1. */
    sk_state *st = w->st;
    PyObject *code_o = NULL, *reason_o = NULL;
    const char *reason = "";
    Py_ssize_t rlen = 0;
    int rc = -1;
    if (w->state == WS_HANDSHAKE) {
        answer_status(w, 403);
        return 0;
    }
    if (sk_asgi_msg_get(msg, st->s_code, &code_o) < 0 ||
        sk_asgi_msg_get(msg, st->s_reason, &reason_o) < 0) {
        goto done;
    }
    long code = 1000;
    if (code_o != NULL && code_o != Py_None) {
        if (!PyLong_Check(code_o)) {
            PyErr_Format(PyExc_TypeError, "ASGI 'code' must be an int, not %.100s",
                         Py_TYPE(code_o)->tp_name);
            goto done;
        }
        int overflow = 0;
        code = PyLong_AsLongAndOverflow(code_o, &overflow);
        if (code == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (overflow || code < 1000 || code > 4999 || !sk_ws_close_code_valid((int)code)) {
            /* range-checked before narrowing: 1000-1003, 1007-1014, 3000-4999 (RFC 6455 §7.4) */
            PyErr_Format(PyExc_ValueError,
                         "WebSocket close code %S may not be sent (RFC 6455 section 7.4)", code_o);
            goto done;
        }
    }
    if (reason_o != NULL && reason_o != Py_None) {
        if (!PyUnicode_Check(reason_o) ||
            (reason = PyUnicode_AsUTF8AndSize(reason_o, &rlen)) == NULL) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "ASGI 'reason' must be a str or None");
            goto done;
        }
    }
    if (rlen > 123) {
        PyErr_Format(PyExc_ValueError,
                     "WebSocket close reason of %zd bytes is longer than 123 (RFC 6455 section "
                     "5.5)",
                     rlen);
        goto done;
    }
    if (w->state != WS_OPEN || w->t == NULL) {
        raise_disconnected(w);
        goto done;
    }
    if (release_held(w, 1)) {
        rc = 0; /* the peer's protocol error is what ends the connection: no close handshake */
        goto done;
    }
    if (start_close(w, (int)code, reason, (size_t)rlen) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(code_o);
    Py_XDECREF(reason_o);
    return rc;
}

static PyObject *
send_data(WebSocketObject *w, PyObject *msg)
{
    /* websocket.send: one final frame of text or bytes. New reference to the completion
     * awaitable (a future while the output is over its mark), or NULL. */
    sk_state *st = w->st;
    PyObject *bytes = NULL, *text = NULL, *res = NULL;
    const char *d = NULL;
    Py_ssize_t n = 0;
    int opcode;
    if (sk_asgi_msg_get(msg, st->s_bytes, &bytes) < 0 ||
        sk_asgi_msg_get(msg, st->s_text, &text) < 0) {
        goto done;
    }
    if (bytes == Py_None) {
        Py_CLEAR(bytes);
    }
    if (text == Py_None) {
        Py_CLEAR(text);
    }
    if ((bytes == NULL) == (text == NULL)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "'websocket.send' needs exactly one of 'bytes' and 'text'");
        goto done;
    }
    if (bytes != NULL) {
        if (!PyBytes_Check(bytes)) {
            PyErr_SetString(PyExc_TypeError, "ASGI 'bytes' must be bytes");
            goto done;
        }
        d = PyBytes_AS_STRING(bytes);
        n = PyBytes_GET_SIZE(bytes);
        opcode = SK_WS_BINARY;
    }
    else {
        if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "ASGI 'text' must be a str");
            goto done;
        }
        if ((d = PyUnicode_AsUTF8AndSize(text, &n)) == NULL) {
            goto done; /* UnicodeEncodeError: a lone surrogate has no UTF-8 form */
        }
        opcode = SK_WS_TEXT;
    }
    if (w->state == WS_HANDSHAKE) {
        PyErr_SetString(PyExc_RuntimeError, "'websocket.send' before 'websocket.accept'");
        goto done;
    }
    if (w->state != WS_OPEN || w->t == NULL) {
        raise_disconnected(w);
        goto done;
    }
    sk_buf_t *out = sk_transport_out(w->t);
    if (w->pmd != NULL) {
        /* RFC 7692 §7.2.1: the message compressed, RSV1 on its (only) frame */
        sk_buf_consume(&w->zout, sk_buf_len(&w->zout));
        int rc = sk_pmd_deflate(w->pmd, d, (size_t)n, &w->zout);
        if (rc < 0) {
            resp_error(rc);
            goto done;
        }
        d = sk_buf_len(&w->zout) ? sk_buf_head(&w->zout) : "";
        n = (Py_ssize_t)sk_buf_len(&w->zout);
    }
    if (sk_ws_frame_header(out, 1, opcode, w->pmd != NULL, (uint64_t)n) < 0 ||
        sk_buf_append(out, d, (size_t)n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (w->zout.cap > QUEUE_HIGH_WATER) {
        sk_buf_free(&w->zout);
    }
    if (sk_transport_write(w->t) < 0 || w->t == NULL) {
        raise_disconnected(w);
        goto done;
    }
    if (sk_transport_out_len(w->t) >= SK_OUTPUT_HIGH_WATER) {
        /* backpressure: complete once writable() says the output is below its mark */
        res = sk_asgi_add_waiter(st, w->srv->loop, &w->drain_waiters);
        goto done;
    }
    res = Py_NewRef(st->send_done);
done:
    Py_XDECREF(bytes);
    Py_XDECREF(text);
    return res;
}

static PyObject *
ws_send(PyObject *op, PyObject *msg)
{
    /* New reference: an awaitable completing when the message is accepted; NULL with
     * RuntimeError/TypeError/ValueError for an invalid or out-of-order message, or
     * ClientDisconnected once the connection is closed or closing. */
    WebSocketObject *w = (WebSocketObject *)op;
    sk_state *st = w->st;
    PyObject *type = NULL, *res = NULL;
    int rc = sk_asgi_msg_get(msg, st->s_type, &type);
    if (rc <= 0) {
        if (rc == 0) {
            PyErr_SetString(PyExc_RuntimeError, "ASGI message has no 'type'");
        }
        return NULL;
    }
    int ok = -1;
    if (!PyUnicode_Check(type)) {
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message type %R", type);
    }
    else if (PyUnicode_Compare(type, st->s_websocket_send) == 0) {
        Py_DECREF(type);
        return send_data(w, msg);
    }
    else if (PyUnicode_Compare(type, st->s_websocket_accept) == 0) {
        if (w->state != WS_HANDSHAKE) {
            if (w->t == NULL) {
                raise_disconnected(w);
            }
            else {
                PyErr_SetString(PyExc_RuntimeError,
                                "Unexpected ASGI message 'websocket.accept' after the handshake");
            }
        }
        else {
            ok = send_accept(w, msg);
        }
    }
    else if (PyUnicode_Compare(type, st->s_websocket_close) == 0) {
        if (w->state == WS_RESPONSE) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Unexpected ASGI message 'websocket.close' during a denial response");
        }
        else {
            ok = send_close(w, msg);
        }
    }
    else if (PyUnicode_Compare(type, st->s_websocket_http_response_start) == 0) {
        if (w->state != WS_HANDSHAKE) {
            PyErr_SetString(PyExc_RuntimeError, "Unexpected ASGI message "
                                                "'websocket.http.response.start' after the "
                                                "handshake was answered");
        }
        else if (w->t == NULL) {
            raise_disconnected(w);
        }
        else {
            ok = send_denial(w, msg, 1);
        }
    }
    else if (PyUnicode_Compare(type, st->s_websocket_http_response_body) == 0) {
        if (w->state != WS_RESPONSE) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Unexpected ASGI message 'websocket.http.response.body' outside a "
                            "denial response");
        }
        else {
            ok = send_denial(w, msg, 0);
        }
    }
    else if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message type %R", type);
    }
    Py_DECREF(type);
    if (ok == 0 && w->state == WS_RESPONSE && w->t != NULL &&
        sk_transport_out_len(w->t) >= SK_OUTPUT_HIGH_WATER) {
        /* a denial body with more_body: backpressure, as websocket.send and an HTTP body */
        res = sk_asgi_add_waiter(st, w->srv->loop, &w->drain_waiters);
    }
    else if (ok == 0) {
        res = Py_NewRef(st->send_done);
    }
    return res;
}

static PyObject *
ws_receive(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference: an awaitable for the next event (websocket.connect, websocket.receive,
     * websocket.disconnect); NULL with an exception. */
    WebSocketObject *w = (WebSocketObject *)op;
    PyObject *msg = NULL;
    w->app_has_message = 0; /* the app is done with the last message it got */
    (void)release_held(w, 0);
    if (w->receive_waiters == NULL || PyList_GET_SIZE(w->receive_waiters) == 0) {
        int rc = next_event(w, &msg);
        if (rc != 0) {
            return rc > 0 ? sk_ready_new(w->st, msg, 0) : NULL;
        }
    }
    return sk_asgi_add_waiter(w->st, w->srv->loop, &w->receive_waiters);
}

static PyMethodDef ws_receive_def = {"receive", ws_receive, METH_NOARGS,
                                     "ASGI receive(): awaitable of the next websocket event."};
static PyMethodDef ws_send_def = {"send", ws_send, METH_O,
                                  "ASGI send(message): websocket.accept/send/close, "
                                  "websocket.http.response.start/body."};

/* ---- the app task --------------------------------------------------------------------------- */

static PyObject *
ws_app_done(PyObject *op, PyObject *task)
{
    /* New reference to None: the app's Task ended (its done callback). Reports a failure and
     * answers what the app left unanswered: 500 before any answer to the handshake, an aborted
     * denial response, or a Close (1000 after a return, 1011 after an exception) once open. */
    WebSocketObject *w = (WebSocketObject *)op;
    sk_state *st = w->st;
    PyObject *exc = NULL;
    PyObject *cancelled = PyObject_CallMethod(task, "cancelled", NULL);
    if (cancelled == NULL) {
        return NULL;
    }
    if (cancelled == Py_False) {
        exc = w->app_exc; /* moved: what the app raised (ws_step_ended) */
        w->app_exc = NULL;
    }
    else {
        Py_CLEAR(w->app_exc);
    }
    int failed = exc != NULL;
    if (exc != NULL) {
        sk_asgi_log_app_exception(st, w->srv->logger, exc, w->raised_disconnect);
    }
    else if (exc == NULL && cancelled == Py_False && w->state == WS_HANDSHAKE) {
        sk_asgi_log_error(st, w->srv->logger, "ASGI callable returned without sending handshake.",
                          NULL);
    }
    Py_DECREF(cancelled);
    Py_XDECREF(exc);
    if (w->app_running) {
        w->app_running = 0;
        w->srv->active_requests--;
    }
    Py_CLEAR(w->task);
    if (w->state == WS_HANDSHAKE) {
        answer_status(w, 500);
    }
    else if (w->state == WS_RESPONSE) {
        set_state(w, WS_DONE);
        if (w->t != NULL) {
            sk_transport_abort(w->t, 0);
        }
    }
    else if (release_held(w, 1)) {
        /* the peer's protocol error, held for this app, is what ends the connection */
    }
    else if (w->state == WS_OPEN && failed) {
        fail(w, 1011, NULL); /* RFC 6455 §7.4.1: an unexpected condition; closed at once */
    }
    else if (w->state == WS_OPEN && start_close(w, 1000, "", 0) < 0) {
        fail(w, 1000, NULL); /* returned without closing: a normal close handshake */
    }
    Py_RETURN_NONE;
}

static PyMethodDef ws_done_def = {"_done", ws_app_done, METH_O, NULL};

/* The WebSocket object is the coroutine its asyncio.Task runs: it drives what the app call
 * returned (a coroutine through am_send, or any awaitable's __await__ iterator), so whatever the
 * app raises, BaseExceptions such as SystemExit and KeyboardInterrupt included, ends the Task
 * with None and is kept for ws_app_done() to report: it never reaches the loop, which would
 * re-raise SystemExit and KeyboardInterrupt out of run_forever() (asyncio's Task.__step does,
 * and uvloop runs the same Task) and stop the server. Only a cancellation propagates, so the
 * Task ends cancelled. The app's own coroutine still runs inside that Task. */

static PySendResult
ws_step_ended(WebSocketObject *w, PySendResult res, PyObject **result)
{
    /* The outcome of one step of the app: PYGEN_NEXT as is; the app's end (a return or any
     * exception but a cancellation of its Task, kept in w->app_exc) as PYGEN_RETURN with None;
     * a cancellation as PYGEN_ERROR with the CancelledError set. */
    if (res == PYGEN_NEXT) {
        return res;
    }
    Py_CLEAR(w->coro);
    if (res == PYGEN_RETURN) {
        Py_SETREF(*result, Py_NewRef(Py_None));
        return PYGEN_RETURN;
    }
    PyObject *typ, *val, *tb;
    PyErr_Fetch(&typ, &val, &tb);
    PyErr_NormalizeException(&typ, &val, &tb);
    if (val != NULL && tb != NULL) {
        PyException_SetTraceback(val, tb);
    }
    /* A CancelledError the app raised itself (no one called cancel() on its Task) is its
     * failure, as any other exception; a cancelled Task's is not. */
    if (PyErr_GivenExceptionMatches(val, w->st->CancelledError) &&
        sk_asgi_task_cancelling(w->task)) {
        PyErr_Restore(typ, val, tb);
        *result = NULL;
        return PYGEN_ERROR;
    }
    Py_XSETREF(w->app_exc, val);
    Py_XDECREF(typ);
    Py_XDECREF(tb);
    *result = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

static PySendResult
ws_am_send(PyObject *op, PyObject *arg, PyObject **result)
{
    /* am_send: one step of the app. PYGEN_NEXT with what it yielded (new reference),
     * PYGEN_RETURN with None, or PYGEN_ERROR with the Task's cancellation set. */
    WebSocketObject *w = (WebSocketObject *)op;
    *result = NULL;
    if (w->coro == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited websocket coroutine");
        return PYGEN_ERROR;
    }
    return ws_step_ended(w, PyIter_Send(w->coro, arg, result), result);
}

static PyObject *
ws_send_value(PyObject *op, PyObject *arg)
{
    /* New reference: coroutine.send(value): the yielded value, or NULL with StopIteration. */
    PyObject *result = NULL;
    PySendResult res = ws_am_send(op, arg, &result);
    return sk_asgi_method_result(res, result);
}

static PyObject *
ws_iternext(PyObject *op)
{
    /* New reference: next(coroutine), as send(None). */
    return ws_send_value(op, Py_None);
}

static PyObject *
ws_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    /* New reference: coroutine.throw(...) passed on to the app (Task.cancel() comes this way);
     * the yielded value, or NULL with StopIteration or the Task's cancellation. */
    WebSocketObject *w = (WebSocketObject *)op;
    PyObject *result = NULL;
    PySendResult res;
    if (w->coro == NULL) {
        sk_asgi_raise_thrown(args, nargs);
        return NULL;
    }
    PyObject *meth = PyObject_GetAttr(w->coro, w->st->s_throw);
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
    res = ws_step_ended(w, res, &result);
    return sk_asgi_method_result(res, result);
}

static PyObject *
ws_close_coro(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None: coroutine.close(): closes the app's coroutine (an iterator without
     * close() is dropped); NULL with what that close raised. */
    WebSocketObject *w = (WebSocketObject *)op;
    PyObject *coro = w->coro;
    PyObject *meth = NULL, *res = NULL;
    w->coro = NULL;
    if (coro == NULL) {
        Py_RETURN_NONE;
    }
    meth = PyObject_GetAttr(coro, w->st->s_close);
    if (meth == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        res = Py_NewRef(Py_None);
    }
    else if (meth != NULL) {
        res = PyObject_CallNoArgs(meth);
    }
    Py_XDECREF(meth);
    Py_DECREF(coro);
    return res;
}

static PyObject *
ws_await(PyObject *op)
{
    /* New reference: __await__ returns the object itself (it is its own iterator). */
    return Py_NewRef(op);
}

static PyMethodDef ws_methods[] = {
    {"send", ws_send_value, METH_O, "coroutine.send(value): one step of the app."},
    {"throw", (PyCFunction)(void (*)(void))ws_throw, METH_FASTCALL,
     "coroutine.throw(exc): raise exc inside the app."},
    {"close", ws_close_coro, METH_NOARGS, "coroutine.close(): close the app's coroutine."},
    {NULL, NULL, 0, NULL},
};

static int
ws_run(WebSocketObject *w)
{
    /* Calls app(scope, receive, send) in a fresh copy of the server's context and runs what it
     * returned as a Task of the loop. 0, or -1 with an exception (the app's own included). */
    sk_serve_t *srv = w->srv;
    sk_state *st = w->st;
    PyObject *ctx = NULL, *receive = NULL, *send = NULL, *coro = NULL, *task = NULL;
    PyObject *cb = NULL, *res = NULL, *scope = w->scope;
    int rc = -1;
    w->scope = NULL; /* the app owns it from now on */
    ctx = PyContext_Copy(srv->context);
    receive = PyCFunction_New(&ws_receive_def, (PyObject *)w);
    send = PyCFunction_New(&ws_send_def, (PyObject *)w);
    if (ctx == NULL || receive == NULL || send == NULL || PyContext_Enter(ctx) < 0) {
        goto done;
    }
    PyObject *args[3] = {scope, receive, send};
    coro = PyObject_Vectorcall(srv->app, args, 3, NULL);
    if (PyContext_Exit(ctx) < 0 || coro == NULL) {
        goto done;
    }
    w->coro = sk_asgi_awaitable_iter(coro);
    if (w->coro == NULL) {
        goto done;
    }
    /* the Task runs w itself (ws_am_send): what the app raises ends with the app, never the loop */
    PyObject *targs[3] = {srv->loop, (PyObject *)w, ctx};
    task = PyObject_VectorcallMethod(st->s_create_task, targs, 2, srv->call_soon_kw);
    if (task == NULL) {
        goto done;
    }
    cb = PyCFunction_New(&ws_done_def, (PyObject *)w);
    res = cb ? PyObject_CallMethod(task, "add_done_callback", "O", cb) : NULL;
    if (res == NULL) {
        PyObject *r = PyObject_CallMethod(task, "cancel", NULL);
        Py_XDECREF(r);
        goto done;
    }
    w->task = Py_NewRef(task);
    w->app_running = 1;
    srv->active_requests++;
    rc = 0;
done:
    if (task == NULL && coro != NULL) {
        /* the app's awaitable is not driven: no Task runs it */
        Py_CLEAR(w->coro);
        if (PyCoro_CheckExact(coro)) { /* closed: no "never awaited" warning */
            PyObject *typ, *val, *tb;
            PyErr_Fetch(&typ, &val, &tb);
            PyObject *r = PyObject_CallMethodNoArgs(coro, st->s_close);
            Py_XDECREF(r);
            PyErr_Restore(typ, val, tb);
        }
    }
    Py_XDECREF(scope);
    Py_XDECREF(ctx);
    Py_XDECREF(receive);
    Py_XDECREF(send);
    Py_XDECREF(coro);
    Py_XDECREF(task);
    Py_XDECREF(cb);
    Py_XDECREF(res);
    return rc;
}

/* ---- the scope ------------------------------------------------------------------------------ */

static int
make_scope(sk_state *st, PyObject *scope, const sk_parser_t *p, PyObject **offered)
{
    /* Turns the request's http scope into the websocket scope (ASGI websocket 2.4): type,
     * asgi.spec_version, scheme ws/wss, no method, subprotocols from Sec-WebSocket-Protocol,
     * extensions with websocket.http.response. 0 (*offered: a new tuple of the subprotocols, the
     * server's own copy) or -1. */
    PyObject *v = NULL, *scheme = NULL, *subs = NULL;
    int rc = -1;
    if (PyDict_SetItem(scope, st->s_type, st->s_websocket) < 0) {
        goto done;
    }
    v = Py_BuildValue("{s:s,s:s}", "version", "3.0", "spec_version", "2.4");
    if (v == NULL || PyDict_SetItem(scope, st->s_asgi, v) < 0) {
        goto done;
    }
    Py_CLEAR(v);
    if (sk_asgi_msg_get(scope, st->s_scheme, &scheme) < 0) {
        goto done;
    }
    int secure = scheme != NULL && PyUnicode_Check(scheme) &&
                 PyUnicode_CompareWithASCIIString(scheme, "https") == 0;
    if (PyDict_SetItem(scope, st->s_scheme, secure ? st->s_wss : st->s_ws) < 0) {
        goto done;
    }
    if (PyDict_DelItem(scope, st->s_method) < 0) {
        PyErr_Clear();
    }
    subs = PyList_New(0);
    if (subs == NULL) {
        goto done;
    }
    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];
        if (!SK_TOKEN_IEQ(sk_parser_ptr(p, f->name), f->name.len, "sec-websocket-protocol")) {
            continue;
        }
        sk_list_iter_t it;
        const char *e;
        size_t elen;
        sk_list_init(&it, sk_parser_ptr(p, f->value), f->value.len);
        while (sk_list_next(&it, &e, &elen) == 1) {
            v = PyUnicode_DecodeLatin1(e, (Py_ssize_t)elen, NULL);
            if (v == NULL || PyList_Append(subs, v) < 0) {
                goto done;
            }
            Py_CLEAR(v);
        }
    }
    if (PyDict_SetItem(scope, st->s_subprotocols, subs) < 0 ||
        (*offered = PyList_AsTuple(subs)) == NULL) {
        goto done;
    }
    v = Py_BuildValue("{s:{}}", "websocket.http.response");
    if (v == NULL || PyDict_SetItem(scope, st->s_extensions, v) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(v);
    Py_XDECREF(scheme);
    Py_XDECREF(subs);
    return rc;
}

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

int
sk_wsh_start(sk_transport_t *t, sk_serve_t *srv, const sk_parser_t *p, int status, PyObject *scope,
             const char *key, size_t key_len)
{
    sk_state *st = srv->st;
    if (status == 426) {
        return answer_426(t, srv);
    }
    WebSocketObject *w = (WebSocketObject *)st->websocket_type->tp_alloc(st->websocket_type, 0);
    if (w == NULL) {
        return -1;
    }
    w->st = st;
    st->live_requests++;
    w->owner = Py_NewRef(srv->owner);
    w->srv = srv;
    w->t = t;
    w->scope = Py_NewRef(scope);
    /* the same dict: the record shows the websocket scope; the handshake was a GET */
    sk_access_exchange_begin(&srv->access, &w->acc, scope, HTTP_GET);
    sk_ws_limits_t limits = {.max_message = srv->ws.max_size, .allow_rsv1 = 0};
    sk_ws_parser_init(&w->parser, &limits);
    sk_ws_accept(key, key_len, w->accept);
    for (uint32_t i = 0; i < p->nfields && !w->pmd_offered; i++) {
        const sk_field_t *f = &p->fields[i];
        if (SK_TOKEN_IEQ(sk_parser_ptr(p, f->name), f->name.len, "sec-websocket-extensions")) {
            w->pmd_offered =
                (uint8_t)sk_pmd_negotiate(sk_parser_ptr(p, f->value), f->value.len, &w->pmd_params);
        }
    }
    if (make_scope(st, scope, p, &w->offered) < 0) {
        Py_DECREF(w);
        return -1;
    }
    sk_transport_clear_deadline(t);
    sk_transport_pause_reading(t, 0);
    sk_transport_switch(t, &sk_wsh_ops, Py_NewRef(w)); /* released in ws_release() */
    if (ws_run(w) < 0) {
        /* the app could not be called, or raised in its synchronous part (SystemExit included):
         * it fails only its own connection, logged with the exception as in ws_app_done() */
        PyObject *typ, *val, *tb;
        PyErr_Fetch(&typ, &val, &tb);
        PyErr_NormalizeException(&typ, &val, &tb);
        if (val != NULL && tb != NULL) {
            PyException_SetTraceback(val, tb);
        }
        sk_asgi_log_error(st, srv->logger, "Exception in ASGI application", val);
        Py_XDECREF(typ);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        answer_status(w, 500);
    }
    Py_DECREF(w);
    return 0;
}

/* ---- type ----------------------------------------------------------------------------------- */

static int
ws_tp_traverse(PyObject *op, visitproc visit, void *arg)
{
    WebSocketObject *w = (WebSocketObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(w->owner);
    Py_VISIT(w->scope);
    Py_VISIT(w->task);
    Py_VISIT(w->coro);
    Py_VISIT(w->app_exc);
    Py_VISIT(w->queue);
    Py_VISIT(w->receive_waiters);
    Py_VISIT(w->drain_waiters);
    Py_VISIT(w->disconnect);
    Py_VISIT(w->offered);
    return sk_access_req_traverse(&w->acc, visit, arg);
}

static int
ws_tp_clear(PyObject *op)
{
    WebSocketObject *w = (WebSocketObject *)op;
    if (w->owner != NULL && w->app_running) { /* dropped unfinished: no longer in flight */
        w->app_running = 0;
        w->srv->active_requests--;
    }
    Py_CLEAR(w->owner);
    Py_CLEAR(w->scope);
    Py_CLEAR(w->task);
    Py_CLEAR(w->coro);
    Py_CLEAR(w->app_exc);
    Py_CLEAR(w->queue);
    Py_CLEAR(w->receive_waiters);
    Py_CLEAR(w->drain_waiters);
    Py_CLEAR(w->disconnect);
    Py_CLEAR(w->offered);
    sk_access_req_clear(&w->acc);
    return 0;
}

static void
ws_tp_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    WebSocketObject *w = (WebSocketObject *)op;
    PyObject_GC_UnTrack(op);
    if (w->st != NULL) {
        w->st->live_requests--;
    }
    ws_tp_clear(op);
    sk_buf_free(&w->msg);
    sk_buf_free(&w->zout);
    sk_resp_free(&w->resp);
    if (w->pmd != NULL) {
        sk_pmd_free(w->pmd);
        PyMem_Free(w->pmd);
    }
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot ws_slots[] = {
    {Py_tp_traverse, ws_tp_traverse},
    {Py_tp_clear, ws_tp_clear},
    {Py_tp_dealloc, ws_tp_dealloc},
    {Py_am_await, ws_await},
    {Py_am_send, ws_am_send},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, ws_iternext},
    {Py_tp_methods, ws_methods},
    {Py_tp_doc, (void *)"One WebSocket session (internal): the handler of its connection."},
    {0, NULL},
};

PyType_Spec sk_websocket_spec = {
    .name = "skirr._native.WebSocket",
    .basicsize = sizeof(WebSocketObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = ws_slots,
};
