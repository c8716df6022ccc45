/* sk_http1.h — the HTTP/1.1 protocol handler, the wire under the ASGI `http` exchange.
 *
 * The first handler a transport gets (sk_reactor_config_t.open = sk_http1_open): it parses
 * requests with the byte-level parser, refuses bad ones itself, hands each request to an ASGI
 * exchange (sk_exchange.h: the app's side of it) and writes the exchange's responses with the
 * byte-level serializer, implementing the exchange's wire table. Its owner (the Server object) fills one
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

#endif
