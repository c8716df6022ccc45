/* sk_proxy.c — proxy headers (see sk_proxy.h for the rule). */
#include "sk_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#define NODE_MAX 96 /* longest node text accepted (a bracketed IPv6 with port is < 60) */

/* One parsed node: an IP address with an optional port, or an obfuscated/unknown identifier. */
typedef struct {
    int kind; /* 1 = address, 0 = obfuscated or "unknown", -1 = malformed */
    sk_net_t ip;
    int port; /* -1 when absent or obfuscated */
} node_t;

static int
is_ows(char ch)
{
    return ch == ' ' || ch == '\t';
}

static int
is_tchar(unsigned char ch)
{
    /* RFC 9110 §5.6.2 token characters. */
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
        return 1;
    }
    return ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static int
ieq(const char *a, size_t alen, const char *lit)
{
    /* 1 if a[0..alen) equals the lower-case literal, ignoring ASCII case. */
    size_t n = strlen(lit);
    if (alen != n) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = a[i];
        if (ch >= 'A' && ch <= 'Z') {
            ch = (char)(ch + 32);
        }
        if (ch != lit[i]) {
            return 0;
        }
    }
    return 1;
}

static int
parse_ip(const char *s, size_t len, sk_net_t *out)
{
    /* 1 and *out for a literal IPv4 or IPv6 address (IPv4-mapped IPv6 becomes IPv4), else 0. */
    char buf[INET6_ADDRSTRLEN + 1];
    if (len == 0 || len >= sizeof(buf)) {
        return 0;
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = 4;
        out->prefix = 32;
        return 1;
    }
    if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(out->addr, mapped, 12) == 0) {
            memmove(out->addr, out->addr + 12, 4);
            memset(out->addr + 4, 0, 12);
            out->family = 4;
            out->prefix = 32;
            return 1;
        }
        out->family = 6;
        out->prefix = 128;
        return 1;
    }
    return 0;
}

static int
parse_port(const char *s, size_t len)
{
    /* The port 0..65535, -2 for an obfuscated port ("_" ...), -1 when malformed. */
    if (len > 0 && s[0] == '_') {
        for (size_t i = 1; i < len; i++) {
            if (!is_tchar((unsigned char)s[i])) {
                return -1;
            }
        }
        return -2;
    }
    if (len == 0 || len > 5) {
        return -1;
    }
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }
        v = v * 10 + (s[i] - '0');
    }
    return v <= 65535 ? v : -1;
}

static node_t
parse_node(const char *s, size_t len)
{
    /* RFC 7239 §6 node: IPv4 [":" port], "[" IPv6 "]" [":" port], a bare IPv6 (as X-Forwarded-For
     * carries it), "unknown", or an obfuscated "_name". */
    node_t n = {.kind = -1, .port = -1};
    if (len == 0 || len > NODE_MAX) {
        return n;
    }
    if (ieq(s, len, "unknown") || s[0] == '_') {
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)s[i];
            if (!(is_tchar(ch) && ch != '!' && ch != '#')) {
                return n;
            }
        }
        n.kind = 0;
        return n;
    }
    const char *host = s;
    size_t hlen = len;
    const char *port = NULL;
    size_t plen = 0;
    if (s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (close == NULL) {
            return n;
        }
        host = s + 1;
        hlen = (size_t)(close - host);
        size_t rest = len - (size_t)(close - s) - 1;
        if (rest > 0) {
            if (close[1] != ':') {
                return n;
            }
            port = close + 2;
            plen = rest - 1;
        }
        if (memchr(host, ':', hlen) == NULL) {
            return n; /* brackets hold IPv6 only */
        }
    }
    else {
        const char *colon = memchr(s, ':', len);
        if (colon != NULL && memchr(colon + 1, ':', len - (size_t)(colon - s) - 1) == NULL) {
            hlen = (size_t)(colon - s); /* one colon: IPv4 ":" port */
            port = colon + 1;
            plen = len - hlen - 1;
        }
    }
    if (!parse_ip(host, hlen, &n.ip)) {
        return n;
    }
    if (port != NULL) {
        int p = parse_port(port, plen);
        if (p == -1) {
            return n;
        }
        n.port = p >= 0 ? p : -1;
    }
    n.kind = 1;
    return n;
}

static int
net_contains(const sk_net_t *net, const sk_net_t *ip)
{
    if (net->family != ip->family) {
        return 0;
    }
    unsigned bits = net->prefix;
    size_t whole = bits / 8;
    if (memcmp(net->addr, ip->addr, whole) != 0) {
        return 0;
    }
    unsigned rest = bits % 8;
    if (rest == 0) {
        return 1;
    }
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (net->addr[whole] & mask) == (ip->addr[whole] & mask);
}

static int
trusted_ip(const sk_proxy_t *px, const sk_net_t *ip)
{
    if (px->all) {
        return 1;
    }
    for (size_t i = 0; i < px->nnets; i++) {
        if (net_contains(&px->nets[i], ip)) {
            return 1;
        }
    }
    return 0;
}

static int
trusted_peer(const sk_proxy_t *px, const struct sockaddr *peer, int unix_peer)
{
    if (unix_peer || peer == NULL || peer->sa_family == AF_UNIX) {
        return px->all || px->unix_peer;
    }
    if (px->all) {
        return 1;
    }
    sk_net_t ip = {0};
    if (peer->sa_family == AF_INET) {
        ip.family = 4;
        memcpy(ip.addr, &((const struct sockaddr_in *)peer)->sin_addr, 4);
    }
    else if (peer->sa_family == AF_INET6) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        const uint8_t *a = ((const struct sockaddr_in6 *)peer)->sin6_addr.s6_addr;
        if (memcmp(a, mapped, 12) == 0) { /* IPv4-mapped (a dual-stack listener): as IPv4 */
            ip.family = 4;
            memcpy(ip.addr, a + 12, 4);
        }
        else {
            ip.family = 6;
            memcpy(ip.addr, a, 16);
        }
    }
    else {
        return 0;
    }
    return trusted_ip(px, &ip);
}

int
sk_proxy_parse_allow(sk_proxy_t *px, const char *spec, size_t len)
{
    size_t count = 1;
    for (size_t i = 0; i < len; i++) {
        count += spec[i] == ',';
    }
    sk_net_t *nets = PyMem_Calloc(count, sizeof(sk_net_t));
    if (nets == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t n = 0, pos = 0;
    while (pos <= len) {
        const char *comma = memchr(spec + pos, ',', len - pos);
        size_t end = comma ? (size_t)(comma - spec) : len;
        size_t a = pos, b = end;
        while (a < b && is_ows(spec[a])) {
            a++;
        }
        while (b > a && is_ows(spec[b - 1])) {
            b--;
        }
        const char *item = spec + a;
        size_t ilen = b - a;
        pos = end + 1;
        if (ilen == 0) {
            continue;
        }
        if (ilen == 1 && item[0] == '*') {
            px->all = 1;
            continue;
        }
        if (ieq(item, ilen, "unix:")) {
            px->unix_peer = 1;
            continue;
        }
        const char *slash = memchr(item, '/', ilen);
        size_t alen = slash ? (size_t)(slash - item) : ilen;
        sk_net_t net;
        int ok = parse_ip(item, alen, &net);
        if (ok && slash != NULL) {
            int bits = parse_port(slash + 1, ilen - alen - 1); /* digits, like a port */
            unsigned max = net.family == 4 ? 32 : 128;
            ok = bits >= 0 && (unsigned)bits <= max;
            if (ok) {
                net.prefix = (uint8_t)bits;
            }
        }
        if (!ok) {
            PyErr_Format(PyExc_ValueError,
                         "forwarded_allow_ips: %.*s is not an IP address, a network, '*' or "
                         "'unix:'",
                         (int)(ilen > 100 ? 100 : ilen), item);
            PyMem_Free(nets);
            return -1;
        }
        nets[n++] = net;
    }
    PyMem_Free(px->nets);
    px->nets = nets;
    px->nnets = n;
    return 0;
}

void
sk_proxy_free(sk_proxy_t *px)
{
    PyMem_Free(px->nets);
    px->nets = NULL;
    px->nnets = 0;
}

/* ---- X-Forwarded-For / X-Forwarded-Proto ---------------------------------------------------- */

static int
prev_item(const char *v, size_t *end, const char **item, size_t *ilen)
{
    /* The comma-separated item ending at *end (walking right to left), OWS trimmed; moves *end
     * before its comma. 1 while an item was taken, 0 once the value is used up. */
    if (*end == (size_t)-1) {
        return 0;
    }
    size_t b = *end, a = b;
    while (a > 0 && v[a - 1] != ',') {
        a--;
    }
    *end = a > 0 ? a - 1 : (size_t)-1;
    while (a < b && is_ows(v[a])) {
        a++;
    }
    while (b > a && is_ows(v[b - 1])) {
        b--;
    }
    *item = v + a;
    *ilen = b - a;
    return 1;
}

static int
xff_client(const sk_proxy_t *px, const sk_fields_t *p, node_t *chosen)
{
    /* 1 with the client in *chosen, 0 when there is no usable X-Forwarded-For (absent, or any
     * item malformed). */
    int found = 0, any = 0;
    node_t leftmost = {.kind = -1};
    for (uint32_t i = p->n; i-- > 0;) {
        const sk_field_t *f = &p->v[i];
        if (!ieq((p->base + f->name.off), f->name.len, "x-forwarded-for")) {
            continue;
        }
        const char *v = (p->base + f->value.off);
        size_t end = f->value.len, ilen;
        const char *item;
        while (prev_item(v, &end, &item, &ilen)) {
            node_t n = parse_node(item, ilen);
            if (n.kind != 1) {
                return 0; /* malformed or not an address: the whole header is ignored */
            }
            any = 1;
            leftmost = n;
            if (!found && !trusted_ip(px, &n.ip)) {
                *chosen = n;
                found = 1;
            }
        }
    }
    if (!found && any) {
        *chosen = leftmost;
        found = 1;
    }
    return found;
}

static int
proto_https(const char *s, size_t len)
{
    /* 1 https (or wss, which some proxies send for a WebSocket upgrade), 0 http (or ws), -1
     * anything else. The scope says https/http, a websocket scope wss/ws. */
    if (ieq(s, len, "https") || ieq(s, len, "wss")) {
        return 1;
    }
    return ieq(s, len, "http") || ieq(s, len, "ws") ? 0 : -1;
}

static int
xfp_https(const sk_fields_t *p)
{
    /* The last X-Forwarded-Proto item: 1 https, 0 http, -1 absent or anything else. */
    for (uint32_t i = p->n; i-- > 0;) {
        const sk_field_t *f = &p->v[i];
        if (!ieq((p->base + f->name.off), f->name.len, "x-forwarded-proto")) {
            continue;
        }
        const char *v = (p->base + f->value.off);
        size_t end = f->value.len, ilen;
        const char *item;
        if (prev_item(v, &end, &item, &ilen)) {
            return proto_https(item, ilen);
        }
        return -1;
    }
    return -1;
}

/* ---- Forwarded (RFC 7239) ------------------------------------------------------------------- */

typedef struct {
    node_t node; /* kind -1 here = no for= pair */
    int https;   /* -1 = no proto= */
    int has_for;
    int has_proto;
    int pairs; /* 0: an empty list element, skipped */
} fwd_elem_t;

static size_t
fwd_value(const char *v, size_t len, size_t pos, char *out, size_t *olen)
{
    /* Parses a token or quoted-string at v[pos]; its unescaped text into out (NODE_MAX bytes).
     * Returns the position after it, or 0 when malformed. */
    size_t n = 0;
    if (pos < len && v[pos] == '"') {
        pos++;
        while (pos < len && v[pos] != '"') {
            char ch = v[pos];
            if (ch == '\\') {
                if (++pos >= len) {
                    return 0;
                }
                ch = v[pos];
            }
            if ((unsigned char)ch < 0x20 && ch != '\t') {
                return 0;
            }
            if (n >= NODE_MAX) {
                return 0;
            }
            out[n++] = ch;
            pos++;
        }
        if (pos >= len) {
            return 0; /* unterminated */
        }
        pos++;
    }
    else {
        while (pos < len && is_tchar((unsigned char)v[pos])) {
            if (n >= NODE_MAX) {
                return 0;
            }
            out[n++] = v[pos++];
        }
        if (n == 0) {
            return 0;
        }
    }
    *olen = n;
    return pos;
}

static int
fwd_client(const sk_proxy_t *px, const sk_fields_t *p, fwd_elem_t *chosen)
{
    /* 1 with the chosen element, 0 when there is no usable Forwarded (absent, or malformed
     * anywhere: ignored whole; a proto= other than http, https, ws or wss, or a parameter given
     * twice in an element, is malformed). Empty list elements are skipped (RFC 9110 §5.6.1.2).
     * Walking left to right, the last element whose for= is not a
     * trusted address is the nearest untrusted hop; the first element when every hop is trusted. */
    int any = 0, found = 0;
    fwd_elem_t first = {.node = {.kind = -1}, .https = -1};
    for (uint32_t i = 0; i < p->n; i++) {
        const sk_field_t *f = &p->v[i];
        if (!ieq((p->base + f->name.off), f->name.len, "forwarded")) {
            continue;
        }
        const char *v = (p->base + f->value.off);
        size_t len = f->value.len, pos = 0;
        for (;;) { /* one element per turn */
            fwd_elem_t e = {.node = {.kind = -1}, .https = -1};
            for (;;) { /* one pair per turn (empty pairs allowed) */
                while (pos < len && is_ows(v[pos])) {
                    pos++;
                }
                if (pos >= len || v[pos] == ',' || v[pos] == ';') {
                    if (pos < len && v[pos] == ';') {
                        pos++;
                        continue;
                    }
                    break;
                }
                size_t name = pos;
                while (pos < len && is_tchar((unsigned char)v[pos])) {
                    pos++;
                }
                size_t name_len = pos - name;
                if (name_len == 0 || pos >= len || v[pos] != '=') {
                    return 0;
                }
                char text[NODE_MAX];
                size_t tlen = 0;
                pos = fwd_value(v, len, pos + 1, text, &tlen);
                if (pos == 0) {
                    return 0;
                }
                e.pairs++;
                if (ieq(v + name, name_len, "for")) {
                    if (e.has_for) {
                        return 0; /* a parameter occurs once per element (RFC 7239 §4) */
                    }
                    e.has_for = 1;
                    e.node = parse_node(text, tlen);
                    if (e.node.kind < 0) {
                        return 0;
                    }
                }
                else if (ieq(v + name, name_len, "proto")) {
                    if (e.has_proto) {
                        return 0;
                    }
                    e.has_proto = 1;
                    e.https = proto_https(text, tlen);
                    if (e.https < 0) {
                        return 0; /* not a scheme skirr serves: ignored whole, never half-applied */
                    }
                }
                while (pos < len && is_ows(v[pos])) {
                    pos++;
                }
                if (pos < len && v[pos] == ';') {
                    pos++;
                    continue;
                }
                break;
            }
            if (e.pairs > 0) {
                if (!any) {
                    first = e;
                }
                any = 1;
                if (!(e.node.kind == 1 && trusted_ip(px, &e.node.ip))) {
                    *chosen = e;
                    found = 1;
                }
            }
            if (pos >= len) {
                break;
            }
            if (v[pos] != ',') {
                return 0;
            }
            pos++;
        }
    }
    if (!any) {
        return 0;
    }
    if (!found) {
        *chosen = first;
    }
    return 1;
}

/* ---- applying ------------------------------------------------------------------------------- */

static PyObject *
node_client(const node_t *n)
{
    /* New reference: (host, port) for an address node; NULL with an exception. */
    char host[INET6_ADDRSTRLEN];
    inet_ntop(n->ip.family == 4 ? AF_INET : AF_INET6, n->ip.addr, host, sizeof(host));
    return Py_BuildValue("(si)", host, n->port >= 0 ? n->port : 0);
}

int
sk_proxy_apply(const sk_proxy_t *px, const sk_fields_t *p, const struct sockaddr *peer,
               int unix_peer, PyObject **client, int *https)
{
    *https = -1;
    if (!px->enabled || !trusted_peer(px, peer, unix_peer)) {
        return 0;
    }
    if (px->forwarded) {
        fwd_elem_t e;
        if (fwd_client(px, p, &e)) {
            *https = e.https;
            if (e.node.kind == 1) {
                PyObject *c = node_client(&e.node);
                if (c == NULL) {
                    return -1;
                }
                *client = c;
            }
        }
        return 0;
    }
    node_t n;
    *https = xfp_https(p);
    if (xff_client(px, p, &n)) {
        PyObject *c = node_client(&n);
        if (c == NULL) {
            return -1;
        }
        *client = c;
    }
    return 0;
}

PyObject *
sk_proxy_client(const sk_proxy_t *px, const sk_fields_t *p, const struct sockaddr *peer,
                int unix_peer)
{
    /* New reference or NULL (see sk_proxy.h): sk_proxy_apply sets client only on a change, so
     * starting from NULL leaves NULL when the headers give no client. */
    PyObject *client = NULL;
    int https;
    if (sk_proxy_apply(px, p, peer, unix_peer, &client, &https) < 0) {
        return NULL;
    }
    return client;
}
