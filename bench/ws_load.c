/* The benchmark's WebSocket load generator (bench/run.py builds it into bench/build/ws_load).
 *
 * wrk cannot speak WebSocket and a Python client would be slower than the servers it measures, so
 * the WebSocket rows use this: one thread, level-triggered epoll, N connections, each a closed
 * loop. It owns: the RFC 6455 opening handshake of every connection (a random 16-byte
 * Sec-WebSocket-Key; the answer must be `101`, carry `Upgrade: websocket` and the right
 * Sec-WebSocket-Accept, SHA-1 of the key and the RFC's GUID, and no Sec-WebSocket-Extensions:
 * permessage-deflate is never offered, so every server does the same work), then per connection:
 * one masked text (or binary) frame of the given size, the echoed frame read back (unmasked, its
 * fragments joined), its payload compared byte for byte with what was sent, the round-trip time
 * recorded; the next message goes out as soon as the echo is complete. Pings are answered with
 * pongs. At the end every connection is closed with a close handshake (code 1000).
 *
 * Timed mode (-d): a warm-up (-w seconds, not counted), then the measured interval, bracketed on
 * stdout by the lines `MEASURE_START` and `MEASURE_END` (flushed as they happen, so the harness
 * can read the server's CPU time at the same moments); messages whose echo completes inside it are
 * counted and their round trips give the percentiles. Count mode (-n): each connection sends -n
 * messages, all counted (the harness's check before and after a run). The last stdout line is
 * `WSLOAD {json}` with the messages, errors, percentiles (µs) and the generator's own CPU
 * seconds over the measured interval. Exit status 0 when no error, 1 after any error (a failed
 * handshake, a wrong or missing echo, a message not echoed within 5 s, a close or reset from the
 * server), 2 for a usage error.
 *
 * Never: offers an extension or subprotocol, pipelines messages on a connection, or allocates per
 * message (buffers grow to the largest frame and stay).
 *
 *   cc -O2 -o ws_load ws_load.c && ./ws_load PORT -c 64 -s 64 -w 1 -d 5
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "bench_client.h"

#define MAX_EVENTS 64
#define HEAD_MAX 8192              /* the 101 response's head, at most */
#define ECHO_TIMEOUT_NS 5000000000 /* a message not echoed within 5 s is an error */
#define CLOSE_TIMEOUT_NS 2000000000

enum { OP_CONT = 0, OP_TEXT = 1, OP_BINARY = 2, OP_CLOSE = 8, OP_PING = 9, OP_PONG = 10 };
enum { PH_WARM, PH_MEASURE, PH_DRAIN, PH_CLOSE, PH_DONE };

typedef struct {
    int fd;
    int id;
    int dead;         /* closed after an error, or after the close handshake */
    int closed_clean; /* the server's close frame arrived after ours */
    int waiting;      /* a message is out and its echo not complete */
    uint64_t seq;     /* messages sent on this connection */
    uint64_t sent_ns; /* when the current message was written */
    size_t echoed;    /* payload bytes of the current echo compared so far */
    int frag_op;      /* the data opcode of a fragmented echo in progress, or -1 */
    unsigned char *expect;
    unsigned char *in;
    size_t in_len, in_cap;
    unsigned char *out;
    size_t out_len, out_off, out_cap;
    int want_out;
} conn_t;

typedef struct {
    int port;
    int conns;
    size_t size;
    int opcode;
    double warmup_s, duration_s;
    long count; /* -n: messages per connection (count mode); 0: timed mode */
    const char *path;
    int ep;
    int phase;
    uint64_t rng;
    conn_t *cs;
    uint64_t *rtt; /* round trips of the counted messages, ns */
    size_t rtt_len, rtt_cap;
    uint64_t messages, warm_messages;
    long errors;
    char first_error[256];
    uint64_t t_start, t_end; /* the measured interval, CLOCK_MONOTONIC ns */
    uint64_t t_close;        /* the close handshake's deadline */
    double cpu_start, cpu_end;
} gen_t;

/* ------------------------------------------------------------------------------------------- */

static double
cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void *
xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (!p) {
        die("realloc");
    }
    return p;
}

/* Records an error (the first one's text is kept) and, with c, closes that connection. */
static void
fail(gen_t *g, conn_t *c, const char *msg)
{
    if (!g->errors) {
        if (c) {
            snprintf(g->first_error, sizeof g->first_error, "connection %d: %s", c->id, msg);
        }
        else {
            snprintf(g->first_error, sizeof g->first_error, "%s", msg);
        }
    }
    g->errors++;
    if (c && !c->dead) {
        epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->dead = 1;
        c->waiting = 0;
    }
}

static void
set_events(gen_t *g, conn_t *c, int want_out)
{
    if (c->want_out == want_out) {
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(g->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) {
        die("epoll_ctl mod");
    }
    c->want_out = want_out;
}

/* Writes what is pending in c->out; waits for EPOLLOUT when the socket takes only part. */
static void
flush(gen_t *g, conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN) {
                set_events(g, c, 1);
                return;
            }
            fail(g, c, strerror(errno));
            return;
        }
        c->out_off += (size_t)n;
    }
    c->out_off = c->out_len = 0;
    set_events(g, c, 0);
}

/* Appends one masked client frame (RFC 6455 §5.2, §5.3) with FIN set to c->out. */
static void
put_frame(gen_t *g, conn_t *c, int opcode, const unsigned char *payload, size_t n)
{
    size_t need = c->out_len + 14 + n;
    if (need > c->out_cap) {
        c->out_cap = need * 2;
        c->out = xrealloc(c->out, c->out_cap);
    }
    unsigned char *p = c->out + c->out_len;
    size_t h = 0;
    p[h++] = (unsigned char)(0x80 | opcode);
    if (n < 126) {
        p[h++] = (unsigned char)(0x80 | n);
    }
    else if (n < 65536) {
        p[h++] = 0x80 | 126;
        p[h++] = (unsigned char)(n >> 8);
        p[h++] = (unsigned char)n;
    }
    else {
        p[h++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--) {
            p[h++] = (unsigned char)((uint64_t)n >> (8 * i));
        }
    }
    uint32_t key = (uint32_t)xorshift64s(&g->rng);
    unsigned char mask[4] = {(unsigned char)(key >> 24), (unsigned char)(key >> 16),
                             (unsigned char)(key >> 8), (unsigned char)key};
    memcpy(p + h, mask, 4);
    h += 4;
    for (size_t i = 0; i < n; i++) {
        p[h + i] = payload[i] ^ mask[i & 3];
    }
    c->out_len += h + n;
}

/* The next message of c: its payload (ASCII letters for text, any byte for binary) depends on
 * the connection and the sequence number, so a stale or misrouted echo does not compare equal. */
static void
send_message(gen_t *g, conn_t *c)
{
    uint64_t s = c->seq++ * 31 + (uint64_t)c->id * 7;
    for (size_t i = 0; i < g->size; i++) {
        c->expect[i] = g->opcode == OP_TEXT ? (unsigned char)('a' + (s + i) % 26)
                                            : (unsigned char)((s + i) & 255);
    }
    c->echoed = 0;
    c->frag_op = -1;
    c->waiting = 1;
    c->sent_ns = now_ns();
    put_frame(g, c, g->opcode, c->expect, g->size);
    flush(g, c);
}

static void
record(gen_t *g, uint64_t rtt)
{
    if (g->rtt_len == g->rtt_cap) {
        g->rtt_cap = g->rtt_cap ? g->rtt_cap * 2 : 65536;
        g->rtt = xrealloc(g->rtt, g->rtt_cap * sizeof *g->rtt);
    }
    g->rtt[g->rtt_len++] = rtt;
}

/* Whether c sends another message after an echo completes. */
static int
keeps_sending(const gen_t *g, const conn_t *c)
{
    if (g->count) {
        return c->seq < (uint64_t)g->count;
    }
    return g->phase == PH_WARM || g->phase == PH_MEASURE;
}

static void
echo_complete(gen_t *g, conn_t *c)
{
    uint64_t t = now_ns();
    c->waiting = 0;
    if (g->phase == PH_MEASURE) {
        g->messages++;
        record(g, t - c->sent_ns);
    }
    else if (g->phase == PH_WARM) {
        g->warm_messages++;
    }
    if (keeps_sending(g, c)) {
        send_message(g, c);
    }
}

/* One server frame's payload (already unmasked: server frames are never masked). */
static void
on_frame(gen_t *g, conn_t *c, int fin, int opcode, const unsigned char *pl, size_t n)
{
    char msg[160];
    if (opcode == OP_PING) {
        put_frame(g, c, OP_PONG, pl, n);
        flush(g, c);
        return;
    }
    if (opcode == OP_PONG) {
        return;
    }
    if (opcode == OP_CLOSE) {
        if (g->phase == PH_CLOSE) {
            c->closed_clean = 1;
            epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
            close(c->fd);
            c->dead = 1;
            return;
        }
        unsigned code = n >= 2 ? (unsigned)pl[0] << 8 | pl[1] : 1005;
        snprintf(msg, sizeof msg, "the server closed the connection (code %u, reason '%.*s')", code,
                 (int)(n > 2 ? (n - 2 < 60 ? n - 2 : 60) : 0), (const char *)pl + 2);
        fail(g, c, msg);
        return;
    }
    if (opcode != OP_CONT && opcode != OP_TEXT && opcode != OP_BINARY) {
        snprintf(msg, sizeof msg, "frame with reserved opcode %d", opcode);
        fail(g, c, msg);
        return;
    }
    int op = opcode == OP_CONT ? c->frag_op : opcode;
    if ((opcode == OP_CONT) != (c->frag_op >= 0)) {
        fail(g, c, "continuation frame out of place");
        return;
    }
    if (!c->waiting) {
        fail(g, c, "a data frame with no message outstanding");
        return;
    }
    if (op != g->opcode) {
        snprintf(msg, sizeof msg, "echo has opcode %d, sent %d", op, g->opcode);
        fail(g, c, msg);
        return;
    }
    if (c->echoed + n > g->size) {
        snprintf(msg, sizeof msg, "echo longer than the %zu bytes sent", g->size);
        fail(g, c, msg);
        return;
    }
    if (memcmp(pl, c->expect + c->echoed, n) != 0) {
        size_t at = 0;
        while (pl[at] == c->expect[c->echoed + at]) {
            at++;
        }
        snprintf(msg, sizeof msg, "echo differs from message %llu at payload byte %zu",
                 (unsigned long long)c->seq - 1, c->echoed + at);
        fail(g, c, msg);
        return;
    }
    c->echoed += n;
    c->frag_op = fin ? -1 : op;
    if (fin) {
        if (c->echoed != g->size) {
            snprintf(msg, sizeof msg, "echo of %zu bytes, sent %zu", c->echoed, g->size);
            fail(g, c, msg);
            return;
        }
        echo_complete(g, c);
    }
}

/* Parses the complete frames in c->in (RFC 6455 §5.2). */
static void
parse_frames(gen_t *g, conn_t *c)
{
    size_t off = 0;
    while (!c->dead && c->in_len - off >= 2) {
        const unsigned char *p = c->in + off;
        size_t avail = c->in_len - off;
        size_t h;
        uint64_t n;
        const char *why = NULL;
        int got = ws_frame_head(p, avail, &h, &n, &why);
        if (got < 0) {
            fail(g, c, why);
            return;
        }
        if (got == 0) {
            break;
        }
        if (n > g->size + 125 || n > ((uint64_t)1 << 30)) {
            fail(g, c, "frame longer than the message sent");
            return;
        }
        if (avail < h + n) {
            if (c->in_cap < h + n) { /* make room for the whole frame */
                memmove(c->in, c->in + off, avail);
                c->in_len = avail;
                off = 0;
                c->in_cap = h + n;
                c->in = xrealloc(c->in, c->in_cap);
            }
            break;
        }
        off += h + n;
        on_frame(g, c, p[0] >> 7, p[0] & 0x0f, p + h, n);
    }
    if (c->dead) {
        return;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

static void
on_readable(gen_t *g, conn_t *c)
{
    if (c->in_len == c->in_cap) {
        c->in_cap *= 2;
        c->in = xrealloc(c->in, c->in_cap);
    }
    ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    if (n <= 0) {
        if (g->phase == PH_CLOSE) { /* closed without its close frame: not clean, no error */
            epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
            close(c->fd);
            c->dead = 1;
            return;
        }
        fail(g, c, n == 0 ? "the server closed the TCP connection" : strerror(errno));
        return;
    }
    c->in_len += (size_t)n;
    parse_frames(g, c);
}

/* ------------------------------------------------------------------------------------------- */
/* The opening handshake, one connection at a time (blocking, 5 s timeouts). */

/* Connects c and completes its handshake; 0, or -1 with the reason in err. */
static int
handshake(gen_t *g, conn_t *c, char *err, size_t errcap)
{
    int one = 1;
    struct timeval tv = {.tv_sec = 5};
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g->port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        die("socket");
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        snprintf(err, errcap, "connect: %s", strerror(errno));
        return -1;
    }
    char key[25], want[29], got[128], req[512];
    ws_key(&g->rng, key, want);
    int len = snprintf(req, sizeof req,
                       "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                       "Sec-WebSocket-Version: 13\r\n\r\n",
                       g->path, g->port, key);
    if (write(c->fd, req, (size_t)len) != len) {
        snprintf(err, errcap, "sending the upgrade request: %s", strerror(errno));
        return -1;
    }
    char head[HEAD_MAX + 1];
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        if (have == HEAD_MAX) {
            snprintf(err, errcap, "response head longer than %d bytes", HEAD_MAX);
            return -1;
        }
        ssize_t n = read(c->fd, head + have, HEAD_MAX - have);
        if (n <= 0) {
            snprintf(err, errcap, "reading the 101: %s",
                     n == 0 ? "connection closed" : strerror(errno));
            return -1;
        }
        have += (size_t)n;
        head[have] = '\0';
        end = memmem(head, have, "\r\n\r\n", 4);
    }
    size_t head_len = (size_t)(end - head) + 4;
    if (strncmp(head, "HTTP/1.1 101 ", 13) != 0 && strncmp(head, "HTTP/1.1 101\r", 13) != 0) {
        char *eol = strstr(head, "\r\n");
        snprintf(err, errcap, "expected 101, got '%.*s'", (int)(eol ? eol - head : 60), head);
        return -1;
    }
    end[2] = '\0'; /* header_value() stops at the blank line */
    end[3] = '\0';
    if (!header_value(head, "Sec-WebSocket-Accept", got, sizeof got) || strcmp(got, want) != 0) {
        snprintf(err, errcap, "Sec-WebSocket-Accept '%s', expected '%s'", got, want);
        return -1;
    }
    if (!header_value(head, "Upgrade", got, sizeof got) || strcasecmp(got, "websocket") != 0) {
        snprintf(err, errcap, "101 without Upgrade: websocket");
        return -1;
    }
    if (header_value(head, "Sec-WebSocket-Extensions", got, sizeof got)) {
        snprintf(err, errcap, "extension '%s' in the 101, none offered", got);
        return -1;
    }
    /* Frames that came with the head are the first input. */
    memcpy(c->in, head + head_len, have - head_len);
    c->in_len = have - head_len;
    int fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        die("fcntl");
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------- */

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double
pct_us(const gen_t *g, double q)
{
    if (!g->rtt_len) {
        return 0;
    }
    size_t i = (size_t)(q * (double)g->rtt_len);
    return (double)g->rtt[i < g->rtt_len ? i : g->rtt_len - 1] / 1e3;
}

/* The connections that still wait for an echo, and the errors of those past the timeout. */
static int
outstanding(gen_t *g, uint64_t now)
{
    int n = 0;
    for (int i = 0; i < g->conns; i++) {
        conn_t *c = &g->cs[i];
        if (c->dead || !c->waiting) {
            continue;
        }
        if (now - c->sent_ns > ECHO_TIMEOUT_NS) {
            fail(g, c, "no echo within 5 s");
            continue;
        }
        n++;
    }
    return n;
}

/* Count mode: whether every live connection has sent its messages. */
static int
all_sent(const gen_t *g)
{
    for (int i = 0; i < g->conns; i++) {
        if (!g->cs[i].dead && g->cs[i].seq < (uint64_t)g->count) {
            return 0;
        }
    }
    return 1;
}

static void
mark(const char *line)
{
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

/* Advances the phase by the clock; returns the epoll_wait timeout (ms) until the next check. */
static int
advance(gen_t *g, uint64_t now)
{
    int waiting = outstanding(g, now); /* also fails the echoes past their timeout */
    if (g->phase == PH_WARM && now >= g->t_start) {
        g->cpu_start = cpu_seconds();
        g->t_start = now_ns();
        g->t_end = g->t_start + (uint64_t)(g->duration_s * 1e9);
        g->phase = PH_MEASURE;
        if (!g->count) {
            mark("MEASURE_START");
        }
    }
    if (g->phase == PH_MEASURE && (g->count ? !waiting && all_sent(g) : now >= g->t_end)) {
        g->cpu_end = cpu_seconds();
        g->t_end = now_ns();
        g->phase = PH_DRAIN;
        if (!g->count) {
            mark("MEASURE_END");
        }
    }
    if (g->phase == PH_DRAIN && !waiting) {
        static const unsigned char normal[2] = {0x03, 0xe8}; /* 1000 */
        g->phase = PH_CLOSE;
        g->t_close = now + CLOSE_TIMEOUT_NS;
        for (int i = 0; i < g->conns; i++) {
            conn_t *c = &g->cs[i];
            if (!c->dead) {
                put_frame(g, c, OP_CLOSE, normal, sizeof normal);
                flush(g, c);
            }
        }
    }
    if (g->phase == PH_CLOSE) {
        int open = 0;
        for (int i = 0; i < g->conns; i++) {
            open += !g->cs[i].dead;
        }
        if (!open || now >= g->t_close) {
            g->phase = PH_DONE;
        }
    }
    uint64_t next = g->phase == PH_WARM                   ? g->t_start
                    : g->phase == PH_MEASURE && !g->count ? g->t_end
                                                          : now + 50000000;
    uint64_t left = next > now ? (next - now) / 1000000 + 1 : 0;
    return left < 50 ? (int)left : 50;
}

static void
report(gen_t *g)
{
    int clean = 0;
    for (int i = 0; i < g->conns; i++) {
        clean += g->cs[i].closed_clean;
    }
    qsort(g->rtt, g->rtt_len, sizeof *g->rtt, cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < g->rtt_len; i++) {
        sum += (double)g->rtt[i];
    }
    double wall = (double)(g->t_end - g->t_start) / 1e9;
    char err[600];
    size_t o = 0;
    for (const char *p = g->first_error; *p && o < sizeof err - 8; p++) {
        if (*p == '"' || *p == '\\') {
            err[o++] = '\\';
        }
        err[o++] = (unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e ? '?' : *p; /* ASCII JSON */
    }
    err[o] = '\0';
    printf("WSLOAD {\"conns\":%d,\"size\":%zu,\"opcode\":\"%s\",\"messages\":%llu,"
           "\"warmup_messages\":%llu,\"wall_s\":%.6f,\"msgs_per_s\":%.1f,\"errors\":%ld,"
           "\"error\":\"%s\",\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,"
           "\"max_us\":%.1f,\"mean_us\":%.1f,\"cpu_s\":%.6f,\"closed_clean\":%d}\n",
           g->conns, g->size, g->opcode == OP_TEXT ? "text" : "binary",
           (unsigned long long)g->messages, (unsigned long long)g->warm_messages, wall,
           wall > 0 ? (double)g->messages / wall : 0.0, g->errors, err, pct_us(g, 0.50),
           pct_us(g, 0.90), pct_us(g, 0.99), pct_us(g, 0.999),
           g->rtt_len ? (double)g->rtt[g->rtt_len - 1] / 1e3 : 0.0,
           g->rtt_len ? sum / (double)g->rtt_len / 1e3 : 0.0, g->cpu_end - g->cpu_start, clean);
    fflush(stdout);
}

static int
self_test(void)
{ /* RFC 6455 §1.3's example key and answer */
    char out[29];
    accept_for("dGhlIHNhbXBsZSBub25jZQ==", out);
    return strcmp(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") == 0 ? 0 : -1;
}

static void
usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s PORT [-c CONNS] [-s BYTES] [-w WARMUP_S] [-d DURATION_S | -n COUNT] [-b]"
            " [-p PATH]\n"
            "  -c connections (64); -s message size in bytes (64); -w warm-up seconds (1);\n"
            "  -d measured seconds (5); -n messages per connection instead of -w/-d;\n"
            "  -b binary frames (default: text); -p request path (/)\n",
            prog);
    exit(2);
}

static double
number(const char *s, const char *prog, double lo, double hi)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        usage(prog);
    }
    return v;
}

int
main(int argc, char **argv)
{
    gen_t g = {
        .conns = 64, .size = 64, .opcode = OP_TEXT, .warmup_s = 1, .duration_s = 5, .path = "/"};
    int opt;
    while ((opt = getopt(argc, argv, "c:s:w:d:n:bp:")) != -1) {
        switch (opt) {
        case 'c': g.conns = (int)number(optarg, argv[0], 1, 10000); break;
        case 's': g.size = (size_t)number(optarg, argv[0], 0, 1 << 24); break;
        case 'w': g.warmup_s = number(optarg, argv[0], 0, 3600); break;
        case 'd': g.duration_s = number(optarg, argv[0], 0.1, 3600); break;
        case 'n': g.count = (long)number(optarg, argv[0], 1, 1e9); break;
        case 'b': g.opcode = OP_BINARY; break;
        case 'p': g.path = optarg; break;
        default: usage(argv[0]);
        }
    }
    if (optind != argc - 1) {
        usage(argv[0]);
    }
    g.port = (int)number(argv[optind], argv[0], 1, 65535);
    if (g.path[0] != '/' || strlen(g.path) > 256 || strpbrk(g.path, " \r\n")) {
        usage(argv[0]);
    }
    if (self_test() < 0) {
        fprintf(stderr, "ws_load: SHA-1/base64 self-test failed\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    if (getrandom(&g.rng, sizeof g.rng, 0) != sizeof g.rng || !g.rng) {
        g.rng = (uint64_t)now_ns() | 1;
    }
    g.ep = epoll_create1(EPOLL_CLOEXEC);
    if (g.ep < 0) {
        die("epoll_create1");
    }
    g.cs = calloc((size_t)g.conns, sizeof *g.cs);
    if (!g.cs) {
        die("calloc");
    }
    size_t in_cap = 2 * (g.size + 14) > HEAD_MAX ? 2 * (g.size + 14) : HEAD_MAX;
    for (int i = 0; i < g.conns && !g.errors; i++) {
        conn_t *c = &g.cs[i];
        char err[200];
        c->id = i;
        c->fd = -1;
        c->frag_op = -1;
        c->in_cap = in_cap;
        c->in = xrealloc(NULL, c->in_cap);
        c->expect = xrealloc(NULL, g.size ? g.size : 1);
        if (handshake(&g, c, err, sizeof err) < 0) {
            snprintf(g.first_error, sizeof g.first_error, "connection %d: handshake: %s", i, err);
            g.errors++;
            break;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(g.ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
            die("epoll_ctl add");
        }
    }
    if (g.errors) {
        report(&g);
        return 1;
    }
    uint64_t t0 = now_ns();
    g.t_start = t0 + (g.count ? 0 : (uint64_t)(g.warmup_s * 1e9));
    g.phase = PH_WARM;
    advance(&g, t0);
    for (int i = 0; i < g.conns; i++) {
        conn_t *c = &g.cs[i];
        if (c->in_len) {
            parse_frames(&g, c); /* frames that came with the 101 (a ping) */
        }
        if (!c->dead) {
            send_message(&g, c);
        }
    }
    struct epoll_event events[MAX_EVENTS];
    int timeout = advance(&g, now_ns());
    while (g.phase != PH_DONE) {
        int n = epoll_wait(g.ep, events, MAX_EVENTS, timeout);
        if (n < 0 && errno != EINTR) {
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if (c->dead) {
                continue;
            }
            if (events[i].events & EPOLLOUT) {
                flush(&g, c);
            }
            if (!c->dead && events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                on_readable(&g, c);
            }
        }
        timeout = advance(&g, now_ns());
    }
    for (int i = 0; i < g.conns; i++) {
        if (!g.cs[i].dead) {
            close(g.cs[i].fd);
        }
        free(g.cs[i].in);
        free(g.cs[i].out);
        free(g.cs[i].expect);
    }
    report(&g);
    free(g.cs);
    free(g.rtt);
    close(g.ep);
    return g.errors ? 1 : 0;
}
