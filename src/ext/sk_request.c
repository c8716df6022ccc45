/* sk_request.c — ASGI 3 (HTTP spec 2.5) glue for one request: scope, receive, send, app task.
 *
 * Owns: building the scope from the parsed head (a fresh mutable dict per request), the request's
 * body queue and receive() events, validating ASGI send() messages and handing them to the
 * serializer, 100-continue, the per-request fairness quota, and driving the app: the Request is
 * the coroutine its asyncio.Task runs, so it sees the app end in the same step (500 before the
 * response head, abort after it, quiet server-generated disconnects and cancellations).
 * Never: touches sockets directly (sk_server.c writes and closes) or parses HTTP.
 */
#include "sk_native.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

/* ---- helpers ---------------------------------------------------------------------------------- */

static void
log_error(RequestObject *r, const char *msg, PyObject *exc)
{
    /* Calls logger.error(msg, exc_info=exc); failures to log are reported as unraisable. */
    PyObject *logger = r->server->logger;
    PyObject *meth = NULL, *args = NULL, *kwargs = NULL, *res = NULL;
    if (logger == Py_None) {
        return;
    }
    meth = PyObject_GetAttr(logger, r->st->s_error);
    args = Py_BuildValue("(s)", msg);
    kwargs = exc ? Py_BuildValue("{s:O}", "exc_info", exc) : NULL;
    if (meth == NULL || args == NULL || (exc && kwargs == NULL)) {
        goto error;
    }
    res = PyObject_Call(meth, args, kwargs);
    if (res == NULL) {
        goto error;
    }
    goto done;
error:
    PyErr_WriteUnraisable(logger);
done:
    Py_XDECREF(meth);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(res);
}

static PyObject *
sockaddr_to_tuple(const struct sockaddr_storage *ss)
{
    /* New reference: (host, port) for IPv4/IPv6, None otherwise; NULL with an exception. */
    char host[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        return Py_BuildValue("(si)", host, (int)ntohs(a->sin_port));
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        return Py_BuildValue("(si)", host, (int)ntohs(a->sin6_port));
    }
    Py_RETURN_NONE;
}

static int
hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static PyObject *
decode_path(PyObject *root_path, const char *p, size_t n)
{
    /* New reference: root_path + percent-decoded p, decoded as UTF-8 with U+FFFD for invalid
     * sequences (as urllib.parse.unquote does); NULL with an exception. */
    PyObject *path = NULL, *res = NULL;
    char *tmp = NULL;
    if (memchr(p, '%', n) == NULL) {
        path = PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "replace");
    }
    else {
        tmp = PyMem_Malloc(n ? n : 1);
        if (tmp == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            int hi, lo;
            if (p[i] == '%' && i + 2 < n && (hi = hexval(p[i + 1])) >= 0 &&
                (lo = hexval(p[i + 2])) >= 0) {
                tmp[o++] = (char)(hi * 16 + lo);
                i += 2;
            }
            else {
                tmp[o++] = p[i];
            }
        }
        path = PyUnicode_DecodeUTF8(tmp, (Py_ssize_t)o, "replace");
    }
    if (path == NULL) {
        goto error;
    }
    if (PyUnicode_GET_LENGTH(root_path) == 0) {
        res = Py_NewRef(path);
    }
    else {
        res = PyUnicode_Concat(root_path, path);
    }
error:
    PyMem_Free(tmp);
    Py_XDECREF(path);
    return res;
}

static PyObject *
build_headers(sk_parser_t *p, const char *authority, size_t authority_len)
{
    /* New reference: [(lower-cased name, value), ...] in received order; NULL with an exception. */
    PyObject *list = PyList_New(p->nfields);
    if (list == NULL) {
        return NULL;
    }
    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];
        const char *src = sk_parser_ptr(p, f->name);
        const char *vp = sk_parser_ptr(p, f->value);
        size_t vlen = f->value.len;
        if (authority != NULL && f->name.len == 4 && strncasecmp(src, "host", 4) == 0) {
            /* RFC 9112 §3.2.2: with an absolute-form target the Host field is replaced by the
             * target's authority, so the app sees one answer to "which host". */
            vp = authority;
            vlen = authority_len;
        }
        PyObject *name = PyBytes_FromStringAndSize(NULL, f->name.len);
        PyObject *value = PyBytes_FromStringAndSize(vp, (Py_ssize_t)vlen);
        if (name == NULL || value == NULL) {
            Py_XDECREF(name);
            Py_XDECREF(value);
            goto error;
        }
        char *dst = PyBytes_AS_STRING(name);
        for (uint32_t k = 0; k < f->name.len; k++) {
            char ch = src[k];
            dst[k] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(name);
            Py_DECREF(value);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, value);
        PyList_SET_ITEM(list, i, pair);
    }
    return list;
error:
    Py_DECREF(list);
    return NULL;
}

static PyObject *
build_scope(ServerObject *s, sk_conn_t *c)
{
    /* New reference: the request's scope dict; NULL with an exception. */
    sk_state *st = s->st;
    sk_parser_t *p = &c->parser;
    PyObject *scope = NULL, *v = NULL;
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
        plen = 1;
        if (q == NULL && tlen == 0) {
            q = NULL;
        }
    }
    SET(st->s_path, decode_path(s->root_path, path_p, plen));
    if (PyBytes_GET_SIZE(s->root_path_b) == 0) {
        SET(st->s_raw_path, PyBytes_FromStringAndSize(path_p, (Py_ssize_t)plen));
    }
    else {
        v = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(s->root_path_b) + (Py_ssize_t)plen);
        if (v == NULL) {
            goto error;
        }
        memcpy(PyBytes_AS_STRING(v), PyBytes_AS_STRING(s->root_path_b),
               PyBytes_GET_SIZE(s->root_path_b));
        memcpy(PyBytes_AS_STRING(v) + PyBytes_GET_SIZE(s->root_path_b), path_p, plen);
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
    SET(st->s_root_path, Py_NewRef(s->root_path));
    SET(st->s_headers, build_headers(p, authority, authority_len));
    if (c->client == NULL) {
        c->client = (s->unix_path != Py_None) ? Py_NewRef(Py_None) : sockaddr_to_tuple(&c->peer);
        if (c->client == NULL) {
            goto error;
        }
    }
    SET(st->s_client, Py_NewRef(c->client));
    if (c->local == NULL) {
        if (s->unix_path != Py_None) {
            c->local = PyTuple_Pack(2, s->unix_path, Py_None);
        }
        else {
            struct sockaddr_storage ss = {0};
            socklen_t sl = sizeof(ss);
            if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) == 0) {
                c->local = sockaddr_to_tuple(&ss);
            }
            else {
                c->local = Py_NewRef(Py_None);
            }
        }
        if (c->local == NULL) {
            goto error;
        }
    }
    SET(st->s_server, Py_NewRef(c->local));
    if (s->state != Py_None) {
        SET(st->s_state, PyDict_Check(s->state) ? PyDict_Copy(s->state)
                                                : PyObject_CallMethodNoArgs(s->state, st->s_copy));
    }
#undef SET
    return scope;
error:
    Py_XDECREF(v);
    Py_XDECREF(scope);
    return NULL;
}

static PyObject *
ready(RequestObject *r, PyObject *value)
{
    /* New reference: an awaitable returning value (stolen; NULL = None). After SK_FAIRNESS_QUOTA
     * ready operations of this request it yields to the loop once first. */
    if (++r->ops >= SK_FAIRNESS_QUOTA) {
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

/* ---- receive ---------------------------------------------------------------------------------- */

static PyObject *
next_message(RequestObject *r, int *ok)
{
    /* New reference: the next receive() event if one is ready, else NULL with *ok = 1; NULL with
     * *ok = 0 and an exception on failure. */
    sk_state *st = r->st;
    PyObject *msg = NULL, *data = NULL;
    *ok = 1;
    if (r->body_buffered > 0 || (r->body_complete && !r->final_delivered)) {
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
        int more = !r->body_complete;
        msg = PyDict_New();
        if (msg == NULL || PyDict_SetItem(msg, st->s_type, st->s_http_request) < 0 ||
            PyDict_SetItem(msg, st->s_body, data) < 0 ||
            PyDict_SetItem(msg, st->s_more_body, more ? Py_True : Py_False) < 0) {
            goto error;
        }
        if (!more) {
            r->final_delivered = 1;
        }
        Py_DECREF(data);
        if (r->conn != NULL) {
            /* flow control: body consumed, parse and read more */
            if (sk_buf_len(&r->conn->in) > 0) {
                sk_conn_schedule(r->conn);
            }
            sk_conn_update_events(r->conn);
        }
        return msg;
    }
    if (r->disconnected || r->response_complete || r->conn == NULL) {
        msg = PyDict_Copy(st->disconnect_msg);
        if (msg == NULL) {
            *ok = 0;
        }
        return msg;
    }
    return NULL;
error:
    *ok = 0;
    Py_XDECREF(data);
    Py_XDECREF(msg);
    return NULL;
}

static void
wake_receiver(RequestObject *r)
{
    /* Resolves a waiting receive() with the next event, if any. A cancelled waiter is dropped
     * without consuming the event. */
    PyObject *fut = r->receive_waiter;
    if (fut == NULL) {
        return;
    }
    PyObject *done = PyObject_CallMethodNoArgs(fut, r->st->s_done);
    if (done == NULL) {
        PyErr_WriteUnraisable(fut);
        return;
    }
    int is_done = (done == Py_True);
    Py_DECREF(done);
    if (is_done) {
        r->receive_waiter = NULL;
        Py_DECREF(fut);
        return;
    }
    int ok;
    PyObject *msg = next_message(r, &ok);
    if (msg == NULL) {
        if (!ok) {
            PyErr_WriteUnraisable(fut);
        }
        return;
    }
    r->receive_waiter = NULL; /* moved out before calling into the future */
    PyObject *res = PyObject_CallMethodOneArg(fut, r->st->s_set_result, msg);
    if (res == NULL) {
        PyErr_WriteUnraisable(fut);
    }
    Py_XDECREF(res);
    Py_DECREF(msg);
    Py_DECREF(fut);
}

static PyObject *
request_receive(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference: an awaitable for the next event (ASGI www 2.5 http.request /
     * http.disconnect); NULL with RuntimeError if a receive() is already waiting. */
    RequestObject *r = (RequestObject *)op;
    int ok;
    PyObject *msg = next_message(r, &ok);
    if (msg != NULL) {
        return ready(r, msg);
    }
    if (!ok) {
        return NULL;
    }
    if (r->receive_waiter != NULL) {
        PyObject *done = PyObject_CallMethodNoArgs(r->receive_waiter, r->st->s_done);
        if (done == NULL) {
            return NULL;
        }
        int is_done = (done == Py_True);
        Py_DECREF(done);
        if (!is_done) {
            PyErr_SetString(PyExc_RuntimeError,
                            "receive() is already being awaited for this request");
            return NULL;
        }
        Py_CLEAR(r->receive_waiter);
    }
    sk_conn_t *c = r->conn;
    if (r->expect_continue && !r->continue_sent && !r->resp.head_written && c != NULL) {
        /* RFC 9110 §10.1.1: the app wants the content, so ask the client for it. */
        r->continue_sent = 1;
        if (sk_buf_append(&c->out, SK_CONTINUE_RESPONSE, SK_CONTINUE_RESPONSE_LEN) < 0) {
            return PyErr_NoMemory();
        }
        (void)sk_conn_write(c);
        if (r->conn == NULL) { /* the write found the peer gone */
            return ready(r, PyDict_Copy(r->st->disconnect_msg));
        }
    }
    PyObject *fut = PyObject_CallMethodNoArgs(r->server->loop, r->st->s_create_future);
    if (fut == NULL) {
        return NULL;
    }
    r->receive_waiter = Py_NewRef(fut);
    return fut;
}

/* ---- send ------------------------------------------------------------------------------------- */

static PyObject *
msg_get(PyObject *msg, PyObject *key)
{
    /* Borrowed-or-new: returns a NEW reference or NULL (no exception) when absent; NULL with an
     * exception on failure (check PyErr_Occurred). */
    if (PyDict_Check(msg)) {
        PyObject *v = PyDict_GetItemWithError(msg, key);
        return Py_XNewRef(v);
    }
    PyObject *v = PyObject_GetItem(msg, key);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) {
        PyErr_Clear();
    }
    return v;
}

static PyObject *
send_start(RequestObject *r, PyObject *msg)
{
    /* New reference to the completion awaitable, or NULL with an exception. */
    sk_header_t stack_hdrs[32];
    sk_header_t *hdrs = stack_hdrs;
    PyObject *status_o = NULL, *headers = NULL, *seq = NULL, *keep = NULL, *res = NULL;
    if (r->resp.started) {
        PyErr_SetString(
            PyExc_RuntimeError,
            "Unexpected ASGI message 'http.response.start' sent, after response already started.");
        goto error;
    }
    if (r->conn == NULL || r->disconnected) {
        raise_disconnected(r);
        goto error;
    }
    status_o = msg_get(msg, r->st->s_status);
    if (status_o == NULL) {
        if (!PyErr_Occurred()) {
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
    headers = msg_get(msg, r->st->s_headers);
    if (headers == NULL && PyErr_Occurred()) {
        goto error;
    }
    Py_ssize_t n = 0;
    if (headers != NULL) {
        seq = PySequence_Fast(headers, "ASGI 'headers' must be an iterable of [name, value] pairs");
        if (seq == NULL) {
            goto error;
        }
        n = PySequence_Fast_GET_SIZE(seq);
        keep = PyList_New(0);
        if (keep == NULL) {
            goto error;
        }
        if (n > (Py_ssize_t)(sizeof(stack_hdrs) / sizeof(stack_hdrs[0]))) {
            hdrs = PyMem_Malloc((size_t)n * sizeof(sk_header_t));
            if (hdrs == NULL) {
                PyErr_NoMemory();
                goto error;
            }
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, i),
                                             "each ASGI header must be a [name, value] pair");
            if (pair == NULL) {
                goto error;
            }
            int app_err = PyList_Append(keep, pair);
            Py_DECREF(pair); /* kept alive by keep */
            if (app_err < 0) {
                goto error;
            }
            if (PySequence_Fast_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "each ASGI header must be a [name, value] pair");
                goto error;
            }
            PyObject *name = PySequence_Fast_GET_ITEM(pair, 0);
            PyObject *value = PySequence_Fast_GET_ITEM(pair, 1);
            if (!PyBytes_Check(name) || !PyBytes_Check(value)) {
                PyErr_SetString(PyExc_TypeError, "ASGI header names and values must be bytes");
                goto error;
            }
            hdrs[i].name = PyBytes_AS_STRING(name);
            hdrs[i].name_len = (size_t)PyBytes_GET_SIZE(name);
            hdrs[i].value = PyBytes_AS_STRING(value);
            hdrs[i].value_len = (size_t)PyBytes_GET_SIZE(value);
        }
    }
    sk_req_info_t info = {
        .http_minor = r->http_minor,
        .head = r->is_head,
        .keep_alive = r->keep_alive,
        .force_close = r->server->shutting_down ||
                       (r->expect_continue && !r->continue_sent && !r->body_complete),
    };
    int rc = sk_resp_start(&r->resp, &info, (int)status, hdrs, (size_t)n);
    if (rc < 0) {
        if (rc == SK_ENOMEM) {
            PyErr_NoMemory();
        }
        else {
            PyErr_SetString(PyExc_RuntimeError, sk_strerror(rc));
        }
        goto error;
    }
    res = ready(r, NULL);
error:
    if (hdrs != stack_hdrs) {
        PyMem_Free(hdrs);
    }
    Py_XDECREF(status_o);
    Py_XDECREF(headers);
    Py_XDECREF(seq);
    Py_XDECREF(keep);
    return res;
}

static PyObject *
send_body(RequestObject *r, PyObject *msg)
{
    /* New reference to the completion awaitable (a Future while draining), or NULL with an
     * exception. */
    PyObject *body = NULL, *more_o = NULL, *res = NULL;
    Py_buffer view = {0};
    int have_view = 0;
    if (!r->resp.started) {
        PyErr_SetString(
            PyExc_RuntimeError,
            "Unexpected ASGI message 'http.response.body' sent, before 'http.response.start'.");
        goto error;
    }
    if (r->response_complete || r->failed) {
        PyErr_SetString(
            PyExc_RuntimeError,
            "Unexpected ASGI message 'http.response.body' sent, after response already completed.");
        goto error;
    }
    if (r->conn == NULL || r->disconnected) {
        raise_disconnected(r);
        goto error;
    }
    body = msg_get(msg, r->st->s_body);
    if (body == NULL && PyErr_Occurred()) {
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
    more_o = msg_get(msg, r->st->s_more_body);
    if (more_o == NULL && PyErr_Occurred()) {
        goto error;
    }
    int more = more_o ? PyObject_IsTrue(more_o) : 0;
    if (more < 0) {
        goto error;
    }
    sk_conn_t *c = r->conn;
    int rc = sk_resp_body(&r->resp, &c->out, have_view ? view.buf : "",
                          have_view ? (size_t)view.len : 0, more, sk_server_date(r->server));
    if (rc == SK_ETOOLONG || rc == SK_ETOOSHORT) {
        r->failed = 1;
        sk_server_abort_response(c); /* the message must never look complete */
        PyErr_SetString(PyExc_RuntimeError, rc == SK_ETOOLONG
                                                ? "Response content longer than Content-Length"
                                                : "Response content shorter than Content-Length");
        goto error;
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
    if (!more) {
        r->response_complete = 1;
    }
    /* Inside the reactor's parse pass (eager start) the pass writes once at its end. A final
     * body with a pipelined request buffered behind it waits too: sk_conn_request_done starts
     * that request now and its response may leave in the same write (sk_server.c conn_parse). */
    int follow = !more && r->resp.keep_alive && sk_buf_len(&c->in) > 0;
    if (!c->parsing && !follow && (sk_conn_write(c) < 0 || r->conn == NULL)) {
        raise_disconnected(r);
        goto error;
    }
    if (!more) {
        sk_conn_request_done(c, r->resp.keep_alive);
        wake_receiver(r); /* a pending receive() now sees http.disconnect */
        res = ready(r, NULL);
        goto error;
    }
    if (sk_buf_len(&c->out) >= SK_WRITE_HIGH_WATER) {
        /* Backpressure: complete only when the unsent output is below the high-water mark. */
        PyObject *fut = PyObject_CallMethodNoArgs(r->server->loop, r->st->s_create_future);
        if (fut == NULL) {
            goto error;
        }
        Py_XSETREF(r->drain_waiter, Py_NewRef(fut));
        res = fut;
        goto error;
    }
    res = ready(r, NULL);
error:
    if (have_view) {
        PyBuffer_Release(&view);
    }
    Py_XDECREF(body);
    Py_XDECREF(more_o);
    return res;
}

static PyObject *
request_send(PyObject *op, PyObject *msg)
{
    /* New reference: an awaitable completing when the message is accepted; NULL with
     * RuntimeError/TypeError for an invalid or out-of-order message, or ClientDisconnected. */
    RequestObject *r = (RequestObject *)op;
    PyObject *type = msg_get(msg, r->st->s_type);
    PyObject *res = NULL;
    if (type == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "ASGI message has no 'type'");
        }
        return NULL;
    }
    if (PyUnicode_Check(type) && PyUnicode_Compare(type, r->st->s_http_response_body) == 0) {
        res = send_body(r, msg);
    }
    else if (PyUnicode_Check(type) && PyUnicode_Compare(type, r->st->s_http_response_start) == 0) {
        res = send_start(r, msg);
    }
    else if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message type %R", type);
    }
    Py_DECREF(type);
    return res;
}

/* ---- the app task ----------------------------------------------------------------------------- */

/* The Request object is the coroutine its asyncio.Task runs: it drives what the app call returned
 * (a coroutine through am_send, or any awaitable's __await__ iterator) and, the moment that ends,
 * finishes the exchange in the same step: no done callback, no extra loop iteration. The app's
 * own coroutine still runs inside the request's Task (asyncio.current_task() is that Task). */

static void
request_finish(RequestObject *r, PyObject *exc, int cancelled)
{
    /* The app ended: returned (exc NULL), raised exc (borrowed), or was cancelled. Reports it and
     * answers what the app left unanswered: a clean 500 before the response head (RFC 9110
     * §15.6.1), an abort after it (no truncated response sent as complete). Idempotent. */
    ServerObject *s = r->server;
    if (!r->running) {
        return;
    }
    r->running = 0;
    s->active_requests--;
    Py_CLEAR(r->task);
    if (exc != NULL) {
        int quiet =
            r->raised_disconnect && PyErr_GivenExceptionMatches(exc, r->st->ClientDisconnected);
        if (!quiet) {
            log_error(r, "Exception in ASGI application", exc);
        }
    }
    else if (!cancelled && !r->response_complete && !r->disconnected && !r->failed) {
        log_error(r,
                  r->resp.started ? "ASGI callable returned without completing response."
                                  : "ASGI callable returned without starting response.",
                  NULL);
    }
    sk_conn_t *c = r->conn;
    if (c != NULL && !r->response_complete) {
        if (!r->resp.head_written) {
            if (sk_resp_error(&c->out, 500, r->is_head, sk_server_date(s)) < 0) {
                sk_conn_close(c);
            }
            else {
                r->response_complete = 1;
                sk_conn_request_done(c, 0);
            }
        }
        else {
            sk_server_abort_response(c);
        }
    }
    wake_receiver(r);
}

static PySendResult
request_ended(RequestObject *r, PySendResult res, PyObject **result)
{
    /* Turns the end of the app's coroutine into the end of the request's: a return or an
     * Exception finishes the exchange and returns None to the Task (the exception is reported
     * here, not left on the Task); cancellation and BaseExceptions such as KeyboardInterrupt
     * finish it and propagate, so the Task is cancelled or the loop stops as it would have. */
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
    int propagate = cancelled || !PyErr_GivenExceptionMatches(val, PyExc_Exception);
    request_finish(r, cancelled ? NULL : val, cancelled);
    if (propagate) {
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

static PySendResult
request_am_send(PyObject *op, PyObject *arg, PyObject **result)
{
    /* am_send: one step of the app. PYGEN_NEXT with what it yielded (new reference), PYGEN_RETURN
     * with None, or PYGEN_ERROR with an exception set. */
    RequestObject *r = (RequestObject *)op;
    if (r->coro == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited request coroutine");
        *result = NULL;
        return PYGEN_ERROR;
    }
    r->stepped = 1;
    PySendResult res = request_ended(r, PyIter_Send(r->coro, arg, result), result);
    if (r->conn != NULL) {
        /* Responses held for coalescing (sk_server.c conn_parse) leave now: this request did
         * not answer within its first step (no-op unless output is held). */
        sk_conn_flush_deferred(r->conn);
    }
    return res;
}

static PyObject *
as_method_result(PySendResult res, PyObject *result)
{
    /* New reference (result is stolen): a send()/throw() method's answer for an am_send-style
     * outcome: the yielded value, or NULL with StopIteration on return (or the error set). */
    if (res == PYGEN_RETURN) {
        Py_DECREF(result);
        PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    return result;
}

static void
raise_thrown(PyObject *const *args, Py_ssize_t nargs)
{
    /* Sets the exception coroutine.throw(args) names: an instance, or a type and value. */
    if (nargs == 0) {
        PyErr_SetString(PyExc_TypeError, "throw expected at least 1 argument");
    }
    else if (PyExceptionInstance_Check(args[0])) {
        PyErr_SetObject((PyObject *)Py_TYPE(args[0]), args[0]);
    }
    else {
        PyErr_SetObject(args[0], nargs > 1 ? args[1] : NULL);
    }
}

static PyObject *
request_send_value(PyObject *op, PyObject *arg)
{
    /* New reference: coroutine.send(value): the yielded value, or NULL with StopIteration. */
    PyObject *result = NULL;
    PySendResult res = request_am_send(op, arg, &result);
    return as_method_result(res, result);
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
        raise_thrown(args, nargs);
        return NULL;
    }
    r->stepped = 1;
    PyObject *meth = PyObject_GetAttr(r->coro, r->st->s_throw);
    if (meth == NULL) {
        /* an __await__ iterator without throw(): the exception goes to the app as raised */
        PyErr_Clear();
        raise_thrown(args, nargs);
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
    if (r->conn != NULL) {
        sk_conn_flush_deferred(r->conn);
    }
    return as_method_result(res, result);
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

RequestObject *
sk_request_new(ServerObject *s, sk_conn_t *c)
{
    /* New reference: the request for the head just parsed, with its scope; NULL with an
     * exception. The app is not called yet (sk_request_run). */
    sk_state *st = s->st;
    sk_parser_t *p = &c->parser;
    RequestObject *r = (RequestObject *)st->request_type->tp_alloc(st->request_type, 0);
    if (r == NULL) {
        return NULL;
    }
    r->st = st;
    st->live_requests++;
    r->server = (ServerObject *)Py_NewRef(s);
    r->conn = c;
    r->expect_continue = p->expect_continue;
    r->keep_alive = p->keep_alive;
    r->http_minor = p->http_minor;
    r->is_head = (p->method == HTTP_HEAD);
    r->scope = build_scope(s, c);
    if (r->scope == NULL) {
        r->conn = NULL;
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

static PyObject *
awaitable_iter(PyObject *obj)
{
    /* New reference: what to drive for the app call's result obj: a coroutine itself, else its
     * __await__() iterator; NULL with TypeError when obj is not awaitable. */
    if (PyCoro_CheckExact(obj)) {
        return Py_NewRef(obj);
    }
    PyAsyncMethods *am = Py_TYPE(obj)->tp_as_async;
    if (am == NULL || am->am_await == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "the ASGI application returned %.100s, which is not awaitable",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyObject *it = am->am_await(obj);
    if (it != NULL && !PyIter_Check(it)) {
        PyErr_Format(PyExc_TypeError, "__await__() returned non-iterator of type '%.100s'",
                     Py_TYPE(it)->tp_name);
        Py_CLEAR(it);
    }
    return it;
}

int
sk_request_run(RequestObject *r)
{
    /* Calls the app and starts its task. 0, or -1: with an exception set if the task could not
     * be set up, without one if the app failed to start (already logged). Either way the caller
     * answers 500. */
    sk_state *st = r->st;
    ServerObject *s = r->server;
    PyObject *receive = NULL, *send = NULL, *ret = NULL, *task = NULL, *ctx = NULL;
    PyObject *scope = r->scope; /* moved out: the app owns the scope from now on */
    int rc = -1;
    r->scope = NULL;
    receive = PyCFunction_New(&receive_def, (PyObject *)r);
    send = PyCFunction_New(&send_def, (PyObject *)r);
    if (scope == NULL || receive == NULL || send == NULL) {
        goto error;
    }
    PyObject *args[3] = {scope, receive, send};
    ret = PyObject_Vectorcall(s->app, args, 3, NULL);
    if (ret == NULL) {
        goto app_error;
    }
    r->coro = awaitable_iter(ret);
    if (r->coro == NULL) {
        goto app_error;
    }
    /* A fresh copy of the server's context, never the caller's: this may run inside the previous
     * request's send() (a pipelined request started at once), whose context must not leak. */
    ctx = PyContext_Copy(s->context);
    if (ctx == NULL) {
        goto app_error;
    }
    r->running = 1;
    s->active_requests++;
    if (s->task_type != NULL) {
        int eager = s->eager && s->eager_budget > 0;
        s->eager_budget -= eager;
        PyObject *targs[4] = {(PyObject *)r, s->loop, ctx, ctx};
        if (s->eager) {
            targs[2] = eager ? Py_True : Py_False;
        }
        task = PyObject_Vectorcall(s->task_type, targs, 1, s->task_kw);
    }
    else {
        PyObject *targs[3] = {s->loop, (PyObject *)r, ctx};
        task = PyObject_VectorcallMethod(st->s_create_task, targs, 2, s->call_soon_kw);
    }
    if (task == NULL) {
        r->running = 0;
        s->active_requests--;
        goto app_error;
    }
    if (r->running) { /* an eager start may already have finished it */
        r->task = Py_NewRef(task);
    }
    rc = 0;
    goto error;

app_error : {
    PyObject *typ, *exc, *tb;
    PyErr_Fetch(&typ, &exc, &tb);
    PyErr_NormalizeException(&typ, &exc, &tb);
    if (exc != NULL && tb != NULL) {
        PyException_SetTraceback(exc, tb);
    }
    log_error(r, "Exception in ASGI application", exc);
    Py_XDECREF(typ);
    Py_XDECREF(exc);
    Py_XDECREF(tb);
    PyObject *coro = r->coro ? r->coro : ret;
    if (coro != NULL && PyCoro_CheckExact(coro)) {
        PyObject *cr = PyObject_CallMethodNoArgs(coro, st->s_close);
        Py_XDECREF(cr);
        PyErr_Clear();
    }
    Py_CLEAR(r->coro);
}
error:
    Py_XDECREF(scope);
    Py_XDECREF(receive);
    Py_XDECREF(send);
    Py_XDECREF(ret);
    Py_XDECREF(task);
    Py_XDECREF(ctx);
    return rc;
}

int
sk_request_body(RequestObject *r, const char *data, size_t len)
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
    wake_receiver(r);
    return 0;
}

void
sk_request_end(RequestObject *r)
{
    r->body_complete = 1;
    wake_receiver(r);
}

void
sk_request_disconnect(RequestObject *r)
{
    Py_INCREF(r); /* the connection's reference may be dropped below */
    sk_conn_t *c = r->conn;
    if (!r->response_complete) {
        r->disconnected = 1;
    }
    if (c != NULL) {
        r->conn = NULL;
        if (c->current == r) {
            c->current = NULL;
            Py_DECREF(r);
        }
    }
    wake_receiver(r);
    if (r->drain_waiter != NULL) {
        PyObject *fut = r->drain_waiter;
        r->drain_waiter = NULL;
        PyObject *done = PyObject_CallMethodNoArgs(fut, r->st->s_done);
        if (done == Py_False) {
            PyObject *exc =
                PyObject_CallFunction(r->st->ClientDisconnected, "s", "client disconnected");
            PyObject *res =
                exc ? PyObject_CallMethodOneArg(fut, r->st->s_set_exception, exc) : NULL;
            r->raised_disconnect = 1;
            if (res == NULL) {
                PyErr_WriteUnraisable(fut);
            }
            Py_XDECREF(res);
            Py_XDECREF(exc);
        }
        else if (done == NULL) {
            PyErr_WriteUnraisable(fut);
        }
        Py_XDECREF(done);
        Py_DECREF(fut);
    }
    Py_DECREF(r);
}

/* ---- type ------------------------------------------------------------------------------------- */

static int
request_traverse(PyObject *op, visitproc visit, void *arg)
{
    RequestObject *r = (RequestObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(r->server);
    Py_VISIT(r->task);
    Py_VISIT(r->coro);
    Py_VISIT(r->receive_waiter);
    Py_VISIT(r->drain_waiter);
    Py_VISIT(r->body);
    Py_VISIT(r->scope);
    return 0;
}

static int
request_clear(PyObject *op)
{
    RequestObject *r = (RequestObject *)op;
    if (r->running && r->server != NULL) {
        /* dropped unfinished (its Task was destroyed with the loop): no longer in flight */
        r->running = 0;
        r->server->active_requests--;
    }
    Py_CLEAR(r->server);
    Py_CLEAR(r->task);
    Py_CLEAR(r->coro);
    Py_CLEAR(r->receive_waiter);
    Py_CLEAR(r->drain_waiter);
    Py_CLEAR(r->body);
    Py_CLEAR(r->scope);
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
