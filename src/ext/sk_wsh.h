/* sk_wsh.h — the WebSocket wire over HTTP/1.1: RFC 6455 on a connection switched after a 101,
 * serving an ASGI `websocket` session (sk_wssession.h).
 *
 * The second handler a transport can get: the HTTP/1.1 handler recognises a WebSocket opening
 * handshake (sk_wshs.h) and hands the connection over with sk_wsh_start(); from then on this
 * handler answers the handshake on the HTTP/1.1 wire as the session asks (101, 403, the app's
 * denial response, 500), and after the 101 turns frames into the session's messages with the
 * byte-level codec (sk_ws.h) and permessage-deflate (sk_wspmd.h), and the session's messages
 * and closes into frames, through the session's sk_wss_wire_ops_t table. Pings from the peer
 * are answered here; the server's own keepalive pings (--ws-ping-interval, --ws-ping-timeout)
 * and the close handshake's timeout use the transport's one deadline.
 * Never: reaches into the transport or the reactor except through sk_transport.h, or into the
 * HTTP/1.1 handler (what the handshake produced is handed over as arguments).
 */
#ifndef SK_WSH_H
#define SK_WSH_H

#include "sk_module.h"
#include "sk_transport.h"

struct sk_serve;

/* Takes over transport t after a WebSocket opening handshake its current handler received and
 * checked (sk_ws_handshake_check): status 0 (valid: `scope` is the request's http scope, a dict,
 * borrowed, made here into the websocket scope; its `headers` (names lowercase, in order) give
 * the permessage-deflate offer (Sec-WebSocket-Extensions) and the subprotocols; `key` is the
 * Sec-WebSocket-Key value, key_len bytes, borrowed for the call), or 426 (answers 426 with
 * Sec-WebSocket-Version: 13 and closes; scope and key unused; the caller records it as a
 * refusal). On success the transport has switched to this handler (sk_transport_switch: the
 * bytes after the head are its input) and the session's app has started (sk_wss_start). 0, or
 * -1 with an exception set (nothing switched: the caller refuses with 500). */
int sk_wsh_start(sk_transport_t *t, struct sk_serve *srv, int status, PyObject *scope,
                 const char *key, size_t key_len);

#endif
