/* sk_wssession.h — the ASGI `websocket` session (ASGI websocket spec 2.4), whatever wire carries
 * it, and the table through which it talks to that wire.
 *
 * A session is what one WebSocket connection is to the application: the websocket scope, the
 * app's Task (the session object is the coroutine the Task runs), receive() with its events
 * (websocket.connect, websocket.receive, websocket.disconnect), the queue of received messages
 * and its flow control (--ws-max-queue), send() with the validation of every message
 * (websocket.accept, websocket.send, websocket.close, websocket.http.response.start/body), what
 * the app leaves unanswered when its Task ends, and the handshake answer's access-log record and
 * metrics. It knows nothing of how the connection is carried: the opening handshake's fields,
 * frames, masking, compression, pings and the close handshake's timeout are the wire's.
 *
 * Wires: sk_wsh.c (RFC 6455 over an HTTP/1.1 connection, after a 101); an RFC 8441 stream (a
 * WebSocket over an HTTP/2 stream, accepted with a 200) implements the same table.
 *
 * Includes neither a wire handler's header nor the transport's API: a wire includes this one.
 * Threading: everything runs on the event loop's thread, holding the GIL.
 * Never: touches a socket, a transport or the reactor, or lets an application's failure reach
 * another connection or the server.
 */
#ifndef SK_WSSESSION_H
#define SK_WSSESSION_H

#include "sk_module.h"
#include "sk_serve.h"

/* One session: a Python object (cast to PyObject * for reference counting). */
typedef struct sk_wss sk_wss_t;

/* Free header slots the session leaves before the app's fields given to accept(): the wire
 * writes its own fields there, so the head is one array without a copy. */
#define SK_WSS_ACCEPT_ROOM 5

/* The wire's side of a session. One per kind of wire, static storage (sk_wsh.c: sk_wsh_wire).
 * Every entry but fields_refused() takes the wire pointer `wire` the session was made with
 * (sk_wss_new); the session calls them only between sk_wss_new() and the wire's sk_wss_gone()
 * (after it the wire may be freed), possibly from inside an answer (pause_reading() from
 * sk_wss_message()).
 * Return values shared by the entries that write:
 *   0   done;
 *   1   done, and the wire's output is at or over its high-water mark: the session waits for
 *       sk_wss_drained() before it completes the app's send();
 *   -1  nothing sent, an exception set (MemoryError, or the RuntimeError/ValueError named);
 *   SK_WSS_GONE  the connection went away during the call (no exception set; sk_wss_gone() was
 *       already called): the session raises ClientDisconnected.
 * Strings and header arrays are borrowed for the call only; the wire copies what it keeps. */
#define SK_WSS_GONE (-2)
typedef struct sk_wss_wire_ops {
    /* Accepts the handshake (websocket.accept): on HTTP/1.1 the 101 with Sec-WebSocket-Accept,
     * on HTTP/2 a 200 HEADERS frame. `sub`/`sub_len`: the subprotocol in UTF-8, one the client
     * offered (the session checked), or NULL. hdrs[0..n): the app's extra fields, already
     * checked with fields_refused(); hdrs[-SK_WSS_ACCEPT_ROOM..-1] are free for the wire's own.
     * The wire negotiates its extensions itself (permessage-deflate, RFC 7692), calls
     * sk_wss_answered() with the status it sent, and from then on delivers messages. Only while
     * the handshake is unanswered. 0, -1, SK_WSS_GONE. */
    int (*accept)(void *wire, const char *sub, size_t sub_len, sk_header_t *hdrs, size_t n);
    /* Refuses the handshake with a response of the server's own: `status` 403 (the app closed
     * before accepting) or 500 (it failed, or returned without answering), then ends the
     * connection (calls sk_wss_answered() once written). Only while the handshake is
     * unanswered. */
    void (*refuse)(void *wire, int status);
    /* Starts a denial response (websocket.http.response.start): `status` 200..599 (the session
     * checked), hdrs[0..n) the app's fields, checked with fields_refused(). Nothing is written
     * yet (the head goes with the first body). Only while the handshake is unanswered. 0, 1
     * (output written before, e.g. an earlier response, is still over the mark), or -1 (an
     * exception from the serializer's rules). */
    int (*deny_start)(void *wire, int status, const sk_header_t *hdrs, size_t n);
    /* A chunk of the denial response's content (websocket.http.response.body), `len` bytes;
     * `more` = 0 ends it and the connection with it. When the response ends, ends unfinished
     * (an error once its head is out: the connection is aborted) or the connection goes away
     * during it, the wire calls sk_wss_answered() with the status and the content bytes sent,
     * if the head was written. Only after deny_start(). 0, 1 (more = 1 only), -1, SK_WSS_GONE. */
    int (*deny_body)(void *wire, const char *data, size_t len, int more);
    /* Abandons a started denial response (the app ended without its last body): the
     * connection is closed after what was written; the response stays incomplete. */
    void (*deny_abort)(void *wire);
    /* Sends one message (websocket.send) of `len` bytes: text (`text` = 1: valid UTF-8, which
     * the session guarantees) or binary. Only once accepted and before the close handshake.
     * 0, 1, -1 (MemoryError, or a compression error), SK_WSS_GONE. */
    int (*send)(void *wire, int text, const char *data, size_t len);
    /* Starts the server's side of the close handshake (websocket.close after accept, or the
     * app's return): a Close with `code` (1000..4999, valid to send: the session checked) and
     * `reason` (`reason_len` <= 123 bytes of UTF-8), then the wire waits for the peer's Close
     * (or its own timeout) and calls sk_wss_closing() now and sk_wss_closed() at the end. A
     * protocol error of the peer's held behind messages (see receiving()) is sent instead (then
     * only sk_wss_closed()). Only once accepted. 0, or -1 (MemoryError: nothing sent). */
    int (*close)(void *wire, int code, const char *reason, size_t reason_len);
    /* Fails the connection from the server's side (the app raised once accepted: `code` 1011;
     * or a close() that could not be sent: 1000): a Close with `code` and no close handshake
     * (the connection ends after the write; sk_wss_closed() is called). A held protocol error
     * of the peer's is sent instead. */
    void (*fail)(void *wire, int code);
    /* The app came back to receive(): a protocol error of the peer's that the wire holds until
     * the app has taken every message before it (sk_wss_backlog()) is sent now if the backlog
     * is empty, ending the connection (sk_wss_closed()). */
    void (*receiving)(void *wire);
    /* Flow control: `paused` = 1 stops reading from the peer (no more sk_wss_message()), 0
     * resumes (input already buffered is offered again soon). Called on change only. */
    void (*pause_reading)(void *wire, int paused);
    /* -1 with RuntimeError when one of hdrs[0..n) is a field the wire's handshake writes itself
     * (an app's copy would repeat or contradict it), naming it and `what` (the ASGI message
     * type); `accepting` = 1 for an acceptance's fields, 0 for a denial response's. Else 0. May
     * be called at any time: it takes no wire. */
    int (*fields_refused)(const sk_header_t *hdrs, size_t n, int accepting, const char *what);
} sk_wss_wire_ops_t;

/* ---- made by a wire ------------------------------------------------------------------------- */

/* Makes the session for a WebSocket handshake the wire received and checked: `scope` (a dict,
 * borrowed) is the request's http scope, made here into the websocket scope in place (type,
 * asgi.spec_version, scheme ws/wss, no method, subprotocols read from its `headers`, the
 * websocket.http.response extension); it is also the access record's scope. `ops`/`wire`: the
 * wire's table and pointer, borrowed until sk_wss_gone(). The app is not called yet. Returns a
 * new reference (the wire owns it, and gives the session's answers through it), or NULL with an
 * exception set. */
sk_wss_t *sk_wss_new(sk_serve_t *srv, PyObject *scope, const sk_wss_wire_ops_t *ops, void *wire);
/* Calls the app and runs it as a Task of the loop (on 3.12+ its first step may run, eagerly,
 * inside this call, and call the wire's entries). If the app cannot be called or raises in its
 * synchronous part, it is logged and the handshake refused with 500 (refuse()). */
void sk_wss_start(sk_wss_t *s);
/* GC: visits the wire's strong reference to `s` (the wire's traverse entry calls it). */
int sk_wss_traverse(sk_wss_t *s, visitproc visit, void *arg);

/* ---- the wire's answers --------------------------------------------------------------------- */

/* A complete message arrived (after the wire's acceptance): `len` bytes of text (`text` = 1,
 * valid UTF-8: the wire checked) or binary, borrowed for the call. Queued for receive() as
 * websocket.receive; over the queue's marks the session calls pause_reading(1) before
 * returning. 0, or -1 with an exception set (the wire fails the connection: 1011). */
int sk_wss_message(sk_wss_t *s, int text, const char *data, size_t len);
/* 1 while messages the session was given wait for the app: in the queue, or the last one given
 * to receive() until the app calls receive() again. A wire holds a protocol error of the
 * peer's behind them (its Close waits) and sends it from receiving(), close(), fail() or its
 * own timeout. */
int sk_wss_backlog(const sk_wss_t *s);
/* The wire sent the server's Close on its own (a graceful shutdown: 1012): the session is
 * closing; the app's send() raises ClientDisconnected from now on. */
void sk_wss_closing(sk_wss_t *s);
/* The WebSocket connection ended: the peer's Close was received (`by_peer` = 1; its `code`, 1005
 * for none, and `reason`, `reason_len` bytes of UTF-8, borrowed), the connection was failed (the
 * code the wire sent), or the close handshake timed out (1006) (`by_peer` = 0). receive() gives
 * websocket.disconnect with this code and reason once the queue is empty. Only the first end
 * counts. A peer's Close before the app's or the server's (sk_wss_closing) is the client leaving
 * (skirr_client_disconnects_total, counted when the app's call ends). */
void sk_wss_closed(sk_wss_t *s, int by_peer, int code, const char *reason, size_t reason_len);
/* The wire's output dropped back under its high-water mark: send() calls waiting complete. */
void sk_wss_drained(sk_wss_t *s);
/* The handshake's answer is complete, as the client saw it: `status` (101 or 200 on
 * acceptance, 403/500, or a denial response's) and its content `bytes`. The access log's record
 * and the metrics' response, once per session (later calls are ignored). */
void sk_wss_answered(sk_wss_t *s, int status, uint64_t bytes);
/* The connection is gone (the transport closed, or the stream was reset): the session ends
 * (websocket.disconnect 1006 unless sk_wss_closed() came first: then also the client leaving,
 * unless the app or the server had begun closing), send() calls waiting for drain
 * raise ClientDisconnected, and the session never calls `ops` again. Called exactly once, before
 * the wire frees itself; the wire keeps its reference until then. */
void sk_wss_gone(sk_wss_t *s);

#endif
