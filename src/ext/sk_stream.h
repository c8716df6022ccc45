/* sk_stream.h — the stream layer: the table through which a transport does all its byte I/O on
 * its socket, and its first implementation, the plain layer (the socket's bytes as they are).
 *
 * A transport (sk_transport.c) owns the socket, its buffers, its epoll mask and its deadlines; it
 * never calls recv, send, sendmsg, sendfile or shutdown itself but the entries of its layer's
 * sk_stream_ops_t. The layer turns wire bytes into the stream the handler reads and the
 * handler's stream into wire bytes: the plain layer passes them through; the TLS layer (sk_tls.c,
 * libssl over BIOs of its own; its place is described below, its answers in sk_tls.h) decrypts
 * ciphertext into plaintext and encrypts the other way. A handler never knows which layer its
 * transport has: it sees sk_transport.h only (and may ask sk_tls.h about its stream's TLS state
 * through sk_transport_stream).
 *
 * This header and sk_stream.c include no Python and no transport: a layer is plain C over a
 * socket descriptor, so it can be tested, fuzzed and sanitized alone.
 * Never (a layer): closes the socket, changes its epoll registration, blocks, or keeps a pointer
 * to the caller's buffers past the call.
 *
 * Threading: a layer's entries run on the transport's thread (the event loop's), one at a time.
 *
 * ---- The rules a layer keeps -----------------------------------------------------------------
 *
 * 1. Would-block is an answer, not an error. An entry that can do nothing now returns
 *    SK_STREAM_WANT_READ or SK_STREAM_WANT_WRITE: which readiness of the SOCKET it needs before
 *    the same entry can make progress. The plain layer answers WANT_READ from read and WANT_WRITE
 *    from the write side (EAGAIN). A TLS layer may answer the other one: a read that must first
 *    send (a handshake flight, a KeyUpdate reply) says WANT_WRITE; a write that must first
 *    receive (the handshake not finished) says WANT_READ. The transport then waits for that
 *    readiness (EPOLLOUT for a read, EPOLLIN for a write, even while its reading is paused),
 *    and not for the blocked side's own, and calls the same entry again once it comes (a
 *    hang-up counts). -1 (SK_STREAM_ERROR) with errno set is a failure, never "try again":
 *    EINTR is retried inside the layer, EAGAIN is never returned as an error.
 *
 * 2. Edge-triggered epoll: the transport's socket is registered with EPOLLET, so epoll reports a
 *    socket once per arrival of bytes, not while bytes wait. Two cases need more than a read
 *    returning:
 *    (a) bytes left in the SOCKET that no new edge will report (the plain layer: an AF_UNIX
 *        read cut at a message carrying descriptors): read sets *cut = 1 and the transport
 *        re-polls the socket (EPOLL_CTL_MOD). A full read (`cap` bytes), and a read whose event
 *        carried EPOLLPRI (an urgent mark) or a hang-up, are assumed to leave bytes too: the
 *        transport knows those without the layer.
 *    (b) bytes held in the LAYER: input the layer has taken off the socket but not yet handed up
 *        (a TLS layer that decrypted a record larger than the caller's buffer, or read several
 *        records at once). The socket is then empty and epoll will never report it again for
 *        them. A layer that can hold input MUST implement `pending`: after every read, and
 *        whenever the transport starts reading again (a pause ends), the transport asks it, and
 *        while it answers > 0 the transport reads again on the next loop iteration without
 *        waiting for an epoll event (as it feeds buffered input: sk_transport_feed_soon). So the
 *        reactor never waits while bytes sit in the layer. A layer that never holds input (the
 *        plain layer) leaves `pending` NULL, and the transport asks nothing.
 *
 * 3. Output is counted where it is. A write's or sendfile's return value > 0 means those bytes
 *    of the stream have left the layer for the kernel: the transport drops them from its buffers
 *    and counts them as progress (write timeout, high-water mark, drain, half-close order). A
 *    layer that cannot pass all it has encoded (a TLS record half taken by the kernel) keeps the
 *    rest, answers SK_STREAM_WANT_WRITE, and is called again with the same bytes at the head of
 *    the iovec (possibly at another address, possibly followed by more): it finishes what it
 *    owes before it takes anything new. So a layer never holds output the transport does not
 *    see as unsent, and closing after write, lingering and the write-progress deadline need no
 *    help from it.
 *
 * 4. Ownership. The transport owns the socket (closes it after the layer's close entry), its
 *    buffers, the queued file descriptor and the bytes object of a by-reference range; every
 *    pointer given to an entry is borrowed for the call. The layer owns `s->ctx` (made by open,
 *    freed by close) and whatever hangs off it (a TLS layer: the SSL object, its ciphertext
 *    buffers). Layer ops tables are static storage.
 *
 * 5. The peer's end. read returns 0 at the end of the peer's stream (the plain layer: a FIN; a
 *    TLS layer: close_notify, or a FIN without it, which the layer keeps as its reason, "unexpected
 *    eof": HTTP's own framing tells a cut request from a whole one, so no handler takes a
 *    truncated stream for a complete message). The transport treats it as the peer's FIN: the
 *    handler hears the peer gone, what it wrote is still sent, then the layer's close (a TLS
 *    layer's close_notify). A bad record or a failed handshake is -1 with errno (EPROTO, ...): the
 *    transport closes as the peer gone (SK_CLOSED_PEER), as for a reset.
 *
 * ---- Where a TLS layer goes ------------------------------------------------------------------
 *
 * A TLS layer is a second sk_stream_ops_t (sk_tls.c, over libssl), given in the reactor's config
 * (sk_reactor_config_t.stream and .stream_arg: its SSL_CTX) for the connections a TLS listener
 * accepts. open makes the SSL object for the socket (server mode; its BIO on `s->fd`, or the
 * layer's own ciphertext buffers as h2o does) and keeps it in `s->ctx`; nothing is sent there.
 * The handshake runs inside read (and write, should the server write first): they answer
 * SK_STREAM_WANT_READ/_WANT_WRITE as libssl's SSL_ERROR_WANT_READ/_WRITE say until it is done, so
 * the handler's first data_received() comes after it with plaintext; the handler's deadline (the
 * HTTP/1.1 handler sets its request-head timeout at open) bounds a slow handshake like a slow
 * request head, since the handshake's own unsent bytes stay in the layer (rule 3). read returns
 * plaintext and implements `pending` (SSL_pending, plus any decrypted bytes the layer keeps), so
 * edge-triggered epoll never strands a record already read; writev encrypts (partial-write mode,
 * moving buffer accepted: rule 3) and returns the plaintext bytes whose records the kernel took.
 * sendfile is NULL, or answers SK_STREAM_NO_SENDFILE while kernel TLS does not carry the
 * connection's send side (with kTLS it calls sendfile(2) as the plain layer does): the transport
 * then reads the file range with pread(2) into its output buffer and sends it through writev,
 * with the same file errors, high-water mark and deadlines. shutdown sends close_notify
 * (SSL_shutdown, one direction) and then shuts the socket's write side; close frees the SSL
 * object (a reset sends nothing first). The transport, the handlers and the ASGI layer above do
 * not change.
 */
#ifndef SK_STREAM_H
#define SK_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* A layer's answers besides a byte count (ssize_t) or 0 (int). */
enum {
    SK_STREAM_ERROR = -1,       /* failed; errno says why */
    SK_STREAM_WANT_READ = -2,   /* nothing now: call again once the socket is readable */
    SK_STREAM_WANT_WRITE = -3,  /* nothing now: call again once the socket is writable */
    SK_STREAM_NO_SENDFILE = -4, /* sendfile only: this layer cannot send a file range now; the
                                  * transport sends it through writev instead (pread) */
};

/* The most iovec entries a transport passes to writev in one call: the output buffer, then the
 * bytes ranges queued by reference behind it, each followed by what was appended after it. */
#define SK_STREAM_IOV_MAX 16

/* One connection's stream, as its layer sees it. Embedded in the transport (never freed on its
 * own). */
typedef struct sk_stream {
    int fd;     /* the connected socket, nonblocking; owned by the transport (closed after the
                 * layer's close entry). Read-only for the layer. */
    int family; /* the peer address's family: AF_INET, AF_INET6 or AF_UNIX */
    void *ctx;  /* the layer's per-connection state, made by open and freed by close; owned by
                 * the layer. NULL for the plain layer. */
    /* What a layer keeps past its close for the handler's closed() entry, which runs after it
     * (sk_transport.c): why the layer failed the connection (static storage; NULL: it did
     * not) and layer-defined flags (sk_tls.h). Zero when the transport makes the stream; only
     * the layer writes them. */
    const char *failure;
    unsigned failure_flags;
} sk_stream_t;

/* The stream layer table. One per layer, static storage: sk_stream_plain (below) is the first.
 * Every entry gets the connection's sk_stream_t `s`. An entry marked "may be NULL" is optional;
 * the others are required. */
typedef struct sk_stream_ops {
    /* The layer's name for logs and tests ("plain", "tls"). Static storage. */
    const char *name;
    /* Makes the layer's state for a socket just accepted: sets s->ctx. `arg` is the reactor
     * config's stream_arg (borrowed, alive for the reactor's life: a TLS layer's SSL_CTX).
     * Sends and receives nothing. 0, or -1 with errno (ENOMEM, ...: the connection is closed at
     * once; close is not called). May be NULL (nothing to make). */
    int (*open)(sk_stream_t *s, void *arg);
    /* Reads up to `cap` (> 0) bytes of the stream (plaintext) into `buf` (borrowed, `cap` bytes
     * writable). Returns the bytes read (> 0); 0 at the orderly end of the peer's stream (rule
     * 5); SK_STREAM_WANT_READ (nothing now: the socket is empty) or SK_STREAM_WANT_WRITE (rule
     * 1); SK_STREAM_ERROR with errno (the peer is gone: reset, ETIMEDOUT, a protocol error).
     * Sets *cut = 1 when it returns > 0 and stopped short of `cap` with bytes still in the socket
     * that no new epoll edge will report (rule 2a); leaves it alone otherwise. The transport
     * reads once per readiness. */
    ssize_t (*read)(sk_stream_t *s, char *buf, size_t cap, int *cut);
    /* Bytes of the stream the layer holds, already off the socket and not yet returned by read
     * (rule 2b): > 0 makes the transport read again on the next loop iteration with no epoll
     * event. Must be cheap (called after every read). May be NULL: the layer holds no input. */
    size_t (*pending)(const sk_stream_t *s);
    /* Writes from `iov[0..iovcnt)` (1 <= iovcnt <= SK_STREAM_IOV_MAX, every entry non-empty,
     * borrowed for the call) in order. `more` = 1 when more output follows at once (a file
     * range: the plain layer passes MSG_MORE so the head joins its first segment). Returns the
     * bytes taken (> 0, maybe fewer than offered: rule 3), SK_STREAM_WANT_WRITE (the kernel
     * takes nothing now) or SK_STREAM_WANT_READ (rule 1), or SK_STREAM_ERROR with errno (EPIPE,
     * ECONNRESET, ...: the peer is gone). Never 0. Never raises SIGPIPE. */
    ssize_t (*writev)(sk_stream_t *s, const struct iovec *iov, int iovcnt, int more);
    /* Sends up to `count` (> 0) bytes of the regular file `file_fd` (borrowed: the transport
     * owns and closes it) from *offset (bytes), advancing *offset by what it sent, without
     * reading them into memory. Returns the bytes sent (> 0); 0 when the file ended before
     * `count` (it shrank: the transport resets, SK_CLOSED_FILE_SHORT); SK_STREAM_WANT_WRITE /
     * _WANT_READ (rule 1); SK_STREAM_NO_SENDFILE (the layer cannot send a file range now: the
     * transport falls back to pread(2) into its buffer and writev, for this range and every
     * later one); SK_STREAM_ERROR with errno: EPIPE, ECONNRESET, ENOTCONN or ETIMEDOUT mean the
     * peer is gone, any other (EIO, EINVAL, ...) the file failed (the transport resets,
     * SK_CLOSED_FILE_ERROR). May be NULL: as SK_STREAM_NO_SENDFILE, always. */
    ssize_t (*sendfile)(sk_stream_t *s, int file_fd, uint64_t *offset, size_t count);
    /* Ends the stream's write side after the last output (the transport calls it once its
     * output is all sent, when closing after write, before lingering): a TLS layer sends its
     * close_notify first; then the socket's write side is shut (shutdown(SHUT_WR): the peer
     * reads the end). 0 when done; SK_STREAM_WANT_WRITE / _WANT_READ (rule 1: called again,
     * bounded by the write-progress deadline); SK_STREAM_ERROR with errno (the transport closes
     * as the peer gone). */
    int (*shutdown)(sk_stream_t *s);
    /* The transport closes the connection: called exactly once, before it closes `s->fd`, when
     * open succeeded. Frees s->ctx and whatever the layer holds. `reset` = 1 when the transport
     * resets the connection (SO_LINGER 0 is set: send nothing); otherwise the layer may send a
     * last record best effort, never waiting (a TLS layer whose shutdown did not run: a
     * close_notify). May be NULL: nothing to free. */
    void (*close)(sk_stream_t *s, int reset);
} sk_stream_ops_t;

/* The plain layer: the socket's bytes as they are (recv/recvmsg, send/sendmsg, sendfile(2),
 * shutdown(2)). Holds no state and no input: open, pending and close are NULL. The default when
 * a reactor's config names no layer. */
extern const sk_stream_ops_t sk_stream_plain;

#endif
