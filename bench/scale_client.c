/* The scale rows' connection holder (issue 37; bench/run.py builds it into bench/build/scale_client).
 *
 * Opens N TCP connections to 127.0.0.1:PORT, each from a source address of its own spread over
 * 127.0.0.0/8 (bind() to 127.0.x.y with IP_BIND_ADDRESS_NO_PORT before connect(), -a addresses
 * used in turn, so that 50,000 connections do not exhaust one address's ephemeral ports), at most
 * -w of them opening at once (nonblocking sockets, level-triggered epoll). On each, one exchange:
 *   -m http  one complete HTTP/1.1 keep-alive GET of -p PATH; the response must be -s STATUS with
 *            a Content-Length body equal byte for byte to -b BODY and nothing after it;
 *   -m ws    the RFC 6455 opening handshake on -p PATH; the answer must be `101`, carry
 *            `Upgrade: websocket` and the right Sec-WebSocket-Accept, and nothing after the head;
 *   -m tcp   none: the connection is held as soon as it is established, having sent nothing (the
 *            baseline of what a server spends on a connection before any request).
 * Then the connection idles: nothing more is sent or read. A wrong status, body or accept key, a
 * refused or reset connection, an early close or a connection not answered within -t seconds is
 * an error counted by kind, never a success. When no connection at all has been answered for -t
 * seconds, the ones not yet started are not tried and are counted as "stalled" (a server that
 * stops accepting must not hold the run for N / -w times -t seconds).
 *
 * Protocol on stdout (one JSON object per line, each prefixed `SCALE `, flushed):
 *   1. when every connection has succeeded or failed: {"phase": "open", "n", "ok", "open_s" (from
 *      the first connect() to the last answer, seconds), "errors": {kind: count}, "first_error"};
 *   2. then it holds them until a line (or EOF) on stdin; then each held connection is checked
 *      still open (no EOF, no reset, no byte from the server while idle):
 *      {"phase": "held", "still_open", "closed_by_server", "reset", "data_while_idle"};
 *   3. then all are closed (close(): a FIN each, no WebSocket close handshake):
 *      {"phase": "closed", "closed", "close_s"} and it exits.
 * Exit status 0 when no connection failed or was found closed, 1 otherwise, 2 for a usage error
 * (also when RLIMIT_NOFILE's hard limit is below N + 16: the harness raises it before exec).
 *
 * Never: pipelines, sends a second request, answers or sends a WebSocket frame (pings are off on
 * every server in these rows), or keeps a read buffer for a held connection (only its fd).
 *
 *   cc -std=c11 -O2 -o scale_client scale_client.c && echo | ./scale_client PORT -n 10000 -b 'Hello, world!'
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "bench_client.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define HEAD_MAX 8192 /* a response's head and body, at most (bytes) */
#define FD_SPARE 16   /* descriptors beyond the N connections: stdio, epoll */

/* Error kinds, in the order reported. */
enum {
    E_CONNECT, E_SEND, E_RESET, E_EOF, E_STATUS, E_BODY, E_ACCEPT, E_EXTRA, E_TIMEOUT, E_STALLED,
    E_KINDS
};
static const char *const KIND[E_KINDS] = {"connect", "send",  "reset",   "eof",    "status",
                                          "body",    "accept", "extra", "timeout", "stalled"};

enum { S_FREE, S_CONNECTING, S_READING, S_HELD, S_FAILED };

typedef struct {
    int fd;
    int state;
    uint64_t deadline_ns;
    char *buf;  /* the answer so far (while S_READING only) */
    size_t have;
    char want[29]; /* -m ws: the Sec-WebSocket-Accept expected */
} conn_t;

typedef struct {
    int port;
    long n;
    int ws;
    int tcp;
    const char *path;
    const char *body;
    int status;
    long addrs;
    long window;
    double timeout_s;
} opts_t;

static long errors[E_KINDS];
static char first_error[256];
static uint64_t rng;

static int
usage(const char *why)
{
    fprintf(stderr,
            "scale_client: %s\nusage: scale_client PORT -n N [-m http|ws|tcp] [-p PATH] "
            "[-b BODY] [-s STATUS] [-a ADDRS] [-w WINDOW] [-t TIMEOUT_S]\n",
            why);
    return 2;
}

/* Parses argv into o; 0, or a usage error's exit status (2) after saying why on stderr. */
static int
parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.n = 0, .path = "/", .body = "", .status = 200, .addrs = 64, .window = 128,
                  .timeout_s = 30.0};
    if (argc < 2) {
        return usage("no PORT");
    }
    char *end;
    int status_given = 0;
    long port = strtol(argv[1], &end, 10);
    if (*end || port < 1 || port > 65535) {
        return usage("PORT must be 1-65535");
    }
    o->port = (int)port;
    for (int i = 2; i < argc; i += 2) {
        const char *f = argv[i];
        if (i + 1 >= argc) {
            return usage("an option without its value");
        }
        const char *v = argv[i + 1];
        if (!strcmp(f, "-n") || !strcmp(f, "-a") || !strcmp(f, "-w") || !strcmp(f, "-s")) {
            long x = strtol(v, &end, 10);
            if (*end || x < 1) {
                return usage("-n, -a, -w and -s take a positive integer");
            }
            if (f[1] == 'n') {
                o->n = x;
            }
            else if (f[1] == 'a') {
                if (x > 254 * 254) {
                    return usage("-a: at most 64516 source addresses (127.0.1.1-127.0.254.254)");
                }
                o->addrs = x;
            }
            else if (f[1] == 'w') {
                o->window = x;
            }
            else {
                o->status = (int)x;
                status_given = 1;
            }
        }
        else if (!strcmp(f, "-m")) {
            if (strcmp(v, "http") && strcmp(v, "ws") && strcmp(v, "tcp")) {
                return usage("-m is http, ws or tcp");
            }
            o->ws = v[0] == 'w';
            o->tcp = v[0] == 't';
        }
        else if (!strcmp(f, "-p")) {
            if (v[0] != '/' || strpbrk(v, " \r\n")) {
                return usage("-p must start with / and hold no space or line break");
            }
            o->path = v;
        }
        else if (!strcmp(f, "-b")) {
            o->body = v;
        }
        else if (!strcmp(f, "-t")) {
            o->timeout_s = strtod(v, &end);
            if (*end || !(o->timeout_s > 0)) {
                return usage("-t takes a positive number of seconds");
            }
        }
        else {
            return usage("unknown option");
        }
    }
    if (o->n < 1) {
        return usage("-n N is required");
    }
    if ((o->ws || o->tcp) && status_given) {
        return usage("-s is for -m http (a WebSocket answer must be 101; -m tcp has none)");
    }
    if (strlen(o->body) > HEAD_MAX / 2) {
        return usage("-b: at most 4096 bytes");
    }
    return 0;
}

/* Counts an error of `kind` on c (the first one's text is kept) and closes c. */
static void
fail(conn_t *c, long id, int kind, const char *msg)
{
    if (!first_error[0]) {
        snprintf(first_error, sizeof first_error, "connection %ld: %s: %s", id, KIND[kind], msg);
    }
    errors[kind]++;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    free(c->buf);
    c->buf = NULL;
    c->state = S_FAILED;
}

/* Starts connection i: a socket bound to its source address, a nonblocking connect(). */
static void
start(const opts_t *o, int ep, conn_t *c, long i)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        die("socket");
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    long k = i % o->addrs;
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = loopback_source(k);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->state = S_CONNECTING;
    c->deadline_ns = now_ns() + (uint64_t)(o->timeout_s * 1e9);
    c->have = 0;
    if (bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0) {
        fail(c, i, E_CONNECT, strerror(errno));
        return;
    }
    if (connect(c->fd, (struct sockaddr *)&dst, sizeof dst) < 0 && errno != EINPROGRESS) {
        fail(c, i, E_CONNECT, strerror(errno));
        return;
    }
    struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = (uint64_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        die("epoll_ctl");
    }
}

/* The connection is up: sends its one request and waits for the answer (-m tcp: holds it). */
static void
send_request(const opts_t *o, int ep, conn_t *c, long i)
{
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        fail(c, i, E_CONNECT, strerror(err));
        return;
    }
    if (o->tcp) { /* established: held, having sent nothing */
        if (epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL) < 0) {
            die("epoll_ctl");
        }
        c->state = S_HELD;
        return;
    }
    char req[512];
    int n;
    if (o->ws) {
        char key[25];
        ws_key(&rng, key, c->want);
        n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n",
                     o->path, o->port, key);
    }
    else {
        n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", o->path,
                     o->port);
    }
    ssize_t w = send(c->fd, req, (size_t)n, MSG_NOSIGNAL);
    if (w != n) { /* a few hundred bytes into an empty socket buffer go in one send */
        fail(c, i, E_SEND, w < 0 ? strerror(errno) : "short send");
        return;
    }
    c->buf = malloc(HEAD_MAX + 1);
    if (!c->buf) {
        die("malloc");
    }
    c->state = S_READING;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) {
        die("epoll_ctl");
    }
}

/* Judges the answer so far: -1 incomplete, 0 complete and right, else 1 + the error kind (the
 * reason in why[256]). */
static int
judge(const opts_t *o, conn_t *c, char *why)
{
    char *end = memmem(c->buf, c->have, "\r\n\r\n", 4);
    if (!end) {
        return -1;
    }
    size_t head_len = (size_t)(end - c->buf) + 4;
    int status = -1;
    if (strncmp(c->buf, "HTTP/1.1 ", 9) == 0 && c->have >= 13 &&
        (c->buf[12] == ' ' || c->buf[12] == '\r')) {
        status = atoi(c->buf + 9);
    }
    int want = o->ws ? 101 : o->status;
    if (status != want) {
        char *eol = memmem(c->buf, c->have, "\r\n", 2);
        snprintf(why, 256, "expected %d, got '%.*s'", want, (int)(eol - c->buf), c->buf);
        return 1 + E_STATUS;
    }
    char saved = end[2];
    end[2] = '\0'; /* header_value() stops at the blank line */
    char got[128] = "";
    int r = 0;
    if (o->ws) {
        if (!header_value(c->buf, "Sec-WebSocket-Accept", got, sizeof got) ||
            strcmp(got, c->want) != 0) {
            snprintf(why, 256, "Sec-WebSocket-Accept '%s', expected '%s'", got, c->want);
            r = 1 + E_ACCEPT;
        }
        else if (!header_value(c->buf, "Upgrade", got, sizeof got) ||
                 strcasecmp(got, "websocket") != 0) {
            snprintf(why, 256, "101 without Upgrade: websocket");
            r = 1 + E_ACCEPT;
        }
        else if (c->have > head_len) {
            snprintf(why, 256, "%zu bytes after the 101's head", c->have - head_len);
            r = 1 + E_EXTRA;
        }
    }
    else if (!header_value(c->buf, "Content-Length", got, sizeof got)) {
        snprintf(why, 256, "no Content-Length");
        r = 1 + E_BODY;
    }
    else {
        size_t blen = strlen(o->body);
        char *e;
        unsigned long cl = strtoul(got, &e, 10);
        if (*e || cl != blen) {
            snprintf(why, 256, "Content-Length %s, expected %zu", got, blen);
            r = 1 + E_BODY;
        }
        else if (c->have < head_len + blen) {
            r = -1;
        }
        else if (memcmp(c->buf + head_len, o->body, blen) != 0) {
            snprintf(why, 256, "body '%.*s', expected '%s'", (int)blen, c->buf + head_len, o->body);
            r = 1 + E_BODY;
        }
        else if (c->have > head_len + blen) {
            snprintf(why, 256, "%zu bytes after the body", c->have - head_len - blen);
            r = 1 + E_EXTRA;
        }
    }
    end[2] = saved;
    return r;
}

/* Reads what arrived; on a complete right answer the connection is held (out of epoll). Returns
 * 1 when the connection is finished (held or failed), else 0. */
static int
on_readable(const opts_t *o, int ep, conn_t *c, long i)
{
    ssize_t n = recv(c->fd, c->buf + c->have, HEAD_MAX - c->have, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) {
            return 0;
        }
        fail(c, i, E_RESET, strerror(errno));
        return 1;
    }
    if (n == 0) {
        fail(c, i, E_EOF, "closed before the answer was complete");
        return 1;
    }
    c->have += (size_t)n;
    c->buf[c->have] = '\0';
    char why[256];
    int r = judge(o, c, why);
    if (r < 0 && c->have == HEAD_MAX) {
        snprintf(why, sizeof why, "answer longer than %d bytes", HEAD_MAX);
        r = 1 + E_EXTRA;
    }
    if (r < 0) {
        return 0;
    }
    if (r > 0) {
        fail(c, i, r - 1, why);
        return 1;
    }
    if (epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL) < 0) {
        die("epoll_ctl");
    }
    free(c->buf);
    c->buf = NULL;
    c->state = S_HELD;
    return 1;
}

static void
print_open(const opts_t *o, long ok, double open_s)
{
    printf("SCALE {\"phase\": \"open\", \"n\": %ld, \"ok\": %ld, \"open_s\": %.6f, \"errors\": {",
           o->n, ok, open_s);
    for (int k = 0, sep = 0; k < E_KINDS; k++) {
        if (errors[k]) {
            printf("%s\"%s\": %ld", sep++ ? ", " : "", KIND[k], errors[k]);
        }
    }
    printf("}, \"first_error\": \"");
    for (const char *p = first_error; *p; p++) { /* JSON string: escape what needs it */
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p);
        }
        else if ((unsigned char)*p < 0x20) {
            printf("\\u%04x", *p);
        }
        else {
            putchar(*p);
        }
    }
    printf("\"}\n");
    fflush(stdout);
}

int
main(int argc, char **argv)
{
    opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        return rc;
    }
    rc = raise_nofile("scale_client", o.n + FD_SPARE);
    if (rc) {
        return rc;
    }
    rng = random_seed();
    conn_t *cs = calloc((size_t)o.n, sizeof *cs);
    long *flight = malloc((size_t)o.window * sizeof *flight);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!cs || !flight || ep < 0) {
        die("setup");
    }
    long next = 0, nflight = 0, ok = 0;
    uint64_t t0 = now_ns(), last_ok = t0;
    struct epoll_event evs[256];
    while (next < o.n || nflight) {
        while (next < o.n && nflight < o.window) {
            start(&o, ep, &cs[next], next);
            if (cs[next].state == S_CONNECTING) {
                flight[nflight++] = next;
            }
            next++;
        }
        int k = epoll_wait(ep, evs, 256, 100);
        if (k < 0 && errno != EINTR) {
            die("epoll_wait");
        }
        for (int e = 0; e < k; e++) {
            long i = (long)evs[e].data.u64;
            conn_t *c = &cs[i];
            if (c->state == S_CONNECTING) {
                send_request(&o, ep, c, i);
            }
            else if (c->state == S_READING) {
                on_readable(&o, ep, c, i);
            }
        }
        uint64_t now = now_ns();
        for (long f = 0; f < nflight;) { /* the finished leave the window; the late fail */
            conn_t *c = &cs[flight[f]];
            if ((c->state == S_CONNECTING || c->state == S_READING) && now > c->deadline_ns) {
                fail(c, flight[f], E_TIMEOUT, "no complete answer in time");
            }
            if (c->state == S_HELD || c->state == S_FAILED) {
                if (c->state == S_HELD) {
                    ok++;
                    last_ok = now;
                }
                flight[f] = flight[--nflight];
            }
            else {
                f++;
            }
        }
        if (next < o.n && now - last_ok > (uint64_t)(o.timeout_s * 1e9)) {
            if (!first_error[0]) {
                snprintf(first_error, sizeof first_error,
                         "stalled: no connection answered in %.0f s; %ld not tried", o.timeout_s,
                         o.n - next);
            }
            errors[E_STALLED] += o.n - next;
            next = o.n;
        }
    }
    print_open(&o, ok, (double)(now_ns() - t0) / 1e9);

    char line[64];
    (void)!fgets(line, sizeof line, stdin); /* a line or EOF: check, then close */
    long open = 0, eof = 0, reset = 0, data = 0;
    for (long i = 0; i < o.n; i++) {
        if (cs[i].state != S_HELD) {
            continue;
        }
        char b;
        ssize_t n = recv(cs[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            open++;
        }
        else if (n == 0) {
            eof++;
        }
        else if (n < 0) {
            reset++;
        }
        else {
            data++;
        }
    }
    printf("SCALE {\"phase\": \"held\", \"still_open\": %ld, \"closed_by_server\": %ld, "
           "\"reset\": %ld, \"data_while_idle\": %ld}\n",
           open, eof, reset, data);
    fflush(stdout);
    uint64_t t1 = now_ns();
    long closed = 0;
    for (long i = 0; i < o.n; i++) {
        if (cs[i].state == S_HELD) {
            close(cs[i].fd);
            closed++;
        }
    }
    printf("SCALE {\"phase\": \"closed\", \"closed\": %ld, \"close_s\": %.6f}\n", closed,
           (double)(now_ns() - t1) / 1e9);
    fflush(stdout);
    return ok == o.n && open == ok ? 0 : 1;
}
