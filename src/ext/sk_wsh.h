/* sk_wsh.h — the WebSocket protocol handler, serving the ASGI `websocket` scope (ASGI websocket
 * spec 2.4 over RFC 6455).
 *
 * The second handler a transport can get: the HTTP/1.1 handler recognises a WebSocket opening
 * handshake (sk_wshs.h) and hands the connection over with sk_wsh_start(); from then on this
 * handler runs the application (websocket.connect, then accept, close or a denial response),
 * answers the handshake (101, 403, the app's own response, 500), and after the 101 turns frames
 * into websocket.receive / websocket.disconnect events with the byte-level codec (sk_ws.h) and
 * websocket.send / websocket.close into frames. Pings from the peer are answered here; the server's
 * own keepalive pings (--ws-ping-interval, --ws-ping-timeout) and the close handshake's timeout use
 * the transport's one deadline.
 * Never: reaches into the transport or the reactor except through sk_transport.h, or lets an
 * application's failure reach another connection or the server.
 */
#ifndef SK_WSH_H
#define SK_WSH_H

#include "sk_module.h"
#include "sk_transport.h"
#include "sk_http.h"

struct sk_serve;

/* Takes over transport t after the request head just parsed by p, a WebSocket handshake:
 * status 0 (valid: `scope` is the request's http scope, borrowed, made into the websocket scope;
 * `key` is its Sec-WebSocket-Key), or 426 (answers 426 with Sec-WebSocket-Version: 13 and
 * closes; scope and key unused; the caller records it as a refusal). On success the transport
 * has switched to this handler (the bytes after the head are its input) and the application's
 * Task has started. 0, or -1 with an exception set (nothing switched: the caller refuses with
 * 500). */
int sk_wsh_start(sk_transport_t *t, struct sk_serve *srv, const sk_parser_t *p, int status,
                 PyObject *scope, const char *key, size_t key_len);

#endif
