/* sk_logesc.h — the escaping of client-controlled bytes in log lines (CWE-117): what the access
 * log writes for a request-target, a header value or any other value a client chose, so that one
 * response is always one line with the fields it had.
 *
 * Owns: the one escaping rule, per byte, in the style of nginx's access log (its `escape=default`,
 * since 1.1.6) with Apache httpd's two-character forms for the quote and the backslash:
 *   0x22 '"'                   -> \"   (the field delimiter of the quoted log fields)
 *   0x5C '\'                   -> \\   (so a backslash always starts an escape)
 *   0x00-0x1F, 0x7F-0xFF       -> \xHH (two upper-case hex digits: C0 controls, DEL, and every
 *                                       byte above 0x7E: C1 controls in a latin-1 reading,
 *                                       UTF-8 sequences valid or not, obs-text)
 *   every other byte (0x20-0x7E but the two above) is written as it is.
 * The output is printable ASCII only; the mapping is reversible (each escape names its byte).
 * Never: includes Python.h, allocates, or keeps state; the caller owns both buffers.
 */
#ifndef SK_LOGESC_H
#define SK_LOGESC_H

#include <stddef.h>

/* Bytes the escaped form of s[0..n) takes: n exactly when no byte needs escaping (the common
 * case, one table lookup per byte), at most 4 * n. s may be NULL when n is 0. */
size_t sk_log_escaped_len(const unsigned char *s, size_t n);

/* Writes the escaped form of s[0..n) to out, which has room for sk_log_escaped_len(s, n) bytes
 * (no terminating NUL). Returns the bytes written (that length). */
size_t sk_log_escape(const unsigned char *s, size_t n, char *out);

#endif
