/* sk_h2.h — the HTTP/2 protocol handler (RFC 9113): the wire under one ASGI `http` exchange per
 * stream, on nghttp2 used sans-I/O.
 *
 * A transport gets it from the HTTP/1.1 handler (sk_http1.c), which hands the connection over
 * with sk_h2_start() before parsing anything: on cleartext when the first bytes are the client
 * connection preface (prior knowledge, RFC 9113 §3.3) with --http auto, or always with --http 2;
 * on TLS when ALPN selected "h2" (RFC 9113 §3.2; RFC 7301), or always with --http 2. The bytes
 * received so far (the preface among them) are this handler's first input.
 *
 * Per connection: one nghttp2 server session, fed with nghttp2_session_mem_recv from
 * data_received() and drained with nghttp2_session_mem_send into the transport's output (never
 * the socket); the server's SETTINGS (SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE,
 * SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE, SETTINGS_ENABLE_PUSH 0) from sk_serve_t.h2;
 * nghttp2's own limits (RST_STREAM rate, CONTINUATION frames per block, SETTINGS entries, queued
 * ACKs) and skirr's per-connection budgets (sk_h2guard.h: GOAWAY ENHANCE_YOUR_CALM when over);
 * the idle (GOAWAY NO_ERROR after --timeout-keep-alive with no open stream) and request-head
 * (--timeout-request-head) deadlines; the graceful shutdown (RFC 9113 §6.8: GOAWAY with
 * 2^31-1, then a PING, then GOAWAY with the last stream id; streams in flight finish).
 * Per stream: the request head (pseudo-header fields mapped, cookie crumbs joined, §8.2.3, §8.3.1;
 * nghttp2 refuses malformed requests, §8.1.1, with RST_STREAM PROTOCOL_ERROR), the request body
 * with flow control tied to the app (no automatic WINDOW_UPDATE: nghttp2_session_consume as the
 * app's receive() takes bytes), and the exchange's wire table: HEADERS for the head (connection-
 * specific fields dropped, §8.2.2), DATA as the peer's window allows, trailers as a last HEADERS
 * with END_STREAM, 1xx as HEADERS, files read with pread(2) one DATA frame at a time, RST_STREAM
 * INTERNAL_ERROR for a response that cannot complete.
 * Streams count against --http2-max-concurrent-streams until their app call has ended, reset or
 * not (CVE-2023-44487, Rapid Reset): more get RST_STREAM REFUSED_STREAM.
 * Never: touches a socket or the reactor except through sk_transport.h, or an exchange except
 * through sk_exchange.h.
 */
#ifndef SK_H2_H
#define SK_H2_H

#include "sk_serve.h"

/* The client connection preface (RFC 9113 §3.4), and its length in bytes. */
#define SK_H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define SK_H2_PREFACE_LEN (sizeof(SK_H2_PREFACE) - 1)

/* The handler table (static storage). */
extern const sk_handler_ops_t sk_h2_ops;

/* Takes over transport t (open, its current handler in a data_received() call or not): makes
 * the connection's HTTP/2 state and switches the transport to sk_h2_ops (sk_transport_switch),
 * so the input not consumed by the caller (the preface first) is this handler's. The server's
 * SETTINGS are queued at once (RFC 9113 §3.4: the server preface). 0, or -1 when out of memory
 * (nothing switched: the caller closes). */
int sk_h2_start(sk_transport_t *t, sk_serve_t *srv);

#endif
