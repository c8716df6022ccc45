/* sk_tlsctx.h — the serving TLS context: the `_native.TLSContext` type (what --ssl-* configure)
 * and the ASGI `tls` extension of a connection. Layer 2 (serving context, beside sk_serve.h):
 * includes the module state and the TLS stream layer's seam (sk_tls.h), no handler.
 *
 * A TLSContext owns one sk_tls_source_t (sk_tls.h): the SSL_CTX a TLS listener's new
 * connections are made from. It is made from file paths and options, kept so that reload()
 * can build a new SSL_CTX from the same paths and swap it into the source (the old one is freed
 * when the last connection made from it closes: SSL_new holds its own reference). The Server
 * borrows the source as its reactor's stream_arg and holds a strong reference to the
 * TLSContext for the reactor's whole life.
 *
 * What every SSL_CTX it builds says (a current hardened server; RFC 8446, RFC 5246 as profiled
 * by RFC 9325):
 *   - versions: TLS 1.2 and 1.3 (min_version "TLSv1.3": 1.3 only); nothing older is offered;
 *   - TLS 1.2 suites: forward-secret AEAD only (ECDHE/DHE with AES-GCM or ChaCha20-Poly1305),
 *     unless `ciphers` names others (OpenSSL's cipher-list syntax); TLS 1.3 suites: OpenSSL's
 *     (all AEAD, all forward secret);
 *   - SSL_OP_NO_COMPRESSION, SSL_OP_NO_RENEGOTIATION, SSL_OP_CIPHER_SERVER_PREFERENCE,
 *     SSL_OP_ENABLE_KTLS; SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
 *     (the stream layer's rule 3) | SSL_MODE_RELEASE_BUFFERS;
 *   - session tickets on, encrypted with an 80-byte key (16 name, 32 HMAC, 32 AES) the same for
 *     every SSL_CTX of the object and its reloads: given (`ticket_key`, the supervisor's, so a
 *     ticket one worker issued resumes on another) or made once at random;
 *   - the session id context: SHA-256 of `cert_reqs` and the bytes of the `ca_certs` and `crl`
 *     files, the same on every SSL_CTX of one build (default and SNI), so OpenSSL resumes a
 *     session (TLS 1.3 ticket, TLS 1.2 ticket or id) only under the verification that admitted
 *     its client: a reload with another CRL revokes old sessions, workers reading the same
 *     files resume each other's tickets;
 *   - ALPN (RFC 7301 §3.2): the server's protocols in its order of preference ("http/1.1" only;
 *     "h2" joins ALPN_PROTOCOLS once HTTP/2 exists); a client offering ALPN with none of them
 *     gets the fatal no_application_protocol alert; a client offering no ALPN is served HTTP/1.1;
 *   - SNI (RFC 6066 §3): each extra certificate of `sni` gets its own SSL_CTX (the same
 *     settings); the servername callback switches a connection to the one whose certificate's
 *     subjectAltName DNS names match the requested name (case-insensitive; "*.example.com"
 *     matches one leftmost label); no name or no match: the default certificate (`certfile`);
 *   - client certificates (cert_reqs, as ssl.CERT_*): 0 none requested; 1 requested, and a
 *     certificate that fails verification is let through with the reason kept for the `tls`
 *     extension's client_cert_error; 2 required and verified (a failure aborts the handshake
 *     with OpenSSL's alert). ca_certs: the CA file verified against and named to the client;
 *     crl: a CRL file checked for the leaf (X509_V_FLAG_CRL_CHECK).
 *
 * Errors: every mistake raises ValueError with one line naming the option as the command line
 * spells it, the file, and OpenSSL's reason ("--ssl-keyfile k.pem: bad decrypt (wrong
 * --ssl-keyfile-password?)"); TypeError for an argument of the wrong type.
 */
#ifndef SK_TLSCTX_H
#define SK_TLSCTX_H

#include "sk_module.h"
#include "sk_tls.h"

/* The source of `obj` (borrowed: alive while obj is), or NULL with TypeError when obj is not a
 * TLSContext of this module. */
sk_tls_source_t *sk_tlsctx_source(sk_state *st, PyObject *obj);

/* The ASGI `tls` extension (asgiref "TLS" 0.2) of an established connection, a new dict:
 *   server_cert        str: the PEM of the certificate the server presented (the SNI one)
 *   client_cert_chain  list of str: the certificates the client sent as PEM, leaf first
 *                      (a self-signed root it sent too is left out); [] for none
 *   client_cert_name   str: the leaf's subject as an RFC 4514 string, or None without one
 *   client_cert_error  str: why the client's certificate failed verification (cert_reqs 1 let
 *                      it through), or None: none given, or verified
 *   tls_version        int: the negotiated version's wire value (0x0303 TLS 1.2, 0x0304 1.3)
 *   cipher_suite       int: the negotiated suite's IANA id (0x1301, 0xC02B, ...)
 * Built once per connection by the handler and copied into each scope; server_cert is a copy of
 * the PEM made when the SSL_CTX was built. New reference, or NULL with an exception (memory). */
PyObject *sk_tls_info(sk_state *st, SSL *ssl);

#endif
