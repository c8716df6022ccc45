/* sk_wshs.c — the WebSocket opening handshake's checks and Sec-WebSocket-Accept (see sk_wshs.h).
 * Never: includes Python.h, performs I/O or allocates.
 */
#include "sk_wshs.h"

#include <string.h>

#include "sk_token.h"

/* RFC 6455 §1.3: the GUID appended to the client's key. */
static const char GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static uint32_t
rol(uint32_t x, int n)
{
    return (x << n) | (x >> (32 - n));
}

static void
sha1_block(uint32_t h[5], const uint8_t *b)
{
    /* FIPS 180-4 §6.1.2 for one 64-byte block. */
    uint32_t w[80];
    for (int i = 0; i < 16; i++) {
        w[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 |
               (uint32_t)b[4 * i + 2] << 8 | (uint32_t)b[4 * i + 3];
    }
    for (int i = 16; i < 80; i++) {
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    }
    uint32_t a = h[0], bb = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (bb & c) | (~bb & d);
            k = 0x5A827999u;
        }
        else if (i < 40) {
            f = bb ^ c ^ d;
            k = 0x6ED9EBA1u;
        }
        else if (i < 60) {
            f = (bb & c) | (bb & d) | (c & d);
            k = 0x8F1BBCDCu;
        }
        else {
            f = bb ^ c ^ d;
            k = 0xCA62C1D6u;
        }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(bb, 30);
        bb = a;
        a = t;
    }
    h[0] += a;
    h[1] += bb;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void
sk_sha1(const void *data, size_t len, uint8_t digest[20])
{
    uint32_t h[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
    const uint8_t *p = data;
    uint8_t block[64];
    size_t full = len / 64 * 64;
    for (size_t i = 0; i < full; i += 64) {
        sha1_block(h, p + i);
    }
    /* Padding (§5.1.1): 0x80, zeros, then the length in bits as 64-bit big-endian. */
    size_t rest = len - full;
    memset(block, 0, sizeof(block));
    if (rest > 0) {
        memcpy(block, p + full, rest);
    }
    block[rest] = 0x80;
    if (rest >= 56) {
        sha1_block(h, block);
        memset(block, 0, sizeof(block));
    }
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) {
        block[63 - i] = (uint8_t)(bits >> (8 * i));
    }
    sha1_block(h, block);
    for (int i = 0; i < 5; i++) {
        digest[4 * i] = (uint8_t)(h[i] >> 24);
        digest[4 * i + 1] = (uint8_t)(h[i] >> 16);
        digest[4 * i + 2] = (uint8_t)(h[i] >> 8);
        digest[4 * i + 3] = (uint8_t)h[i];
    }
}

void
sk_ws_accept(const char *key, size_t key_len, char out[SK_WS_ACCEPT_LEN])
{
    uint8_t buf[64 + sizeof(GUID)];
    uint8_t d[21] = {0}; /* the digest and one zero byte, so the last group reads 3 bytes */
    /* A valid key is 24 bytes; a longer one is never passed (sk_ws_handshake_check). */
    if (key_len > 64) {
        key_len = 64;
    }
    memcpy(buf, key, key_len);
    memcpy(buf + key_len, GUID, sizeof(GUID) - 1);
    sk_sha1(buf, key_len + sizeof(GUID) - 1, d);
    for (int i = 0, o = 0; i < 21; i += 3, o += 4) {
        uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
        out[o] = B64[v >> 18 & 63];
        out[o + 1] = B64[v >> 12 & 63];
        out[o + 2] = B64[v >> 6 & 63];
        out[o + 3] = (i + 2 < 20) ? B64[v & 63] : '=';
    }
}

static int
b64_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/';
}

static int
key_valid(const char *k, size_t n)
{
    /* base64 (RFC 4648 §4, padded) of exactly 16 bytes: 22 alphabet characters then "==". */
    if (n != 24 || k[22] != '=' || k[23] != '=') {
        return 0;
    }
    for (size_t i = 0; i < 22; i++) {
        if (!b64_char(k[i])) {
            return 0;
        }
    }
    return 1;
}

int
sk_ws_is_upgrade(const sk_parser_t *p)
{
    if (p->http_major == 1 && p->http_minor == 0) {
        return 0; /* RFC 9110 §7.8: an HTTP/1.0 request's Upgrade is ignored */
    }
    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];
        if (SK_TOKEN_IEQ(sk_parser_ptr(p, f->name), f->name.len, "upgrade") &&
            SK_LIST_HAS_TOKEN(sk_parser_ptr(p, f->value), f->value.len, "websocket")) {
            return 1;
        }
    }
    return 0;
}

int
sk_ws_handshake_check(const sk_parser_t *p, sk_ws_handshake_t *hs, const char **reason)
{
    int connection_upgrade = 0, keys = 0, versions = 0, transfer_coded = 0;
    const char *version = NULL;
    size_t version_len = 0;
    hs->key = NULL;
    hs->key_len = 0;
    for (uint32_t i = 0; i < p->nfields; i++) {
        const sk_field_t *f = &p->fields[i];
        const char *name = sk_parser_ptr(p, f->name);
        const char *value = sk_parser_ptr(p, f->value);
        if (SK_TOKEN_IEQ(name, f->name.len, "connection")) {
            connection_upgrade |= SK_LIST_HAS_TOKEN(value, f->value.len, "upgrade");
        }
        else if (SK_TOKEN_IEQ(name, f->name.len, "sec-websocket-key")) {
            keys++;
            hs->key = value;
            hs->key_len = f->value.len;
        }
        else if (SK_TOKEN_IEQ(name, f->name.len, "sec-websocket-version")) {
            versions++;
            version = value;
            version_len = f->value.len;
        }
        else if (SK_TOKEN_IEQ(name, f->name.len, "transfer-encoding")) {
            transfer_coded = 1;
        }
    }
    if (p->method != HTTP_GET) {
        *reason = "WebSocket handshake: method is not GET (RFC 6455 §4.2.1)";
        return 400;
    }
    if (p->http_minor != 1) {
        *reason = "WebSocket handshake: not HTTP/1.1 (RFC 6455 §4.2.1)";
        return 400;
    }
    if (transfer_coded || p->chunked || (p->has_content_length && p->content_length > 0)) {
        /* The protocol switch takes effect right after the request message (RFC 9110 §7.8): bytes
         * of content would be read as the first frames (request smuggling). */
        *reason = "WebSocket handshake: the request has content (RFC 9110 §7.8)";
        return 400;
    }
    if (!connection_upgrade) {
        *reason = "WebSocket handshake: Connection does not list upgrade (RFC 6455 §4.2.1)";
        return 400;
    }
    if (keys != 1 || !key_valid(hs->key, hs->key_len)) {
        *reason = "WebSocket handshake: Sec-WebSocket-Key is not base64 of 16 bytes "
                  "(RFC 6455 §4.2.1)";
        return 400;
    }
    if (versions == 0) {
        *reason = "WebSocket handshake: no Sec-WebSocket-Version (RFC 6455 §4.2.1)";
        return 400;
    }
    if (versions != 1 || version_len != 2 || memcmp(version, "13", 2) != 0) {
        *reason = "WebSocket handshake: Sec-WebSocket-Version is not 13 (RFC 6455 §4.4)";
        return 426;
    }
    *reason = NULL;
    return 0;
}
