/* The benchmark's limit: a minimal HTTP/1.1 responder with no Python (bench/run.py builds it).
 *
 * One thread, level-triggered epoll. Per readiness event: one read(); every complete request in the
 * buffer is answered, in order, with one writev() for the batch, straight from static responses and
 * the input buffer (no copy unless the socket takes only part). One read per event means no EAGAIN
 * reads. It understands just enough HTTP/1.1 for the benchmark's workloads and answers
 * exactly the bodies that bench/apps serves:
 *
 *   a request with a body (Content-Length) -> the body echoed       (post_4k)
 *   GET /64k                               -> 65,536 bytes 0..255.. (get_64k)
 *   GET /json                              -> the fastapi_json body (fastapi_json)
 *   anything else                          -> "Hello, world!"       (raw_get, pipelined_get)
 *
 * Not a server: no chunked bodies, no Connection: close, no timeouts, no limits beyond memory.
 *
 *   cc -O2 -o limit_http limit_http.c && ./limit_http PORT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <arpa/inet.h>

#define MAX_EVENTS 64
#define READ_CHUNK 65536

static const char HELLO_HEAD[] =
    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 13\r\n\r\nHello, world!";
static const char JSON_RESP[] =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 54\r\n\r\n"
    "{\"id\":1,\"name\":\"widget\",\"price\":9.99,\"tags\":[\"a\",\"b\"]}";
static const char BIG_HEAD[] =
    "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 65536\r\n\r\n";
static char big_resp[sizeof(BIG_HEAD) - 1 + 65536];

typedef struct {
    int fd;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_len, out_off, out_cap;
    int want_out;
} conn_t;

static int ep;
static void process(conn_t *c);

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n);
    if (!p) die("realloc");
    return p;
}

static void out_append(conn_t *c, const char *data, size_t n) {
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + n) cap *= 2;
        c->out = xrealloc(c->out, cap);
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, data, n);
    c->out_len += n;
}

static void conn_close(conn_t *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

/* Content-Length of the head [p, p+n), or 0. */
static size_t content_length(const char *p, size_t n) {
    const char *end = p + n;
    while (p < end) {
        const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (!eol) break;
        if ((size_t)(eol - p) > 15 && strncasecmp(p, "content-length:", 15) == 0) {
            const char *v = p + 15;
            while (v < eol && (*v == ' ' || *v == '\t')) v++;
            size_t len = 0;
            while (v < eol && *v >= '0' && *v <= '9') len = len * 10 + (size_t)(*v++ - '0');
            return len;
        }
        p = eol + 2;
    }
    return 0;
}

#define MAX_IOV 512

/* Answer the complete requests in c->in (up to MAX_IOV / 2 of them) into iov, which points into
 * static responses, heads[] and c->in (echoed bodies); returns the iov count and sets *consumed. */
static int parse(conn_t *c, struct iovec *iov, char (*heads)[96], size_t *consumed) {
    size_t off = 0;
    int n = 0;
    while (n + 2 <= MAX_IOV) {
        char *start = c->in + off;
        size_t avail = c->in_len - off;
        char *hend = memmem(start, avail, "\r\n\r\n", 4);
        if (!hend) break;
        size_t head_len = (size_t)(hend - start) + 4;
        size_t body_len = content_length(start, head_len);
        if (avail < head_len + body_len) break;
        if (body_len) {
            char *h = heads[n / 2];
            int k = snprintf(h, 96, "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
                                    "content-length: %zu\r\n\r\n", body_len);
            iov[n++] = (struct iovec){h, (size_t)k};
            iov[n++] = (struct iovec){start + head_len, body_len};
        } else {
            const char *sp = memchr(start, ' ', head_len);
            const char *path = sp ? sp + 1 : start;
            if (strncmp(path, "/64k ", 5) == 0)
                iov[n++] = (struct iovec){big_resp, sizeof big_resp};
            else if (strncmp(path, "/json ", 6) == 0)
                iov[n++] = (struct iovec){(void *)JSON_RESP, sizeof JSON_RESP - 1};
            else
                iov[n++] = (struct iovec){(void *)HELLO_HEAD, sizeof HELLO_HEAD - 1};
        }
        off += head_len + body_len;
    }
    *consumed = off;
    return n;
}

static void set_events(conn_t *c, int want_out) {
    if (c->want_out == want_out) return;
    struct epoll_event ev = {.events = want_out ? EPOLLOUT : EPOLLIN, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl mod");
    c->want_out = want_out;
}

/* One write of everything pending; returns -1 if the connection was closed. */
static int flush(conn_t *c) {
    if (c->out_off == c->out_len) return 0;
    ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) n = 0;
        else { conn_close(c); return -1; }
    }
    c->out_off += (size_t)n;
    if (c->out_off == c->out_len) {
        c->out_off = c->out_len = 0;
        set_events(c, 0);
        process(c);  /* requests that arrived while the socket was full */
    } else {
        set_events(c, 1);  /* stop reading until the peer takes what is pending */
    }
    return 0;
}

static void on_readable(conn_t *c) {
    if (c->in_cap - c->in_len < READ_CHUNK) {
        c->in_cap = c->in_len + READ_CHUNK;
        c->in = xrealloc(c->in, c->in_cap);
    }
    ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) { conn_close(c); return; }
    if (n < 0) return;
    c->in_len += (size_t)n;
    process(c);
}

/* Answer what is complete in c->in, in batches of one writev each, until it is all answered or the
 * socket is full. */
static void process(conn_t *c) {
    static struct iovec iov[MAX_IOV];
    static char heads[MAX_IOV / 2][96];
    for (;;) {
        size_t consumed;
        int cnt = parse(c, iov, heads, &consumed);
        if (!cnt) return;
        /* One write for the batch, straight from where the bytes are. */
        ssize_t w = writev(c->fd, iov, cnt);
        if (w < 0) {
            if (errno != EAGAIN && errno != EINTR) { conn_close(c); return; }
            w = 0;
        }
        size_t skip = (size_t)w;
        for (int i = 0; i < cnt; i++) {  /* keep what the socket did not take */
            if (skip >= iov[i].iov_len) { skip -= iov[i].iov_len; continue; }
            out_append(c, (char *)iov[i].iov_base + skip, iov[i].iov_len - skip);
            skip = 0;
        }
        memmove(c->in, c->in + consumed, c->in_len - consumed);
        c->in_len -= consumed;
        if (c->out_len) { set_events(c, 1); return; }  /* flush() finishes it on EPOLLOUT */
    }
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s PORT\n", argv[0]); return 2; }
    signal(SIGPIPE, SIG_IGN);
    memcpy(big_resp, BIG_HEAD, sizeof BIG_HEAD - 1);
    for (int i = 0; i < 65536; i++) big_resp[sizeof BIG_HEAD - 1 + i] = (char)(i & 255);

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
    if (listen(lfd, 4096) < 0) die("listen");

    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0) die("epoll_ctl add listener");

    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if (!c) {
                int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) continue;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                c = calloc(1, sizeof *c);
                if (!c) die("calloc");
                c->fd = fd;
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl add");
            } else if (c->want_out) {
                if (events[i].events & (EPOLLERR | EPOLLHUP) && !(events[i].events & EPOLLOUT))
                    conn_close(c);
                else
                    flush(c);
            } else {
                on_readable(c);
            }
        }
    }
}
