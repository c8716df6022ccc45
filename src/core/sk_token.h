/* sk_token.h — the RFC 9110 §5.6 tokenizers that both the request parser (sk_http.c) and the
 * response serializer (sk_resp.c) need: tchar and token, optional whitespace, case-insensitive
 * comparison of a token with a literal, the comma-separated list, and the DIGIT and ALPHA core
 * rules of RFC 5234 they are built from.
 *
 * Owns: these byte-level rules, written once; each function names the grammar rule it implements.
 * Never: includes Python.h, performs I/O, allocates, keeps state between calls, or knows a field's
 * meaning (which names or tokens matter is the caller's business).
 *
 * The per-byte predicates and the comparison are static inline: the parser calls them for every
 * method byte and every field name, and a call across files would cost more than the test.
 */
#ifndef SK_TOKEN_H
#define SK_TOKEN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* RFC 5234 Appendix B.1: DIGIT = %x30-39. 1 if c is a decimal digit, else 0. */
static inline int
sk_is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* RFC 5234 Appendix B.1: ALPHA = %x41-5A / %x61-7A. 1 if c is an ASCII letter, else 0. */
static inline int
sk_is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* RFC 9110 §5.6.2:
 *   tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" /
 *           "~" / DIGIT / ALPHA
 * 1 if c is a tchar, else 0. */
static inline int
sk_is_tchar(unsigned char c)
{
    /* Bit c of the 256-bit set of those 77 bytes (a lookup, not a test per class: field names
     * are checked byte by byte in every response). */
    static const uint64_t set[4] = {0x03ff6cfa00000000u, 0x57ffffffc7fffffeu, 0, 0};

    return (int)((set[c >> 6] >> (c & 63)) & 1);
}

/* RFC 9110 §5.6.2: token = 1*tchar.
 * Bytes of the longest run of tchar at the start of s[0..n) (0 when s[0] is not a tchar or n is 0),
 * so s[0..n) is a token exactly when the result is n and n > 0. */
static inline size_t
sk_token_len(const char *s, size_t n)
{
    size_t i = 0;

    while (i < n && sk_is_tchar((unsigned char)s[i]))
        i++;
    return i;
}

/* RFC 9110 §5.5: a field value holds no CTL but HTAB (field-vchar, SP, HTAB and obs-text; what
 * RFC 9110 permits and strict parsers such as llhttp accept). 1 if none of v[0..n) is a CTL
 * (%x00-1F, %x7F) other than HTAB, else 0. Eight bytes at a time: a word with no byte below %x20
 * and none equal to %x7F is clean; one with such a byte (an HTAB too) is looked at byte by byte. */
static inline int
sk_field_value_ok(const char *v, size_t n)
{
    size_t k = 0;

    for (; k + 8 <= n; k += 8) {
        uint64_t x;

        memcpy(&x, v + k, 8);
        /* any byte < 0x20; any byte == 0x7f (a zero byte of x ^ 0x7f..) */
        uint64_t d = x ^ 0x7f7f7f7f7f7f7f7fu;
        uint64_t low = (x - 0x2020202020202020u) & ~x & 0x8080808080808080u;
        uint64_t del = (d - 0x0101010101010101u) & ~d & 0x8080808080808080u;

        if ((low | del) == 0)
            continue;
        for (size_t i = k; i < k + 8; i++) {
            unsigned char c = (unsigned char)v[i];

            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return 0;
        }
    }
    for (; k < n; k++) {
        unsigned char c = (unsigned char)v[k];

        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

/* RFC 9110 §5.6.3: OWS = *( SP / HTAB ). 1 if c is SP or HTAB, else 0. */
static inline int
sk_is_ows(unsigned char c)
{
    return c == ' ' || c == '\t';
}

/* Removes leading and trailing OWS (RFC 9110 §5.6.3) from the bytes *s[0..*n): advances *s and
 * shortens *n. All OWS gives *n == 0. Used for field values (RFC 9110 §5.5: the whitespace around a
 * field value is not part of it) and list elements (RFC 9110 §5.6.1). */
static inline void
sk_ows_trim(const char **s, size_t *n)
{
    const char *p = *s;
    size_t len = *n;

    while (len > 0 && sk_is_ows((unsigned char)p[0])) {
        p++;
        len--;
    }
    while (len > 0 && sk_is_ows((unsigned char)p[len - 1]))
        len--;
    *s = p;
    *n = len;
}

/* ASCII lower case (RFC 9110 §5.1: field names, and §5.6.2 tokens such as transfer codings and
 * connection options, compare case-insensitively; only ASCII letters have case there). */
static inline unsigned char
sk_ascii_lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + ('a' - 'A')) : c;
}

/* 1 if s[0..n) equals the lower-case literal lit[0..lit_len) ignoring ASCII case, else 0.
 * lit must be lower case (it is not folded). Use SK_TOKEN_IEQ for a string literal. */
static inline int
sk_token_ieq(const char *s, size_t n, const char *lit, size_t lit_len)
{
    if (n != lit_len)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (sk_ascii_lower((unsigned char)s[i]) != (unsigned char)lit[i])
            return 0;
    return 1;
}

/* 1 if a[0..an) equals b[0..bn) ignoring ASCII case on both sides (neither need be lower case:
 * two received values, e.g. a Host field and :authority, RFC 9110 §4.2.3), else 0. */
static inline int
sk_ascii_ieq(const char *a, size_t an, const char *b, size_t bn)
{
    if (an != bn)
        return 0;
    for (size_t i = 0; i < an; i++)
        if (sk_ascii_lower((unsigned char)a[i]) != sk_ascii_lower((unsigned char)b[i]))
            return 0;
    return 1;
}

/* sk_token_ieq with a lower-case string literal; its length comes from sizeof. */
#define SK_TOKEN_IEQ(s, n, lit) sk_token_ieq((s), (n), "" lit, sizeof(lit) - 1)

/* Iterates the elements of a comma-separated list, RFC 9110 §5.6.1:
 *   #element => [ element ] *( OWS "," OWS [ element ] )
 * A recipient "MUST parse and ignore a reasonable number of empty list elements", so empty
 * elements (",,", a leading or trailing comma, only OWS) are skipped. Elements are split at every
 * comma: a quoted-string holding a comma is not recognised (no list the core reads allows one in
 * a place that matters: Transfer-Encoding codings and Connection options are tokens).
 * Usage:
 *     sk_list_iter_t it;
 *     const char *e;
 *     size_t elen;
 *     sk_list_init(&it, value, value_len);
 *     while (sk_list_next(&it, &e, &elen) == 1) { ... }
 */
typedef struct {
    const char *s; /* the whole list, not NUL-terminated */
    size_t n;      /* bytes of the list */
    size_t pos;    /* offset of the next unread byte; n + 1 once the last element was read */
} sk_list_iter_t;

void sk_list_init(sk_list_iter_t *it, const char *s, size_t n);

/* 1: the next non-empty element, OWS trimmed, is in *elem[0..*elem_len) (pointing into the list).
 * 0: no element is left (*elem is NULL and *elem_len 0). Never fails. */
int sk_list_next(sk_list_iter_t *it, const char **elem, size_t *elem_len);

/* 1 if the list s[0..n) has an element equal to the lower-case token tok[0..tok_len) ignoring
 * ASCII case (e.g. "close" in a Connection field, RFC 9110 §7.6.1), else 0. */
int sk_list_has_token(const char *s, size_t n, const char *tok, size_t tok_len);

/* sk_list_has_token with a lower-case string literal; its length comes from sizeof. */
#define SK_LIST_HAS_TOKEN(s, n, lit) sk_list_has_token((s), (n), "" lit, sizeof(lit) - 1)

#endif
