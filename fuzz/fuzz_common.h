/* What every fuzz harness shares: failing loudly, building byte logs and splitting an input
 * into reads. Each harness is one translation unit that defines FUZZ_NAME (its name in failure
 * messages) and, optionally, FUZZ_DIE_CONTEXT() (prints what it was doing) before including this
 * header once. No state: every helper works on what it is given. */
#ifndef SK_FUZZ_COMMON_H
#define SK_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sk_core.h"

#ifndef FUZZ_NAME
#error "define FUZZ_NAME before including fuzz_common.h"
#endif

/* Prints `what` (and the harness's context) and aborts: the fuzzer records the input. */
static inline void
die(const char *what)
{
    fprintf(stderr, "%s: %s\n", FUZZ_NAME, what);
#ifdef FUZZ_DIE_CONTEXT
    FUZZ_DIE_CONTEXT();
#endif
    abort();
}

#define REQUIRE(cond)   \
    do {                \
        if (!(cond))    \
            die(#cond); \
    } while (0)

/* Appends p[0..n) to b; out of memory is a failure. */
static inline void
put(sk_buf_t *b, const void *p, size_t n)
{
    if (n > 0 && sk_buf_append(b, p, n) != 0)
        die("out of memory");
}

/* put() of a string literal's bytes; the count comes from sizeof. */
#define PUT_LIT(b, lit) put((b), "" lit, sizeof(lit) - 1)

/* Appends v's 8 bytes in host order (logs compared within one process only). */
static inline void
put_u64(sk_buf_t *b, uint64_t v)
{
    put(b, &v, sizeof(v));
}

/* xorshift64*: the split run's piece sizes, from the leading bytes. */
static inline uint64_t
next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* How an input is cut into reads: random pieces (0..63 bytes, empty reads included), one byte
 * at a time, two pieces cut at seed % (n + 1), or small pieces (1..8 bytes). */
enum { SPLIT_RANDOM = 0, SPLIT_BYTES, SPLIT_TWO, SPLIT_SMALL };

/* The size of read number `calls` (from 1) at `pos` of an `n`-byte input, in bytes: as `mode`
 * says, the whole rest when mode < 0 or after 2n + 2 reads (an empty read may come first, never
 * forever). Never more than what is left. */
static inline size_t
split_piece(int mode, uint64_t *seed, size_t calls, size_t n, size_t pos)
{
    size_t piece;

    if (calls > 2 * n + 2)
        mode = -1;
    switch (mode) {
    case SPLIT_BYTES: piece = 1; break;
    case SPLIT_TWO: piece = calls == 1 ? (size_t)(*seed % (n + 1)) : n - pos; break;
    case SPLIT_SMALL: piece = 1 + (size_t)(next_rand(seed) % 8); break;
    case SPLIT_RANDOM: piece = (size_t)(next_rand(seed) % 64); break;
    default: piece = n; break;
    }
    return piece > n - pos ? n - pos : piece;
}

/* Prints an event log, escaped, for a failing input. */
static inline void
dump(const char *label, const sk_buf_t *log)
{
    const unsigned char *s = (const unsigned char *)sk_buf_head(log);

    fprintf(stderr, "--- %s events:\n", label);
    for (size_t i = 0; i < sk_buf_len(log); i++)
        fprintf(stderr, (s[i] >= 0x20 && s[i] < 0x7f) ? "%c" : "\\x%02x", s[i]);
    fprintf(stderr, "\n");
}

#endif
