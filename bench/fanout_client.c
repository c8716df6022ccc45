/* The fan-out rows' client (issue 37 item 3; bench/run.py builds it into
 * bench/build/fanout_client).
 *
 * Drives bench/apps/ws_apps.py's `fanout` app (or any server that speaks its protocol): N
 * subscriber WebSockets on -p PATH, then one publisher on -P PATH; the publisher sends a message
 * and the app sends it to every subscriber, then answers the publisher `sent N`. This client owns:
 *   - opening the N subscribers from source addresses spread over 127.0.0.0/8 (as scale_client.c,
 *     at most -w opening at once, nonblocking, level-triggered epoll): each one's RFC 6455
 *     handshake checked (`101`, `Upgrade: websocket`, the right Sec-WebSocket-Accept), then the
 *     app's first frame, the text `welcome`, which says the app holds it in its set; then the
 *     publisher's handshake (it gets no welcome);
 *   - -W warm-up broadcasts, then -k measured ones, one at a time: each an -s byte text message,
 *     masked as RFC 6455 §5.3 requires of a client, distinct per broadcast (its sequence number in
 *     the first bytes, letters that depend on it after), so a stale, duplicated or corrupt frame
 *     never compares equal; a broadcast ends when every subscriber has had a frame of it and the
 *     publisher its ack, or after -t seconds;
 *   - per subscriber and broadcast: exactly one unmasked, unfragmented text frame equal byte for
 *     byte to the message sent; the time from the publisher's send() to the moment the LAST
 *     subscriber has read its whole frame (a broadcast every subscriber got; p50, p99, max over
 *     the measured ones, microseconds), and the publisher's ack, exactly `sent N`.
 * Pings are answered with pongs (counted, not errors). Anything else is an error counted by kind:
 * a wrong, stale or corrupt frame ("payload"), a second right one ("duplicate"), a subscriber that
 * has not got a broadcast when it ends ("missing": N x broadcasts - the right frames), a wrong or
 * absent ack ("ack"), a masked, fragmented, reserved-bit or oversized frame ("protocol"), a close
 * frame or EOF ("eof"), a reset, and the opening's kinds (connect, send, status, accept, welcome,
 * timeout: not welcomed within 30 s; stalled: when none has been welcomed for 30 s the rest are
 * not tried).
 *
 * Protocol on stdout (one JSON object per line, each prefixed `FANOUT `, flushed):
 *   1. {"phase": "open", "n", "ok" (subscribers welcomed), "publisher" (1 when its handshake
 *      succeeded), "open_s" (seconds), "errors": {kind: count}, "first_error"};
 *   2. when all are open, after the warm-up: {"phase": "start"}, then it waits for a line (or EOF)
 *      on stdin before the first measured broadcast, so the harness reads the server's CPU time
 *      first; after the last: {"phase": "end"} (every subscriber has had it, or it is counted
 *      missing, and the publisher has its ack: the server has nothing left to send);
 *   3. {"phase": "done", "n", "size", "broadcasts" (measured ones sent), "delivered" (right frames
 *      in them), "expected" (N x -k), "complete" (measured broadcasts every subscriber got),
 *      "p50_us", "p99_us", "max_us" (time to the last subscriber over the complete ones),
 *      "ack_p50_us" (publisher's send to its ack), "cpu_s" and "wall_s" (this client's over the
 *      measured broadcasts), "pongs", "errors", "first_error"}; then every connection is closed
 *      (a FIN, no close handshake) and it exits.
 * Exit status 0 when there was no error of any kind (warm-up included), 1 otherwise, 2 for a usage
 * error (also when RLIMIT_NOFILE's hard limit is below N + 17).
 *
 * Never: offers an extension or subprotocol, sends a subscriber anything but pongs, or starts a
 * broadcast before the previous one has ended.
 *
 *   cc -std=c11 -O2 -o fanout_client fanout_client.c && ./fanout_client PORT -n 1000 -s 64 -k 100
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#define HEAD_MAX 8192        /* the 101 response's head, at most (bytes) */
#define FD_SPARE 17          /* descriptors beyond the N subscribers: the publisher, stdio, epoll */
#define MSG_MIN 16           /* -s at least this: the sequence number and some letters */
#define MSG_MAX 65535        /* -s at most this: a 16-bit length, one frame */
#define CTRL_MAX 125         /* a control frame's payload, at most (RFC 6455 §5.5) */
#define WELCOME "welcome"    /* the app's first frame to a subscriber: it is in the app's set */
#define OPEN_TIMEOUT_S 30.0  /* a connection not welcomed within this long is an error */

enum { OP_CONT = 0, OP_TEXT = 1, OP_BINARY = 2, OP_CLOSE = 8, OP_PING = 9, OP_PONG = 10 };

/* Error kinds, in the order reported. */
enum {
    E_CONNECT, E_SEND, E_RESET, E_EOF, E_STATUS, E_ACCEPT, E_PROTOCOL, E_WELCOME, E_TIMEOUT,
    E_STALLED, E_PAYLOAD, E_DUPLICATE, E_MISSING, E_ACK, E_KINDS
};
static const char *const KIND[E_KINDS] = {
    "connect", "send",    "reset",   "eof",     "status",    "accept",  "protocol",
    "welcome", "timeout", "stalled", "payload", "duplicate", "missing", "ack"};

enum { S_FREE, S_CONNECTING, S_HANDSHAKE, S_READY, S_FAILED };

typedef struct {
    int fd;
    int state;
    int head_done;        /* the 101's head has been read and checked */
    long settled;         /* the last broadcast this subscriber had a frame of; -1: none */
    uint64_t deadline_ns; /* while opening */
    unsigned char *buf;   /* bytes read and not yet parsed */
    size_t have;
    char want[29]; /* the Sec-WebSocket-Accept expected */
} conn_t;

typedef struct {
    int port;
    long n;
    size_t size;
    long broadcasts;
    long warmup;
    const char *path;
    const char *pub_path;
    long addrs;
    long window;
    double timeout_s;
} opts_t;

static opts_t o;
static conn_t *cs; /* the N subscribers, then the publisher at index N */
static int ep;
static size_t cap; /* each connection's read buffer (bytes) */
static uint64_t rng;
static long errors[E_KINDS];
static char first_error[256];
static long pongs;

/* The broadcast in progress (cur >= 0) and what it has had so far. */
static long cur = -1;
static unsigned char *expect; /* its message, o.size bytes */
static long pending;          /* subscribers still to have a frame of it */
static long got;              /* subscribers that had it right */
static int acked;             /* the publisher had its ack */
static int ack_right;         /* ... and it was right */
static uint64_t t_last, t_ack;
static char ack_want[32];
static size_t ack_len;

static int
usage(const char *why)
{
    fprintf(stderr,
            "fanout_client: %s\nusage: fanout_client PORT -n N [-s SIZE] [-k BROADCASTS] "
            "[-W WARMUP] [-p PATH] [-P PUBLISHER_PATH] [-a ADDRS] [-w WINDOW] [-t TIMEOUT_S]\n",
            why);
    return 2;
}

/* Parses argv into o; 0, or a usage error's exit status (2) after saying why on stderr. */
static int
parse_args(int argc, char **argv)
{
    o = (opts_t){.size = 64, .broadcasts = 100, .warmup = 5, .path = "/sub", .pub_path = "/pub",
                 .addrs = 64, .window = 128, .timeout_s = 10.0};
    if (argc < 2) {
        return usage("no PORT");
    }
    char *end;
    long port = strtol(argv[1], &end, 10);
    if (*end || port < 1 || port > 65535) {
        return usage("PORT must be 1-65535");
    }
    o.port = (int)port;
    for (int i = 2; i < argc; i += 2) {
        const char *f = argv[i];
        if (i + 1 >= argc) {
            return usage("an option without its value");
        }
        const char *v = argv[i + 1];
        if (strlen(f) == 2 && f[0] == '-' && strchr("nskWaw", f[1])) {
            long x = strtol(v, &end, 10);
            if (*end || x < (f[1] == 'W' ? 0 : 1)) {
                return usage("-n, -s, -k, -a and -w take a positive integer, -W one >= 0");
            }
            switch (f[1]) {
            case 'n': o.n = x; break;
            case 's':
                if (x < MSG_MIN || x > MSG_MAX) {
                    return usage("-s: 16 to 65535 bytes");
                }
                o.size = (size_t)x;
                break;
            case 'k': o.broadcasts = x; break;
            case 'W': o.warmup = x; break;
            case 'a':
                if (x > 254 * 254) {
                    return usage("-a: at most 64516 source addresses (127.0.1.1-127.0.254.254)");
                }
                o.addrs = x;
                break;
            default: o.window = x; break;
            }
        }
        else if (!strcmp(f, "-p") || !strcmp(f, "-P")) {
            if (v[0] != '/' || strpbrk(v, " \r\n")) {
                return usage("-p and -P must start with / and hold no space or line break");
            }
            *(f[1] == 'p' ? &o.path : &o.pub_path) = v;
        }
        else if (!strcmp(f, "-t")) {
            o.timeout_s = strtod(v, &end);
            if (*end || !(o.timeout_s > 0)) {
                return usage("-t takes a positive number of seconds");
            }
        }
        else {
            return usage("unknown option");
        }
    }
    if (o.n < 1) {
        return usage("-n N is required");
    }
    return 0;
}

/* Counts `count` errors of `kind` (the first one's text is kept, naming connection id when it is
 * one connection's, id >= 0). */
static void
count_error(long id, int kind, long count, const char *msg)
{
    if (!first_error[0] && id >= 0) {
        snprintf(first_error, sizeof first_error, "connection %ld: %s: %s", id, KIND[kind], msg);
    }
    else if (!first_error[0]) {
        snprintf(first_error, sizeof first_error, "%s: %s", KIND[kind], msg);
    }
    errors[kind] += count;
}

/* Counts an error of `kind` on connection i and closes it; a subscriber the broadcast in progress
 * was waiting for no longer is waited for. */
static void
fail(long i, int kind, const char *msg)
{
    conn_t *c = &cs[i];
    count_error(i, kind, 1, msg);
    if (i < o.n && c->state == S_READY && cur >= 0 && c->settled != cur) {
        pending--;
    }
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
start(long i)
{
    conn_t *c = &cs[i];
    c->settled = -1;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        die("socket");
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* no broadcast waits on Nagle */
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = loopback_source(i % o.addrs);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o.port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->state = S_CONNECTING;
    c->deadline_ns = now_ns() + (uint64_t)(OPEN_TIMEOUT_S * 1e9);
    c->buf = malloc(cap);
    if (!c->buf) {
        die("malloc");
    }
    if (bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0) {
        fail(i, E_CONNECT, strerror(errno));
        return;
    }
    if (connect(c->fd, (struct sockaddr *)&dst, sizeof dst) < 0 && errno != EINPROGRESS) {
        fail(i, E_CONNECT, strerror(errno));
        return;
    }
    struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = (uint64_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        die("epoll_ctl");
    }
}

/* Writes all of p[0, n) to connection i at once (a small frame into a socket buffer the server
 * keeps empty); 0, or -1 after failing the connection. */
static int
send_all(long i, const void *p, size_t n)
{
    ssize_t w = send(cs[i].fd, p, n, MSG_NOSIGNAL);
    if (w != (ssize_t)n) {
        fail(i, E_SEND, w < 0 ? strerror(errno) : "short send");
        return -1;
    }
    return 0;
}

/* Connection i is up: sends its upgrade request (the publisher's path for the publisher). */
static void
send_upgrade(long i)
{
    conn_t *c = &cs[i];
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        fail(i, E_CONNECT, strerror(err));
        return;
    }
    char key[25], req[512];
    ws_key(&rng, key, c->want);
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n",
                     i == o.n ? o.pub_path : o.path, o.port, key);
    if (send_all(i, req, (size_t)n) < 0) {
        return;
    }
    c->state = S_HANDSHAKE;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) {
        die("epoll_ctl");
    }
}

/* Checks the 101's head in connection i's buffer: -1 incomplete, 0 right (the head consumed, what
 * follows it kept), 1 wrong (the connection failed). */
static int
check_head(long i)
{
    conn_t *c = &cs[i];
    char *head = (char *)c->buf;
    char *end = memmem(head, c->have, "\r\n\r\n", 4);
    if (!end) {
        if (c->have >= HEAD_MAX) {
            fail(i, E_STATUS, "no end of the response head in 8192 bytes");
            return 1;
        }
        return -1;
    }
    size_t head_len = (size_t)(end - head) + 4;
    char saved = end[2];
    end[2] = '\0'; /* header_value() stops at the blank line */
    char got_v[128] = "", why[256];
    int kind = -1;
    if (strncmp(head, "HTTP/1.1 101", 12) != 0 || (head[12] != ' ' && head[12] != '\r')) {
        char *eol = strstr(head, "\r\n");
        snprintf(why, sizeof why, "expected 101, got '%.*s'", (int)(eol - head), head);
        kind = E_STATUS;
    }
    else if (!header_value(head, "Sec-WebSocket-Accept", got_v, sizeof got_v) ||
             strcmp(got_v, c->want) != 0) {
        snprintf(why, sizeof why, "Sec-WebSocket-Accept '%s', expected '%s'", got_v, c->want);
        kind = E_ACCEPT;
    }
    else if (!header_value(head, "Upgrade", got_v, sizeof got_v) ||
             strcasecmp(got_v, "websocket") != 0) {
        snprintf(why, sizeof why, "101 without Upgrade: websocket");
        kind = E_ACCEPT;
    }
    end[2] = saved;
    if (kind >= 0) {
        fail(i, kind, why);
        return 1;
    }
    memmove(c->buf, c->buf + head_len, c->have - head_len);
    c->have -= head_len;
    c->head_done = 1;
    if (i == o.n) { /* the publisher gets no welcome */
        c->state = S_READY;
    }
    return 0;
}

/* A masked frame (FIN set) of `opcode` carrying p[0, n) into out (n + 8 bytes; n <= 65535). */
static size_t
put_frame(unsigned char *out, int opcode, const unsigned char *p, size_t n)
{
    size_t h = 0;
    out[h++] = (unsigned char)(0x80 | opcode);
    if (n < 126) {
        out[h++] = (unsigned char)(0x80 | n);
    }
    else {
        out[h++] = 0x80 | 126;
        out[h++] = (unsigned char)(n >> 8);
        out[h++] = (unsigned char)n;
    }
    uint32_t key = (uint32_t)xorshift64s(&rng);
    unsigned char *mask = out + h;
    memcpy(mask, &key, 4);
    h += 4;
    for (size_t k = 0; k < n; k++) {
        out[h + k] = p[k] ^ mask[k & 3];
    }
    return h + n;
}

/* One whole frame from the server on connection i. */
static void
on_frame(long i, int fin, int op, const unsigned char *p, size_t n)
{
    conn_t *c = &cs[i];
    char why[160];
    if (op == OP_PING) {
        unsigned char out[CTRL_MAX + 8];
        pongs++;
        send_all(i, out, put_frame(out, OP_PONG, p, n));
        return;
    }
    if (op == OP_PONG) {
        return;
    }
    if (op == OP_CLOSE) {
        fail(i, E_EOF, "close frame from the server");
        return;
    }
    if (!fin || op == OP_CONT) {
        fail(i, E_PROTOCOL, "fragmented message (none is expected this small)");
        return;
    }
    if (i == o.n) { /* the publisher: the ack of the broadcast in progress, once */
        int wrong = cur < 0 || acked || op != OP_TEXT || n != ack_len ||
                    memcmp(p, ack_want, n) != 0;
        if (wrong) {
            snprintf(why, sizeof why, "%s '%.*s' (opcode %d), expected '%s' once per broadcast",
                     cur < 0 ? "a frame between broadcasts" : acked ? "a second ack" : "ack",
                     (int)(n < 40 ? n : 40), p, op, ack_want);
            count_error(i, E_ACK, 1, why);
        }
        if (cur >= 0 && !acked) { /* the broadcast's ack has come, right or (counted) wrong */
            acked = 1;
            ack_right = !wrong;
            t_ack = now_ns();
        }
        return;
    }
    if (c->state == S_HANDSHAKE) { /* the app's welcome: this subscriber is in its set */
        if (op != OP_TEXT || n != strlen(WELCOME) || memcmp(p, WELCOME, n) != 0) {
            snprintf(why, sizeof why, "first frame '%.*s', expected '" WELCOME "'",
                     (int)(n < 40 ? n : 40), p);
            fail(i, E_WELCOME, why);
            return;
        }
        c->state = S_READY;
        return;
    }
    int right = cur >= 0 && op == OP_TEXT && n == o.size && memcmp(p, expect, n) == 0;
    if (cur < 0 || c->settled == cur) {
        snprintf(why, sizeof why, "%s frame of %zu bytes '%.*s' %s", right ? "a second" : "a",
                 n, (int)(n < 24 ? n : 24), p,
                 cur < 0 ? "between broadcasts" : "after this broadcast's");
        count_error(i, right ? E_DUPLICATE : E_PAYLOAD, 1, why);
        return;
    }
    c->settled = cur;
    pending--;
    if (!right) {
        size_t at = 0; /* the first byte that differs */
        while (at < n && at < o.size && p[at] == expect[at]) {
            at++;
        }
        snprintf(why, sizeof why, "broadcast %ld: frame of %zu bytes (opcode %d) '%.*s', "
                 "expected a text frame of %zu bytes '%.*s' (the first %zu bytes equal)", cur, n,
                 op, (int)(n < 24 ? n : 24), p, o.size, 24, expect, at);
        count_error(i, E_PAYLOAD, 1, why);
        return;
    }
    got++;
    t_last = now_ns();
}

/* Parses the whole frames in connection i's buffer, keeps a partial one. */
static void
parse_frames(long i)
{
    conn_t *c = &cs[i];
    size_t off = 0;
    while (c->state != S_FAILED && c->have - off >= 2) {
        const unsigned char *p = c->buf + off;
        size_t avail = c->have - off;
        size_t h;
        uint64_t n;
        const char *why = NULL;
        int got = ws_frame_head(p, avail, &h, &n, &why);
        if (got < 0) {
            fail(i, E_PROTOCOL, why);
            return;
        }
        if (got == 0) {
            break;
        }
        if (n > o.size + CTRL_MAX) {
            fail(i, E_PROTOCOL, "frame longer than the message sent");
            return;
        }
        if (avail < h + n) {
            break;
        }
        off += h + (size_t)n;
        on_frame(i, p[0] >> 7, p[0] & 0x0f, p + h, (size_t)n);
    }
    if (c->state == S_FAILED) {
        return;
    }
    memmove(c->buf, c->buf + off, c->have - off);
    c->have -= off;
}

/* Reads what arrived on connection i: the 101's head, then frames. */
static void
on_readable(long i)
{
    conn_t *c = &cs[i];
    if (c->have == cap) { /* cannot happen: a head and one partial frame are under cap */
        fail(i, E_PROTOCOL, "read buffer full");
        return;
    }
    ssize_t n = recv(c->fd, c->buf + c->have, cap - c->have, 0);
    if (n < 0) {
        if (errno != EAGAIN && errno != EINTR) {
            fail(i, E_RESET, strerror(errno));
        }
        return;
    }
    if (n == 0) {
        fail(i, E_EOF, c->state == S_READY ? "closed by the server" : "closed while opening");
        return;
    }
    c->have += (size_t)n;
    if (!c->head_done && check_head(i) != 0) {
        return;
    }
    parse_frames(i);
}

/* Waits up to ms milliseconds for events and handles them. */
static void
pump(int ms)
{
    struct epoll_event evs[256];
    int k = epoll_wait(ep, evs, 256, ms);
    if (k < 0 && errno != EINTR) {
        die("epoll_wait");
    }
    for (int e = 0; e < k; e++) {
        long i = (long)evs[e].data.u64;
        if (cs[i].state == S_CONNECTING) {
            send_upgrade(i);
        }
        else if (cs[i].state == S_HANDSHAKE || cs[i].state == S_READY) {
            on_readable(i);
        }
    }
}

/* Opens connections [lo, hi), at most o.window at once, until each is ready or failed; returns
 * how many are ready. */
static long
open_range(long lo, long hi)
{
    long *flight = malloc((size_t)o.window * sizeof *flight);
    if (!flight) {
        die("malloc");
    }
    long next = lo, nflight = 0, ok = 0;
    uint64_t last_ok = now_ns();
    while (next < hi || nflight) {
        while (next < hi && nflight < o.window) {
            start(next);
            if (cs[next].state == S_CONNECTING) {
                flight[nflight++] = next;
            }
            next++;
        }
        pump(100);
        uint64_t now = now_ns();
        for (long f = 0; f < nflight;) { /* the finished leave the window; the late fail */
            conn_t *c = &cs[flight[f]];
            if (c->state != S_READY && c->state != S_FAILED && now > c->deadline_ns) {
                fail(flight[f], E_TIMEOUT, "not welcomed in time");
            }
            if (c->state == S_READY || c->state == S_FAILED) {
                if (c->state == S_READY) {
                    ok++;
                    last_ok = now;
                }
                flight[f] = flight[--nflight];
            }
            else {
                f++;
            }
        }
        if (next < hi && now - last_ok > (uint64_t)(OPEN_TIMEOUT_S * 1e9)) {
            char why[128];
            snprintf(why, sizeof why, "none answered in %.0f s; %ld not tried", OPEN_TIMEOUT_S,
                     hi - next);
            count_error(next, E_STALLED, hi - next, why);
            next = hi;
        }
    }
    free(flight);
    return ok;
}

/* Broadcast seq's message: its number, then letters that depend on it. */
static void
make_message(long seq)
{
    char head[MSG_MIN + 1];
    snprintf(head, sizeof head, "%014ld:", seq);
    memcpy(expect, head, MSG_MIN - 1);
    for (size_t k = MSG_MIN - 1; k < o.size; k++) {
        expect[k] = (unsigned char)('a' + (k + (size_t)seq * 7) % 26);
    }
}

/* One broadcast: sends it through the publisher and waits until every subscriber still open has
 * had a frame of it and the publisher its ack, or o.timeout_s. Returns 0, or -1 when the
 * publisher failed (no further broadcast can be sent). */
static int
broadcast(long seq, unsigned char *frame, uint64_t *t0)
{
    make_message(seq);
    size_t len = put_frame(frame, OP_TEXT, expect, o.size);
    cur = seq;
    got = 0;
    acked = 0;
    pending = 0;
    for (long i = 0; i < o.n; i++) {
        pending += cs[i].state == S_READY;
    }
    *t0 = now_ns();
    if (send_all(o.n, frame, len) < 0) {
        cur = -1;
        return -1;
    }
    uint64_t deadline = *t0 + (uint64_t)(o.timeout_s * 1e9);
    while ((pending > 0 || !acked) && cs[o.n].state == S_READY) {
        uint64_t now = now_ns();
        if (now >= deadline) {
            break;
        }
        uint64_t left_ms = (deadline - now) / 1000000 + 1;
        pump(left_ms < 100 ? (int)left_ms : 100);
    }
    char why[96];
    if (got < o.n) {
        snprintf(why, sizeof why, "broadcast %ld reached %ld of %ld subscribers in %.1f s", seq,
                 got, o.n, o.timeout_s);
        count_error(-1, E_MISSING, o.n - got, why);
    }
    if (!acked && cs[o.n].state == S_READY) {
        snprintf(why, sizeof why, "broadcast %ld: no ack in %.1f s", seq, o.timeout_s);
        count_error(o.n, E_ACK, 1, why);
    }
    cur = -1;
    return cs[o.n].state == S_READY ? 0 : -1;
}

static double
cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank q-quantile of the sorted v[0, m) in microseconds; 0 when m is 0. */
static double
quantile_us(const uint64_t *v, long m, double q)
{
    if (m == 0) {
        return 0;
    }
    long r = (long)(q * (double)m);
    if ((double)r < q * (double)m) {
        r++;
    }
    return (double)v[r > 0 ? r - 1 : 0] / 1000.0;
}

static void
print_errors(void)
{
    printf("\"errors\": {");
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
        else if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) { /* a byte, not UTF-8 */
            printf("\\u%04x", (unsigned char)*p);
        }
        else {
            putchar(*p);
        }
    }
    printf("\"");
}

int
main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    if (rc) {
        return rc;
    }
    rc = raise_nofile("fanout_client", o.n + FD_SPARE);
    if (rc) {
        return rc;
    }
    rng = random_seed();
    cap = HEAD_MAX + o.size + CTRL_MAX + 16;
    snprintf(ack_want, sizeof ack_want, "sent %ld", o.n);
    ack_len = strlen(ack_want);
    cs = calloc((size_t)o.n + 1, sizeof *cs);
    expect = malloc(o.size);
    unsigned char *frame = malloc(o.size + 8);
    uint64_t *lat = malloc((size_t)o.broadcasts * sizeof *lat);
    ep = epoll_create1(EPOLL_CLOEXEC);
    if (!cs || !expect || !frame || !lat || ep < 0) {
        die("setup");
    }
    for (long i = 0; i <= o.n; i++) {
        cs[i].fd = -1;
    }

    uint64_t t_open = now_ns();
    long ok = open_range(0, o.n);
    long publisher = ok == o.n ? open_range(o.n, o.n + 1) : 0;
    printf("FANOUT {\"phase\": \"open\", \"n\": %ld, \"ok\": %ld, \"publisher\": %ld, "
           "\"open_s\": %.6f, ",
           o.n, ok, publisher, (double)(now_ns() - t_open) / 1e9);
    print_errors();
    printf("}\n");
    fflush(stdout);

    long sent = 0, delivered = 0, complete = 0;
    uint64_t *ack_lat = malloc((size_t)o.broadcasts * sizeof *ack_lat);
    long acks = 0;
    double cpu0 = 0, cpu1 = 0;
    uint64_t w0 = 0, w1 = 0;
    if (!ack_lat) {
        die("malloc");
    }
    if (ok == o.n && publisher) {
        int alive = 1;
        for (long b = 0; b < o.warmup && alive; b++) {
            uint64_t t0;
            alive = broadcast(b, frame, &t0) == 0;
        }
        if (alive) {
            char line[64];
            printf("FANOUT {\"phase\": \"start\"}\n");
            fflush(stdout);
            (void)!fgets(line, sizeof line, stdin); /* a line or EOF: the harness has read */
            cpu0 = cpu_seconds();
            w0 = now_ns();
            for (long b = o.warmup; b < o.warmup + o.broadcasts && alive; b++) {
                uint64_t t0;
                alive = broadcast(b, frame, &t0) == 0;
                sent++;
                delivered += got;
                if (got == o.n) {
                    lat[complete++] = t_last - t0;
                }
                if (acked && ack_right) {
                    ack_lat[acks++] = t_ack - t0;
                }
            }
            cpu1 = cpu_seconds();
            w1 = now_ns();
            printf("FANOUT {\"phase\": \"end\"}\n");
            fflush(stdout);
        }
    }
    qsort(lat, (size_t)complete, sizeof *lat, cmp_u64);
    qsort(ack_lat, (size_t)acks, sizeof *ack_lat, cmp_u64);
    printf("FANOUT {\"phase\": \"done\", \"n\": %ld, \"size\": %zu, \"broadcasts\": %ld, "
           "\"delivered\": %ld, \"expected\": %ld, \"complete\": %ld, \"p50_us\": %.1f, "
           "\"p99_us\": %.1f, \"max_us\": %.1f, \"ack_p50_us\": %.1f, \"cpu_s\": %.6f, "
           "\"wall_s\": %.6f, \"pongs\": %ld, ",
           o.n, o.size, sent, delivered, o.n * o.broadcasts, complete,
           quantile_us(lat, complete, 0.5), quantile_us(lat, complete, 0.99),
           complete ? (double)lat[complete - 1] / 1000.0 : 0.0, quantile_us(ack_lat, acks, 0.5),
           cpu1 - cpu0, (double)(w1 - w0) / 1e9, pongs);
    print_errors();
    printf("}\n");
    fflush(stdout);
    long bad = 0;
    for (int k = 0; k < E_KINDS; k++) {
        bad += errors[k];
    }
    for (long i = 0; i <= o.n; i++) {
        if (cs[i].fd >= 0) {
            close(cs[i].fd);
        }
        free(cs[i].buf);
    }
    return bad || delivered != o.n * o.broadcasts ? 1 : 0;
}
