/* test_slab.c — the connection slots (src/ext/sk_slab.c) against their header (sk_slab.h):
 * slot size rounding and slots per chunk, zeroed and distinct slots, 8-byte alignment, a freed
 * slot handed out again zeroed, chunks mapped only as slots run out and given back when all
 * their slots are free (one kept as the spare), the spare reused before a new chunk is mapped,
 * and release unmapping it. Built twice by `make test-c`: as the release extension builds it
 * (chunks) and with -fsanitize=address (each slot a calloc of its own: only the shared
 * promises are checked there). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_slab.h"
#include "test/sk_test.h" /* src/core/test/ */

#if defined(__SANITIZE_ADDRESS__)
#define PLAIN 1
#else
#define PLAIN 0
#endif

#define SIZE 300 /* bytes asked: rounded up to 304 */

static void
test_shape(T *t)
{
    sk_slab_t s;
    sk_slab_init(&s, SIZE);
    CHECK(t, s.slot == 304);
    CHECK(t, s.used == 0 && s.chunks == 0);
    CHECK(t, s.per_chunk > 200 && (size_t)s.per_chunk * s.slot <= SK_SLAB_CHUNK);
    sk_slab_init(&s, 8);
    CHECK(t, s.slot == 8);
    sk_slab_init(&s, 9);
    CHECK(t, s.slot == 16);
}

static void
test_slots(T *t)
{
    sk_slab_t s;
    sk_slab_init(&s, SIZE);
    uint32_t n = s.per_chunk + 5; /* more than one chunk holds */
    unsigned char **p = calloc(n, sizeof(*p));
    CHECK(t, p != NULL);
    for (uint32_t i = 0; i < n; i++) {
        p[i] = sk_slab_alloc(&s);
        CHECK(t, p[i] != NULL);
        CHECK(t, ((uintptr_t)p[i] & 7) == 0);
        int zero = 1;
        for (size_t k = 0; k < s.slot; k++) {
            zero &= p[i][k] == 0;
        }
        CHECK(t, zero);
        memset(p[i], 0xA5, s.slot); /* every byte of the slot is the caller's */
    }
    CHECK(t, s.used == n);
    if (!PLAIN) {
        CHECK(t, s.chunks == 2);
        /* slots do not overlap: each still holds its fill after all were written */
        for (uint32_t i = 0; i + 1 < n; i++) {
            CHECK(t, p[i] + s.slot <= p[i + 1] || p[i + 1] + s.slot <= p[i]);
        }
    }
    /* a freed slot comes back zeroed */
    unsigned char *again = p[3];
    sk_slab_free(&s, p[3]);
    p[3] = sk_slab_alloc(&s);
    CHECK(t, p[3] != NULL && p[3][0] == 0 && p[3][s.slot - 1] == 0);
    if (!PLAIN) {
        CHECK(t, p[3] == again); /* the chunk's free slot, not a new one */
    }
    (void)again;
    /* the second chunk's slots all freed: it becomes the spare (still mapped) */
    for (uint32_t i = s.per_chunk; i < n; i++) {
        sk_slab_free(&s, p[i]);
    }
    if (!PLAIN) {
        CHECK(t, s.chunks == 2 && s.spare != NULL);
    }
    /* then the first's: one spare is kept, the other chunk unmapped */
    for (uint32_t i = 0; i < s.per_chunk; i++) {
        sk_slab_free(&s, p[i]);
    }
    CHECK(t, s.used == 0);
    if (!PLAIN) {
        CHECK(t, s.chunks == 1 && s.spare != NULL && s.avail == NULL);
    }
    /* the next slot comes from the spare: no new chunk; one of its freed slots (filled with
     * 0xA5 above), zeroed whole */
    p[0] = sk_slab_alloc(&s);
    CHECK(t, p[0] != NULL);
    {
        int zero = 1;
        for (size_t k = 0; k < s.slot; k++) {
            zero &= p[0][k] == 0;
        }
        CHECK(t, zero);
    }
    if (!PLAIN) {
        CHECK(t, s.chunks == 1 && s.spare == NULL);
    }
    sk_slab_free(&s, p[0]);
    sk_slab_free(&s, NULL); /* nothing */
    sk_slab_release(&s);
    CHECK(t, s.used == 0);
    if (!PLAIN) {
        CHECK(t, s.chunks == 0 && s.spare == NULL);
    }
    free(p);
}

int
main(void)
{
    T t;
    memset(&t, 0, sizeof(t));
    test_shape(&t);
    test_slots(&t);
    printf("test_slab%s: %d passed, %d failed\n", PLAIN ? " (AddressSanitizer)" : "", t.passed,
           t.failed);
    return t.failed == 0 ? 0 : 1;
}
