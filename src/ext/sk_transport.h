/* sk_transport.h — the native reactor and its connections (transports), and the table through
 * which a transport talks to the protocol handler that speaks on it.
 *
 * A reactor owns one epoll set registered with the running event loop, the listening socket, a
 * one-second timer (timerfd) and every accepted connection. A connection is a transport: it owns
 * the socket, the input buffer (received bytes the handler has not consumed), the output buffer
 * (bytes the kernel has not accepted), the 64 KiB high-water marks and the epoll mask they imply,
 * the write-progress and linger deadlines, the handler's one deadline, linger and close. It knows
 * the protocol spoken on it only through an sk_handler_ops_t and an opaque handler pointer.
 *
 * Layers: socket -> stream layer (sk_stream.h: plain, or TLS) -> transport -> protocol handler.
 * The transport does all its byte I/O through its stream layer's sk_stream_ops_t (chosen where
 * the transport is made: sk_reactor_config_t.stream), so "bytes" below are the stream's (the
 * plaintext under TLS); a handler never knows which layer its transport has.
 *
 * Handlers include this header; this header and sk_transport.c include no handler's.
 * Never: parses, builds Python objects other than the loop calls it needs, or knows which
 * protocol a connection speaks.
 *
 * Threading: everything runs on the event loop's thread, holding the GIL.
 * Lifetime: a transport is never freed while a stack frame may still use it. sk_transport_close()
 * only marks it closed (fd closed, handler told); the reactor frees closed transports at the end
 * of each of its entry points (sk_reactor_on_ready, sk_reactor_run_pending, sk_reactor_shutdown,
 * sk_reactor_close), when nothing below holds a pointer to one.
 */
#ifndef SK_TRANSPORT_H
#define SK_TRANSPORT_H

#include "sk_module.h"
#include "sk_stream.h"

#include <sys/socket.h>

/* Output high-water mark (bytes): over it the transport stops reading, and writable() tells the
 * handler when the output drops back under it. */
#define SK_OUTPUT_HIGH_WATER (64 * 1024)

typedef struct sk_reactor sk_reactor_t;
typedef struct sk_transport sk_transport_t;

/* Why a transport closed, as told to the handler's closed() entry. */
enum sk_close_reason {
    SK_CLOSED_PEER = 1,      /* FIN, reset or a socket error from the peer */
    SK_CLOSED_WRITE_TIMEOUT, /* unsent output made no progress for --timeout-write seconds */
    SK_CLOSED_LINGER_DONE,   /* a server-side close finished lingering (or timed out) */
    SK_CLOSED_BY_HANDLER,    /* the handler called sk_transport_close(SK_CLOSE_NOW) or _abort */
    SK_CLOSED_SERVER,        /* the reactor is closing every connection */
    SK_CLOSED_NO_MEMORY,     /* the transport could not buffer received bytes */
    SK_CLOSED_FILE_SHORT,    /* a queued file range ended early (the file shrank): reset */
    SK_CLOSED_FILE_ERROR,    /* reading a queued file range failed (sendfile: EIO, ...): reset */
};

/* The protocol handler table. One per protocol, static storage: sk_http1_ops (HTTP/1.1, every
 * accepted connection starts with it) and sk_wsh_ops (WebSocket, switched to after a 101).
 * Every entry receives the handler pointer `h` the transport was given (sk_reactor_new's open
 * function, or sk_transport_switch). Inside every entry the handler may call any sk_transport_*
 * function on its own transport; it must never free the transport (the reactor does) and must
 * not free `h` itself (release() does). */
typedef struct sk_handler_ops {
    /* Bytes arrived, or the handler asked for its buffered input again (sk_transport_feed,
     * sk_transport_feed_soon). `data` is borrowed and valid only during the call (the reactor's
     * read buffer or the transport's input buffer). Returns how many bytes it consumed; the
     * transport keeps the rest, in order, for the next call. Output written inside this call is
     * sent when it returns (one write for everything the call produced), unless held
     * (sk_transport_hold); when the call came from a reactor callback (a read, or
     * sk_transport_feed_soon's), it is sent with every other connection's at that callback's end
     * (one batch of writes: sk_transport_write_later), or sooner once the batch's first output
     * has waited cfg.batch_delay seconds. May close the transport (the return value is then
     * ignored) or switch protocol (the rest goes to the new handler). Not called while the
     * transport is closing, lingering or closed. */
    size_t (*data_received)(void *h, const char *data, size_t len);
    /* Output dropped below the high-water mark after being at or above it, drained completely
     * after a write had to wait for the peer, or a queued file range was completely sent. For
     * waking a sender waiting for drain, resuming held-back input, restarting an idle deadline.
     * May write and close. */
    void (*writable)(void *h);
    /* The handler's deadline (sk_transport_set_deadline) passed; `kind` is the value it gave.
     * Only called with no output pending (the write-progress deadline governs then). The
     * deadline is cleared before the call. May write and close, or set a new deadline. */
    void (*deadline)(void *h, int kind);
    /* The server is shutting down: close now if nothing is in flight, else finish what is and
     * close after it. Called once per open transport. */
    void (*shutdown)(void *h);
    /* The transport closed (its fd is gone), or the peer sent its FIN (reason SK_CLOSED_PEER):
     * then what the handler already wrote, held or not, is still sent before the fd closes (a
     * response completed before a client's half-close is not lost). `reason` is an enum
     * sk_close_reason. Called exactly once, and never for a handler switched away from. Wake
     * whatever waits on the connection; no sk_transport_* call has any effect from here on. */
    void (*closed)(void *h, int reason);
    /* Frees `h`. Called exactly once, when the reactor reaps the closed transport (no frame can
     * still hold `h` then): after closed(), or, for a handler switched away from, with no
     * closed() (it may still be on the stack at the switch, so it is kept until the reap). */
    void (*release)(void *h);
    /* GC support: visits the Python objects `h` holds strongly. */
    int (*traverse)(void *h, visitproc visit, void *arg);
    /* Once a second (the reactor's tick) while the transport is open with nothing unsent and no
     * input left unconsumed (the transport's own buffers were just freed): the handler frees the
     * storage it keeps between messages, to be made again by the next one, so an idle connection
     * costs only its structs (issue 37: memory per idle connection). Never writes or closes;
     * the handler decides whether it is between messages. Returns the bytes of storage it freed
     * (capacities: the tick gives the heap's free pages back once enough is freed). NULL:
     * nothing to free. */
    size_t (*idle)(void *h);
} sk_handler_ops_t;

/* Makes the handler for a transport just accepted (its deadline, if any, is set here). Returns
 * the handler pointer, or NULL (out of memory: the connection is closed). */
typedef void *(*sk_handler_open_fn)(void *owner, sk_transport_t *t);

/* ---- the reactor ---------------------------------------------------------------------------- */

/* Borrowed pointers the reactor uses; the owner (the Server object) keeps each alive for the
 * reactor's whole life. */
typedef struct {
    sk_state *st;
    PyObject *loop;               /* the running event loop */
    PyObject *run_pending;        /* callable for loop.call_soon: must call sk_reactor_run_pending;
                                   * borrowed, never used once the reactor is closed */
    PyObject *const *context;     /* where the owner keeps the contextvars.Context run_pending is
                                   * scheduled in (read at each use: the owner may replace it) */
    PyObject *call_soon_kw;       /* ("context",) */
    const sk_handler_ops_t *ops;  /* the protocol every accepted connection starts with */
    sk_handler_open_fn open;      /* makes its handler */
    void *owner;                  /* passed to open */
    int listen_fd;                /* listening socket (not owned: the caller closes it) */
    double write_timeout;         /* seconds without write progress before closing */
    double batch_delay;           /* seconds a response queued with sk_transport_write_later (or
                                   * written inside a reactor callback) may wait for the rest of
                                   * its batch; 0 = written at once */
    Py_ssize_t limit_connections; /* open connections before accepting pauses; 0 = unlimited */
    PyObject *logger; /* logging.Logger (or None): accepting paused (a warning, at most once per
                       * PAUSE_LOG_INTERVAL seconds) and resumed (info) */
    /* The stream layer of every accepted connection (static storage; NULL: sk_stream_plain), and
     * what its open entry gets (borrowed: the owner keeps it alive for the reactor's life; a TLS
     * layer's SSL_CTX). */
    const sk_stream_ops_t *stream;
    void *stream_arg;
} sk_reactor_config_t;

/* Ready descriptors handled per reactor callback (the rest stay ready: reported on the
 * next wake-up). */
#define SK_MAX_EVENTS 64

/* New reactor (epoll set and 1 s timerfd made, nothing registered with the loop yet), or NULL
 * with an OSError/MemoryError set. */
sk_reactor_t *sk_reactor_new(const sk_reactor_config_t *cfg);
/* The epoll descriptor to give to loop.add_reader (its callback calls sk_reactor_on_ready). */
int sk_reactor_fd(const sk_reactor_t *r);
/* Polls the listening socket: 0, or -1 with errno set. */
int sk_reactor_start_accepting(sk_reactor_t *r);
/* Stops polling the listening socket (idempotent). */
void sk_reactor_stop_accepting(sk_reactor_t *r);
/* The loop's add_reader callback: handles at most SK_MAX_EVENTS ready descriptors; when the
 * one-second timer is among them, the input ready then is taken first (more non-blocking polls
 * and the pending list) and only then are the deadlines swept. */
void sk_reactor_on_ready(sk_reactor_t *r);
/* The call_soon callback: feeds every transport that asked for sk_transport_feed_soon. */
void sk_reactor_run_pending(sk_reactor_t *r);
/* Ends the batch (sk_reactor_flush), then calls each open transport's shutdown() entry. */
void sk_reactor_shutdown(sk_reactor_t *r);
/* Closes every transport (SK_CLOSED_SERVER), the epoll set and the timer. Idempotent. */
void sk_reactor_close(sk_reactor_t *r);
/* Closes (if not yet) and frees. NULL is allowed. */
void sk_reactor_free(sk_reactor_t *r);
/* Open connections. */
Py_ssize_t sk_reactor_connections(const sk_reactor_t *r);
/* GC: visits what every transport's handler holds. */
int sk_reactor_traverse(sk_reactor_t *r, visitproc visit, void *arg);

/* ---- a transport, as its handler sees it ---------------------------------------------------- */

/* How sk_transport_close closes. */
enum sk_close_how {
    SK_CLOSE_NOW = 1,     /* close the socket at once; unsent output is dropped */
    SK_CLOSE_AFTER_WRITE, /* send the output, half-close, read and discard for up to 2 s, close */
    /* The peer said its last request was the one answered (RFC 9112 §9.6 "close" from the
     * client) and it was read whole: send the output, then close at once (a FIN, no half-close
     * and linger) when no input byte waits, neither buffered nor in the socket (a MSG_PEEK), and
     * the peer has acknowledged all the output (SIOCOUTQ 0). On any layer but the plain one (TLS
     * answers its close_notify), when input waits (a request pipelined behind the close) or
     * output is unacknowledged (a late byte's reset would drop it), as SK_CLOSE_AFTER_WRITE. */
    SK_CLOSE_AFTER_LAST
};

/* The output buffer (while a range is queued, the one sent after it). Borrowed: append bytes,
 * then call sk_transport_write. */
sk_buf_t *sk_transport_out(sk_transport_t *t);
/* Unsent output, in bytes (a queued range included). */
size_t sk_transport_out_len(const sk_transport_t *t);
/* Received bytes not yet consumed by the handler, in bytes. */
size_t sk_transport_in_len(const sk_transport_t *t);
/* 1 while open (not closing after write, not lingering, not closed). */
int sk_transport_is_open(const sk_transport_t *t);

/* Queues `count` bytes of the file `fd` from `offset` (bytes) after the output appended so far;
 * they are sent with the stream layer's sendfile (the plain layer: sendfile(2), never read into
 * memory) once that output is sent, or, under a layer that cannot (TLS without kernel TLS), read
 * with pread(2) into the output buffer 64 KiB at a time and written as any output. What the
 * handler appends to sk_transport_out() from now on follows the range. The range counts in
 * sk_transport_out_len(), so the high-water mark, writable(), the write-progress deadline and
 * closing apply to it as to any output. `fd` (a regular file, opened by the caller) is owned
 * from here: closed when the range is sent, when the transport closes (the peer reset, a
 * timeout, an abort) and on error. Send it with sk_transport_write(). If the file ends before
 * `count` bytes or cannot be read, the connection is reset (the message must not look complete)
 * and closed() gets SK_CLOSED_FILE_SHORT or SK_CLOSED_FILE_ERROR. Returns 0, or -1 (fd closed)
 * when the transport is not open or a file range is already queued (one at a time); queued bytes
 * ranges (sk_transport_send_slice) are first copied into the output, then it is -1 only when
 * memory runs out. */
int sk_transport_sendfile(sk_transport_t *t, int fd, uint64_t offset, uint64_t count);
/* Queues `count` bytes of `bytes` (an exact bytes object, so immutable; a new reference is taken)
 * from `offset` (bytes; offset + count <= its size) after the output appended so far, by
 * reference: sent together with that output in one write of the stream layer (the plain layer:
 * one sendmsg(2)), never copied into the buffer. Up to 8 such ranges queue one behind another,
 * each with what the handler appended after it (an HTTP/2 connection queues each DATA frame's
 * payload so: its 9-byte head in the buffer, then the slice). As a file range
 * (sk_transport_sendfile) otherwise: what the handler appends from now on follows it, it counts
 * in sk_transport_out_len(), and the high-water mark, writable() (also called when a range is
 * sent), the write-progress deadline and closing apply to it; an abort sends what it can of it
 * with the buffer, as of any output. The reference is released when the bytes are sent or the
 * transport closes. An empty slice queues nothing. Returns 0, or -1 (nothing taken: append the
 * bytes instead) when the transport is not open, a file range is queued, 8 ranges are, or
 * memory runs out. */
int sk_transport_send_slice(sk_transport_t *t, PyObject *bytes, size_t offset, size_t count);
/* sk_transport_send_slice of the whole of `bytes`. */
int sk_transport_send_bytes(sk_transport_t *t, PyObject *bytes);
/* 1 while a file range is queued and not completely sent (writable() is called when it is). A
 * bytes range only counts in sk_transport_out_len(), as the same bytes in the buffer would. */
int sk_transport_file_pending(const sk_transport_t *t);

/* Sends the output now, ending any hold, unless a data_received() call is on the stack (it is
 * sent when that returns), and with it every other transport's output waiting for the batch
 * (sk_transport_write_later) unless a reactor callback is on the stack. 0, or -1 when the peer is gone (the transport is closed, the handler
 * was told). */
int sk_transport_write(sk_transport_t *t);
/* As sk_transport_write, but inside a data_received() call too: for output that no later
 * output can join (a chunk of a response still in progress, ASGI `more_body`), which would
 * otherwise wait for the call's end and, inside a reactor callback, for the batch (on 3.12+ an
 * app's eager first step runs inside the call). There, only a write of the buffer is made: what
 * the kernel does not take, and any error, are left to the call's end, which sends the rest or
 * closes (and tells the handler) as usual. Held output and a queued range wait, as with
 * sk_transport_write. 0, or -1 when the peer is already gone (outside a data_received() call:
 * as sk_transport_write). */
int sk_transport_write_now(sk_transport_t *t);
/* Sends the output with the current batch rather than now, so that the responses one loop
 * iteration completes leave back to back and a peer asleep in its poll is woken once for them
 * all. The batch ends at the first of: the end of the reactor callback on the stack
 * (sk_reactor_on_ready, sk_reactor_run_pending), sk_reactor_flush, sk_reactor_shutdown, any
 * sk_transport_write, sk_reactor_flush_due or a later sk_transport_write_later once the batch's
 * first output has waited cfg.batch_delay seconds, and the next loop iteration (run_pending is
 * queued for it). Ends any hold. 0, or -1 when the peer
 * is already gone (a peer lost at the batch's write is reported through closed() as usual). */
int sk_transport_write_later(sk_transport_t *t);
/* Ends the batch if its first output has waited cfg.batch_delay seconds or more (the bound
 * checked wherever the server runs between two queued outputs, e.g. at each app step's end);
 * otherwise nothing (one pointer test when nothing waits). */
void sk_reactor_flush_due(sk_reactor_t *r);
/* Ends the batch: writes every transport's output queued by sk_transport_write_later, unless a
 * reactor callback is on the stack (its end does). */
void sk_reactor_flush(sk_reactor_t *r);
/* Holds the output: the end of a data_received() call and EPOLLOUT send nothing until
 * sk_transport_release, sk_transport_write or a close. */
void sk_transport_hold(sk_transport_t *t);
/* Ends a hold and sends what is pending (unless a data_received() call is on the stack: it is
 * sent when that returns). No-op when not held. */
void sk_transport_release(sk_transport_t *t);

/* Stops (paused = 1) or resumes reading from the socket. Independent of the transport's own
 * pauses (64 KiB of unconsumed input or of unsent output). */
void sk_transport_pause_reading(sk_transport_t *t, int paused);
/* Offers the buffered input to the handler now; inside a data_received() call, soon instead. */
void sk_transport_feed(sk_transport_t *t);
/* Offers the buffered input to the handler on the next loop iteration (loop.call_soon). */
void sk_transport_feed_soon(sk_transport_t *t);

/* The handler's one deadline: `kind` (> 0, the handler's own meaning) passes to its deadline()
 * entry once `seconds` have passed (checked once a second) with no output pending. */
void sk_transport_set_deadline(sk_transport_t *t, int kind, double seconds);
void sk_transport_clear_deadline(sk_transport_t *t);
/* The kind of the deadline set, or 0. */
int sk_transport_deadline_kind(const sk_transport_t *t);

/* Closes as `how` says (enum sk_close_how). SK_CLOSE_NOW tells the handler (closed()) before it
 * returns; SK_CLOSE_AFTER_WRITE and SK_CLOSE_AFTER_LAST tell it when the socket finally closes. */
void sk_transport_close(sk_transport_t *t, int how);
/* Closes a connection whose message cannot be completed. reset = 1: drop the unsent output and
 * reset the connection (RST), for a message whose end would otherwise look complete (a
 * close-delimited body); 0: send what is produced, best effort, and close. */
void sk_transport_abort(sk_transport_t *t, int reset);
/* What a close would do to the message being written (HTTP/1.x's close-delimited body, RFC 9112
 * §6.3, ends only at the connection's close): */
enum sk_close_cuts {
    SK_CLOSE_WHOLE = 0,      /* nothing: no such message, or it is complete and all sent */
    SK_CLOSE_CUTS = 1,       /* it is not complete yet */
    SK_CLOSE_CUTS_UNTIL_SENT /* complete, but a close before its bytes have all left would cut it
                              * (the transport makes it SK_CLOSE_WHOLE once nothing is pending) */
};
/* While a close cuts, any close is a reset (as sk_transport_abort(t, 1): no FIN, no TLS
 * close_notify, that would make the part sent look whole), whatever closes: the peer's end, a
 * write timeout, the server stopping. */
void sk_transport_set_close_cuts(sk_transport_t *t, enum sk_close_cuts cuts);
/* Hands the connection to another protocol: from now on `ops`/`h` get its events, and the input
 * the current handler has not consumed (what follows the bytes it consumed in the data_received
 * call it is in, or the buffered input) goes to the new handler's data_received. The old handler
 * gets no closed() and is released once no frame can hold it. Only valid while open. */
void sk_transport_switch(sk_transport_t *t, const sk_handler_ops_t *ops, void *h);

/* Bytes of the state a handler may keep in sk_transport_handler_alloc's storage. */
#define SK_TRANSPORT_HANDLER_SIZE 72

/* Zeroed storage of `size` bytes (at most SK_TRANSPORT_HANDLER_SIZE) for a handler's state on
 * this connection, packed with every other connection's of this reactor (sk_slab.h: what an
 * idle connection keeps, away from the per-request objects; issue 37). NULL without memory.
 * Given back with sk_transport_handler_free(t, h) by the handler's release(), which runs before
 * the transport is freed. */
void *sk_transport_handler_alloc(sk_transport_t *t, size_t size);
void sk_transport_handler_free(sk_transport_t *t, void *h);

/* The peer's address (as accept() returned it: AF_INET, AF_INET6, or AF_UNIX with its path
 * not kept) and its length in bytes. Borrowed: valid while the transport is. */
const struct sockaddr *sk_transport_peer(const sk_transport_t *t, socklen_t *len);
/* The local address of the connection (getsockname): 0, or -1 with errno. */
int sk_transport_local(const sk_transport_t *t, struct sockaddr_storage *ss);
/* The connection's stream (borrowed, alive as long as the transport): for a handler to ask its
 * layer what it knows of the connection (sk_tls.h: sk_tls_ssl for the ASGI `tls` extension and
 * ALPN, sk_tls_established). Read-only: a handler never does I/O through it. */
const sk_stream_t *sk_transport_stream(const sk_transport_t *t);

#endif
