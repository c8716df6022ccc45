/* sk_proxy.h — proxy headers: the client address and scheme a trusted proxy reports.
 *
 * Owns: the trusted-peer set (--forwarded-allow-ips: IPv4/IPv6 addresses and CIDR networks, `*`,
 * `unix:` for Unix-domain peers), matching an address against it, and reading RFC 7239
 * `Forwarded` (for=, proto=) and `X-Forwarded-For` / `X-Forwarded-Proto` from a parsed head.
 * Never: trusts a header from a peer not in the set, sets a half-parsed value (a malformed header
 * is ignored whole), or raises into the application.
 *
 * The rule (as uvicorn's ProxyHeadersMiddleware, plus RFC 7239): only when the connection's peer
 * is trusted, and only the one header family the operator chose (--proxy-headers-mode): the
 * X-Forwarded-For / X-Forwarded-Proto pair (`x-forwarded`, the default, as uvicorn) or RFC 7239
 * `Forwarded` (`forwarded`). The other family is never read: a proxy that sets one family passes
 * the other through from the client, so believing it would let any client choose its address and
 * scheme (RFC 7239 §8.1). The client is the nearest hop that is not itself trusted, walking the
 * list from the right (the leftmost when every hop is trusted); its port is the one the header
 * gives, else 0. The scheme is `X-Forwarded-Proto`'s last item, or the `proto=` of the chosen
 * `Forwarded` element, when it is `http` or `https` (any case); anything else leaves the scheme
 * alone. Several field lines of one name are one comma-separated list (RFC 9110 §5.3).
 */
#ifndef SK_PROXY_H
#define SK_PROXY_H

#include "sk_module.h"
#include "sk_http.h"
#include "sk_asgi.h"

#include <sys/socket.h>

typedef struct {
    uint8_t family;   /* 4 or 6 */
    uint8_t prefix;   /* bits */
    uint8_t addr[16]; /* network byte order; IPv4 in the first 4 */
} sk_net_t;

typedef struct {
    uint8_t enabled;   /* --proxy-headers */
    uint8_t all;       /* `*`: every peer is trusted */
    uint8_t unix_peer; /* `unix:`: Unix-domain peers are trusted */
    /* --proxy-headers-mode: 1 = `forwarded` (RFC 7239 Forwarded only), 0 = `x-forwarded` (the
     * X-Forwarded-For / X-Forwarded-Proto pair only) */
    uint8_t forwarded;
    size_t nnets;
    sk_net_t *nets; /* PyMem_Malloc'ed, owned */
} sk_proxy_t;

/* Parses the comma-separated --forwarded-allow-ips value into px (enabled is left as is).
 * 0, or -1 with ValueError naming the bad item. */
int sk_proxy_parse_allow(sk_proxy_t *px, const char *spec, size_t len);
void sk_proxy_free(sk_proxy_t *px);

/* Applies the header fields p (sk_asgi.h) of a request for a peer (unix_peer = 1 for a Unix-domain socket). On a change,
 * *client (a new reference replacing the borrowed one given, which is not released) and/or
 * *https (0/1; -1 = unchanged) are set. Returns 0, or -1 with an exception (memory only). */
int sk_proxy_apply(const sk_proxy_t *px, const sk_fields_t *p, const struct sockaddr *peer,
                   int unix_peer, PyObject **client, int *https);
/* New reference: the client sk_proxy_apply gives a scope for the header fields p, for a request
 * refused before it had one (its access line and trace event name the client an app's response
 * would: skirr-access-refusals); NULL without an exception when the proxy headers give none
 * (--proxy-headers off, the peer not trusted, no usable header: the caller names the
 * connection's client), NULL with an exception when out of memory. */
PyObject *sk_proxy_client(const sk_proxy_t *px, const sk_fields_t *p, const struct sockaddr *peer,
                          int unix_peer);

#endif
