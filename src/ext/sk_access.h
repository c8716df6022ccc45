/* sk_access.h — the access log's native half: what the HTTP/1.1 and HTTP/2 handlers record per
 * finished exchange and per refusal, and the WebSocket session (sk_wssession.c) per handshake
 * answer, handed to Python in batches.
 *
 * Owns: the record tuples, the pending list they are appended to (owned by the Python side) and
 * scheduling its flush (loop.call_soon) for the first record of a batch and for each full one. The line is
 * formatted in Python (skirr.access_log), never here, and only if the `skirr.access` logger is
 * enabled for INFO when the batch is flushed.
 * Never: formats, logs or calls into Python per request beyond one list append (and, for the first
 * record of a batch, one call_soon); costs nothing but a NULL test when the access log is off.
 * The values in a record are as received (bytes, or str decoded as latin-1): client-controlled
 * text is escaped when a line is formatted (sk_access_log_escape, declared in sk_module.h, used by skirr.access),
 * never here.
 *
 * Records (tuples):
 *   response: (scope, status, bytes, seconds, response_headers, time)
 *       scope is the request's scope dict (the one the app got), status the response status,
 *       bytes the content bytes sent, seconds the time from the request head to the response's
 *       end (float), response_headers what the app sent (the object as given) or None.
 *       For a WebSocket handshake the scope is the websocket scope (no "method": the request
 *       was a GET), status the answer (101 accepted, 403, 500, or a denial response's status),
 *       seconds from the request head to the answer, response_headers the app's headers of its
 *       websocket.accept or denial response (a tuple of pairs) or None, time when the
 *       record was made (the response's end; seconds since the epoch, float): a line shows it,
 *       never the time its batch is written.
 *   refusal:  (None, status, client, method, target, http_version, reason, bytes, time)
 *       a request skirr answered itself (400, 408, 413, 414, 426, 431, 500, 501, 503, 505; 400 and
 *       426 for a refused WebSocket handshake too; 421 too over HTTP/2): client is
 *       (host, port) or None, method/target are str or None when not parsed that far (see
 *       sk_access_line_t), http_version "1.0"/"1.1"/"2.0" or None, reason a short English
 *       explanation, time as above.
 */
#ifndef SK_ACCESS_H
#define SK_ACCESS_H

#include "sk_module.h"
#include "sk_http.h"

#include <sys/socket.h>

/* Records per batch: the flush is scheduled again each time this many are pending (the Python
 * side writes a full batch at once, a partial one after at most 50 ms). */
#define SK_ACCESS_BATCH 64

/* The access log and what its records and their flush read from the server that embeds it. The
 * owner (sk_serve.h's sk_serve_t, filled by the Server) sets every field once, before the first
 * connection; the borrowed ones point at objects the owner keeps alive for its whole life. */
typedef struct {
    PyObject *pending; /* list the records go to, or NULL: the access log is off (strong) */
    PyObject *flush;   /* zero-argument callable scheduled with loop.call_soon (strong) */
    sk_state *st;
    PyObject *loop;             /* the running event loop (borrowed) */
    PyObject *const *context;   /* where the owner keeps the contextvars.Context the flush is
                                  * scheduled in (read at each use: the owner may replace it) */
    PyObject *call_soon_kw;     /* ("context",) (borrowed) */
    PyObject *unix_path;        /* str for a Unix-domain socket, else None (borrowed) */
    PyObject *trace;            /* callable(event, client) for --log-level trace, or NULL */
    struct sk_metrics *metrics; /* --metrics-port counters (sk_metrics.h), or NULL: off */
} sk_access_t;

/* Per request: when its head was parsed (monotonic seconds) and the response headers the app
 * sent. Zero-initialised with the request; cleared with sk_access_req_clear. */
typedef struct {
    double t_start;         /* set while the access log or metrics are on */
    uint8_t method;         /* sk_metrics_method() index, while metrics are on */
    PyObject *scope;        /* strong while the access log is on: the scope the app got */
    PyObject *resp_headers; /* strong, or NULL */
} sk_access_req_t;

/* Monotonic seconds. */
double sk_access_now(void);
/* Starts what the access log and the metrics keep of an exchange, each only while on (an HTTP
 * request, or a WebSocket handshake, sk_wssession.c): the start time, the scope (borrowed; the one the
 * app gets) and method, the request's llhttp method. */
void sk_access_exchange_begin(sk_access_t *a, sk_access_req_t *rq, PyObject *scope, int method);
/* Ends it, once, with what the client saw: status and content bytes to the metrics' responses
 * and the access log's response record (the tuple above; rq->scope is dropped; a failure to
 * record is reported as unraisable), each only while on. */
void sk_access_exchange_end(sk_access_t *a, sk_access_req_t *rq, int status, uint64_t bytes);
/* The request line of a refused request, as the wire knows it: every pointer borrowed and valid
 * for the call it is given to, every length in bytes. The record's target is prefix, path, then
 * '?' and query when query_len > 0, each byte as received (decoded as latin-1):
 *   HTTP/1.1  method the parser's name, version "1.0" or "1.1"; for a head that passed the checks
 *             (sk_parser_head_checked) prefix the root path's bytes and path and query the
 *             request-target split as the scope's raw_path and query_string
 *             (sk_http_target_split): the line an app's response to it is logged with; for a head
 *             read whole but refused as invalid the request-target whole as received (query
 *             empty), after the root path only when it is origin-form (begins with '/');
 *   HTTP/2    method :method, prefix the root path's bytes, path and query :path split at its
 *             first '?' ("/" for an empty path), version "2.0": the line an app's response on
 *             the stream is logged with (its scope's method, raw_path and query_string). */
typedef struct {
    const char *method;
    size_t method_len;
    const char *prefix; /* may be NULL when prefix_len is 0; likewise query */
    size_t prefix_len;
    const char *path;
    size_t path_len;
    const char *query; /* after the '?', without it */
    size_t query_len;
    const char *version; /* NUL-terminated: "1.0", "1.1" or "2.0" */
} sk_access_line_t;

/* HTTP/1.1's request line from p (may be NULL) into *out, root[0..root_len) the root path's bytes
 * (--root-path): out, or NULL when the head was not read whole (only then are the request line's
 * spans valid; the head may be invalid). */
const sk_access_line_t *sk_access_line_http1(const sk_parser_t *p, const char *root,
                                             size_t root_len, sk_access_line_t *out);
/* Records a refusal: skirr's own response of `bytes` bytes of content (0: none was sent), with
 * the request line when the wire gives one (line; NULL: "-" and no method, target nor version).
 * client is borrowed (may be NULL: taken from peer). */
void sk_access_refusal(sk_access_t *a, PyObject *client, const struct sockaddr *peer,
                       const sk_access_line_t *line, int status, uint64_t bytes,
                       const char *reason);
void sk_access_req_clear(sk_access_req_t *rq);
/* GC support for a request's record. */
int sk_access_req_traverse(sk_access_req_t *rq, visitproc visit, void *arg);
/* --log-level trace: a->trace(event, client) for the connection, when trace is on (a->trace not
 * NULL).
 * Failures are reported as unraisable. */
void sk_access_trace(sk_access_t *a, PyObject *client, const struct sockaddr *peer,
                     const char *event);

#endif
