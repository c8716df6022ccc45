/* fuzz_h2.c — the HTTP/2 handler (src/ext/sk_h2.c on nghttp2, with src/ext/sk_h2guard.c) fed
 * arbitrary client bytes, its ASGI exchanges stubbed (issue 33 item 6).
 *
 * The seam is the link: sk_h2.c is compiled unchanged and linked against this file, which
 * defines everything it calls outside src/core, nghttp2 and sk_h2guard.c (fuzz/README.md says
 * why this and not a table of function pointers or libpython):
 *   - the transport (sk_transport_*): an output buffer a simulated peer reads at its own pace,
 *     closes and deadlines on a fake clock, closed() and writable() called as sk_transport.c
 *     calls them;
 *   - the exchange (sk_exchange_*): a stub app per stream that follows the wire contract of
 *     sk_exchange.h as sk_exchange.c does (start/body/push/end, error+end, abort, trailers,
 *     1xx, files, reading the request body through resume, waiting for drain), its script
 *     picked from the input;
 *   - the server's services (sk_serve_date, sk_serve_addresses, sk_access_*, sk_metrics_refusal,
 *     sk_proxy_client, sk_tls_ssl, sk_tls_info);
 *   - the few CPython entry points sk_h2.c's macros and calls reach (PyMem_* as libc malloc, so
 *     ASan sees every block; _Py_Dealloc for Py_DECREF; PyErr_WriteUnraisable, PyErr_Clear,
 *     PyErr_Occurred; _Py_NoneStruct for Py_None;
 *     on a free-threaded build, _Py_MergeZeroLocalRefcount and _Py_DecRefShared, where its
 *     Py_DECREF goes). No interpreter is started and libpython is not linked: Python.h is only
 *     compiled.
 *
 * Input: 8 bytes of configuration, then the client's bytes (the connection preface, frames).
 *   [0] server: max concurrent streams {100,1,2,8} (bits 0-1), initial window {65535,16,1024,
 *       2^20} (bits 2-3), max header list 256 bytes (bit 4), tiny guard budgets (bit 5),
 *       --limit-concurrency 2 (bit 6), --timeout-request-body 5 s (bit 7)
 *   [1] split of the client bytes into reads (bits 0-1: fuzz_common.h's SPLIT_*), the peer's
 *       reading {all, 1 KiB per round, nothing until the end, 7 bytes per round} (bits 2-3),
 *       apps start eagerly (bit 4), graceful shutdown (bit 5: after read 1..5 or after the
 *       input, as the seed says), trace/access log/metrics on (bit 6), --limit-request-body
 *       100 (bit 7)
 *   [2] the apps' scripts: stream k's is ([2] + k * [3]) % N_SCRIPTS (when [3] is 0, every
 *       stream runs [2]'s)
 *   [3] see [2]
 *   [4..7] seed of the read sizes, clock steps, the apps' choices, when shutdown comes and
 *       whether sk_serve_addresses fails (1 in 32); [4] bits 0-1 also pick
 *       the clock's step per read {1 ms, 250 ms, 1.1 s, random among 1 ms, 0.5 s, 2 s, 7 s}
 *       (after the input: 3 s per round, 12 rounds, so every deadline can pass); [5] bit 0
 *       also makes the connection's window one stream's (else four; at least 65535), bit 1
 *       turns --proxy-headers on (a refusal's client: sk_proxy_client, sk_exchange_client)
 *
 * Checks, beyond "no crash, no sanitizer report":
 *   - every byte written parses as HTTP/2 frames (RFC 9113 §4): the server preface first
 *     (SETTINGS), only frame types a server sends (no PUSH_PROMISE: push is off), each type's
 *     length and stream rules, CONTINUATION only inside a header block, header blocks that
 *     decode (HPACK, RFC 7541, with nghttp2's inflater) into a response or trailer section
 *     (:status first and alone, lowercase token names, no connection-specific field, values
 *     without CR/LF/NUL, no 101, 1xx without END_STREAM, trailers with END_STREAM);
 *   - per stream: HEADERS only on a stream the client opened, DATA only after a final
 *     response head and never past END_STREAM or the server's RST_STREAM, nothing once the
 *     server read the client's RST_STREAM, DATA no larger than the client's largest
 *     SETTINGS_MAX_FRAME_SIZE and never padded, content-length kept, no content in 204/304,
 *     and the content byte for byte what the app gave (its x-app field names it: the queue,
 *     file ranges read with pread, a body by reference, in order);
 *   - flow control: DATA within what the client granted (its largest initial window plus its
 *     WINDOW_UPDATEs, per stream and for the connection) and the server's WINDOW_UPDATEs
 *     never more than the content the client sent (plus the connection window skirr raises);
 *     the content the apps hold unread, over all streams, within the connection's window;
 *   - GOAWAY: last stream id never increases and no stream above it answered after it;
 *     nothing after a GOAWAY with an error code; a connection the handler ends after writing
 *     ended with a GOAWAY (its own or the client's);
 *   - bounded: the transport's output never past the high-water mark plus one write of
 *     nghttp2, the memory in use (ASan's count) under 64 MiB;
 *   - the exchange contract (sk_exchange.h): no body after its end, body_end and gone at most
 *     once, an entry returning SK_WIRE_GONE only after gone(), a request head as
 *     sk_exchange_new's contract says (and RFC 9113 §8.2-8.3 allow), no more request content
 *     than the client's DATA carried;
 *   - at the end: every block freed (PyMem and nghttp2's), every exchange released by the
 *     handler (only the harness's own reference left), every file descriptor given to the wire
 *     closed, the frame stream ending on a frame boundary unless the output was dropped.
 *
 * State: one static struct (H), reset per input: the stubs are called by sk_h2.c with no
 * context argument of the harness's.
 */
#define _GNU_SOURCE
#define FUZZ_NAME "fuzz_h2"
static void die_context(void);
#define FUZZ_DIE_CONTEXT() die_context()

#include "sk_exchange.h"
#include "sk_h2.h"
#include "sk_tlsctx.h"
#include "sk_token.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<sanitizer/allocator_interface.h>) && defined(__SANITIZE_ADDRESS__)
#define FUZZ_MEM_COUNT 1
#elif __has_include(<sanitizer/allocator_interface.h>) && defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_MEM_COUNT 1
#endif
#endif
#endif
#ifdef FUZZ_MEM_COUNT
#include <sanitizer/allocator_interface.h>
#endif

#include "fuzz_common.h"

#define MAX_STREAMS 512               /* streams tracked per input (ids hashed) */
#define MAX_APPS 1024                 /* stub exchanges per input */
#define MAX_FDS 64                    /* file descriptors given to the wire per input */
#define MEM_BOUND (64u * 1024 * 1024) /* bytes in use at any point of an input */
#define FILE_SIZE 40000               /* the file the apps send ranges of */

/* ---- the harness's state -------------------------------------------------------------------- */

/* What the output walk knows of one stream (server side and client side). */
typedef struct {
    int32_t id; /* 0: free slot */
    uint8_t opened, final, ended, reset, informational;
    uint8_t client_reset;     /* the client's RST_STREAM was fed ... */
    uint64_t client_reset_at; /* ... when the output had this many bytes: nothing after them */
    int status;
    int64_t clen;
    uint64_t data;        /* DATA payload bytes the server sent */
    uint64_t client_data; /* DATA payload bytes the client sent (partial frames included) */
    uint64_t granted;     /* the client's WINDOW_UPDATE increments */
    size_t app;           /* 1 + the index of the app whose head this is (its x-app field), or 0 */
    uint64_t updated;     /* the server's WINDOW_UPDATE increments */
} strm_t;

/* A frame walker: bytes in, whole frame headers and payloads out. */
typedef struct {
    uint8_t hdr[9];
    size_t hlen;  /* header bytes so far */
    uint32_t len; /* the current frame's payload length */
    uint8_t type, flags;
    int32_t sid;
    uint32_t got;     /* payload bytes so far */
    uint8_t *payload; /* kept for the frames whose payload is read (not DATA) */
    size_t cap;
    uint64_t total; /* bytes walked */
    uint64_t at;    /* where the current frame began (bytes walked before it) */
} walk_t;

struct sk_transport {
    const sk_handler_ops_t *ops;
    void *h;
    sk_buf_t out;
    int state; /* TP_OPEN, TP_CLOSING, TP_CLOSED */
    int told;
    int dispatching;
    int was_high;
    int stalled; /* output was left unread by a read round */
    int dl_kind;
    double dl_at;
    int closed_how; /* how the handler closed: 0, SK_CLOSE_NOW, SK_CLOSE_AFTER_WRITE */
    int dropped;    /* output was dropped (closed at once, write timeout) */
    double out_since;
};

enum { TP_OPEN = 0, TP_CLOSING, TP_CLOSED };

/* The apps' scripts. */
enum {
    S_OK = 0,     /* 200 with a small body, at once */
    S_NOBODY,     /* 204 */
    S_ECHO,       /* read the whole request body, then answer with its length */
    S_HANG,       /* never answer; returns some steps after the client left */
    S_RUN_FAILS,  /* sk_exchange_run fails (the wire answers 500) */
    S_BIG,        /* 200 with 6 x 16 KiB in pieces (backpressure, flow control) */
    S_RAISE,      /* the app raises before answering (error(500) + end) */
    S_ABORT,      /* 200, part of the body, then the app raises (abort) */
    S_TRAILERS,   /* 200 with trailers */
    S_EARLY,      /* 103 early hints, then 200 */
    S_FILE,       /* 200 with a file range (maybe past the file's end) */
    S_BAD_HEAD,   /* start() with a malformed field (refused: then 500) */
    S_SHORT,      /* content-length 10, 5 bytes given (ETOOSHORT: then 500) */
    S_READ_SOME,  /* read once, then answer (the rest dropped or reset) */
    S_STALL,      /* 200, a piece, then hang (timeouts) */
    S_MANY_HEADS, /* 200 with 60 fields (CONTINUATION, a large nv array) */
    S_NEW_FAILS,  /* sk_exchange_new fails */
    S_BIG_REF,    /* 200 with a final body of 20000 bytes given as a bytes object (body_ref) */
    N_SCRIPTS
};

/* Steps of a script. */
enum {
    A_END_SCRIPT = 0,
    A_READ_ALL,  /* receive() until the body ended */
    A_READ_ONCE, /* one receive() */
    A_INTERIM,
    A_START,
    A_START_TRAILERS,
    A_START_BAD,
    A_START_CL10,
    A_BODY_SMALL, /* final */
    A_BODY_EMPTY, /* final */
    A_BODY_PIECE, /* 16 KiB, more */
    A_BODY_5,     /* 5 bytes, final */
    A_BODY_ECHO,  /* final: the length read */
    A_BODY_LAST,  /* empty, final */
    A_FILE,       /* a range, final */
    A_TRAILERS,   /* more = 0 */
    A_RAISE,      /* the app raises: fail_response */
    A_HANG,       /* until gone */
    A_START_MANY,
    A_BODY_REF, /* 20000 bytes as a bytes object, final */
};

static const uint8_t scripts[N_SCRIPTS][12] = {
    [S_OK] = {A_START, A_BODY_SMALL},
    [S_NOBODY] = {A_START, A_BODY_EMPTY},
    [S_ECHO] = {A_READ_ALL, A_START, A_BODY_ECHO},
    [S_HANG] = {A_HANG},
    [S_RUN_FAILS] = {A_END_SCRIPT},
    [S_BIG] = {A_START, A_BODY_PIECE, A_BODY_PIECE, A_BODY_PIECE, A_BODY_PIECE, A_BODY_PIECE,
               A_BODY_PIECE, A_BODY_LAST},
    [S_RAISE] = {A_RAISE},
    [S_ABORT] = {A_START, A_BODY_PIECE, A_RAISE},
    [S_TRAILERS] = {A_START_TRAILERS, A_BODY_SMALL, A_TRAILERS},
    [S_EARLY] = {A_INTERIM, A_START, A_BODY_SMALL},
    [S_FILE] = {A_START, A_FILE},
    [S_BAD_HEAD] = {A_START_BAD, A_BODY_SMALL},
    [S_SHORT] = {A_START_CL10, A_BODY_5},
    [S_READ_SOME] = {A_READ_ONCE, A_START, A_BODY_SMALL},
    [S_STALL] = {A_START, A_BODY_PIECE, A_HANG},
    [S_MANY_HEADS] = {A_START_MANY, A_BODY_SMALL},
    [S_NEW_FAILS] = {A_END_SCRIPT},
    [S_BIG_REF] = {A_START, A_BODY_REF},
};

struct sk_exchange {
    PyObject_HEAD const sk_wire_ops_t *ops;
    void *w;           /* the wire while attached, else NULL */
    int script, pc;    /* script and step */
    uint8_t running;   /* the app call started and not ended */
    uint8_t started;   /* sk_exchange_run was called */
    uint8_t stepped;   /* the first step ran */
    uint8_t gone;      /* sk_exchange_gone was called */
    uint8_t ended;     /* the app gave the wire its end (end, or abort) */
    uint8_t waiting;   /* a send() waits for sk_exchange_drained */
    uint8_t body_end;  /* sk_exchange_body_end was called */
    uint8_t is_head;   /* a HEAD request */
    int linger;        /* steps the app still runs after it finished or the client left */
    uint64_t body_got; /* request content bytes received */
    size_t buffered;   /* ... not yet given to the app */
    uint64_t seed;
    char name[24];   /* its index, decimal: the x-app field of its response heads */
    sk_buf_t expect; /* the content the wire accepted: what its DATA must carry, in order */
};

static struct {
    uint8_t cfg[8];
    uint64_t seed;
    double clock;
    unsigned round;
    size_t fed;
    sk_serve_t srv;
    sk_metrics_t metrics;
    sk_transport_t t;
    PyObject dummy; /* srv->owner, trace, access.pending: never dereferenced by sk_h2.c */
    int eager;
    int fail_addresses;
    /* stubs */
    struct sk_exchange *apps[MAX_APPS];
    size_t napps;
    int memfd;
    int fds[MAX_FDS];
    size_t nfds;
    long blocks;  /* PyMem and PyMem_Raw blocks live */
    long objects; /* stub PyObjects live (apps, addresses, the root path) */
    size_t mem_base;
    /* the client's bytes as the server saw them */
    walk_t in;
    int in_lost;    /* the input is no longer a frame stream (no preface): client-side
                      * bounds are no longer known and the checks that need them stop */
    size_t preface; /* preface bytes matched */
    uint64_t max_init, max_frame, conn_granted, client_total;
    int32_t max_client_sid;
    int client_goaway;
    uint64_t content_checked; /* response content bytes compared with the apps' */
    uint64_t out_mark;        /* bytes the handler had written before the current data_received() */
    /* the server's bytes as the peer read them */
    walk_t out;
    nghttp2_hd_inflater *inflater;
    uint8_t *block;
    size_t block_len, block_cap;
    int32_t block_sid;
    uint8_t block_flags; /* the HEADERS' flags (END_STREAM) */
    int in_block;
    int saw_settings, saw_goaway, term;
    int64_t goaway_last;
    uint64_t conn_data, conn_updated;
    strm_t streams[MAX_STREAMS];
    int shutdown_called;
    unsigned shutdown_at; /* the read after which shutdown() comes (0: after the input) */
    int verbose;          /* FUZZ_VERBOSE set: the server's frames and the apps' steps on stderr */
    int corrupt;          /* FUZZ_H2_CORRUPT set: the first output byte read is changed (the suite's
                  * proof that the checks are live: the server's preface is no SETTINGS) */
} H;

static void
die_context(void)
{
    fprintf(stderr, "(round %u, %zu client bytes fed)\n", H.round, H.fed);
}

/* ---- CPython: what sk_h2.c's calls and macros reach ----------------------------------------- */

void *
PyMem_Malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    H.blocks += p != NULL;
    return p;
}

void *
PyMem_Calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    H.blocks += p != NULL;
    return p;
}

void *
PyMem_Realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    H.blocks += (p == NULL && q != NULL);
    return q;
}

void
PyMem_Free(void *p)
{
    H.blocks -= p != NULL;
    free(p);
}

void *
PyMem_RawMalloc(size_t n)
{
    return PyMem_Malloc(n);
}

void *
PyMem_RawCalloc(size_t n, size_t size)
{
    return PyMem_Calloc(n, size);
}

void *
PyMem_RawRealloc(void *p, size_t n)
{
    return PyMem_Realloc(p, n);
}

void
PyMem_RawFree(void *p)
{
    PyMem_Free(p);
}

void
PyErr_WriteUnraisable(PyObject *obj)
{
    (void)obj;
}

void
PyErr_Clear(void)
{}

PyObject *
PyErr_Occurred(void)
{
    return NULL; /* the stubs never set an exception */
}

PyObject _Py_NoneStruct; /* Py_None: srv->unix_path (a TCP listener) */

static PyTypeObject stub_type = {
    PyVarObject_HEAD_INIT(NULL, 0) /* */
        .tp_name = "fuzz_h2.stub",
};

/* The bytes objects the apps give body_ref(): what PyBytes_AS_STRING / PyBytes_GET_SIZE read. */
static PyTypeObject bytes_type = {
    PyVarObject_HEAD_INIT(NULL, 0) /* */
        .tp_name = "fuzz_h2.bytes",
    .tp_flags = Py_TPFLAGS_BYTES_SUBCLASS,
};

/* Named by the assertions of 3.13's Py_SIZE (PyBytes_GET_SIZE in sk_h2.c): never instantiated. */
PyTypeObject PyLong_Type = {PyVarObject_HEAD_INIT(NULL, 0) /* */
                                .tp_name = "int"};
PyTypeObject PyBool_Type = {PyVarObject_HEAD_INIT(NULL, 0) /* */
                                .tp_name = "bool"};

/* Py_DECREF's last reference: only the stubs' objects exist here. */
void
_Py_Dealloc(PyObject *op)
{
    if (Py_TYPE(op) != &stub_type && Py_TYPE(op) != &bytes_type) {
        die("Py_DECREF freed an object that is not the harness's");
    }
    H.objects--;
    free(op);
}

#ifdef Py_GIL_DISABLED
/* A free-threaded build's Py_DECREF (3.13t/3.14t refcount.h): an object owned by this thread (the
 * stubs' are: stub_own) goes here when its local count reaches zero; one shared with another
 * thread goes to _Py_DecRefShared, which this single-threaded harness never does. */
void
_Py_MergeZeroLocalRefcount(PyObject *op)
{
    if (op->ob_ref_shared != 0) {
        die("Py_DECREF: a stub object with shared references");
    }
    _Py_Dealloc(op);
}

void
_Py_DecRefShared(PyObject *op)
{
    (void)op;
    die("Py_DECREF of an object no thread of the harness owns");
}
#endif

/* Makes `o` the harness thread's own with one reference (on a free-threaded build, its local
 * count: the owner's Py_INCREF/Py_DECREF then never reach _Py_DecRefShared). */
static void
stub_own(PyObject *o)
{
#ifdef Py_GIL_DISABLED
    o->ob_tid = _Py_ThreadId();
#endif
    Py_SET_REFCNT(o, 1);
}

static PyObject *
stub_object(size_t size)
{
    PyObject *o = calloc(1, size);
    if (o == NULL) {
        die("out of memory");
    }
    stub_own(o);
    Py_SET_TYPE(o, &stub_type);
    H.objects++;
    return o;
}

static PyObject *
stub_bytes(size_t n)
{
    /* a bytes object of n bytes ('b') */
    PyObject *o = stub_object(offsetof(PyBytesObject, ob_sval) + n + 1);
    Py_SET_TYPE(o, &bytes_type);
    ((PyVarObject *)o)->ob_size = (Py_ssize_t)n;
    memset(((PyBytesObject *)o)->ob_sval, 'b', n);
    return o;
}

/* ---- the server's services ------------------------------------------------------------------ */

double
sk_access_now(void)
{
    return H.clock;
}

const char *
sk_serve_date(sk_serve_t *srv)
{
    (void)srv;
    return "Fri, 04 Dec 2026 09:00:00 GMT";
}

int
sk_serve_addresses(sk_serve_t *srv, sk_transport_t *t, PyObject **client, PyObject **local)
{
    (void)srv;
    REQUIRE(t == &H.t);
    if (*client == NULL) {
        *client = stub_object(sizeof(PyObject));
    }
    if (H.fail_addresses) {
        return -1;
    }
    if (*local == NULL) {
        *local = stub_object(sizeof(PyObject));
    }
    return 0;
}

static void
check_text(const char *s)
{
    /* a trace or refusal reason: printable ASCII, NUL-terminated, short */
    size_t n = strlen(s);
    REQUIRE(n > 0 && n < 200);
    for (size_t i = 0; i < n; i++) {
        REQUIRE(s[i] >= 0x20 && s[i] < 0x7f);
    }
}

void
sk_access_trace(sk_access_t *a, PyObject *client, const struct sockaddr *peer, const char *event)
{
    (void)client;
    REQUIRE(a == &H.srv.access && peer != NULL);
    check_text(event);
}

static void
check_line(const sk_access_line_t *l)
{
    /* a refused stream's request line (sk_access.h), read byte by byte (ASan checks the spans):
     * :method a token, the root path first, the path before :path's '?' (printable, none), the
     * query after it (printable: :path passed HTTP/1.1's target checks), HTTP/2.0 */
    const char *root = PyBytes_AS_STRING(H.srv.root_path_b);
    REQUIRE(l->method != NULL && sk_token_len(l->method, l->method_len) == l->method_len &&
            l->method_len > 0);
    REQUIRE(l->prefix_len == (size_t)PyBytes_GET_SIZE(H.srv.root_path_b) &&
            memcmp(l->prefix, root, l->prefix_len) == 0);
    REQUIRE(l->path != NULL && l->path_len > 0 && (l->query != NULL || l->query_len == 0));
    for (size_t i = 0; i < l->path_len; i++) {
        REQUIRE(l->path[i] > 0x20 && l->path[i] < 0x7f && l->path[i] != '?');
    }
    for (size_t i = 0; i < l->query_len; i++) {
        REQUIRE(l->query[i] > 0x20 && l->query[i] < 0x7f);
    }
    REQUIRE(strcmp(l->version, "2.0") == 0);
}

void
sk_access_refusal(sk_access_t *a, PyObject *client, const struct sockaddr *peer,
                  const sk_access_line_t *line, int status, uint64_t bytes, const char *reason)
{
    (void)client;
    REQUIRE(a == &H.srv.access && peer != NULL);
    REQUIRE(status >= 400 && status <= 599 && bytes < 100);
    check_text(reason);
    if (line != NULL) {
        REQUIRE(status != 431); /* a header list over the limit is not kept whole */
        check_line(line);
    }
}

PyObject *
sk_proxy_client(const sk_proxy_t *px, const sk_fields_t *p, const struct sockaddr *peer,
                int unix_peer)
{
    /* a refused stream whose head passed the checks and has no exchange: its fields are read
     * byte by byte (ASan checks the spans); a client (a new object) or none, by their bytes */
    REQUIRE(px == &H.srv.proxy && px->enabled && peer != NULL && unix_peer == 0);
    unsigned sum = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        const sk_field_t *f = &p->v[i];
        for (uint32_t k = 0; k < f->name.len; k++) {
            sum += (unsigned char)p->base[f->name.off + k];
        }
        for (uint32_t k = 0; k < f->value.len; k++) {
            sum += (unsigned char)p->base[f->value.off + k];
        }
    }
    return (sum & 1) ? stub_object(sizeof(PyObject)) : NULL;
}

void
sk_asgi_log_error(sk_state *st, PyObject *logger, const char *msg, PyObject *exc)
{
    /* the one error sk_h2.c logs: a file range that ended early or failed (send_data); the
     * harness's memfd never shrinks, so a call would be a pread that failed */
    (void)st;
    (void)logger;
    REQUIRE(exc == NULL && strncmp(msg, "File response incomplete: ", 26) == 0);
}

void
sk_metrics_refusal(sk_metrics_t *m, int status)
{
    REQUIRE(m == &H.metrics && status >= 400 && status <= 599);
}

SSL *
sk_tls_ssl(const sk_stream_t *s)
{
    REQUIRE(s == NULL);
    return NULL;
}

PyObject *
sk_tls_info(sk_state *st, SSL *ssl)
{
    (void)st;
    (void)ssl;
    die("sk_tls_info on a cleartext connection");
    return NULL;
}

/* ---- the transport --------------------------------------------------------------------------- */

static void
tell_closed(sk_transport_t *t, int reason)
{
    t->state = TP_CLOSED;
    t->dl_kind = 0;
    if (sk_buf_len(&t->out) > 0) {
        t->dropped = 1;
        sk_buf_consume(&t->out, sk_buf_len(&t->out));
    }
    if (!t->told) {
        t->told = 1;
        t->ops->closed(t->h, reason);
    }
}

sk_buf_t *
sk_transport_out(sk_transport_t *t)
{
    return &t->out;
}

size_t
sk_transport_out_len(const sk_transport_t *t)
{
    return sk_buf_len(&t->out);
}

int
sk_transport_send_slice(sk_transport_t *t, PyObject *bytes, size_t offset, size_t count)
{
    /* the bytes in the order the transport would send them: copied behind the output */
    REQUIRE(offset + count <= (size_t)PyBytes_GET_SIZE(bytes));
    if (t->state != TP_OPEN) {
        return -1;
    }
    return sk_buf_append(&t->out, PyBytes_AS_STRING(bytes) + offset, count);
}

int
sk_transport_is_open(const sk_transport_t *t)
{
    return t->state == TP_OPEN;
}

int
sk_transport_write(sk_transport_t *t)
{
    /* the peer reads at the harness's pace */
    return (t->state == TP_CLOSED || t->told) ? -1 : 0;
}

int
sk_transport_write_later(sk_transport_t *t)
{
    return sk_transport_write(t);
}

void
sk_transport_set_deadline(sk_transport_t *t, int kind, double seconds)
{
    REQUIRE(kind > 0 && seconds >= 0);
    t->dl_kind = kind;
    t->dl_at = H.clock + seconds;
}

void
sk_transport_clear_deadline(sk_transport_t *t)
{
    t->dl_kind = 0;
}

int
sk_transport_deadline_kind(const sk_transport_t *t)
{
    return t->dl_kind;
}

void
sk_transport_close(sk_transport_t *t, int how)
{
    REQUIRE(how == SK_CLOSE_NOW || how == SK_CLOSE_AFTER_WRITE);
    if (t->told) {
        return;
    }
    if (t->closed_how == 0 || how == SK_CLOSE_NOW) {
        t->closed_how = how;
    }
    if (t->state != TP_OPEN) {
        if (how == SK_CLOSE_NOW && t->state != TP_CLOSED) {
            tell_closed(t, SK_CLOSED_BY_HANDLER);
        }
        return;
    }
    if (how == SK_CLOSE_NOW) {
        tell_closed(t, SK_CLOSED_BY_HANDLER);
        return;
    }
    t->state = TP_CLOSING;
    t->dl_kind = 0;
}

void
sk_transport_switch(sk_transport_t *t, const sk_handler_ops_t *ops, void *h)
{
    REQUIRE(t->state == TP_OPEN && t->ops == NULL && ops == &sk_h2_ops);
    t->ops = ops;
    t->h = h;
    t->dl_kind = 0;
}

const struct sockaddr *
sk_transport_peer(const sk_transport_t *t, socklen_t *len)
{
    static const struct sockaddr_in peer = {.sin_family = AF_INET};
    (void)t;
    *len = sizeof(peer);
    return (const struct sockaddr *)&peer;
}

const sk_stream_t *
sk_transport_stream(const sk_transport_t *t)
{
    (void)t;
    return NULL;
}

/* ---- the stub exchange ----------------------------------------------------------------------- */

static uint64_t
rnd(uint64_t *s)
{
    return next_rand(s);
}

static void
check_head(const sk_req_head_t *h)
{
    /* sk_exchange_new's contract, and what HTTP/2 guarantees of a request (RFC 9113 §8.2,
     * §8.3): a method name, a path starting with '/' ('*' only for OPTIONS), lowercase field
     * names without pseudo-header or connection-specific fields, te only "trailers". */
    REQUIRE(h->method_name != NULL && strlen(h->method_name) > 0);
    REQUIRE(h->path != NULL && h->path_len > 0);
    REQUIRE(h->path[0] == '/' || (h->path_len == 1 && h->path[0] == '*'));
    REQUIRE(memchr(h->path, '?', h->path_len) == NULL && memchr(h->path, '#', h->path_len) == NULL);
    REQUIRE(h->query == NULL || memchr(h->query, '#', h->query_len) == NULL);
    REQUIRE(h->http_major == 2 && h->http_minor == 0 && h->extras == 1 && h->https == 0);
    REQUIRE(h->client != NULL && h->server != NULL && h->peer != NULL);
    int hosts = 0;
    for (size_t i = 0; i < h->fields.n; i++) {
        const char *n = h->fields.base + h->fields.v[i].name.off;
        size_t nl = h->fields.v[i].name.len;
        const char *v = h->fields.base + h->fields.v[i].value.off;
        size_t vl = h->fields.v[i].value.len;
        REQUIRE(nl > 0 && n[0] != ':');
        for (size_t k = 0; k < nl; k++) {
            REQUIRE(!(n[k] >= 'A' && n[k] <= 'Z'));
        }
        for (size_t k = 0; k < vl; k++) {
            REQUIRE(v[k] != '\r' && v[k] != '\n' && v[k] != '\0');
        }
        REQUIRE(!SK_TOKEN_IEQ(n, nl, "connection") && !SK_TOKEN_IEQ(n, nl, "transfer-encoding") &&
                !SK_TOKEN_IEQ(n, nl, "keep-alive") && !SK_TOKEN_IEQ(n, nl, "upgrade") &&
                !SK_TOKEN_IEQ(n, nl, "proxy-connection"));
        if (SK_TOKEN_IEQ(n, nl, "te")) {
            REQUIRE(SK_TOKEN_IEQ(v, vl, "trailers"));
        }
        hosts += SK_TOKEN_IEQ(n, nl, "host");
    }
    REQUIRE(hosts <= 1 && (hosts == 1) == (h->has_host != 0));
}

sk_exchange_t *
sk_exchange_new(sk_serve_t *srv, const sk_req_head_t *head, const sk_wire_ops_t *ops, void *w)
{
    REQUIRE(srv == &H.srv && ops != NULL && w != NULL);
    check_head(head);
    size_t k = H.napps;
    int script = (int)((H.cfg[2] + k * H.cfg[3]) % N_SCRIPTS);
    if (script == S_NEW_FAILS || k == MAX_APPS) {
        return NULL;
    }
    struct sk_exchange *x = (struct sk_exchange *)stub_object(sizeof(struct sk_exchange));
    x->ops = ops;
    x->w = w;
    x->script = script;
    x->is_head = head->method == HTTP_HEAD;
    x->seed = H.seed ^ (0x9e3779b97f4a7c15ULL * (k + 1));
    snprintf(x->name, sizeof(x->name), "%zu", k);
    H.apps[H.napps++] = x;
    Py_INCREF((PyObject *)x); /* the harness's own: the Task's, in skirr */
    return x;
}

PyObject *
sk_exchange_client(const sk_exchange_t *x)
{
    /* a refusal of an exchange's request, noted while attached: its scope's client (a new
     * object) or none, by its seed */
    REQUIRE(H.srv.proxy.enabled && x->w != NULL && !x->gone);
    return (x->seed & 1) ? stub_object(sizeof(PyObject)) : NULL;
}

static void app_run(struct sk_exchange *x, int max);

/* Byte i of the file the apps send ranges of: offsets matter. */
static uint8_t
file_byte(uint64_t i)
{
    return (uint8_t)(i * 7 + i / 251);
}

int
sk_exchange_run(sk_exchange_t *x)
{
    REQUIRE(!x->started && x->w != NULL && !x->gone);
    x->started = 1;
    if (x->script == S_RUN_FAILS) {
        return -1;
    }
    x->running = 1;
    H.srv.active_requests++;
    if (H.eager) {
        app_run(x, 16); /* 3.12+: the app runs inside the call until it first waits */
    }
    return 0;
}

int
sk_exchange_body(sk_exchange_t *x, const char *data, size_t len)
{
    REQUIRE(!x->gone && x->w != NULL && !x->body_end);
    REQUIRE(data != NULL || len == 0);
    x->body_got += len;
    x->buffered += len;
    return 0;
}

void
sk_exchange_body_end(sk_exchange_t *x)
{
    REQUIRE(!x->gone && x->w != NULL && !x->body_end);
    x->body_end = 1;
}

size_t
sk_exchange_buffered(const sk_exchange_t *x)
{
    return x->buffered;
}

void
sk_exchange_drop_body(sk_exchange_t *x)
{
    /* the wire drops the unread content as it detaches (it gave its credit back) */
    REQUIRE(!x->gone && x->w != NULL);
    x->buffered = 0;
}

int
sk_exchange_running(const sk_exchange_t *x)
{
    return x->running;
}

void
sk_exchange_drained(sk_exchange_t *x)
{
    REQUIRE(x->w != NULL && !x->gone);
    x->waiting = 0;
}

void
sk_exchange_gone(sk_exchange_t *x)
{
    REQUIRE(!x->gone && x->w != NULL);
    x->gone = 1;
    x->w = NULL;
    x->waiting = 0;
}

static int
after_gone(struct sk_exchange *x, int rc)
{
    /* An entry's return: SK_WIRE_GONE only after gone() (sk_exchange.h). 1 when the app is to
     * stop sending. */
    if (rc == SK_WIRE_GONE) {
        REQUIRE(x->gone && x->w == NULL);
        return 1;
    }
    return x->w == NULL;
}

static void
app_done(struct sk_exchange *x)
{
    /* The app call returns (now, or after `linger` more steps). */
    if (x->running) {
        x->linger = (int)(rnd(&x->seed) % 3);
        x->pc = -1;
    }
}

static void
fail_response(struct sk_exchange *x)
{
    /* sk_exchange.c's fail_response: a clean 500 if nothing reached the output, else abort. */
    uint64_t sent;
    int flags = x->ops->progress(x->w, &sent);
    REQUIRE((flags & SK_WIRE_CLOSE_ENDS) == 0);
    if (flags & SK_WIRE_HEAD_OUT) {
        x->ended = 1;
        x->ops->abort(x->w, 0);
        REQUIRE(x->gone && x->w == NULL); /* abort detaches (sk_exchange_gone) */
        return;
    }
    void *w = x->w;
    if (x->ops->error(w, 500) < 0) {
        REQUIRE(x->gone);
        return;
    }
    x->ended = 1;
    x->w = NULL;
    (void)x->ops->end(w);
}

static void
queued(struct sk_exchange *x, int more)
{
    /* sk_exchange.c's response_queued: end for the last piece, else push. */
    if (!more) {
        void *w = x->w;
        x->ended = 1;
        x->w = NULL;
        int rc = x->ops->end(w);
        REQUIRE(rc == 0 || rc == SK_WIRE_GONE);
        return;
    }
    int rc = x->ops->push(x->w);
    if (after_gone(x, rc)) {
        return;
    }
    REQUIRE(rc == 0 || rc == SK_WIRE_WAIT);
    x->waiting = rc == SK_WIRE_WAIT;
}

static void
last_piece(struct sk_exchange *x, int rc)
{
    /* After the call that gave the response's last piece: its refusal fails the response (the
     * stub holds the wire, so it is never gone here), else the response ends. */
    if (rc < 0) {
        REQUIRE(rc != SK_WIRE_GONE);
        fail_response(x);
        return;
    }
    queued(x, 0);
}

static void
give_body(struct sk_exchange *x, const char *data, size_t len, int more, int trailers)
{
    int rc = x->ops->body(x->w, data, len, more);
    if (rc < 0) {
        REQUIRE(rc != SK_WIRE_GONE);
        fail_response(x); /* ETOOLONG/ETOOSHORT, ESTATE, ENOMEM: the exchange fails it */
        return;
    }
    put(&x->expect, data, len);
    queued(x, more || trailers);
}

static void
app_step(struct sk_exchange *x)
{
    /* One step of the app: the next action of its script, unless it waits. */
    static const char piece[16384] = {0};
    if (!x->running) {
        return;
    }
    if (x->pc < 0 || x->ended || (x->gone && scripts[x->script][x->pc] != A_HANG)) {
        /* finished, or the client left (receive() gave http.disconnect, send() raised) */
        if (x->pc >= 0) {
            app_done(x);
        }
        if (x->linger-- <= 0) {
            x->running = 0;
            H.srv.active_requests--;
        }
        return;
    }
    if (x->waiting) {
        return;
    }
    int a = scripts[x->script][x->pc];
    uint64_t r = rnd(&x->seed);
    if (H.verbose) {
        fprintf(stderr, "app %p: script %d action %d\n", (void *)x, x->script, a);
    }
    switch (a) {
    case A_END_SCRIPT: fail_response(x); break; /* the app returned without a response */
    case A_READ_ALL:
    case A_READ_ONCE:
        if (x->buffered > 0 || x->body_end) {
            x->buffered = 0;
            if (x->ops->resume(x->w, 0) < 0) {
                die("resume failed");
            }
            if (a == A_READ_ONCE || x->body_end) {
                x->pc++;
            }
        }
        else if (x->ops->resume(x->w, 1) < 0) {
            die("resume failed");
        }
        break;
    case A_HANG: break; /* until gone */
    case A_RAISE: fail_response(x); break;
    case A_INTERIM: {
        sk_header_t f = {
            .name = "link", .name_len = 4, .value = "</a.css>; rel=preload", .value_len = 21};
        int rc = x->ops->interim(x->w, 103, &f, 1);
        if (!after_gone(x, rc)) {
            REQUIRE(rc == 0 || rc == SK_WIRE_WAIT);
            x->waiting = rc == SK_WIRE_WAIT;
            x->pc++;
        }
        break;
    }
    case A_START:
    case A_START_TRAILERS:
    case A_START_BAD:
    case A_START_CL10:
    case A_START_MANY: {
        static const int statuses[] = {200, 200, 201, 404, 500, 304, 204, 599};
        int status = statuses[r % 8];
        sk_header_t f[64];
        char names[60][8];
        size_t n = 0;
        f[n++] = (sk_header_t){
            .name = "content-type", .name_len = 12, .value = "text/plain", .value_len = 10};
        f[n++] = (sk_header_t){
            .name = "x-app", .name_len = 5, .value = x->name, .value_len = strlen(x->name)};
        if (r & 0x100) {
            f[n++] = (sk_header_t){.name = "Connection",
                                   .name_len = 10,
                                   .value = "close",
                                   .value_len = 5}; /* dropped (RFC 9113 §8.2.2) */
        }
        if (r & 0x200) {
            f[n++] = (sk_header_t){.name = "Server", .name_len = 6, .value = "app", .value_len = 3};
        }
        if (a == A_START_BAD) {
            f[n++] = (sk_header_t){.name = "bad name", .name_len = 8, .value = "x", .value_len = 1};
        }
        if (a == A_START_CL10) {
            status = 200;
            f[n++] = (sk_header_t){
                .name = "content-length", .name_len = 14, .value = "10", .value_len = 2};
        }
        if (a == A_START_MANY) {
            for (int i = 0; i < 60; i++) {
                snprintf(names[i], sizeof(names[i]), "x-%02d", i);
                f[n++] = (sk_header_t){.name = names[i],
                                       .name_len = 4,
                                       .value = piece,
                                       .value_len = 300}; /* NUL bytes: refused */
                if (r & 0x400) {
                    f[n - 1].value = "v";
                    f[n - 1].value_len = 1;
                }
            }
        }
        int rc = x->ops->start(x->w, status, f, n, a == A_START_TRAILERS);
        if (rc < 0) {
            REQUIRE(rc != SK_WIRE_GONE);
            fail_response(x); /* send() raised; the app lets it propagate */
            break;
        }
        x->pc++;
        break;
    }
    case A_BODY_SMALL:
    case A_BODY_EMPTY:
    case A_BODY_PIECE:
    case A_BODY_5:
    case A_BODY_ECHO:
    case A_BODY_LAST: {
        char echo[32];
        const char *data = "hello, world\n";
        size_t len = 13;
        int more = 0;
        if (a == A_BODY_EMPTY || a == A_BODY_LAST) {
            len = 0;
        }
        else if (a == A_BODY_PIECE) {
            data = piece;
            len = sizeof(piece);
            more = 1;
        }
        else if (a == A_BODY_5) {
            len = 5;
        }
        else if (a == A_BODY_ECHO) {
            len = (size_t)snprintf(echo, sizeof(echo), "%llu", (unsigned long long)x->body_got);
            data = echo;
        }
        int trailers = scripts[x->script][x->pc + 1] == A_TRAILERS;
        x->pc++;
        give_body(x, data, len, more, trailers);
        break;
    }
    case A_BODY_REF: {
        PyObject *b = stub_bytes(20000);
        x->pc++;
        int rc = x->ops->body_ref(x->w, b, 0);
        if (rc >= 0) {
            put(&x->expect, ((PyBytesObject *)b)->ob_sval, 20000);
        }
        Py_DECREF(b); /* the wire took its own reference, or copied */
        last_piece(x, rc);
        break;
    }
    case A_FILE: {
        int fd = dup(H.memfd);
        REQUIRE(fd >= 0 && H.nfds < MAX_FDS);
        H.fds[H.nfds++] = fd;
        uint64_t off = r % 1000, count = (r >> 16) % (FILE_SIZE + 2000); /* maybe past the end */
        x->pc++;
        int rc = x->ops->file(x->w, fd, off, count, 0);
        for (uint64_t i = off; rc >= 0 && i < off + count && i < FILE_SIZE; i++) {
            uint8_t ch = file_byte(i);
            put(&x->expect, &ch, 1);
        }
        last_piece(x, rc);
        break;
    }
    case A_TRAILERS: {
        sk_header_t f[2] = {
            {.name = "grpc-status", .name_len = 11, .value = "0", .value_len = 1},
            {.name = (r & 1) ? "content-length" : "x-checksum",
             .name_len = (r & 1) ? 14 : 10,
             .value = "1",
             .value_len = 1}, /* content-length: refused in trailers */
        };
        x->pc++;
        int rc = x->ops->trailers(x->w, f, 2, 0);
        last_piece(x, rc);
        break;
    }
    default: die("unknown action");
    }
    if (x->ended || x->gone) {
        app_done(x);
    }
}

static void
app_run(struct sk_exchange *x, int max)
{
    /* One step of the app's Task: up to max actions, until it waits (for drain, for request
     * content) or ends; after the first, stepped() (sk_exchange.h) while the wire is attached. */
    for (int i = 0; i < max; i++) {
        int pc = x->pc, ended = x->ended, running = x->running;
        app_step(x);
        if (!x->running || x->waiting || x->ended || x->gone ||
            (x->pc == pc && ended == x->ended && running == x->running)) {
            break;
        }
    }
    if (!x->stepped && x->started) {
        x->stepped = 1;
        if (x->w != NULL) {
            x->ops->stepped(x->w);
        }
    }
}

/* ---- walking the frames ----------------------------------------------------------------------- */

static strm_t *
strm(int32_t id, int make)
{
    size_t i = ((uint32_t)id * 2654435761u) % MAX_STREAMS;
    for (size_t k = 0; k < MAX_STREAMS; k++, i = (i + 1) % MAX_STREAMS) {
        if (H.streams[i].id == id) {
            return &H.streams[i];
        }
        if (H.streams[i].id == 0) {
            if (!make) {
                return NULL;
            }
            memset(&H.streams[i], 0, sizeof(strm_t));
            H.streams[i].id = id;
            H.streams[i].clen = -1;
            return &H.streams[i];
        }
    }
    return NULL; /* full: not tracked */
}

static uint32_t
u32be(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Feeds n bytes to walker w; calls on_frame(w) once each frame's payload is complete, and
 * on_data(w, n) for each piece of a DATA payload as it arrives (DATA payloads are not kept). */
static void
walk(walk_t *w, const uint8_t *p, size_t n, void (*on_frame)(walk_t *),
     void (*on_data)(walk_t *, const uint8_t *, size_t))
{
    while (n > 0) {
        if (w->hlen == 0) {
            w->at = w->total;
        }
        if (w->hlen < 9) {
            size_t k = 9 - w->hlen < n ? 9 - w->hlen : n;
            memcpy(w->hdr + w->hlen, p, k);
            w->hlen += k;
            w->total += k;
            p += k;
            n -= k;
            if (w->hlen < 9) {
                return;
            }
            w->len = ((uint32_t)w->hdr[0] << 16) | ((uint32_t)w->hdr[1] << 8) | w->hdr[2];
            w->type = w->hdr[3];
            w->flags = w->hdr[4];
            w->sid = (int32_t)(u32be(w->hdr + 5) & 0x7fffffffu);
            w->got = 0;
            if (w == &H.in && w->type == NGHTTP2_HEADERS && w->sid > H.max_client_sid) {
                /* nghttp2 takes a stream as processed from the frame's header on */
                H.max_client_sid = w->sid;
            }
            if (w->type != NGHTTP2_DATA && w->len > w->cap) {
                uint8_t *np = realloc(w->payload, w->len);
                if (np == NULL) {
                    die("out of memory");
                }
                w->payload = np;
                w->cap = w->len;
            }
        }
        size_t k = w->len - w->got < n ? w->len - w->got : n;
        if (w->type != NGHTTP2_DATA && k > 0) {
            memcpy(w->payload + w->got, p, k);
        }
        else if (k > 0 && on_data != NULL) {
            on_data(w, p, k);
        }
        w->got += (uint32_t)k;
        w->total += k;
        p += k;
        n -= k;
        if (w->got == w->len) {
            on_frame(w);
            w->hlen = 0;
        }
    }
}

/* The client's frames, as they were fed (complete frames only, except DATA's bytes). */
static void
in_data(walk_t *w, const uint8_t *p, size_t n)
{
    (void)p;
    H.client_total += n;
    strm_t *s = strm(w->sid, 1);
    if (s != NULL) {
        s->client_data += n;
    }
}

static void
in_frame(walk_t *w)
{
    const uint8_t *p = w->payload;
    switch (w->type) {
    case NGHTTP2_HEADERS:
        if (w->sid > H.max_client_sid) {
            H.max_client_sid = w->sid;
        }
        if (w->sid != 0) {
            strm_t *s = strm(w->sid, 1);
            if (s != NULL) {
                s->opened = 1;
            }
        }
        break;
    case NGHTTP2_PRIORITY:
        /* nghttp2 may make an idle stream for it; never one the server answers */
        break;
    case NGHTTP2_SETTINGS:
        if (!(w->flags & NGHTTP2_FLAG_ACK) && w->len % 6 == 0) {
            for (uint32_t i = 0; i < w->len; i += 6) {
                uint16_t id = (uint16_t)((p[i] << 8) | p[i + 1]);
                uint32_t v = u32be(p + i + 2);
                if (id == NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE && v > H.max_init) {
                    H.max_init = v;
                }
                if (id == NGHTTP2_SETTINGS_MAX_FRAME_SIZE && v > H.max_frame) {
                    H.max_frame = v;
                }
            }
        }
        break;
    case NGHTTP2_WINDOW_UPDATE:
        if (w->len == 4) {
            uint32_t inc = u32be(p) & 0x7fffffffu;
            if (w->sid == 0) {
                H.conn_granted += inc;
            }
            else {
                strm_t *s = strm(w->sid, 1);
                if (s != NULL) {
                    s->granted += inc;
                }
            }
        }
        break;
    case NGHTTP2_GOAWAY: H.client_goaway = 1; break;
    case NGHTTP2_RST_STREAM:
        if (w->len == 4 && w->sid != 0) {
            strm_t *s = strm(w->sid, 1);
            if (s != NULL && !s->client_reset) {
                s->client_reset = 1;
                s->client_reset_at = H.out_mark;
            }
        }
        break;
    default: break;
    }
}

static void
feed_walk_in(const uint8_t *p, size_t n)
{
    static const char preface[] = SK_H2_PREFACE;
    while (n > 0 && H.preface < SK_H2_PREFACE_LEN && !H.in_lost) {
        if (*p != (uint8_t)preface[H.preface]) {
            H.in_lost = 1;
            return;
        }
        H.preface++;
        p++;
        n--;
    }
    if (!H.in_lost && n > 0) {
        walk(&H.in, p, n, in_frame, in_data);
    }
}

/* The server's frames, as the peer read them. */
static void
check_field_block(strm_t *s, int trailers, int *status, int64_t *clen)
{
    /* decodes the block in H.block (RFC 7541) and checks it as a response or trailer section */
    const uint8_t *in = H.block;
    size_t left = H.block_len;
    int k = 0;
    *status = 0;
    for (;;) {
        nghttp2_nv nv;
        int fl = 0;
        ssize_t rv = nghttp2_hd_inflate_hd2(H.inflater, &nv, &fl, in, left, 1);
        if (rv < 0) {
            die("a header block the server sent does not decode (HPACK)");
        }
        in += rv;
        left -= (size_t)rv;
        if (fl & NGHTTP2_HD_INFLATE_EMIT) {
            const char *n = (const char *)nv.name, *v = (const char *)nv.value;
            if (k == 0 && !trailers) {
                REQUIRE(nv.namelen == 7 && memcmp(n, ":status", 7) == 0 && nv.valuelen == 3);
                REQUIRE(sk_is_digit((unsigned char)v[0]) && sk_is_digit((unsigned char)v[1]) &&
                        sk_is_digit((unsigned char)v[2]));
                *status = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
                REQUIRE(*status >= 100 && *status <= 599 && *status != 101);
            }
            else {
                REQUIRE(nv.namelen > 0 && n[0] != ':');
                REQUIRE(sk_token_len(n, nv.namelen) == nv.namelen);
                for (size_t i = 0; i < nv.namelen; i++) {
                    REQUIRE(!(n[i] >= 'A' && n[i] <= 'Z'));
                }
                for (size_t i = 0; i < nv.valuelen; i++) {
                    REQUIRE(v[i] != '\r' && v[i] != '\n' && v[i] != '\0');
                }
                REQUIRE(!SK_TOKEN_IEQ(n, nv.namelen, "connection") &&
                        !SK_TOKEN_IEQ(n, nv.namelen, "transfer-encoding") &&
                        !SK_TOKEN_IEQ(n, nv.namelen, "keep-alive") &&
                        !SK_TOKEN_IEQ(n, nv.namelen, "upgrade") &&
                        !SK_TOKEN_IEQ(n, nv.namelen, "proxy-connection"));
                if (!trailers && *status >= 200 && SK_TOKEN_IEQ(n, nv.namelen, "x-app")) {
                    size_t idx = 0;
                    for (size_t i = 0; i < nv.valuelen; i++) {
                        idx = idx * 10 + (size_t)(v[i] - '0');
                    }
                    REQUIRE(idx < H.napps && s->app == 0);
                    s->app = idx + 1;
                }
                if (SK_TOKEN_IEQ(n, nv.namelen, "content-length")) {
                    REQUIRE(!trailers && *clen < 0);
                    int64_t x = 0;
                    REQUIRE(nv.valuelen > 0 && nv.valuelen < 19);
                    for (size_t i = 0; i < nv.valuelen; i++) {
                        REQUIRE(sk_is_digit((unsigned char)v[i]));
                        x = x * 10 + (v[i] - '0');
                    }
                    *clen = x;
                }
            }
            k++;
        }
        if (fl & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(H.inflater);
            break;
        }
        if (rv == 0 && left == 0) {
            die("a header block the server sent ends inside a field");
        }
    }
    REQUIRE(trailers || k >= 1);
}

static void
block_done(void)
{
    /* a complete header block from the server on H.block_sid */
    int32_t sid = H.block_sid;
    int end_stream = (H.block_flags & NGHTTP2_FLAG_END_STREAM) != 0;
    strm_t *s = strm(sid, 1);
    H.in_block = 0;
    if (s == NULL) {
        return;
    }
    REQUIRE(!s->ended && !s->reset);
    int trailers = s->final;
    int status = 0;
    int64_t clen = -1;
    check_field_block(s, trailers, &status, &clen);
    if (trailers) {
        REQUIRE(end_stream); /* RFC 9113 §8.1: a trailer section ends the stream */
    }
    else if (status < 200) {
        REQUIRE(!end_stream); /* RFC 9113 §8.1: 1xx never ends a stream */
        s->informational = 1;
    }
    else {
        s->final = 1;
        s->status = status;
        s->clen = clen;
    }
    if (end_stream) {
        s->ended = 1;
        if (s->clen >= 0 && s->data > 0) {
            REQUIRE(s->data == (uint64_t)s->clen); /* RFC 9110 §8.6 */
        }
    }
}

static void
out_frame(walk_t *w)
{
    const uint8_t *p = w->payload;
    uint32_t len = w->len;
    int32_t sid = w->sid;
    if (H.verbose) {
        fprintf(stderr, "server: type %u flags 0x%02x stream %d length %u\n", w->type, w->flags,
                sid, len);
    }
    REQUIRE(!H.term); /* nothing after a GOAWAY with an error code */
    if (!H.saw_settings) {
        /* RFC 9113 §3.4: the server's preface is a SETTINGS frame */
        REQUIRE(w->type == NGHTTP2_SETTINGS && !(w->flags & NGHTTP2_FLAG_ACK));
        H.saw_settings = 1;
    }
    if (H.in_block) {
        REQUIRE(w->type == NGHTTP2_CONTINUATION && sid == H.block_sid);
    }
    uint64_t max_frame = H.max_frame > 16384 ? H.max_frame : 16384;
    if (sid != 0 && (w->type == NGHTTP2_HEADERS || w->type == NGHTTP2_DATA)) {
        const strm_t *cs = strm(sid, 0);
        /* RFC 9113 §5.1: a stream the client reset gets no more frames (once the server read the
         * reset); §6.8: none above a GOAWAY's last stream id is answered */
        REQUIRE(cs == NULL || !cs->client_reset || w->at < cs->client_reset_at);
        REQUIRE(!H.saw_goaway || sid <= H.goaway_last);
    }
    switch (w->type) {
    case NGHTTP2_DATA: {
        REQUIRE(sid != 0 && (sid & 1) && sid <= H.max_client_sid);
        REQUIRE(len <= max_frame && !(w->flags & NGHTTP2_FLAG_PADDED));
        strm_t *s = strm(sid, 1);
        if (s != NULL) {
            REQUIRE(s->final && !s->ended && !s->reset);
            if (s->clen >= 0) {
                REQUIRE(s->data <= (uint64_t)s->clen);
            }
            REQUIRE(s->data == 0 || (s->status != 204 && s->status != 304)); /* RFC 9110 §6.4.1 */
            if (!H.in_lost) {
                /* RFC 9113 §6.9: within the windows the client gave */
                uint64_t init = H.max_init > 65535 ? H.max_init : 65535;
                REQUIRE(s->data <= init + s->granted);
                REQUIRE(H.conn_data <= 65535 + H.conn_granted);
            }
            if (w->flags & NGHTTP2_FLAG_END_STREAM) {
                s->ended = 1;
                if (s->clen >= 0) {
                    REQUIRE(s->data == (uint64_t)s->clen);
                }
            }
        }
        break;
    }
    case NGHTTP2_HEADERS: {
        REQUIRE(sid != 0 && (sid & 1));
        REQUIRE(H.in_lost || sid <= H.max_client_sid);
        REQUIRE(len <= max_frame);
        uint32_t off = 0, pad = 0;
        if (w->flags & NGHTTP2_FLAG_PADDED) {
            REQUIRE(len >= 1);
            pad = p[0];
            off = 1;
        }
        if (w->flags & NGHTTP2_FLAG_PRIORITY) {
            off += 5;
        }
        REQUIRE(off + pad <= len);
        H.block_len = 0;
        H.block_sid = sid;
        H.block_flags = w->flags;
        H.in_block = 1;
        goto fragment;
    case NGHTTP2_CONTINUATION:
        REQUIRE(H.in_block && sid == H.block_sid && len <= max_frame);
        off = 0;
        pad = 0;
    fragment:
        if (H.block_len + (len - off - pad) > H.block_cap) {
            size_t ncap = (H.block_len + (len - off - pad)) * 2;
            uint8_t *nb = realloc(H.block, ncap);
            if (nb == NULL) {
                die("out of memory");
            }
            H.block = nb;
            H.block_cap = ncap;
        }
        memcpy(H.block + H.block_len, p + off, len - off - pad);
        H.block_len += len - off - pad;
        if (w->flags & NGHTTP2_FLAG_END_HEADERS) {
            block_done();
        }
        break;
    }
    case NGHTTP2_RST_STREAM: {
        REQUIRE(sid != 0 && len == 4);
        strm_t *s = strm(sid, 1);
        if (s != NULL) {
            s->reset = 1;
        }
        break;
    }
    case NGHTTP2_SETTINGS:
        REQUIRE(sid == 0);
        REQUIRE((w->flags & NGHTTP2_FLAG_ACK) ? len == 0 : len % 6 == 0);
        break;
    case NGHTTP2_PING: REQUIRE(sid == 0 && len == 8); break;
    case NGHTTP2_GOAWAY: {
        REQUIRE(sid == 0 && len >= 8);
        int64_t last = u32be(p) & 0x7fffffffu;
        uint32_t code = u32be(p + 4);
        if (H.verbose) {
            fprintf(stderr, "server: GOAWAY last %lld code %u\n", (long long)last, code);
        }
        /* RFC 9113 §6.8: the last stream id never increases */
        REQUIRE(!H.saw_goaway || last <= H.goaway_last);
        REQUIRE(last <= H.max_client_sid || last == 0x7fffffff);
        H.saw_goaway = 1;
        H.goaway_last = last;
        if (code != NGHTTP2_NO_ERROR) {
            H.term = 1;
        }
        break;
    }
    case NGHTTP2_WINDOW_UPDATE: {
        REQUIRE(len == 4);
        uint32_t inc = u32be(p) & 0x7fffffffu;
        REQUIRE(inc > 0);
        if (sid == 0) {
            H.conn_updated += inc;
            uint64_t raised =
                H.srv.h2.connection_window > 65535 ? H.srv.h2.connection_window - 65535 : 0;
            /* the connection's window reopens only for content received */
            REQUIRE(H.in_lost || H.conn_updated <= H.client_total + raised);
        }
        else {
            strm_t *s = strm(sid, 1);
            if (s != NULL) {
                s->updated += inc;
                REQUIRE(H.in_lost || s->updated <= s->client_data);
            }
        }
        break;
    }
    default: die("the server sent a frame type it never sends (PRIORITY, PUSH_PROMISE, unknown)");
    }
}

static void
out_data(walk_t *w, const uint8_t *p, size_t n)
{
    strm_t *s = strm(w->sid, 1);
    if (s != NULL) {
        if (s->app > 0 && s->final) {
            /* the content is the app's, in order (sk_h2.c's queue, file range, `after`) */
            const sk_buf_t *e = &H.apps[s->app - 1]->expect;
            REQUIRE(s->data + n <= sk_buf_len(e));
            REQUIRE(memcmp(sk_buf_head(e) + s->data, p, n) == 0);
            H.content_checked += n;
        }
        s->data += n;
    }
    H.conn_data += n;
}

/* ---- the simulated peer and reactor ---------------------------------------------------------- */

static void
check_bounds(void)
{
    sk_transport_t *t = &H.t;
    /* pump() stops appending at the high-water mark: at most one more of nghttp2's writes
     * (a frame, or a header block with its CONTINUATIONs) past it */
    REQUIRE(sk_buf_len(&t->out) <= SK_OUTPUT_HIGH_WATER + (1u << 20));
#ifdef FUZZ_MEM_COUNT
    size_t used = __sanitizer_get_current_allocated_bytes();
    REQUIRE(used < H.mem_base || used - H.mem_base < MEM_BOUND);
#endif
}

static void
peer_reads(size_t max)
{
    /* the peer takes up to max bytes of output; writable() as sk_transport.c calls it */
    sk_transport_t *t = &H.t;
    size_t before = sk_buf_len(&t->out);
    if (before == 0 || t->state == TP_CLOSED) {
        if (t->state == TP_CLOSING) {
            tell_closed(t, SK_CLOSED_LINGER_DONE);
        }
        return;
    }
    int was_high = before >= SK_OUTPUT_HIGH_WATER;
    size_t n = before < max ? before : max;
    if (H.corrupt && n > 3 && !H.saw_settings) {
        sk_buf_head(&t->out)[3] = NGHTTP2_PUSH_PROMISE;
    }
    walk(&H.out, (const uint8_t *)sk_buf_head(&t->out), n, out_frame, out_data);
    sk_buf_consume(&t->out, n);
    size_t left = sk_buf_len(&t->out);
    H.t.out_since = H.clock;
    int was_stalled = t->stalled;
    t->stalled = left > 0;
    if (!t->told && ((was_high && left < SK_OUTPUT_HIGH_WATER) || (was_stalled && left == 0))) {
        t->ops->writable(t->h);
    }
    if (t->state == TP_CLOSING && sk_buf_len(&t->out) == 0) {
        tell_closed(t, SK_CLOSED_LINGER_DONE);
    }
}

static void
tick(double dt)
{
    /* the reactor's timer: the handler's deadline when due with no output pending; the
     * write-progress deadline (30 s) when output waits */
    sk_transport_t *t = &H.t;
    H.clock += dt;
    if (t->state == TP_CLOSED) {
        return;
    }
    if (sk_buf_len(&t->out) > 0) {
        if (H.clock - t->out_since >= 30) {
            tell_closed(t, SK_CLOSED_WRITE_TIMEOUT);
        }
        return;
    }
    t->out_since = H.clock;
    if (t->state == TP_OPEN && t->dl_kind != 0 && t->dl_at <= H.clock) {
        int kind = t->dl_kind;
        t->dl_kind = 0;
        t->ops->deadline(t->h, kind);
    }
}

static void
apps_step(void)
{
    /* the request content the apps hold unread, over every exchange, attached or detached,
     * stays within the connection's window: what the wire gave back it no longer buffers */
    uint64_t held = 0;
    for (size_t i = 0; i < H.napps; i++) {
        held += H.apps[i]->buffered;
    }
    REQUIRE(held <= (uint64_t)H.srv.h2.connection_window);
    for (size_t i = 0; i < H.napps; i++) {
        app_run(H.apps[i], 1 + (int)(rnd(&H.seed) % 3));
    }
}

static void
round_end(int peer_mode, double dt)
{
    /* after a read: the apps run one step, the peer reads, the clock moves dt seconds (< 0:
     * as the input's clock mode says) */
    static const size_t per_round[4] = {SIZE_MAX, 1024, 0, 7};
    static const double steps[4] = {0.001, 0.5, 2.0, 7.0};
    if (dt < 0) {
        int mode = H.cfg[4] & 3;
        dt = mode == 0 ? 0.001 : mode == 1 ? 0.25 : mode == 2 ? 1.1 : steps[rnd(&H.seed) % 4];
    }
    H.round++;
    apps_step();
    check_bounds();
    peer_reads(per_round[peer_mode]);
    tick(dt);
    check_bounds();
}

/* ---- one input -------------------------------------------------------------------------------- */

static void
setup(const uint8_t *cfg)
{
    static const uint32_t streams[4] = {100, 1, 2, 8};
    static const uint32_t windows[4] = {65535, 16, 1024, 1u << 20};
    sk_serve_t *srv = &H.srv;
    memset(srv, 0, sizeof(*srv));
    srv->owner = &H.dummy;
    /* --root-path /fz: the root path a refusal's request line starts with (check_line) */
    srv->root_path_b = stub_bytes(3);
    memcpy(((PyBytesObject *)srv->root_path_b)->ob_sval, "/fz", 3);
    srv->keep_alive = 5.0;
    srv->head_timeout = 10.0;
    srv->body_timeout = (cfg[0] & 0x80) ? 5.0 : 0;
    srv->limit_concurrency = (cfg[0] & 0x40) ? 2 : 0;
    srv->limits.max_body = (cfg[1] & 0x80) ? 100 : 0;
    srv->h2.mode = SK_HTTP_AUTO;
    srv->h2.max_concurrent_streams = streams[cfg[0] & 3];
    srv->h2.initial_window = windows[(cfg[0] >> 2) & 3];
    /* the connection's window: one stream's (cfg[5]'s low bit) or
     * the default four; never under RFC 9113's 65535 */
    srv->h2.connection_window = srv->h2.initial_window * ((cfg[5] & 1) ? 1 : 4);
    if (srv->h2.connection_window < 65535) {
        srv->h2.connection_window = 65535;
    }
    srv->unix_path = Py_None;
    srv->proxy.enabled = (cfg[5] & 2) != 0;
    srv->h2.max_headers_size = (cfg[0] & 0x10) ? 256 : 65536;
    srv->h2.max_frame_size = 16384;
    srv->h2.write_timeout = 30.0;
    srv->h2.guard = sk_h2guard_defaults;
    if (cfg[0] & 0x20) {
        for (int k = 0; k < SK_H2G_KINDS; k++) {
            srv->h2.guard.burst[k] = 3;
            srv->h2.guard.rate[k] = 1.0;
        }
    }
    if (cfg[1] & 0x40) {
        static const char server[] = "Server: fuzz\r\n";
        static const char extra[] = "X-One: 1\r\nX-Two: two\r\n";
        srv->trace = &H.dummy;
        srv->access.pending = &H.dummy;
        srv->metrics = &H.metrics;
        srv->resp_opts.server = server;
        srv->resp_opts.server_len = sizeof(server) - 1;
        srv->resp_opts.extra = extra;
        srv->resp_opts.extra_len = sizeof(extra) - 1;
        sk_resp_opts_measure(&srv->resp_opts); /* as sk_server.c's server_opts() */
    }
    memset(&H.metrics, 0, sizeof(H.metrics));
    H.eager = (cfg[1] & 0x10) != 0;
}

static void
finish(void)
{
    /* the end of an input: the connection is reaped; everything must be released */
    sk_transport_t *t = &H.t;
    if (!t->told) {
        tell_closed(t, SK_CLOSED_PEER);
    }
    /* the apps go on until they return, as Tasks do after their connection went */
    for (int i = 0; i < 8; i++) {
        apps_step();
    }
    t->ops->release(t->h);
    uint64_t given = 0;
    for (size_t i = 0; i < H.napps; i++) {
        given += H.apps[i]->body_got;
    }
    REQUIRE(H.in_lost || given <= H.client_total); /* request content comes from DATA only */
    for (size_t i = 0; i < H.napps; i++) {
        struct sk_exchange *x = H.apps[i];
        REQUIRE(!x->running);
        REQUIRE(Py_REFCNT((PyObject *)x) == 1); /* the handler dropped every reference */
        sk_buf_free(&x->expect);
        Py_DECREF((PyObject *)x);
    }
    Py_CLEAR(H.srv.root_path_b);
    REQUIRE(H.objects == 0);
    REQUIRE(H.blocks == 0);
    REQUIRE(H.srv.active_requests == 0);
    for (size_t i = 0; i < H.nfds; i++) {
        REQUIRE(fcntl(H.fds[i], F_GETFD) < 0 && errno == EBADF); /* the wire closed it */
    }
    close(H.memfd);
    nghttp2_hd_inflate_del(H.inflater);
    free(H.in.payload);
    free(H.out.payload);
    free(H.block);
    sk_buf_free(&t->out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8) {
        return 0;
    }
    memset(&H, 0, sizeof(H));
    memcpy(H.cfg, data, 8);
    for (int i = 4; i < 8; i++) {
        H.seed = (H.seed << 8) | data[i];
    }
    H.seed = H.seed * 0x9e3779b97f4a7c15ULL + 1;
    H.clock = 1000.0;
    H.verbose = getenv("FUZZ_VERBOSE") != NULL;
    H.corrupt = getenv("FUZZ_H2_CORRUPT") != NULL;
    H.max_init = 65535;
    H.max_frame = 16384;
    H.memfd = memfd_create("fuzz_h2", 0);
    REQUIRE(H.memfd >= 0);
    {
        uint8_t chunk[1000];
        for (uint64_t i = 0; i < FILE_SIZE; i += sizeof(chunk)) {
            for (size_t k = 0; k < sizeof(chunk); k++) {
                chunk[k] = file_byte(i + k);
            }
            REQUIRE(write(H.memfd, chunk, sizeof(chunk)) == (ssize_t)sizeof(chunk));
        }
    }
    stub_own(&H.dummy);
    Py_SET_TYPE(&H.dummy, &stub_type);
    if (nghttp2_hd_inflate_new(&H.inflater) != 0) {
        die("out of memory");
    }
#ifdef FUZZ_MEM_COUNT
    H.mem_base = __sanitizer_get_current_allocated_bytes();
#endif
    setup(H.cfg);
    H.fail_addresses = ((H.seed >> 16) & 31) == 0; /* 1 input in 32: sk_serve_addresses fails */
    H.shutdown_at = (unsigned)((H.seed >> 8) % 6);
    const uint8_t *in = data + 8;
    size_t n = size - 8;
    int split = H.cfg[1] & 3;
    int peer_mode = (H.cfg[1] >> 2) & 3;
    uint64_t split_seed = H.seed;

    sk_transport_t *t = &H.t;
    if (sk_h2_start(t, &H.srv) != 0) {
        die("sk_h2_start failed");
    }
    REQUIRE(t->ops == &sk_h2_ops && t->h != NULL);
    check_bounds();
    peer_reads(peer_mode == 2 ? 0 : SIZE_MAX);

    size_t pos = 0, calls = 0;
    while (pos < n && t->state == TP_OPEN) {
        size_t piece = split_piece(split, &split_seed, ++calls, n, pos);
        H.out_mark = H.out.total + sk_buf_len(&t->out);
        t->dispatching = 1;
        size_t used = t->ops->data_received(t->h, (const char *)in + pos, piece);
        t->dispatching = 0;
        REQUIRE(t->told || used == piece); /* the handler takes every byte */
        feed_walk_in(in + pos, piece);
        pos += piece;
        H.fed = pos;
        round_end(peer_mode, -1);
        if ((H.cfg[1] & 0x20) && !H.shutdown_called && calls == H.shutdown_at &&
            t->state == TP_OPEN) {
            H.shutdown_called = 1; /* the server stops while the client still sends */
            t->ops->shutdown(t->h);
        }
    }
    if ((H.cfg[1] & 0x20) && !H.shutdown_called && t->state == TP_OPEN) {
        H.shutdown_called = 1;
        t->ops->shutdown(t->h);
    }
    /* the apps finish, the peer reads everything, the deadlines pass */
    for (int i = 0; i < 12 && t->state != TP_CLOSED; i++) {
        round_end(peer_mode == 2 ? 2 : 0, 3.0);
    }
    for (int i = 0; i < 40 && t->state != TP_CLOSED && sk_buf_len(&t->out) > 0; i++) {
        apps_step();
        peer_reads(SIZE_MAX);
    }
    if (H.verbose) {
        fprintf(stderr, "%llu content bytes checked, %zu apps\n",
                (unsigned long long)H.content_checked, H.napps);
    }
    int closed_by_handler = t->closed_how;
    int dropped = t->dropped;
    finish();
    if (!dropped && !t->dropped) {
        REQUIRE(H.out.hlen == 0); /* whole frames */
        REQUIRE(!H.in_block);
    }
    if (closed_by_handler == SK_CLOSE_AFTER_WRITE && !t->dropped) {
        /* the handler ended the connection after writing: with a GOAWAY (RFC 9113 §6.8), its
         * own or in answer to the client's */
        REQUIRE(H.saw_goaway || H.client_goaway);
    }
    if (H.shutdown_called && !t->dropped && closed_by_handler == 0) {
        REQUIRE(H.saw_goaway);
    }
    return 0;
}
