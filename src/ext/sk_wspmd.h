/* sk_wspmd.h — permessage-deflate (RFC 7692) for the WebSocket handler: the negotiation of the
 * client's offer and the per-connection zlib streams.
 *
 * Owns: parsing Sec-WebSocket-Extensions offers (RFC 7692 §5, §7.1) and choosing the first
 * acceptable permessage-deflate one, the response's extension value, inflating a received
 * message bounded by the size limit while it inflates (§7.2.2; a small frame that would inflate past
 * the limit fails before the memory is spent), deflating a message to send (§7.2.1), and the
 * context-takeover resets. Never: includes Python.h, performs I/O, or keeps global mutable state;
 * zlib is the system's (-lz).
 */
#ifndef SK_WSPMD_H
#define SK_WSPMD_H

#include <stddef.h>
#include <stdint.h>
#define ZLIB_CONST /* next_in is const: input is never written */
#include <zlib.h>

#include "sk_core.h"

/* The server's own zlib settings, smaller than RFC 7692's maximum (the websockets library's
 * server defaults, for the same reason: zlib's tables are kept for the connection's life with
 * context takeover). zlib's formula (zconf.h): deflate holds (1 << (windowBits + 2)) +
 * (1 << (memLevel + 9)) bytes, inflate 1 << windowBits bytes of window beside its ~7 KiB state.
 * - The compressor's LZ77 window: at most 12 bits (4 KiB) whatever was agreed. §7.1.2.1: the
 *   agreed server_max_window_bits is a maximum, and the client's decompressor takes any smaller
 *   window, so this is not announced.
 * - The compressor's memLevel 5 (zlib's default 8): its hash table and match buffers.
 *   Together 16 KiB + 16 KiB of tables instead of 128 KiB + 128 KiB at 15 bits and memLevel 8.
 * - The answer to a client_max_window_bits offer (§7.1.2.2, which lets the server answer a
 *   smaller value than offered, or a value when the offer had none): at most 12, so the inflater
 *   keeps a 4 KiB window instead of 32 KiB. A client that does not offer the parameter
 *   (Firefox) may use 15 bits: the server's inflater for it keeps 32 KiB. */
#define SK_PMD_SERVER_WINDOW_BITS 12
#define SK_PMD_SERVER_MEM_LEVEL 5
#define SK_PMD_CLIENT_WINDOW_BITS 12

/* The agreed parameters (RFC 7692 §7.1). */
typedef struct {
    uint8_t server_no_context_takeover; /* the server resets its compressor after each message */
    uint8_t client_no_context_takeover; /* the client resets its: the server resets its inflater */
    uint8_t server_max_window_bits;     /* 9..15: the most the server's LZ77 window may be (8 is
                                         * declined: zlib's raw deflate cannot use a 256-byte
                                         * window); it uses at most SK_PMD_SERVER_WINDOW_BITS */
    uint8_t server_max_window_bits_offered; /* the offer named server_max_window_bits: the
                                             * answer names it too (§7.1.2.1) */
    uint8_t client_max_window_bits;         /* the answer, 8..SK_PMD_CLIENT_WINDOW_BITS, when the
                                         * client offered the parameter (the offered value or
                                         * SK_PMD_CLIENT_WINDOW_BITS, the smaller), else 0 */
} sk_pmd_params_t;

/* Looks at one Sec-WebSocket-Extensions field value: 1 when it holds an acceptable
 * permessage-deflate offer (the first one; *out filled), 0 when not (an offer with an unknown or
 * repeated parameter or an invalid value is skipped, §7.1). */
int sk_pmd_negotiate(const char *value, size_t len, sk_pmd_params_t *out);

/* Writes the response's extension value for p into buf (NUL-terminated); returns its length.
 * cap must be at least SK_PMD_RESPONSE_MAX bytes. */
#define SK_PMD_RESPONSE_MAX 128
size_t sk_pmd_response(const sk_pmd_params_t *p, char *buf, size_t cap);

typedef struct {
    sk_pmd_params_t params;
    z_stream inflater;
    z_stream deflater;
    uint8_t inflater_ready; /* made on the first compressed message received */
    uint8_t deflater_ready; /* made on the first message sent */
} sk_pmd_t;

/* Zeroes z for params (the zlib streams are made when first needed). */
void sk_pmd_init(sk_pmd_t *z, const sk_pmd_params_t *params);
/* Frees the zlib streams. */
void sk_pmd_free(sk_pmd_t *z);

/* Inflates n bytes of a compressed message's payload, appending to out; final = 1 for the end of
 * the message (the 00 00 FF FF tail of §7.2.2 is added, and the inflater is reset with
 * client_no_context_takeover). max: bytes out may hold, 0 = unlimited. Returns 0; SK_ETOOLONG
 * (the message inflates past max: stopped there); SK_ESTATE (the data is not valid DEFLATE);
 * SK_ENOMEM. */
int sk_pmd_inflate(sk_pmd_t *z, const char *in, size_t n, int final, sk_buf_t *out, uint64_t max);

/* Appends the compressed payload of one whole message (§7.2.1: the 00 00 FF FF tail removed) to
 * out. Returns 0, SK_ENOMEM or SK_ESTATE (zlib failed). */
int sk_pmd_deflate(sk_pmd_t *z, const char *in, size_t n, sk_buf_t *out);

#endif
