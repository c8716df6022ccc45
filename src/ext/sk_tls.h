/* sk_tls.h — the TLS stream layer (libssl, OpenSSL 3) under a transport, and the source of the
 * SSL_CTX its connections are made from. Layer 1 (transport): plain C, no Python.
 *
 * sk_stream_tls is the second sk_stream_ops_t (sk_stream.h: its rules 1-5 and the paragraph
 * "Where a TLS layer goes" are the contract). A TLS listener's reactor is configured with
 * `.stream = &sk_stream_tls` and `.stream_arg = <sk_tls_source_t *>`; every connection it accepts
 * gets its own SSL object (server mode) made in open from the source's current SSL_CTX.
 *
 * Sans-I/O: libssl never touches the socket. Each connection's SSL object reads a memory BIO and
 * writes a BIO of the layer's own type that only appends to a buffer the connection owns (never
 * a socket call); the layer moves ciphertext between them and the socket itself (recv into the
 * read BIO, the output buffer's bytes out with one send per flush, straight from that buffer), so
 * several records an iteration completes leave in one write (the transport's one-send-per-batch
 * rule holds under TLS), and the layer always knows what it holds: ciphertext not yet sent (rule
 * 3) and input not yet decrypted or not yet returned (rule 2b, `pending`).
 *
 * What the layer owns per connection (s->ctx): the SSL object and its two BIOs, the output buffer
 * of ciphertext not yet taken by the kernel, and the count of plaintext bytes that ciphertext carries (rule 3:
 * reported as written only once all of it left). Freed by close.
 *
 * Files and bytes by reference: sendfile answers SK_STREAM_NO_SENDFILE: the transport preads
 * 64 KiB at a time into its output buffer and writes it through writev (encrypted here), never the
 * whole file in memory. This memory-BIO design never uses kernel TLS today (kTLS needs libssl's
 * socket BIO to hand the keys to the kernel): the pread path is the one that runs and is tested
 * (spec rule for kTLS sendfile: status "planned"). sk_tls_ktls_available() says whether the
 * kernel and libssl could, for the startup log line ("kTLS available, not used" / "no kTLS").
 *
 * The layer's answers (sk_stream.h rules 1-5), as built:
 *   read: the handshake first (WANT_READ until the client's flights come; WANT_WRITE while the
 *     kernel takes none of the server's flight). Then plaintext, recv'ing and decrypting until
 *     `cap` bytes or the socket is empty (so a short read leaves nothing in the socket): a recv
 *     that comes back short of its buffer is the last of the call once it brought plaintext, as
 *     for the plain layer (no recv only to learn EAGAIN: one recv per request's record, the
 *     syscall gate's count; a FIN behind those bytes is the transport's EPOLLRDHUP re-read's). 0 once
 *     the peer's close_notify came (RFC 8446 §6.1; the data before it returned first): its FIN
 *     need not follow (a peer may wait for our close_notify first, RFC 5246 §7.2.1). The FIN
 *     without close_notify, or in the middle of a record: -1 ECONNRESET ("unexpected eof").
 *     A bad record, a failed handshake, an alert: -1 EPROTO, libssl's alert sent best effort.
 *     A TLS 1.2 renegotiation attempt (a ClientHello after the handshake; SSL_OP_NO_RENEGOTIATION
 *     set on every connection too): -1 EPROTO ("renegotiation refused"), never a loop.
 *     Failures are sticky: every later entry answers -1 with the same errno.
 *   pending: plaintext libssl holds (SSL_pending) plus, after a read that filled `cap` or saw the
 *     end, the ciphertext taken off the socket and not yet decrypted (the read BIO) or the end to
 *     report (>= 1): the transport reads again with no epoll event. A read that ends with the
 *     socket empty leaves it 0 (a partial record waits for its edge).
 *   writev: the handshake first if not done (WANT_READ: the client has not spoken). Then what it
 *     owes: the ciphertext of records the kernel did not take; plaintext is reported only once
 *     its whole record left (records of 16 KiB, at most 64 KiB encrypted per call), so a count
 *     may be short of what was offered; nothing taken: WANT_WRITE. Never re-encrypts: the bytes
 *     at the head of the next call (any address) are those already encrypted. One send per
 *     flush carries every record queued (the output buffer is the ciphertext buffer: room for
 *     all of a call's records is reserved before it encrypts).
 *   shutdown: close_notify (once the handshake is done), then shutdown(SHUT_WR); WANT_WRITE
 *     while the kernel takes not all of it.
 *   close: frees the SSL object; unless reset or failed, a close_notify (if shutdown did not
 *     send one) and whatever ciphertext is left go in one send, never waiting.
 *
 * The SSL object's app data (SSL_set_app_data, ex_data index 0) and info callback are the
 * layer's (renegotiation is seen through SSL_CB_HANDSHAKE_START and the no_renegotiation
 * alert); a context must not set an info callback it relies on for these connections.
 *
 * Errors: read/writev/shutdown return SK_STREAM_ERROR with errno EPROTO for a TLS failure (a bad
 * record, a failed handshake, an alert, a renegotiation attempt: the peer is gone, rule 5), or
 * the socket's own errno (ECONNRESET for a FIN during the handshake). A FIN without close_notify
 * once established is the end of the peer's input (read answers 0, rule 5, the reason "unexpected
 * eof" kept), not a failure: writes go on and close still sends close_notify. The reason is
 * kept for the handler (sk_tls_last_error) so a debug log can say which; it, sk_tls_established
 * and sk_tls_plain_http keep answering after the layer's close (from the stream's failure
 * fields, sk_stream.h), so the handler's closed() entry, which runs after it, can say why.
 *
 * Plain HTTP on a TLS port: when the first bytes of a connection are not a TLS record (first
 * byte not 0x16, handshake) but look like an HTTP/1.x request line (an ASCII letter), read
 * drops what the socket holds (up to 16 KiB, so the close that follows sends a FIN rather than
 * a reset for unread input), sends the fixed cleartext answer SK_TLS_PLAIN_HTTP_RESPONSE best
 * effort (one send, never waiting) and returns SK_STREAM_ERROR with errno EPROTO;
 * sk_tls_plain_http() then says 1. Nothing reaches the handler. Any other first byte goes to
 * libssl (garbage: its alert, EPROTO).
 *
 * Threading: as sk_stream.h: the event loop's thread, one entry at a time per connection.
 */
#ifndef SK_TLS_H
#define SK_TLS_H

#include <openssl/ssl.h>
#include <pthread.h>

#include "sk_stream.h"

/* Where a TLS listener's connections get their SSL_CTX. Owned by the serving context (the
 * TLSContext object of sk_tlsctx.c), which keeps it alive for the reactor's whole life (the
 * reactor config borrows it as stream_arg).
 * A reload replaces `ctx`: the source holds one reference; SSL_new takes its own on the SSL_CTX,
 * so connections already open keep theirs and nothing open is dropped; new connections get the
 * new context. One context may serve listeners on loops in several threads, so `ctx` is read
 * (up to SSL_new's own reference) and replaced under `lock`: a reload never frees the SSL_CTX
 * another thread is making a connection from. */
typedef struct sk_tls_source {
    SSL_CTX *ctx;         /* current context, one reference owned by the source; never NULL */
    pthread_mutex_t lock; /* guards ctx (PTHREAD_MUTEX_INITIALIZER or pthread_mutex_init) */
} sk_tls_source_t;

/* The TLS layer. open's arg: an sk_tls_source_t * (borrowed). */
extern const sk_stream_ops_t sk_stream_tls;

/* What a connection answered to a plain HTTP request on the TLS port (RFC 9110 §15.5.1 400,
 * as nginx's "The plain HTTP request was sent to HTTPS port"), closing. */
#define SK_TLS_PLAIN_HTTP_RESPONSE                \
    "HTTP/1.1 400 Bad Request\r\n"                \
    "content-type: text/plain; charset=utf-8\r\n" \
    "content-length: 48\r\n"                      \
    "connection: close\r\n"                       \
    "\r\n" SK_TLS_PLAIN_HTTP_BODY
/* Its content (48 bytes: the access log's byte count). */
#define SK_TLS_PLAIN_HTTP_BODY "The plain HTTP request was sent to an HTTPS port"

/* The connection's SSL object (borrowed: freed by the layer's close), or NULL when `s` was not
 * opened by sk_stream_tls. For the ASGI `tls` extension and ALPN (the selected protocol). */
SSL *sk_tls_ssl(const sk_stream_t *s);

/* 1 once the connection's handshake has completed, else 0 (also for a non-TLS stream). */
int sk_tls_established(const sk_stream_t *s);

/* 1 when the connection was refused as plain HTTP on the TLS port (above), else 0. */
int sk_tls_plain_http(const sk_stream_t *s);

/* 1 when the layer failed the connection for a TLS reason (errno EPROTO: a refused or failed
 * handshake, a bad record, an alert, a renegotiation attempt, plain HTTP), else 0 (a socket
 * error, a FIN with or without close_notify, nothing failed, a non-TLS stream). Answers after
 * the layer's close too. */
int sk_tls_protocol_error(const sk_stream_t *s);

/* Why the connection's last SK_STREAM_ERROR came from libssl: a static string (the OpenSSL
 * reason, "unexpected eof", "plain HTTP request", ...) or NULL when the last error was a socket
 * errno or nothing failed. Borrowed, static storage. */
const char *sk_tls_last_error(const sk_stream_t *s);

/* Bytes the connection's output buffer (ciphertext not yet taken by the kernel) has allocated,
 * 0 when it holds none, or (size_t)-1 when `s` is not an open TLS stream. For tests: a buffer
 * grown past 32 KiB is freed at the end of the burst, so idle connections hold no large one. */
size_t sk_tls_output_capacity(const sk_stream_t *s);

/* 1 when this process can send files through kernel TLS (the running kernel has the tls module
 * and libssl was built with kTLS), else 0: files go by pread and encryption. */
int sk_tls_ktls_available(void);

#endif
