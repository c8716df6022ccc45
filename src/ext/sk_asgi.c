/* sk_asgi.c — ASGI pieces any protocol handler's scope and messages are built from.
 *
 * Owns: path decoding, the headers list, address tuples, message lookups, the awaitable an app
 * call returned, the application-error log call, and the waiter futures of receive()/send()
 * (see sk_asgi.h). Never: keeps state, touches a connection or calls back into a handler.
 */
#include "sk_asgi.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

void
sk_asgi_log_error(sk_state *st, PyObject *logger, const char *msg, PyObject *exc)
{
    PyObject *meth = NULL, *args = NULL, *kwargs = NULL, *res = NULL;
    if (logger == Py_None) {
        return;
    }
    meth = PyObject_GetAttr(logger, st->s_error);
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

/* The most exceptions from_disconnect() looks at: a chain can loop (__cause__ is assignable). */
#define CHAIN_MAX 64

/* The frameworks' own disconnect exceptions, raised while handling the server's (their
 * __context__ is it): (__module__, __qualname__) of the class or of one of its bases. */
static const char *const WRAPPERS[][2] = {
    {"starlette.requests", "ClientDisconnect"}, /* StreamingResponse: `except OSError: raise` */
    {"anyio", "BrokenResourceError"},
    {"anyio", "ClosedResourceError"},
};

static int
name_is(PyObject *cls, PyObject *attr, const char *want)
{
    /* 1 when cls.<attr> (attr: an interned str of the module state) is the str want, else 0.
     * Never leaves an exception set. */
    PyObject *v = PyObject_GetAttr(cls, attr); /* new */
    int eq = v != NULL && PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, want) == 0;
    Py_XDECREF(v);
    PyErr_Clear();
    return eq;
}

static int
known_wrapper(sk_state *st, PyObject *e)
{
    /* 1 when e (borrowed, an exception instance) is an instance of one of WRAPPERS (its class
     * or a base), else 0. Never leaves an exception set. */
    /* a strong reference (not tp_mro, borrowed: the attribute lookups below run code, and
     * another thread may give the class new bases meanwhile): a tuple of classes */
    PyObject *mro = PyObject_GetAttr((PyObject *)Py_TYPE(e), st->s_dunder_mro);
    int found = 0;
    if (mro == NULL || !PyTuple_Check(mro)) {
        PyErr_Clear();
        Py_XDECREF(mro);
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro) && !found; i++) {
        PyObject *cls = PyTuple_GET_ITEM(mro, i);
        for (size_t k = 0; k < sizeof(WRAPPERS) / sizeof(WRAPPERS[0]) && !found; k++) {
            found = name_is(cls, st->s_dunder_qualname, WRAPPERS[k][1]) &&
                    name_is(cls, st->s_dunder_module, WRAPPERS[k][0]);
        }
    }
    Py_DECREF(mro);
    return found;
}

static int
from_disconnect(sk_state *st, PyObject *exc)
{
    /* 1 when exc (borrowed) is a ClientDisconnected or a wrapper of one (see
     * sk_asgi_log_app_exception): a depth-first walk over __cause__, an exception group's
     * members, and __context__ of known_wrapper() exceptions only, at most CHAIN_MAX
     * exceptions; 0 otherwise. Never leaves an exception set. */
    PyObject *stack[CHAIN_MAX]; /* owned references, stack[0..n) */
    int n = 0, seen = 0, found = 0;
    stack[n++] = Py_NewRef(exc);
    while (n > 0 && !found && seen < CHAIN_MAX) {
        PyObject *e = stack[--n];
        seen++;
        if (PyErr_GivenExceptionMatches(e, st->ClientDisconnected)) {
            found = 1;
        }
        else if (PyExceptionInstance_Check(e)) {
            PyObject *next[2] = {PyException_GetCause(e),
                                 known_wrapper(st, e) ? PyException_GetContext(e) : NULL}; /* new */
            for (int i = 0; i < 2; i++) {
                if (next[i] != NULL && n < CHAIN_MAX) {
                    stack[n++] = next[i];
                }
                else {
                    Py_XDECREF(next[i]);
                }
            }
            if (PyErr_GivenExceptionMatches(e, PyExc_BaseExceptionGroup)) {
                PyObject *members = PyObject_GetAttr(e, st->s_exceptions); /* new */
                if (members != NULL && PyTuple_Check(members)) {
                    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(members) && n < CHAIN_MAX; i++) {
                        stack[n++] = Py_NewRef(PyTuple_GET_ITEM(members, i));
                    }
                }
                Py_XDECREF(members);
                PyErr_Clear();
            }
        }
        Py_DECREF(e);
    }
    while (n > 0) {
        Py_DECREF(stack[--n]);
    }
    return found;
}

int
sk_asgi_log_app_exception(sk_state *st, PyObject *logger, PyObject *exc, int client_left)
{
    if (!client_left || !from_disconnect(st, exc)) {
        sk_asgi_log_error(st, logger, "Exception in ASGI application", exc);
        return 0;
    }
    if (logger != Py_None) {
        PyObject *msg = PyUnicode_FromString("Client disconnected: the application ended with %r");
        PyObject *res =
            msg ? PyObject_CallMethodObjArgs(logger, st->s_debug, msg, exc, NULL) : NULL; /* new */
        Py_XDECREF(msg);
        if (res == NULL) {
            PyErr_WriteUnraisable(logger);
        }
        Py_XDECREF(res);
    }
    return 1;
}

PyObject *
sk_asgi_address(const struct sockaddr *ss)
{
    /* New reference (see sk_asgi.h). */
    char host[INET6_ADDRSTRLEN];
    if (ss->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        return Py_BuildValue("(si)", host, (int)ntohs(a->sin_port));
    }
    if (ss->sa_family == AF_INET6) {
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

PyObject *
sk_asgi_path(PyObject *root_path, const char *p, size_t n)
{
    /* New reference (see sk_asgi.h). */
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
    goto done;
error:
    res = NULL;
done:
    PyMem_Free(tmp);
    Py_XDECREF(path);
    return res;
}

static PyObject *
field_name(sk_state *st, const char *src, uint32_t len)
{
    /* New reference: the field name src (len bytes, any case) lower-cased as bytes: the shared
     * object when it is a common one (st->field_names), else a new one. NULL with MemoryError. */
    for (size_t i = 0; len > 0 && i < SK_FIELD_NAMES; i++) {
        PyObject *known = st->field_names[i];
        const char *text = PyBytes_AS_STRING(known);
        if ((size_t)PyBytes_GET_SIZE(known) == len && text[0] == (char)(src[0] | 0x20) &&
            strncasecmp(src, text, len) == 0) {
            return Py_NewRef(known);
        }
    }
    PyObject *name = PyBytes_FromStringAndSize(NULL, len);
    if (name != NULL) {
        char *dst = PyBytes_AS_STRING(name);
        for (uint32_t k = 0; k < len; k++) {
            char ch = src[k];
            dst[k] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        }
    }
    return name;
}

static PyObject *
field_value(sk_state *st, const char *src, size_t len)
{
    /* New reference: the field value src (len bytes) as bytes: the shared object when it is a
     * common one byte for byte (st->field_values), else a new one. NULL with MemoryError. */
    for (unsigned k = len < 256 ? st->field_value_first[len] : 0; k != 0;
         k = st->field_value_next[k - 1]) {
        if (memcmp(PyBytes_AS_STRING(st->field_values[k - 1]), src, len) == 0) {
            return Py_NewRef(st->field_values[k - 1]);
        }
    }
    return PyBytes_FromStringAndSize(src, (Py_ssize_t)len);
}

static PyObject *
host_value(PyObject **last, const char *src, size_t len)
{
    /* New reference: the Host value src (len bytes) as bytes: *last when equal, else a new
     * object that replaces it. NULL with MemoryError. */
    PyObject *known = *last;
    if (known != NULL && (size_t)PyBytes_GET_SIZE(known) == len &&
        memcmp(PyBytes_AS_STRING(known), src, len) == 0) {
        return Py_NewRef(known);
    }
    PyObject *value = PyBytes_FromStringAndSize(src, (Py_ssize_t)len);
    if (value != NULL) {
        Py_XSETREF(*last, Py_NewRef(value));
    }
    return value;
}

PyObject *
sk_asgi_headers(sk_state *st, const sk_fields_t *p, int has_host, const char *authority,
                size_t authority_len, PyObject **last_host)
{
    /* New reference (see sk_asgi.h). */
    int add_host = (authority != NULL && !has_host); /* HTTP/1.0 may send no Host */
    PyObject *list = PyList_New(p->n + add_host);
    if (list == NULL) {
        return NULL;
    }
    if (add_host) {
        /* the shared name, and the value through last_host as a Host field's (an HTTP/2
         * request's :authority comes here on every stream) */
        PyObject *value = last_host != NULL
                              ? host_value(last_host, authority, authority_len)
                              : PyBytes_FromStringAndSize(authority, (Py_ssize_t)authority_len);
        PyObject *pair =
            value != NULL ? PyTuple_Pack(2, st->field_names[SK_FIELD_HOST], value) : NULL;
        Py_XDECREF(value);
        if (pair == NULL) {
            goto error;
        }
        PyList_SET_ITEM(list, p->n, pair);
    }
    for (uint32_t i = 0; i < p->n; i++) {
        const sk_field_t *f = &p->v[i];
        const char *src = p->base + f->name.off;
        const char *vp = p->base + f->value.off;
        size_t vlen = f->value.len;
        if (authority != NULL && f->name.len == sizeof("host") - 1 &&
            strncasecmp(src, "host", sizeof("host") - 1) == 0) {
            /* RFC 9112 §3.2.2: with an absolute-form target the Host field is replaced by the
             * target's authority, so the app sees one answer to "which host". */
            vp = authority;
            vlen = authority_len;
        }
        PyObject *name = field_name(st, src, f->name.len);
        PyObject *value = (last_host != NULL && name == st->field_names[SK_FIELD_HOST])
                              ? host_value(last_host, vp, vlen)
                              : field_value(st, vp, vlen);
        if (name == NULL || value == NULL) {
            Py_XDECREF(name);
            Py_XDECREF(value);
            goto error;
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

int
sk_asgi_msg_get(PyObject *msg, PyObject *key, PyObject **out)
{
    *out = NULL;
    if (PyDict_Check(msg)) {
        /* a strong reference at once: the app's dict, which another of its threads may change */
        return PyDict_GetItemRef(msg, key, out);
    }
    PyObject *v = PyObject_GetItem(msg, key);
    if (v == NULL) {
        if (PyErr_ExceptionMatches(PyExc_KeyError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    *out = v;
    return 1;
}

PyObject *
sk_asgi_awaitable_iter(PyObject *obj)
{
    /* New reference (see sk_asgi.h). */
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

/* ---- an app's Task ------------------------------------------------------------------------- */

int
sk_asgi_task_cancelling(sk_state *st, PyObject *task)
{
    /* See sk_asgi.h. */
    int yes = 1;
    PyObject *t = NULL, *n = NULL;
    assert(!PyErr_Occurred());
    if (task != NULL) {
        t = Py_NewRef(task);
    }
    else {
        PyObject *asyncio = PyImport_ImportModule("asyncio");
        t = asyncio ? PyObject_CallMethodNoArgs(asyncio, st->s_current_task) : NULL;
        Py_XDECREF(asyncio);
    }
    if (t != NULL && t != Py_None) {
        n = PyObject_CallMethodNoArgs(t, st->s_cancelling);
        if (n != NULL && PyLong_Check(n)) {
            yes = PyLong_AsLong(n) != 0;
        }
    }
    Py_XDECREF(n);
    Py_XDECREF(t);
    PyErr_Clear();
    return yes;
}

PyObject *
sk_asgi_method_result(PySendResult res, PyObject *result)
{
    /* New reference (see sk_asgi.h). */
    if (res == PYGEN_RETURN) {
        Py_DECREF(result);
        PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    return result;
}

int
sk_asgi_step_busy(uint8_t stepping)
{
    if (stepping) {
        PyErr_SetString(PyExc_ValueError, "coroutine already executing");
    }
    return stepping != 0;
}

void
sk_asgi_raise_thrown(PyObject *const *args, Py_ssize_t nargs)
{
    /* See sk_asgi.h. */
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

PySendResult
sk_asgi_coro_throw(sk_state *st, PyObject *coro, PyObject *const *args, Py_ssize_t nargs,
                   PyObject **result)
{
    /* See sk_asgi.h. */
    *result = NULL;
    PyObject *meth = PyObject_GetAttr(coro, st->s_throw);
    if (meth == NULL) {
        /* an __await__ iterator without throw(): the exception goes to the app as raised */
        PyErr_Clear();
        sk_asgi_raise_thrown(args, nargs);
        return PYGEN_ERROR;
    }
    *result = PyObject_Vectorcall(meth, args, (size_t)nargs, NULL);
    Py_DECREF(meth);
    if (*result != NULL) {
        return PYGEN_NEXT;
    }
    if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
        PyErr_Clear();
        *result = Py_NewRef(Py_None);
        return PYGEN_RETURN;
    }
    return PYGEN_ERROR;
}

int
sk_asgi_coro_close(sk_state *st, PyObject *coro)
{
    /* See sk_asgi.h. */
    int rc = 0;
    PyObject *meth = PyObject_GetAttr(coro, st->s_close);
    if (meth == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear(); /* no close(): only released */
        }
        else {
            rc = -1;
        }
    }
    else {
        PyObject *res = PyObject_CallNoArgs(meth);
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
        Py_DECREF(meth);
    }
    Py_DECREF(coro);
    return rc;
}

/* ---- futures the receive()/send() awaitables wait on ------------------------------------- */

int
sk_asgi_resolve(sk_state *st, PyObject *fut, PyObject *result, PyObject *exc_type)
{
    /* Unless fut is already done (cancelled), sets its result (result, borrowed) or, with
     * exc_type, an exc_type("client disconnected") exception. 1 if it was set, 0 if fut was done;
     * a failure is reported as unraisable (0). */
    PyObject *res = NULL, *exc = NULL;
    int set = 0;
    PyObject *done = PyObject_CallMethodNoArgs(fut, st->s_done);
    if (done == NULL) {
        goto error;
    }
    if (done == Py_False) {
        if (exc_type != NULL) {
            exc = PyObject_CallFunction(exc_type, "s", "client disconnected");
            res = exc ? PyObject_CallMethodOneArg(fut, st->s_set_exception, exc) : NULL;
        }
        else {
            res = PyObject_CallMethodOneArg(fut, st->s_set_result, result);
        }
        if (res == NULL) {
            goto error;
        }
        set = 1;
    }
    goto done;
error:
    PyErr_WriteUnraisable(fut);
done:
    Py_XDECREF(done);
    Py_XDECREF(res);
    Py_XDECREF(exc);
    return set;
}

/* A waiter slot (a receive() or send() that cannot complete yet) holds NULL, the one future
 * waiting, or a list of them once a second one waits (issue 37: an idle WebSocket's receive()
 * keeps no list). */

Py_ssize_t
sk_asgi_waiting(PyObject *slot)
{
    return slot == NULL ? 0 : PyList_CheckExact(slot) ? PyList_GET_SIZE(slot) : 1;
}

void
sk_asgi_resolve_all(sk_state *st, PyObject **slot, PyObject *result, PyObject *exc_type)
{
    /* Resolves every future of *slot (see sk_asgi_resolve) and empties it. Moved out first:
     * a future's callbacks may add new waiters, which go to the emptied slot. */
    PyObject *waiters = *slot;
    if (waiters == NULL) {
        return;
    }
    *slot = NULL;
    if (!PyList_CheckExact(waiters)) {
        (void)sk_asgi_resolve(st, waiters, result, exc_type);
    }
    else {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(waiters); i++) {
            (void)sk_asgi_resolve(st, PyList_GET_ITEM(waiters, i), result, exc_type);
        }
    }
    Py_DECREF(waiters);
}

PyObject *
sk_asgi_add_waiter(sk_state *st, PyObject *loop, PyObject **slot)
{
    /* New reference: a new future of loop, added last to *slot; NULL with an exception. */
    PyObject *fut = PyObject_CallMethodNoArgs(loop, st->s_create_future);
    if (fut == NULL) {
        return NULL;
    }
    if (*slot == NULL) {
        *slot = Py_NewRef(fut);
        return fut;
    }
    if (!PyList_CheckExact(*slot)) {
        PyObject *list = PyList_New(1);
        if (list == NULL) {
            Py_DECREF(fut);
            return NULL;
        }
        PyList_SET_ITEM(list, 0, *slot); /* the slot's reference moves into the list */
        *slot = list;
    }
    if (PyList_Append(*slot, fut) < 0) {
        Py_DECREF(fut);
        return NULL;
    }
    return fut;
}

static int
serve_first(sk_state *st, PyObject *fut, int (*next)(void *, PyObject **), void *obj,
            PyObject **msg)
{
    /* For the first waiter fut (borrowed): 1 when it leaves its place (it was done, i.e.
     * cancelled, and *msg stays NULL; or *msg holds its event, a new reference), 0 when it keeps
     * it (nothing ready, or a failure reported as unraisable). */
    *msg = NULL;
    PyObject *done = PyObject_CallMethodNoArgs(fut, st->s_done);
    if (done == NULL) {
        PyErr_WriteUnraisable(fut);
        return 0;
    }
    int is_done = (done == Py_True);
    Py_DECREF(done);
    if (is_done) {
        return 1;
    }
    int rc = next(obj, msg);
    if (rc < 0) {
        PyErr_WriteUnraisable(fut);
    }
    return rc > 0;
}

void
sk_asgi_wake_receivers(sk_state *st, PyObject **slot, int (*next)(void *, PyObject **), void *obj)
{
    PyObject *waiters = *slot;
    PyObject *msg = NULL;
    if (waiters == NULL) {
        return;
    }
    Py_INCREF(waiters); /* a future's callback may replace *slot */
    if (!PyList_CheckExact(waiters)) {
        if (serve_first(st, waiters, next, obj, &msg)) {
            if (*slot == waiters) {
                Py_CLEAR(*slot);
            }
            if (msg != NULL) {
                (void)sk_asgi_resolve(st, waiters, msg, NULL);
                Py_DECREF(msg);
            }
        }
        Py_DECREF(waiters);
        return;
    }
    while (PyList_GET_SIZE(waiters) > 0) {
        PyObject *fut = Py_NewRef(PyList_GET_ITEM(waiters, 0));
        if (!serve_first(st, fut, next, obj, &msg)) {
            Py_DECREF(fut);
            break; /* nothing ready for the first waiter: it keeps its place */
        }
        if (PySequence_DelItem(waiters, 0) < 0) {
            PyErr_WriteUnraisable(fut);
            Py_XDECREF(msg);
            Py_DECREF(fut);
            break;
        }
        if (msg != NULL) {
            (void)sk_asgi_resolve(st, fut, msg, NULL);
            Py_CLEAR(msg);
        }
        Py_DECREF(fut);
    }
    if (*slot == waiters && PyList_GET_SIZE(waiters) == 0) {
        Py_CLEAR(*slot);
    }
    Py_DECREF(waiters);
}
