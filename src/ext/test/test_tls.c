/* test_tls.c — the TLS stream layer (src/ext/sk_tls.c) against the contract of its table
 * (sk_stream.h rules 1-5, sk_tls.h): the handshake through want-answers, plaintext both ways,
 * input the layer holds (pending), partial kernel acceptance (rule 3), ciphertext one byte at a
 * time, the peer's end with and without close_notify, garbage, plain HTTP on the TLS port,
 * renegotiation refused, shutdown and close. Plain C over socketpairs against a client SSL
 * object whose ciphertext the test moves itself (memory BIOs: split where a case says).
 *
 * Owns: the key and self-signed certificate each run makes (EVP_PKEY_Q_keygen, X509: no files),
 * the two SSL_CTXs and the descriptors each case opens and closes.
 * Never: uses the network or depends on the wall clock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/buffer.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "sk_tls.h"
#include "test/sk_test.h" /* src/core/test/ */

static SSL_CTX *server_ctx, *client_ctx, *client12_ctx;

/* A P-256 key and a self-signed certificate for "localhost", valid for a day. */
static int
make_identity(EVP_PKEY **key, X509 **cert)
{
    *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    *cert = X509_new();
    if (*key == NULL || *cert == NULL) {
        return -1;
    }
    X509_NAME *name = X509_NAME_new();
    if (name == NULL ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost",
                                    -1, -1, 0) ||
        !X509_set_version(*cert, 2) || !ASN1_INTEGER_set(X509_get_serialNumber(*cert), 1) ||
        X509_gmtime_adj(X509_getm_notBefore(*cert), 0) == NULL ||
        X509_gmtime_adj(X509_getm_notAfter(*cert), 86400) == NULL ||
        !X509_set_subject_name(*cert, name) || !X509_set_issuer_name(*cert, name) ||
        !X509_set_pubkey(*cert, *key) || !X509_sign(*cert, *key, EVP_sha256())) {
        X509_NAME_free(name);
        return -1;
    }
    X509_NAME_free(name);
    return 0;
}

static int
make_contexts(void)
{
    EVP_PKEY *key = NULL;
    X509 *cert = NULL;
    int rc = -1;
    if (make_identity(&key, &cert) != 0) {
        goto done;
    }
    server_ctx = SSL_CTX_new(TLS_server_method());
    client_ctx = SSL_CTX_new(TLS_client_method());
    client12_ctx = SSL_CTX_new(TLS_client_method());
    if (server_ctx == NULL || client_ctx == NULL || client12_ctx == NULL ||
        !SSL_CTX_use_certificate(server_ctx, cert) || !SSL_CTX_use_PrivateKey(server_ctx, key) ||
        !SSL_CTX_set_min_proto_version(server_ctx, TLS1_2_VERSION) ||
        !SSL_CTX_set_max_proto_version(client12_ctx, TLS1_2_VERSION)) {
        goto done;
    }
    SSL_CTX_set_options(server_ctx, SSL_OP_NO_RENEGOTIATION);
    rc = 0;
done:
    EVP_PKEY_free(key);
    X509_free(cert);
    return rc;
}

/* One connection: the layer on sv[0], a client SSL object on memory BIOs whose ciphertext the
 * test moves to and from sv[1]. */
typedef struct {
    int sv[2];
    sk_stream_t s;
    sk_tls_source_t src;
    SSL *cl;
    BIO *crb, *cwb;
} Conn;

static int
conn_open(Conn *c, SSL_CTX *cctx)
{
    memset(c, 0, sizeof(*c));
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, c->sv) != 0) {
        return -1;
    }
    c->s = (sk_stream_t){.fd = c->sv[0], .family = AF_UNIX};
    c->src.ctx = server_ctx;
    pthread_mutex_init(&c->src.lock, NULL);
    if (sk_stream_tls.open(&c->s, &c->src) != 0) {
        return -1;
    }
    c->cl = SSL_new(cctx);
    c->crb = BIO_new(BIO_s_mem());
    c->cwb = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(c->crb, -1);
    SSL_set_bio(c->cl, c->crb, c->cwb);
    SSL_set_connect_state(c->cl);
    return 0;
}

static void
conn_close(Conn *c, int reset)
{
    if (c->s.ctx != NULL) {
        sk_stream_tls.close(&c->s, reset);
    }
    SSL_free(c->cl);
    if (c->sv[0] >= 0) {
        close(c->sv[0]);
    }
    if (c->sv[1] >= 0) {
        close(c->sv[1]);
    }
}

/* The client's ciphertext to the socket, `step` bytes per write (0: all at once). Bytes sent. */
static size_t
client_out(Conn *c, size_t step)
{
    char *p;
    long len = BIO_get_mem_data(c->cwb, &p);
    size_t sent = 0;
    char tmp[65536];
    if (len <= 0) {
        return 0;
    }
    int k = BIO_read(c->cwb, tmp, (int)(len < (long)sizeof(tmp) ? len : (long)sizeof(tmp)));
    while (k > 0 && sent < (size_t)k) {
        size_t n = step == 0 ? (size_t)k - sent : step;
        ssize_t w = write(c->sv[1], tmp + sent, n);
        if (w <= 0) {
            break;
        }
        sent += (size_t)w;
    }
    return sent;
}

/* What the socket has for the client, into its read BIO. Bytes moved. */
static size_t
client_in(Conn *c)
{
    char tmp[65536];
    size_t got = 0;
    for (;;) {
        ssize_t n = recv(c->sv[1], tmp, sizeof(tmp), MSG_DONTWAIT);
        if (n <= 0) {
            return got;
        }
        BIO_write(c->crb, tmp, (int)n);
        got += (size_t)n;
    }
}

/* Runs the handshake: the layer's read and the client in turns. The layer's answers are logged
 * into `answers` (up to 8). 0 once both are done. */
static int
handshake(Conn *c, ssize_t *answers, int *nans)
{
    char buf[64];
    int cut = 0;
    *nans = 0;
    for (int i = 0; i < 8; i++) {
        ssize_t r = sk_stream_tls.read(&c->s, buf, sizeof(buf), &cut);
        answers[(*nans)++] = r;
        client_in(c);
        int rc = SSL_do_handshake(c->cl);
        client_out(c, 0);
        if (rc == 1 && sk_tls_established(&c->s)) {
            return 0;
        }
        if (r == SK_STREAM_ERROR) {
            return -1;
        }
    }
    return -1;
}

static int
connected(Conn *c, SSL_CTX *cctx)
{
    ssize_t ans[8] = {0};
    int n;
    return conn_open(c, cctx) == 0 && handshake(c, ans, &n) == 0 ? 0 : -1;
}

/* connected(), a failed check when it is not: 1 connected, 0 (the case returns). */
static int
connected_or_fail(T *t, Conn *c, SSL_CTX *cctx)
{
    if (connected(c, cctx) != 0) {
        CHECK(t, !"handshake");
        return 0;
    }
    return 1;
}

/* The handshake answers WANT_READ until the client's flights come, then is established. */
static void
test_handshake(T *t)
{
    Conn c;
    ssize_t ans[8] = {0};
    int n = 0;
    char buf[16];
    int cut = 0;
    CHECK(t, conn_open(&c, client_ctx) == 0);
    CHECK(t, sk_tls_ssl(&c.s) != NULL && sk_tls_established(&c.s) == 0);
    struct iovec iov = {"x", 1};
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == SK_STREAM_WANT_READ); /* no hello yet */
    CHECK(t, handshake(&c, ans, &n) == 0);
    /* TLS 1.3: before the ClientHello; after it (the server's flight sent); after the client's
     * Finished (established, no data yet) */
    CHECK(t, n == 3);
    CHECK(t, ans[0] == SK_STREAM_WANT_READ && ans[1] == SK_STREAM_WANT_READ);
    CHECK(t, ans[2] == SK_STREAM_WANT_READ);
    CHECK(t, sk_tls_established(&c.s) == 1);
    CHECK(t, SSL_version(sk_tls_ssl(&c.s)) == TLS1_3_VERSION);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_WANT_READ);
    CHECK(t, sk_stream_tls.pending(&c.s) == 0);
    CHECK(t, sk_tls_last_error(&c.s) == NULL && sk_tls_plain_http(&c.s) == 0);
    sk_stream_t plain = {.fd = -1};
    CHECK(t, sk_tls_ssl(&plain) == NULL && sk_tls_established(&plain) == 0);
    conn_close(&c, 0);
}

/* A read that must first send the server's flight while the kernel takes none of it answers
 * WANT_WRITE (rule 1), and sends it once the socket drains. */
static void
test_handshake_want_write(T *t)
{
    Conn c;
    ssize_t ans[8] = {0};
    int n = 0;
    char buf[64];
    static char filler[1 << 20];
    int cut = 0;
    CHECK(t, conn_open(&c, client_ctx) == 0);
    CHECK(t, SSL_do_handshake(c.cl) <= 0);
    client_out(&c, 0); /* the ClientHello */
    size_t filled = 0;
    for (;;) { /* the socket toward the client, full */
        ssize_t w = send(c.sv[0], filler, sizeof(filler), MSG_DONTWAIT);
        if (w <= 0) {
            break;
        }
        filled += (size_t)w;
    }
    CHECK(t, filled > 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_WANT_WRITE);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_WANT_WRITE);
    size_t drained = 0;
    while (drained < filled) {
        ssize_t r = recv(c.sv[1], filler,
                         filled - drained < sizeof(filler) ? filled - drained : sizeof(filler),
                         MSG_DONTWAIT);
        if (r <= 0) {
            break;
        }
        drained += (size_t)r;
    }
    CHECK(t, drained == filled);
    /* writable again: the flight goes, the read waits for the client's Finished */
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_WANT_READ);
    CHECK(t, handshake(&c, ans, &n) == 0);
    CHECK(t, sk_tls_established(&c.s) == 1);
    conn_close(&c, 1);
}

/* The server writes first (a response before any request was read): writev drives the handshake
 * itself (WANT_READ until the client speaks), sends once it is done, and input it took off the
 * socket on the way is left for read (pending > 0). */
static void
test_write_first(T *t)
{
    Conn c;
    char buf[64];
    int cut = 0;
    CHECK(t, conn_open(&c, client_ctx) == 0);
    struct iovec iov = {"early", 5};
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == SK_STREAM_WANT_READ);
    CHECK(t, SSL_do_handshake(c.cl) <= 0);
    client_out(&c, 0);                                                       /* ClientHello */
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == SK_STREAM_WANT_READ); /* flight sent */
    client_in(&c);
    CHECK(t, SSL_do_handshake(c.cl) == 1);
    size_t w = 0;
    CHECK(t, SSL_write_ex(c.cl, "ping", 4, &w) == 1);
    client_out(&c, 0); /* Finished and a record of data, together */
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == 5);
    CHECK(t, sk_tls_established(&c.s) == 1);
    CHECK(t, sk_stream_tls.pending(&c.s) > 0); /* the data record waits in the layer */
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 4 && memcmp(buf, "ping", 4) == 0);
    client_in(&c);
    size_t r = 0;
    CHECK(t,
          SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 1 && r == 5 && memcmp(buf, "early", 5) == 0);
    conn_close(&c, 1);
}

/* Plaintext both ways, exact bytes; the iovec's entries gathered. */
static void
test_plaintext(T *t)
{
    Conn c;
    char buf[64];
    int cut = 0;
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    size_t w = 0;
    CHECK(t, SSL_write_ex(c.cl, "hello", 5, &w) == 1 && w == 5);
    client_out(&c, 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 5);
    CHECK(t, memcmp(buf, "hello", 5) == 0 && cut == 0);
    CHECK(t, sk_stream_tls.pending(&c.s) == 0);
    struct iovec iov[2] = {{"abc", 3}, {"defg", 4}};
    CHECK(t, sk_stream_tls.writev(&c.s, iov, 2, 0) == 7);
    client_in(&c);
    size_t r = 0;
    memset(buf, 0, sizeof(buf));
    CHECK(t, SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 1 && r == 7);
    CHECK(t, memcmp(buf, "abcdefg", 7) == 0);
    conn_close(&c, 1);
}

/* The output buffer once a response larger than TLS_BIO_KEEP (32 KiB) left: freed at the end of
 * the burst; a small response keeps the buffer as it is. */
static size_t
wbio_max(Conn *c)
{
    return sk_tls_output_capacity(&c->s);
}

static void
test_write_bio_trimmed(T *t)
{
    Conn c;
    static char big[48 * 1024];
    char buf[16384];
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    memset(big, 'b', sizeof(big));
    struct iovec iov = {"small", 5};
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == 5);
    size_t small = wbio_max(&c);
    CHECK(t, small > 0 && small <= 32 * 1024);
    iov = (struct iovec){"again", 5};
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == 5);
    CHECK(t, wbio_max(&c) == small); /* kept */
    iov = (struct iovec){big, sizeof(big)};
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == (ssize_t)sizeof(big));
    CHECK(t, wbio_max(&c) <= 32 * 1024); /* the grown buffer is gone */
    size_t got = 0, r = 0;
    client_in(&c);
    while (SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 1) {
        got += r;
    }
    CHECK(t, got == 10 + sizeof(big));
    conn_close(&c, 1);
}

/* A record larger than the caller's buffer: the rest is held (pending > 0) and the next read
 * returns it (rule 2b). */
static void
test_pending(T *t)
{
    Conn c;
    static char msg[10000], buf[8192];
    int cut = 0;
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    for (size_t i = 0; i < sizeof(msg); i++) {
        msg[i] = (char)('a' + i % 26);
    }
    size_t w = 0;
    CHECK(t, SSL_write_ex(c.cl, msg, sizeof(msg), &w) == 1 && w == sizeof(msg)); /* one record */
    client_out(&c, 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, 4096, &cut) == 4096);
    CHECK(t, memcmp(buf, msg, 4096) == 0);
    CHECK(t, sk_stream_tls.pending(&c.s) == 10000 - 4096);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 10000 - 4096);
    CHECK(t, memcmp(buf, msg + 4096, 10000 - 4096) == 0);
    CHECK(t, sk_stream_tls.pending(&c.s) == 0);
    /* two records in the socket, a buffer ending inside the first */
    CHECK(t, SSL_write_ex(c.cl, "first", 5, &w) == 1 && SSL_write_ex(c.cl, "second", 6, &w) == 1);
    client_out(&c, 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, 3, &cut) == 3 && memcmp(buf, "fir", 3) == 0);
    CHECK(t, sk_stream_tls.pending(&c.s) > 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 8);
    CHECK(t, memcmp(buf, "stsecond", 8) == 0);
    CHECK(t, sk_stream_tls.pending(&c.s) == 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_WANT_READ);
    conn_close(&c, 1);
}

/* The kernel takes part of the ciphertext: the layer keeps the rest, answers WANT_WRITE or the
 * plaintext of the records that left, and is called again with the same bytes at the head
 * (copied to another address each time): every byte arrives once, in order (rule 3). */
static void
test_partial(T *t)
{
    Conn c;
    enum { TOTAL = 300000 };
    static char msg[TOTAL], got[TOTAL];
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    int small = 4096;
    CHECK(t, setsockopt(c.sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
    for (size_t i = 0; i < TOTAL; i++) {
        msg[i] = (char)(i * 7 + i / 251);
    }
    size_t sent = 0, recvd = 0;
    int wants = 0, calls = 0, short_counts = 0;
    while ((sent < TOTAL || recvd < TOTAL) && calls < 100000) {
        if (sent < TOTAL) {
            size_t len = TOTAL - sent;
            char *moved = malloc(len); /* the same bytes at another address */
            memcpy(moved, msg + sent, len);
            struct iovec iov = {moved, len};
            ssize_t n = sk_stream_tls.writev(&c.s, &iov, 1, 0);
            free(moved);
            calls++;
            if (n == SK_STREAM_WANT_WRITE) {
                wants++;
            }
            else if (n > 0) {
                CHECK(t, (size_t)n == len || ((size_t)n < len && n % 16384 == 0));
                short_counts += (size_t)n < len;
                sent += (size_t)n;
            }
            else {
                CHECK(t, !"writev failed");
                break;
            }
        }
        client_in(&c);
        for (;;) {
            size_t r = 0;
            if (!SSL_read_ex(c.cl, got + recvd, TOTAL - recvd, &r)) {
                break;
            }
            recvd += r;
        }
    }
    CHECK(t, sent == TOTAL && recvd == TOTAL);
    CHECK(t, memcmp(got, msg, TOTAL) == 0);
    CHECK(t, wants > 0 && short_counts > 0);
    conn_close(&c, 1);
}

/* Two iovec entries (a head, then a long range): the head and the range's start are gathered
 * into one record; each call encrypts at most 64 KiB and reports it all once the kernel took
 * it; every byte arrives once, in order. */
static void
test_gather(T *t)
{
    Conn c;
    enum { HEAD = 100, TAIL = 100000 };
    static char head[HEAD], tail[TAIL], got[HEAD + TAIL];
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    int big = 1 << 20;
    (void)setsockopt(c.sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    memset(head, 'h', sizeof(head));
    for (size_t i = 0; i < TAIL; i++) {
        tail[i] = (char)(i % 251);
    }
    size_t sent = 0, recvd = 0;
    ssize_t counts[4] = {0};
    int calls = 0;
    while (sent < HEAD + TAIL && calls < 4) {
        struct iovec iov[2];
        int cnt = 0;
        if (sent < HEAD) {
            iov[cnt++] = (struct iovec){head + sent, HEAD - sent};
        }
        size_t toff = sent < HEAD ? 0 : sent - HEAD;
        iov[cnt++] = (struct iovec){tail + toff, TAIL - toff};
        ssize_t n = sk_stream_tls.writev(&c.s, iov, cnt, 0);
        counts[calls++] = n;
        if (n <= 0) {
            break;
        }
        sent += (size_t)n;
        client_in(&c);
        size_t r = 0;
        while (SSL_read_ex(c.cl, got + recvd, sizeof(got) - recvd, &r)) {
            recvd += r;
        }
    }
    CHECK(t, calls == 2 && counts[0] == 65536 && counts[1] == HEAD + TAIL - 65536);
    CHECK(t, sent == HEAD + TAIL && recvd == HEAD + TAIL);
    CHECK(t, memcmp(got, head, HEAD) == 0 && memcmp(got + HEAD, tail, TAIL) == 0);
    /* the burst is over: the output buffer that held 64 KiB of ciphertext was freed */
    CHECK(t, sk_tls_output_capacity(&c.s) <= 32 * 1024);
    conn_close(&c, 1);
}

/* Up to `step` bytes of what the socket has for the client, into its read BIO, and the plaintext
 * that completes into got[*recvd..cap). Bytes moved off the socket. */
static size_t
client_sip(Conn *c, size_t step, char *got, size_t *recvd, size_t cap)
{
    char tmp[4096];
    ssize_t n = recv(c->sv[1], tmp, step < sizeof(tmp) ? step : sizeof(tmp), MSG_DONTWAIT);
    if (n > 0) {
        BIO_write(c->crb, tmp, (int)n);
    }
    size_t r = 0;
    while (*recvd < cap && SSL_read_ex(c->cl, got + *recvd, cap - *recvd, &r)) {
        *recvd += r;
    }
    return n > 0 ? (size_t)n : 0;
}

/* The output buffer under a slow reader: small socket buffers both sides, the client taking
 * 1000 bytes at a time (the kernel stops the layer mid-record, EAGAIN); a head gathered with a
 * range of more than 64 KiB, reported only as whole calls' records leave (rule 3); the buffer
 * freed once the burst is over (the read that finds the socket empty). Then, behind records
 * queued and partly sent, control bytes: 800 KeyUpdate replies (the buffer's bytes moved to its
 * start, then a larger buffer) and close_notify: the range, the replies, close_notify, the FIN.
 * Every byte arrives once, exact, in order. */
static void
test_output_buffer(T *t)
{
    Conn c;
    enum { HEAD = 77, BODY = 150001, MORE = 60000, TOTAL = HEAD + BODY + MORE };
    static char msg[TOTAL], got[TOTAL];
    char end[16];
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    int small = 4096;
    CHECK(t, setsockopt(c.sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
    CHECK(t, setsockopt(c.sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) == 0);
    for (size_t i = 0; i < TOTAL; i++) {
        msg[i] = (char)(i * 13 + i / 509);
    }
    size_t sent = 0, recvd = 0;
    int wants = 0, loops = 0;
    while (sent < HEAD + BODY && loops++ < 200000) {
        struct iovec iov[2];
        int cnt = 0;
        if (sent < HEAD) {
            iov[cnt++] = (struct iovec){msg + sent, HEAD - sent};
        }
        size_t boff = sent < HEAD ? HEAD : sent;
        iov[cnt++] = (struct iovec){msg + boff, HEAD + BODY - boff};
        ssize_t n = sk_stream_tls.writev(&c.s, iov, cnt, 0);
        if (n == SK_STREAM_WANT_WRITE) {
            wants++;
            CHECK(t, sk_tls_output_capacity(&c.s) > 64 * 1024); /* the call's records, queued */
            client_sip(&c, 1000, got, &recvd, TOTAL);
            continue;
        }
        if (n <= 0) {
            CHECK(t, !"writev failed");
            break;
        }
        CHECK(t, (size_t)n <= HEAD + BODY - sent);
        sent += (size_t)n;
    }
    CHECK(t, sent == HEAD + BODY && wants > 0);
    int cut = 0;
    CHECK(t, sk_stream_tls.read(&c.s, end, sizeof(end), &cut) == SK_STREAM_WANT_READ);
    CHECK(t, sk_tls_output_capacity(&c.s) <= 32 * 1024); /* the burst is over: freed */
    while (recvd < HEAD + BODY && loops++ < 400000) {
        if (client_sip(&c, 1000, got, &recvd, TOTAL) == 0) {
            break;
        }
    }
    CHECK(t, recvd == HEAD + BODY);
    CHECK(t, memcmp(got, msg, HEAD + BODY) == 0);

    /* records queued, partly sent, then close_notify behind them */
    struct iovec iov = {msg + HEAD + BODY, MORE};
    ssize_t n = sk_stream_tls.writev(&c.s, &iov, 1, 0);
    CHECK(t, n == SK_STREAM_WANT_WRITE || (n > 0 && n < MORE));
    client_sip(&c, 1000, got, &recvd, TOTAL); /* the head of the buffer leaves, not all */
    /* KeyUpdates asking for ours (RFC 8446 §4.6.3): each reply is appended behind the queued
     * records (moved to the buffer's start, then a larger buffer) and leaves after them */
    for (int k = 0; k < 800; k++) {
        CHECK(t, SSL_key_update(c.cl, SSL_KEY_UPDATE_REQUESTED) == 1);
        CHECK(t, SSL_do_handshake(c.cl) == 1);
        CHECK(t, client_out(&c, 0) > 0);
        if (k % 50 == 0) {
            CHECK(t, sk_stream_tls.read(&c.s, end, sizeof(end), &cut) == SK_STREAM_WANT_READ);
        }
    }
    CHECK(t, sk_stream_tls.read(&c.s, end, sizeof(end), &cut) == SK_STREAM_WANT_READ);
    int rc = SK_STREAM_WANT_WRITE, shut_wants = 0;
    while (rc == SK_STREAM_WANT_WRITE && loops++ < 600000) {
        rc = sk_stream_tls.shutdown(&c.s);
        shut_wants += rc == SK_STREAM_WANT_WRITE;
        client_sip(&c, 1000, got, &recvd, TOTAL);
    }
    CHECK(t, rc == 0 && shut_wants > 0);
    while (client_sip(&c, 4096, got, &recvd, TOTAL) > 0) {
    }
    CHECK(t, recvd == TOTAL);
    CHECK(t, memcmp(got, msg, TOTAL) == 0);
    size_t r = 0;
    CHECK(t, SSL_read_ex(c.cl, end, sizeof(end), &r) == 0);
    CHECK(t, SSL_get_error(c.cl, 0) == SSL_ERROR_ZERO_RETURN);
    CHECK(t, recv(c.sv[1], end, sizeof(end), MSG_DONTWAIT) == 0); /* the FIN */
    conn_close(&c, 0);
}

/* The client's record fed one byte at a time: WANT_READ until its last byte, then all of it. */
static void
test_one_byte(T *t)
{
    Conn c;
    char buf[64];
    int cut = 0;
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    static const char req[] = "GET / HTTP/1.1\r\nhost: a\r\n\r\n";
    size_t w = 0;
    int wants = 0;
    ssize_t last = 0;
    CHECK(t, SSL_write_ex(c.cl, req, sizeof(req) - 1, &w) == 1);
    char ct[256];
    long len = BIO_read(c.cwb, ct, sizeof(ct));
    CHECK(t, len == 5 + (long)(sizeof(req) - 1) + 1 + 16); /* header, data, type, AEAD tag */
    for (long i = 0; i < len; i++) {
        CHECK(t, write(c.sv[1], ct + i, 1) == 1);
        last = sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut);
        if (last == SK_STREAM_WANT_READ) {
            wants++;
        }
    }
    CHECK(t, wants == len - 1);
    CHECK(t, last == (ssize_t)(sizeof(req) - 1) && memcmp(buf, req, sizeof(req) - 1) == 0);
    conn_close(&c, 1);
}

/* close_notify: read answers 0 (and again 0); a FIN without it too (rule 5), with the reason
 * "unexpected eof" kept, and the layer still writes and ends with close_notify (RFC 8446 §6.1). */
static void
test_peer_end(T *t)
{
    Conn c;
    char buf[64];
    int cut = 0;
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    size_t w = 0;
    CHECK(t, SSL_write_ex(c.cl, "last", 4, &w) == 1);
    CHECK(t, SSL_shutdown(c.cl) == 0); /* close_notify sent */
    client_out(&c, 0);
    CHECK(t, shutdown(c.sv[1], SHUT_WR) == 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 4 && memcmp(buf, "last", 4) == 0);
    CHECK(t, sk_stream_tls.pending(&c.s) > 0); /* the end is held: read again */
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 0);
    conn_close(&c, 0);

    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    CHECK(t, SSL_write_ex(c.cl, "cut", 3, &w) == 1);
    client_out(&c, 0);
    CHECK(t, shutdown(c.sv[1], SHUT_WR) == 0); /* FIN, no close_notify */
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 3 && memcmp(buf, "cut", 3) == 0);
    /* its recv came back short: the FIN is not looked for in the same read (the transport reads
     * again on the hang-up's EPOLLRDHUP after a read > 0) */
    CHECK(t, sk_stream_tls.pending(&c.s) == 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 0);
    CHECK(t, sk_tls_last_error(&c.s) != NULL &&
                 strcmp(sk_tls_last_error(&c.s), "unexpected eof") == 0);
    CHECK(t, !sk_tls_protocol_error(&c.s));
    {
        /* the peer only half-closed: an answer still reaches it, then close_notify */
        struct iovec iov = {.iov_base = "late", .iov_len = 4};
        size_t r = 0;
        CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == 4);
        sk_stream_tls.close(&c.s, 0);
        client_in(&c);
        CHECK(t, SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 1); /* past the session tickets */
        CHECK(t, r == 4 && memcmp(buf, "late", 4) == 0);
        CHECK(t, SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 0);
        CHECK(t, SSL_get_error(c.cl, 0) == SSL_ERROR_ZERO_RETURN);
    }
    conn_close(&c, 1);

    /* mid-record: half a record, then the FIN */
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    CHECK(t, SSL_write_ex(c.cl, "truncated", 9, &w) == 1);
    char ct[128];
    int len = BIO_read(c.cwb, ct, sizeof(ct));
    CHECK(t, len == 5 + 9 + 1 + 16);
    CHECK(t, write(c.sv[1], ct, 10) == 10 && shutdown(c.sv[1], SHUT_WR) == 0);
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == 0); /* the cut record dropped */
    CHECK(t, sk_tls_last_error(&c.s) != NULL &&
                 strcmp(sk_tls_last_error(&c.s), "unexpected eof") == 0);
    conn_close(&c, 1);
}

/* Bytes that are no TLS: EPROTO, an alert back, nothing returned. */
static void
test_garbage(T *t)
{
    Conn c;
    char buf[64];
    int cut = 0;
    CHECK(t, conn_open(&c, client_ctx) == 0);
    static const char junk[] = "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09";
    CHECK(t, write(c.sv[1], junk, 10) == 10);
    errno = 0;
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_ERROR);
    CHECK(t, errno == EPROTO);
    CHECK(t, sk_tls_plain_http(&c.s) == 0 && sk_tls_last_error(&c.s) != NULL);
    /* sticky: every entry fails the same way */
    struct iovec iov = {"x", 1};
    errno = 0;
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == SK_STREAM_ERROR && errno == EPROTO);
    errno = 0;
    CHECK(t,
          sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_ERROR && errno == EPROTO);
    conn_close(&c, 0);

    /* a TLS record header whose handshake body is garbage: a fatal alert (7 bytes) goes back */
    CHECK(t, conn_open(&c, client_ctx) == 0);
    static const char bad_hello[] = "\x16\x03\x01\x00\x04\x01\x00\x00\x00";
    CHECK(t, write(c.sv[1], bad_hello, 9) == 9);
    errno = 0;
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_ERROR);
    CHECK(t, errno == EPROTO);
    unsigned char alert[16];
    ssize_t n = recv(c.sv[1], alert, sizeof(alert), MSG_DONTWAIT);
    CHECK(t, n == 7 && alert[0] == 0x15 && alert[5] == 2); /* alert record, level fatal */
    conn_close(&c, 0);
}

/* Plain HTTP on the TLS port: the fixed 400, exactly, then EPROTO; nothing returned. */
static void
test_plain_http(T *t)
{
    Conn c;
    char buf[64];
    int cut = 0;
    CHECK(t, conn_open(&c, client_ctx) == 0);
    static const char req[] = "GET / HTTP/1.1\r\nhost: a\r\n\r\n";
    CHECK(t, write(c.sv[1], req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1));
    errno = 0;
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_ERROR);
    CHECK(t, errno == EPROTO);
    CHECK(t, sk_tls_plain_http(&c.s) == 1);
    CHECK(t, strcmp(sk_tls_last_error(&c.s), "plain HTTP request") == 0);
    static const char answer[] = SK_TLS_PLAIN_HTTP_RESPONSE;
    char got[512];
    ssize_t n = recv(c.sv[1], got, sizeof(got), MSG_DONTWAIT);
    CHECK(t, n == (ssize_t)(sizeof(answer) - 1) && memcmp(got, answer, sizeof(answer) - 1) == 0);
    CHECK(t, sizeof(answer) - 1 == 156);
    /* the request was read: closing sends a FIN, not a reset */
    char rest[8];
    CHECK(t, recv(c.sv[0], rest, sizeof(rest), MSG_DONTWAIT) == -1 && errno == EAGAIN);
    conn_close(&c, 0);
}

/* shutdown: close_notify, then the FIN; close without shutdown: close_notify best effort; a
 * reset: nothing. */
static void
test_shutdown_close(T *t)
{
    Conn c;
    char buf[64];
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    CHECK(t, sk_stream_tls.shutdown(&c.s) == 0);
    client_in(&c);
    size_t r = 0;
    CHECK(t, SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 0);
    CHECK(t, SSL_get_error(c.cl, 0) == SSL_ERROR_ZERO_RETURN);
    CHECK(t, recv(c.sv[1], buf, sizeof(buf), MSG_DONTWAIT) == 0); /* the FIN */
    conn_close(&c, 0);

    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    client_in(&c); /* the session tickets */
    SSL_read_ex(c.cl, buf, sizeof(buf), &r);
    sk_stream_tls.close(&c.s, 0);
    client_in(&c);
    CHECK(t, SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 0);
    CHECK(t, SSL_get_error(c.cl, 0) == SSL_ERROR_ZERO_RETURN);
    conn_close(&c, 0);

    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    client_in(&c);
    SSL_read_ex(c.cl, buf, sizeof(buf), &r);
    sk_stream_tls.close(&c.s, 1);
    CHECK(t, recv(c.sv[1], buf, sizeof(buf), MSG_DONTWAIT) == -1 && errno == EAGAIN);
    conn_close(&c, 1);
}

/* After our close_notify and FIN, the input is still read (a drain): a KeyUpdate asking for ours
 * (RFC 8446 §4.6.3) and data behind it are read as usual and the reply is dropped, not sent on the
 * shut socket (that failed the read with EPIPE: the close became a reset, cutting the response's
 * tail still queued for the client). */
static void
test_key_update_after_shutdown(T *t)
{
    Conn c;
    char buf[64];
    int cut = 0;
    if (!connected_or_fail(t, &c, client_ctx)) {
        return;
    }
    struct iovec iov = {"the response", 12};
    CHECK(t, sk_stream_tls.writev(&c.s, &iov, 1, 0) == 12);
    CHECK(t, sk_stream_tls.shutdown(&c.s) == 0);
    for (int k = 0; k < 3; k++) {
        CHECK(t, SSL_key_update(c.cl, SSL_KEY_UPDATE_REQUESTED) == 1);
        CHECK(t, SSL_write(c.cl, "more", 4) == 4);
        CHECK(t, client_out(&c, 0) > 0);
        ssize_t r = sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut);
        CHECK(t, r == 4 && memcmp(buf, "more", 4) == 0);
        CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_WANT_READ);
    }
    client_in(&c);
    size_t r = 0;
    CHECK(t, SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 1 && r == 12);
    CHECK(t, memcmp(buf, "the response", 12) == 0);
    CHECK(t, SSL_read_ex(c.cl, buf, sizeof(buf), &r) == 0);
    CHECK(t, SSL_get_error(c.cl, 0) == SSL_ERROR_ZERO_RETURN);
    CHECK(t, recv(c.sv[1], buf, sizeof(buf), MSG_DONTWAIT) == 0); /* the FIN, nothing after */
    CHECK(t, sk_stream_tls.shutdown(&c.s) == 0);                  /* again: still done */
    conn_close(&c, 0);
}

/* TLS 1.2 renegotiation asked by the client: EPROTO, never a loop. */
static void
test_renegotiation(T *t)
{
    Conn c;
    char buf[64];
    int cut = 0;
    if (!connected_or_fail(t, &c, client12_ctx)) {
        return;
    }
    CHECK(t, SSL_version(sk_tls_ssl(&c.s)) == TLS1_2_VERSION);
    CHECK(t, SSL_renegotiate(c.cl) == 1);
    CHECK(t, SSL_do_handshake(c.cl) <= 0); /* its ClientHello written, waiting */
    client_out(&c, 0);
    errno = 0;
    CHECK(t, sk_stream_tls.read(&c.s, buf, sizeof(buf), &cut) == SK_STREAM_ERROR);
    CHECK(t, errno == EPROTO);
    CHECK(t, strcmp(sk_tls_last_error(&c.s), "renegotiation refused") == 0);
    conn_close(&c, 1);
}

/* Files: no sendfile through memory BIOs. */
static void
test_sendfile(T *t)
{
    Conn c;
    uint64_t off = 0;
    CHECK(t, conn_open(&c, client_ctx) == 0);
    CHECK(t, strcmp(sk_stream_tls.name, "tls") == 0);
    CHECK(t, sk_stream_tls.sendfile(&c.s, 0, &off, 100) == SK_STREAM_NO_SENDFILE && off == 0);
    int k = sk_tls_ktls_available();
    CHECK(t, k == 0 || k == 1);
    conn_close(&c, 1);
}

int
main(void)
{
    T t = {0};
    signal(SIGPIPE, SIG_IGN);
    if (make_contexts() != 0) {
        fprintf(stderr, "test_tls: cannot make the key, certificate or contexts\n");
        ERR_print_errors_fp(stderr);
        return 1;
    }
    test_handshake(&t);
    test_handshake_want_write(&t);
    test_write_first(&t);
    test_plaintext(&t);
    test_write_bio_trimmed(&t);
    test_pending(&t);
    test_partial(&t);
    test_gather(&t);
    test_output_buffer(&t);
    test_one_byte(&t);
    test_peer_end(&t);
    test_garbage(&t);
    test_plain_http(&t);
    test_shutdown_close(&t);
    test_key_update_after_shutdown(&t);
    test_renegotiation(&t);
    test_sendfile(&t);
    SSL_CTX_free(server_ctx);
    SSL_CTX_free(client_ctx);
    SSL_CTX_free(client12_ctx);
    printf("test_tls: %d passed, %d failed\n", t.passed, t.failed);
    return t.failed == 0 ? 0 : 1;
}
