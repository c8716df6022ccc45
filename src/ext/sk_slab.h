/* sk_slab.h — fixed-size slots for what every open connection keeps for as long as it is open
 * (the transport, the HTTP/1.1 handler), packed together in chunks of their own. Layer 1
 * (transport): plain C, no Python, so the C tests drive it alone.
 *
 * Why (issue 37, bench/LEVERS.md "Memory per idle connection"): in the interpreter's allocator
 * these long-lived structs shared its 1 MiB arenas with the short-lived objects of every request
 * (scope, exchange, Task); the pools those freed stayed resident because each arena still held
 * some connection's struct, so 10,000 keep-alive connections after one request cost 0.57 KiB
 * each where the structs are 0.42 KiB, and RSS did not come back after they closed. In glibc's
 * heap they would sit among the blocks a request frees (parser, buffers), whose pages
 * malloc_trim then cannot give back. Here a chunk holds only slots of one size, and a chunk
 * whose slots are all free goes back to the system (one empty chunk is kept, so a connection
 * that opens and closes over and over does not map and unmap).
 *
 * Under AddressSanitizer each slot is a calloc() of its own, so overflows and use after free
 * are still caught (a slot in a chunk has no redzone).
 *
 * Not thread-safe: one per reactor (each event loop thread has its own).
 */
#ifndef SK_SLAB_H
#define SK_SLAB_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of one chunk (a power of two: a slot's chunk is found by masking its address). */
#define SK_SLAB_CHUNK ((size_t)64 * 1024)

typedef struct sk_slab_chunk sk_slab_chunk_t;

typedef struct {
    size_t slot;            /* bytes per slot (rounded up to 8) */
    uint32_t per_chunk;     /* slots in one chunk */
    sk_slab_chunk_t *avail; /* chunks with a free slot (doubly linked), the newest first */
    sk_slab_chunk_t *spare; /* one chunk with every slot free, kept for the next allocation */
    size_t chunks;          /* chunks mapped, the spare included */
    size_t used;            /* slots allocated */
} sk_slab_t;

/* Sets up s for slots of `size` bytes (1 .. SK_SLAB_CHUNK / 4). Maps nothing yet. */
void sk_slab_init(sk_slab_t *s, size_t size);

/* A zeroed slot of s->slot bytes, 8-byte aligned; NULL when no memory could be mapped. */
void *sk_slab_alloc(sk_slab_t *s);

/* Gives back a slot sk_slab_alloc(s) returned (NULL: nothing). A chunk left with no slot in use
 * is unmapped, unless it becomes the spare. */
void sk_slab_free(sk_slab_t *s, void *p);

/* Unmaps the spare chunk. Every slot must have been freed (s->used == 0). */
void sk_slab_release(sk_slab_t *s);

#endif
