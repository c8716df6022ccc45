/* sk_http1.h — the HTTP/1.1 protocol handler, serving the ASGI `http` scope.
 *
 * The first handler a transport gets (sk_reactor_config_t.open = sk_http1_open): it parses
 * requests with the byte-level parser, refuses bad ones itself, runs one ASGI application call
 * per request (the Request object, internal, is the coroutine its asyncio.Task runs) and writes
 * responses with the byte-level serializer. Its owner (the Server object) fills one
 * sk_serve_t (sk_serve.h) and embeds it; every connection and request reads it through a
 * borrowed pointer, and each Request holds a strong reference to the owner, so it outlives them
 * all.
 * Never: reaches into the transport or the reactor except through sk_transport.h.
 */
#ifndef SK_HTTP1_H
#define SK_HTTP1_H

#include "sk_serve.h"

/* The handler table (static storage). */
extern const sk_handler_ops_t sk_http1_ops;

/* sk_handler_open_fn for a reactor serving HTTP/1.1: `owner` is the sk_serve_t. Sets the
 * request-head deadline. The handler, or NULL when out of memory. */
void *sk_http1_open(void *owner, sk_transport_t *t);

/* Releases the scope["extensions"] dicts srv->ext_ring holds (the owner's tp_clear and
 * dealloc); may run finalizers. */
void sk_http1_ext_clear(sk_serve_t *srv);

#endif
