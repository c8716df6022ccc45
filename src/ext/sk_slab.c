/* sk_slab.c — fixed-size slots in chunks of their own (see sk_slab.h). */
#define _GNU_SOURCE
#include "sk_slab.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_PLAIN 1
#endif
#endif

/* At the start of every chunk; the slots follow at HEADER bytes. */
struct sk_slab_chunk {
    sk_slab_chunk_t *prev, *next; /* on s->avail while on_avail */
    void *free;                   /* a freed slot (its first bytes point to the next), or NULL */
    uint32_t used;                /* slots in use */
    uint32_t fresh;               /* slots [fresh, per_chunk) were never handed out */
    uint8_t on_avail;
};

#define HEADER (((sizeof(sk_slab_chunk_t)) + 15) & ~(size_t)15)

void
sk_slab_init(sk_slab_t *s, size_t size)
{
    assert(size > 0 && size <= SK_SLAB_CHUNK / 4);
    memset(s, 0, sizeof(*s));
    s->slot = (size + 7) & ~(size_t)7;
    s->per_chunk = (uint32_t)((SK_SLAB_CHUNK - HEADER) / s->slot);
}

#ifdef SLAB_PLAIN

void *
sk_slab_alloc(sk_slab_t *s)
{
    void *p = calloc(1, s->slot);
    s->used += (p != NULL);
    return p;
}

void
sk_slab_free(sk_slab_t *s, void *p)
{
    if (p != NULL) {
        s->used--;
        free(p);
    }
}

void
sk_slab_release(sk_slab_t *s)
{
    assert(s->used == 0);
    (void)s;
}

#else

static void
avail_push(sk_slab_t *s, sk_slab_chunk_t *c)
{
    c->prev = NULL;
    c->next = s->avail;
    if (s->avail != NULL) {
        s->avail->prev = c;
    }
    s->avail = c;
    c->on_avail = 1;
}

static void
avail_remove(sk_slab_t *s, sk_slab_chunk_t *c)
{
    if (c->prev != NULL) {
        c->prev->next = c->next;
    }
    else {
        s->avail = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    c->prev = c->next = NULL;
    c->on_avail = 0;
}

/* A chunk-aligned, zeroed chunk: twice its size mapped, the unaligned ends unmapped. */
static sk_slab_chunk_t *
chunk_map(void)
{
    size_t len = 2 * SK_SLAB_CHUNK;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        return NULL;
    }
    size_t head = (SK_SLAB_CHUNK - ((uintptr_t)m & (SK_SLAB_CHUNK - 1))) & (SK_SLAB_CHUNK - 1);
    char *start = m + head;
    size_t tail = len - head - SK_SLAB_CHUNK;
    if (head > 0) {
        munmap(m, head);
    }
    if (tail > 0) {
        munmap(start + SK_SLAB_CHUNK, tail);
    }
    return (sk_slab_chunk_t *)(void *)start;
}

void *
sk_slab_alloc(sk_slab_t *s)
{
    sk_slab_chunk_t *c = s->avail;
    if (c == NULL) {
        if (s->spare != NULL) {
            c = s->spare;
            s->spare = NULL;
        }
        else if ((c = chunk_map()) != NULL) {
            s->chunks++;
        }
        else {
            return NULL;
        }
        avail_push(s, c);
    }
    char *p;
    if (c->free != NULL) {
        p = c->free;
        memcpy(&c->free, p, sizeof(void *));
        memset(p, 0, s->slot);
    }
    else {
        p = (char *)c + HEADER + (size_t)c->fresh * s->slot; /* never used: still zero */
        c->fresh++;
    }
    c->used++;
    s->used++;
    if (c->used == s->per_chunk) {
        avail_remove(s, c);
    }
    return p;
}

void
sk_slab_free(sk_slab_t *s, void *p)
{
    if (p == NULL) {
        return;
    }
    /* the chunk's start: p less its offset into the aligned chunk */
    sk_slab_chunk_t *c =
        (sk_slab_chunk_t *)(void *)((char *)p - ((uintptr_t)p & (SK_SLAB_CHUNK - 1)));
    assert(c->used > 0 && (char *)p >= (char *)c + HEADER);
    memcpy(p, &c->free, sizeof(void *));
    c->free = p;
    c->used--;
    s->used--;
    if (c->used == 0) {
        if (c->on_avail) {
            avail_remove(s, c);
        }
        if (s->spare == NULL) {
            /* kept as it is (its pages stay resident, at most one chunk): its free list holds
             * every slot it handed out, each zeroed when handed out again (sk_slab_alloc), the
             * rest still never used. Zeroing the whole chunk here instead cost a 64 KiB memset,
             * and the caches it evicted, each time the last open connection closed (bench/
             * LEVERS.md "TLS handshakes": one per connection when they come one at a time). */
            s->spare = c;
        }
        else {
            munmap(c, SK_SLAB_CHUNK);
            s->chunks--;
        }
    }
    else if (!c->on_avail) {
        avail_push(s, c);
    }
}

void
sk_slab_release(sk_slab_t *s)
{
    assert(s->used == 0 && s->avail == NULL);
    if (s->spare != NULL) {
        munmap(s->spare, SK_SLAB_CHUNK);
        s->spare = NULL;
        s->chunks--;
    }
}

#endif
