/* sk_ws.c — the WebSocket frame codec (RFC 6455 §5, §7.4, §8.1): client frames in, events out;
 * server frames out.
 *
 * Owns: the frame parser's state machine (one byte of header at a time, payload in runs), the
 * message rules (fragmentation, control frames between fragments, sizes), close payload checks,
 * incremental UTF-8 validation, and the server's frame headers and close frames.
 * Never: includes Python.h, performs I/O, allocates (but through sk_buf_append on the caller's
 * buffer), keeps global mutable state, or modifies input bytes it does not report as consumed.
 */
#include "sk_ws.h"

#include <assert.h>
#include <string.h>

enum {
    ST_HDR0 = 0, /* first header byte: FIN, RSV1-3, opcode */
    ST_HDR1,     /* second header byte: MASK, payload length (7 bits) */
    ST_LEN,      /* extended payload length, 2 or 8 bytes (need left) */
    ST_MASK,     /* masking key, 4 bytes (need left) */
    ST_PAYLOAD,  /* payload, frame_len - frame_pos bytes left */
    ST_CLOSED,   /* a Close frame was delivered: later bytes are ignored */
    ST_DEAD,     /* an error was delivered: it is returned for ever */
};

#define FIN_BIT 0x80u
#define RSV1_BIT 0x40u
#define RSV23_BITS 0x30u
#define OPCODE_BITS 0x0Fu
#define MASK_BIT 0x80u
#define LEN7_BITS 0x7Fu
#define LEN7_16 126u /* the 7-bit length that announces a 16-bit length */
#define LEN7_64 127u /* ... and a 64-bit one */
#define CLOSE_CODE_BYTES 2u
#define MAX_CLOSE_REASON (SK_WS_MAX_CONTROL - CLOSE_CODE_BYTES)

static int
is_control(unsigned op)
{
    return (op & 0x8u) != 0;
}

static int
is_known(unsigned op)
{
    return op == SK_WS_CONT || op == SK_WS_TEXT || op == SK_WS_BINARY || op == SK_WS_CLOSE ||
           op == SK_WS_PING || op == SK_WS_PONG;
}

void
sk_ws_parser_init(sk_ws_parser_t *p, const sk_ws_limits_t *limits)
{
    memset(p, 0, sizeof(*p));
    p->limits = *limits;
    p->state = ST_HDR0;
}

int
sk_ws_parser_idle(const sk_ws_parser_t *p)
{
    return p->state == ST_HDR0 && p->msg_opcode == 0;
}

int
sk_ws_close_code_valid(int code)
{
    /* 1004-1006 and 1015 are reserved; 1012-1014 are registered (IANA, §11.7); 1016-2999 are for
     * future revisions of the protocol; 3000-4999 for libraries and applications (§7.4.2). */
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

/* Advances u over s[0..n); returns how many bytes keep the text valid so far (n when all do).
 * The byte at the returned offset (if < n) is the first that no valid UTF-8 text can contain
 * after what came before: the earliest point a failure can be known (RFC 3629 §4's table). */
static size_t
utf8_scan(sk_ws_utf8_t *u, const unsigned char *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        unsigned c = s[i];

        if (u->need > 0) {
            if (c < u->lo || c > u->hi)
                break;
            u->need--;
            u->lo = 0x80;
            u->hi = 0xBF;
            i++;
            continue;
        }
        if (c < 0x80) {
            uint64_t w;

            /* ASCII runs, eight bytes at a time */
            i++;
            while (n - i >= sizeof(w)) {
                memcpy(&w, s + i, sizeof(w));
                if ((w & 0x8080808080808080ULL) != 0)
                    break;
                i += sizeof(w);
            }
            continue;
        }
        if (c < 0xC2 || c > 0xF4) /* continuation, overlong 2-byte lead, or above U+10FFFF */
            break;
        u->lo = 0x80;
        u->hi = 0xBF;
        if (c < 0xE0) {
            u->need = 1;
        }
        else if (c < 0xF0) {
            u->need = 2;
            if (c == 0xE0)
                u->lo = 0xA0; /* overlong */
            else if (c == 0xED)
                u->hi = 0x9F; /* UTF-16 surrogates */
        }
        else {
            u->need = 3;
            if (c == 0xF0)
                u->lo = 0x90; /* overlong */
            else if (c == 0xF4)
                u->hi = 0x8F; /* above U+10FFFF */
        }
        i++;
    }
    return i;
}

int
sk_ws_utf8_valid(const char *s, size_t n)
{
    sk_ws_utf8_t u = {0, 0x80, 0xBF};

    return utf8_scan(&u, (const unsigned char *)s, n) == n && u.need == 0;
}

/* ---- parser ---------------------------------------------------------------------------------- */

/* XORs n bytes at s with the masking key, starting at payload offset pos (§5.3). Involutive: a
 * second call restores the bytes. */
static void
unmask(char *s, size_t n, const uint8_t mask[4], uint64_t pos)
{
    uint8_t m8[8];
    size_t i = 0;

    for (size_t k = 0; k < sizeof(m8); k++)
        m8[k] = mask[(pos + k) & 3];
    for (; n - i >= sizeof(m8); i += sizeof(m8)) {
        uint64_t w, m;

        memcpy(&w, s + i, sizeof(w));
        memcpy(&m, m8, sizeof(m));
        w ^= m;
        memcpy(s + i, &w, sizeof(w));
    }
    for (; i < n; i++)
        s[i] = (char)(s[i] ^ m8[i & 7]);
}

/* The Close frame's payload, complete in p->ctl: the event, or 0 with *why set (§5.5.1, §7.4). */
static int
close_event(sk_ws_parser_t *p, sk_ws_event_t *ev, int *code, const char **why)
{
    const unsigned char *c = (const unsigned char *)p->ctl;
    int rc = -1;

    if (p->ctl_len == 0) {
        ev->code = SK_WS_NO_STATUS;
    }
    else if (p->ctl_len < CLOSE_CODE_BYTES) {
        *code = SK_WS_PROTOCOL_ERROR;
        *why = "close frame payload of 1 byte (RFC 6455 §5.5.1: empty or a 2-byte code first)";
        goto done;
    }
    else {
        ev->code = c[0] << 8 | c[1];
        ev->data = p->ctl + CLOSE_CODE_BYTES;
        ev->len = p->ctl_len - CLOSE_CODE_BYTES;
        if (!sk_ws_close_code_valid(ev->code)) {
            *code = SK_WS_PROTOCOL_ERROR;
            *why = "close code not allowed on the wire (RFC 6455 §7.4.1, §7.4.2)";
            goto done;
        }
        if (!sk_ws_utf8_valid(ev->data, ev->len)) {
            *code = SK_WS_INVALID_DATA;
            *why = "close reason is not UTF-8 (RFC 6455 §5.5.1)";
            goto done;
        }
    }
    if (ev->data == NULL)
        ev->data = p->ctl;
    ev->type = SK_WS_EV_CLOSE;
    p->state = ST_CLOSED;
    rc = 0;
done:
    return rc;
}

/* The current frame's header is complete: starts its payload. Returns 1 if that starts a data
 * message (ev filled), else 0. */
static int
frame_begins(sk_ws_parser_t *p, sk_ws_event_t *ev)
{
    p->state = ST_PAYLOAD;
    p->frame_pos = 0;
    p->ctl_len = 0;
    if (is_control(p->opcode) || p->opcode == SK_WS_CONT)
        return 0;
    assert(p->msg_opcode == 0 && p->msg_len == 0 && p->utf8.need == 0);
    p->msg_opcode = p->opcode;
    ev->type = SK_WS_EV_MESSAGE;
    ev->opcode = p->opcode;
    ev->compressed = p->msg_compressed;
    return 1;
}

/* 1 if the current data frame's payload length, now known, takes its message past max_message,
 * or, in a compressed message when max_compressed is set, is itself over max_compressed. */
static int
too_big(const sk_ws_parser_t *p)
{
    if (is_control(p->opcode) || p->limits.max_message == 0) {
        return 0;
    }
    if (p->msg_compressed && p->limits.max_compressed != 0) {
        return p->frame_len > p->limits.max_compressed;
    }
    return p->frame_len > p->limits.max_message - p->msg_len;
}

size_t
sk_ws_parser_execute(sk_ws_parser_t *p, char *data, size_t len, sk_ws_event_t *ev)
{
    const unsigned char *u = (const unsigned char *)data;
    size_t pos = 0;
    int code = SK_WS_PROTOCOL_ERROR;
    const char *why = NULL;

    memset(ev, 0, sizeof(*ev));
    if (p->state == ST_DEAD) {
        code = p->err_code;
        why = p->err_reason;
        goto fail;
    }
    if (p->state == ST_CLOSED)
        return len;
    for (;;) {
        unsigned b;

        if (p->state == ST_PAYLOAD) {
            uint64_t left = p->frame_len - p->frame_pos;
            size_t n = left < len - pos ? (size_t)left : len - pos;

            if (is_control(p->opcode)) {
                assert(p->frame_len <= SK_WS_MAX_CONTROL && p->ctl_len == p->frame_pos);
                if (n > 0) {
                    memcpy(p->ctl + p->ctl_len, data + pos, n);
                    unmask(p->ctl + p->ctl_len, n, p->mask, p->frame_pos);
                }
                p->ctl_len = (uint8_t)(p->ctl_len + n);
                p->frame_pos += n;
                pos += n;
                if (p->frame_pos < p->frame_len)
                    break; /* need more */
                p->state = ST_HDR0;
                if (p->opcode == SK_WS_CLOSE) {
                    if (close_event(p, ev, &code, &why) != 0)
                        goto fail;
                    return pos;
                }
                ev->type = p->opcode == SK_WS_PING ? SK_WS_EV_PING : SK_WS_EV_PONG;
                ev->data = p->ctl;
                ev->len = p->ctl_len;
                return pos;
            }
            if (left == 0) {
                /* a data frame's payload is all delivered */
                p->state = ST_HDR0;
                if (!p->fin)
                    continue;
                if (p->utf8.need != 0) {
                    code = SK_WS_INVALID_DATA;
                    why = "text message ends inside a UTF-8 sequence (RFC 6455 §8.1)";
                    goto fail;
                }
                p->msg_opcode = 0;
                p->msg_compressed = 0;
                p->msg_len = 0;
                ev->type = SK_WS_EV_MESSAGE_END;
                return pos;
            }
            if (n == 0)
                break; /* need more */
            unmask(data + pos, n, p->mask, p->frame_pos);
            if (p->msg_opcode == SK_WS_TEXT && !p->msg_compressed) {
                size_t ok = utf8_scan(&p->utf8, u + pos, n);

                if (ok < n) /* only consumed bytes stay modified */
                    unmask(data + pos + ok, n - ok, p->mask, p->frame_pos + ok);
                n = ok;
                if (n == 0) {
                    code = SK_WS_INVALID_DATA;
                    why = "text message is not UTF-8 (RFC 6455 §8.1)";
                    goto fail;
                }
            }
            p->frame_pos += n;
            p->msg_len += n;
            ev->type = SK_WS_EV_DATA;
            ev->data = data + pos;
            ev->len = n;
            return pos + n;
        }
        if (pos == len)
            break;
        b = u[pos];
        switch (p->state) {
        case ST_HDR0:
            p->fin = (b & FIN_BIT) != 0;
            p->opcode = (uint8_t)(b & OPCODE_BITS);
            if (!is_known(p->opcode)) {
                why = "reserved opcode (RFC 6455 §5.2)";
                goto fail;
            }
            if ((b & RSV23_BITS) != 0) {
                why = "RSV2 or RSV3 set, no extension negotiated (RFC 6455 §5.2)";
                goto fail;
            }
            if ((b & RSV1_BIT) != 0 &&
                (!p->limits.allow_rsv1 || is_control(p->opcode) || p->opcode == SK_WS_CONT)) {
                why = p->limits.allow_rsv1
                          ? "RSV1 on a control or continuation frame (RFC 7692 §6.1)"
                          : "RSV1 set, no extension negotiated (RFC 6455 §5.2)";
                goto fail;
            }
            if (is_control(p->opcode) && !p->fin) {
                why = "fragmented control frame (RFC 6455 §5.5)";
                goto fail;
            }
            if (p->opcode == SK_WS_CONT && p->msg_opcode == 0) {
                why = "continuation frame without a message in progress (RFC 6455 §5.4)";
                goto fail;
            }
            if ((p->opcode == SK_WS_TEXT || p->opcode == SK_WS_BINARY) && p->msg_opcode != 0) {
                why = "new data frame inside a fragmented message (RFC 6455 §5.4)";
                goto fail;
            }
            if (p->opcode == SK_WS_TEXT || p->opcode == SK_WS_BINARY)
                p->msg_compressed = (b & RSV1_BIT) != 0;
            p->state = ST_HDR1;
            pos++;
            break;
        case ST_HDR1:
            if ((b & MASK_BIT) == 0) {
                why = "client frame not masked (RFC 6455 §5.1)";
                goto fail;
            }
            b &= LEN7_BITS;
            if (is_control(p->opcode) && b > SK_WS_MAX_CONTROL) {
                why = "control frame payload over 125 bytes (RFC 6455 §5.5)";
                goto fail;
            }
            p->frame_len = b < LEN7_16 ? b : 0;
            p->need = b == LEN7_16 ? 2 : b == LEN7_64 ? 8 : 0;
            p->state = p->need ? ST_LEN : ST_MASK;
            if (p->state == ST_MASK)
                p->need = sizeof(p->mask);
            if (p->state == ST_MASK && too_big(p))
                goto fail_too_big;
            pos++;
            break;
        case ST_LEN:
            if (p->need == 8 && (b & 0x80u) != 0) {
                why = "64-bit payload length with the most significant bit set (RFC 6455 §5.2)";
                goto fail;
            }
            p->frame_len = p->frame_len << 8 | b;
            if (--p->need > 0) {
                pos++;
                break;
            }
            /* the shortest encoding is a sender's MUST (§5.2); longer ones are accepted */
            p->state = ST_MASK;
            p->need = sizeof(p->mask);
            if (too_big(p))
                goto fail_too_big;
            pos++;
            break;
        case ST_MASK:
            p->mask[sizeof(p->mask) - p->need] = (uint8_t)b;
            pos++;
            if (--p->need > 0)
                break;
            if (frame_begins(p, ev) > 0)
                return pos;
            break;
        default:
            assert(0 && "unreachable parser state");
            why = "internal: unreachable parser state";
            goto fail;
        }
    }
    ev->type = SK_WS_EV_NONE;
    assert(pos == len);
    return pos;

fail_too_big:
    code = SK_WS_TOO_BIG;
    why = "message larger than max_message (RFC 6455 §7.4.1, 1009)";
fail:
    assert(why != NULL);
    p->state = ST_DEAD;
    p->err_code = code;
    p->err_reason = why;
    ev->type = SK_WS_EV_ERROR;
    ev->code = code;
    ev->reason = why;
    ev->data = NULL;
    ev->len = 0;
    return pos;
}

/* ---- serializer ------------------------------------------------------------------------------ */

int
sk_ws_frame_header(sk_buf_t *out, int fin, int opcode, int rsv1, uint64_t len)
{
    unsigned char h[SK_WS_MAX_HEADER];
    size_t n = 0;
    int rc = SK_ESTATE;

    if ((fin != 0 && fin != 1) || (rsv1 != 0 && rsv1 != 1) || opcode < 0 ||
        !is_known((unsigned)opcode) || len > (uint64_t)INT64_MAX)
        goto done; /* §5.2: the 64-bit length's most significant bit is 0 */
    if (is_control((unsigned)opcode) && (!fin || len > SK_WS_MAX_CONTROL))
        goto done; /* §5.5 */
    if (rsv1 && (is_control((unsigned)opcode) || opcode == SK_WS_CONT))
        goto done; /* RFC 7692 §6.1 */
    h[n++] = (unsigned char)((fin ? FIN_BIT : 0) | (rsv1 ? RSV1_BIT : 0) | (unsigned)opcode);
    if (len < LEN7_16) {
        h[n++] = (unsigned char)len;
    }
    else if (len <= UINT16_MAX) {
        h[n++] = LEN7_16;
        h[n++] = (unsigned char)(len >> 8);
        h[n++] = (unsigned char)len;
    }
    else {
        h[n++] = LEN7_64;
        for (int shift = 56; shift >= 0; shift -= 8)
            h[n++] = (unsigned char)(len >> shift);
    }
    assert(n <= SK_WS_MAX_HEADER - sizeof(((sk_ws_parser_t *)0)->mask));
    rc = sk_buf_append(out, h, n);
done:
    return rc;
}

int
sk_ws_frame(sk_buf_t *out, int fin, int opcode, const void *payload, size_t len)
{
    int rc = SK_ENOMEM;

    /* room for both first, so a failure appends nothing */
    if (len > SIZE_MAX - SK_WS_MAX_HEADER || sk_buf_reserve(out, SK_WS_MAX_HEADER + len) != 0)
        goto done;
    rc = sk_ws_frame_header(out, fin, opcode, 0, len);
    if (rc != 0)
        goto done;
    if (len > 0)
        rc = sk_buf_append(out, payload, len);
    assert(rc == 0); /* the room was reserved above */
done:
    return rc;
}

int
sk_ws_close_frame(sk_buf_t *out, int code, const char *reason, size_t reason_len)
{
    char payload[SK_WS_MAX_CONTROL];
    size_t n = 0;
    int rc = SK_ESTATE;

    if (code != 0 && !sk_ws_close_code_valid(code))
        goto done; /* §7.4.1: 1005, 1006, 1015 are never sent */
    if (reason_len > MAX_CLOSE_REASON || (code == 0 && reason_len > 0))
        goto done; /* §5.5: control payload <= 125 bytes; §5.5.1: a reason follows a code */
    if (reason_len > 0 && !sk_ws_utf8_valid(reason, reason_len))
        goto done; /* §5.5.1 */
    if (code != 0) {
        payload[n++] = (char)(code >> 8);
        payload[n++] = (char)(code & 0xFF);
        if (reason_len > 0)
            memcpy(payload + n, reason, reason_len);
        n += reason_len;
    }
    rc = sk_ws_frame(out, 1, SK_WS_CLOSE, payload, n);
done:
    return rc;
}
