/* sk_module.h — the skirr._native module state, shared by every file of the extension.
 *
 * Owns: sk_state (every heap type, exception type, cached object and interned string) and the
 * ready awaitable. Never: declares an object layout (each file keeps its own private) or any
 * global mutable state (everything hangs off the module state, reached through a defining type).
 * Threads: the module state is written only by its exec slot (and its clear), except for the
 * live-object counters (sk_shared_ssize_t); every other field is read-only afterwards, so any
 * thread may read it: the module runs without the GIL on a free-threaded build (Py_mod_gil).
 *
 * Files of the extension, each including only the headers below it:
 *   sk_server.c     the Server type: configuration, the reactor's Python callbacks, counters
 *   sk_http1.c/.h   the HTTP/1.1 protocol handler: the wire under an ASGI `http` exchange
 *   sk_h2.c/.h      the HTTP/2 protocol handler (nghttp2, sans-I/O): each stream an exchange's
 *                   wire; reached from sk_http1.c by prior knowledge or ALPN h2
 *   sk_exchange.c/.h  the ASGI `http` exchange (scope, receive, send, task) over a wire table
 *   sk_wsh.c/.h     the WebSocket wire over HTTP/1.1 (RFC 6455 after a 101): a session's wire
 *   sk_wssession.c/.h  the ASGI `websocket` session (events, queue, accept/denial, the app's
 *                   Task), any wire's, through its sk_wss_wire_ops_t table
 *   sk_wspmd.c/.h   permessage-deflate (RFC 7692) for it: negotiation and zlib streams
 *   sk_serve.c/.h   what every handler and session serves with (app, loop, options, counters)
 *   sk_tlsctx.c/.h  the serving TLS context (TLSContext: --ssl-*, reload, SNI, ALPN) and the
 *                   ASGI `tls` extension of a connection
 *   sk_access.c/.h, sk_metrics.c/.h, sk_proxy.c/.h  the access log's records, the metrics'
 *                   counters, --proxy-headers
 *   sk_asgi.c/.h    ASGI pieces any protocol's scope and messages use (paths, headers, addresses)
 *   sk_transport.c/.h  the reactor (epoll, accept, timer) and its connections (transports)
 *   sk_h2guard.c/.h the HTTP/2 defences' per-connection token buckets (layer 1, beside the
 *                   transport: plain C, no Python, no nghttp2)
 *   sk_stream.c/.h  the stream layer under each transport (plain sockets)
 *   sk_tls.c/.h     the TLS stream layer (libssl over BIOs of its own; plain C, no Python) and the
 *                   SSL_CTX source it reads
 *   sk_module.c/.h  this module: init, state, the ready awaitable
 * and the byte-level core (src/core/: buffers, the request parser, the response serializer).
 */
#ifndef SK_MODULE_H
#define SK_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sk_core.h"

#define SK_METHOD_CACHE 64 /* llhttp method ids cached as interned str (sk_state.methods) */
#define SK_FIELD_NAMES 40  /* entries of sk_module.c's FIELD_NAMES (sk_state.field_names) */
#define SK_FIELD_HOST 0    /* FIELD_NAMES' index of "host" */
#define SK_FIELD_VALUES 32 /* entries of sk_module.c's FIELD_VALUES (sk_state.field_values) */

/* What 3.13 added for free threading, on 3.11 and 3.12 (which have a GIL): PyDict_GetItemRef
 * (a strong reference, where PyDict_GetItemWithError's borrowed one may be freed by another
 * thread changing the dict). */
#if PY_VERSION_HEX < 0x030D0000
static inline int
PyDict_GetItemRef(PyObject *d, PyObject *key, PyObject **result)
{
    PyObject *v = PyDict_GetItemWithError(d, key); /* borrowed, safe under the GIL */
    *result = Py_XNewRef(v);
    return v != NULL ? 1 : (PyErr_Occurred() ? -1 : 0);
}
#endif

/* Counters another thread reads while their owner writes them (the metrics listener's thread
 * reads a Server's counters, _live() the live-object counts), or that several threads write
 * (the live-object counts, when servers run on loops in several threads): the sk_shared_*_t
 * types, read with SK_LOAD and changed with SK_ADD/SK_STORE. Under the GIL (every build but the
 * free-threaded one) every reader and writer holds it, so they are plain; on a free-threaded
 * build (Py_GIL_DISABLED) they are C11 atomics, used with relaxed order: a reader sees a whole
 * value, never a torn one, and no order between two counters is promised (a snapshot is not
 * one instant across counters) but where SK_ADD_RELEASE/SK_LOAD_ACQUIRE pair them. A plain
 * `x++` or `x += n` on one is an atomic read-modify-write there too. */
#ifdef Py_GIL_DISABLED
#include <stdatomic.h>
typedef _Atomic Py_ssize_t sk_shared_ssize_t;
typedef _Atomic uint64_t sk_shared_u64_t;
typedef _Atomic double sk_shared_double_t;
#define SK_LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define SK_ADD(x, n) ((void)atomic_fetch_add_explicit(&(x), (n), memory_order_relaxed))
#define SK_STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)
#define SK_ADD_RELEASE(x, n) ((void)atomic_fetch_add_explicit(&(x), (n), memory_order_release))
#define SK_LOAD_ACQUIRE(x) atomic_load_explicit(&(x), memory_order_acquire)
#else
typedef Py_ssize_t sk_shared_ssize_t;
typedef uint64_t sk_shared_u64_t;
typedef double sk_shared_double_t;
#define SK_LOAD(x) (x)
#define SK_ADD(x, n) ((void)((x) += (n)))
#define SK_STORE(x, v) ((void)((x) = (v)))
#define SK_ADD_RELEASE(x, n) SK_ADD(x, n)
#define SK_LOAD_ACQUIRE(x) (x)
#endif

typedef struct {
    PyTypeObject *server_type;
    PyTypeObject *request_type;
    PyTypeObject *websocket_type;
    PyTypeObject *ready_type;
    PyTypeObject *bound_type;
    PyTypeObject *tlsctx_type; /* skirr._native.TLSContext (sk_tlsctx.c) */
    int tls_sni_index;         /* the SSL_CTX ex_data index of its SNI tables */
    int tls_pem_index;         /* the SSL_CTX ex_data index of its certificate's PEM */
    PyObject *ClientDisconnected;
    PyObject *CancelledError; /* asyncio.CancelledError: a cancelled app is not an app error */
    PyObject *send_done;      /* a Ready holding None, shared: stateless, so safe to reuse */
    PyObject *asgi_proto;     /* {"version": "3.0", "spec_version": "2.5"}, copied per request */
    PyObject *scope_proto;    /* fixed scope items, copied per request */
    PyObject *disconnect_msg; /* {"type": "http.disconnect"} prototype, copied per use */
    PyObject *empty_bytes;
    PyObject *methods[SK_METHOD_CACHE];
    PyObject *field_names[SK_FIELD_NAMES];   /* common lower-cased field names as bytes, shared by
                                           * every scope's headers (sk_asgi_headers) */
    PyObject *field_values[SK_FIELD_VALUES]; /* common field values as bytes, shared likewise */
    /* field_values by length, so a lookup compares only the values of the field's length: 1 + the
     * index of the first of each length in bytes (0: none; each is under 256 bytes), and 1 + the
     * index of the next of the same length (0: the last). */
    uint8_t field_value_first[256];
    uint8_t field_value_next[SK_FIELD_VALUES];
    /* interned strings */
    PyObject *s_type, *s_asgi, *s_http_version, *s_method, *s_scheme, *s_path, *s_raw_path;
    PyObject *s_query_string, *s_root_path, *s_headers, *s_client, *s_server, *s_state;
    PyObject *s_body, *s_more_body, *s_status, *s_http, *s_1_0, *s_1_1, *s_2;
    PyObject *s_http_request, *s_http_disconnect, *s_http_response_start, *s_http_response_body;
    PyObject *s_create_task, *s_create_future, *s_throw, *s_close, *s_set_result;
    PyObject *s_add_done_callback;
    PyObject *s_set_exception, *s_done, *s_add_reader;
    PyObject *s_remove_reader, *s_call_soon, *s_error, *s_copy;
    /* method names called per connection or request: interned, never a fresh str per call
     * (PyObject_CallMethod(obj, "name") or PyObject_GetAttrString make one, and CPython 3.11's type attribute cache keeps
     * a strong reference to each until its slot is reused: hundreds of them, left in the arenas
     * a burst of connections made; issue 37, bench/LEVERS.md stop 56) */
    PyObject *s_cancel, *s_cancelled, *s_cancelling, *s_current_task, *s_join;
    PyObject *s_debug, *s_dunder_mro, *s_dunder_module, *s_dunder_qualname, *s_exceptions;
    /* the response extensions (ASGI www 2.5 extensions) */
    PyObject *s_extensions, *s_http_response_pathsend, *s_http_response_zerocopysend;
    PyObject *s_http_response_trailers, *s_http_response_early_hint, *s_file, *s_offset;
    PyObject *s_count, *s_trailers, *s_more_trailers, *s_links;
    PyObject *s_tls;   /* scope["extensions"]["tls"] (sk_tlsctx.h) */
    PyObject *s_https; /* scope["scheme"] of a TLS connection */
    /* the WebSocket scope and events (ASGI websocket 2.4) */
    PyObject *s_websocket, *s_ws, *s_wss, *s_websocket_connect, *s_websocket_receive;
    PyObject *s_websocket_disconnect, *s_websocket_accept, *s_websocket_send, *s_websocket_close;
    PyObject *s_websocket_http_response_start, *s_websocket_http_response_body;
    PyObject *s_text, *s_bytes, *s_code, *s_reason, *s_subprotocol, *s_subprotocols;
    /* Request Tasks named so far on 3.11 ("skirr-request-N", sk_exchange.c task_name; 3.11
     * has a GIL). */
    unsigned long long task_names;
    /* Live-object counters for the leak and lifetime checks (skirr._native._live()): changed
     * by every thread that makes or frees a skirr object (servers on loops in several threads),
     * so shared; kept on cache lines of their own, apart from the fields above, which every
     * thread reads and none writes after the module's exec. */
    char pad_before[64];
    sk_shared_ssize_t live_servers, live_conns, live_requests, live_ready;
    char pad_after[64];
} sk_state;

/* The module state for any object whose type was defined by this module. Borrowed pointer. */
sk_state *sk_get_state_by_type(PyTypeObject *tp);

/* sk_module.c */
/* A ready awaitable returning value (stolen) after yielding to the loop first if yield_first.
 * New reference, or NULL with an exception. */
PyObject *sk_ready_new(sk_state *st, PyObject *value, int yield_first);

/* A callable bound to self (a new strong reference): calling it calls entry with the Bound as
 * the callable, whose self sk_bound_self() gives. Not a coroutine and not a coroutine function to
 * asyncio (it has no send/throw/close), so a debug-mode loop takes it as a callback. Two pointers
 * besides the header (issue 37). New reference, or NULL with an exception. */
PyObject *sk_bound_new(sk_state *st, PyObject *self, vectorcallfunc entry);
/* Borrowed: the object a Bound made by sk_bound_new serves. */
PyObject *sk_bound_self(PyObject *bound);

/* The module's functions, defined in their files (declared here so sk_module.c includes no
 * header above this one). sk_access.c: */
/* skirr._native.log_escape(value) -> str (METH_O): the text a log line shows for value, a str
 * or a bytes-like object, escaped by the rule of src/core/sk_logesc.h (CWE-117: '"' -> \",
 * '\' -> \\, bytes 0x00-0x1F and 0x7F-0xFF -> \xHH). A str whose code points are all below
 * U+0100 is read as the latin-1 bytes it was decoded from (the request-target, a header value);
 * any other str as its UTF-8 bytes (lone surrogates as they are: surrogatepass).
 * New reference: value itself when it is a str that needs no escaping, else a new ASCII str.
 * Raises TypeError for another type. */
PyObject *sk_access_log_escape(PyObject *module, PyObject *value);

/* The types' specs, made into heap types by sk_module.c's exec slot. */
extern PyType_Spec sk_server_spec;    /* sk_server.c */
extern PyType_Spec sk_request_spec;   /* sk_exchange.c */
extern PyType_Spec sk_websocket_spec; /* sk_wssession.c */
extern PyType_Spec sk_tlsctx_spec;    /* sk_tlsctx.c */

/* sk_tlsctx.c: the ex_data index of the TLS contexts' SNI tables, into st (once per module
 * exec). 0, or -1 with an exception. */
int sk_tlsctx_module_init(sk_state *st);
/* skirr._native.tls_ktls_available() -> bool (METH_NOARGS): whether files go through kernel
 * TLS (else pread and encryption). New reference. */
PyObject *sk_tlsctx_ktls_available(PyObject *module, PyObject *arg);

#endif
