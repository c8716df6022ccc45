/* sk_token.c — the comma-separated list of RFC 9110 §5.6.1 (the one-byte rules are inline in
 * sk_token.h).
 *
 * Owns: splitting a list into its non-empty, OWS-trimmed elements, and the token-membership test
 * built on it.
 * Never: includes Python.h, performs I/O, allocates, keeps global mutable state, or reads outside
 * the list it is given.
 */
#include "sk_token.h"

#include <assert.h>
#include <stddef.h>

void
sk_list_init(sk_list_iter_t *it, const char *s, size_t n)
{
    assert(s != NULL || n == 0);
    it->s = s != NULL ? s : ""; /* no NULL + 0 below (undefined in C) for an empty list */
    it->n = n;
    it->pos = 0;
}

int
sk_list_next(sk_list_iter_t *it, const char **elem, size_t *elem_len)
{
    /* pos == n means one (possibly empty) element is left after a trailing comma or in an empty
     * list; pos == n + 1 means the list is done. */
    while (it->pos <= it->n) {
        size_t b = it->pos;
        size_t e = b;
        const char *p;
        size_t len;

        while (e < it->n && it->s[e] != ',')
            e++;
        it->pos = e + 1; /* past the comma, or past the end */
        p = it->s + b;
        len = e - b;
        sk_ows_trim(&p, &len);
        if (len == 0)
            continue; /* empty list element: ignored (RFC 9110 §5.6.1) */
        *elem = p;
        *elem_len = len;
        return 1;
    }
    *elem = NULL;
    *elem_len = 0;
    return 0;
}

int
sk_list_has_token(const char *s, size_t n, const char *tok, size_t tok_len)
{
    sk_list_iter_t it;
    const char *e;
    size_t elen;

    sk_list_init(&it, s, n);
    while (sk_list_next(&it, &e, &elen) == 1)
        if (sk_token_ieq(e, elen, tok, tok_len))
            return 1;
    return 0;
}
