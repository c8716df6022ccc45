/* sk_wssession.c — the ASGI `websocket` session (see sk_wssession.h).
 *
 * Owns, per session (one WebSocket object: the object behind the app's receive/send and the
 * coroutine its Task runs): the websocket scope, the queue of received events and its flow
 * control, the app's Task (started with a fresh copy of the server's context; its done callback
 * answers what the app left unanswered), and the handshake answer's access-log record and
 * metrics (record_answer(), once per session). Talks to its wire only through the
 * sk_wss_wire_ops_t table it was made with.
 * Never: touches a socket, a transport or the reactor, or lets an application's failure reach
 * another connection or the server.
 *
 * States of a session (ws_state):
 *   HANDSHAKE (app runs, no answer yet) -> OPEN (accepted) | RESPONSE (denial response started)
 *   | DONE (403/500/denial complete, or the connection went away);
 *   OPEN -> CLOSING (the server's Close sent, the peer's awaited: sk_wss_closing) -> DONE;
 *   OPEN -> DONE (sk_wss_closed: the peer's Close answered, a protocol error, a failure; or
 *   sk_wss_gone).
 */
#include "sk_wssession.h"

#include "sk_asgi.h"
#include "sk_access.h"
#include "sk_serve.h"
#include "sk_token.h"
#include "sk_ws.h"

#include <assert.h>
#include <string.h>

#define QUEUE_HIGH_WATER (64 * 1024) /* received payload bytes waiting for the app: stop reading */

enum ws_state { WS_HANDSHAKE = 0, WS_RESPONSE, WS_OPEN, WS_CLOSING, WS_DONE };

struct sk_wss {
    PyObject_HEAD sk_state *st;
    PyObject *owner;              /* strong: the Server, keeping srv alive */
    sk_serve_t *srv;              /* borrowed from owner */
    const sk_wss_wire_ops_t *ops; /* the wire's table (static storage) */
    void *wire;                   /* borrowed; NULL once the wire said sk_wss_gone() */
    PyObject *scope;              /* strong until the app is called */
    PyObject *task;               /* strong while the app runs */
    PyObject *coro;               /* strong: what the app call returned, driven by w's own steps */
    PyObject *app_exc;            /* strong: what the app raised, until ws_app_done() reports it */
    PyObject *queue;              /* list of received events not yet given to receive() */
    PyObject *receive_waiters;    /* futures waiting in receive() (a waiter slot, sk_asgi.h) */
    PyObject *drain_waiters;      /* futures waiting in send() for output to drain (a slot) */
    PyObject *disconnect;         /* the websocket.disconnect event, once the connection ended */
    PyObject *offered;            /* tuple of str: the client's Sec-WebSocket-Protocol elements */
    enum ws_state state;
    uint8_t connect_given;     /* websocket.connect was returned by receive() */
    uint8_t app_running;       /* counted in srv->active_requests */
    uint8_t raised_disconnect; /* skirr raised ClientDisconnected into the app (not logged) */
    uint8_t app_closed;        /* the app sent websocket.close: a ClientDisconnected a later send
                                * raises is its own doing (logged if it lets it out), not the
                                * client's departure */
    uint8_t server_closing;    /* the server's Close went first (sk_wss_closing) */
    uint8_t client_left;       /* the client's Close or a lost connection came first: counted
                                * as a client disconnect when the app's call ends */
    uint8_t paused;            /* reading stopped: the queue is over its marks */
    uint8_t app_has_message;   /* receive() gave a message and was not called again since */
    uint8_t stepping;          /* inside a step, throw() or close() of the app's coroutine: the
                                * app driving its own session (Task.get_coro()) is refused */
    size_t queued_bytes;       /* payload bytes of the queued messages */
    sk_access_req_t acc; /* the handshake's access-log record and metrics start (sk_access.h) */
    uint8_t answered;    /* the handshake's answer was recorded (record_answer) */
};

typedef struct sk_wss WebSocketObject;

/* The session's Task steps' refusal on another thread (sk_serve_check_thread). */
#define WS_TASK_THREAD_HINT "a WebSocket session runs as a Task of the event loop that serves it"

static void
record_answer(WebSocketObject *w, int status, uint64_t bytes)
{
    /* The handshake's answer, once, as the client saw it (the wire's acceptance status, 101 on
     * HTTP/1.1; 403, 500, or a denial response's status with its content bytes; told by the wire,
     * sk_wss_answered): the access log's record and the metrics' response, each only while on.
     * The record is a response record whose scope is the websocket scope. */
    if (w->answered) {
        return;
    }
    w->answered = 1;
    sk_access_exchange_end(&w->srv->access, &w->acc, status, bytes);
}

static void
set_state(WebSocketObject *w, enum ws_state to)
{
    /* To `to`, unless the session already ended (an answer of the wire's may end it inside an
     * entry the session called). */
    assert(to != WS_HANDSHAKE);
    if (w->state != WS_DONE) {
        w->state = to;
    }
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
    if (w->wire == NULL) {
        return;
    }
    Py_ssize_t n = w->queue ? PyList_GET_SIZE(w->queue) : 0;
    int full = n >= w->srv->ws.max_queue || w->queued_bytes >= QUEUE_HIGH_WATER;
    if (full != w->paused) {
        w->paused = (uint8_t)full;
        w->ops->pause_reading(w->wire, full);
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

/* ---- send ----------------------------------------------------------------------------------- */

static PyObject *
raise_disconnected(WebSocketObject *w)
{
    /* Always NULL with skirr.ClientDisconnected set: the connection is closed (ASGI websocket
     * 2.4: an IOError subclass). Counted as the client's departure only when the app had not
     * closed it itself (issue 36: an app that sends after its own close is told so, and what
     * it lets out is logged as its error). */
    if (w->app_closed) {
        PyErr_SetString(w->st->ClientDisconnected,
                        "the application closed this WebSocket (websocket.close was sent)");
        return NULL;
    }
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
send_accept(WebSocketObject *w, PyObject *msg)
{
    /* websocket.accept: the wire's acceptance (accept()) with the app's subprotocol (one the
     * client offered) and headers (none the wire's handshake writes itself: fields_refused()).
     * 0, or -1 with TypeError (malformed), RuntimeError (a value the handshake refuses) or
     * ClientDisconnected. */
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
    if (get_headers(msg, st, &keep, &hdrs, &n, SK_WSS_ACCEPT_ROOM) < 0 ||
        w->ops->fields_refused(hdrs + SK_WSS_ACCEPT_ROOM, n - SK_WSS_ACCEPT_ROOM, 1,
                               "websocket.accept") < 0) {
        goto done;
    }
    if (w->acc.scope != NULL) {
        Py_XSETREF(w->acc.resp_headers, Py_NewRef(keep)); /* %({name}o)s of the access log */
    }
    if (w->wire == NULL) { /* the conversions ran Python code */
        raise_disconnected(w);
        goto done;
    }
    /* The wire's own fields go in the free slots just before the app's headers. */
    int r = w->ops->accept(w->wire, sp, (size_t)splen, hdrs + SK_WSS_ACCEPT_ROOM,
                           n - SK_WSS_ACCEPT_ROOM);
    if (r == SK_WSS_GONE) {
        raise_disconnected(w);
        goto done;
    }
    if (r < 0) {
        goto done;
    }
    set_state(w, WS_OPEN);
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
     * instead of the acceptance, the connection closed after it. 0, 1 (a body with more_body
     * left the wire's output over its mark: wait for drain) or -1. */
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
            w->ops->fields_refused(hdrs, n, 0, "websocket.http.response.start") < 0) {
            goto done;
        }
        if (w->acc.scope != NULL) {
            Py_XSETREF(w->acc.resp_headers, Py_NewRef(keep)); /* %({name}o)s of the access log */
        }
        rc = w->ops->deny_start(w->wire, (int)status, hdrs, n);
        if (rc >= 0) {
            set_state(w, WS_RESPONSE);
        }
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
    if (w->wire == NULL) {
        raise_disconnected(w);
        goto done;
    }
    int r = w->ops->deny_body(w->wire, obj ? view.buf : "", obj ? (size_t)view.len : 0, more);
    if (r == SK_WSS_GONE) {
        raise_disconnected(w);
        goto done;
    }
    if (r < 0) {
        goto done; /* once the head is out, the wire aborted the connection (sk_wss_gone) */
    }
    if (!more) {
        set_state(w, WS_DONE);
    }
    rc = r;
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
     * or returned without answering); the wire closes after it. */
    if (w->wire != NULL) {
        w->ops->refuse(w->wire, status);
    }
    set_state(w, WS_DONE);
    ended(w, SK_WS_ABNORMAL, NULL, 0);
}

static int
send_close(WebSocketObject *w, PyObject *msg)
{
    /* websocket.close: 403 before accept (ASGI websocket 2.4), else the server's side of the
     * close handshake (the wire's close()) with code (default 1000) and reason. 0 or -1. */
    sk_state *st = w->st;
    PyObject *code_o = NULL, *reason_o = NULL;
    const char *reason = "";
    Py_ssize_t rlen = 0;
    int rc = -1;
    if (w->state == WS_HANDSHAKE) {
        answer_status(w, 403);
        w->app_closed = 1;
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
    if (w->state != WS_OPEN || w->wire == NULL) {
        raise_disconnected(w);
        goto done;
    }
    /* a protocol error of the peer's held by the wire is sent instead: no close handshake */
    rc = w->ops->close(w->wire, (int)code, reason, (size_t)rlen);
    if (rc == 0) {
        w->app_closed = 1;
    }
done:
    Py_XDECREF(code_o);
    Py_XDECREF(reason_o);
    return rc;
}

static PyObject *
send_data(WebSocketObject *w, PyObject *msg)
{
    /* websocket.send: one message of text or bytes (the wire's send()). New reference to the
     * completion awaitable (a future while the output is over its mark), or NULL. */
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
    if (w->state != WS_OPEN || w->wire == NULL) {
        raise_disconnected(w);
        goto done;
    }
    int r = w->ops->send(w->wire, opcode == SK_WS_TEXT, d, (size_t)n);
    if (r == SK_WSS_GONE) {
        raise_disconnected(w);
        goto done;
    }
    if (r < 0) {
        goto done;
    }
    if (r == 1) {
        /* backpressure: complete once the wire says its output drained (sk_wss_drained) */
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
    if (sk_serve_check_thread(w->srv, "send()", SK_ASGI_THREAD_HINT) < 0) {
        return NULL; /* before anything is read or changed: the session goes on on its thread */
    }
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
            if (w->wire == NULL) {
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
        if (w->wire == NULL && w->client_left) {
            raise_disconnected(w); /* ASGI www 2.5 "Disconnected Client - send exception" */
        }
        else if (w->state != WS_HANDSHAKE) {
            PyErr_SetString(PyExc_RuntimeError, "Unexpected ASGI message "
                                                "'websocket.http.response.start' after the "
                                                "handshake was answered");
        }
        else if (w->wire == NULL) {
            raise_disconnected(w);
        }
        else {
            ok = send_denial(w, msg, 1);
        }
    }
    else if (PyUnicode_Compare(type, st->s_websocket_http_response_body) == 0) {
        if (w->wire == NULL && w->client_left) {
            raise_disconnected(w);
        }
        else if (w->state != WS_RESPONSE) {
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
    if (ok == 1 && w->state == WS_RESPONSE && w->wire != NULL) {
        /* a denial body with more_body: backpressure, as websocket.send and an HTTP body */
        res = sk_asgi_add_waiter(st, w->srv->loop, &w->drain_waiters);
    }
    else if (ok >= 0) {
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
    if (sk_serve_check_thread(w->srv, "receive()", SK_ASGI_THREAD_HINT) < 0) {
        return NULL;
    }
    w->app_has_message = 0; /* the app is done with the last message it got */
    if (w->wire != NULL) {
        w->ops->receiving(w->wire); /* a protocol error held behind its messages may go now */
    }
    if (sk_asgi_waiting(w->receive_waiters) == 0) {
        int rc = next_event(w, &msg);
        if (rc != 0) {
            return rc > 0 ? sk_ready_new(w->st, msg, 0) : NULL;
        }
    }
    return sk_asgi_add_waiter(w->st, w->srv->loop, &w->receive_waiters);
}

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
    if (sk_serve_check_thread(w->srv, "a WebSocket session's done callback", WS_TASK_THREAD_HINT) <
        0) {
        return NULL;
    }
    PyObject *cancelled = PyObject_CallMethodNoArgs(task, st->s_cancelled);
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
    enum sk_disconnect_app how = SK_DISC_APP_NONE;
    if (exc != NULL) {
        how = sk_asgi_log_app_exception(st, w->srv->logger, exc, w->raised_disconnect)
                  ? SK_DISC_APP_ABSORBED
                  : SK_DISC_APP_ERROR;
    }
    else if (exc == NULL && cancelled == Py_False && w->state == WS_HANDSHAKE) {
        sk_asgi_log_error(st, w->srv->logger, "ASGI callable returned without sending handshake.",
                          NULL);
    }
    else if (exc == NULL && cancelled == Py_False && w->state == WS_RESPONSE) {
        sk_asgi_log_error(st, w->srv->logger,
                          "ASGI callable returned without completing the denial response.", NULL);
    }
    Py_DECREF(cancelled);
    Py_XDECREF(exc);
    if (w->client_left && w->srv->metrics != NULL) {
        SK_ADD(w->srv->metrics->disconnects[SK_DISC_WEBSOCKET][how], 1);
    }
    if (w->app_running) {
        w->app_running = 0;
        SK_ADD(w->srv->active_requests, -1);
    }
    Py_CLEAR(w->task);
    if (w->state == WS_HANDSHAKE) {
        answer_status(w, 500);
    }
    else if (w->state == WS_RESPONSE) {
        if (w->wire != NULL) {
            w->ops->deny_abort(w->wire);
        }
        set_state(w, WS_DONE);
    }
    /* Once open, a protocol error of the peer's the wire holds for this app is what ends the
     * connection (fail() and close() send it instead). */
    else if (w->state == WS_OPEN && w->wire != NULL && failed) {
        w->ops->fail(w->wire, 1011); /* RFC 6455 §7.4.1: an unexpected condition; at once */
    }
    else if (w->state == WS_OPEN && w->wire != NULL && w->ops->close(w->wire, 1000, "", 0) < 0) {
        PyErr_Clear();
        w->ops->fail(w->wire, 1000); /* returned without closing: a normal close handshake */
    }
    Py_RETURN_NONE;
}

static PyObject *
ws_receive_entry(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    /* The app's receive() (a Bound): no argument. */
    (void)args;
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        PyErr_SetString(PyExc_TypeError, "receive() takes no arguments");
        return NULL;
    }
    return ws_receive(sk_bound_self(callable), NULL);
}

static PyObject *
ws_send_entry(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    /* The app's send(message) (a Bound): one positional argument. */
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        PyErr_SetString(PyExc_TypeError, "send() takes exactly one argument (the message)");
        return NULL;
    }
    return ws_send(sk_bound_self(callable), args[0]);
}

static PyObject *
ws_done_entry(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    /* The app Task's done callback (a Bound; not the session itself, which asyncio takes for a
     * coroutine and a debug-mode loop refuses to call_soon): one argument, the session's Task,
     * once it is done. Anything else (an app reaching it through its Task's callbacks) is a
     * TypeError and changes nothing. */
    WebSocketObject *w = (WebSocketObject *)sk_bound_self(callable);
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) ||
        w->task == NULL || args[0] != w->task) {
        PyErr_SetString(PyExc_TypeError, "a WebSocket session's done callback takes its Task");
        return NULL;
    }
    PyObject *done = PyObject_CallMethodNoArgs(w->task, w->st->s_done);
    if (done != Py_True) {
        if (done != NULL) {
            PyErr_SetString(PyExc_TypeError, "a WebSocket session's done callback runs once its "
                                             "Task is done");
        }
        Py_XDECREF(done);
        return NULL;
    }
    Py_DECREF(done);
    return ws_app_done((PyObject *)w, args[0]);
}

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
        sk_asgi_task_cancelling(w->st, w->task)) {
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
    if (sk_serve_check_thread(w->srv, "a WebSocket session's coroutine step", WS_TASK_THREAD_HINT) <
        0) {
        return PYGEN_ERROR;
    }
    if (sk_asgi_step_busy(w->stepping)) {
        return PYGEN_ERROR;
    }
    if (w->coro == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited websocket coroutine");
        return PYGEN_ERROR;
    }
    w->stepping = 1;
    PySendResult res = PyIter_Send(w->coro, arg, result);
    w->stepping = 0;
    return ws_step_ended(w, res, result);
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
    if (sk_serve_check_thread(w->srv, "a WebSocket session's coroutine throw()",
                              WS_TASK_THREAD_HINT) < 0) {
        return NULL;
    }
    if (sk_asgi_step_busy(w->stepping)) {
        return NULL;
    }
    if (w->coro == NULL) {
        sk_asgi_raise_thrown(args, nargs);
        return NULL;
    }
    w->stepping = 1;
    res = sk_asgi_coro_throw(w->st, w->coro, args, nargs, &result);
    w->stepping = 0;
    res = ws_step_ended(w, res, &result);
    return sk_asgi_method_result(res, result);
}

static PyObject *
ws_close_coro(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None: coroutine.close(): closes the app's coroutine (an iterator without
     * close() is dropped); NULL with what that close raised. */
    WebSocketObject *w = (WebSocketObject *)op;
    if (sk_serve_check_thread(w->srv, "a WebSocket session's coroutine close()",
                              WS_TASK_THREAD_HINT) < 0) {
        return NULL;
    }
    if (sk_asgi_step_busy(w->stepping)) {
        return NULL;
    }
    PyObject *coro = w->coro;
    w->coro = NULL;
    w->stepping = 1;
    int rc = coro != NULL ? sk_asgi_coro_close(w->st, coro) : 0;
    w->stepping = 0;
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
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
    receive = sk_bound_new(st, (PyObject *)w, ws_receive_entry);
    send = sk_bound_new(st, (PyObject *)w, ws_send_entry);
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
    cb = sk_bound_new(st, (PyObject *)w, ws_done_entry);
    if (cb != NULL) {
        /* in the Task's own context, not a copy of the caller's that the Task would keep for
         * the connection's life (issue 37: what a held WebSocket keeps); it runs after the
         * Task's last step has left that context (asyncio schedules done callbacks) */
        PyObject *dargs[3] = {task, cb, ctx};
        res = PyObject_VectorcallMethod(st->s_add_done_callback, dargs, 2, srv->call_soon_kw);
    }
    if (res == NULL) {
        PyObject *r = PyObject_CallMethodNoArgs(task, st->s_cancel);
        Py_XDECREF(r);
        goto done;
    }
    w->task = Py_NewRef(task);
    w->app_running = 1;
    SK_ADD(srv->active_requests, 1);
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
make_scope(sk_state *st, PyObject *scope, PyObject **offered)
{
    /* Turns the request's http scope into the websocket scope (ASGI websocket 2.4): type,
     * asgi.spec_version, scheme ws/wss, no method, subprotocols from the sec-websocket-protocol
     * fields of its `headers` (names lowercase, in order), extensions with
     * websocket.http.response (and the http scope's `tls`, on a TLS connection). 0 (*offered: a new tuple of the subprotocols, the
     * server's own copy) or -1. */
    PyObject *v = NULL, *scheme = NULL, *subs = NULL, *headers = NULL;
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
    if (sk_asgi_msg_get(scope, st->s_headers, &headers) < 0) {
        goto done;
    }
    static const char name[] = "sec-websocket-protocol";
    Py_ssize_t nh = headers != NULL && PyList_Check(headers) ? PyList_GET_SIZE(headers) : 0;
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *pair = PyList_GET_ITEM(headers, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 1)) ||
            PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 0)) != (Py_ssize_t)(sizeof(name) - 1) ||
            memcmp(PyBytes_AS_STRING(PyTuple_GET_ITEM(pair, 0)), name, sizeof(name) - 1) != 0) {
            continue;
        }
        PyObject *value = PyTuple_GET_ITEM(pair, 1);
        sk_list_iter_t it;
        const char *e;
        size_t elen;
        sk_list_init(&it, PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
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
    if (v == NULL) {
        goto done;
    }
    /* the http scope's `tls` extension (a TLS connection: wss) carries over */
    PyObject *ext = PyDict_GetItemWithError(scope, st->s_extensions); /* borrowed */
    PyObject *tls = ext != NULL && PyDict_Check(ext) ? PyDict_GetItemWithError(ext, st->s_tls)
                                                     : NULL; /* borrowed */
    if ((tls == NULL && PyErr_Occurred()) ||
        (tls != NULL && PyDict_SetItem(v, st->s_tls, tls) < 0) ||
        PyDict_SetItem(scope, st->s_extensions, v) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(v);
    Py_XDECREF(scheme);
    Py_XDECREF(subs);
    Py_XDECREF(headers);
    return rc;
}

/* ---- made by a wire ------------------------------------------------------------------------- */

sk_wss_t *
sk_wss_new(sk_serve_t *srv, PyObject *scope, const sk_wss_wire_ops_t *ops, void *wire)
{
    /* New reference (see sk_wssession.h). */
    sk_state *st = srv->st;
    WebSocketObject *w = (WebSocketObject *)st->websocket_type->tp_alloc(st->websocket_type, 0);
    if (w == NULL) {
        return NULL;
    }
    w->st = st;
    SK_ADD(st->live_requests, 1);
    w->owner = Py_NewRef(srv->owner);
    w->srv = srv;
    w->ops = ops;
    w->wire = wire;
    w->scope = Py_NewRef(scope);
    /* the same dict: the record shows the websocket scope; the handshake was a GET */
    sk_access_exchange_begin(&srv->access, &w->acc, scope, HTTP_GET);
    if (make_scope(st, scope, &w->offered) < 0) {
        w->wire = NULL; /* the wire is not told: it frees itself */
        Py_DECREF(w);
        return NULL;
    }
    return w;
}

void
sk_wss_start(sk_wss_t *w)
{
    if (ws_run(w) < 0) {
        /* the app could not be called, or raised in its synchronous part (SystemExit included):
         * it fails only its own connection, logged with the exception as in ws_app_done() */
        PyObject *typ, *val, *tb;
        PyErr_Fetch(&typ, &val, &tb);
        PyErr_NormalizeException(&typ, &val, &tb);
        if (val != NULL && tb != NULL) {
            PyException_SetTraceback(val, tb);
        }
        sk_asgi_log_error(w->st, w->srv->logger, "Exception in ASGI application", val);
        Py_XDECREF(typ);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        answer_status(w, 500);
    }
}

int
sk_wss_traverse(sk_wss_t *w, visitproc visit, void *arg)
{
    Py_VISIT((PyObject *)w);
    return 0;
}

/* ---- the wire's answers --------------------------------------------------------------------- */

int
sk_wss_message(sk_wss_t *w, int text, const char *data, size_t len)
{
    /* Queues the message as websocket.receive. 0 or -1 (exception set). */
    sk_state *st = w->st;
    PyObject *d = text ? PyUnicode_DecodeUTF8(data, (Py_ssize_t)len, "strict") /* checked: §8.1 */
                       : PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    PyObject *ev = PyDict_New();
    int rc = -1;
    if (d != NULL && ev != NULL && PyDict_SetItem(ev, st->s_type, st->s_websocket_receive) == 0 &&
        PyDict_SetItem(ev, text ? st->s_text : st->s_bytes, d) == 0) {
        rc = queue_event(w, ev, len);
    }
    Py_XDECREF(d);
    Py_XDECREF(ev);
    if (rc == 0) {
        sync_reading(w);
    }
    return rc;
}

int
sk_wss_backlog(const sk_wss_t *w)
{
    return (w->queue != NULL && PyList_GET_SIZE(w->queue) > 0) || w->app_has_message;
}

static void
note_client_left(WebSocketObject *w)
{
    /* The connection ends from the client's side while the session is not done: the client left
     * unless the app (websocket.close) or the server (sk_wss_closing) began closing first. */
    if (w->state != WS_DONE && !w->app_closed && !w->server_closing) {
        w->client_left = 1;
    }
}

void
sk_wss_closing(sk_wss_t *w)
{
    w->server_closing = 1;
    if (w->state == WS_OPEN) {
        set_state(w, WS_CLOSING);
    }
}

void
sk_wss_closed(sk_wss_t *w, int by_peer, int code, const char *reason, size_t reason_len)
{
    if (by_peer) {
        note_client_left(w);
    }
    ended(w, code, reason, reason_len);
    set_state(w, WS_DONE);
}

void
sk_wss_drained(sk_wss_t *w)
{
    if (w->drain_waiters != NULL) {
        release_drain(w, 0);
    }
}

void
sk_wss_answered(sk_wss_t *w, int status, uint64_t bytes)
{
    record_answer(w, status, bytes);
}

void
sk_wss_gone(sk_wss_t *w)
{
    w->wire = NULL;
    note_client_left(w);
    set_state(w, WS_DONE);
    ended(w, SK_WS_ABNORMAL, NULL, 0); /* RFC 6455 §7.1.5: no Close received: 1006 */
    release_drain(w, 1);
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
        SK_ADD(w->srv->active_requests, -1);
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
        SK_ADD(w->st->live_requests, -1);
    }
    ws_tp_clear(op);
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
    {Py_tp_doc,
     (void *)"One ASGI websocket session (internal): its app's receive/send and coroutine."},
    {0, NULL},
};

PyType_Spec sk_websocket_spec = {
    .name = "skirr._native.WebSocket",
    .basicsize = sizeof(WebSocketObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = ws_slots,
};
