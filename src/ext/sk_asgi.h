/* sk_asgi.h — ASGI pieces that any protocol handler's scope and messages are built from.
 *
 * Owns: percent-decoding a path into the scope's `path` (ASGI www 2.5), the `headers` list from a
 * parsed head, (host, port) address tuples for `client`/`server`, reading a key of an ASGI
 * message, turning what an app call returned into something to drive, and the application-error
 * log call. Never: keeps state, touches a connection, or calls back into a handler.
 *
 * Result convention for lookups (as CPython's PyDict_GetItemRef): an int, 1 = found (a new
 * reference in *out), 0 = absent (*out = NULL, no exception), -1 = failed (*out = NULL, exception
 * set).
 */
#ifndef SK_ASGI_H
#define SK_ASGI_H

#include "sk_module.h"
#include "sk_http.h"

#include <sys/socket.h>

/* logger.error(msg, exc_info=exc) (exc may be NULL); a failure to log is reported as unraisable.
 * Nothing when logger is None. */
void sk_asgi_log_error(sk_state *st, PyObject *logger, const char *msg, PyObject *exc);

/* Reports what an application raised (exc, borrowed, not NULL) when its call ended. When
 * client_left (skirr raised ClientDisconnected into this exchange because the client went away)
 * and exc is the ClientDisconnected or a wrapper of it, it is the client's departure:
 * logger.debug("Client disconnected: the application ended with %r", exc), and 1 is returned.
 * A wrapper of it: an exception whose __cause__ (raise X from E) is one, an exception group with
 * one among its members, at any depth; or a known disconnect wrapper (Starlette's
 * starlette.requests.ClientDisconnect, anyio's BrokenResourceError and ClosedResourceError)
 * whose __context__ is one. An exception that merely has one as its
 * __context__ (raised while handling it, e.g. a cleanup bug in an except or finally block) is
 * not a wrapper. Anything else is an application failure: sk_asgi_log_error(st, logger,
 * "Exception in ASGI application", exc), and 0 is returned. Never raises (a failure to log is
 * unraisable). Source: ASGI www spec 2.4 "Disconnected Client - send exception"; issue 36
 * item 1. */
int sk_asgi_log_app_exception(sk_state *st, PyObject *logger, PyObject *exc, int client_left);

/* New reference: (host, port) for an IPv4/IPv6 address, None for any other family; NULL with an
 * exception. */
PyObject *sk_asgi_address(const struct sockaddr *ss);

/* New reference: root_path + the percent-decoded path p[0..n) decoded as UTF-8 with U+FFFD for
 * invalid sequences (as urllib.parse.unquote does); NULL with an exception. */
PyObject *sk_asgi_path(PyObject *root_path, const char *p, size_t n);

/* A request's header fields, whatever wire parsed them: n name/value spans (sk_field_t,
 * sk_http.h) into one block of bytes at base. Borrowed from the wire. */
typedef struct {
    const char *base;
    const sk_field_t *v;
    uint32_t n;
} sk_fields_t;

/* New reference: [(lower-cased name, value), ...] in received order and with duplicates, from
 * the head's fields. With an authority from the target (authority != NULL: absolute-form) each
 * Host field's value is replaced by it (RFC 9112 §3.2.2), and a (b"host", authority) pair is
 * added last when the request had no Host field (has_host 0: HTTP/1.0, or HTTP/2's :authority;
 * its name and value shared as a Host field's below). A name among the
 * common ones (sk_state.field_names) is the one shared bytes object every scope gets, not a
 * copy, and so is a value among the common ones (sk_state.field_values, compared exactly), and
 * a Host value equal to *last_host (a strong reference the caller owns, replaced by each new
 * Host value; last_host may be NULL): a held WebSocket's scope keeps no bytes of its own for
 * them (issue 37). NULL with an exception. */
PyObject *sk_asgi_headers(sk_state *st, const sk_fields_t *f, int has_host, const char *authority,
                          size_t authority_len, PyObject **last_host);

/* msg[key] for a dict or any mapping. 1 (new reference in *out), 0 (absent), -1 (exception). */
int sk_asgi_msg_get(PyObject *msg, PyObject *key, PyObject **out);

/* New reference: what to drive for an app call's result `obj`: a coroutine itself, else its
 * __await__() iterator; NULL with TypeError when obj is not awaitable. */
PyObject *sk_asgi_awaitable_iter(PyObject *obj);

/* ---- an app's Task: the coroutine protocol of a handler that drives the app itself -------- */

/* 1 when someone called cancel() on task (Task.cancelling() > 0, 3.11+; task NULL: the current
 * Task, as in an eager first step on 3.12+), or when that cannot be told (no Task, an error:
 * quiet is the safe side); else 0. Call with no exception set; leaves none. st: the module
 * state (its interned method names). */
int sk_asgi_task_cancelling(sk_state *st, PyObject *task);

/* New reference (result is stolen): a coroutine send()/throw() method's answer for an am_send
 * outcome: the yielded value, or NULL with StopIteration on a return (or the error set). */
PyObject *sk_asgi_method_result(PySendResult res, PyObject *result);

/* 1 with ValueError("coroutine already executing") set when stepping (the app is driving its
 * own Request or WebSocket session, Task.get_coro(), from inside its step: a running coroutine
 * answers the same), else 0. */
int sk_asgi_step_busy(uint8_t stepping);

/* Sets the exception coroutine.throw(*args) names: an instance, or a type and a value. */
void sk_asgi_raise_thrown(PyObject *const *args, Py_ssize_t nargs);

/* coroutine.throw(*args) passed on to `coro` (borrowed: the app's coroutine or __await__
 * iterator; one without throw() gets the exception as if raised in it): PYGEN_NEXT with
 * *result the value it yielded (new reference), PYGEN_RETURN with *result None (new reference:
 * it returned, StopIteration), or PYGEN_ERROR with the exception it let out set and *result
 * NULL. For the throw() method of a handler that drives the app itself (the http exchange, the
 * websocket session), which then ends its step as for send(). */
PySendResult sk_asgi_coro_throw(sk_state *st, PyObject *coro, PyObject *const *args,
                                Py_ssize_t nargs, PyObject **result);
/* coroutine.close() on `coro` (a strong reference, released here): an iterator without close()
 * is only released. 0, or -1 with what close() raised set. */
int sk_asgi_coro_close(sk_state *st, PyObject *coro);

/* ---- waiter futures (a receive() or send() that cannot complete yet) ------------------------- */

/* Unless fut is already done (cancelled), sets its result (result, borrowed) or, with exc_type,
 * an exc_type("client disconnected") exception. 1 if it was set, 0 if fut was done; a failure is
 * reported as unraisable (0). */
int sk_asgi_resolve(sk_state *st, PyObject *fut, PyObject *result, PyObject *exc_type);

/* A waiter slot holds NULL, the one future waiting, or a list of the futures waiting once a second
 * one waits (first come first served): an idle connection's receive() keeps no list. */

/* How many futures the slot holds. */
Py_ssize_t sk_asgi_waiting(PyObject *slot);

/* Resolves every future of *slot (sk_asgi_resolve) and empties it (*slot = NULL first: a
 * future's callbacks may add new waiters, which go to the emptied slot). */
void sk_asgi_resolve_all(sk_state *st, PyObject **slot, PyObject *result, PyObject *exc_type);

/* New reference: a new future of loop, added last to *slot; NULL with an exception. */
PyObject *sk_asgi_add_waiter(sk_state *st, PyObject *loop, PyObject **slot);

/* Hands ready events to the futures of *slot, first come first served: next(obj, &event) gives
 * the next event (1, a new reference), none yet (0: the first waiter keeps its place) or fails
 * (-1, reported as unraisable). A waiter already done (cancelled) is dropped without consuming
 * an event. *slot is cleared once empty. */
void sk_asgi_wake_receivers(sk_state *st, PyObject **slot, int (*next)(void *, PyObject **),
                            void *obj);

#endif
