/* sk_module.c — the skirr._native module: multi-phase init, module state, ClientDisconnected and
 * the ready awaitable.
 *
 * Owns: creating and clearing every heap type, exception type and interned string in sk_state,
 * and the Ready type (an awaitable whose result is already known: `am_send` returns PYGEN_RETURN,
 * so a ready receive()/send() costs no StopIteration and no Future).
 * Never: touches sockets or parses HTTP; keeps no global mutable state (the PyModuleDef and
 * PyType_Spec tables below are constant after load).
 */
#include "sk_module.h"

#include "sk_http.h" /* llhttp's HTTP_METHOD_MAP, for the method cache */
#include "sk_resp.h" /* the reason phrases, for reason_phrases(); the HTTP/2 field sizes */

#include <stddef.h> /* offsetof */
#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h> /* 3.11: the member flags' older names */
#define Py_T_PYSSIZET T_PYSSIZET
#define Py_READONLY READONLY
#endif

static struct PyModuleDef sk_module_def;

sk_state *
sk_get_state_by_type(PyTypeObject *tp)
{
    /* Borrowed: the module state lives as long as the module, which the type keeps alive. */
    PyObject *mod = PyType_GetModuleByDef(tp, &sk_module_def);
    return mod ? (sk_state *)PyModule_GetState(mod) : NULL;
}

/* ---- Ready: an already-completed awaitable ---------------------------------------------------- */

typedef struct {
    PyObject_HEAD PyObject *value; /* result; NULL means None */
    int yield_first;               /* yield once to the loop before returning (fairness quota) */
} ReadyObject;

PyObject *
sk_ready_new(sk_state *st, PyObject *value, int yield_first)
{
    /* New reference. Steals value (may be NULL for None). */
    ReadyObject *self = PyObject_GC_New(ReadyObject, st->ready_type);
    if (self == NULL) {
        Py_XDECREF(value);
        return NULL;
    }
    self->value = value;
    self->yield_first = yield_first;
    SK_ADD(st->live_ready, 1);
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static PyObject *
ready_await(PyObject *self)
{
    /* New reference: the awaitable is its own iterator. */
    return Py_NewRef(self);
}

/* Take a Ready's flag or value, leaving 0 or NULL; a field already 0/NULL is only read, never
 * written (the shared send_done instance, awaited on every thread's loops at once, stays
 * untouched). On a free-threaded build two threads driving one awaitable at once (a misuse the
 * loop-thread checks of send/receive do not see: the awaitable itself can be handed to another
 * thread) each take it with an atomic exchange, so one of them gets the value and the other None,
 * never both the one reference. */
static int
ready_take_flag(int *flag)
{
#ifdef Py_GIL_DISABLED
    return __atomic_load_n(flag, __ATOMIC_RELAXED) &&
           __atomic_exchange_n(flag, 0, __ATOMIC_RELAXED);
#else
    int v = *flag;
    if (v) {
        *flag = 0;
    }
    return v;
#endif
}

static PyObject *
ready_take_value(PyObject **value)
{
    /* The reference the field held (the caller's now), or NULL. */
#ifdef Py_GIL_DISABLED
    return __atomic_load_n(value, __ATOMIC_RELAXED)
               ? __atomic_exchange_n(value, NULL, __ATOMIC_ACQ_REL)
               : NULL;
#else
    PyObject *v = *value;
    if (v != NULL) {
        *value = NULL;
    }
    return v;
#endif
}

static PySendResult
ready_send(PyObject *op, PyObject *Py_UNUSED(arg), PyObject **result)
{
    ReadyObject *self = (ReadyObject *)op;
    if (ready_take_flag(&self->yield_first)) {
        *result = Py_NewRef(Py_None); /* a bare yield: the task reschedules itself */
        return PYGEN_NEXT;
    }
    /* The value is handed over once; None after that (and for the shared send_done). */
    PyObject *value = ready_take_value(&self->value);
    *result = value != NULL ? value : Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

static PyObject *
ready_iternext(PyObject *op)
{
    /* New reference (on yield), or NULL with StopIteration carrying the value. */
    PyObject *res = NULL;
    PySendResult r = ready_send(op, Py_None, &res);
    if (r == PYGEN_NEXT) {
        return res;
    }
    if (res == Py_None) {
        Py_DECREF(res);
        PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    /* Wrap in a 1-tuple so a tuple or exception value is not unpacked as constructor args. */
    PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, res);
    Py_DECREF(res);
    if (exc != NULL) {
        PyErr_SetObject(PyExc_StopIteration, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PyObject *
ready_send_method(PyObject *op, PyObject *arg)
{
    /* New reference; generator protocol `send(value)` for code that drives awaitables by hand. */
    (void)arg;
    return ready_iternext(op);
}

static PyObject *
ready_throw(PyObject *Py_UNUSED(op), PyObject *const *args, Py_ssize_t nargs)
{
    /* Always NULL: re-raises what was thrown in (nothing to clean up). */
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "throw expected at least 1 argument");
        return NULL;
    }
    PyObject *typ = args[0];
    if (PyExceptionInstance_Check(typ)) {
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    }
    else if (nargs > 1 && args[1] != Py_None) {
        PyErr_SetObject(typ, args[1]);
    }
    else {
        PyErr_SetNone(typ);
    }
    return NULL;
}

static PyObject *
ready_close(PyObject *Py_UNUSED(op), PyObject *Py_UNUSED(arg))
{
    /* New reference to None. */
    Py_RETURN_NONE;
}

static int
ready_traverse(PyObject *op, visitproc visit, void *arg)
{
    ReadyObject *self = (ReadyObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->value);
    return 0;
}

static int
ready_clear(PyObject *op)
{
    Py_CLEAR(((ReadyObject *)op)->value);
    return 0;
}

static void
ready_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    /* The type's own module (ht_module: set by PyType_FromModuleAndSpec, owned by the type), not
     * PyType_GetModuleByDef: when the module, its types and the shared send_done are one garbage
     * cycle (interpreter shutdown), the collector may clear the type (its MRO and its module,
     * type_clear) before this Ready is freed, and the MRO lookup then reads a NULL MRO (a crash
     * at every exit on 3.14t, whose collector clears in another order than the GIL build's).
     * A cleared type has no module: the module state may be gone, so nothing is counted. */
    PyObject *mod = ((PyHeapTypeObject *)tp)->ht_module; /* borrowed */
    if (mod != NULL) {
        SK_ADD(((sk_state *)PyModule_GetState(mod))->live_ready, -1);
    }
    PyObject_GC_UnTrack(op);
    ready_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef ready_methods[] = {
    {"send", (PyCFunction)ready_send_method, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))ready_throw, METH_FASTCALL, NULL},
    {"close", ready_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot ready_slots[] = {
    {Py_am_await, ready_await},
    {Py_am_send, ready_send},
    {Py_tp_iter, ready_await},
    {Py_tp_iternext, ready_iternext},
    {Py_tp_methods, ready_methods},
    {Py_tp_traverse, ready_traverse},
    {Py_tp_clear, ready_clear},
    {Py_tp_dealloc, ready_dealloc},
    {Py_tp_doc, (void *)"An awaitable whose result is already known (internal)."},
    {0, NULL},
};

static PyType_Spec ready_spec = {
    .name = "skirr._native.Ready",
    .basicsize = sizeof(ReadyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = ready_slots,
};

/* ---- Bound: a callable bound to a session --------------------------------------------------- */

/* Two pointers besides the header (a 48 B block with the collector's, against a PyCFunction's
 * 80 B): what a held WebSocket keeps for its receive, send and done callback (issue 37). */
typedef struct {
    PyObject_HEAD PyObject *self; /* strong: the object the entry serves */
    vectorcallfunc entry;         /* called with this Bound as the callable (sk_bound_self) */
} BoundObject;

PyObject *
sk_bound_new(sk_state *st, PyObject *self, vectorcallfunc entry)
{
    /* New reference, or NULL with an exception. */
    BoundObject *b = PyObject_GC_New(BoundObject, st->bound_type);
    if (b == NULL) {
        return NULL;
    }
    b->self = Py_NewRef(self);
    b->entry = entry;
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

PyObject *
sk_bound_self(PyObject *bound)
{
    /* Borrowed: the Bound keeps it. */
    return ((BoundObject *)bound)->self;
}

static PyObject *
bound_repr(PyObject *op)
{
    /* New reference: "<skirr callable of <the object's repr>>". */
    return PyUnicode_FromFormat("<skirr callable of %R>", ((BoundObject *)op)->self);
}

static int
bound_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(((BoundObject *)op)->self);
    return 0;
}

static int
bound_clear(PyObject *op)
{
    Py_CLEAR(((BoundObject *)op)->self);
    return 0;
}

static void
bound_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    bound_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMemberDef bound_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(BoundObject, entry), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot bound_slots[] = {
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_repr, bound_repr},
    {Py_tp_members, bound_members},
    {Py_tp_traverse, bound_traverse},
    {Py_tp_clear, bound_clear},
    {Py_tp_dealloc, bound_dealloc},
    {Py_tp_doc, (void *)"A session's receive, send or done callback (internal)."},
    {0, NULL},
};

static PyType_Spec bound_spec = {
    .name = "skirr._native.Bound",
    .basicsize = sizeof(BoundObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = bound_slots,
};

/* ---- module ----------------------------------------------------------------------------------- */

/* clang-format off */
#define SK_INTERNED(X) \
    X(s_type, "type") \
    X(s_asgi, "asgi") \
    X(s_http_version, "http_version") \
    X(s_method, "method") \
    X(s_scheme, "scheme") \
    X(s_path, "path") \
    X(s_raw_path, "raw_path") \
    X(s_query_string, "query_string") \
    X(s_root_path, "root_path") \
    X(s_headers, "headers") \
    X(s_client, "client") \
    X(s_server, "server") \
    X(s_state, "state") \
    X(s_body, "body") \
    X(s_more_body, "more_body") \
    X(s_status, "status") \
    X(s_http, "http") \
    X(s_1_0, "1.0") \
    X(s_1_1, "1.1") \
    X(s_2, "2") \
    X(s_http_request, "http.request") \
    X(s_http_disconnect, "http.disconnect") \
    X(s_http_response_start, "http.response.start") \
    X(s_http_response_body, "http.response.body") \
    X(s_create_task, "create_task") \
    X(s_add_done_callback, "add_done_callback") \
    X(s_create_future, "create_future") \
    X(s_throw, "throw") \
    X(s_close, "close") \
    X(s_set_result, "set_result") \
    X(s_set_exception, "set_exception") \
    X(s_done, "done") \
    X(s_add_reader, "add_reader") \
    X(s_remove_reader, "remove_reader") \
    X(s_call_soon, "call_soon") \
    X(s_error, "error") \
    X(s_copy, "copy") \
    X(s_cancel, "cancel") \
    X(s_cancelled, "cancelled") \
    X(s_cancelling, "cancelling") \
    X(s_current_task, "current_task") \
    X(s_join, "join") \
    X(s_debug, "debug") \
    X(s_dunder_mro, "__mro__") \
    X(s_dunder_module, "__module__") \
    X(s_dunder_qualname, "__qualname__") \
    X(s_exceptions, "exceptions") \
    X(s_extensions, "extensions") \
    X(s_http_response_pathsend, "http.response.pathsend") \
    X(s_http_response_zerocopysend, "http.response.zerocopysend") \
    X(s_http_response_trailers, "http.response.trailers") \
    X(s_http_response_early_hint, "http.response.early_hint") \
    X(s_file, "file") \
    X(s_offset, "offset") \
    X(s_count, "count") \
    X(s_trailers, "trailers") \
    X(s_more_trailers, "more_trailers") \
    X(s_links, "links") \
    X(s_tls, "tls") \
    X(s_https, "https") \
    X(s_websocket, "websocket") \
    X(s_ws, "ws") \
    X(s_wss, "wss") \
    X(s_websocket_connect, "websocket.connect") \
    X(s_websocket_receive, "websocket.receive") \
    X(s_websocket_disconnect, "websocket.disconnect") \
    X(s_websocket_accept, "websocket.accept") \
    X(s_websocket_send, "websocket.send") \
    X(s_websocket_close, "websocket.close") \
    X(s_websocket_http_response_start, "websocket.http.response.start") \
    X(s_websocket_http_response_body, "websocket.http.response.body") \
    X(s_text, "text") \
    X(s_bytes, "bytes") \
    X(s_code, "code") \
    X(s_reason, "reason") \
    X(s_subprotocol, "subprotocol") \
    X(s_subprotocols, "subprotocols")
/* clang-format on */

static PyObject *
sk_live(PyObject *module, PyObject *Py_UNUSED(arg))
{
    /* New reference: {"servers", "connections", "requests", "awaitables"} -> live counts. The
     * shared send-completion awaitable is not counted. */
    sk_state *st = PyModule_GetState(module);
    return Py_BuildValue("{s:n,s:n,s:n,s:n}", "servers", (Py_ssize_t)SK_LOAD(st->live_servers),
                         "connections", (Py_ssize_t)SK_LOAD(st->live_conns), "requests",
                         (Py_ssize_t)SK_LOAD(st->live_requests), "awaitables",
                         (Py_ssize_t)(SK_LOAD(st->live_ready) - (st->send_done != NULL)));
}

static PyObject *
sk_reason_phrases(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(arg))
{
    /* New reference: {status: reason phrase} for each status 100..599 the core's one table
     * (sk_resp_reason_phrase in sk_resp.h) names, the phrases of skirr's status lines and
     * refusal bodies; skirr.access writes them in its lines. */
    PyObject *res = PyDict_New();
    PyObject *key = NULL, *val = NULL;
    if (res == NULL) {
        goto done;
    }
    for (int status = 100; status <= 599; status++) {
        const char *reason;
        if (sk_resp_reason_phrase(status, &reason) == 0) {
            continue;
        }
        key = PyLong_FromLong(status);
        val = key != NULL ? PyUnicode_FromString(reason) : NULL;
        if (val == NULL || PyDict_SetItem(res, key, val) < 0) {
            Py_CLEAR(res);
            goto done;
        }
        Py_CLEAR(key);
        Py_CLEAR(val);
    }
done:
    Py_XDECREF(key);
    Py_XDECREF(val);
    return res;
}

static PyObject *
sk_h2_own_fields_size(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    /* New reference: an int, the size skirr's own HTTP/2 answers may reach with these server
     * fields (sk_resp_opts_h2_own_size: bytes, RFC 9113 §6.5.2's measure). args: the server
     * line(s) and the --header lines as the Server takes them (bytes of complete
     * "name: value\r\n" lines; not validated here), and whether a date field is added. */
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "h2_own_fields_size(server: bytes, headers: bytes, date: bool)");
        return NULL;
    }
    int date = PyObject_IsTrue(args[2]);
    if (date < 0) {
        return NULL;
    }
    sk_resp_opts_t o = {.server = PyBytes_AS_STRING(args[0]),
                        .server_len = (size_t)PyBytes_GET_SIZE(args[0]),
                        .extra = PyBytes_AS_STRING(args[1]),
                        .extra_len = (size_t)PyBytes_GET_SIZE(args[1])};
    sk_resp_opts_measure(&o);
    return PyLong_FromSize_t(sk_resp_opts_h2_own_size(&o, date));
}

static PyMethodDef sk_functions[] = {
    {"_live", sk_live, METH_NOARGS,
     "_live() -> dict: live Server, connection, Request and ready-awaitable counts (for leak "
     "tests)."},
    {"log_escape", sk_access_log_escape, METH_O,
     "log_escape(value: str | bytes) -> str: value as a log line shows it, escaped against log "
     "injection (CWE-117): '\"' -> \\\", '\\' -> \\\\, bytes 0x00-0x1F and 0x7F-0xFF -> "
     "\\xHH (upper-case hex); a str below U+0100 is read as latin-1 bytes, any other as UTF-8. "
     "Returns value itself when it is a str that needs no escaping. Raises TypeError for another "
     "type."},
    {"reason_phrases", sk_reason_phrases, METH_NOARGS,
     "reason_phrases() -> dict[int, str]: the reason phrase of each status skirr's status lines "
     "name (RFC 9110 section 15, else the IANA registry's), from the C core's one table."},
    {"h2_own_fields_size", (PyCFunction)(void (*)(void))sk_h2_own_fields_size, METH_FASTCALL,
     "h2_own_fields_size(server: bytes, headers: bytes, date: bool) -> int: the bytes, by RFC "
     "9113 section 6.5.2's measure (name + value + 32 a field), that skirr's own HTTP/2 answers "
     "may carry with these server fields (complete 'name: value\\r\\n' lines), "
     "H2_OWN_RESPONSE_SIZE for their own fields and a date field when date is true. Over "
     "H2_SECTION_MAX the Server refuses them (ValueError). Raises TypeError for other types."},
    {"tls_ktls_available", sk_tlsctx_ktls_available, METH_NOARGS,
     "tls_ktls_available() -> bool: the kernel offers kernel TLS (the tls ULP). Files on TLS "
     "connections are read in bounded chunks and encrypted either way (libssl never has the "
     "socket)."},
    {NULL, NULL, 0, NULL},
};

/* The field names most requests and WebSocket handshakes carry (RFC 9110, RFC 6455, Fetch
 * metadata, the usual proxy ones), lower-cased: each is one bytes object (sk_state.field_names)
 * that every scope's headers share (sk_asgi_headers). */
static const char *const FIELD_NAMES[SK_FIELD_NAMES] = {
    "host", /* SK_FIELD_HOST */
    "user-agent",
    "accept",
    "accept-encoding",
    "accept-language",
    "connection",
    "content-type",
    "content-length",
    "cookie",
    "upgrade",
    "origin",
    "referer",
    "authorization",
    "cache-control",
    "pragma",
    "te",
    "transfer-encoding",
    "if-none-match",
    "if-modified-since",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-real-ip",
    "x-request-id",
    "forwarded",
    "via",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
    "sec-fetch-site",
    "sec-fetch-mode",
    "sec-fetch-dest",
    "sec-fetch-user",
    "sec-ch-ua",
    "sec-ch-ua-mobile",
    "sec-ch-ua-platform",
    "upgrade-insecure-requests",
    "priority",
    "dnt",
};

/* Field values many requests and WebSocket handshakes carry byte for byte (browsers' and common
 * clients' defaults, RFC 6455's handshake, RFC 7692's usual offer): each is one bytes object
 * (sk_state.field_values) that every scope's headers share (sk_asgi_headers). Values are
 * compared exactly: a value's case is the client's. */
static const char *const FIELD_VALUES[SK_FIELD_VALUES] = {
    "websocket",
    "Upgrade",
    "upgrade",
    "13",
    "permessage-deflate; client_max_window_bits",
    "keep-alive",
    "Keep-Alive",
    "close",
    "*/*",
    "gzip",
    "gzip, deflate",
    "gzip, deflate, br",
    "gzip, deflate, br, zstd",
    "identity",
    "no-cache",
    "max-age=0",
    "application/json",
    "trailers",
    "0",
    "1",
    "?0",
    "?1",
    "none",
    "same-origin",
    "same-site",
    "cross-site",
    "cors",
    "no-cors",
    "navigate",
    "u=0, i",
    "document",
    "empty",
};

static int
sk_exec(PyObject *module)
{
    sk_state *st = PyModule_GetState(module);
    PyObject *v = NULL;

#define SK_INTERN(field, text)                                  \
    if ((st->field = PyUnicode_InternFromString(text)) == NULL) \
        goto error;
    SK_INTERNED(SK_INTERN)
#undef SK_INTERN

    st->bound_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &bound_spec, NULL);
    if (st->bound_type == NULL) {
        goto error;
    }
    st->ready_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &ready_spec, NULL);
    if (st->ready_type == NULL) {
        goto error;
    }
    st->server_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &sk_server_spec, NULL);
    if (st->server_type == NULL || PyModule_AddType(module, st->server_type) < 0) {
        goto error;
    }
    st->request_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &sk_request_spec, NULL);
    if (st->request_type == NULL) {
        goto error;
    }
    st->websocket_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &sk_websocket_spec, NULL);
    if (st->websocket_type == NULL) {
        goto error;
    }
    st->tlsctx_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &sk_tlsctx_spec, NULL);
    if (st->tlsctx_type == NULL || PyModule_AddType(module, st->tlsctx_type) < 0 ||
        sk_tlsctx_module_init(st) < 0) {
        goto error;
    }
    st->ClientDisconnected = PyErr_NewExceptionWithDoc(
        "skirr._native.ClientDisconnected",
        "send() was called after the client disconnected (ASGI www 2.5 \"Disconnected Client - "
        "send exception\"). A subclass of OSError.",
        PyExc_OSError, NULL);
    if (st->ClientDisconnected == NULL ||
        PyModule_AddObjectRef(module, "ClientDisconnected", st->ClientDisconnected) < 0) {
        goto error;
    }
    v = PyImport_ImportModule("asyncio");
    st->CancelledError = v ? PyObject_GetAttrString(v, "CancelledError") : NULL;
    Py_CLEAR(v);
    if (st->CancelledError == NULL) {
        goto error;
    }
    st->send_done = sk_ready_new(st, NULL, 0);
    if (st->send_done == NULL) {
        goto error;
    }
    st->empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    if (st->empty_bytes == NULL) {
        goto error;
    }
    st->asgi_proto = Py_BuildValue("{s:s,s:s}", "version", "3.0", "spec_version", "2.5");
    if (st->asgi_proto == NULL) {
        goto error;
    }
    st->disconnect_msg = PyDict_New();
    if (st->disconnect_msg == NULL ||
        PyDict_SetItem(st->disconnect_msg, st->s_type, st->s_http_disconnect) < 0) {
        goto error;
    }
    /* Immutable values common to most requests; per-request values replace them. */
    /* Every key a request scope always has is in the prototype (None where build_scope sets a
     * per-request value), so the copy is sized once and filling it replaces values: no insertion,
     * no resize. */
    st->scope_proto = PyDict_New();
    if (st->scope_proto == NULL || PyDict_SetItem(st->scope_proto, st->s_type, st->s_http) < 0 ||
        PyDict_SetItem(st->scope_proto, st->s_asgi, Py_None) < 0 ||
        PyDict_SetItem(st->scope_proto, st->s_http_version, st->s_1_1) < 0 ||
        PyDict_SetItem(st->scope_proto, st->s_scheme, st->s_http) < 0) {
        goto error;
    }
    PyObject *per_request[] = {st->s_method,       st->s_path,      st->s_raw_path,
                               st->s_query_string, st->s_root_path, st->s_headers,
                               st->s_client,       st->s_server,    st->s_extensions};
    for (size_t i = 0; i < sizeof(per_request) / sizeof(per_request[0]); i++) {
        if (PyDict_SetItem(st->scope_proto, per_request[i], Py_None) < 0) {
            goto error;
        }
    }
    /* llhttp_method_name() aborts on ids outside its table, so walk llhttp's own method map. */
#define SK_METHOD(num, name, string)                                          \
    if ((num) < SK_METHOD_CACHE &&                                            \
        (st->methods[(num)] = PyUnicode_InternFromString(#string)) == NULL) { \
        goto error;                                                           \
    }
    HTTP_METHOD_MAP(SK_METHOD)
#undef SK_METHOD
    for (size_t i = 0; i < SK_FIELD_NAMES; i++) {
        if ((st->field_names[i] = PyBytes_FromString(FIELD_NAMES[i])) == NULL) {
            goto error;
        }
    }
    /* built back to front, so each length's chain is in FIELD_VALUES' order */
    for (size_t i = SK_FIELD_VALUES; i-- > 0;) {
        if ((st->field_values[i] = PyBytes_FromString(FIELD_VALUES[i])) == NULL) {
            goto error;
        }
        size_t len = strlen(FIELD_VALUES[i]);
        assert(len > 0 && len < 256);
        st->field_value_next[i] = st->field_value_first[len];
        st->field_value_first[len] = (uint8_t)(i + 1);
    }
    /* bytes: the HTTP/2 field-section sizes (sk_resp.h), for skirr.Config's check */
    if (PyModule_AddIntConstant(module, "H2_SECTION_MAX", SK_H2_SECTION_MAX) < 0 ||
        PyModule_AddIntConstant(module, "H2_OWN_RESPONSE_SIZE", SK_H2_OWN_RESPONSE_SIZE) < 0) {
        goto error;
    }
    v = PyUnicode_FromString("0.1.0");
    if (v == NULL || PyModule_AddObjectRef(module, "__version__", v) < 0) {
        goto error;
    }
    Py_DECREF(v);
    return 0;

error:
    Py_XDECREF(v);
    return -1;
}

static int
sk_traverse(PyObject *module, visitproc visit, void *arg)
{
    sk_state *st = PyModule_GetState(module);
    Py_VISIT(st->server_type);
    Py_VISIT(st->request_type);
    Py_VISIT(st->websocket_type);
    Py_VISIT(st->tlsctx_type);
    Py_VISIT(st->ready_type);
    Py_VISIT(st->bound_type);
    Py_VISIT(st->ClientDisconnected);
    Py_VISIT(st->CancelledError);
    Py_VISIT(st->send_done);
    Py_VISIT(st->asgi_proto);
    Py_VISIT(st->scope_proto);
    Py_VISIT(st->disconnect_msg);
    Py_VISIT(st->empty_bytes);
    return 0;
}

static int
sk_clear(PyObject *module)
{
    sk_state *st = PyModule_GetState(module);
    Py_CLEAR(st->server_type);
    Py_CLEAR(st->request_type);
    Py_CLEAR(st->websocket_type);
    Py_CLEAR(st->tlsctx_type);
    Py_CLEAR(st->ready_type);
    Py_CLEAR(st->bound_type);
    Py_CLEAR(st->ClientDisconnected);
    Py_CLEAR(st->CancelledError);
    Py_CLEAR(st->send_done);
    Py_CLEAR(st->asgi_proto);
    Py_CLEAR(st->scope_proto);
    Py_CLEAR(st->disconnect_msg);
    Py_CLEAR(st->empty_bytes);
    for (int m = 0; m < SK_METHOD_CACHE; m++) {
        Py_CLEAR(st->methods[m]);
    }
    for (int i = 0; i < SK_FIELD_NAMES; i++) {
        Py_CLEAR(st->field_names[i]);
    }
    for (int i = 0; i < SK_FIELD_VALUES; i++) {
        Py_CLEAR(st->field_values[i]);
    }
#define SK_UNINTERN(field, text) Py_CLEAR(st->field);
    SK_INTERNED(SK_UNINTERN)
#undef SK_UNINTERN
    return 0;
}

static void
sk_free(void *module)
{
    sk_clear((PyObject *)module);
}

static PyModuleDef_Slot sk_slots[] = {
    {Py_mod_exec, sk_exec},
#ifdef Py_mod_gil
    /* 3.13+: safe without the GIL (a free-threaded build keeps it off when importing this):
     * the module state is read-only after sk_exec but for its atomic live counts; a Server,
     * its requests and sessions refuse every thread but their loop's (sk_serve_check_thread);
     * what other threads read of them (metrics, counters) is atomic (sk_shared_*); a
     * TLSContext's SSL_CTX is swapped under a lock; app objects are read through strong
     * references. 3.11 and 3.12 have no such slot (and always a GIL). */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef sk_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "skirr._native",
    .m_doc = "skirr's native HTTP/1.1 reactor and ASGI glue.",
    .m_size = sizeof(sk_state),
    .m_slots = sk_slots,
    .m_methods = sk_functions,
    .m_traverse = sk_traverse,
    .m_clear = sk_clear,
    .m_free = sk_free,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    /* New reference: the module definition (multi-phase init). */
    return PyModuleDef_Init(&sk_module_def);
}
