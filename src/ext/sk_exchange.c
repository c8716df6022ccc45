/* sk_exchange.c — the ASGI `http` exchange (sk_exchange.h): the scope, receive(), validating
 * send() messages, the response state machine, fairness, disconnect semantics, the access record
 * and driving the app. The exchange is the coroutine its asyncio.Task runs, so it sees the app
 * end in the same step (500 before the response head, abort after it, quiet server-generated
 * disconnects and cancellations). Everything that reaches the peer goes through the wire's
 * table (sk_wire_ops_t); nothing here knows how the wire frames or times it.
 * Never: touches a transport, includes a wire's header, or lets an application's failure reach
 * another request or the server.
 */
#include "sk_exchange.h"

#include "sk_asgi.h"
#include "sk_resp.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define FAIRNESS_QUOTA 128 /* ready receive/send operations per request before one yield */

/* the request content: still coming, all arrived, all given to the app; or dropped unread
 * (sk_exchange_drop_body: receive() then says http.disconnect) */
enum rx_state { RX_BODY = 0, RX_COMPLETE, RX_DELIVERED, RX_DROPPED };
enum tx_state { TX_OPEN = 0, TX_COMPLETE, TX_FAILED, TX_GONE };
enum app_state { APP_NEW = 0, APP_STARTED, APP_RUNNING, APP_DONE };

typedef struct sk_exchange RequestObject;

struct sk_exchange {
    PyObject_HEAD sk_state *st;
    PyObject *owner;          /* strong: the Server, keeping srv alive */
    sk_serve_t *srv;          /* borrowed from owner */
    const sk_wire_ops_t *ops; /* the wire's table (static storage) */
    void *wire;               /* the wire's pointer; NULL once detached (end, sk_exchange_gone) */
    PyObject *task;           /* strong while running: the asyncio.Task whose coroutine is this */
    PyObject *coro;           /* strong while running: what the app call returned, driven by this */
    PyObject *receive_waiters; /* futures waiting in receive() (a waiter slot, sk_asgi.h) */
    PyObject *drain_waiters;   /* futures waiting in send() for output to drain (a slot) */
    PyObject *body;            /* list of bytes not yet delivered by receive() */
    PyObject *scope;           /* built at the head, handed to the app at the first step */
    PyObject *ext;             /* strong: scope["extensions"], recycled when the request is freed */
    size_t body_buffered;      /* bytes in body */
    unsigned ops_count;        /* ready operations since the last yield (fairness quota) */
    enum rx_state rx;
    enum tx_state tx;
    enum app_state app;
    int status;                /* the final status, once started */
    uint8_t extras;            /* the wire sends interim responses and trailers (head.extras) */
    uint8_t is_head;           /* method HEAD */
    uint8_t started;           /* http.response.start was accepted */
    uint8_t trailers;          /* ... and announced trailers */
    uint8_t body_done;         /* the final body (or file) piece was accepted */
    uint8_t raised_disconnect; /* skirr raised ClientDisconnected into the app (not logged) */
    uint8_t stepping; /* inside a step, throw() or close() of the app's coroutine: the app driving
                       * its own request (Task.get_coro()) is refused */
    uint8_t in_send;  /* a send() is reading its message (which may run app code) */
    sk_access_req_t acc; /* the access log's record (sk_access.h), while the log is on */
    PyObject *client;    /* strong: the scope's client, kept only for --log-level trace with the
                          * access log off and --proxy-headers on (sk_exchange_client), or NULL */
};

/* ---- state transitions ---------------------------------------------------------------------- */

static void
set_rx(RequestObject *r, enum rx_state to)
{
    assert(to > r->rx);
    r->rx = to;
}

static void
set_tx(RequestObject *r, enum tx_state to)
{
    assert(r->tx == TX_OPEN && to != TX_OPEN); /* every end of a response is final */
    r->tx = to;
    if (r->acc.scope == NULL && r->srv->metrics == NULL) {
        return;
    }
    uint64_t body_sent = 0;
    int head_out = r->wire != NULL && (r->ops->progress(r->wire, &body_sent) & SK_WIRE_HEAD_OUT);
    if (head_out || to == TX_COMPLETE) {
        /* the access log and metrics: what the client saw (a 500 skirr sent for the app, if no
         * head left) */
        int status = head_out ? r->status : 500;
        /* content bytes: the app's, or those of skirr's 500 (answer_500), as for a refusal */
        uint64_t sent = head_out ? body_sent : sk_resp_error_content_length(500, r->is_head);
        sk_access_exchange_end(&r->srv->access, &r->acc, status, sent);
    }
}

/* The only place active_requests changes (+1 entering STARTED, -1 leaving STARTED/RUNNING) and
 * unstarted (+1 entering STARTED, -1 leaving it). */
static void
set_app(RequestObject *r, enum app_state to)
{
    assert(to > r->app);
    enum app_state from = r->app;
    int was_running = (from == APP_STARTED || from == APP_RUNNING);
    int running = (to == APP_STARTED || to == APP_RUNNING);
    r->app = to;
    if (running && !was_running) {
        SK_ADD(r->srv->active_requests, 1);
    }
    else if (was_running && !running) {
        SK_ADD(r->srv->active_requests, -1);
    }
    assert(SK_LOAD(r->srv->active_requests) >= 0);
    SK_ADD(r->srv->unstarted, (to == APP_STARTED) - (from == APP_STARTED));
    assert(SK_LOAD(r->srv->unstarted) >= 0);
}

/* ---- the response's end -------------------------------------------------------------------- */

static void
answer_500(RequestObject *r)
{
    /* Answers r with 500 (RFC 9110 §15.6.1) through the wire, which closes after it: nothing of
     * the app's response reached the output. */
    void *w = r->wire;
    Py_CLEAR(r->acc.resp_headers); /* the app's head is not what goes out: %({name}o)s is "-" */
    if (r->ops->error(w, 500) < 0) {
        return; /* the wire closed: sk_exchange_gone() ran */
    }
    set_tx(r, TX_COMPLETE);
    r->wire = NULL;
    (void)r->ops->end(w);
}

static void
abort_response(RequestObject *r, int flags)
{
    /* The app failed mid-response (flags: progress()'s): end it without the message ever
     * looking complete. */
    r->ops->abort(r->wire, (flags & SK_WIRE_HEAD_OUT) && (flags & SK_WIRE_CLOSE_ENDS));
}

/* The response cannot be completed: a clean 500 if nothing of it was written, else an abort
 * (never a message that looks complete). */
static void
fail_response(RequestObject *r)
{
    uint64_t sent;
    int flags = r->ops->progress(r->wire, &sent);
    if (flags & SK_WIRE_HEAD_OUT) {
        set_tx(r, TX_FAILED);
        abort_response(r, flags); /* the message must never look complete */
    }
    else {
        answer_500(r); /* nothing of it was written: the client gets a clean 500 */
    }
}

/* ---- scope ---------------------------------------------------------------------------------- */

/* The response extensions skirr implements (ASGI www 2.5 extensions), in scope order. Early
 * hints and trailers need a wire with interim responses and trailer sections (head.extras; not
 * HTTP/1.0: RFC 8297 §2, no 1xx to HTTP/1.0, and a trailer section needs chunked), so without
 * it a request is offered only the first two, the file extensions. The ring is chosen by the
 * same flag (srv->ext_ring[extras]). */
#define EXT_COUNT(extras) ((extras) ? 4 : 2)

static inline PyObject *
ext_name(sk_state *st, size_t i)
{
    /* Borrowed reference: the i-th extension's name (i < 4). */
    PyObject *names[] = {st->s_http_response_pathsend, st->s_http_response_zerocopysend,
                         st->s_http_response_trailers, st->s_http_response_early_hint};
    return names[i];
}

static PyObject *
ext_pop(sk_ext_ring_t *r)
{
    /* New reference (the ring's, moved): the oldest dict in r, taken out; r is not empty. */
    PyObject *ext = r->item[r->head];
    r->item[r->head] = NULL;
    r->sealed[r->head] = 0;
    r->head = (r->head + 1) % SK_EXT_RING;
    r->n--;
    return ext;
}

static void
ext_push(sk_ext_ring_t *r, PyObject *ext, int sealed)
{
    /* Puts ext (the reference moves) last in r; r is not full. `sealed`: see sk_ext_ring_t. */
    unsigned i = (r->head + r->n) % SK_EXT_RING;
    r->item[i] = ext;
    r->sealed[i] = (uint8_t)sealed;
    r->n++;
}

static inline int
tls_value_ok(PyObject *value, int alone)
{
    /* 1 when value, in a scope["extensions"]["tls"] dict, is of a kind tls_copy puts there and
     * replacing it releases nothing that runs code: an exact str, int or None, or an exact list
     * of exact str (client_cert_chain; with `alone`, referenced by the dict alone). */
    if (!PyList_CheckExact(value)) {
        return value == Py_None || PyUnicode_CheckExact(value) || PyLong_CheckExact(value);
    }
    if (alone && Py_REFCNT(value) != 1) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(value, i))) {
            return 0;
        }
    }
    return 1;
}

static int
tls_as_made(PyObject *v, int alone)
{
    /* 1 when v, a scope["extensions"]["tls"] dict, is an exact dict holding only values
     * tls_value_ok accepts (with `alone`, v referenced by its container alone too). The keys
     * are tls_refill's to check. Else 0. */
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    int ok = PyDict_CheckExact(v) && (!alone || Py_REFCNT(v) == 1);
    while (ok && PyDict_Next(v, &pos, &name, &value)) {
        ok = tls_value_ok(value, alone);
    }
    return ok;
}

static int
tls_refill(PyObject *v, PyObject *tls)
{
    /* Makes v (an exact dict referenced by its container alone) equal to what tls_copy(tls)
     * would make, in place, in one pass: each of v's values must pass tls_value_ok (alone) and
     * sit under the same key (the same interned object, sk_tls_info's) at the same place as in
     * tls; it is then replaced by tls's (the list's items copied into v's own list). Releases
     * only str and int objects. 1 done; 0 v is not of that shape (maybe refilled in part, still
     * holding only values tls_value_ok accepts but the one found wrong: ext_recycle drops it
     * once it is the oldest); -1 with an exception. */
    Py_ssize_t pa = 0, pb = 0;
    PyObject *ka, *va, *kb, *vb;
    if (PyDict_GET_SIZE(v) != PyDict_GET_SIZE(tls)) {
        return 0;
    }
    while (PyDict_Next(v, &pa, &ka, &va) && PyDict_Next(tls, &pb, &kb, &vb)) {
        if (ka != kb || !tls_value_ok(va, 1) || PyList_CheckExact(va) != PyList_Check(vb)) {
            return 0;
        }
        if (va == vb) {
            continue;
        }
        if (PyList_CheckExact(va)) {
            if (PyList_SetSlice(va, 0, PyList_GET_SIZE(va), vb) < 0) {
                return -1;
            }
        }
        else if (PyDict_SetItem(v, ka, vb) < 0) { /* an existing key: no resize, order kept */
            return -1;
        }
    }
    return 1;
}

static int
ext_as_made(sk_state *st, PyObject *ext, uint8_t extras, int alone, int tls)
{
    /* 1 when ext, a scope["extensions"] ext_scope made, holds exactly the names it was made
     * with, in order, each an exact empty dict, then, when `tls` (a TLS request's), "tls" with
     * a dict as made (tls_as_made), so it reads as a new one would (its tls entry once
     * refilled); with `alone`, also when ext is referenced by the caller alone and each value
     * by ext alone, so no one can reach it or anything in it: then handing it to the next
     * request is indistinguishable from making a new one. Else 0. `tls` 2: as 1, but of the
     * tls entry only that it is an exact dict (alone): the caller's tls_refill checks the rest
     * as it refills. */
    Py_ssize_t pos = 0;
    size_t i = 0;
    PyObject *name, *value;
    int ok = (!alone || Py_REFCNT(ext) == 1) &&
             PyDict_GET_SIZE(ext) == (Py_ssize_t)EXT_COUNT(extras) + (tls != 0);
    while (ok && PyDict_Next(ext, &pos, &name, &value)) {
        if (i == EXT_COUNT(extras)) {
            ok = name == st->s_tls &&
                 (tls == 2 ? PyDict_CheckExact(value) && (!alone || Py_REFCNT(value) == 1)
                           : tls_as_made(value, alone));
            break;
        }
        ok = name == ext_name(st, i++) && PyDict_CheckExact(value) &&
             (!alone || Py_REFCNT(value) == 1) && PyDict_GET_SIZE(value) == 0;
    }
    return ok;
}

static inline int
ext_sealed_intact(PyObject *ext, uint8_t extras, int tls)
{
    /* 1 when ext, sealed when put in line (sk_ext_ring_t), still holds as many entries as it was
     * made with. Only the garbage collector can have changed it since: a Request freed in a
     * collection puts its dict in line alone, while the dict is still among the unreachable
     * objects the collector clears next (tp_clear empties it). Emptying is all that leaves
     * possible: its tls entry and that entry's certificate list are held by ext alone, so when
     * the collector clears one of them it clears ext (tracked whenever they are) too. */
    return PyDict_GET_SIZE(ext) == (Py_ssize_t)EXT_COUNT(extras) + (tls != 0);
}

#ifdef Py_GIL_DISABLED
static int
ext_as_made_shared(sk_state *st, PyObject *ext, uint8_t extras, int tls)
{
    /* ext_as_made(st, ext, extras, 0, tls) for a dict other threads may hold and change without
     * the GIL (an app's thread, through the scope): ext and its tls entry are read under their
     * critical sections (taken together, through a strong reference to the entry), so no
     * borrowed value is freed while it is read; the entry's list (client_cert_chain) under its
     * own. */
    PyObject *tv = NULL, *name, *value;
    Py_ssize_t pos = 0;
    size_t i = 0;
    int ok = 1;
    if (tls && PyDict_GetItemRef(ext, st->s_tls, &tv) <= 0) {
        PyErr_Clear();
        return 0;
    }
    Py_BEGIN_CRITICAL_SECTION2(ext, tv != NULL ? tv : ext);
    ok = PyDict_GET_SIZE(ext) == (Py_ssize_t)EXT_COUNT(extras) + (tls != 0);
    while (ok && PyDict_Next(ext, &pos, &name, &value)) {
        if (i == EXT_COUNT(extras)) {
            /* the entry fetched above, still (else it is not locked: not read) */
            ok = name == st->s_tls && value == tv && PyDict_CheckExact(tv);
            Py_ssize_t tpos = 0;
            PyObject *tname, *tval;
            while (ok && PyDict_Next(tv, &tpos, &tname, &tval)) {
                if (!PyList_CheckExact(tval)) {
                    ok = tval == Py_None || PyUnicode_CheckExact(tval) || PyLong_CheckExact(tval);
                    continue;
                }
                /* client_cert_chain: its items under its own lock, through a strong reference
                 * (taking it may suspend the two above; PyDict_Next goes on safely after) */
                PyObject *chain = Py_NewRef(tval);
                Py_BEGIN_CRITICAL_SECTION(chain);
                for (Py_ssize_t k = 0; ok && k < PyList_GET_SIZE(chain); k++) {
                    ok = PyUnicode_CheckExact(PyList_GET_ITEM(chain, k));
                }
                Py_END_CRITICAL_SECTION();
                Py_DECREF(chain);
            }
            break;
        }
        ok = name == ext_name(st, i++) && PyDict_CheckExact(value) && PyDict_GET_SIZE(value) == 0;
    }
    Py_END_CRITICAL_SECTION2();
    Py_XDECREF(tv);
    return ok;
}
#endif

static inline int
ext_tls(PyObject *ext, uint8_t extras)
{
    /* 1 when ext has an entry more than the extensions: the form of a TLS request's (its tls
     * entry, when ext_as_made says so). */
    return PyDict_GET_SIZE(ext) > (Py_ssize_t)EXT_COUNT(extras);
}

static inline sk_ext_ring_t *
ext_ring_of(sk_serve_t *srv, uint8_t extras, int tls)
{
    /* Borrowed: the ring of dicts of this form (sk_serve.h SK_EXT_RINGS). */
    return &srv->ext_ring[(extras != 0) + 2 * (tls != 0)];
}

static PyObject *tls_copy(PyObject *tls);

static PyObject *
ext_scope(sk_serve_t *srv, uint8_t extras, PyObject *tls)
{
    /* New reference: scope["extensions"], each extension's value {}, and with `tls` (the
     * connection's dict, borrowed; NULL: not TLS) "tls": a copy of it (tls_copy). The oldest
     * dict of a finished request of the same form (ext_recycle) when the ring alone holds it
     * and it is as made (ext_as_made, or sealed when put in line; its tls entry then refilled
     * from `tls`: tls_refill); when
     * the oldest is still held (an access-log record not yet written, an app that kept it) it
     * goes to the back of the line once and the next is tried; else a new one. Releases nothing
     * but the str and int values a refill replaces, so no finalizer runs while a scope is built.
     * NULL with an exception. */
    sk_ext_ring_t *r = ext_ring_of(srv, extras, tls != NULL);
    for (int tries = 0; tries < 2 && r->n > 0; tries++) {
        PyObject *oldest = r->item[r->head];
        if (Py_REFCNT(oldest) == 1) {
            if (r->sealed[r->head]
                    ? !ext_sealed_intact(oldest, extras, tls != NULL)
                    : !ext_as_made(srv->st, oldest, extras, 1, tls != NULL ? 2 : 0)) {
                break; /* written to or kept from after it was put in line: ext_recycle drops it */
            }
            if (tls != NULL) {
                PyObject *v = PyDict_GetItemWithError(oldest, srv->st->s_tls); /* borrowed */
                int k = v != NULL ? tls_refill(v, tls) : (PyErr_Occurred() ? -1 : 0);
                if (k < 0) {
                    return NULL;
                }
                if (k == 0) {
                    break; /* an app wrote into it before it was free: ext_recycle drops it */
                }
            }
            SK_ADD(srv->ext_reused, 1);
            return ext_pop(r);
        }
        if (tries > 0 || r->n == 1) {
            break;
        }
        ext_push(r, ext_pop(r), 0); /* held: to the back of the line (once per call) */
    }
    PyObject *ext = PyDict_New(), *v = NULL;
    if (ext == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < EXT_COUNT(extras); i++) {
        PyObject *empty = PyDict_New();
        if (empty == NULL || PyDict_SetItem(ext, ext_name(srv->st, i), empty) < 0) {
            Py_XDECREF(empty);
            Py_DECREF(ext);
            return NULL;
        }
        Py_DECREF(empty);
    }
    if (tls != NULL) {
        /* the connection's, copied (its certificate list too) so no request sees another's
         * changes */
        v = tls_copy(tls);
        if (v == NULL || PyDict_SetItem(ext, srv->st->s_tls, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(ext);
            return NULL;
        }
        Py_DECREF(v);
    }
    return ext;
}

static void
ext_recycle(sk_serve_t *srv, PyObject *ext, uint8_t extras)
{
    /* Takes ext (a strong reference, or NULL) from a request that is being freed. Released now
     * when it no longer reads as made (an app wrote into it), else put last in the ring, after
     * releasing the oldest dicts that are free but no longer as made and, when full, the
     * oldest of all. Whether it is handed out again is decided when it is the oldest
     * (ext_scope), unless it is sealed now (the ring's alone and as made: sk_ext_ring_t): an
     * app that kept the dict, one of its values or the scope never shares it with a later
     * request. Releasing may run code (a finalizer an app stored in a dict); the
     * ring is consistent around every release. */
    if (ext == NULL) {
        return;
    }
    int tls = ext_tls(ext, extras); /* its ring: TLS requests' dicts apart */
#ifdef Py_GIL_DISABLED
    /* without the GIL another thread may hold it (an app's, through the scope) and change it;
     * never sealed there: every check is made under the dicts' critical sections */
    int sealed = 0;
    int unfit = !ext_as_made_shared(srv->st, ext, extras, tls);
#else
    /* ours alone and as made: sealed, only its size looked at again (ext_sealed_intact) */
    int sealed = Py_REFCNT(ext) == 1 && ext_as_made(srv->st, ext, extras, 1, tls);
    int unfit = !sealed && !ext_as_made(srv->st, ext, extras, 0, tls);
#endif
    if (unfit) {
        Py_DECREF(ext);
        return;
    }
    sk_ext_ring_t *r = ext_ring_of(srv, extras, tls);
    while (r->n > 0 &&
           (r->n == SK_EXT_RING ||
            (Py_REFCNT(r->item[r->head]) == 1 &&
             (r->sealed[r->head] ? !ext_sealed_intact(r->item[r->head], extras, tls)
                                 : !ext_as_made(srv->st, r->item[r->head], extras, 1, tls))))) {
        Py_DECREF(ext_pop(r)); /* re-checked after: the release may have pushed others */
    }
    ext_push(r, ext, sealed);
}

void
sk_exchange_ext_clear(sk_serve_t *srv)
{
    /* Releases every dict the rings hold (the owner's tp_clear). */
    for (int v = 0; v < SK_EXT_RINGS; v++) {
        while (srv->ext_ring[v].n > 0) {
            Py_DECREF(ext_pop(&srv->ext_ring[v]));
        }
    }
}

static PyObject *
tls_copy(PyObject *tls)
{
    /* New reference: a copy of the connection's `tls` extension dict with its own
     * client_cert_chain list; NULL with an exception. */
    PyObject *d = PyDict_Copy(tls), *chain = NULL;
    if (d == NULL) {
        return NULL;
    }
    PyObject *old = PyDict_GetItemString(d, "client_cert_chain"); /* borrowed */
    if (old != NULL && PyList_Check(old)) {
        chain = PyList_GetSlice(old, 0, PyList_GET_SIZE(old));
        if (chain == NULL || PyDict_SetItemString(d, "client_cert_chain", chain) < 0) {
            Py_XDECREF(chain);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(chain);
    }
    return d;
}

PyObject *
sk_exchange_scope(sk_serve_t *srv, const sk_req_head_t *h, PyObject **ext_out)
{
    /* New reference: the request's scope dict; NULL with an exception. With ext_out, it also
     * receives a new reference to scope["extensions"] (for ext_recycle). */
    sk_state *st = srv->st;
    PyObject *scope = NULL, *v = NULL, *ext = NULL;

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
    if (h->http_major == 1 && h->http_minor == 0) {
        SET(st->s_http_version, Py_NewRef(st->s_1_0));
    }
    else if (h->http_major == 2) { /* one shared str, not one formatted per stream */
        SET(st->s_http_version, Py_NewRef(st->s_2));
    }
    else if (h->http_major != 1) {
        SET(st->s_http_version, PyUnicode_FromFormat("%d", (int)h->http_major));
    }
    if (h->method >= 0 && h->method < SK_METHOD_CACHE && st->methods[h->method] != NULL) {
        SET(st->s_method, Py_NewRef(st->methods[h->method]));
    }
    else {
        SET(st->s_method, PyUnicode_FromString(h->method_name));
    }
    if (h->https) {
        SET(st->s_scheme, Py_NewRef(st->s_https));
    }
    const char *path_p = h->path;
    size_t plen = h->path_len;
    SET(st->s_path, sk_asgi_path(srv->root_path, path_p, plen));
    Py_ssize_t rlen = PyBytes_GET_SIZE(srv->root_path_b);
    if (rlen == 0) {
        SET(st->s_raw_path, PyBytes_FromStringAndSize(path_p, (Py_ssize_t)plen));
    }
    else {
        v = PyBytes_FromStringAndSize(NULL, rlen + (Py_ssize_t)plen);
        if (v == NULL) {
            goto error;
        }
        memcpy(PyBytes_AS_STRING(v), PyBytes_AS_STRING(srv->root_path_b), (size_t)rlen);
        memcpy(PyBytes_AS_STRING(v) + rlen, path_p, plen);
        if (PyDict_SetItem(scope, st->s_raw_path, v) < 0) {
            goto error;
        }
        Py_CLEAR(v);
    }
    if (h->query != NULL) {
        SET(st->s_query_string, PyBytes_FromStringAndSize(h->query, (Py_ssize_t)h->query_len));
    }
    else {
        SET(st->s_query_string, Py_NewRef(st->empty_bytes));
    }
    SET(st->s_root_path, Py_NewRef(srv->root_path));
    SET(st->s_headers, sk_asgi_headers(st, &h->fields, h->has_host, h->authority, h->authority_len,
                                       &srv->last_host));
    if (srv->proxy.enabled) {
        /* --proxy-headers: a trusted peer's Forwarded / X-Forwarded-* (sk_proxy.h) */
        PyObject *client = h->client;
        int https = -1;
        if (sk_proxy_apply(&srv->proxy, &h->fields, h->peer, srv->unix_path != Py_None, &client,
                           &https) < 0) {
            goto error;
        }
        if (https >= 0) {
            SET(st->s_scheme, https ? Py_NewRef(st->s_https) : PyUnicode_FromString("http"));
        }
        SET(st->s_client, client == h->client ? Py_NewRef(client) : client);
    }
    else {
        SET(st->s_client, Py_NewRef(h->client));
    }
    SET(st->s_server, Py_NewRef(h->server));
    ext = ext_scope(srv, h->extras, h->tls); /* kept to the end: ext_out's */
    if (ext == NULL || PyDict_SetItem(scope, st->s_extensions, ext) < 0) {
        goto error;
    }
    if (srv->state != Py_None) {
        SET(st->s_state, PyDict_Check(srv->state)
                             ? PyDict_Copy(srv->state)
                             : PyObject_CallMethodNoArgs(srv->state, st->s_copy));
    }
#undef SET
    if (ext_out != NULL) {
        *ext_out = ext; /* the reference moves */
    }
    else {
        Py_DECREF(ext);
    }
    return scope;
error:
    Py_XDECREF(v);
    Py_XDECREF(ext);
    Py_XDECREF(scope);
    return NULL;
}

/* ---- request helpers ------------------------------------------------------------------------ */

static PyObject *
ready(RequestObject *r, PyObject *value)
{
    /* New reference: an awaitable returning value (stolen; NULL = None). After FAIRNESS_QUOTA
     * ready operations of this request it yields to the loop once first. */
    if (++r->ops_count >= FAIRNESS_QUOTA) {
        r->ops_count = 0;
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

static PyObject *
add_waiter(RequestObject *r, PyObject **list)
{
    /* New reference: a new future of the loop added to the waiter slot (sk_asgi_add_waiter). */
    return sk_asgi_add_waiter(r->st, r->srv->loop, list);
}

static PyObject *
sent_or_wait(RequestObject *r, int rc)
{
    /* New reference: what a send() that wrote and may be repeated returns (a body chunk with
     * more_body, an early hint), from the wire's answer rc (push, interim): a waiter while the
     * wire's unsent output is over its mark or a file range is being sent (SK_WIRE_WAIT; the
     * wire's sk_exchange_drained() resolves it), else a completed awaitable; NULL with an
     * exception. Rule skirr-flow-every-send-waits: a client that reads nothing cannot make the
     * app queue without bound. */
    if (r->wire == NULL) {
        /* the wire let the exchange go during the call that answered rc (sk_exchange_gone ran:
         * the stream or the connection was lost meanwhile): a waiter would wait for good */
        return raise_disconnected(r);
    }
    if (rc == SK_WIRE_WAIT) {
        return add_waiter(r, &r->drain_waiters); /* each sender waits: one slot for all */
    }
    return ready(r, NULL);
}

/* Every waiter of a request that will get no more events: receive() gets http.disconnect (or
 * what is left of the body), send() waiting for drain completes (the response is complete) or
 * raises ClientDisconnected (it is not). */
static void wake_receivers(RequestObject *r);

static void
release_waiters(RequestObject *r)
{
    wake_receivers(r);
    if (r->drain_waiters != NULL) {
        int ok = (r->tx == TX_COMPLETE);
        if (!ok) {
            r->raised_disconnect = 1;
        }
        sk_asgi_resolve_all(r->st, &r->drain_waiters, Py_None,
                            ok ? NULL : r->st->ClientDisconnected);
    }
}

/* ---- receive -------------------------------------------------------------------------------- */

static int
next_message(RequestObject *r, PyObject **out)
{
    /* The next receive() event if one is ready: 1 (new reference in *out), 0 (none yet), -1
     * (exception set). */
    sk_state *st = r->st;
    PyObject *msg = NULL, *data = NULL;
    *out = NULL;
    /* ASGI www 2.5 "Disconnect - receive event": after the response was sent, http.disconnect,
     * even with content the app never read (skirr reads and drops it, or closes). */
    if ((r->body_buffered > 0 || r->rx == RX_COMPLETE) && r->tx != TX_COMPLETE) {
        Py_ssize_t n = r->body ? PyList_GET_SIZE(r->body) : 0;
        if (n == 0) {
            data = Py_NewRef(st->empty_bytes);
        }
        else if (n == 1) {
            data = Py_NewRef(PyList_GET_ITEM(r->body, 0));
        }
        else {
            data = PyObject_CallMethodOneArg(st->empty_bytes, st->s_join, r->body);
        }
        if (data == NULL || (r->body && PyList_SetSlice(r->body, 0, n, NULL) < 0)) {
            goto error;
        }
        r->body_buffered = 0;
        int more = (r->rx == RX_BODY);
        msg = PyDict_New();
        if (msg == NULL || PyDict_SetItem(msg, st->s_type, st->s_http_request) < 0 ||
            PyDict_SetItem(msg, st->s_body, data) < 0 ||
            PyDict_SetItem(msg, st->s_more_body, more ? Py_True : Py_False) < 0) {
            goto error;
        }
        if (!more) {
            set_rx(r, RX_DELIVERED);
        }
        Py_DECREF(data);
        if (r->wire != NULL && r->ops->resume(r->wire, 0) < 0) {
            /* flow control: the body was consumed, so the wire reads more */
            goto error;
        }
        *out = msg;
        return 1;
    }
    if (r->tx != TX_OPEN || r->wire == NULL) {
        msg = PyDict_Copy(st->disconnect_msg);
        if (msg == NULL) {
            return -1;
        }
        *out = msg;
        return 1;
    }
    return 0;
error:
    Py_XDECREF(data);
    Py_XDECREF(msg);
    return -1;
}

static int
next_message_of(void *r, PyObject **out)
{
    return next_message((RequestObject *)r, out);
}

static void
wake_receivers(RequestObject *r)
{
    /* Hands the events that are ready to the waiting receive() calls, first come first served;
     * once the exchange is over every waiter gets http.disconnect (sk_asgi_wake_receivers). */
    sk_asgi_wake_receivers(r->st, &r->receive_waiters, next_message_of, r);
}

static PyObject *
request_receive(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference: an awaitable for the next event (ASGI www 2.5 http.request /
     * http.disconnect); NULL with an exception. Concurrent receive() calls are served in the
     * order they were made. */
    RequestObject *r = (RequestObject *)op;
    PyObject *msg = NULL;
    if (sk_serve_check_thread(r->srv, "receive()", SK_ASGI_THREAD_HINT) < 0) {
        return NULL; /* before anything is read or changed */
    }
    if (sk_asgi_waiting(r->receive_waiters) == 0) {
        int rc = next_message(r, &msg);
        if (rc != 0) {
            return rc > 0 ? ready(r, msg) : NULL;
        }
    }
    if (r->wire != NULL) {
        /* the app waits for content: a wire holding it back until asked asks now (HTTP/1.1:
         * 100 Continue, RFC 9110 §10.1.1) */
        if (r->ops->resume(r->wire, 1) < 0) {
            return PyErr_NoMemory();
        }
        if (r->wire == NULL) { /* the wire found the peer gone */
            return ready(r, PyDict_Copy(r->st->disconnect_msg));
        }
    }
    return add_waiter(r, &r->receive_waiters);
}

/* ---- send ----------------------------------------------------------------------------------- */

static int
fields_from(PyObject *headers, sk_header_t *stack, size_t nstack, sk_header_t **out,
            PyObject **keep_out, Py_ssize_t *n_out)
{
    /* ASGI `headers` (an iterable of [name, value] bytes pairs) as serializer fields: *out is
     * `stack` or, for more than nstack, a PyMem array the caller frees when it is not `stack`;
     * *keep_out (new reference, also on failure when made) keeps every name and value alive.
     * Snapshots (tuples) of the list and of each pair: converting a pair may run the app's code
     * (__iter__), which must not be able to free a name or value already taken. 0, or -1 with
     * TypeError. */
    PyObject *seq = PySequence_Tuple(headers);
    int rc = -1;
    if (seq == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_SetString(PyExc_TypeError,
                            "ASGI 'headers' must be an iterable of [name, value] pairs");
        }
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    sk_header_t *hdrs = stack;
    *keep_out = PyTuple_New(n);
    if (*keep_out == NULL) {
        goto done;
    }
    if (n > (Py_ssize_t)nstack) {
        hdrs = PyMem_Malloc((size_t)n * sizeof(sk_header_t));
        if (hdrs == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        *out = hdrs;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Tuple(PyTuple_GET_ITEM(seq, i));
        if (pair == NULL) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_SetString(PyExc_TypeError, "each ASGI header must be a [name, value] pair");
            }
            goto done;
        }
        PyTuple_SET_ITEM(*keep_out, i, pair); /* keep owns it: alive until the head is built */
        if (PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "each ASGI header must be a [name, value] pair");
            goto done;
        }
        PyObject *name = PyTuple_GET_ITEM(pair, 0);  /* borrowed from pair */
        PyObject *value = PyTuple_GET_ITEM(pair, 1); /* borrowed from pair */
        if (!PyBytes_Check(name) || !PyBytes_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "ASGI header names and values must be bytes");
            goto done;
        }
        hdrs[i].name = PyBytes_AS_STRING(name);
        hdrs[i].name_len = (size_t)PyBytes_GET_SIZE(name);
        hdrs[i].value = PyBytes_AS_STRING(value);
        hdrs[i].value_len = (size_t)PyBytes_GET_SIZE(value);
    }
    *n_out = n;
    rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

static int start_trailers(RequestObject *r, PyObject *msg, int *trailers);

static PyObject *
send_start(RequestObject *r, PyObject *msg)
{
    /* New reference to the completion awaitable, or NULL with an exception. */
    sk_header_t stack_hdrs[32];
    sk_header_t *hdrs = stack_hdrs;
    PyObject *status_o = NULL, *headers = NULL, *keep = NULL, *res = NULL;
    if (r->started) {
        PyErr_SetString(
            PyExc_RuntimeError,
            "Unexpected ASGI message 'http.response.start' sent, after response already started.");
        goto error;
    }
    if (r->wire == NULL || r->tx == TX_GONE) {
        raise_disconnected(r);
        goto error;
    }
    int rc = sk_asgi_msg_get(msg, r->st->s_status, &status_o);
    if (rc <= 0) {
        if (rc == 0) {
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
    if (sk_asgi_msg_get(msg, r->st->s_headers, &headers) < 0) {
        goto error;
    }
    Py_ssize_t n = 0;
    if (headers != NULL &&
        fields_from(headers, stack_hdrs, sizeof(stack_hdrs) / sizeof(stack_hdrs[0]), &hdrs, &keep,
                    &n) < 0) {
        goto error;
    }
    if (r->wire == NULL) { /* the conversions above ran Python code, which may have closed it */
        raise_disconnected(r);
        goto error;
    }
    int trailers = 0;
    if (start_trailers(r, msg, &trailers) < 0) {
        goto error;
    }
    if (r->wire == NULL) { /* so did its __bool__ */
        raise_disconnected(r);
        goto error;
    }
    rc = r->ops->start(r->wire, (int)status, hdrs, (size_t)n, trailers);
    if (rc == 0) {
        r->started = 1;
        r->status = (int)status;
        r->trailers = (uint8_t)trailers;
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
    if (r->acc.scope != NULL && headers != NULL) {
        Py_XSETREF(r->acc.resp_headers, Py_NewRef(headers)); /* %({name}o)s of the access log */
    }
    res = ready(r, NULL);
    goto done;
error:
    res = NULL;
done:
    if (hdrs != stack_hdrs) {
        PyMem_Free(hdrs);
    }
    Py_XDECREF(status_o);
    Py_XDECREF(headers);
    Py_XDECREF(keep);
    return res;
}

/* A body (or file) event the serializer refused: rc is its SK_E* code; a length mismatch fails
 * the response. Always sets the exception send() raises. */
static void
body_refused(RequestObject *r, int rc)
{
    if (rc == SK_ETOOLONG || rc == SK_ETOOSHORT) {
        fail_response(r);
        PyErr_SetString(PyExc_RuntimeError, rc == SK_ETOOLONG
                                                ? "Response content longer than Content-Length"
                                                : "Response content shorter than Content-Length");
    }
    else if (rc == SK_ENOMEM || rc == SK_WIRE_BROKEN) {
        if (rc == SK_WIRE_BROKEN && r->wire != NULL) {
            fail_response(r); /* part of it is out: it must never look complete */
        }
        PyErr_NoMemory();
    }
    else if (rc == SK_WIRE_BUSY) {
        if (r->wire != NULL) {
            fail_response(r);
        }
        PyErr_SetString(PyExc_RuntimeError, "a file range is still being sent");
    }
    else {
        PyErr_SetString(PyExc_RuntimeError, sk_strerror(rc));
    }
}

/* 0 if a body-like event of `type` may be sent now, else -1 with the exception send() raises. */
static int
body_allowed(RequestObject *r, const char *type)
{
    if (!r->started) {
        PyErr_Format(PyExc_RuntimeError,
                     "Unexpected ASGI message '%s' sent, before 'http.response.start'.", type);
        return -1;
    }
    if (r->tx == TX_COMPLETE || r->tx == TX_FAILED) {
        PyErr_Format(PyExc_RuntimeError,
                     "Unexpected ASGI message '%s' sent, after response already completed.", type);
        return -1;
    }
    if (r->wire == NULL || r->tx == TX_GONE) {
        raise_disconnected(r);
        return -1;
    }
    return 0;
}

static PyObject *
response_queued(RequestObject *r, int more)
{
    /* New reference: the completion awaitable of a send() whose bytes the wire just queued
     * (more = 0: they complete the response); NULL with ClientDisconnected. Hands them to the
     * wire (push, or end for the last), finishes the exchange when complete, and applies
     * backpressure otherwise. */
    if (r->wire == NULL) {
        /* the wire let the exchange go while it queued them (sk_exchange_gone ran): the response
         * cannot complete */
        return raise_disconnected(r);
    }
    if (!more) {
        set_tx(r, TX_COMPLETE);
        void *w = r->wire;
        r->wire = NULL; /* detached: the wire goes on to its next request */
        if (r->ops->end(w) < 0) {
            return raise_disconnected(r);
        }
        release_waiters(r); /* receive() sees http.disconnect; senders waiting for drain go on */
        return ready(r, NULL);
    }
    int rc = r->ops->push(r->wire); /* may write, and the write may lose the wire */
    if (rc < 0) {
        return raise_disconnected(r);
    }
    return sent_or_wait(r, rc);
}

static PyObject *
send_body(RequestObject *r, PyObject *msg)
{
    /* New reference to the completion awaitable (a Future while draining), or NULL with an
     * exception. */
    PyObject *body = NULL, *more_o = NULL, *res = NULL;
    Py_buffer view = {0};
    int have_view = 0;
    if (body_allowed(r, "http.response.body") < 0) {
        goto error;
    }
    if (sk_asgi_msg_get(msg, r->st->s_body, &body) < 0) {
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
    if (sk_asgi_msg_get(msg, r->st->s_more_body, &more_o) < 0) {
        goto error;
    }
    int more = more_o ? PyObject_IsTrue(more_o) : 0;
    if (more < 0) {
        goto error;
    }
    if (r->wire == NULL) { /* the conversions above ran Python code, which may have closed it */
        raise_disconnected(r);
        goto error;
    }
    int rc;
    if (have_view && !more && view.len >= SK_BODY_BY_REF_MIN && PyBytes_CheckExact(body)) {
        rc = r->ops->body_ref(r->wire, body, 0);
    }
    else {
        rc = r->ops->body(r->wire, have_view ? view.buf : "", have_view ? (size_t)view.len : 0,
                          more);
    }
    if (rc < 0) {
        body_refused(r, rc);
        goto error;
    }
    r->body_done = !more;
    /* the final body completes the response, unless trailers were announced (they do) */
    res = response_queued(r, more || r->trailers);
    goto done;
error:
    res = NULL;
done:
    if (have_view) {
        PyBuffer_Release(&view);
    }
    Py_XDECREF(body);
    Py_XDECREF(more_o);
    return res;
}

/* ---- send: the response extensions (ASGI www 2.5 extensions) ------------------------------- */

static int
start_trailers(RequestObject *r, PyObject *msg, int *trailers)
{
    /* http.response.start's `trailers` (default False) into *trailers. 0, or -1 with an
     * exception. */
    PyObject *v = NULL;
    int rc = sk_asgi_msg_get(msg, r->st->s_trailers, &v);
    *trailers = 0;
    if (rc <= 0) {
        return rc;
    }
    *trailers = PyObject_IsTrue(v);
    Py_DECREF(v);
    return *trailers < 0 ? -1 : 0;
}

static int
msg_offset(PyObject *msg, PyObject *key, const char *what, uint64_t *out)
{
    /* An optional non-negative int of a message: 1 (*out set), 0 (absent or None), -1 with
     * TypeError/ValueError. */
    PyObject *v = NULL;
    int rc = sk_asgi_msg_get(msg, key, &v);
    if (rc <= 0) {
        return rc;
    }
    if (v == Py_None) {
        Py_DECREF(v);
        return 0;
    }
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "ASGI '%s' must be an int, not %.100s", what,
                     Py_TYPE(v)->tp_name);
        Py_DECREF(v);
        return -1;
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "ASGI '%s' must be a non-negative int (bytes)", what);
        return -1;
    }
    *out = (uint64_t)u;
    return 1;
}

/* File systems whose files' stat size is not their length (procfs and debugfs report 0 for a file
 * with content, sysfs 4096 for a few bytes): what a file response sends from them would be empty
 * or cut short. statfs(2) f_type values, <linux/magic.h>. */
static const unsigned long PSEUDO_FS[] = {
    PROC_SUPER_MAGIC, SYSFS_MAGIC,    DEBUGFS_MAGIC,      TRACEFS_MAGIC,       SECURITYFS_MAGIC,
    SELINUX_MAGIC,    SMACK_MAGIC,    CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, BPF_FS_MAGIC,
    PSTOREFS_MAGIC,   EFIVARFS_MAGIC, BINFMTFS_MAGIC,
};

static int
on_pseudo_fs(int fd)
{
    /* 1 if the file open on `fd` lives on one of PSEUDO_FS, else 0 (also when fstatfs fails:
     * the size check and sendfile(2) still judge it). */
    struct statfs fs;
    if (fstatfs(fd, &fs) < 0) {
        return 0;
    }
    for (size_t i = 0; i < sizeof(PSEUDO_FS) / sizeof(PSEUDO_FS[0]); i++) {
        if ((unsigned long)fs.f_type == PSEUDO_FS[i]) {
            return 1;
        }
    }
    return 0;
}

static int
file_from_message(RequestObject *r, PyObject *msg, int by_path, int *fd, uint64_t *off,
                  uint64_t *count)
{
    /* Opens what a pathsend (by_path) or zerocopysend message names: *fd a new descriptor of
     * ours (O_CLOEXEC, blocking) on a regular file, *off and *count the range to send (bytes;
     * zerocopysend without `offset` starts at the file's position and moves it past the range,
     * as os.sendfile(offset=None) would). 0, or -1 with an exception: TypeError/ValueError for a
     * malformed message, RuntimeError naming the file for one that cannot be sent.
     * Nothing here can block the loop on what the app names: the path must be absolute (ASGI
     * extensions, Path Send: never resolved against the working directory), it is opened with
     * O_NONBLOCK (a FIFO with no writer, a tty or a device would otherwise block open(2)) and
     * O_NOCTTY, and the descriptor is judged by fstat(2) before anything reads it: only a
     * regular file, not on a pseudo file system (PSEUDO_FS), open for reading, is sent. */
    sk_state *st = r->st;
    PyObject *v = NULL, *path_b = NULL;
    const char *type = by_path ? "http.response.pathsend" : "http.response.zerocopysend";
    struct stat sb;
    int rc = sk_asgi_msg_get(msg, by_path ? st->s_path : st->s_file, &v);
    int have_off = 0, have_count = 0;
    *fd = -1;
    if (rc <= 0) {
        if (rc == 0) {
            PyErr_Format(PyExc_TypeError, "'%s' message is missing '%s'", type,
                         by_path ? "path" : "file");
        }
        goto error;
    }
    if (by_path) {
        if (!PyUnicode_FSConverter(v, &path_b)) {
            goto error;
        }
        if (PyBytes_AS_STRING(path_b)[0] != '/') {
            PyErr_Format(PyExc_RuntimeError, "%s: %R is not an absolute path", type, v);
            goto error;
        }
        *fd = open(PyBytes_AS_STRING(path_b), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (*fd < 0) {
            PyErr_Format(PyExc_RuntimeError, "%s: cannot open %R: %s", type, v, strerror(errno));
            goto error;
        }
    }
    else {
        int app_fd = PyObject_AsFileDescriptor(v); /* an int or an object with fileno() */
        if (app_fd < 0) {
            goto error;
        }
        *fd = fcntl(app_fd, F_DUPFD_CLOEXEC, 0); /* ours to close; the app keeps its own */
        if (*fd < 0) {
            PyErr_Format(PyExc_RuntimeError, "%s: file descriptor %d: %s", type, app_fd,
                         strerror(errno));
            goto error;
        }
        have_off = msg_offset(msg, st->s_offset, "offset", off);
        have_count = have_off < 0 ? -1 : msg_offset(msg, st->s_count, "count", count);
        if (have_off < 0 || have_count < 0) {
            goto error;
        }
    }
    if (fstat(*fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        PyErr_Format(PyExc_RuntimeError, "%s: %R is not a regular file", type, v);
        goto error;
    }
    if (on_pseudo_fs(*fd)) {
        PyErr_Format(PyExc_RuntimeError,
                     "%s: %R is on a pseudo file system (procfs, sysfs, ...) whose size is not "
                     "its length: read it and send http.response.body",
                     type, v);
        goto error;
    }
    int fl = fcntl(*fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY || (fl & O_PATH)) {
        PyErr_Format(PyExc_RuntimeError, "%s: %R is not open for reading", type, v);
        goto error;
    }
    if (by_path && fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        /* our own descriptor on a regular file: blocking again, as sendfile(2) expects (a
         * zerocopysend descriptor shares its flags with the app's: left as the app set them) */
        PyErr_Format(PyExc_RuntimeError, "%s: %R: %s", type, v, strerror(errno));
        goto error;
    }
    if (!have_off) {
        off_t pos = by_path ? 0 : lseek(*fd, 0, SEEK_CUR);
        *off = pos > 0 ? (uint64_t)pos : 0;
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint64_t avail = *off < size ? size - *off : 0;
    if (!have_count) {
        *count = avail;
    }
    else if (*count > avail) {
        PyErr_Format(PyExc_RuntimeError,
                     "%s: %R has %llu bytes from offset %llu, fewer than the count %llu", type, v,
                     (unsigned long long)avail, (unsigned long long)*off,
                     (unsigned long long)*count);
        goto error;
    }
    if (!by_path && !have_off) {
        (void)lseek(*fd, (off_t)(*off + *count), SEEK_SET); /* shared with the app's descriptor */
    }
    Py_DECREF(v);
    Py_XDECREF(path_b);
    return 0;
error:
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    Py_XDECREF(v);
    Py_XDECREF(path_b);
    return -1;
}

static PyObject *
send_file(RequestObject *r, PyObject *msg, int by_path)
{
    /* New reference: the completion awaitable of http.response.pathsend (by_path: the whole
     * file, the final body) or http.response.zerocopysend (a range, `more_body` allowed); NULL
     * with an exception. The wire takes the descriptor (sk_wire_ops_t.file): HTTP/1.1 sends the
     * range with sendfile(2), never through memory, under the same backpressure, write timeout
     * and close rules as any body. A file that cannot be sent fails the response (500 before the
     * head, else an abort) and raises RuntimeError, which the app's log shows. */
    const char *type = by_path ? "http.response.pathsend" : "http.response.zerocopysend";
    PyObject *more_o = NULL, *res = NULL;
    int fd = -1, more = 0;
    uint64_t off = 0, count = 0;
    if (body_allowed(r, type) < 0) {
        goto error;
    }
    if (!by_path) {
        if (sk_asgi_msg_get(msg, r->st->s_more_body, &more_o) < 0) {
            goto error;
        }
        more = more_o ? PyObject_IsTrue(more_o) : 0;
        if (more < 0) {
            goto error;
        }
    }
    if (file_from_message(r, msg, by_path, &fd, &off, &count) < 0) {
        if (r->wire != NULL && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
            /* the file cannot be sent: this response never completes (moved aside: failing it
             * may call the access log) */
            PyObject *typ, *val, *tb;
            PyErr_Fetch(&typ, &val, &tb);
            fail_response(r);
            PyErr_Restore(typ, val, tb);
        }
        goto error;
    }
    if (r->wire == NULL || r->tx != TX_OPEN) { /* Python code ran above (fileno(), __index__) */
        raise_disconnected(r);
        goto error;
    }
    int owned = fd; /* the wire's from here, whatever it returns */
    fd = -1;
    int rc = r->ops->file(r->wire, owned, off, count, more);
    if (rc == SK_WIRE_BUSY) {
        if (r->wire != NULL) {
            fail_response(r);
        }
        PyErr_Format(PyExc_RuntimeError, "%s: a file range is still being sent", type);
        goto error;
    }
    if (rc < 0) {
        body_refused(r, rc);
        goto error;
    }
    r->body_done = !more;
    res = response_queued(r, more || r->trailers);
    goto done;
error:
    res = NULL;
done:
    if (fd >= 0) {
        close(fd);
    }
    Py_XDECREF(more_o);
    return res;
}

static PyObject *
send_trailers(RequestObject *r, PyObject *msg)
{
    /* New reference: the completion awaitable of http.response.trailers; NULL with an exception.
     * Sent as the chunked trailer section when the request asked for trailers (TE: trailers),
     * else dropped (RFC 9110 §6.5); a field RFC 9110 §6.5.1 keeps out of trailers fails the
     * response (RuntimeError naming it). The last one (more_trailers False) completes it. */
    sk_header_t stack_hdrs[8];
    sk_header_t *hdrs = stack_hdrs;
    PyObject *headers = NULL, *keep = NULL, *more_o = NULL, *res = NULL;
    Py_ssize_t n = 0;
    if (body_allowed(r, "http.response.trailers") < 0) {
        goto error;
    }
    if (!r->trailers || !r->body_done) {
        PyErr_SetString(PyExc_RuntimeError,
                        !r->trailers
                            ? "Unexpected ASGI message 'http.response.trailers' sent, but "
                              "'http.response.start' did not say 'trailers': True."
                            : "Unexpected ASGI message 'http.response.trailers' sent, before the "
                              "final body (more_body False).");
        goto error;
    }
    if (sk_asgi_msg_get(msg, r->st->s_headers, &headers) < 0 ||
        sk_asgi_msg_get(msg, r->st->s_more_trailers, &more_o) < 0) {
        goto error;
    }
    if (headers != NULL &&
        fields_from(headers, stack_hdrs, sizeof(stack_hdrs) / sizeof(stack_hdrs[0]), &hdrs, &keep,
                    &n) < 0) {
        goto error;
    }
    int more = more_o ? PyObject_IsTrue(more_o) : 0;
    if (more < 0) {
        goto error;
    }
    if (r->wire == NULL || r->tx != TX_OPEN) { /* the conversions above ran Python code */
        raise_disconnected(r);
        goto error;
    }
    int rc = r->ops->trailers(r->wire, hdrs, (size_t)n, more);
    if (rc < 0) {
        if (rc == SK_ENOMEM) {
            PyErr_NoMemory();
            goto error;
        }
        fail_response(r); /* the trailer section cannot be completed as the app meant it */
        for (Py_ssize_t i = 0; rc == SK_ETRAILER && i < n; i++) {
            if (sk_resp_trailer_forbidden(hdrs[i].name, hdrs[i].name_len)) {
                PyObject *name =
                    PyUnicode_DecodeLatin1(hdrs[i].name, (Py_ssize_t)hdrs[i].name_len, NULL);
                if (name != NULL) {
                    PyErr_Format(PyExc_RuntimeError, "%s: %U", sk_strerror(rc), name);
                    Py_DECREF(name);
                }
                goto error;
            }
        }
        PyErr_SetString(PyExc_RuntimeError, sk_strerror(rc));
        goto error;
    }
    res = response_queued(r, more);
    goto done;
error:
    res = NULL;
done:
    if (hdrs != stack_hdrs) {
        PyMem_Free(hdrs);
    }
    Py_XDECREF(headers);
    Py_XDECREF(keep);
    Py_XDECREF(more_o);
    return res;
}

static PyObject *
send_early_hint(RequestObject *r, PyObject *msg)
{
    /* New reference: the completion awaitable of http.response.early_hint (a future while the
     * unsent output is at or over SK_OUTPUT_HIGH_WATER); NULL with an exception. Each sends
     * "103 Early Hints" with one link field per `links` item (RFC 8297), at once, before the
     * final response; to an HTTP/1.0 client nothing (RFC 8297 §2, RFC 9110 §15.2: no 1xx to
     * HTTP/1.0; the extension is not offered there). After http.response.start: RuntimeError. */
    sk_header_t stack_hdrs[8];
    sk_header_t *hdrs = stack_hdrs;
    PyObject *links = NULL, *seq = NULL, *res = NULL;
    if (r->started) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Unexpected ASGI message 'http.response.early_hint' sent, after "
                        "'http.response.start'.");
        goto error;
    }
    int rc = sk_asgi_msg_get(msg, r->st->s_links, &links);
    if (rc <= 0) {
        if (rc == 0) {
            PyErr_SetString(PyExc_TypeError,
                            "'http.response.early_hint' message is missing 'links'");
        }
        goto error;
    }
    seq = PySequence_Tuple(links);
    if (seq == NULL) {
        goto error;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n > (Py_ssize_t)(sizeof(stack_hdrs) / sizeof(stack_hdrs[0]))) {
        hdrs = PyMem_Malloc((size_t)n * sizeof(sk_header_t));
        if (hdrs == NULL) {
            PyErr_NoMemory();
            goto error;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *link = PyTuple_GET_ITEM(seq, i); /* borrowed from seq */
        if (!PyBytes_Check(link)) {
            PyErr_Format(PyExc_TypeError, "ASGI 'links' items must be bytes, not %.100s",
                         Py_TYPE(link)->tp_name);
            goto error;
        }
        hdrs[i].name = "link";
        hdrs[i].name_len = sizeof("link") - 1;
        hdrs[i].value = PyBytes_AS_STRING(link);
        hdrs[i].value_len = (size_t)PyBytes_GET_SIZE(link);
    }
    if (r->wire == NULL || r->tx != TX_OPEN) {
        raise_disconnected(r);
        goto error;
    }
    if (!r->extras || n == 0) {
        res = ready(r, NULL); /* nothing to send */
        goto done;
    }
    rc = r->ops->interim(r->wire, 103, hdrs, (size_t)n);
    if (rc == SK_WIRE_GONE) {
        raise_disconnected(r);
        goto error;
    }
    if (rc < 0) {
        if (rc == SK_ENOMEM) {
            PyErr_NoMemory();
        }
        else {
            PyErr_Format(PyExc_RuntimeError, "'http.response.early_hint': %s", sk_strerror(rc));
        }
        goto error;
    }
    res = sent_or_wait(r, rc);
    goto done;
error:
    res = NULL;
done:
    if (hdrs != stack_hdrs) {
        PyMem_Free(hdrs);
    }
    Py_XDECREF(links);
    Py_XDECREF(seq);
    return res;
}

static PyObject *
request_send(PyObject *op, PyObject *msg)
{
    /* New reference: an awaitable completing when the message is accepted; NULL with
     * RuntimeError/TypeError for an invalid or out-of-order message (or a send() re-entered from
     * the code of its own message), or ClientDisconnected. */
    RequestObject *r = (RequestObject *)op;
    PyObject *type = NULL;
    PyObject *res = NULL;
    if (sk_serve_check_thread(r->srv, "send()", SK_ASGI_THREAD_HINT) < 0) {
        return NULL; /* before anything is read or changed: the request goes on on its thread */
    }
    if (r->in_send) {
        /* The message's own code (a __bool__, __iter__, __index__ ... run while it is read)
         * called send(): the outer send must find the state it started from. */
        PyErr_SetString(PyExc_RuntimeError, "send() called again while a send() of this request "
                                            "is still reading its message");
        return NULL;
    }
    r->in_send = 1;
    int rc = sk_asgi_msg_get(msg, r->st->s_type, &type);
    if (rc <= 0) {
        if (rc == 0) {
            PyErr_SetString(PyExc_RuntimeError, "ASGI message has no 'type'");
        }
        goto done;
    }
    if (PyUnicode_Check(type) && PyUnicode_Compare(type, r->st->s_http_response_body) == 0) {
        res = send_body(r, msg);
    }
    else if (PyUnicode_Check(type) && PyUnicode_Compare(type, r->st->s_http_response_start) == 0) {
        res = send_start(r, msg);
    }
    else if (PyUnicode_Check(type) &&
             PyUnicode_Compare(type, r->st->s_http_response_pathsend) == 0) {
        res = send_file(r, msg, 1);
    }
    else if (PyUnicode_Check(type) &&
             PyUnicode_Compare(type, r->st->s_http_response_zerocopysend) == 0) {
        res = send_file(r, msg, 0);
    }
    else if (PyUnicode_Check(type) &&
             PyUnicode_Compare(type, r->st->s_http_response_trailers) == 0) {
        res = send_trailers(r, msg);
    }
    else if (PyUnicode_Check(type) &&
             PyUnicode_Compare(type, r->st->s_http_response_early_hint) == 0) {
        res = send_early_hint(r, msg);
    }
    else if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message type %R", type);
    }

done:
    r->in_send = 0;
    Py_XDECREF(type);
    return res;
}

/* ---- the app task --------------------------------------------------------------------------- */

/* The exchange (a Request object) is the coroutine its asyncio.Task runs: it drives what the app call returned
 * (a coroutine through am_send, or any awaitable's __await__ iterator) and, the moment that ends,
 * finishes the exchange in the same step: no done callback, no extra loop iteration. The app's
 * own coroutine still runs inside the request's Task (asyncio.current_task() is that Task). */

static int
task_cancelling(RequestObject *r)
{
    /* 1 when someone called cancel() on the request's Task (an eager start, 3.12+, still inside
     * its first step has none yet: the current Task is asked); see sk_asgi_task_cancelling. */
    return sk_asgi_task_cancelling(r->st, r->task);
}

static void
request_finish(RequestObject *r, PyObject *exc, int cancelled)
{
    /* The app ended: returned (exc NULL), raised exc (borrowed), or was cancelled. Reports it and
     * answers what the app left unanswered: a clean 500 before the response head (RFC 9110
     * §15.6.1), an abort after it (no truncated response sent as complete). Idempotent. */
    if (r->app == APP_DONE || r->app == APP_NEW) {
        return;
    }
    set_app(r, APP_DONE);
    Py_CLEAR(r->task);
    enum sk_disconnect_app how = SK_DISC_APP_NONE;
    if (exc != NULL) {
        how = sk_asgi_log_app_exception(r->st, r->srv->logger, exc, r->raised_disconnect)
                  ? SK_DISC_APP_ABSORBED
                  : SK_DISC_APP_ERROR;
    }
    else if (!cancelled && r->tx == TX_OPEN) {
        sk_asgi_log_error(r->st, r->srv->logger,
                          r->started ? "ASGI callable returned without completing response."
                                     : "ASGI callable returned without starting response.",
                          NULL);
    }
    if (r->tx == TX_GONE && r->srv->metrics != NULL) { /* the client left before the response */
        SK_ADD(r->srv->metrics->disconnects[SK_DISC_HTTP][how], 1);
    }
    if (r->wire != NULL && r->tx != TX_COMPLETE) {
        uint64_t sent;
        int flags = r->ops->progress(r->wire, &sent);
        if (!(flags & SK_WIRE_HEAD_OUT)) {
            answer_500(r);
        }
        else {
            abort_response(r, flags);
        }
    }
    release_waiters(r);
}

static PySendResult
request_ended(RequestObject *r, PySendResult res, PyObject **result)
{
    /* Turns the end of the app's coroutine into the end of the request's: a return or any
     * exception, BaseExceptions such as SystemExit and KeyboardInterrupt included, finishes the
     * exchange and returns None to the Task (the exception is the request's failure, reported
     * here: it never reaches the loop and never stops the server). Only cancellation finishes it
     * and propagates, so the Task ends cancelled. */
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
    /* A CancelledError the app raised itself (no one called cancel() on its Task) is its
     * failure and logged; a cancelled Task's is not. */
    request_finish(r, cancelled && task_cancelling(r) ? NULL : val, cancelled);
    if (cancelled) {
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

static PyMethodDef receive_def;
static PyMethodDef send_def;

/* The request's coroutine steps' refusal on another thread (sk_serve_check_thread). */
#define TASK_THREAD_HINT "a request runs as a Task of the event loop that serves it"

static int
call_app(RequestObject *r)
{
    /* The first step: calls app(scope, receive, send) inside the request's own Task, so even its
     * synchronous part runs in the request's fresh context, never nested in another request's
     * step. r->coro becomes what to drive. 0, or -1 with an exception (the app's own). */
    PyObject *scope = r->scope; /* moved out: the app owns the scope from now on */
    PyObject *receive = NULL, *send = NULL, *ret = NULL;
    int rc = -1;
    r->scope = NULL;
    set_app(r, APP_RUNNING);
    receive = PyCFunction_New(&receive_def, (PyObject *)r);
    send = PyCFunction_New(&send_def, (PyObject *)r);
    if (scope == NULL || receive == NULL || send == NULL) {
        goto done;
    }
    PyObject *args[3] = {scope, receive, send};
    ret = PyObject_Vectorcall(r->srv->app, args, 3, NULL);
    if (ret == NULL) {
        goto done;
    }
    r->coro = sk_asgi_awaitable_iter(ret);
    if (r->coro == NULL && PyCoro_CheckExact(ret)) {
        /* not driven: close it, so no "coroutine was never awaited" warning follows */
        PyObject *typ, *val, *tb;
        PyErr_Fetch(&typ, &val, &tb);
        PyObject *cr = PyObject_CallMethodNoArgs(ret, r->st->s_close);
        Py_XDECREF(cr);
        PyErr_Restore(typ, val, tb);
    }
    rc = r->coro != NULL ? 0 : -1;
done:
    Py_XDECREF(scope);
    Py_XDECREF(receive);
    Py_XDECREF(send);
    Py_XDECREF(ret);
    return rc;
}

static void
step_end(RequestObject *r)
{
    if (r->wire != NULL) {
        r->ops->stepped(r->wire); /* the first step's end releases held output */
    }
    if (SK_LOAD(r->srv->unstarted) == 0) {
        sk_reactor_flush(r->srv->reactor); /* the last request started has stepped: the batch
                                            * of responses waiting for it leaves (at the reactor
                                            * callback's end when this step ran inside it) */
    }
    /* or its first has waited --write-batch-delay: also inside a reactor callback, where 3.12+
     * starts apps eagerly */
    sk_reactor_flush_due(r->srv->reactor);
}

static PySendResult
request_am_send(PyObject *op, PyObject *arg, PyObject **result)
{
    /* am_send: one step of the app. PYGEN_NEXT with what it yielded (new reference), PYGEN_RETURN
     * with None, or PYGEN_ERROR with an exception set. */
    RequestObject *r = (RequestObject *)op;
    PySendResult res;
    *result = NULL;
    if (sk_serve_check_thread(r->srv, "a request's coroutine step", TASK_THREAD_HINT) < 0) {
        return PYGEN_ERROR;
    }
    if (sk_asgi_step_busy(r->stepping)) {
        return PYGEN_ERROR;
    }
    r->stepping = 1;
    if (r->app == APP_STARTED) {
        res = call_app(r) < 0 ? PYGEN_ERROR : PyIter_Send(r->coro, arg, result);
    }
    else if (r->coro == NULL) {
        r->stepping = 0;
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited request coroutine");
        return PYGEN_ERROR;
    }
    else {
        res = PyIter_Send(r->coro, arg, result);
    }
    r->stepping = 0;
    res = request_ended(r, res, result);
    step_end(r);
    return res;
}

static PyObject *
request_send_value(PyObject *op, PyObject *arg)
{
    /* New reference: coroutine.send(value): the yielded value, or NULL with StopIteration. */
    PyObject *result = NULL;
    PySendResult res = request_am_send(op, arg, &result);
    return sk_asgi_method_result(res, result);
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
    if (sk_serve_check_thread(r->srv, "a request's coroutine throw()", TASK_THREAD_HINT) < 0) {
        return NULL;
    }
    if (sk_asgi_step_busy(r->stepping)) {
        return NULL;
    }
    if (r->coro == NULL) {
        sk_asgi_raise_thrown(args, nargs);
        if (r->app != APP_STARTED) {
            return NULL;
        }
        /* thrown in before the first step (a Task cancelled before it ran): the app is never
         * called, and the exchange ends as for an app that raised it */
        Py_CLEAR(r->scope);
        res = request_ended(r, PYGEN_ERROR, &result);
        step_end(r);
        return sk_asgi_method_result(res, result);
    }
    r->stepping = 1;
    res = sk_asgi_coro_throw(r->st, r->coro, args, nargs, &result);
    r->stepping = 0;
    res = request_ended(r, res, &result);
    step_end(r);
    return sk_asgi_method_result(res, result);
}

static PyObject *
request_close(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None: coroutine.close(): closes the app's coroutine; the exchange is
     * finished as a cancelled one (500 or abort, nothing logged). */
    RequestObject *r = (RequestObject *)op;
    if (sk_serve_check_thread(r->srv, "a request's coroutine close()", TASK_THREAD_HINT) < 0) {
        return NULL;
    }
    if (sk_asgi_step_busy(r->stepping)) {
        return NULL;
    }
    PyObject *coro = r->coro;
    r->coro = NULL;
    r->stepping = 1;
    int rc = coro != NULL ? sk_asgi_coro_close(r->st, coro) : 0;
    r->stepping = 0;
    if (rc < 0) {
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

sk_exchange_t *
sk_exchange_new(sk_serve_t *srv, const sk_req_head_t *head, const sk_wire_ops_t *ops, void *w)
{
    /* New reference (see sk_exchange.h). */
    sk_state *st = srv->st;
    RequestObject *r = (RequestObject *)st->request_type->tp_alloc(st->request_type, 0);
    if (r == NULL) {
        return NULL;
    }
    r->st = st;
    SK_ADD(st->live_requests, 1);
    r->owner = Py_NewRef(srv->owner);
    r->srv = srv;
    r->ops = ops;
    r->wire = w;
    r->extras = head->extras;
    r->is_head = (head->method == HTTP_HEAD);
    r->scope = sk_exchange_scope(srv, head, &r->ext);
    if (r->scope == NULL) {
        r->wire = NULL;
        Py_DECREF(r);
        return NULL;
    }
    sk_access_exchange_begin(&srv->access, &r->acc, r->scope, head->method);
    if (srv->trace != NULL && r->acc.scope == NULL && srv->proxy.enabled) {
        /* a refusal's trace event names the scope's client (sk_exchange_client); with the access
         * log on, acc.scope has it. The scope was just made with "client": no error. */
        r->client = Py_XNewRef(PyDict_GetItem(r->scope, st->s_client));
    }
    return r;
}

PyObject *
sk_exchange_client(const sk_exchange_t *x)
{
    /* New reference, or NULL without an exception (see sk_exchange.h). The scope the access
     * record keeps is the app's own: its "client" as it is now. PyDict_GetItem (borrowed)
     * reports no error: a scope whose "client" an app removed names the connection's client. */
    if (x->acc.scope != NULL) {
        return Py_XNewRef(PyDict_GetItem(x->acc.scope, x->st->s_client));
    }
    return Py_XNewRef(x->client);
}

#if PY_VERSION_HEX < 0x030C0000
static PyObject *
task_name(sk_state *st)
{
    /* New reference: a request Task's name on 3.11, "skirr-request-N" with N counting the
     * process's request Tasks from 1 (asyncio's own default, "Task-N" from PyUnicode_FromFormat,
     * costs about 1.4k instructions per Task). Written into an ASCII str directly. NULL with an
     * exception. */
    static const char prefix[] = "skirr-request-";
    char digits[24];
    size_t nd = 0;
    unsigned long long n = ++st->task_names;
    do {
        digits[nd++] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    PyObject *name = PyUnicode_New((Py_ssize_t)(sizeof(prefix) - 1 + nd), 127);
    if (name == NULL) {
        return NULL;
    }
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(name);
    memcpy(d, prefix, sizeof(prefix) - 1);
    d += sizeof(prefix) - 1;
    while (nd > 0) {
        *d++ = (Py_UCS1)digits[--nd];
    }
    return name;
}
#endif

int
sk_exchange_run(sk_exchange_t *r)
{
    /* Starts the request's Task (the app itself is called in its first step: call_app). 0, or
     * -1 with an exception set (the caller answers 500). */
    sk_state *st = r->st;
    sk_serve_t *srv = r->srv;
    PyObject *task = NULL;
    /* A fresh copy of the server's context, never the caller's: this may run inside the previous
     * request's send() (a pipelined request started at once), whose context must not leak. */
    PyObject *ctx = PyContext_Copy(srv->context);
    if (ctx == NULL) {
        return -1;
    }
    set_app(r, APP_STARTED);
    if (srv->task_type != NULL) {
        int eager = srv->eager && srv->eager_budget > 0;
        srv->eager_budget -= eager;
        PyObject *targs[4] = {(PyObject *)r, srv->loop, ctx, ctx};
#if PY_VERSION_HEX >= 0x030C0000
        if (srv->eager) {
            targs[2] = eager ? Py_True : Py_False;
        }
        task = PyObject_Vectorcall(srv->task_type, targs, 1, srv->task_kw);
#else
        (void)eager;
        targs[3] = task_name(st); /* loop, context, name */
        task = targs[3] ? PyObject_Vectorcall(srv->task_type, targs, 1, srv->task_kw) : NULL;
        Py_XDECREF(targs[3]);
#endif
    }
    else {
        PyObject *targs[3] = {srv->loop, (PyObject *)r, ctx};
        task = PyObject_VectorcallMethod(st->s_create_task, targs, 2, srv->call_soon_kw);
    }
    Py_DECREF(ctx);
    if (task == NULL) {
        /* No task drives it: the app was never called (or its first step was lost with the
         * task); either way it is no longer in flight. */
        Py_CLEAR(r->scope);
        Py_CLEAR(r->coro);
        if (r->app == APP_STARTED || r->app == APP_RUNNING) {
            set_app(r, APP_DONE);
        }
        return -1;
    }
    if (r->app != APP_DONE) { /* an eager start may already have finished it */
        r->task = task;
    }
    else {
        Py_DECREF(task);
    }
    return 0;
}

int
sk_exchange_body(sk_exchange_t *r, const char *data, size_t len)
{
    /* Queues a piece of request content (copied: the wire's input buffer is reused). 0 or -1. */
    if (len == 0 || r->rx == RX_DROPPED) {
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
    wake_receivers(r);
    return 0;
}

void
sk_exchange_body_end(sk_exchange_t *r)
{
    if (r->rx == RX_DROPPED) {
        return;
    }
    set_rx(r, RX_COMPLETE);
    wake_receivers(r);
}

size_t
sk_exchange_buffered(const sk_exchange_t *r)
{
    return r->body_buffered;
}

int
sk_exchange_unstarted(const sk_exchange_t *r)
{
    return r->app == APP_STARTED;
}

int
sk_exchange_running(const sk_exchange_t *r)
{
    return r->app == APP_STARTED || r->app == APP_RUNNING;
}

void
sk_exchange_drained(sk_exchange_t *r)
{
    if (r->drain_waiters != NULL) {
        sk_asgi_resolve_all(r->st, &r->drain_waiters, Py_None, NULL);
    }
}

void
sk_exchange_drop_body(sk_exchange_t *r)
{
    /* The content queued and not yet received goes: the wire gave back its flow-control credit
     * (HTTP/2: a reset stream's content must not stay buffered beyond the connection's window,
     * RFC 9113 §5.2), and the request is over for the client. */
    if (r->rx == RX_DELIVERED || r->rx == RX_DROPPED) {
        return;
    }
    Py_CLEAR(r->body); /* bytes objects only: no finalizer runs */
    r->body_buffered = 0;
    set_rx(r, RX_DROPPED);
}

void
sk_exchange_gone(sk_exchange_t *r)
{
    /* The wire is closing or refusing: a response not complete is lost (GONE); waiters wake
     * (receive() with http.disconnect, a drain wait with ClientDisconnected). */
    Py_INCREF(r); /* the wire's reference may be dropped by what waking runs */
    if (r->tx == TX_OPEN) {
        set_tx(r, TX_GONE);
    }
    r->wire = NULL;
    release_waiters(r);
    Py_DECREF(r);
}

/* ---- type ----------------------------------------------------------------------------------- */

static int
request_traverse(PyObject *op, visitproc visit, void *arg)
{
    RequestObject *r = (RequestObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(r->owner);
    Py_VISIT(r->task);
    Py_VISIT(r->coro);
    Py_VISIT(r->receive_waiters);
    Py_VISIT(r->drain_waiters);
    Py_VISIT(r->body);
    Py_VISIT(r->scope);
    Py_VISIT(r->ext);
    Py_VISIT(r->client);
    return sk_access_req_traverse(&r->acc, visit, arg);
}

static int
request_clear(PyObject *op)
{
    RequestObject *r = (RequestObject *)op;
    if (r->owner != NULL && (r->app == APP_STARTED || r->app == APP_RUNNING)) {
        /* dropped unfinished (its Task was destroyed with the loop): no longer in flight */
        set_app(r, APP_DONE);
    }
    Py_CLEAR(r->task);
    Py_CLEAR(r->coro);
    Py_CLEAR(r->receive_waiters);
    Py_CLEAR(r->drain_waiters);
    Py_CLEAR(r->body);
    Py_CLEAR(r->scope);
    Py_CLEAR(r->client);
    sk_access_req_clear(&r->acc);
    /* last but the server: the app's coroutine and the scope, which reach the dict, are gone.
     * The ring is the loop thread's: a request freed on another (the last reference to its
     * send() was an app thread's) lets its dict go. */
    PyObject *ext = r->ext;
    r->ext = NULL;
    if (r->owner != NULL && sk_serve_on_thread(r->srv)) {
        ext_recycle(r->srv, ext, r->extras);
    }
    else {
        Py_XDECREF(ext);
    }
    Py_CLEAR(r->owner);
    return 0;
}

static void
request_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((RequestObject *)op)->st != NULL) {
        SK_ADD(((RequestObject *)op)->st->live_requests, -1);
    }
    request_clear(op);
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
