/* sk_server.c — the Server type: one listening socket served over HTTP/1.1 by a native reactor.
 *
 * Owns: the Server object (its configuration, the application, the counters Python reads), the
 * reactor it drives (sk_transport.c) with the HTTP/1.1 handler (sk_http1.c) as the protocol of
 * every accepted connection, the reactor's two Python callbacks (loop.add_reader's _on_ready and
 * loop.call_soon's _run_pending, each resetting the eager-start budget first), how request tasks
 * are made (asyncio.Task directly when the loop has no task factory, eagerly on 3.12+), and the
 * graceful-shutdown steps Python calls (stop_accepting, shutdown, close). With ssl_context (a
 * TLSContext, sk_tlsctx.h) every accepted connection gets the TLS stream layer (sk_tls.h) over
 * the context's source; the Server holds the context for the reactor's whole life.
 * Never: touches a socket itself, parses HTTP or talks ASGI.
 * Threads: a Server belongs to the thread that made it, its event loop's (sk_serve_t.thread):
 * the methods that drive or change it raise RuntimeError on any other; the read-only counters
 * (connections, active_requests, total_requests, metrics()) may be read from any thread.
 */
#include "sk_exchange.h"
#include "sk_http1.h"
#include "sk_tlsctx.h"
#include "sk_transport.h"

#include <string.h>

typedef struct {
    PyObject_HEAD sk_serve_t http; /* what the HTTP/1.1 handler serves with */
    sk_reactor_t *reactor;
    PyObject *on_ready;    /* bound _on_ready, given to loop.add_reader */
    PyObject *run_pending; /* bound _run_pending, given to loop.call_soon */
    PyObject *tls;         /* the TLSContext (strong) whose source the reactor borrows, or NULL */
    int listen_fd;
    uint8_t started, closed;
} ServerObject;

/* Server methods' refusal on another thread than the server's (sk_serve_check_thread). */
#define SERVER_THREAD_HINT                                                \
    "a Server belongs to the thread of the event loop it serves on (use " \
    "loop.call_soon_threadsafe)"
#define SERVER_ON_THREAD(s, name)                                                    \
    if (sk_serve_check_thread(&(s)->http, "Server." name, SERVER_THREAD_HINT) < 0) { \
        return NULL;                                                                 \
    }

static PyObject *
server_on_ready(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. loop.add_reader callback: sk_reactor_on_ready (at most SK_MAX_EVENTS
     * ready descriptors), with a fresh eager-start budget (SK_MAX_EAGER). */
    ServerObject *s = (ServerObject *)op;
    SERVER_ON_THREAD(s, "_on_ready()");
    if (s->reactor != NULL && !s->closed) {
        s->http.eager_budget = SK_MAX_EAGER;
        sk_reactor_on_ready(s->reactor);
    }
    Py_RETURN_NONE;
}

static PyObject *
server_run_pending(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. loop.call_soon target: feeds buffered input (pipelined requests,
     * more of a body once flow control let go). */
    ServerObject *s = (ServerObject *)op;
    SERVER_ON_THREAD(s, "_run_pending()");
    if (s->reactor != NULL) {
        s->http.eager_budget = SK_MAX_EAGER;
        sk_reactor_run_pending(s->reactor);
    }
    Py_RETURN_NONE;
}

/* ---- Python-visible methods ----------------------------------------------------------------- */

static PyObject *
server_start(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None, or NULL with an exception. */
    ServerObject *s = (ServerObject *)op;
    sk_serve_t *h = &s->http;
    PyObject *factory = NULL, *asyncio = NULL, *res = NULL;
    SERVER_ON_THREAD(s, "start()");
    if (s->started || s->closed) {
        PyErr_SetString(PyExc_RuntimeError, "server already started or closed");
        return NULL;
    }
    PyObject *fd = PyLong_FromLong(sk_reactor_fd(s->reactor));
    if (fd == NULL) {
        return NULL;
    }
    PyObject *added =
        PyObject_CallMethodObjArgs(h->loop, h->st->s_add_reader, fd, s->on_ready, NULL);
    Py_DECREF(fd);
    if (added == NULL) {
        return NULL;
    }
    Py_DECREF(added);
    Py_XSETREF(h->context, PyContext_CopyCurrent());
    if (h->context == NULL) {
        goto error;
    }
    /* With no custom task factory (a factory must see every task), request tasks are made by
     * calling asyncio.Task directly. Eager start (3.12+): the app runs up to its first real
     * suspension inside the reactor callback, as the request's own asyncio.Task (current_task()
     * is that task). */
    factory = PyObject_CallMethod(h->loop, "get_task_factory", NULL);
    if (factory == NULL) {
        goto error;
    }
    if (factory == Py_None) {
        asyncio = PyImport_ImportModule("asyncio");
        if (asyncio == NULL) {
            goto error;
        }
        Py_XSETREF(h->task_type, PyObject_GetAttrString(asyncio, "Task"));
#if PY_VERSION_HEX >= 0x030C0000
        h->eager = 1;
        Py_XSETREF(h->task_kw, Py_BuildValue("(sss)", "loop", "eager_start", "context"));
#else
        /* 3.11 formats a default name per Task (PyUnicode_FromFormat, about 1.4k instructions);
         * request_run names it itself, cheaper (3.12+ makes the default name lazily). */
        Py_XSETREF(h->task_kw, Py_BuildValue("(sss)", "loop", "context", "name"));
#endif
        if (h->task_type == NULL || h->task_kw == NULL) {
            goto error;
        }
    }
    if (sk_reactor_start_accepting(s->reactor) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    s->started = 1;
    res = Py_NewRef(Py_None);
    goto done;
error:
    res = NULL;
done:
    Py_XDECREF(factory);
    Py_XDECREF(asyncio);
    return res;
}

static PyObject *
server_stop_accepting(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. */
    ServerObject *s = (ServerObject *)op;
    SERVER_ON_THREAD(s, "stop_accepting()");
    if (s->reactor != NULL) {
        sk_reactor_stop_accepting(s->reactor);
    }
    Py_RETURN_NONE;
}

static PyObject *
server_shutdown(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. Closes idle connections; busy ones close after their response. */
    ServerObject *s = (ServerObject *)op;
    SERVER_ON_THREAD(s, "shutdown()");
    s->http.shutting_down = 1;
    if (s->reactor != NULL) {
        sk_reactor_shutdown(s->reactor);
    }
    Py_RETURN_NONE;
}

static void
server_close_all(ServerObject *s)
{
    if (s->closed) {
        return;
    }
    s->closed = 1;
    if (s->reactor == NULL) {
        return;
    }
    int epfd = sk_reactor_fd(s->reactor);
    sk_reactor_close(s->reactor);
    /* The two bound methods of this object are a cycle through it: once closed nothing calls
     * them again (a closed reactor schedules nothing; a call the loop still holds keeps its own
     * reference and finds the reactor closed), so reference counting frees a closed server
     * without waiting for the cycle collector. */
    Py_CLEAR(s->on_ready);
    Py_CLEAR(s->run_pending);
    if (s->started && s->http.loop != NULL) {
        PyObject *fd = PyLong_FromLong(epfd);
        PyObject *r =
            fd ? PyObject_CallMethodOneArg(s->http.loop, s->http.st->s_remove_reader, fd) : NULL;
        if (r == NULL) {
            PyErr_Clear(); /* the loop may already be closed */
        }
        Py_XDECREF(r);
        Py_XDECREF(fd);
    }
}

static PyObject *
server_close(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. Idempotent. */
    SERVER_ON_THREAD((ServerObject *)op, "close()");
    server_close_all((ServerObject *)op);
    Py_RETURN_NONE;
}

static PyObject *
server_get_connections(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference. */
    ServerObject *s = (ServerObject *)op;
    return PyLong_FromSsize_t(s->reactor ? sk_reactor_connections(s->reactor) : 0);
}

static PyObject *
server_get_total(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference. */
    return PyLong_FromUnsignedLongLong(SK_LOAD(((ServerObject *)op)->http.total_requests));
}

static PyObject *
server_get_ext_reused(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference. */
    return PyLong_FromUnsignedLongLong(SK_LOAD(((ServerObject *)op)->http.ext_reused));
}

static PyObject *
server_get_max_requests(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference. */
    return PyLong_FromUnsignedLongLong(((ServerObject *)op)->http.max_requests);
}

static int
server_set_max_requests(PyObject *op, PyObject *value, void *Py_UNUSED(closure))
{
    /* 0, or -1 with TypeError/ValueError/OverflowError set: not a non-negative int. */
    if (sk_serve_check_thread(&((ServerObject *)op)->http, "Server.max_requests = n",
                              SERVER_THREAD_HINT) < 0) {
        return -1;
    }
    if (value == NULL || !PyLong_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "max_requests must be an int");
        return -1;
    }
    unsigned long long n = PyLong_AsUnsignedLongLong(value);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    ((ServerObject *)op)->http.max_requests = n;
    return 0;
}

static int
u64_arg(PyObject *o, const char *name, unsigned long long *out)
{
    /* A keyword argument that is a count of bytes: *out unchanged when o is NULL (not given),
     * else o as an unsigned 64-bit int. 0, or -1 with TypeError (not an int) or ValueError (out
     * of 0..2**64-1: never wrapped, as the "K" format would). */
    if (o == NULL) {
        return 0;
    }
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name, Py_TYPE(o)->tp_name);
        return -1;
    }
    unsigned long long n = PyLong_AsUnsignedLongLong(o);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "%s must be in 0..18446744073709551615, got %S", name, o);
        return -1;
    }
    *out = n;
    return 0;
}

static PyObject *
server_get_active(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference. */
    return PyLong_FromSsize_t(SK_LOAD(((ServerObject *)op)->http.active_requests));
}

static int
valid_lines(const char *s, Py_ssize_t n)
{
    /* 1 when s[0..n) is empty or whole "name: value\r\n" lines without NUL or bare CR/LF. */
    if (n == 0) {
        return 1;
    }
    if (n < 4 || s[n - 2] != '\r' || s[n - 1] != '\n') {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == '\0' || (s[i] == '\r' && (i + 1 >= n || s[i + 1] != '\n')) ||
            (s[i] == '\n' && (i == 0 || s[i - 1] != '\r'))) {
            return 0;
        }
    }
    return 1;
}

static int
server_opts(sk_serve_t *h, PyObject *server, PyObject *extra)
{
    /* The server's own response fields (sk_resp_opts_t) from the `server_header` and `headers`
     * bytes (None = the defaults): complete field lines, validated by the caller (skirr.Config);
     * checked again here for line structure. 0, or -1 with ValueError/MemoryError. */
    const char *sv = server ? PyBytes_AS_STRING(server) : "server: skirr\r\n";
    Py_ssize_t sn = server ? PyBytes_GET_SIZE(server) : 15;
    const char *ex = extra ? PyBytes_AS_STRING(extra) : "";
    Py_ssize_t en = extra ? PyBytes_GET_SIZE(extra) : 0;
    if (!valid_lines(sv, sn) || !valid_lines(ex, en)) {
        PyErr_SetString(PyExc_ValueError,
                        "server_header and headers must be complete 'name: value\\r\\n' lines");
        return -1;
    }
    h->resp_fields = PyBytes_FromStringAndSize(NULL, sn + en);
    if (h->resp_fields == NULL) {
        return -1;
    }
    char *buf = PyBytes_AS_STRING(h->resp_fields);
    memcpy(buf, sv, (size_t)sn);
    memcpy(buf + sn, ex, (size_t)en);
    h->resp_opts.server = buf;
    h->resp_opts.server_len = (size_t)sn;
    h->resp_opts.extra = buf + sn;
    h->resp_opts.extra_len = (size_t)en;
    sk_resp_opts_measure(&h->resp_opts);
    return 0;
}

static PyObject *
server_metrics(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference: the counters (sk_metrics_snapshot), or None when metrics are off. From any
     * thread (the metrics listener's): every counter it reads is an sk_shared_*, and the metrics and
     * the reactor live as long as the Server, which the caller holds. */
    ServerObject *s = (ServerObject *)op;
    if (s->http.metrics == NULL) {
        Py_RETURN_NONE;
    }
    return sk_metrics_snapshot(s->http.metrics, s->reactor ? sk_reactor_connections(s->reactor) : 0,
                               SK_LOAD(s->http.active_requests));
}

static PyObject *
server_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    /* New reference, or NULL with an exception. */
    static char *kwlist[] = {"app",
                             "loop",
                             "listen_fd",
                             "unix_path",
                             "root_path",
                             "state",
                             "timeout_keep_alive",
                             "limit_request_body",
                             "limit_request_line",
                             "limit_request_fields",
                             "limit_request_field_size",
                             "logger",
                             "timeout_request_head",
                             "timeout_write",
                             "limit_concurrency",
                             "limit_connections",
                             "timeout_request_body",
                             "access_log",
                             "access_flush",
                             "proxy_headers",
                             "forwarded_allow_ips",
                             "date_header",
                             "server_header",
                             "headers",
                             "trace",
                             "metrics",
                             "ws",
                             "ws_max_size",
                             "ws_max_queue",
                             "ws_ping_interval",
                             "ws_ping_timeout",
                             "ws_per_message_deflate",
                             "write_batch_delay",
                             "proxy_headers_mode",
                             "ssl_context",
                             "http",
                             "http2_max_concurrent_streams",
                             "http2_max_headers_size",
                             "http2_initial_stream_window_size",
                             "http2_max_frame_size",
                             "http2_initial_connection_window_size",
                             NULL};
    PyObject *app, *loop, *unix_path = Py_None, *root_path = NULL, *state = Py_None;
    PyObject *logger = Py_None;
    PyObject *access_log = Py_None, *access_flush = Py_None, *allow_ips = NULL;
    PyObject *server_header = NULL, *extra_headers = NULL, *trace = Py_None;
    PyObject *proxy_mode = NULL, *ssl_context = Py_None;
    sk_tls_source_t *tls_source = NULL;
    int proxy_headers = 0, date_header = 1, metrics = 0, ws = 1, ws_pmd = 1;
    PyObject *ws_max_size_o = NULL, *max_body_o = NULL; /* ints: u64_arg() */
    unsigned long long ws_max_size = 16 * 1024 * 1024;
    Py_ssize_t ws_max_queue = 32;
    double ws_ping_interval = 20.0, ws_ping_timeout = 20.0;
    double batch_delay = 0.001;
    int listen_fd;
    double keep_alive = 5.0, head_timeout = 10.0, write_timeout = 30.0, body_timeout = 60.0;
    Py_ssize_t limit_concurrency = 0, limit_connections = 0;
    unsigned long long max_body = 0;
    Py_ssize_t max_line = 8190, max_fields = 100, max_section = 65536;
    int http_mode = SK_HTTP_AUTO;
    Py_ssize_t h2_streams = 100, h2_headers = -1, h2_window = 1024 * 1024, h2_frame = 16384;
    Py_ssize_t h2_conn_window = -1;
    ServerObject *s = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, "OOi|$OUOdOnnnOddnndOOpUpSSOppOnddpdUOinnnnn", kwlist, &app, &loop,
            &listen_fd, &unix_path, &root_path, &state, &keep_alive, &max_body_o, &max_line,
            &max_fields, &max_section, &logger, &head_timeout, &write_timeout, &limit_concurrency,
            &limit_connections, &body_timeout, &access_log, &access_flush, &proxy_headers,
            &allow_ips, &date_header, &server_header, &extra_headers, &trace, &metrics, &ws,
            &ws_max_size_o, &ws_max_queue, &ws_ping_interval, &ws_ping_timeout, &ws_pmd,
            &batch_delay, &proxy_mode, &ssl_context, &http_mode, &h2_streams, &h2_headers,
            &h2_window, &h2_frame, &h2_conn_window)) {
        return NULL;
    }
    if (h2_headers < 0) {
        h2_headers = max_section; /* the HTTP/1.1 head limit */
    }
    /* RFC 9113 §6.5.2 ranges, checked before narrowing to the settings' uint32_t */
    if (http_mode < SK_HTTP_AUTO || http_mode > SK_HTTP_2 || h2_streams < 1 ||
        h2_streams > UINT32_MAX / 2 || h2_headers < 1 || h2_headers > UINT32_MAX / 2 ||
        h2_window < 1 || h2_window > INT32_MAX || h2_frame < 16384 || h2_frame > 16777215 ||
        (h2_conn_window != -1 && (h2_conn_window < 65535 || h2_conn_window > INT32_MAX))) {
        PyErr_SetString(PyExc_ValueError, "http must be 0, 1 or 2 and the http2_* limits in "
                                          "their RFC 9113 ranges");
        return NULL;
    }
    if (u64_arg(max_body_o, "limit_request_body", &max_body) < 0 ||
        u64_arg(ws_max_size_o, "ws_max_size", &ws_max_size) < 0) {
        return NULL;
    }
    if (max_line <= 0 || max_fields <= 0 || max_section <= 0 || keep_alive < 0 ||
        head_timeout <= 0 || write_timeout <= 0 || body_timeout < 0 || limit_concurrency < 0 ||
        limit_connections < 0 || ws_max_queue <= 0 || ws_ping_interval < 0 || ws_ping_timeout < 0 ||
        !(batch_delay >= 0)) {
        PyErr_SetString(PyExc_ValueError, "limits and timeouts must be positive");
        return NULL;
    }
    if ((size_t)max_fields > UINT32_MAX) { /* checked before narrowing to the parser's uint32_t */
        PyErr_Format(PyExc_ValueError, "limit_request_fields must be at most %u, got %zd",
                     (unsigned)UINT32_MAX, max_fields);
        return NULL;
    }
    if (access_log != Py_None &&
        (!PyList_CheckExact(access_log) || !PyCallable_Check(access_flush))) {
        PyErr_SetString(PyExc_TypeError, "access_log must be a list and access_flush a callable");
        return NULL;
    }
    if (trace != Py_None && !PyCallable_Check(trace)) {
        PyErr_SetString(PyExc_TypeError, "trace must be callable or None");
        return NULL;
    }
    s = (ServerObject *)tp->tp_alloc(tp, 0);
    if (s == NULL) {
        return NULL;
    }
    sk_serve_t *h = &s->http;
    s->listen_fd = listen_fd;
    h->st = sk_get_state_by_type(tp);
    if (h->st == NULL) {
        goto error;
    }
    /* counted from here on: every failure below frees through server_dealloc, which uncounts */
    SK_ADD(h->st->live_servers, 1);
    if (ssl_context != Py_None) {
        /* TLS: every connection gets the TLS stream layer over the context's source */
        tls_source = sk_tlsctx_source(h->st, ssl_context);
        if (tls_source == NULL) {
            goto error;
        }
        s->tls = Py_NewRef(ssl_context);
    }
    h->owner = (PyObject *)s;
    h->thread = PyThread_get_thread_ident(); /* the loop's: made where it serves (server.py) */
    h->app = Py_NewRef(app);
    h->loop = Py_NewRef(loop);
    h->logger = Py_NewRef(logger);
    h->state = Py_NewRef(state);
    h->unix_path = Py_NewRef(unix_path);
    h->root_path = root_path ? Py_NewRef(root_path) : PyUnicode_FromString("");
    if (h->root_path == NULL) {
        goto error;
    }
    h->root_path_b = PyUnicode_AsUTF8String(h->root_path);
    if (h->root_path_b == NULL) {
        goto error;
    }
    if (access_log != Py_None) {
        h->access.pending = Py_NewRef(access_log);
        h->access.flush = Py_NewRef(access_flush);
    }
    h->trace = trace != Py_None ? Py_NewRef(trace) : NULL;
    if (metrics) {
        h->metrics = PyMem_Calloc(1, sizeof(sk_metrics_t));
        if (h->metrics == NULL) {
            PyErr_NoMemory();
            goto error;
        }
    }
    h->date_header = (uint8_t)date_header;
    if (server_opts(h, server_header, extra_headers) < 0) {
        goto error;
    }
    h->proxy.enabled = (uint8_t)proxy_headers;
    if (proxy_mode != NULL) {
        /* --proxy-headers-mode: the one header family read (sk_proxy.h, RFC 7239 §8.1) */
        if (PyUnicode_CompareWithASCIIString(proxy_mode, "forwarded") == 0) {
            h->proxy.forwarded = 1;
        }
        else if (PyUnicode_CompareWithASCIIString(proxy_mode, "x-forwarded") != 0) {
            PyErr_Format(PyExc_ValueError,
                         "proxy_headers_mode must be 'x-forwarded' or 'forwarded'; got %R",
                         proxy_mode);
            goto error;
        }
    }
    if (allow_ips != NULL) {
        Py_ssize_t n;
        const char *spec = PyUnicode_AsUTF8AndSize(allow_ips, &n);
        if (spec == NULL || sk_proxy_parse_allow(&h->proxy, spec, (size_t)n) < 0) {
            goto error;
        }
    }
    else if (sk_proxy_parse_allow(&h->proxy, "127.0.0.1", sizeof("127.0.0.1") - 1) < 0) {
        goto error;
    }
    h->keep_alive = keep_alive;
    h->head_timeout = head_timeout;
    h->body_timeout = body_timeout;
    h->limit_concurrency = limit_concurrency;
    h->ws.enabled = (uint8_t)ws;
    h->ws.max_size = ws_max_size;
    h->ws.max_queue = ws_max_queue;
    h->ws.ping_interval = ws_ping_interval;
    h->ws.ping_timeout = ws_ping_timeout;
    h->ws.per_message_deflate = (uint8_t)ws_pmd;
    h->h2.mode = (uint8_t)http_mode;
    if (http_mode != SK_HTTP_1 &&
        sk_resp_opts_h2_own_size(&h->resp_opts, h->date_header) > SK_H2_SECTION_MAX) {
        /* skirr's own HTTP/2 answers could not be sent (skirr.Config says so first) */
        PyErr_Format(PyExc_ValueError,
                     "server_header and headers carry too much for an HTTP/2 response head: "
                     "%zu bytes with skirr's own (RFC 9113 section 6.5.2), over %d",
                     sk_resp_opts_h2_own_size(&h->resp_opts, h->date_header), SK_H2_SECTION_MAX);
        goto error;
    }
    h->h2.max_concurrent_streams = (uint32_t)h2_streams;
    h->h2.max_headers_size = (uint32_t)h2_headers;
    h->h2.initial_window = (uint32_t)h2_window;
    /* -1: four stream windows (RFC 9113 §6.9.1 lets the connection's be no less than 65535),
     * so up to three streams whose apps do not read leave a stream window for the others */
    h->h2.connection_window =
        h2_conn_window != -1 ? (uint32_t)h2_conn_window
                             : (uint32_t)(h2_window > INT32_MAX / 4
                                              ? INT32_MAX
                                              : (4 * h2_window < 65535 ? 65535 : 4 * h2_window));
    h->h2.max_frame_size = (uint32_t)h2_frame;
    h->h2.write_timeout = write_timeout;
    h->h2.guard = sk_h2guard_defaults;
    sk_limits_default(&h->limits);
    h->limits.max_body = max_body;
    h->limits.max_request_line = (size_t)max_line;
    h->limits.max_fields = (uint32_t)max_fields;
    h->limits.max_field_section = (size_t)max_section;
    s->on_ready = PyObject_GetAttrString((PyObject *)s, "_on_ready");
    s->run_pending = PyObject_GetAttrString((PyObject *)s, "_run_pending");
    h->call_soon_kw = Py_BuildValue("(s)", "context");
    h->context = PyContext_CopyCurrent();
    if (s->on_ready == NULL || s->run_pending == NULL || h->call_soon_kw == NULL ||
        h->context == NULL) {
        goto error;
    }
    /* what the access log's records and flush read (borrowed: h keeps each alive) */
    h->access.st = h->st;
    h->access.loop = h->loop;
    h->access.context = &h->context; /* start() replaces it: read where it is */
    h->access.call_soon_kw = h->call_soon_kw;
    h->access.unix_path = h->unix_path;
    h->access.trace = h->trace;
    h->access.metrics = h->metrics;
    sk_reactor_config_t cfg = {
        .st = h->st,
        .loop = h->loop,
        .run_pending = s->run_pending,
        .context = &h->context, /* start() replaces it: the reactor reads it where it is */
        .call_soon_kw = h->call_soon_kw,
        .ops = &sk_http1_ops,
        .open = sk_http1_open,
        .owner = h,
        .listen_fd = listen_fd,
        .write_timeout = write_timeout,
        .batch_delay = batch_delay,
        .limit_connections = limit_connections,
        .logger = h->logger,
        .stream = tls_source != NULL ? &sk_stream_tls : NULL,
        .stream_arg = tls_source,
    };
    s->reactor = sk_reactor_new(&cfg);
    if (s->reactor == NULL) {
        goto error;
    }
    h->reactor = s->reactor;
    return (PyObject *)s;

error:
    Py_XDECREF(s);
    return NULL;
}

static int
server_traverse(PyObject *op, visitproc visit, void *arg)
{
    ServerObject *s = (ServerObject *)op;
    sk_serve_t *h = &s->http;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(h->app);
    Py_VISIT(h->loop);
    Py_VISIT(h->logger);
    Py_VISIT(h->state);
    Py_VISIT(h->root_path);
    Py_VISIT(h->root_path_b);
    Py_VISIT(h->unix_path);
    Py_VISIT(h->local_last);
    Py_VISIT(h->context);
    Py_VISIT(h->access.pending);
    Py_VISIT(h->access.flush);
    Py_VISIT(h->trace);
    Py_VISIT(h->call_soon_kw);
    Py_VISIT(h->task_type);
    Py_VISIT(h->task_kw);
    for (int v = 0; v < SK_EXT_RINGS; v++) {
        for (unsigned i = 0; i < h->ext_ring[v].n; i++) {
            Py_VISIT(h->ext_ring[v].item[(h->ext_ring[v].head + i) % SK_EXT_RING]);
        }
    }
    Py_VISIT(s->on_ready);
    Py_VISIT(s->run_pending);
    Py_VISIT(s->tls);
    if (s->reactor != NULL) {
        return sk_reactor_traverse(s->reactor, visit, arg);
    }
    return 0;
}

static int
server_clear(PyObject *op)
{
    ServerObject *s = (ServerObject *)op;
    sk_serve_t *h = &s->http;
    server_close_all(s);
    sk_reactor_free(s->reactor); /* before the references it borrows go */
    s->reactor = NULL;
    s->http.reactor = NULL;
    Py_CLEAR(h->app);
    Py_CLEAR(h->loop);
    Py_CLEAR(h->logger);
    Py_CLEAR(h->state);
    Py_CLEAR(h->root_path);
    Py_CLEAR(h->root_path_b);
    Py_CLEAR(h->last_host);
    Py_CLEAR(h->unix_path);
    Py_CLEAR(h->local_last);
    Py_CLEAR(h->context);
    Py_CLEAR(h->access.pending);
    Py_CLEAR(h->access.flush);
    Py_CLEAR(h->trace);
    Py_CLEAR(h->resp_fields);
    sk_proxy_free(&h->proxy);
    PyMem_Free(h->metrics);
    h->metrics = NULL;
    h->access.metrics = NULL; /* the borrowed copies (set in init) */
    h->access.trace = NULL;
    Py_CLEAR(h->call_soon_kw);
    Py_CLEAR(h->task_type);
    Py_CLEAR(h->task_kw);
    sk_exchange_ext_clear(h);
    Py_CLEAR(s->on_ready);
    Py_CLEAR(s->run_pending);
    Py_CLEAR(s->tls); /* after the reactor, which borrowed its source */
    return 0;
}

static void
server_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    ServerObject *s = (ServerObject *)op;
    PyObject_GC_UnTrack(op);
    server_clear(op);
    if (s->http.st != NULL) {
        SK_ADD(s->http.st->live_servers, -1);
    }
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef server_methods[] = {
    {"start", server_start, METH_NOARGS,
     "Registers the reactor with the loop and starts accepting."},
    {"stop_accepting", server_stop_accepting, METH_NOARGS, "Stops accepting new connections."},
    {"shutdown", server_shutdown, METH_NOARGS,
     "Graceful phase: closes idle connections; busy ones close after their response."},
    {"close", server_close, METH_NOARGS,
     "Closes every connection and leaves the loop. Idempotent."},
    {"metrics", server_metrics, METH_NOARGS,
     "The --metrics-port counters as a dict, or None when metrics are off."},
    {"_on_ready", server_on_ready, METH_NOARGS, NULL},
    {"_run_pending", server_run_pending, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef server_getset[] = {
    {"connections", server_get_connections, NULL, "Open client connections.", NULL},
    {"active_requests", server_get_active, NULL, "Requests whose application task is running.",
     NULL},
    {"total_requests", server_get_total, NULL, "Requests started since the server was made.", NULL},
    {"_ext_reused", server_get_ext_reused, NULL,
     "Private: scope[\"extensions\"] dicts a finished request left and a later one got (for "
     "the cases that check they are never shared).",
     NULL},
    {"max_requests", server_get_max_requests, server_set_max_requests,
     "--limit-max-requests: once total_requests reaches it, every response says `connection: "
     "close` (RFC 9112 §9.6: the server is about to stop); 0 = no limit.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot server_slots[] = {
    {Py_tp_new, server_new},
    {Py_tp_methods, server_methods},
    {Py_tp_getset, server_getset},
    {Py_tp_traverse, server_traverse},
    {Py_tp_clear, server_clear},
    {Py_tp_dealloc, server_dealloc},
    {Py_tp_doc, (void *)"Server(app, loop, listen_fd, *, unix_path=None, root_path='', state=None, "
                        "timeout_keep_alive=5.0, limit_request_body=0, limit_request_line=8190, "
                        "limit_request_fields=100, limit_request_field_size=65536, logger=None, "
                        "timeout_request_head=10.0, timeout_write=30.0, limit_concurrency=0, "
                        "limit_connections=0, timeout_request_body=60.0, access_log=None, "
                        "access_flush=None, proxy_headers=False, forwarded_allow_ips='127.0.0.1', "
                        "proxy_headers_mode='x-forwarded', "
                        "date_header=True, server_header=None, headers=None, trace=None, "
                        "metrics=False, ws=True, ws_max_size=16777216, ws_max_queue=32, "
                        "ws_ping_interval=20.0, ws_ping_timeout=20.0, ws_per_message_deflate=True, "
                        "ssl_context=None)\n\n"
                        "A native HTTP/1.1 reactor serving one ASGI 3 application on one "
                        "listening socket. See skirr/_native.pyi."},
    {0, NULL},
};

PyType_Spec sk_server_spec = {
    .name = "skirr._native.Server",
    .basicsize = sizeof(ServerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = server_slots,
};
