/* sk_access.c — the access log's records (see sk_access.h). */
#include "sk_access.h"

#include "sk_asgi.h"
#include "sk_logesc.h"
#include "sk_metrics.h"

#include <string.h>
#include <time.h>

double
sk_access_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double
wall_now(void)
{
    /* Seconds since the epoch (CLOCK_REALTIME): the time a record's line shows. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *peer_client(sk_access_t *a, PyObject *client, const struct sockaddr *peer);

static void
push(sk_access_t *a, PyObject *rec)
{
    /* Appends rec (stolen; NULL = failed with an exception) and schedules the flush when the
     * list was empty or holds a multiple of SK_ACCESS_BATCH records. Failures are reported as
     * unraisable: the request is never affected. */
    if (rec == NULL) {
        goto error;
    }
    if (PyList_Append(a->pending, rec) < 0) {
        goto error;
    }
    Py_ssize_t n = PyList_GET_SIZE(a->pending);
    if (n == 1 || n % SK_ACCESS_BATCH == 0) { /* the first of a batch, or a full batch */
        PyObject *args[3] = {a->loop, a->flush, *a->context};
        PyObject *h = PyObject_VectorcallMethod(a->st->s_call_soon, args, 2 | 0, a->call_soon_kw);
        if (h == NULL) {
            goto error;
        }
        Py_DECREF(h);
    }
    Py_DECREF(rec);
    return;
error:
    Py_XDECREF(rec);
    PyErr_WriteUnraisable(a->pending);
}

static void
record_response(sk_access_t *a, int status, uint64_t bytes, sk_access_req_t *rq)
{
    /* Records a finished response (see sk_access.h; rq->scope is not NULL) once: rq->scope is
     * dropped. A failure to record is reported as unraisable. */
    double secs = sk_access_now() - rq->t_start;
    PyObject *rec = PyTuple_New(6);
    PyObject *st = PyLong_FromLong(status);
    PyObject *nb = PyLong_FromUnsignedLongLong((unsigned long long)bytes);
    PyObject *sec = PyFloat_FromDouble(secs);
    PyObject *wall = PyFloat_FromDouble(wall_now());
    if (rec == NULL || st == NULL || nb == NULL || sec == NULL || wall == NULL) {
        Py_XDECREF(st);
        Py_XDECREF(nb);
        Py_XDECREF(sec);
        Py_XDECREF(wall);
        Py_CLEAR(rec);
    }
    else {
        PyTuple_SET_ITEM(rec, 0, rq->scope); /* the reference moves into the record */
        rq->scope = NULL;
        PyTuple_SET_ITEM(rec, 1, st);
        PyTuple_SET_ITEM(rec, 2, nb);
        PyTuple_SET_ITEM(rec, 3, sec);
        PyTuple_SET_ITEM(rec, 4, rq->resp_headers ? rq->resp_headers : Py_NewRef(Py_None));
        rq->resp_headers = NULL;
        PyTuple_SET_ITEM(rec, 5, wall);
    }
    push(a, rec); /* NULL: reported there */
    sk_access_req_clear(rq);
}

void
sk_access_exchange_begin(sk_access_t *a, sk_access_req_t *rq, PyObject *scope, int method)
{
    if (a->pending == NULL && a->metrics == NULL) {
        return;
    }
    rq->t_start = sk_access_now();
    if (a->pending != NULL) {
        Py_XSETREF(rq->scope, Py_NewRef(scope));
    }
    if (a->metrics != NULL) {
        rq->method = (uint8_t)sk_metrics_method(method);
    }
}

void
sk_access_exchange_end(sk_access_t *a, sk_access_req_t *rq, int status, uint64_t bytes)
{
    if (a->metrics != NULL) {
        sk_metrics_response(a->metrics, rq->method, status, bytes, sk_access_now() - rq->t_start);
    }
    if (rq->scope != NULL) {
        record_response(a, status, bytes, rq);
    }
}

const sk_access_line_t *
sk_access_line_http1(const sk_parser_t *p, const char *root, size_t root_len, sk_access_line_t *out)
{
    /* The request line only once the head was read whole (its spans are valid only then). */
    if (p == NULL || !p->head_read || p->head == NULL) {
        return NULL;
    }
    const char *m = sk_parser_method_name(p);
    const char *t = sk_parser_ptr(p, p->target);
    *out = (sk_access_line_t){
        .method = m,
        .method_len = strlen(m),
        .path = t,
        .path_len = p->target.len,
        .version = p->http_minor == 0 ? "1.0" : "1.1",
    };
    if (sk_parser_head_checked(p)) {
        /* as the scope (sk_http1.c's h1_head): the line an app's response is logged with */
        const char *authority;
        size_t authority_len;
        sk_http_target_split(t, p->target.len, &authority, &authority_len, &out->path,
                             &out->path_len, &out->query, &out->query_len);
        out->prefix = root;
        out->prefix_len = root_len;
    }
    else if (p->target.len > 0 && t[0] == '/') {
        out->prefix = root; /* origin-form: the root path first, as an app's response has it */
        out->prefix_len = root_len;
    }
    return out;
}

static PyObject *
line_target(const sk_access_line_t *l)
{
    /* New reference: the record's target (sk_access.h: prefix, path, '?' and query when there
     * is one) as latin-1 str; NULL with an exception. */
    if (l->prefix_len == 0 && l->query_len == 0) {
        return PyUnicode_DecodeLatin1(l->path, (Py_ssize_t)l->path_len, NULL);
    }
    size_t n = l->prefix_len + l->path_len + (l->query_len > 0 ? 1 + l->query_len : 0);
    char *buf = PyMem_Malloc(n);
    if (buf == NULL) {
        return PyErr_NoMemory();
    }
    char *w = buf;
    if (l->prefix_len > 0) {
        memcpy(w, l->prefix, l->prefix_len);
        w += l->prefix_len;
    }
    memcpy(w, l->path, l->path_len);
    w += l->path_len;
    if (l->query_len > 0) {
        *w++ = '?';
        memcpy(w, l->query, l->query_len);
    }
    PyObject *res = PyUnicode_DecodeLatin1(buf, (Py_ssize_t)n, NULL);
    PyMem_Free(buf);
    return res;
}

void
sk_access_refusal(sk_access_t *a, PyObject *client, const struct sockaddr *peer,
                  const sk_access_line_t *line, int status, uint64_t bytes, const char *reason)
{
    PyObject *method = NULL, *target = NULL, *version = NULL;
    PyObject *cl = peer_client(a, client, peer);
    if (cl == NULL) {
        goto error;
    }
    if (line != NULL) {
        method = PyUnicode_DecodeLatin1(line->method, (Py_ssize_t)line->method_len, NULL);
        target = line_target(line);
        version = PyUnicode_FromString(line->version);
    }
    else {
        method = Py_NewRef(Py_None);
        target = Py_NewRef(Py_None);
        version = Py_NewRef(Py_None);
    }
    if (method == NULL || target == NULL || version == NULL) {
        goto error;
    }
    push(a, Py_BuildValue("(OiOOOOsKd)", Py_None, status, cl, method, target, version, reason,
                          (unsigned long long)bytes, wall_now()));
    goto done;
error:
    PyErr_WriteUnraisable(a->pending);
done:
    Py_XDECREF(cl);
    Py_XDECREF(method);
    Py_XDECREF(target);
    Py_XDECREF(version);
}

static PyObject *
peer_client(sk_access_t *a, PyObject *client, const struct sockaddr *peer)
{
    /* New reference: client if given, else the peer's (host, port), None for a Unix socket. */
    if (client != NULL) {
        return Py_NewRef(client);
    }
    if (a->unix_path != Py_None || peer == NULL) {
        return Py_NewRef(Py_None);
    }
    return sk_asgi_address(peer);
}

void
sk_access_trace(sk_access_t *a, PyObject *client, const struct sockaddr *peer, const char *event)
{
    PyObject *cl = peer_client(a, client, peer);
    PyObject *res = NULL;
    if (cl != NULL) {
        res = PyObject_CallFunction(a->trace, "sO", event, cl);
    }
    if (res == NULL) {
        PyErr_WriteUnraisable(a->trace);
    }
    Py_XDECREF(res);
    Py_XDECREF(cl);
}

void
sk_access_req_clear(sk_access_req_t *rq)
{
    Py_CLEAR(rq->scope);
    Py_CLEAR(rq->resp_headers);
}

int
sk_access_req_traverse(sk_access_req_t *rq, visitproc visit, void *arg)
{
    Py_VISIT(rq->scope);
    Py_VISIT(rq->resp_headers);
    return 0;
}

static PyObject *
escape_bytes(PyObject *owner, const unsigned char *s, Py_ssize_t n)
{
    /* New reference: the escaped text of s[0..n) (sk_logesc.h) as an ASCII str; owner itself
     * when it is a str that needs no escaping (no copy). */
    size_t len = sk_log_escaped_len(s, (size_t)n);
    if (len == (size_t)n && owner != NULL) {
        return Py_NewRef(owner);
    }
    if (len > (size_t)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "log_escape: value too long");
        return NULL;
    }
    PyObject *out = PyUnicode_New((Py_ssize_t)len, 127);
    if (out == NULL) {
        return NULL;
    }
    sk_log_escape(s, (size_t)n, (char *)PyUnicode_1BYTE_DATA(out));
    return out;
}

PyObject *
sk_access_log_escape(PyObject *Py_UNUSED(module), PyObject *value)
{
    /* New reference (see sk_access.h). */
    PyObject *res = NULL, *utf8 = NULL;
    Py_buffer view = {0};
    int have_view = 0;
    if (PyUnicode_Check(value)) {
        if (PyUnicode_KIND(value) == PyUnicode_1BYTE_KIND) {
            /* U+0000..U+00FF: each code point is the byte it was decoded from (latin-1) */
            res = escape_bytes(value, PyUnicode_1BYTE_DATA(value), PyUnicode_GET_LENGTH(value));
            goto done;
        }
        utf8 = PyUnicode_AsEncodedString(value, "utf-8", "surrogatepass");
        if (utf8 == NULL) {
            goto done;
        }
        res = escape_bytes(NULL, (const unsigned char *)PyBytes_AS_STRING(utf8),
                           PyBytes_GET_SIZE(utf8));
        goto done;
    }
    if (!PyObject_CheckBuffer(value)) {
        PyErr_Format(PyExc_TypeError, "log_escape() takes str or bytes, not %.100s",
                     Py_TYPE(value)->tp_name);
        goto done;
    }
    if (PyObject_GetBuffer(value, &view, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    have_view = 1;
    res = escape_bytes(NULL, (const unsigned char *)view.buf, view.len);
done:
    if (have_view) {
        PyBuffer_Release(&view);
    }
    Py_XDECREF(utf8);
    return res;
}
