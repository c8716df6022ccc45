/* What the benchmark's C clients (ws_load.c, scale_client.c, fanout_client.c) share: the
 * monotonic clock in nanoseconds, dying with errno's text, an xorshift64* step (varied, not
 * secret: masking and handshake keys), the WebSocket opening handshake's checks (a fresh
 * Sec-WebSocket-Key and the Sec-WebSocket-Accept computed from it: SHA-1 and base64, RFC 6455
 * §4.2.2; kept apart from skirr's own in src/core so the clients check the server with code that
 * is not the server's), a server frame's header read (RFC 6455 §5.2), one header's value read
 * from a response head, the source address of the k-th of many loopback connections, the
 * descriptor limit raised for many connections and a random seed. Header-only (static functions): each client is one translation unit, built by
 * bench/harness/peers.py's build_c.
 */
#ifndef BENCH_CLIENT_H
#define BENCH_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <arpa/inet.h>
#include <sys/random.h>
#include <sys/resource.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
die(const char *what)
{
    perror(what);
    exit(1);
}

/* The next value of the xorshift64* generator whose (nonzero) state is *s. */
static uint64_t
xorshift64s(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

/* SHA-1 (FIPS 180-4 §6.1) and base64 (RFC 4648 §4), for Sec-WebSocket-Accept only. */

static uint32_t
rol(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

static void
sha1_block(uint32_t h[5], const unsigned char *p)
{
    uint32_t w[80];
    for (int t = 0; t < 16; t++) {
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
               (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
    }
    for (int t = 16; t < 80; t++) {
        w[t] = rol(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999;
        }
        else if (t < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1;
        }
        else if (t < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdc;
        }
        else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        uint32_t tmp = rol(a, 5) + f + e + k + w[t];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = tmp;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

/* The 20-byte digest of data[0, n), n < 128 (a key and the GUID). */
static void
sha1(const unsigned char *data, size_t n, unsigned char out[20])
{
    uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    unsigned char buf[192] = {0};
    memcpy(buf, data, n);
    buf[n] = 0x80;
    size_t total = (n + 8) / 64 * 64 + 64;
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++) {
        buf[total - 1 - i] = (unsigned char)(bits >> (8 * i));
    }
    for (size_t off = 0; off < total; off += 64) {
        sha1_block(h, buf + off);
    }
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (unsigned char)(h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(h[i] >> 8);
        out[4 * i + 3] = (unsigned char)h[i];
    }
}

/* base64 of in[0, n) into out (4 * ceil(n / 3) + 1 bytes), NUL-terminated. */
static void
base64(const unsigned char *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n) {
            v |= (uint32_t)in[i + 1] << 8;
        }
        if (i + 2 < n) {
            v |= in[i + 2];
        }
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = '\0';
}

/* Sec-WebSocket-Accept for `key` (RFC 6455 §4.2.2 item 5.4) into out[29]. */
static void
accept_for(const char *key, char out[29])
{
    unsigned char buf[128];
    unsigned char digest[20];
    size_t k = strlen(key);
    memcpy(buf, key, k);
    memcpy(buf + k, WS_GUID, sizeof WS_GUID - 1);
    sha1(buf, k + sizeof WS_GUID - 1, digest);
    base64(digest, sizeof digest, out);
}

/* A fresh Sec-WebSocket-Key (16 bytes from the generator whose state is *rng, base64) into
 * key[25], and the Sec-WebSocket-Accept the server must answer it with into want[29]. */
static void
ws_key(uint64_t *rng, char key[25], char want[29])
{
    unsigned char raw[16];
    uint64_t a = xorshift64s(rng), b = xorshift64s(rng);
    memcpy(raw, &a, 8);
    memcpy(raw + 8, &b, 8);
    base64(raw, sizeof raw, key);
    accept_for(key, want);
}

/* The source address (network order) of the k-th source of many loopback connections,
 * 127.0.1.1 to 127.0.254.254 (k < 254 * 254), so that tens of thousands of connections to one
 * port do not exhaust one address's ephemeral ports. */
static inline uint32_t /* inline: ws_load.c does not use it */
loopback_source(long k)
{
    return htonl(0x7f000000u | (uint32_t)(1 + k / 254) << 8 | (uint32_t)(1 + k % 254));
}

/* Reads the header of a frame from the server at p (avail bytes, RFC 6455 §5.2): 1 with its
 * header length (bytes) in *hlen and its payload length (bytes) in *len; 0 when the header is not
 * all there yet; -1 with *why set for a header no server may send here (reserved bits, no
 * extension being negotiated; a mask, RFC 6455 §5.1). */
static inline int /* inline: scale_client.c does not use it */
ws_frame_head(const unsigned char *p, size_t avail, size_t *hlen, uint64_t *len, const char **why)
{
    if (avail < 2) {
        return 0;
    }
    if (p[0] & 0x70) {
        *why = "frame with reserved bits set (no extension was negotiated)";
        return -1;
    }
    if (p[1] & 0x80) {
        *why = "masked frame from the server (RFC 6455 §5.1)";
        return -1;
    }
    uint64_t n = p[1] & 0x7f;
    size_t h = 2;
    if (n == 126) {
        h = 4;
    }
    else if (n == 127) {
        h = 10;
    }
    if (avail < h) {
        return 0;
    }
    if (h == 4) {
        n = (uint64_t)p[2] << 8 | p[3];
    }
    else if (h == 10) {
        n = 0;
        for (int k = 0; k < 8; k++) {
            n = n << 8 | p[2 + k];
        }
    }
    *hlen = h;
    *len = n;
    return 1;
}

/* Raises RLIMIT_NOFILE's soft limit to the hard one, for `need` descriptors; 0, or 2 after a
 * line on stderr naming `prog` when the hard limit is below `need`. */
static inline int /* inline: ws_load.c does not use it */
raise_nofile(const char *prog, long need)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need) {
        fprintf(stderr, "%s: RLIMIT_NOFILE hard limit %lu < %ld: raise it first\n", prog,
                (unsigned long)rl.rlim_max, need);
        return 2;
    }
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    return 0;
}

/* A nonzero xorshift64* state from getrandom(2); a fixed odd constant if that fails. */
static inline uint64_t /* inline: ws_load.c does not use it */
random_seed(void)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed || !seed) {
        seed = 0x9e3779b97f4a7c15ULL;
    }
    return seed;
}

/* The value of header `name` (case-insensitive) in a response head (its first line skipped; the
 * head ends at a line that starts with CR), trimmed, into out[cap]; 1 when found, else 0. */
static int
header_value(const char *head, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    const char *line = strstr(head, "\r\n");
    while (line && line[2] != '\r') {
        line += 2;
        const char *eol = strstr(line, "\r\n");
        if (!eol) {
            break;
        }
        if ((size_t)(eol - line) > nlen && strncasecmp(line, name, nlen) == 0 &&
            line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (v < eol && (*v == ' ' || *v == '\t')) {
                v++;
            }
            const char *e = eol;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t')) {
                e--;
            }
            size_t len = (size_t)(e - v) < cap - 1 ? (size_t)(e - v) : cap - 1;
            memcpy(out, v, len);
            out[len] = '\0';
            return 1;
        }
        line = eol;
    }
    return 0;
}

#endif
