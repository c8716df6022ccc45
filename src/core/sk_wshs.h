/* sk_wshs.h — the WebSocket opening handshake, server side (RFC 6455 §4.2): the byte-level part.
 *
 * Owns: recognising an upgrade request that asks for WebSocket, checking it against RFC 6455
 * §4.2.1 (which status refuses it: 400, or 426 for a version other than 13, §4.4), and computing
 * the Sec-WebSocket-Accept value (§4.2.2: base64 of the SHA-1 of the key and the RFC's GUID; the
 * SHA-1 here is skirr's own, FIPS 180-4 §6.1). Never: includes Python.h, performs I/O, allocates
 * or keeps global mutable state. Reads a parsed request head (sk_http.h) only through its fields.
 */
#ifndef SK_WSHS_H
#define SK_WSHS_H

#include <stddef.h>
#include <stdint.h>
#include "sk_http.h"

/* The Sec-WebSocket-Accept value's length: base64 of a 20-byte digest. */
#define SK_WS_ACCEPT_LEN 28

/* 1 if the request's Upgrade fields list the token "websocket" (any case): the client asks for a
 * WebSocket connection, so the request is a WebSocket handshake (valid or refused), never served
 * as plain HTTP. 0 for no Upgrade, another protocol (h2c, ...) or an HTTP/1.0 request (whose
 * Upgrade a server MUST ignore, RFC 9110 §7.8): served as HTTP, its content read as usual. */
int sk_ws_is_upgrade(const sk_parser_t *p);

typedef struct {
    const char *key; /* Sec-WebSocket-Key's value, inside the parser's head block */
    size_t key_len;  /* bytes (24 when valid) */
} sk_ws_handshake_t;

/* Checks a request for which sk_ws_is_upgrade() is 1 (RFC 6455 §4.2.1): GET, HTTP/1.1, no content
 * (no Transfer-Encoding, no Content-Length but 0: the switch follows the request message, RFC 9110
 * §7.8, so content would be read as frames), a Connection field listing "upgrade", one
 * Sec-WebSocket-Key that is base64 of 16 bytes, one Sec-WebSocket-Version. Returns 0 (valid; *hs
 * filled), 400 (malformed, or with content) or 426 (the version is not 13: answer with
 * Sec-WebSocket-Version: 13, §4.4). *reason: static text naming the failed rule. */
int sk_ws_handshake_check(const sk_parser_t *p, sk_ws_handshake_t *hs, const char **reason);

/* Writes the SK_WS_ACCEPT_LEN-byte Sec-WebSocket-Accept value for key[0..key_len) to out (not
 * NUL-terminated). */
void sk_ws_accept(const char *key, size_t key_len, char out[SK_WS_ACCEPT_LEN]);

/* SHA-1 (FIPS 180-4) of data[0..len) into digest. Not for security: the handshake's use only. */
void sk_sha1(const void *data, size_t len, uint8_t digest[20]);

#endif
