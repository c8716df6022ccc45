/* sk_tls.c — the TLS stream layer (sk_tls.h): libssl over two BIOs (a memory BIO in, the layer's
 * own out), the layer moving the ciphertext between them and the socket itself.
 *
 * Owns: per connection (s->ctx, a tls_conn): the SSL object, its read BIO (a memory BIO) and its
 * write BIO (the layer's own BIO type, below: it appends libssl's ciphertext to the connection's
 * output buffer, c->ob, the ciphertext not yet taken by the kernel), the segments that say which
 * plaintext bytes that ciphertext carries (rule 3 of sk_stream.h: a writev reports plaintext only
 * once all of its records left), and the connection's sticky failure.
 * Never: lets libssl touch the socket, closes the socket, touches epoll, blocks, or includes
 * Python (a layer is plain C: tested alone by src/ext/test/test_tls.c).
 *
 * libssl's thread error queue is cleared on entry to every entry point and after every failure
 * read, so nothing of one connection's errors is seen by another or by the Python layer's
 * OpenSSL calls (the context's).
 */
#define _GNU_SOURCE
#include "sk_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/buffer.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/opensslv.h>

#if OPENSSL_VERSION_NUMBER < 0x30000000L
#error "skirr's TLS layer needs OpenSSL 3 (libssl-dev)"
#endif

/* Plaintext bytes encrypted per writev call (the transport calls again for the rest) and per
 * record (TLS's largest, RFC 8446 §5.1: 2^14). */
#define TLS_WRITE_BUDGET (64 * 1024)
#define TLS_RECORD_PLAIN 16384
/* Ciphertext bytes taken off the socket per recv (one full record with its header and the
 * largest expansion TLS 1.2 allows: RFC 5246 §6.2.3). */
#define TLS_PULL_SIZE (16384 + 2048 + 5)
/* Ciphertext segments queued: a writev queues at most TLS_WRITE_BUDGET / TLS_RECORD_PLAIN
 * records, plus control bytes (handshake, alerts, tickets, KeyUpdate) before and after. */
#define TLS_SEGMENTS 8
/* Bytes of a plain HTTP request read and dropped before the 400 (so the close sends a FIN, not a
 * reset for unread input). */
#define TLS_PLAIN_DRAIN (16 * 1024)

/* A buffer of ciphertext (the read BIO's, the output buffer) that grew past this (bytes) is freed
 * once it is empty at the end of a burst (a read that found the socket empty, a writev that took
 * all it was offered under the budget), so an idle connection does not keep a large response's or
 * upload's ciphertext buffer. */
#define TLS_BIO_KEEP (32 * 1024)
/* The output buffer's size step (its smallest size), and the room reserved per record beyond its
 * plaintext before a writev encrypts (header, explicit nonce, tag or MAC and padding: at most 5 + 16 + 64 + 256
 * bytes), so a burst's ciphertext lands in a buffer sized once, never regrown record by record. */
#define TLS_OB_MIN 4096
#define TLS_RECORD_ROOM 512

/* Ciphertext in the write BIO, in order: `ct` bytes carrying `plain` bytes of the caller's
 * plaintext (0: control records). */
typedef struct {
    size_t ct;
    size_t plain;
} tls_seg;

typedef struct {
    const sk_stream_ops_t *ops; /* &sk_stream_tls: tells a TLS stream's ctx from another's */
    SSL *ssl;                   /* owns both BIOs */
    BIO *rbio, *wbio;           /* borrowed from ssl */
    char *ob;                   /* output buffer: ciphertext not yet sent is ob[ob_head, ob_end) */
    size_t ob_head, ob_end, ob_cap;
    tls_seg seg[TLS_SEGMENTS];
    int nseg;
    size_t tracked;  /* sum of seg[].ct: write BIO bytes beyond it are control bytes */
    size_t done;     /* plaintext whose ciphertext all left, not yet reported by writev */
    int fail_errno;  /* != 0: failed for good; every entry answers -1 with this errno */
    const char *why; /* static: the libssl reason of the failure, or NULL */
    uint8_t established;
    uint8_t first_seen; /* a byte came: the plain-HTTP check is done */
    uint8_t plain_http;
    uint8_t peer_fin;  /* recv returned 0 */
    uint8_t eof;       /* close_notify received, or the peer's FIN without it (why: "unexpected
                        * eof"): read answers 0 */
    uint8_t more;      /* read stopped with input maybe held (rule 2b) */
    uint8_t reneg;     /* a renegotiation was attempted (TLS 1.2 ClientHello after the handshake) */
    uint8_t shut_sent; /* our close_notify is in the output buffer */
    uint8_t wr_shut;   /* close_notify sent and the socket shut for writing (tls_shutdown): what
                        * libssl writes after it (KeyUpdate replies to a reading drain) is
                        * dropped, never sent (RFC 8446 §6.1: nothing follows close_notify) */
    uint8_t ob_nomem;  /* the output buffer could not grow: libssl's write failed for it */
    uint8_t rbio_seen_empty; /* the read BIO was found empty and pull() has not written to it
                              * since (libssl only takes from it): no BIO_ctrl_pending needed */
} tls_conn;

/* The flags tls_close leaves in s->failure_flags (sk_stream.h). */
enum {
    TLS_KEPT_CLOSED = 1,
    TLS_KEPT_ESTABLISHED = 2,
    TLS_KEPT_PLAIN_HTTP = 4,
    TLS_KEPT_PROTOCOL = 8, /* failed with EPROTO */
};

static tls_conn *
conn_of(const sk_stream_t *s)
{
    tls_conn *c = s != NULL ? s->ctx : NULL;
    return c != NULL && c->ops == &sk_stream_tls ? c : NULL;
}

/* Empties libssl's thread error queue (SSL_get_error reads it), peeking first: a clear walks the
 * whole queue, and it is nearly always empty already. */
static void
err_clear(void)
{
    if (ERR_peek_error() != 0) {
        ERR_clear_error();
    }
}

/* Fails the connection for good: errno `err`, reason `why` (static or NULL). Returns -1. */
static ssize_t
fail(tls_conn *c, int err, const char *why)
{
    if (c->fail_errno == 0) {
        c->fail_errno = err;
        c->why = why;
    }
    ERR_clear_error();
    errno = c->fail_errno;
    return SK_STREAM_ERROR;
}

/* The reason of libssl's latest error (static), or `dflt`. */
static const char *
ssl_reason(const char *dflt)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;
    return r != NULL ? r : dflt;
}

static size_t
wbio_len(const tls_conn *c)
{
    return c->ob_end - c->ob_head;
}

/* Makes room for `n` more bytes at the output buffer's end: the bytes not yet sent moved to its
 * start, then, if that is not enough, a buffer of what is needed (rounded up to TLS_OB_MIN: a
 * writev reserves its records' room once, so a burst sizes it once). 0, or -1 (ENOMEM: the
 * buffer's bytes are as they were). */
static int
ob_reserve(tls_conn *c, size_t n)
{
    size_t live = c->ob_end - c->ob_head;
    if (c->ob_cap - c->ob_end >= n) {
        return 0;
    }
    if (c->ob_head > 0) {
        memmove(c->ob, c->ob + c->ob_head, live);
        c->ob_head = 0;
        c->ob_end = live;
        if (c->ob_cap - live >= n) {
            return 0;
        }
    }
    if (n > SIZE_MAX - live - TLS_OB_MIN) {
        return -1;
    }
    size_t cap = (live + n + TLS_OB_MIN - 1) / TLS_OB_MIN * TLS_OB_MIN;
    char *b;
    if (live == 0) {
        b = malloc(cap); /* nothing to keep: no copy */
        if (b != NULL) {
            free(c->ob);
        }
    }
    else {
        b = realloc(c->ob, cap);
    }
    if (b == NULL) {
        return -1;
    }
    c->ob = b;
    c->ob_cap = cap;
    return 0;
}

/* Frees the output buffer when it is empty and grew past TLS_BIO_KEEP (the end of a burst). */
static void
ob_trim(tls_conn *c)
{
    if (c->ob_end == c->ob_head && c->ob_cap > TLS_BIO_KEEP) {
        free(c->ob);
        c->ob = NULL;
        c->ob_head = c->ob_end = c->ob_cap = 0;
    }
}

/* The write BIO: a sink appending what libssl writes (whole records: libssl's write buffer is the
 * staging) to the connection's output buffer, where ct_flush sends it from. A memory BIO would
 * copy each byte out again to drop it (BIO_read), and zero, copy and cleanse its buffer as it
 * grows and when it is freed; this one does none of that. It never touches the socket and never
 * asks libssl to retry: a write fails only when the buffer cannot grow (ENOMEM). */
static int
ob_bio_write(BIO *b, const char *data, size_t n, size_t *written)
{
    tls_conn *c = BIO_get_data(b);
    *written = 0;
    BIO_clear_retry_flags(b);
    if (c == NULL) {
        return 0;
    }
    if (ob_reserve(c, n) != 0) {
        c->ob_nomem = 1;
        return 0;
    }
    memcpy(c->ob + c->ob_end, data, n);
    c->ob_end += n;
    *written = n;
    return 1;
}

static long
ob_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    const tls_conn *c = BIO_get_data(b);
    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH: return 1; /* the layer sends: nothing to do here */
    case BIO_CTRL_PENDING: return c != NULL ? (long)wbio_len(c) : 0;
    default: return 0; /* as a memory BIO for the rest (WPENDING, kTLS queries: 0) */
    }
}

static int
ob_bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *ob_method;
static CRYPTO_ONCE ob_method_once = CRYPTO_ONCE_STATIC_INIT;

/* Made once per process, never freed (every connection's write BIO uses it). */
static void
ob_method_make(void)
{
    int type = BIO_get_new_index();
    BIO_METHOD *m = type > 0 ? BIO_meth_new(type | BIO_TYPE_SOURCE_SINK, "skirr TLS output") : NULL;
    if (m == NULL || !BIO_meth_set_write_ex(m, ob_bio_write) ||
        !BIO_meth_set_ctrl(m, ob_bio_ctrl) || !BIO_meth_set_create(m, ob_bio_create)) {
        BIO_meth_free(m);
        ERR_clear_error();
        return;
    }
    ob_method = m;
}

static BIO *
ob_bio_new(tls_conn *c)
{
    if (!CRYPTO_THREAD_run_once(&ob_method_once, ob_method_make) || ob_method == NULL) {
        return NULL;
    }
    BIO *b = BIO_new(ob_method);
    if (b != NULL) {
        BIO_set_data(b, c);
    }
    return b;
}

/* Queues `ct` ciphertext bytes carrying `plain` plaintext bytes behind the others. Control bytes
 * join a control segment before them, or the last segment when the table is full (reported a
 * little later, never lost). */
static void
seg_push(tls_conn *c, size_t ct, size_t plain)
{
    if (ct == 0) {
        return;
    }
    c->tracked += ct;
    if (c->nseg > 0 &&
        (c->nseg == TLS_SEGMENTS || (plain == 0 && c->seg[c->nseg - 1].plain == 0))) {
        c->seg[c->nseg - 1].ct += ct;
        c->seg[c->nseg - 1].plain += plain;
        return;
    }
    c->seg[c->nseg++] = (tls_seg){ct, plain};
}

/* Write-BIO bytes libssl produced outside a writev (handshake flights, alerts, tickets, a
 * KeyUpdate reply, close_notify): queued as control bytes. */
static void
note_control(tls_conn *c)
{
    size_t len = wbio_len(c);
    if (len > c->tracked) {
        seg_push(c, len - c->tracked, 0);
    }
}

/* Drops n sent bytes from the head of the output buffer and of the segments; whole segments'
 * plaintext goes to c->done. */
static void
ct_consume(tls_conn *c, size_t n)
{
    c->ob_head += n;
    if (c->ob_head == c->ob_end) {
        c->ob_head = c->ob_end = 0;
    }
    c->tracked -= n;
    while (n > 0 && c->nseg > 0) {
        tls_seg *h = &c->seg[0];
        size_t k = n < h->ct ? n : h->ct;
        h->ct -= k;
        n -= k;
        if (h->ct == 0) {
            c->done += h->plain;
            memmove(&c->seg[0], &c->seg[1], (size_t)(c->nseg - 1) * sizeof(tls_seg));
            c->nseg--;
        }
    }
}

/* Sends the output buffer's bytes, one send per call while the kernel takes all. 0 all sent, 1
 * some left (would block), -1 failed (errno). */
static int
ct_flush(tls_conn *c, int fd)
{
    if (c->wr_shut) {
        /* our side is closed: a send would fail (EPIPE) and fail a connection whose input is
         * still being drained; the bytes are dropped as sent */
        note_control(c);
        ct_consume(c, wbio_len(c));
        return 0;
    }
    for (;;) {
        size_t len = wbio_len(c);
        if (len == 0) {
            return 0;
        }
        ssize_t n = send(fd, c->ob + c->ob_head, len, MSG_NOSIGNAL);
        if (n > 0) {
            ct_consume(c, (size_t)n);
            if ((size_t)n == len) {
                return 0; /* all of it: no second look at the BIO */
            }
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 1;
        }
        if (n == 0) {
            errno = EPIPE;
        }
        return -1;
    }
}

/* A failure libssl reported: its alert (in the output buffer) leaves best effort, then EPROTO;
 * ENOMEM when it was the output buffer that could not grow. */
static ssize_t
fail_tls(tls_conn *c, int fd, const char *dflt)
{
    if (c->ob_nomem) {
        return fail(c, ENOMEM, NULL);
    }
    const char *why = ssl_reason(dflt);
    note_control(c);
    size_t len = wbio_len(c);
    if (len > 0 && !c->wr_shut) {
        (void)send(fd, c->ob + c->ob_head, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return fail(c, EPROTO, why);
}

/* The first bytes of the connection are not a TLS record but look like an HTTP request line:
 * what is there is read and dropped, the fixed 400 sent best effort (sk_tls.h). EPROTO. */
static ssize_t
refuse_plain_http(tls_conn *c, int fd)
{
    char drop[2048];
    size_t dropped = 0;
    while (dropped < TLS_PLAIN_DRAIN) {
        ssize_t n = recv(fd, drop, sizeof(drop), MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        dropped += (size_t)n;
    }
    static const char answer[] = SK_TLS_PLAIN_HTTP_RESPONSE;
    ssize_t n;
    do {
        n = send(fd, answer, sizeof(answer) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    c->plain_http = 1;
    return fail(c, EPROTO, "plain HTTP request");
}

/* One recv of ciphertext into the read BIO. 1 bytes came, 3 bytes came and fewer than asked for
 * (a stream socket is then empty: new bytes bring a new epoll edge, as for the plain layer), 0
 * the socket is empty, 2 the peer's FIN (c->peer_fin), -1 failed (errno; the connection is
 * failed). */
static int
pull(tls_conn *c, int fd)
{
    char buf[TLS_PULL_SIZE];
    ssize_t n;
    if (c->peer_fin) {
        return 2;
    }
    if (!c->first_seen) {
        /* Peeked, not taken: a plain HTTP request is then drained whole before the 400. */
        unsigned char b;
        do {
            n = recv(fd, &b, 1, MSG_PEEK);
        } while (n < 0 && errno == EINTR);
        if (n == 1) {
            c->first_seen = 1;
            if (b != 0x16 && ((b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z'))) {
                return (int)refuse_plain_http(c, fd);
            }
        }
    }
    do {
        n = recv(fd, buf, sizeof(buf), 0);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        if (BIO_write(c->rbio, buf, (int)n) != (int)n) {
            return (int)fail(c, ENOMEM, NULL);
        }
        c->rbio_seen_empty = 0;
        return (size_t)n < sizeof(buf) ? 3 : 1;
    }
    if (n == 0) {
        c->peer_fin = 1;
        return 2;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return 0;
    }
    return (int)fail(c, errno, NULL);
}

/* 1 when SSL_read_ex has something to work on: ciphertext in the read BIO, or inside libssl
 * (SSL_has_pending: a record begun, or decrypted bytes not yet returned). With neither it could
 * only answer WANT_READ. */
static int
input_waits(tls_conn *c)
{
    if (!c->rbio_seen_empty) {
        c->rbio_seen_empty = BIO_ctrl_pending(c->rbio) == 0;
    }
    return !c->rbio_seen_empty || SSL_has_pending(c->ssl);
}

/* Replaces the read BIO by a new one when it is empty and its buffer grew past TLS_BIO_KEEP (the
 * SSL object frees the old one). Best effort: kept on ENOMEM. */
static void
rbio_trim(tls_conn *c)
{
    BUF_MEM *bm = NULL;
    if (BIO_ctrl_pending(c->rbio) != 0 || BIO_get_mem_ptr(c->rbio, &bm) <= 0 || bm == NULL ||
        bm->max <= TLS_BIO_KEEP) {
        return;
    }
    BIO *fresh = BIO_new(BIO_s_mem());
    if (fresh == NULL) {
        ERR_clear_error();
        return;
    }
    BIO_set_mem_eof_return(fresh, -1);
    SSL_set0_rbio(c->ssl, fresh);
    c->rbio = fresh;
}

/* Control bytes (no plaintext of the caller) wait in the write BIO. */
static int
control_waits(const tls_conn *c)
{
    if (wbio_len(c) == 0) {
        return 0;
    }
    for (int i = 0; i < c->nseg; i++) {
        if (c->seg[i].plain > 0) {
            return 0; /* writev's own flush carries them */
        }
    }
    return 1;
}

/* Drives the handshake as far as the socket allows. 0 done, SK_STREAM_WANT_READ/_WRITE, or -1. */
static ssize_t
handshake(tls_conn *c, int fd)
{
    for (;;) {
        int rc = SSL_do_handshake(c->ssl);
        note_control(c);
        if (rc == 1) {
            c->established = 1;
            if (ct_flush(c, fd) < 0) {
                return fail(c, errno, NULL);
            }
            return 0;
        }
        int e = SSL_get_error(c->ssl, rc);
        if (e != SSL_ERROR_WANT_READ) {
            return fail_tls(c, fd, "handshake failed");
        }
        int f = ct_flush(c, fd);
        if (f < 0) {
            return fail(c, errno, NULL);
        }
        int p = pull(c, fd);
        if (p < 0) {
            return SK_STREAM_ERROR;
        }
        if (p == 2) {
            return fail(c, ECONNRESET, "unexpected eof during the handshake");
        }
        if (p == 0) {
            return f == 1 ? SK_STREAM_WANT_WRITE : SK_STREAM_WANT_READ;
        }
    }
}

/* Renegotiation (TLS 1.2): a handshake starting after ours, or libssl refusing one with its
 * no_renegotiation alert (SSL_OP_NO_RENEGOTIATION: it would carry on as if nothing happened). */
static void
info_cb(const SSL *ssl, int where, int ret)
{
    tls_conn *c = SSL_get_app_data(ssl);
    if (c == NULL || !c->established) {
        return;
    }
    if ((where & SSL_CB_HANDSHAKE_START) && SSL_version(ssl) != TLS1_3_VERSION) {
        c->reneg = 1;
    }
    if ((where & SSL_CB_WRITE_ALERT) && (ret & 0xff) == SSL_AD_NO_RENEGOTIATION) {
        c->reneg = 1;
    }
}

static int
tls_open(sk_stream_t *s, void *arg)
{
    sk_tls_source_t *src = arg;
    tls_conn *c = calloc(1, sizeof(*c));
    BIO *rbio = NULL, *wbio = NULL;
    if (c == NULL || src == NULL) {
        goto error;
    }
    c->ops = &sk_stream_tls;
    /* the current context, with the reference SSL_new takes, while no reload can free it */
    pthread_mutex_lock(&src->lock);
    c->ssl = src->ctx != NULL ? SSL_new(src->ctx) : NULL;
    pthread_mutex_unlock(&src->lock);
    rbio = BIO_new(BIO_s_mem());
    wbio = ob_bio_new(c);
    if (c->ssl == NULL || rbio == NULL || wbio == NULL) {
        goto error;
    }
    BIO_set_mem_eof_return(rbio, -1); /* empty: "retry" (WANT_READ), never EOF */
    SSL_set_bio(c->ssl, rbio, wbio);  /* the SSL object owns both from here */
    c->rbio = rbio;
    c->wbio = wbio;
    rbio = wbio = NULL;
    SSL_set_accept_state(c->ssl);
    SSL_set_options(c->ssl, SSL_OP_NO_RENEGOTIATION);
    SSL_set_mode(c->ssl, SSL_MODE_RELEASE_BUFFERS); /* idle connections hold no record buffers */
    SSL_set_app_data(c->ssl, c);
    SSL_set_info_callback(c->ssl, info_cb);
    s->ctx = c;
    return 0;

error:
    BIO_free(rbio);
    BIO_free(wbio);
    if (c != NULL) {
        SSL_free(c->ssl);
        free(c);
    }
    ERR_clear_error();
    errno = ENOMEM;
    return -1;
}

/* The end of a read that took nothing: the socket is empty. Control bytes stuck in the write BIO
 * (no writev will carry them) make it wait for writability instead (rule 1). */
static ssize_t
read_nothing(tls_conn *c)
{
    return control_waits(c) ? SK_STREAM_WANT_WRITE : SK_STREAM_WANT_READ;
}

/* `cut` is the table's (rule 2a): never set, a TCP read here leaves nothing in the socket. */
static ssize_t
tls_read(sk_stream_t *s, char *buf, size_t cap, int *cut) // NOLINT(readability-non-const-parameter)
{
    tls_conn *c = s->ctx;
    size_t total = 0;
    int drained = 0; /* a recv of this call came back short */
    (void)cut;       /* a short read leaves nothing (the layer reads until a short recv or cap) */
    err_clear();
    c->more = 0;
    if (c->fail_errno != 0) {
        errno = c->fail_errno;
        return SK_STREAM_ERROR;
    }
    if (c->eof) {
        return 0;
    }
    /* Control bytes only (a flight, tickets): the records writev owes stay its own to send, so
     * its count and the transport's EPOLLOUT wait stay in step. */
    if (control_waits(c) && ct_flush(c, s->fd) < 0) {
        return fail(c, errno, NULL);
    }
    if (!c->established) {
        ssize_t rc = handshake(c, s->fd);
        if (rc != 0) {
            return rc;
        }
    }
    int fed = 0; /* the last pull() put ciphertext in the read BIO */
    while (total < cap) {
        /* SSL_read_ex only when it has input (input_waits): otherwise it could only answer
         * WANT_READ (two calls a request saved, each with libssl's record-layer set-up and
         * SSL_get_error; bench/LEVERS.md "TLS reads that could only want more") */
        if (fed || input_waits(c)) {
            fed = 0;
            size_t n = 0;
            int ok = SSL_read_ex(c->ssl, buf + total, cap - total, &n);
            if (c->reneg) {
                return fail_tls(c, s->fd, "renegotiation refused");
            }
            if (ok) {
                total += n;
                continue;
            }
            int e = SSL_get_error(c->ssl, 0);
            note_control(c);
            if (e == SSL_ERROR_ZERO_RETURN) {
                /* close_notify (RFC 8446 §6.1): the orderly end; answered 0 once the data
                 * before it is returned */
                ERR_clear_error();
                c->eof = 1;
                break;
            }
            if (e != SSL_ERROR_WANT_READ) {
                return fail_tls(c, s->fd, "bad record");
            }
            /* WANT_READ: SSL_get_error found the error queue empty (it answers SSL_ERROR_SSL
             * or _SYSCALL otherwise), so there is nothing to clear */
        }
        if (c->peer_fin) {
            if (total > 0) {
                break; /* the data first; the end next call */
            }
            /* The peer's FIN without close_notify (a truncation, RFC 8446 §6.1): the end of
             * its input, as a plain FIN is (sk_stream.h rule 5). Not a failure of ours: what
             * the handler already wrote is still sent, then our close_notify (§6.1: each party
             * sends one before closing its write side, unless it sent an error alert). The
             * reason is kept for the handler (sk_tls_last_error). */
            if (c->why == NULL) {
                c->why = "unexpected eof";
            }
            c->eof = 1;
            break;
        }
        if (drained && total > 0) {
            /* The last recv was short: the socket is empty (no recv only to learn EAGAIN). A
             * FIN behind the bytes raises EPOLLRDHUP, on which the transport reads again after
             * a read > 0 (sk_transport.c tp_readable); with nothing to return, the next recv
             * must see it here. */
            break;
        }
        int p = pull(c, s->fd);
        if (p < 0) {
            return SK_STREAM_ERROR;
        }
        if (p == 0) {
            break; /* the socket is empty */
        }
        drained = p == 3;
        fed = p != 2; /* 1 and 3: bytes came; 2: the peer's FIN */
    }
    if (control_waits(c) && ct_flush(c, s->fd) < 0) {
        /* the peer is gone: the data read is still returned; the next entry fails */
        (void)fail(c, errno, NULL);
    }
    if (total > 0) {
        c->more = total == cap || c->eof || c->peer_fin || c->fail_errno != 0;
        return (ssize_t)total;
    }
    if (c->eof) {
        return 0;
    }
    if (c->fail_errno != 0) {
        errno = c->fail_errno;
        return SK_STREAM_ERROR;
    }
    rbio_trim(c); /* input idle: the socket is empty */
    ob_trim(c);
    return read_nothing(c);
}

static size_t
tls_pending(const sk_stream_t *s)
{
    const tls_conn *c = s->ctx;
    size_t held = (size_t)SSL_pending(c->ssl);
    if (c->more) {
        held += BIO_ctrl_pending(c->rbio);
        return held > 0 ? held : 1; /* an end or a failure to report */
    }
    return held;
}

/* Encrypts up to TLS_WRITE_BUDGET bytes from the head of iov into records, one segment each. */
static ssize_t
encrypt(tls_conn *c, int fd, const struct iovec *iov, int iovcnt)
{
    char stage[TLS_RECORD_PLAIN];
    size_t taken = 0, off = 0, plain = 0;
    int i = 0;
    for (int k = 0; k < iovcnt && plain < TLS_WRITE_BUDGET; k++) {
        plain += iov[k].iov_len;
    }
    plain = plain < TLS_WRITE_BUDGET ? plain : TLS_WRITE_BUDGET;
    /* the room for all of this call's records at once (a failure here: the BIO's write retries) */
    (void)ob_reserve(c, plain + (plain / TLS_RECORD_PLAIN + 1) * TLS_RECORD_ROOM);
    while (taken < TLS_WRITE_BUDGET && i < iovcnt) {
        size_t want = TLS_WRITE_BUDGET - taken < TLS_RECORD_PLAIN ? TLS_WRITE_BUDGET - taken
                                                                  : TLS_RECORD_PLAIN;
        const char *p;
        size_t len;
        if (iov[i].iov_len - off >= want || i == iovcnt - 1) {
            /* within one entry: encrypted from the caller's memory */
            p = (const char *)iov[i].iov_base + off;
            len = iov[i].iov_len - off < want ? iov[i].iov_len - off : want;
            off += len;
        }
        else {
            /* across entries: gathered into one record */
            len = 0;
            while (len < want && i < iovcnt) {
                size_t k = iov[i].iov_len - off;
                k = k < want - len ? k : want - len;
                memcpy(stage + len, (const char *)iov[i].iov_base + off, k);
                len += k;
                off += k;
                if (off == iov[i].iov_len) {
                    i++;
                    off = 0;
                }
            }
            p = stage;
        }
        if (i < iovcnt && off == iov[i].iov_len) {
            i++;
            off = 0;
        }
        size_t before = wbio_len(c), w = 0;
        if (!SSL_write_ex(c->ssl, p, len, &w) || w != len) {
            return fail_tls(c, fd, "encryption failed");
        }
        seg_push(c, wbio_len(c) - before, len);
        taken += len;
    }
    return (ssize_t)taken;
}

static ssize_t
tls_writev(sk_stream_t *s, const struct iovec *iov, int iovcnt, int more)
{
    tls_conn *c = s->ctx;
    (void)more; /* records of 16 KiB: nothing to cork */
    err_clear();
    if (c->fail_errno != 0) {
        errno = c->fail_errno;
        return SK_STREAM_ERROR;
    }
    /* Rule 3: what is owed first. */
    int f = ct_flush(c, s->fd);
    if (f < 0) {
        return fail(c, errno, NULL);
    }
    if (c->done > 0) {
        size_t n = c->done;
        c->done = 0;
        return (ssize_t)n;
    }
    if (f == 1) {
        return SK_STREAM_WANT_WRITE;
    }
    if (!c->established) {
        ssize_t rc = handshake(c, s->fd);
        if (rc != 0) {
            return rc;
        }
        c->more = BIO_ctrl_pending(c->rbio) > 0 || c->peer_fin; /* input pulled for the read */
    }
    c->done = 0;
    ssize_t taken = encrypt(c, s->fd, iov, iovcnt);
    if (taken < 0) {
        return SK_STREAM_ERROR;
    }
    f = ct_flush(c, s->fd);
    if (f < 0) {
        return fail(c, errno, NULL);
    }
    if (f == 0 && taken < TLS_WRITE_BUDGET) {
        ob_trim(c); /* all sent, and the caller offered no more: the end of a burst */
    }
    if (c->done > 0) {
        size_t n = c->done;
        c->done = 0;
        return (ssize_t)n;
    }
    return SK_STREAM_WANT_WRITE;
}

/* The table's signature: `offset` is never advanced (nothing is sent here). */
static ssize_t
tls_sendfile(sk_stream_t *s, int file_fd,
             uint64_t *offset, // NOLINT(readability-non-const-parameter)
             size_t count)
{
    (void)s;
    (void)file_fd;
    (void)offset;
    (void)count;
    return SK_STREAM_NO_SENDFILE; /* libssl never has the socket: every byte is encrypted here */
}

static int
tls_shutdown(sk_stream_t *s)
{
    tls_conn *c = s->ctx;
    err_clear();
    if (c->fail_errno != 0) {
        errno = c->fail_errno;
        return SK_STREAM_ERROR;
    }
    if (c->established && !c->shut_sent) {
        (void)SSL_shutdown(c->ssl); /* close_notify into the write BIO (RFC 8446 §6.1) */
        ERR_clear_error();
        note_control(c);
        c->shut_sent = 1;
    }
    int f = ct_flush(c, s->fd);
    if (f < 0) {
        return (int)fail(c, errno, NULL);
    }
    if (f == 1) {
        return SK_STREAM_WANT_WRITE;
    }
    if (!c->wr_shut && shutdown(s->fd, SHUT_WR) != 0) {
        return (int)fail(c, errno, NULL);
    }
    c->wr_shut = 1;
    return 0;
}

static void
tls_close(sk_stream_t *s, int reset)
{
    tls_conn *c = s->ctx;
    if (c == NULL) {
        return;
    }
    ERR_clear_error();
    if (!reset && c->fail_errno == 0) {
        if (c->established && !c->shut_sent) {
            (void)SSL_shutdown(c->ssl);
            c->shut_sent = 1;
        }
        size_t len = wbio_len(c);
        if (len > 0 && !c->wr_shut) {
            (void)send(s->fd, c->ob + c->ob_head, len,
                       MSG_NOSIGNAL | MSG_DONTWAIT); /* best effort */
        }
    }
    /* kept for the handler's closed(), which runs after this (sk_tls_last_error, ...) */
    s->failure = c->why;
    s->failure_flags = (c->established ? TLS_KEPT_ESTABLISHED : 0) |
                       (c->plain_http ? TLS_KEPT_PLAIN_HTTP : 0) |
                       (c->fail_errno == EPROTO ? TLS_KEPT_PROTOCOL : 0) | TLS_KEPT_CLOSED;
    SSL_free(c->ssl); /* and both BIOs */
    ERR_clear_error();
    free(c->ob);
    free(c);
    s->ctx = NULL;
}

const sk_stream_ops_t sk_stream_tls = {
    .name = "tls",
    .open = tls_open,
    .read = tls_read,
    .pending = tls_pending,
    .writev = tls_writev,
    .sendfile = tls_sendfile,
    .shutdown = tls_shutdown,
    .close = tls_close,
};

SSL *
sk_tls_ssl(const sk_stream_t *s)
{
    tls_conn *c = conn_of(s);
    return c != NULL ? c->ssl : NULL;
}

/* 1 when s is a TLS stream already closed (its summary is in s->failure*). */
static int
closed_tls(const sk_stream_t *s)
{
    return s != NULL && s->ctx == NULL && (s->failure_flags & TLS_KEPT_CLOSED);
}

int
sk_tls_established(const sk_stream_t *s)
{
    tls_conn *c = conn_of(s);
    return c != NULL ? c->established
                     : closed_tls(s) && (s->failure_flags & TLS_KEPT_ESTABLISHED) != 0;
}

int
sk_tls_plain_http(const sk_stream_t *s)
{
    tls_conn *c = conn_of(s);
    return c != NULL ? c->plain_http
                     : closed_tls(s) && (s->failure_flags & TLS_KEPT_PLAIN_HTTP) != 0;
}

int
sk_tls_protocol_error(const sk_stream_t *s)
{
    tls_conn *c = conn_of(s);
    return c != NULL ? c->fail_errno == EPROTO
                     : closed_tls(s) && (s->failure_flags & TLS_KEPT_PROTOCOL) != 0;
}

const char *
sk_tls_last_error(const sk_stream_t *s)
{
    tls_conn *c = conn_of(s);
    return c != NULL ? c->why : closed_tls(s) ? s->failure : NULL;
}

size_t
sk_tls_output_capacity(const sk_stream_t *s)
{
    tls_conn *c = conn_of(s);
    return c != NULL ? c->ob_cap : (size_t)-1;
}

int
sk_tls_ktls_available(void)
{
#ifdef OPENSSL_NO_KTLS
    return 0;
#else
    char buf[256];
    int fd = open("/proc/sys/net/ipv4/tcp_available_ulp", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t\n", &save); tok != NULL;
         tok = strtok_r(NULL, " \t\n", &save)) {
        if (strcmp(tok, "tls") == 0) {
            return 1;
        }
    }
    return 0;
#endif
}
