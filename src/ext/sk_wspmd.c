/* sk_wspmd.c — permessage-deflate (RFC 7692): negotiation and zlib streams (see sk_wspmd.h).
 * Never: includes Python.h or performs I/O.
 */
#include "sk_wspmd.h"

#include <stdio.h>
#include <string.h>

#include "sk_token.h"

#define CHUNK 16384 /* bytes of output room made per zlib call */

static const char TAIL[4] = {0x00, 0x00, (char)0xff, (char)0xff}; /* RFC 7692 §7.2.1 */

static int
window_bits(const char *v, size_t n, int lo)
{
    /* A max_window_bits value, optionally quoted (§7.1.2): lo..15, else -1. */
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    if (n == 1 && v[0] >= '8' && v[0] <= '9') {
        return v[0] - '0' >= lo ? v[0] - '0' : -1;
    }
    if (n == 2 && v[0] == '1' && v[1] >= '0' && v[1] <= '5') {
        return 10 + (v[1] - '0');
    }
    return -1;
}

static int
offer(const char *s, size_t n, sk_pmd_params_t *out)
{
    /* One offer: "permessage-deflate" then ";"-separated parameters. 1 if acceptable. */
    size_t i = 0, start;
    int seen_snct = 0, seen_cnct = 0, seen_smwb = 0, seen_cmwb = 0;
    memset(out, 0, sizeof(*out));
    out->server_max_window_bits = 15;
    while (i < n && s[i] != ';') {
        i++;
    }
    {
        const char *name = s;
        size_t len = i;
        while (len > 0 && (name[len - 1] == ' ' || name[len - 1] == '\t')) {
            len--;
        }
        while (len > 0 && (*name == ' ' || *name == '\t')) {
            name++;
            len--;
        }
        if (!SK_TOKEN_IEQ(name, len, "permessage-deflate")) {
            return 0;
        }
    }
    while (i < n) {
        i++; /* past ';' */
        start = i;
        while (i < n && s[i] != ';') {
            i++;
        }
        const char *p = s + start;
        size_t len = i - start;
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) {
            len--;
        }
        const char *eq = memchr(p, '=', len);
        size_t nlen = eq ? (size_t)(eq - p) : len;
        while (nlen > 0 && (p[nlen - 1] == ' ' || p[nlen - 1] == '\t')) {
            nlen--;
        }
        const char *v = eq ? eq + 1 : NULL;
        size_t vlen = eq ? (size_t)(p + len - v) : 0;
        while (v != NULL && vlen > 0 && (*v == ' ' || *v == '\t')) {
            v++;
            vlen--;
        }
        if (SK_TOKEN_IEQ(p, nlen, "server_no_context_takeover")) {
            if (seen_snct++ || v != NULL) {
                return 0;
            }
            out->server_no_context_takeover = 1;
        }
        else if (SK_TOKEN_IEQ(p, nlen, "client_no_context_takeover")) {
            if (seen_cnct++ || v != NULL) {
                return 0;
            }
            out->client_no_context_takeover = 1;
        }
        else if (SK_TOKEN_IEQ(p, nlen, "server_max_window_bits")) {
            int bits = v ? window_bits(v, vlen, 9) : -1; /* 8: declined (zlib) */
            if (seen_smwb++ || bits < 0) {
                return 0;
            }
            out->server_max_window_bits = (uint8_t)bits;
            out->server_max_window_bits_offered = 1;
        }
        else if (SK_TOKEN_IEQ(p, nlen, "client_max_window_bits")) {
            int bits = v ? window_bits(v, vlen, 8) : 15; /* no value: the client takes any */
            if (seen_cmwb++ || bits < 0) {
                return 0;
            }
            /* §7.1.2.2: the answer may be smaller than the offer: the inflater's window */
            out->client_max_window_bits =
                (uint8_t)(bits < SK_PMD_CLIENT_WINDOW_BITS ? bits : SK_PMD_CLIENT_WINDOW_BITS);
        }
        else {
            return 0; /* §7.1: an unknown parameter: decline this offer */
        }
    }
    return 1;
}

int
sk_pmd_negotiate(const char *value, size_t len, sk_pmd_params_t *out)
{
    sk_list_iter_t it;
    const char *e;
    size_t elen;
    sk_list_init(&it, value, len);
    while (sk_list_next(&it, &e, &elen) == 1) {
        if (offer(e, elen, out)) {
            return 1;
        }
    }
    return 0;
}

size_t
sk_pmd_response(const sk_pmd_params_t *p, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "permessage-deflate%s%s",
                     p->server_no_context_takeover ? "; server_no_context_takeover" : "",
                     p->client_no_context_takeover ? "; client_no_context_takeover" : "");
    /* §7.1.2.1: an offer that names server_max_window_bits is accepted by naming it, with the
     * same value or a smaller one (the same: the compressor's own window is no larger) */
    if (n > 0 && (size_t)n < cap && p->server_max_window_bits_offered) {
        n += snprintf(buf + n, cap - (size_t)n, "; server_max_window_bits=%d",
                      p->server_max_window_bits);
    }
    if (n > 0 && (size_t)n < cap && p->client_max_window_bits > 0) {
        n += snprintf(buf + n, cap - (size_t)n, "; client_max_window_bits=%d",
                      p->client_max_window_bits);
    }
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

void
sk_pmd_init(sk_pmd_t *z, const sk_pmd_params_t *params)
{
    memset(z, 0, sizeof(*z));
    z->params = *params;
}

void
sk_pmd_free(sk_pmd_t *z)
{
    if (z->inflater_ready) {
        inflateEnd(&z->inflater);
    }
    if (z->deflater_ready) {
        deflateEnd(&z->deflater);
    }
    z->inflater_ready = z->deflater_ready = 0;
}

static int
inflate_some(sk_pmd_t *z, const char *in, size_t n, sk_buf_t *out, uint64_t max)
{
    z_stream *s = &z->inflater;
    s->next_in = (const Bytef *)in;
    s->avail_in = (uInt)n;
    for (;;) {
        if (sk_buf_reserve(out, CHUNK) < 0) {
            return SK_ENOMEM;
        }
        size_t room = out->cap - out->end;
        if (max > 0 && sk_buf_len(out) + room > max + 1) {
            room = (size_t)(max + 1 - sk_buf_len(out)); /* one byte past max shows the excess */
        }
        s->next_out = (Bytef *)(out->data + out->end);
        s->avail_out = (uInt)room;
        int rc = inflate(s, Z_SYNC_FLUSH);
        out->end += room - s->avail_out;
        if (max > 0 && sk_buf_len(out) > max) {
            return SK_ETOOLONG;
        }
        if (rc == Z_STREAM_END) {
            /* a final block (BFINAL) ended the stream: what follows starts a new one */
            if (inflateReset(s) != Z_OK) {
                return SK_ESTATE;
            }
            if (s->avail_in == 0) {
                return 0;
            }
            continue;
        }
        if (rc == Z_BUF_ERROR || (rc == Z_OK && s->avail_in == 0 && s->avail_out > 0)) {
            return 0; /* all input used (Z_BUF_ERROR: no progress possible without more) */
        }
        if (rc != Z_OK) {
            return SK_ESTATE;
        }
    }
}

int
sk_pmd_inflate(sk_pmd_t *z, const char *in, size_t n, int final, sk_buf_t *out, uint64_t max)
{
    if (!z->inflater_ready) {
        memset(&z->inflater, 0, sizeof(z->inflater));
        /* The window the client agreed to compress with (§7.1.2.2), else RFC 7692's 15 bits;
         * at least 9: a zlib client cannot deflate raw with 8 and uses 9 when it agreed to 8
         * (a larger inflater window reads any smaller one: 512 bytes instead of 256). */
        int bits = z->params.client_max_window_bits;
        bits = bits == 0 ? 15 : bits < 9 ? 9 : bits;
        if (inflateInit2(&z->inflater, -bits) != Z_OK) {
            return SK_ENOMEM;
        }
        z->inflater_ready = 1;
    }
    int rc = n > 0 ? inflate_some(z, in, n, out, max) : 0;
    if (rc == 0 && final) {
        rc = inflate_some(z, TAIL, sizeof(TAIL), out, max);
        if (rc == 0 && z->params.client_no_context_takeover && inflateReset(&z->inflater) != Z_OK) {
            rc = SK_ESTATE;
        }
    }
    return rc;
}

int
sk_pmd_deflate(sk_pmd_t *z, const char *in, size_t n, sk_buf_t *out)
{
    z_stream *s = &z->deflater;
    if (!z->deflater_ready) {
        memset(s, 0, sizeof(*s));
        /* A window no larger than agreed (§7.1.2.1) and no larger than SK_PMD_SERVER_WINDOW_BITS:
         * the client's inflater reads any smaller one (sk_wspmd.h: bytes kept per connection) */
        int bits = z->params.server_max_window_bits;
        bits = bits < SK_PMD_SERVER_WINDOW_BITS ? bits : SK_PMD_SERVER_WINDOW_BITS;
        if (deflateInit2(s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -bits, SK_PMD_SERVER_MEM_LEVEL,
                         Z_DEFAULT_STRATEGY) != Z_OK) {
            return SK_ENOMEM;
        }
        z->deflater_ready = 1;
    }
    size_t before = sk_buf_len(out);
    s->next_in = (const Bytef *)in;
    s->avail_in = (uInt)n;
    do {
        if (sk_buf_reserve(out, CHUNK) < 0) {
            return SK_ENOMEM;
        }
        size_t room = out->cap - out->end;
        s->next_out = (Bytef *)(out->data + out->end);
        s->avail_out = (uInt)room;
        int rc = deflate(s, Z_SYNC_FLUSH);
        out->end += room - s->avail_out;
        if (rc != Z_OK && rc != Z_BUF_ERROR) {
            return SK_ESTATE;
        }
    } while (s->avail_out == 0 || s->avail_in > 0);
    size_t len = sk_buf_len(out) - before;
    if (len >= sizeof(TAIL) &&
        memcmp(out->data + out->end - sizeof(TAIL), TAIL, sizeof(TAIL)) == 0) {
        out->end -= sizeof(TAIL);
    }
    if (sk_buf_len(out) == before && sk_buf_append(out, "", 1) < 0) {
        /* zlib flushed nothing (no input right after a flush): §7.2.3.6's empty message, one
         * 0x00 byte (an empty stored block's header; the peer's tail completes it) */
        return SK_ENOMEM;
    }
    if (z->params.server_no_context_takeover && deflateReset(s) != Z_OK) {
        return SK_ESTATE;
    }
    return 0;
}
