/* sk_exchange.h — the ASGI `http` exchange: one request/response as the app sees it, whatever
 * wire carries it.
 *
 * Owns, per request: the scope (built from a wire-neutral request head, sk_req_head_t), the body
 * queue and receive() events, validating send() messages, the response state machine, the
 * fairness quota, disconnect semantics (http.disconnect, skirr.ClientDisconnected), the access
 * record and metrics, driving the app (the exchange is the coroutine its asyncio.Task runs), and
 * the recycling of scope["extensions"] dicts (sk_ext_ring_t in sk_serve.h).
 * Talks to its wire (HTTP/1.1 today: sk_http1.c; an HTTP/2 stream next) only through the
 * sk_wire_ops_t table below, and the wire answers through the sk_exchange_* functions.
 * Never: includes a wire's header, touches a transport, or decides framing or persistence.
 *
 * States (each an enum in sk_exchange.c, changed only by its set_*() function):
 *   rx   (request message)  BODY -> COMPLETE (message ended) -> DELIVERED (final event given)
 *   tx   (response)         OPEN -> COMPLETE | FAILED (cannot be completed) | GONE (peer left)
 *   app  (application call) NEW -> STARTED (task made) -> RUNNING (the app was called, in the
 *                           task's first step) -> DONE; the request counts in active_requests
 *                           exactly while STARTED or RUNNING
 */
#ifndef SK_EXCHANGE_H
#define SK_EXCHANGE_H

#include "sk_serve.h"
#include "sk_asgi.h"

/* What the app learns of a request, filled by the wire when the request head is complete. All
 * pointers are borrowed and need only be valid during the call that is given the head
 * (sk_exchange_new, sk_exchange_scope): everything kept is copied into the scope. */
typedef struct {
    int method;              /* the method in llhttp_method_t numbering (HTTP_GET, HTTP_HEAD...):
                              * picks the cached str, tells a HEAD request, names the access
                              * record's method; -1 or any value past the cache: use method_name */
    const char *method_name; /* NUL-terminated method name (static or the wire's) */
    const char *path;        /* the target's path as received (percent-encoded), never empty */
    size_t path_len;         /* bytes */
    const char *query;       /* the query after '?', without it; NULL: the target had none */
    size_t query_len;        /* bytes */
    const char *authority;   /* the target's authority (HTTP/1.1 absolute-form, HTTP/2
                              * :authority): replaces every host field's value, and is added as
                              * host when has_host is 0; NULL: none */
    size_t authority_len;    /* bytes */
    sk_fields_t fields;      /* the header fields in received order (sk_asgi.h) */
    uint8_t has_host;        /* 1 if a host field is among fields */
    uint8_t http_major;      /* 1 or 2 */
    uint8_t http_minor;      /* 0 or 1 (HTTP/1.x) */
    uint8_t https;           /* 1: scope "scheme" is https (the wire is secure) */
    PyObject *tls;           /* the connection's ASGI `tls` extension dict (sk_tlsctx.h), copied
                              * into scope["extensions"]["tls"]; NULL: not TLS (borrowed) */
    uint8_t extras;          /* 1: the wire can send interim (1xx) responses and trailer
                              * sections, so early hints and trailers are offered in
                              * scope["extensions"] (HTTP/1.1, HTTP/2; not HTTP/1.0) */
    PyObject *client;        /* scope "client": (host, port) or None (borrowed) */
    PyObject *server;        /* scope "server": (host, port), (path, None) or None (borrowed) */
    const struct sockaddr *peer; /* the peer's address, for --proxy-headers' trust */
} sk_req_head_t;

/* Returns of the wire's entries besides 0 and the serializer codes (SK_E*, sk_core.h). */
enum {
    SK_WIRE_WAIT = 1,      /* accepted, but the wire's unsent output is over its high-water mark
                            * (or a file range is still being sent): the app's send() waits for
                            * sk_exchange_drained() */
    SK_WIRE_GONE = -100,   /* the peer is gone: the wire already called sk_exchange_gone() */
    SK_WIRE_BROKEN = -101, /* out of memory after part of this piece reached the output: the
                            * response can no longer complete (the exchange fails it) */
    SK_WIRE_BUSY = -102,   /* a file range is still being sent and the wire takes one at a time;
                            * the head may already be out (the exchange fails the response) */
};

/* Flags of sk_wire_ops_t.progress. */
enum {
    SK_WIRE_HEAD_OUT = 1,   /* the response head reached the wire's output */
    SK_WIRE_CLOSE_ENDS = 2, /* the peer would take the end of the connection for the end of the
                             * response (HTTP/1.x close-delimited body): abort must reset */
};

/* The wire table. One per wire kind, static storage (sk_http1.c: sk_http1_wire). Every entry
 * receives the wire pointer `w` given to sk_exchange_new. The exchange calls the table only
 * while the wire is attached: from sk_exchange_new until the exchange hands over its end (`end`)
 * or the wire calls sk_exchange_gone(); never after. The wire holds a strong reference to the
 * exchange (a Python object) while attached, and drops it when it detaches. Entries may call back
 * sk_exchange_gone() (a write found the peer gone) and then return SK_WIRE_GONE where allowed.
 * `fields` arrays and the strings in them are borrowed for the call: a wire copies what it keeps.
 * Status codes, framing, persistence and what goes out when are the wire's: the exchange only
 * says what the app sent, in order, each piece validated as ASGI. The order of calls: any
 * interim, then start; body / body_ref / file pieces, each followed by push while more is 1;
 * after the final piece end, or, when start announced trailers, trailers pieces (push while
 * more) and then end. Instead of that: error then end while nothing reached the output, or
 * abort once something did. progress, resume and stepped at any time while attached. */
typedef struct sk_wire_ops {
    /* http.response.start: the final response head (status 200..599, the app's fields). The wire
     * validates and records it; it may hold it back until the first body entry, so head and body
     * leave together. trailers: the app announced http.response.trailers (a wire that cannot
     * send trailer sections drops them later). Returns 0, or an SK_E* code (SK_EHDRNAME,
     * SK_EHDRVALUE, SK_ECL, SK_ETE, SK_ESTATUS, SK_ENOMEM): nothing recorded, send() raises. */
    int (*start)(void *w, int status, const sk_header_t *fields, size_t nfields, int trailers);
    /* An interim response (status 100..199, not 101; 103 for http.response.early_hint), sent
     * now, before the final head, when the head offered extras. Returns 0, SK_WIRE_WAIT, an
     * SK_E* code (nothing sent) or SK_WIRE_GONE. */
    int (*interim)(void *w, int status, const sk_header_t *fields, size_t nfields);
    /* Content bytes data[0..len) (copied before returning; len may be 0); more: 0 for the final
     * piece. The first body entry sends the held head. Returns 0 (queued, not yet pushed), or
     * an SK_E* code with nothing queued: SK_ETOOLONG / SK_ETOOSHORT break the length the head
     * promised (the exchange fails the response), SK_ESTATE, SK_ENOMEM. */
    int (*body)(void *w, const char *data, size_t len, int more);
    /* As body(), for an exact bytes object (immutable): the wire may keep a strong reference
     * and send it in place until it is written, or copy it. The exchange gives it final bodies
     * of at least SK_BODY_BY_REF_MIN bytes. Returns as body(), or SK_WIRE_BROKEN. */
    int (*body_ref)(void *w, PyObject *bytes, int more);
    /* count bytes of the regular file open on fd, from byte offset off, as content
     * (http.response.pathsend, zerocopysend). fd is the wire's from the call, whatever it
     * returns: it closes it once sent, unused or failed. Returns as body(), or SK_WIRE_BROKEN
     * or SK_WIRE_BUSY. */
    int (*file)(void *w, int fd, uint64_t off, uint64_t count, int more);
    /* Trailer fields (http.response.trailers), after the final body of a response whose start
     * announced trailers; more: 0 for the last. Returns 0, or an SK_E* code with nothing
     * queued (SK_ETRAILER: a field RFC 9110 §6.5.1 keeps out of trailers). */
    int (*trailers)(void *w, const sk_header_t *fields, size_t nfields, int more);
    /* What was queued is part of a response still in progress: the wire sends it now. Returns
     * 0, SK_WIRE_WAIT or SK_WIRE_GONE. */
    int (*push)(void *w);
    /* The response is complete (everything was given through the entries above): the wire
     * sends it by its own timing and detaches (called with the exchange already detached: no
     * sk_exchange_* call for it follows, except sk_exchange_gone() from inside this call).
     * Returns 0, or SK_WIRE_GONE (what was queued may be lost). */
    int (*end)(void *w);
    /* Nothing of the response reached the output (progress() has no SK_WIRE_HEAD_OUT): the
     * wire queues its own complete `status` response (500) in its place, to end with end()
     * (HTTP/1.1 then closes the connection). Returns 0, or SK_WIRE_GONE (out of memory: the
     * wire closed). */
    int (*error)(void *w, int status);
    /* The response cannot be completed and part of it is out: the wire ends the exchange so the
     * peer never takes it for complete; with reset, by an error the peer sees as one (TCP reset,
     * HTTP/2 RST_STREAM), which the exchange asks for when progress() says a close would look
     * like the end. The wire detaches (sk_exchange_gone()), now or when its transport closes. */
    void (*abort)(void *w, int reset);
    /* The response so far: SK_WIRE_* flags, and *body_bytes the content bytes accepted (for
     * the access record and the metrics). No side effect. */
    int (*progress)(void *w, uint64_t *body_bytes);
    /* Flow control of the request body: the app took body bytes (waiting 0: the wire reads
     * again while sk_exchange_buffered() is under its mark), or waits in receive() with none
     * buffered (waiting 1: a wire whose peer holds its content back until asked, Expect:
     * 100-continue on HTTP/1.1 or HTTP/2, asks now). Returns 0, or SK_ENOMEM; may detach (the
     * peer gone). */
    int (*resume)(void *w, int waiting);
    /* One step of the app's Task ended: output the wire held back for it may leave. */
    void (*stepped)(void *w);
} sk_wire_ops_t;

/* A final body given as exact bytes of at least this many bytes goes to body_ref(). */
#define SK_BODY_BY_REF_MIN (16 * 1024)

/* The exchange: a Python object (skirr._native.Request, internal), the coroutine its Task runs. */
typedef struct sk_exchange sk_exchange_t;

/* New reference: the exchange for a request whose head is complete, with its scope, attached to
 * `w` through `ops` (static storage); the app is not called yet (sk_exchange_run). NULL with an
 * exception. */
sk_exchange_t *sk_exchange_new(sk_serve_t *srv, const sk_req_head_t *head, const sk_wire_ops_t *ops,
                               void *w);
/* Starts the exchange's Task (eagerly on 3.12+, within srv->eager_budget). 0, or -1 with an
 * exception (the wire answers 500). The app may have answered before this returns. */
int sk_exchange_run(sk_exchange_t *x);
/* Request content arrived: data[0..len) is copied into the body queue; waiting receive() calls
 * get it. 0, or -1 with an exception. */
int sk_exchange_body(sk_exchange_t *x, const char *data, size_t len);
/* The request content ended (all of it arrived). */
void sk_exchange_body_end(sk_exchange_t *x);
/* Bytes of request content queued and not yet given to the app (the wire's flow control). */
size_t sk_exchange_buffered(const sk_exchange_t *x);
/* 1 while the exchange's Task was made and its first step has not run (the wire may hold
 * output for it: sk_wire_ops_t.stepped follows that step). */
int sk_exchange_unstarted(const sk_exchange_t *x);
/* 1 while the exchange's app call has started and not ended (it counts in active_requests),
 * attached or not: HTTP/2 counts a reset stream until then (Rapid Reset, CVE-2023-44487). */
int sk_exchange_running(const sk_exchange_t *x);
/* The wire's output went under its high-water mark with no file range pending: send() calls
 * waiting for drain go on. */
void sk_exchange_drained(sk_exchange_t *x);
/* The request content queued and not yet given to the app is dropped, and none comes after
 * it: receive() gives http.disconnect once the wire is gone (HTTP/2 calls it before
 * sk_exchange_gone(), as it gives the content's flow-control credit back then). */
void sk_exchange_drop_body(sk_exchange_t *x);
/* The peer is gone or the wire is closing (or refusing): detaches the wire; a response not
 * complete is lost (GONE); receive() gets http.disconnect, a send() waiting for drain raises
 * ClientDisconnected. The wire drops its reference after the call. */
void sk_exchange_gone(sk_exchange_t *x);
/* New reference: the client of the exchange's scope (scope["client"] as it is now: an app or its
 * middleware may have set it), for the access line and trace event of a refusal of its request
 * (a 408 for content not complete in time, a 400 for a bad chunk...), kept while --proxy-headers
 * is on and the access log (or --log-level trace) is; NULL without an exception otherwise (the
 * caller names the connection's client, which the scope's is then). */
PyObject *sk_exchange_client(const sk_exchange_t *x);

/* New reference: the `http` scope for head (a fresh dict; sk_wsh.c turns it into a websocket
 * one); with ext_out, a new reference to its scope["extensions"] (to give back through the ring).
 * NULL with an exception. */
PyObject *sk_exchange_scope(sk_serve_t *srv, const sk_req_head_t *head, PyObject **ext_out);
/* Releases the scope["extensions"] dicts srv->ext_ring holds (the owner's tp_clear and
 * dealloc); may run finalizers. */
void sk_exchange_ext_clear(sk_serve_t *srv);

#endif
