/* sk_logesc.c — the escaping of client-controlled bytes in log lines (see sk_logesc.h). */
#include "sk_logesc.h"

/* Output bytes per input byte: 1 as it is, 2 for \" and \\, 4 for \xHH. */
/* clang-format off */
#define W4 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4
#define W1 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1
static const unsigned char width[256] = {
    W4, W4,                                         /* 0x00-0x1F: C0 controls */
    1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20-0x2F: '"' at 0x22 */
    W1, W1,                                         /* 0x30-0x4F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, /* 0x50-0x5F: '\' at 0x5C */
    W1,                                             /* 0x60-0x6F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, /* 0x70-0x7F: DEL at 0x7F */
    W4, W4, W4, W4, W4, W4, W4, W4,                 /* 0x80-0xFF */
};
#undef W1
#undef W4
/* clang-format on */

size_t
sk_log_escaped_len(const unsigned char *s, size_t n)
{
    size_t i = 0, len;

    while (i < n && width[s[i]] == 1) /* printable ASCII: the whole of an ordinary value */
        i++;
    len = i;
    for (; i < n; i++)
        len += width[s[i]];
    return len;
}

size_t
sk_log_escape(const unsigned char *s, size_t n, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    char *o = out;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (width[c] == 1) {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        if (width[c] == 2) { /* '"' or '\\' */
            *o++ = (char)c;
            continue;
        }
        *o++ = 'x';
        *o++ = hex[c >> 4];
        *o++ = hex[c & 0x0F];
    }
    return (size_t)(o - out);
}
