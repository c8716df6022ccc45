/* sk_test.h — helpers shared by the byte-level core's plain C unit tests (test_core.c, test_ws.c).
 *
 * Owns: the pass/fail counter (CHECK), the guard-page input area (every parser call's input ends
 * exactly at a PROT_NONE page, so an over-read faults even without ASan: picohttpparser's habit),
 * one-line event-log formatting (logf_, log_bytes, log_eq, print_log), and the case runner that
 * feeds one input whole, byte by byte and split at every offset (run_case).
 * Never: includes Python.h, uses the network, or depends on the wall clock.
 */
#ifndef SK_TEST_H
#define SK_TEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sk_core.h"

typedef struct {
    int passed;
    int failed;
    int print; /* SK_TEST_PRINT=1: print each parser case's event log */
    /* Guarded input area: bytes [base, base + size) are readable, base + size is PROT_NONE. */
    char *base;
    size_t size;
    size_t map_len;
} T;

static inline void
check(T *t, int ok, const char *file, int line, const char *what)
{
    if (ok) {
        t->passed++;
        return;
    }
    t->failed++;
    fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
}

#define CHECK(t, cond) check((t), (cond) ? 1 : 0, __FILE__, __LINE__, #cond)

/* Appends a string literal's bytes; the count comes from sizeof. */
#define APPEND_LIT(b, lit) sk_buf_append((b), "" lit, sizeof(lit) - 1)

/* Maps size bytes (rounded up to pages) followed by one PROT_NONE page. 0 or -1. */
static inline int
guard_init(T *t, size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    size = (size + page - 1) / page * page;
    t->map_len = size + page;
    t->base = mmap(NULL, t->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t->base == MAP_FAILED)
        return -1;
    if (mprotect(t->base + size, page, PROT_NONE) != 0)
        return -1;
    t->size = size;
    return 0;
}

/* Copies n bytes (n <= t->size) so that they end exactly at the guard page; writable. */
static inline char *
guard_place(T *t, const char *src, size_t n)
{
    char *dst = t->base + t->size - n;

    if (n > 0)
        memmove(dst, src, n);
    return dst;
}

#if defined(__GNUC__)
static inline void logf_(sk_buf_t *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif

static inline void
logf_(sk_buf_t *log, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start above; clang 14 false positive */
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(tmp))
        n = sizeof(tmp) - 1;
    sk_buf_append(log, tmp, (size_t)n);
}

/* Appends bytes, escaping CR, LF, HTAB, backslash and non-printables, so logs stay one line each. */
static inline void
log_bytes(sk_buf_t *log, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '\r')
            APPEND_LIT(log, "\\r");
        else if (c == '\n')
            APPEND_LIT(log, "\\n");
        else if (c == '\t')
            APPEND_LIT(log, "\\t");
        else if (c == '\\')
            APPEND_LIT(log, "\\\\");
        else if (c < 0x20 || c >= 0x7f)
            logf_(log, "\\x%02x", c);
        else
            sk_buf_append(log, (const char *)&c, 1);
    }
}

static inline int
log_eq(const sk_buf_t *a, const sk_buf_t *b)
{
    return sk_buf_len(a) == sk_buf_len(b) &&
           (sk_buf_len(a) == 0 || memcmp(sk_buf_head(a), sk_buf_head(b), sk_buf_len(a)) == 0);
}

static inline void
print_log(const char *label, const sk_buf_t *log)
{
    fprintf(stderr, "--- %s\n%.*s", label, (int)sk_buf_len(log), sk_buf_head(log));
}

/* How a case's input reaches its parser: in one read, in two (split at k), one byte per read. */
enum { FEED_WHOLE, FEED_SPLIT, FEED_BYTES };

/* Runs one parser over in[0..n), fed as `mode` says (split at k for FEED_SPLIT), with the
 * parser's own limits `lim`; the event log (a new buffer the caller frees) goes to *out. */
typedef void (*run_fn)(T *t, const void *lim, const char *in, size_t n, int mode, size_t k,
                       sk_buf_t *out);

/* The split offset after k for an input of n bytes: every offset up to `every_max` bytes; past
 * that the first and last 64 and about 100 between (every offset of a 64 KiB frame would take
 * minutes). */
static inline size_t
next_split(size_t k, size_t n, size_t every_max)
{
    size_t stride = n / 97;

    if (n <= every_max || k < 64 || k + 64 >= n)
        return k + 1;
    return k + stride < n - 64 ? k + stride : n - 64;
}

/* The picohttpparser habit: whole, byte by byte, and every split must give the same events, and
 * those events must be `expect`. `kind` names the parser in failure messages. */
static inline void
run_case(T *t, const char *kind, const char *name, run_fn run, const void *lim, const char *in,
         size_t n, size_t every_max, const char *expect, const char *file, int line)
{
    sk_buf_t whole, other;
    int same = 1;
    char what[256];

    run(t, lim, in, n, FEED_WHOLE, 0, &whole);
    if (t->print)
        print_log(name, &whole);
    snprintf(what, sizeof(what), "%s case '%s': expected events", kind, name);
    {
        int ok = strlen(expect) == sk_buf_len(&whole) &&
                 memcmp(expect, sk_buf_head(&whole), sk_buf_len(&whole)) == 0;

        check(t, ok, file, line, what);
        if (!ok) {
            fprintf(stderr, "--- expected\n%s", expect);
            print_log("got (whole)", &whole);
        }
    }
    run(t, lim, in, n, FEED_BYTES, 0, &other);
    snprintf(what, sizeof(what), "%s case '%s': byte by byte == whole", kind, name);
    check(t, log_eq(&whole, &other), file, line, what);
    if (!log_eq(&whole, &other))
        print_log("got (byte by byte)", &other);
    sk_buf_free(&other);
    for (size_t k = 1; k < n && same; k = next_split(k, n, every_max)) {
        run(t, lim, in, n, FEED_SPLIT, k, &other);
        if (!log_eq(&whole, &other)) {
            same = 0;
            fprintf(stderr, "split at %zu differs\n", k);
            print_log("got (split)", &other);
        }
        sk_buf_free(&other);
    }
    snprintf(what, sizeof(what), "%s case '%s': every split == whole", kind, name);
    check(t, same, file, line, what);
    sk_buf_free(&whole);
}

#endif
