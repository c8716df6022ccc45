/* sk_transport.c — the native reactor and its connections (transports).
 *
 * Owns: the epoll set (registered with the running loop through loop.add_reader, so asyncio and
 * uvloop only wake it), accepting (accept4, --limit-connections and EMFILE pauses), reading (one
 * read of the stream layer per readiness; connections edge-triggered, in the order their input
 * arrived: rearm; input the layer holds: read_soon), the input and output buffers, the epoll mask
 * they imply (64 KiB marks: flow control, and the readiness the layer asks for), writing and
 * EPOLLOUT (batching, by-reference ranges, file ranges: sendfile or pread when the layer cannot),
 * the one-second timer (timerfd in the same set) that checks every transport's deadlines (after
 * taking the input ready then: drain_ready) and frees what idle ones keep between messages
 * (tp_trim, the handlers' idle op; malloc_trim once many connections have gone), linger after a
 * server-side close, closing, and freeing closed transports once no frame holds them (reap).
 * Never: moves a byte on the socket but through its stream layer (sk_stream_ops_t), knows what
 * protocol a connection speaks (only the sk_handler_ops_t table), builds Python objects (it holds
 * a bytes object queued by reference, and releases it), or frees a transport or a handler while a
 * stack frame may still use it.
 *
 * States of a transport (one enum, changed only by set_state()):
 *   OPEN -> CLOSING (output being sent before a half-close) -> LINGERING (half-closed, reading and
 *   discarding until EOF or 2 s) -> CLOSED; OPEN, CLOSING or LINGERING -> CLOSED at any time.
 */
#include "sk_transport.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#include <unistd.h>

#include <linux/sockios.h> /* SIOCOUTQ */

#include "sk_slab.h"

#define READ_SIZE (64 * 1024)        /* one layer read into the reactor's shared read buffer */
#define MAX_ACCEPTS 16               /* accept4() calls per listening-socket readiness */
#define INPUT_HIGH_WATER (64 * 1024) /* stop reading while this much input is unconsumed */
#define PAUSE_LOG_INTERVAL 5.0       /* seconds between two "accepting paused" warnings */
#define LINGER_SECONDS 2.0           /* after a server-side close: read and discard this long */
#define SENDFILE_MAX (1024 * 1024)   /* bytes asked of one sendfile() call */
/* Bytes of a file range read at once (pread into the output buffer, then written) when the layer
 * cannot sendfile. */
#define PREAD_MAX (64 * 1024)
/* Connections that must have closed since the tick's peak (and at least half of them), or bytes
 * of idle connections' storage one tick freed, before the tick asks glibc to give the heap's free
 * pages back (malloc_trim): freed blocks otherwise stay resident (issue 37). */
#define TRIM_AFTER_CLOSED 1024
#define TRIM_AFTER_FREED (256 * 1024)
/* Connections are edge-triggered, so that epoll reports them in the order their input arrived.
 * Level-triggered, epoll puts every descriptor it reports back at the end of its ready list,
 * where it stays until an epoll_wait finds it drained: the next iteration's. A connection read
 * in a burst whose next request arrives while the apps step is reported in that old place, ahead
 * of connections whose requests came first; each burst's late arrivals then waited for the next
 * one. At 75% of fastapi_json's capacity that made p99 11.4 ms against 7.0 ms edge-triggered
 * (bench/LEVERS.md, round 6). What level-triggered did after a read that may leave input in the
 * socket, rearm() does (tp_readable says when). EPOLLPRI goes with EPOLLIN: the kernel's
 * urgent (out-of-band) mark is one such read. The listening socket and the timer stay
 * level-triggered. */
#define CONN_EPOLL EPOLLET

enum tp_state {
    TP_OPEN = 0,
    TP_CLOSING,   /* SK_CLOSE_AFTER_WRITE, or the peer's FIN: sending what is left, then
                   * LINGERING (or CLOSED at once after a FIN) */
    TP_LINGERING, /* half-closed by us: reading and discarding until EOF or the deadline */
    TP_CLOSED,    /* fd closed, handler told; waiting to be reaped */
};

/* Readiness the stream layer asked for (sk_stream.h, rule 1), besides the transport's own. */
enum {
    IO_WRITE_WANTS_READ = 1, /* a write, sendfile or shutdown waits for EPOLLIN */
    IO_READ_WANTS_WRITE = 2, /* a read waits for EPOLLOUT */
    IO_SHUTDOWN = 4,         /* the layer's shutdown is to be called again (EPOLLOUT) */
};

/* A range queued after a transport's output: a file's (sk_transport_sendfile), alone, or a part
 * of a bytes object (sk_transport_send_bytes, _send_slice), up to RANGES_MAX in a chain, each
 * made for it and dropped once it is sent or the connection closes (an idle connection keeps
 * none: issue 37; the reactor keeps up to SPARE_RANGES dropped blocks for the next ones). What
 * the handler appends while a range is the chain's last goes to its `tail`, sent after it: the
 * output is `out`, then each range followed by its tail. Owned: file_fd is closed, ref released
 * when it is dropped. */
typedef struct tp_range {
    struct tp_range *next; /* the next range in the chain (or in the reactor's spares), or NULL */
    PyObject *ref;         /* an exact bytes object (immutable), or NULL for a file's range */
    int file_fd;           /* the file, or -1 for a bytes range */
    uint64_t off, left;    /* bytes: into the file or the bytes object, and still unsent */
    sk_buf_t tail;
} tp_range_t;

/* Bytes ranges a transport chains at most (an HTTP/2 connection queues each DATA frame of a body
 * held by reference as one: SK_OUTPUT_HIGH_WATER / 16 KiB frames, and one more while the first
 * is partly sent; HTTP/1.1 at most two); past it the caller copies. Dropped blocks the reactor
 * keeps for the next ranges. */
#define RANGES_MAX 8
#define SPARE_RANGES 16

struct sk_transport {
    sk_stream_t s; /* the socket (s.fd, -1 once closed) and the layer's state */
    const sk_stream_ops_t *sops;
    sk_reactor_t *reactor; /* borrowed: the reactor closes every transport before it goes */
    const sk_handler_ops_t *ops;
    void *h;                             /* the handler, owned through ops->release */
    const sk_handler_ops_t *retired_ops; /* a handler switched away from, released at the next
                                          * tick (tp_trim) or at reap */
    void *retired_h;
    sk_buf_t in;    /* received bytes the handler has not consumed */
    sk_buf_t out;   /* bytes the kernel has not accepted */
    tp_range_t *rg; /* owned: the first range of the chain queued after `out`, NULL = none */
    uint32_t epoll_events;
    uint8_t state;         /* enum tp_state */
    uint8_t dispatching;   /* a data_received() call is on the stack: it writes when it returns */
    uint8_t held;          /* sk_transport_hold: output waits for sk_transport_release */
    uint8_t read_paused;   /* sk_transport_pause_reading */
    uint8_t on_pending;    /* on the reactor's pending list (sk_transport_feed_soon) */
    uint8_t on_flush;      /* on the reactor's flush list: its output leaves with the batch */
    uint8_t peer_eof;      /* the peer's FIN arrived: no more reading, no EPOLLRDHUP */
    uint8_t told;          /* the handler's closed() ran: its calls have no effect any more */
    uint8_t io_want;       /* IO_*: readiness the layer asked for (0 for the plain layer) */
    uint8_t repoll;        /* update_events must re-poll (EPOLL_CTL_MOD) even with the same mask */
    uint8_t read_soon;     /* on the pending list to read the layer's held input (rule 2b) */
    uint8_t no_sendfile;   /* the layer answered SK_STREAM_NO_SENDFILE: file ranges go by pread */
    uint8_t reset;         /* SO_LINGER 0 is set: the close resets (the layer sends nothing) */
    uint8_t close_cuts;    /* enum sk_close_cuts: while not SK_CLOSE_WHOLE, a close cuts a
                            * message that only the close would end: it must be a reset */
    uint8_t deadline_kind; /* the handler's deadline, 0 = none (kinds are below 256) */
    uint8_t after_last;    /* SK_CLOSE_AFTER_LAST: no linger when safe (nothing_waits) */
    double deadline;       /* monotonic seconds */
    double tp_deadline; /* monotonic seconds: write progress (output pending) or linger; 0 = none */
    sk_transport_t *all_prev, *all_next;
    sk_transport_t *pending_next;
    sk_transport_t *flush_prev, *flush_next;
    sk_transport_t *reap_next;
    /* The peer's address as accept() gave it, kept only for the families a scope or a log shows
     * (an AF_UNIX peer's path is never read: its scope "client" is None). Not a
     * sockaddr_storage: 100 bytes less for every connection (bench/LEVERS.md, issue 37). */
    union {
        struct sockaddr sa;
        struct sockaddr_in in4;
        struct sockaddr_in6 in6;
    } peer;
    socklen_t peer_len; /* bytes of peer filled, at most sizeof(peer) */
};

struct sk_reactor {
    sk_reactor_config_t cfg;
    int epfd;
    int timerfd;
    uint8_t accepting;         /* accepting is wanted (start_accepting .. stop_accepting) */
    uint8_t accept_paused;     /* wanted but the listener is out of the epoll set for now */
    uint8_t closed;            /* sk_reactor_close ran */
    uint8_t pending_scheduled; /* run_pending is queued on the loop */
    uint8_t pause_logged;      /* the current pause was logged: log its end too */
    uint8_t batching;          /* on_ready or run_pending is on the stack: it flushes at its end */
    uint8_t flushing;          /* flush_batch is on the stack */
    double pause_logged_at;    /* monotonic seconds of the last "accepting paused" warning */
    sk_shared_ssize_t connections; /* read from any thread (Server.metrics()) */
    Py_ssize_t trim_peak;          /* the most connections a tick saw since the last trim */
    sk_transport_t *all_head;
    sk_transport_t *pending_head, *pending_tail;
    /* Transports whose output waits for the end of the batch (sk_transport_write_later, or a
     * data_received() call that returned inside on_ready/run_pending), in the order queued. */
    sk_transport_t *flush_head, *flush_tail;
    double batch_since; /* monotonic seconds: the flush list's first transport went on it */
    sk_transport_t *reap_head;
    /* The transports, and the handlers' state (sk_transport_handler_alloc), each packed in
     * chunks of their own (sk_slab.h: issue 37, memory per idle connection). */
    sk_slab_t tslab, hslab;
    /* Range blocks freed by the last ranges sent, for the next (range_new), linked by `next`, at
     * most SPARE_RANGES: a body sent by reference per response (or per HTTP/2 DATA frame) would
     * otherwise allocate and free one each time. Owned. */
    tp_range_t *spare_rg;
    int nspare;
    char readbuf[READ_SIZE];
};

static double
monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int tp_flush(sk_transport_t *t);
static void layer_held(sk_transport_t *t);
static void flush_batch(sk_reactor_t *r);
static void schedule_pending(sk_reactor_t *r);
static void tp_closed(sk_transport_t *t, int reason);
static size_t pending_out(const sk_transport_t *t);
static void range_drop(sk_transport_t *t);

/* ---- state ---------------------------------------------------------------------------------- */

/* The one place a transport's state changes. */
static void
set_state(sk_transport_t *t, enum tp_state to)
{
    assert(to > t->state || (to == TP_CLOSED && t->state != TP_CLOSED)); /* only forward */
    t->state = to;
}

/* The transport reads: while open, not paused by the handler and under both marks, or while
 * lingering. */
static inline int
reading_wanted(const sk_transport_t *t)
{
    if (t->state == TP_LINGERING) {
        return 1;
    }
    return t->state == TP_OPEN && !t->read_paused && sk_buf_len(&t->in) < INPUT_HIGH_WATER &&
           pending_out(t) < SK_OUTPUT_HIGH_WATER;
}

/* The transport writes: output waits and is not held back (nor left to a call's or the batch's
 * end). */
static inline int
writing_wanted(const sk_transport_t *t)
{
    return pending_out(t) > 0 && !t->held && !t->dispatching && !t->on_flush;
}

static void
update_events(sk_transport_t *t)
{
    /* Re-derives the epoll mask: EPOLLIN while reading, EPOLLOUT while writing, and what the
     * stream layer asked for (io_want). */
    if (t->state == TP_CLOSED) {
        return;
    }
    uint32_t want = CONN_EPOLL | (t->peer_eof ? 0 : EPOLLRDHUP); /* told once is enough */
    int reading = reading_wanted(t);
    if (t->io_want == 0) {
        want |= (reading ? EPOLLIN | EPOLLPRI : 0) | (writing_wanted(t) ? EPOLLOUT : 0);
    }
    else {
        /* Rule 1: a side the layer blocked waits for the readiness it named, not its own (which
         * the re-poll of every MOD would otherwise report again and again). */
        if (reading) {
            want |= t->io_want & IO_READ_WANTS_WRITE ? EPOLLOUT : EPOLLIN | EPOLLPRI;
        }
        if (writing_wanted(t) || (t->io_want & IO_SHUTDOWN)) {
            want |= t->io_want & IO_WRITE_WANTS_READ ? EPOLLIN : EPOLLOUT;
        }
    }
    if (want != t->epoll_events || t->repoll) {
        /* A MOD re-polls too: the readiness the layer now waits for may be there already. */
        struct epoll_event ev = {.events = want, .data.ptr = t};
        if (epoll_ctl(t->reactor->epfd, EPOLL_CTL_MOD, t->s.fd, &ev) == 0) {
            t->epoll_events = want;
            t->repoll = 0;
        }
    }
    if (reading && t->sops->pending != NULL) {
        layer_held(t); /* reading (again): input the layer holds raises no edge (rule 2b) */
    }
}

static void
log_accepting(sk_reactor_t *r, const char *level, const char *msg)
{
    /* logger.<level>(msg); a failure to log is reported as unraisable. */
    if (r->cfg.logger == NULL || r->cfg.logger == Py_None) {
        return;
    }
    PyObject *res = PyObject_CallMethod(r->cfg.logger, level, "s", msg);
    if (res == NULL) {
        PyErr_WriteUnraisable(r->cfg.logger);
    }
    Py_XDECREF(res);
}

/* Accepting stops for now (the listener leaves the epoll set): why, with the count of open
 * connections, logged at most once per PAUSE_LOG_INTERVAL seconds. */
static void
accept_pause(sk_reactor_t *r, int err)
{
    char msg[200];
    double now = monotonic();
    r->accept_paused = 1;
    if (r->pause_logged_at != 0 && now - r->pause_logged_at < PAUSE_LOG_INTERVAL) {
        return;
    }
    if (err != 0) {
        (void)snprintf(msg, sizeof(msg),
                       "accept() failed (%s) with %zd connections open: out of file descriptors "
                       "or memory; accepting paused for 1 s",
                       strerror(err), (Py_ssize_t)SK_LOAD(r->connections));
    }
    else {
        (void)snprintf(msg, sizeof(msg),
                       "--limit-connections %zd reached: accepting paused until a connection "
                       "closes",
                       r->cfg.limit_connections);
    }
    r->pause_logged_at = now;
    r->pause_logged = 1;
    log_accepting(r, "warning", msg);
}

static void
accept_resume(sk_reactor_t *r)
{
    char msg[100];
    r->accept_paused = 0;
    if (r->pause_logged) {
        r->pause_logged = 0;
        (void)snprintf(msg, sizeof(msg), "accepting resumed with %zd connections open",
                       (Py_ssize_t)SK_LOAD(r->connections));
        log_accepting(r, "info", msg);
    }
}

static int
listen_register(sk_reactor_t *r, int add)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->cfg.listen_fd};
    return epoll_ctl(r->epfd, add ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, r->cfg.listen_fd,
                     add ? &ev : NULL);
}

static void
unlink_pending(sk_transport_t *t)
{
    sk_reactor_t *r = t->reactor;
    sk_transport_t **pp = &r->pending_head, *prev = NULL;
    if (!t->on_pending) {
        return;
    }
    while (*pp != NULL && *pp != t) {
        prev = *pp;
        pp = &(*pp)->pending_next;
    }
    if (*pp == t) {
        *pp = t->pending_next;
        if (r->pending_tail == t) {
            r->pending_tail = prev;
        }
    }
    t->pending_next = NULL;
    t->on_pending = 0;
}

/* Puts a transport on the flush list (once). */
static void
flush_link(sk_transport_t *t)
{
    sk_reactor_t *r = t->reactor;
    if (t->on_flush) {
        return;
    }
    t->on_flush = 1;
    t->flush_next = NULL;
    t->flush_prev = r->flush_tail;
    if (r->flush_tail) {
        r->flush_tail->flush_next = t;
    }
    else {
        r->flush_head = t;
    }
    r->flush_tail = t;
}

static void
flush_unlink(sk_transport_t *t)
{
    sk_reactor_t *r = t->reactor;
    if (!t->on_flush) {
        return;
    }
    if (t->flush_prev) {
        t->flush_prev->flush_next = t->flush_next;
    }
    else {
        r->flush_head = t->flush_next;
    }
    if (t->flush_next) {
        t->flush_next->flush_prev = t->flush_prev;
    }
    else {
        r->flush_tail = t->flush_prev;
    }
    t->flush_prev = t->flush_next = NULL;
    t->on_flush = 0;
}

/* Runs the handler's closed() entry, once. */
static void
tell_closed(sk_transport_t *t, int reason)
{
    if (!t->told) {
        t->told = 1;
        t->ops->closed(t->h, reason);
    }
}

/* The connection's close will reset it (RST): its end must not look complete. The layer sends
 * nothing more (its close entry is told). */
static void
tp_reset(sk_transport_t *t)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(t->s.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    t->reset = 1;
}

/* Closes the socket and tells the handler; the transport is freed by reap(). */
static void
tp_closed(sk_transport_t *t, int reason)
{
    sk_reactor_t *r = t->reactor;
    if (t->state == TP_CLOSED) {
        return;
    }
    set_state(t, TP_CLOSED);
    t->held = 0;
    if (t->close_cuts && !t->reset) {
        tp_reset(t); /* the part sent must not look whole (sk_transport_set_close_cuts) */
    }
    unlink_pending(t); /* a reaped transport must not stay on the pending list */
    flush_unlink(t);   /* nor on the flush list */
    (void)epoll_ctl(r->epfd, EPOLL_CTL_DEL, t->s.fd, NULL);
    if (t->sops->close != NULL) {
        t->sops->close(&t->s, t->reset); /* the layer's state goes before the socket */
    }
    close(t->s.fd);
    t->s.fd = -1;
    range_drop(t); /* a range not sent: its descriptor or bytes go with the connection */
    if (t->all_prev) {
        t->all_prev->all_next = t->all_next;
    }
    else {
        r->all_head = t->all_next;
    }
    if (t->all_next) {
        t->all_next->all_prev = t->all_prev;
    }
    SK_ADD(r->connections, -1);
    if (r->accept_paused && r->accepting && r->cfg.limit_connections > 0 &&
        SK_LOAD(r->connections) < r->cfg.limit_connections && listen_register(r, 1) == 0) {
        accept_resume(r);
    }
    t->reap_next = r->reap_head;
    r->reap_head = t;
    tell_closed(t, reason); /* last: the handler may call back (no effect any more) */
}

/* The peer sent its FIN (a read returned 0, or EPOLLRDHUP while not reading) and nothing says
 * the connection is reset. The handler is told at once (the request in flight sees the client
 * as gone: ASGI's http.disconnect), but what it already wrote, held or not, is still sent
 * before the close: a response completed before a half-close is not thrown away (RFC 9112 §9.6
 * lets a client half-close after its last request). With nothing to send, it closes now. */
static void
tp_peer_eof(sk_transport_t *t)
{
    if ((t->state != TP_OPEN && t->state != TP_CLOSING) || pending_out(t) == 0) {
        tp_closed(t, t->state == TP_LINGERING ? SK_CLOSED_LINGER_DONE : SK_CLOSED_PEER);
        return;
    }
    if (t->state == TP_OPEN) {
        set_state(t, TP_CLOSING);
    }
    t->peer_eof = 1;
    t->held = 0;
    t->deadline_kind = 0;
    tell_closed(t, SK_CLOSED_PEER);
    if (t->state == TP_CLOSING) {
        (void)tp_flush(t); /* drained: closes (tp_flush); else waits for EPOLLOUT */
    }
}

static void
tp_free(sk_transport_t *t)
{
    assert(t->state == TP_CLOSED && t->s.fd == -1 && !t->on_pending && !t->on_flush);
    t->ops->release(t->h);
    if (t->retired_ops != NULL) {
        t->retired_ops->release(t->retired_h);
    }
    assert(t->rg == NULL); /* range_drop in tp_closed */
    sk_buf_free(&t->in);
    sk_buf_free(&t->out);
    SK_ADD(t->reactor->cfg.st->live_conns, -1);
    sk_slab_free(&t->reactor->tslab, t);
}

/* Frees every closed transport. Called when no frame below holds a transport pointer. */
static void
reap(sk_reactor_t *r)
{
    while (r->reap_head) {
        sk_transport_t *t = r->reap_head;
        r->reap_head = t->reap_next;
        tp_free(t);
    }
}

/* The output is sent and the server is done: half-close and read what the peer still sends for
 * a while, so unread input does not turn our last response into a RST. */
static void
tp_linger(sk_transport_t *t)
{
    int rc = t->sops->shutdown(&t->s);
    if (rc == SK_STREAM_WANT_READ || rc == SK_STREAM_WANT_WRITE) {
        /* The layer has more to exchange before its end (a close_notify the kernel did not
         * take): still closing, called again from tp_flush once the socket is ready, within the
         * write-progress deadline. */
        t->io_want |= IO_SHUTDOWN | (rc == SK_STREAM_WANT_READ ? IO_WRITE_WANTS_READ : 0);
        t->repoll = 1;
        t->tp_deadline = monotonic() + t->reactor->cfg.write_timeout;
        update_events(t);
        return;
    }
    t->io_want &= (uint8_t) ~(IO_SHUTDOWN | IO_WRITE_WANTS_READ);
    if (rc < 0) {
        tp_closed(t, SK_CLOSED_PEER);
        return;
    }
    set_state(t, TP_LINGERING);
    t->tp_deadline = monotonic() + LINGER_SECONDS;
    update_events(t);
}

/* SK_CLOSE_AFTER_LAST: on the plain layer, no input byte waits, neither in the input buffer nor
 * in the socket, and the client has acknowledged every byte sent (SIOCOUTQ: nothing unsent or
 * unacknowledged). Closing then sends a FIN after the output, as the half-close would, and no
 * RST: the kernel resets only a socket closed with unread bytes (RFC 9112 §9.6's reset problem).
 * A byte arriving later (the client's breach of its own "close", or a stray CRLF after its
 * request) is answered with a reset, which throws away what the closed socket has not sent yet:
 * so while any of the response is still queued the connection lingers instead, reading and
 * dropping such bytes until the client's FIN (a 200 KB response cut at 128 KB by a late CRLF,
 * found by the attack review, is a case). */
static int
nothing_waits(const sk_transport_t *t)
{
    char b;
    ssize_t n;
    int queued = 1;
    if (t->sops != &sk_stream_plain || sk_buf_len(&t->in) > 0 ||
        ioctl(t->s.fd, SIOCOUTQ, &queued) < 0 || queued != 0) {
        return 0;
    }
    do {
        n = recv(t->s.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n == 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)); /* 0: the FIN */
}

/* ---- writing -------------------------------------------------------------------------------- */

/* Unsent output, in bytes: the buffer, then each queued range and what follows it (saturating). */
static size_t
pending_out(const sk_transport_t *t)
{
    uint64_t n = (uint64_t)sk_buf_len(&t->out);
    for (const tp_range_t *rg = t->rg; rg != NULL; rg = rg->next) {
        n += rg->left + (uint64_t)sk_buf_len(&rg->tail);
    }
    return n > (uint64_t)SIZE_MAX ? SIZE_MAX : (size_t)n;
}

static inline int
range_pending(const sk_transport_t *t)
{
    return t->rg != NULL;
}

/* Unsent bytes of the first queued range when it is a bytes range (0: none, or a file's). */
static inline uint64_t
bytes_left(const sk_transport_t *t)
{
    return t->rg != NULL && t->rg->ref != NULL ? t->rg->left : 0;
}

/* The chain's last range, or NULL. */
static tp_range_t *
range_last(const sk_transport_t *t)
{
    tp_range_t *rg = t->rg;
    while (rg != NULL && rg->next != NULL) {
        rg = rg->next;
    }
    return rg;
}

/* Queues a range at the chain's end (an empty tail follows it): 0, or -1 when RANGES_MAX are
 * queued or memory runs out. */
static int
range_new(sk_transport_t *t, PyObject *ref, int fd, uint64_t off, uint64_t count)
{
    int n = 0;
    tp_range_t *last = NULL;
    for (tp_range_t *q = t->rg; q != NULL; q = q->next) {
        last = q;
        n++;
    }
    if (n >= RANGES_MAX) {
        return -1;
    }
    sk_reactor_t *r = t->reactor;
    tp_range_t *rg = r->spare_rg;
    if (rg != NULL) {
        r->spare_rg = rg->next;
        r->nspare--;
        memset(rg, 0, sizeof(*rg));
    }
    else if ((rg = PyMem_RawCalloc(1, sizeof(tp_range_t))) == NULL) {
        return -1;
    }
    rg->ref = Py_XNewRef(ref);
    rg->file_fd = fd;
    rg->off = off;
    rg->left = count;
    if (last != NULL) {
        last->next = rg;
    }
    else {
        t->rg = rg;
    }
    return 0;
}

/* Drops the chain's first range, its file descriptor or bytes object and what followed it. */
static void
range_pop(sk_transport_t *t)
{
    tp_range_t *rg = t->rg;
    sk_reactor_t *r = t->reactor;
    t->rg = rg->next;
    if (rg->file_fd >= 0) {
        close(rg->file_fd);
    }
    Py_XDECREF(rg->ref); /* an exact bytes object: its deallocation runs no Python code */
    sk_buf_free(&rg->tail);
    if (r->nspare < SPARE_RANGES) {
        rg->next = r->spare_rg;
        r->spare_rg = rg;
        r->nspare++;
    }
    else {
        PyMem_RawFree(rg);
    }
}

/* Drops every queued range, with what followed each. */
static void
range_drop(sk_transport_t *t)
{
    while (t->rg != NULL) {
        range_pop(t);
    }
}

/* The first queued range is sent (so is `out`): what the handler appended behind it becomes the
 * output. */
static void
range_done(sk_transport_t *t)
{
    tp_range_t *rg = t->rg;
    assert(sk_buf_len(&t->out) == 0 && rg->left == 0);
    if (sk_buf_len(&rg->tail) > 0) {
        sk_buf_t sent = t->out; /* empty: the range is only sent once `out` is */
        t->out = rg->tail;
        rg->tail = sent; /* its storage goes with the range */
    }
    /* else `out` keeps its storage for the next response, as before the range */
    range_pop(t);
}

/* Answers a write-side would-block of the layer: 0 (SK_STREAM_WANT_WRITE: EPOLLOUT, as the
 * unsent output asks anyway; SK_STREAM_WANT_READ: EPOLLIN too, rule 1), or -1 for an error. */
static int
write_blocked(sk_transport_t *t, ssize_t rc)
{
    if (rc == SK_STREAM_WANT_WRITE) {
        return 0;
    }
    if (rc == SK_STREAM_WANT_READ) {
        t->io_want |= IO_WRITE_WANTS_READ;
        t->repoll = 1;
        return 0;
    }
    return -1;
}

/* Reads the next part of the queued file range into the (empty) output buffer, for a layer that
 * cannot sendfile: the loop in tp_flush then writes it as any output. 1 read, -2 the file failed
 * or memory ran out (the reason in *reason). */
static int
file_read(sk_transport_t *t, int *reason)
{
    tp_range_t *rg = t->rg;
    size_t want = rg->left > PREAD_MAX ? PREAD_MAX : (size_t)rg->left;
    ssize_t n;
    if (sk_buf_reserve(&t->out, want) < 0) {
        *reason = SK_CLOSED_NO_MEMORY;
        return -2;
    }
    do {
        n = pread(rg->file_fd, t->out.data + t->out.end, want, (off_t)rg->off);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        *reason = n == 0 ? SK_CLOSED_FILE_SHORT : SK_CLOSED_FILE_ERROR; /* as sendfile's */
        return -2;
    }
    t->out.end += (size_t)n;
    rg->off += (uint64_t)n;
    rg->left -= (uint64_t)n;
    return 1;
}

/* One sendfile of the queued range through the layer: 1 bytes sent, 2 bytes read into the output
 * buffer instead (the layer cannot sendfile: file_read), 0 the kernel takes no more for now, -1
 * the peer is gone, -2 the file failed (SK_CLOSED_FILE_SHORT or _ERROR in *reason). */
static int
file_send(sk_transport_t *t, int *reason)
{
    tp_range_t *rg = t->rg;
    size_t want = rg->left > SENDFILE_MAX ? SENDFILE_MAX : (size_t)rg->left;
    ssize_t n = t->no_sendfile || t->sops->sendfile == NULL
                    ? SK_STREAM_NO_SENDFILE
                    : t->sops->sendfile(&t->s, rg->file_fd, &rg->off, want);
    if (n > 0) {
        rg->left -= (uint64_t)n;
        return 1;
    }
    if (n == 0) {
        *reason = SK_CLOSED_FILE_SHORT; /* end of file before the count */
        return -2;
    }
    if (n == SK_STREAM_NO_SENDFILE) {
        t->no_sendfile = 1;
        return file_read(t, reason) > 0 ? 2 : -2;
    }
    if (n != SK_STREAM_ERROR) {
        return write_blocked(t, n);
    }
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN || errno == ETIMEDOUT) {
        return -1;
    }
    *reason = SK_CLOSED_FILE_ERROR; /* EIO, EINVAL, ...: the file's side */
    return -2;
}

/* One write of the buffer and the queued bytes ranges behind it, each followed by its tail, up
 * to a file range or SK_STREAM_IOV_MAX entries, through the layer, never copying a range: > 0
 * bytes sent (*finished counts the ranges that were sent whole: dropped, their tails now the
 * output), 0 the kernel takes no more for now, -1 the peer is gone. */
static ssize_t
bytes_send(sk_transport_t *t, int *finished)
{
    struct iovec iov[SK_STREAM_IOV_MAX];
    int cnt = 0;
    if (sk_buf_len(&t->out) > 0) {
        iov[cnt++] = (struct iovec){(void *)sk_buf_head(&t->out), sk_buf_len(&t->out)};
    }
    for (const tp_range_t *rg = t->rg; rg != NULL && rg->ref != NULL && cnt < SK_STREAM_IOV_MAX;
         rg = rg->next) {
        if (rg->left > 0) {
            iov[cnt++] = (struct iovec){PyBytes_AS_STRING(rg->ref) + rg->off, (size_t)rg->left};
        }
        if (sk_buf_len(&rg->tail) > 0 && cnt < SK_STREAM_IOV_MAX) {
            iov[cnt++] = (struct iovec){(void *)sk_buf_head(&rg->tail), sk_buf_len(&rg->tail)};
        }
    }
    ssize_t n = t->sops->writev(&t->s, iov, cnt, 0);
    if (n <= 0) {
        return write_blocked(t, n);
    }
    /* consumed in the order offered: the buffer, the first range, its tail (the buffer once the
     * range is dropped), the next range, ... */
    size_t left = (size_t)n;
    for (;;) {
        size_t k = left < sk_buf_len(&t->out) ? left : sk_buf_len(&t->out);
        sk_buf_consume(&t->out, k);
        left -= k;
        if (left == 0 || t->rg == NULL || t->rg->ref == NULL) {
            break;
        }
        tp_range_t *rg = t->rg;
        uint64_t r = left < rg->left ? left : rg->left;
        rg->off += r;
        rg->left -= r;
        left -= (size_t)r;
        if (rg->left > 0) {
            break;
        }
        range_done(t);
        (*finished)++;
    }
    assert(left == 0);
    return n;
}

/* One write of the buffer through the layer (more: a file range follows), the bytes sent
 * consumed: > 0 bytes sent, 0 the kernel takes no more for now, -1 the peer is gone (errno says
 * why). */
static ssize_t
buf_send(sk_transport_t *t, int more)
{
    struct iovec iov = {sk_buf_head(&t->out), sk_buf_len(&t->out)};
    ssize_t n = t->sops->writev(&t->s, &iov, 1, more);
    if (n > 0) {
        sk_buf_consume(&t->out, (size_t)n);
        return n;
    }
    return write_blocked(t, n);
}

/* Sends the output (the buffer, then a queued range, then what follows it) until the kernel
 * takes no more. 0, or -1 when the peer is gone or the file failed (closed). */
static int
tp_flush(sk_transport_t *t)
{
    int progress = 0, range_finished = 0; /* ranges sent whole */
    int was_high = pending_out(t) >= SK_OUTPUT_HIGH_WATER;
    int was_stalled = t->tp_deadline != 0;
    assert(t->state == TP_OPEN || t->state == TP_CLOSING);
    for (;;) {
        if (bytes_left(t) > 0) {
            /* bytes ranges: sent with the buffer before them, in one call, never copied */
            ssize_t n = bytes_send(t, &range_finished);
            if (n > 0) {
                progress = 1;
                continue;
            }
            if (n == 0) {
                break;
            }
            tp_closed(t, SK_CLOSED_PEER);
            return -1;
        }
        if (sk_buf_len(&t->out) > 0) {
            /* a file range follows: the head joins its first segment (MSG_MORE) */
            ssize_t n = buf_send(t, t->rg != NULL && t->rg->left > 0);
            if (n > 0) {
                progress = 1;
                continue;
            }
            if (n == 0) {
                break;
            }
            tp_closed(t, SK_CLOSED_PEER);
            return -1;
        }
        if (!range_pending(t)) {
            break;
        }
        if (t->rg->left == 0) {
            range_done(t);
            range_finished++;
            continue;
        }
        int reason = 0;
        int rc = file_send(t, &reason);
        if (rc > 0) {
            progress |= rc == 1; /* a part read into the buffer is no write progress yet */
            continue;
        }
        if (rc == 0) {
            break;
        }
        if (rc == -2) {
            /* The message cannot be completed: a reset, so it never looks complete. */
            tp_reset(t);
        }
        tp_closed(t, rc == -2 ? reason : SK_CLOSED_PEER);
        return -1;
    }
    size_t left = pending_out(t);
    if (left == 0 && t->close_cuts == SK_CLOSE_CUTS_UNTIL_SENT) {
        t->close_cuts = SK_CLOSE_WHOLE; /* every byte of the close-delimited message is out */
    }
    if (left == 0 && t->state == TP_CLOSING) {
        t->tp_deadline = 0;
        if (t->peer_eof) {
            tp_closed(t, SK_CLOSED_PEER); /* the peer sends nothing more: no linger */
        }
        else if (t->close_cuts) {
            tp_closed(t, SK_CLOSED_BY_HANDLER); /* a reset: no half-close would say cut */
        }
        else if (t->after_last && nothing_waits(t)) {
            tp_closed(t, SK_CLOSED_LINGER_DONE); /* the close's FIN goes after the output */
        }
        else {
            tp_linger(t);
        }
        return 0;
    }
    if (left > 0) {
        if (progress || t->tp_deadline == 0) {
            t->tp_deadline = monotonic() + t->reactor->cfg.write_timeout;
        }
    }
    else {
        t->tp_deadline = 0;
    }
    if (!t->told && ((was_high && left < SK_OUTPUT_HIGH_WATER) || (was_stalled && left == 0) ||
                     range_finished)) {
        t->ops->writable(t->h);
        if (t->state == TP_CLOSED) {
            return 0;
        }
    }
    update_events(t);
    return 0;
}

/* Sends the output of every transport on the flush list, in the order they were queued: one
 * batch of writes, back to back, so a peer asleep in its poll is woken once for all of them
 * rather than once per response. A transport whose data_received() call is on the stack is left
 * to that call's end. */
static void
flush_batch(sk_reactor_t *r)
{
    if (r->flushing) {
        return; /* the loop on the stack takes what was queued meanwhile */
    }
    r->flushing = 1;
    while (r->flush_head != NULL) {
        sk_transport_t *t = r->flush_head;
        flush_unlink(t);
        if (t->dispatching || (t->state != TP_OPEN && t->state != TP_CLOSING)) {
            continue;
        }
        if (!t->held && (pending_out(t) > 0 || t->state == TP_CLOSING)) {
            (void)tp_flush(t); /* closing: sends, then closes (sk_transport_close) */
        }
        else {
            update_events(t);
        }
    }
    r->flushing = 0;
}

/* Puts a transport's output in the batch (the flush list); sends the batch at once when its
 * first response has waited cfg.batch_delay seconds (0: at once, no batch). */
static void
batch_add(sk_transport_t *t)
{
    sk_reactor_t *r = t->reactor;
    if (r->flush_head == NULL) {
        r->batch_since = monotonic();
    }
    flush_link(t);
    sk_reactor_flush_due(r);
}

/* ---- dispatching input to the handler ------------------------------------------------------- */

/* Offers data to the handler (switching handlers as often as it asks) and sends what the calls
 * produced. Returns the bytes consumed by the handlers. */
static size_t
dispatch(sk_transport_t *t, const char *data, size_t len)
{
    size_t used = 0;
    assert(!t->dispatching);
    t->dispatching = 1;
    for (;;) {
        const sk_handler_ops_t *ops = t->ops;
        size_t n = ops->data_received(t->h, data + used, len - used);
        if (t->state != TP_OPEN) {
            if (n < len - used) {
                t->after_last = 0; /* input follows the last request (an app that ran inside
                                    * the call closed before it was buffered): linger */
            }
            break;
        }
        assert(n <= len - used);
        used += n;
        if (t->ops == ops || used == len) {
            break; /* same handler: it stopped where it wants to; or nothing left for a new one */
        }
    }
    t->dispatching = 0;
    if ((t->state == TP_OPEN || t->state == TP_CLOSING) && !t->held) {
        if (pending_out(t) > 0 && t->reactor->batching) {
            batch_add(t); /* with the other connections' output, when the callback ends */
        }
        else if (pending_out(t) > 0 || t->state == TP_CLOSING) {
            (void)tp_flush(t); /* closing with nothing to send: the close (sk_transport_close) */
        }
    }
    return used;
}

/* Feeds the buffered input; keeps what is not consumed. */
static void
feed_buffered(sk_transport_t *t)
{
    if (t->state != TP_OPEN || sk_buf_len(&t->in) == 0) {
        return;
    }
    size_t used = dispatch(t, sk_buf_head(&t->in), sk_buf_len(&t->in));
    if (t->state != TP_OPEN) {
        return; /* closing: what is left is never offered */
    }
    sk_buf_consume(&t->in, used);
    update_events(t);
}

/* Asks epoll to report the connection again if its socket is still readable (or the peer's FIN
 * is still unread): EPOLL_CTL_MOD with the same mask re-polls it, and queues it at the end of
 * the ready list, as level-triggered would have. For a read that may have left bytes or the FIN
 * behind it (tp_readable): neither raises a new edge. A mask without EPOLLIN and EPOLLRDHUP
 * needs none: re-enabling them re-polls (update_events). */
static void
rearm(sk_transport_t *t)
{
    if (t->state != TP_CLOSED && (t->epoll_events & (EPOLLIN | EPOLLRDHUP))) {
        struct epoll_event ev = {.events = t->epoll_events, .data.ptr = t};
        (void)epoll_ctl(t->reactor->epfd, EPOLL_CTL_MOD, t->s.fd, &ev);
    }
}

/* Hands n bytes just read into the reactor's buffer to the handler (after what it left
 * unconsumed), keeps what it does not consume, and updates the mask; discards them when the
 * transport is not open (lingering). */
static void
consume_read(sk_transport_t *t, size_t n)
{
    sk_reactor_t *r = t->reactor;
    if (t->state != TP_OPEN) {
        t->after_last = 0; /* input after the last request: more may come, so linger */
        return;            /* closing or lingering: discard */
    }
    if (sk_buf_len(&t->in) > 0) {
        if (sk_buf_append(&t->in, r->readbuf, n) < 0) {
            tp_closed(t, SK_CLOSED_NO_MEMORY);
            return;
        }
        feed_buffered(t);
        return;
    }
    size_t used = dispatch(t, r->readbuf, n);
    if (t->state != TP_OPEN) {
        return;
    }
    if (used < n && sk_buf_append(&t->in, r->readbuf + used, n - used) < 0) {
        tp_closed(t, SK_CLOSED_NO_MEMORY);
        return;
    }
    update_events(t);
}

/* One read of the stream layer, for a readiness (`events`) or for input the layer holds (0).
 * Returns 1 when it read something or closed, 0 when nothing came (would-block, or not reading:
 * then a hang-up in `events` is handled). */
static int
tp_readable(sk_transport_t *t, uint32_t events)
{
    sk_reactor_t *r = t->reactor;
    if (!(t->epoll_events & EPOLLIN) ||
        (t->io_want != 0 && (!reading_wanted(t) || (t->io_want & IO_READ_WANTS_WRITE)))) {
        /* not reading (EPOLLIN may be in the mask for a layer's write: rule 1) */
        if (events & (EPOLLHUP | EPOLLERR)) {
            tp_closed(t, SK_CLOSED_PEER);
        }
        else if (events & EPOLLRDHUP) {
            tp_peer_eof(t);
        }
        return 0;
    }
    /* A short read leaves nothing behind (TCP returns once its queue is empty, and what arrives
     * later raises a new edge), except where the kernel stops early: at an urgent mark (TCP, and
     * AF_UNIX since Linux 5.15: the event carries EPOLLPRI), and where the layer says so (cut:
     * the plain layer's AF_UNIX read after a message carrying descriptors or credentials). */
    int cut = 0;
    ssize_t n = t->sops->read(&t->s, r->readbuf, READ_SIZE, &cut);
    if (n < 0) {
        if (n == SK_STREAM_WANT_WRITE) {
            t->io_want |= IO_READ_WANTS_WRITE; /* rule 1: EPOLLOUT, then this read again */
            t->repoll = 1;
            update_events(t);
        }
        else if (n != SK_STREAM_WANT_READ) {
            tp_closed(t, SK_CLOSED_PEER);
            return 1;
        }
        return 0;
    }
    if (n == 0) {
        tp_peer_eof(t);
        return 1;
    }
    /* what this read may have left in the socket raises no new edge */
    int again = (size_t)n == READ_SIZE || cut || (events & (EPOLLRDHUP | EPOLLHUP | EPOLLPRI));
    consume_read(t, (size_t)n);
    if (again) {
        rearm(t); /* whatever state the read left: lingering discards the rest too */
    }
    if (t->sops->pending != NULL) {
        layer_held(t); /* and what it may have left in the layer (rule 2b) */
    }
    return 1;
}

/* Puts a transport on the pending list (once): run_pending reads or feeds it on the next loop
 * iteration. */
static void
pending_link(sk_transport_t *t)
{
    sk_reactor_t *r = t->reactor;
    if (t->on_pending) {
        return;
    }
    t->on_pending = 1;
    t->pending_next = NULL;
    if (r->pending_tail) {
        r->pending_tail->pending_next = t;
    }
    else {
        r->pending_head = t;
    }
    r->pending_tail = t;
    schedule_pending(r);
}

/* Rule 2b of sk_stream.h: while the transport reads and the layer holds input (already off the
 * socket, so no edge will report it), it is read on the next loop iteration. Only for a layer
 * with a pending entry. */
static void
layer_held(sk_transport_t *t)
{
    if (t->state == TP_OPEN && !t->read_soon && !(t->io_want & IO_READ_WANTS_WRITE) &&
        reading_wanted(t) && t->sops->pending(&t->s) > 0) {
        t->read_soon = 1;
        pending_link(t);
    }
}

/* ---- the handler's API ---------------------------------------------------------------------- */

sk_buf_t *
sk_transport_out(sk_transport_t *t)
{
    return range_pending(t) ? &range_last(t)->tail : &t->out;
}

size_t
sk_transport_out_len(const sk_transport_t *t)
{
    return pending_out(t);
}

int
sk_transport_file_pending(const sk_transport_t *t)
{
    return t->rg != NULL && t->rg->file_fd >= 0;
}

/* Makes the queued bytes ranges ordinary output: what is left of each, then what followed it, are
 * copied to the end of `out` and the objects are released. 0, or -1 (nothing changed) when memory
 * runs out. */
static int
bytes_flatten(sk_transport_t *t)
{
    size_t len = sk_buf_len(&t->out);
    int rc = 0;
    for (const tp_range_t *rg = t->rg; rg != NULL && rc == 0; rg = rg->next) {
        assert(rg->ref != NULL);
        rc = sk_buf_append(&t->out, PyBytes_AS_STRING(rg->ref) + rg->off, (size_t)rg->left);
        if (rc == 0) {
            rc = sk_buf_append(&t->out, sk_buf_head(&rg->tail), sk_buf_len(&rg->tail));
        }
    }
    if (rc < 0) {
        t->out.end = t->out.start + len;
        return -1;
    }
    range_drop(t);
    return 0;
}

int
sk_transport_sendfile(sk_transport_t *t, int fd, uint64_t offset, uint64_t count)
{
    /* Bytes ranges still being sent (an earlier response's body to a slow reader) give way:
     * copied into the output, as they would have been without the ranges, so the file can
     * follow. */
    if (t->state != TP_OPEN || sk_transport_file_pending(t) ||
        (t->rg != NULL && bytes_flatten(t) < 0)) {
        close(fd);
        return -1;
    }
    if (count == 0) {
        close(fd);
        return 0;
    }
    if (range_new(t, NULL, fd, offset, count) < 0) {
        close(fd);
        return -1;
    }
    return 0;
}

int
sk_transport_send_slice(sk_transport_t *t, PyObject *bytes, size_t offset, size_t count)
{
    assert(PyBytes_CheckExact(bytes));
    assert(offset <= (size_t)PyBytes_GET_SIZE(bytes) &&
           count <= (size_t)PyBytes_GET_SIZE(bytes) - offset);
    if (t->state != TP_OPEN || sk_transport_file_pending(t)) {
        return -1;
    }
    if (count == 0) {
        return 0;
    }
    return range_new(t, bytes, -1, offset, count);
}

int
sk_transport_send_bytes(sk_transport_t *t, PyObject *bytes)
{
    return sk_transport_send_slice(t, bytes, 0, (size_t)PyBytes_GET_SIZE(bytes));
}

size_t
sk_transport_in_len(const sk_transport_t *t)
{
    return sk_buf_len(&t->in);
}

int
sk_transport_is_open(const sk_transport_t *t)
{
    return t->state == TP_OPEN;
}

int
sk_transport_write(sk_transport_t *t)
{
    if (t->state == TP_CLOSED || t->told) {
        return -1;
    }
    if (t->dispatching || t->state == TP_LINGERING) {
        return 0; /* sent when the data_received() call returns */
    }
    t->held = 0;
    flush_unlink(t);
    int rc = tp_flush(t);
    sk_reactor_flush(t->reactor); /* what waited for a batch leaves no later than this */
    return rc;
}

int
sk_transport_write_now(sk_transport_t *t)
{
    if (!t->dispatching || t->state != TP_OPEN || t->held || range_pending(t)) {
        return sk_transport_write(t);
    }
    /* Inside data_received(): a bare send of the buffer, nothing else. What the kernel does not
     * take (EAGAIN, a partial send) and any error stay for the call's end, whose tp_flush sends
     * the rest or closes and tells the handler then, never under the call on the stack (a reset
     * peer's error recurs: after ECONNRESET a send fails with EPIPE). */
    while (sk_buf_len(&t->out) > 0) {
        if (buf_send(t, 0) <= 0) {
            break;
        }
    }
    return 0;
}

int
sk_transport_write_later(sk_transport_t *t)
{
    if (t->state != TP_OPEN || t->dispatching) {
        return sk_transport_write(t); /* gone, closing, or sent when data_received() returns */
    }
    t->held = 0;
    batch_add(t);
    if (t->reactor->flush_head != NULL && !t->reactor->batching) {
        schedule_pending(t->reactor); /* the latest the batch can end: the next iteration */
    }
    return 0;
}

void
sk_reactor_flush_due(sk_reactor_t *r)
{
    if (r->flush_head != NULL && monotonic() - r->batch_since >= r->cfg.batch_delay) {
        flush_batch(r);
    }
}

void
sk_reactor_flush(sk_reactor_t *r)
{
    if (r->flush_head != NULL && !r->batching) {
        flush_batch(r);
    }
}

void
sk_transport_hold(sk_transport_t *t)
{
    if (t->state == TP_OPEN) {
        t->held = 1;
    }
}

void
sk_transport_release(sk_transport_t *t)
{
    if (!t->held) {
        return;
    }
    t->held = 0;
    if (!t->dispatching && t->state == TP_OPEN) {
        if (pending_out(t) > 0) {
            (void)tp_flush(t);
        }
        else {
            update_events(t);
        }
    }
}

void
sk_transport_pause_reading(sk_transport_t *t, int paused)
{
    if (t->read_paused != (paused != 0)) {
        t->read_paused = (paused != 0);
        update_events(t);
    }
}

void
sk_transport_feed(sk_transport_t *t)
{
    if (t->dispatching) {
        sk_transport_feed_soon(t); /* the call on the stack owns the input */
        return;
    }
    feed_buffered(t);
}

void
sk_transport_feed_soon(sk_transport_t *t)
{
    if (t->state == TP_OPEN) {
        pending_link(t);
    }
}

/* Queues run_pending on the loop (once until it runs). */
static void
schedule_pending(sk_reactor_t *r)
{
    /* Closed: nothing is left to run, and the owner may have let go of cfg.run_pending. */
    if (r->pending_scheduled || r->closed) {
        return;
    }
    /* In the owner's own context: this may run inside an app task's send(), whose context must
     * not leak into what run_pending starts. */
    PyObject *args[3] = {r->cfg.loop, r->cfg.run_pending, *r->cfg.context};
    PyObject *h = PyObject_VectorcallMethod(
        r->cfg.st->s_call_soon, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, r->cfg.call_soon_kw);
    if (h == NULL) {
        PyErr_WriteUnraisable(r->cfg.loop);
        return;
    }
    Py_DECREF(h);
    r->pending_scheduled = 1;
}

void
sk_transport_set_deadline(sk_transport_t *t, int kind, double seconds)
{
    assert(kind > 0 && kind <= UINT8_MAX);
    t->deadline_kind = (uint8_t)kind;
    t->deadline = monotonic() + seconds;
}

void
sk_transport_clear_deadline(sk_transport_t *t)
{
    t->deadline_kind = 0;
}

int
sk_transport_deadline_kind(const sk_transport_t *t)
{
    return t->deadline_kind;
}

void
sk_transport_close(sk_transport_t *t, int how)
{
    if (t->told) {
        return; /* after closed(): no effect (a FIN's drain goes on) */
    }
    if (t->state != TP_OPEN) {
        if (how == SK_CLOSE_NOW && t->state != TP_CLOSED) {
            tp_closed(t, SK_CLOSED_BY_HANDLER);
        }
        return;
    }
    if (how == SK_CLOSE_NOW) {
        tp_closed(t, SK_CLOSED_BY_HANDLER);
        return;
    }
    set_state(t, TP_CLOSING);
    t->held = 0;
    t->deadline_kind = 0;
    t->after_last = how == SK_CLOSE_AFTER_LAST;
    if (t->on_flush || t->dispatching) {
        /* Its last response leaves with the batch (flush_batch) or at the end of the
         * data_received() call (dispatch), with the other connections' output, and the close
         * follows it there: one wake-up of a client for several responses, also when each
         * ends its connection (churn). Never under data_received(): no closed() from inside. */
        return;
    }
    (void)tp_flush(t);
}

void
sk_transport_abort(sk_transport_t *t, int reset)
{
    if (t->state == TP_CLOSED || t->told) {
        return;
    }
    if (reset) {
        tp_reset(t);
        sk_buf_consume(&t->out, sk_buf_len(&t->out));
    }
    else if (bytes_left(t) > 0) {
        /* Best effort: what was already produced goes out, a queued body with it, as it would
         * have from the buffer; the message stays incomplete. */
        int finished = 0;
        (void)bytes_send(t, &finished);
    }
    else if (sk_buf_len(&t->out) > 0) {
        /* Best effort: what was already produced goes out; the message stays incomplete. */
        (void)buf_send(t, 0);
    }
    range_drop(t); /* dropped in tp_closed too; here before anything could follow it */
    tp_closed(t, SK_CLOSED_BY_HANDLER);
}

void
sk_transport_set_close_cuts(sk_transport_t *t, enum sk_close_cuts cuts)
{
    if (cuts == SK_CLOSE_CUTS_UNTIL_SENT && pending_out(t) == 0) {
        cuts = SK_CLOSE_WHOLE; /* nothing of it is left to send */
    }
    t->close_cuts = (uint8_t)cuts;
}

void
sk_transport_switch(sk_transport_t *t, const sk_handler_ops_t *ops, void *h)
{
    assert(t->state == TP_OPEN && t->retired_ops == NULL);
    if (t->state != TP_OPEN || t->retired_ops != NULL) {
        return;
    }
    t->retired_ops = t->ops; /* its frames may still be on the stack: released at the next tick */
    t->retired_h = t->h;
    t->ops = ops;
    t->h = h;
    t->deadline_kind = 0;
    if (!t->dispatching && sk_buf_len(&t->in) > 0) {
        sk_transport_feed_soon(t);
    }
}

void *
sk_transport_handler_alloc(sk_transport_t *t, size_t size)
{
    assert(size <= SK_TRANSPORT_HANDLER_SIZE);
    (void)size;
    return sk_slab_alloc(&t->reactor->hslab);
}

void
sk_transport_handler_free(sk_transport_t *t, void *h)
{
    sk_slab_free(&t->reactor->hslab, h);
}

const struct sockaddr *
sk_transport_peer(const sk_transport_t *t, socklen_t *len)
{
    *len = t->peer_len;
    return &t->peer.sa;
}

const sk_stream_t *
sk_transport_stream(const sk_transport_t *t)
{
    return &t->s;
}

int
sk_transport_local(const sk_transport_t *t, struct sockaddr_storage *ss)
{
    socklen_t sl = sizeof(*ss);
    memset(ss, 0, sizeof(*ss));
    return t->s.fd >= 0 ? getsockname(t->s.fd, (struct sockaddr *)ss, &sl) : -1;
}

/* ---- the reactor ---------------------------------------------------------------------------- */

/* Makes the transport of a socket just accepted: its stream layer's state (cfg.stream, plain by
 * default), its epoll registration, its handler (cfg.open). The transport, or NULL with `fd`
 * closed and nothing left behind. */
static sk_transport_t *
tp_new(sk_reactor_t *r, int fd, const struct sockaddr_storage *addr, socklen_t alen)
{
    int layer_open = 0, registered = 0;
    sk_transport_t *t = sk_slab_alloc(&r->tslab);
    if (t == NULL) {
        goto error;
    }
    t->s.fd = fd;
    t->s.family = addr->ss_family;
    t->sops = r->cfg.stream != NULL ? r->cfg.stream : &sk_stream_plain;
    t->reactor = r;
    t->peer_len = alen < (socklen_t)sizeof(t->peer) ? alen : (socklen_t)sizeof(t->peer);
    memcpy(&t->peer, addr, t->peer_len);
    if (t->sops->open != NULL && t->sops->open(&t->s, r->cfg.stream_arg) < 0) {
        goto error;
    }
    layer_open = 1;
    struct epoll_event ev = {.events = CONN_EPOLL | EPOLLIN | EPOLLPRI | EPOLLRDHUP, .data.ptr = t};
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        goto error;
    }
    registered = 1;
    t->epoll_events = ev.events;
    t->ops = r->cfg.ops;
    t->h = r->cfg.open(r->cfg.owner, t);
    if (t->h == NULL) {
        goto error;
    }
    return t;

error:
    if (registered) {
        (void)epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
    }
    if (layer_open && t->sops->close != NULL) {
        t->sops->close(&t->s, 0);
    }
    close(fd);
    sk_slab_free(&r->tslab, t);
    return NULL;
}

static void
reactor_accept(sk_reactor_t *r)
{
    for (int i = 0; i < MAX_ACCEPTS && r->accepting; i++) {
        struct sockaddr_storage addr = {0};
        socklen_t alen = sizeof(addr);
        int fd = accept4(r->cfg.listen_fd, (struct sockaddr *)&addr, &alen,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) {
                continue;
            }
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: stop polling the listener until the next timer tick. */
                int err = errno;
                if (listen_register(r, 0) == 0) {
                    accept_pause(r, err);
                }
            }
            return;
        }
        if (addr.ss_family == AF_INET || addr.ss_family == AF_INET6) {
            int one = 1;
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        sk_transport_t *t = tp_new(r, fd, &addr, alen);
        if (t == NULL) {
            return;
        }
        SK_ADD(r->cfg.st->live_conns, 1);
        t->all_next = r->all_head;
        if (r->all_head) {
            r->all_head->all_prev = t;
        }
        r->all_head = t;
        SK_ADD(r->connections, 1);
        if (r->cfg.limit_connections > 0 && SK_LOAD(r->connections) >= r->cfg.limit_connections) {
            /* --limit-connections: resume when one closes (tp_closed) */
            if (listen_register(r, 0) == 0) {
                accept_pause(r, 0);
            }
            return;
        }
    }
}

/* The tick's visit of an open transport (issue 37: memory per idle connection). A handler
 * switched away from is released now that none of its frames can be on the stack (a tick runs
 * from the reactor's own callback, never inside a handler call); with nothing unsent and no
 * input unconsumed, the transport's buffers are freed (made again by the next read or write)
 * and the handler frees what it keeps between messages (its idle op). */
static size_t
tp_trim(sk_transport_t *t)
{
    /* Returns the bytes of storage freed (buffer capacities and what the idle op reports). */
    size_t freed = 0;
    if (t->retired_ops != NULL) {
        const sk_handler_ops_t *ops = t->retired_ops;
        void *h = t->retired_h;
        t->retired_ops = NULL;
        t->retired_h = NULL;
        ops->release(h);
    }
    if (t->dispatching || pending_out(t) != 0 || range_pending(t) || sk_buf_len(&t->in) != 0) {
        return freed;
    }
    freed += t->in.cap + t->out.cap;
    sk_buf_free(&t->in);
    sk_buf_free(&t->out);
    if (t->ops->idle != NULL) {
        freed += t->ops->idle(t->h);
    }
    return freed;
}

/* The deadline sweep (the timer's readiness, after drain_ready: see sk_reactor_on_ready). */
static void
reactor_tick(sk_reactor_t *r)
{
    double now = monotonic();
    size_t freed = 0; /* bytes the idle connections gave back this tick */
    sk_transport_t *t = r->all_head;
    while (t != NULL) {
        sk_transport_t *next = t->all_next; /* a deadline closes only its own transport */
        if (t->tp_deadline != 0 && t->tp_deadline <= now) {
            tp_closed(t,
                      t->state == TP_LINGERING ? SK_CLOSED_LINGER_DONE : SK_CLOSED_WRITE_TIMEOUT);
        }
        else if (t->state == TP_OPEN && t->deadline_kind != 0 && t->deadline <= now &&
                 pending_out(t) == 0) {
            int kind = t->deadline_kind;
            t->deadline_kind = 0;
            t->ops->deadline(t->h, kind);
        }
        if (t->state == TP_OPEN) { /* the deadline may have closed it */
            freed += tp_trim(t);
        }
        t = next;
    }
#ifndef __GLIBC__
    (void)freed;
#else
    /* glibc keeps the pages of freed blocks resident (a heap shrinks only at its top): once
     * idle connections gave much back, or many connections have gone, the free pages go back to
     * the system (issue 37: RSS with 10,000 idle connections, and after they closed, 1.8x the
     * start). The idle storage is the only thing skirr keeps in glibc's heap per connection
     * (transports and handlers are the interpreter's allocator's), so its pages come free
     * whole. */
    Py_ssize_t open_now = SK_LOAD(r->connections);
    int trim = freed >= TRIM_AFTER_FREED;
    if (open_now > r->trim_peak) {
        r->trim_peak = open_now;
    }
    else if (r->trim_peak - open_now >= TRIM_AFTER_CLOSED && open_now <= r->trim_peak / 2) {
        trim = 1;
    }
    if (trim) {
        malloc_trim(0);
        r->trim_peak = open_now;
    }
#endif
    /* EMFILE pauses accepting until this tick; --limit-connections until a connection closes
     * (tp_closed): a tick must not resume it over the cap. */
    if (r->accept_paused && r->accepting &&
        (r->cfg.limit_connections == 0 || SK_LOAD(r->connections) < r->cfg.limit_connections) &&
        listen_register(r, 1) == 0) {
        accept_resume(r);
    }
}

sk_reactor_t *
sk_reactor_new(const sk_reactor_config_t *cfg)
{
    sk_reactor_t *r = PyMem_Calloc(1, sizeof(sk_reactor_t));
    if (r == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    r->cfg = *cfg;
    sk_slab_init(&r->tslab, sizeof(sk_transport_t));
    sk_slab_init(&r->hslab, SK_TRANSPORT_HANDLER_SIZE);
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->timerfd = -1;
    if (r->epfd < 0) {
        goto error;
    }
    r->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (r->timerfd < 0) {
        goto error;
    }
    struct itimerspec its = {.it_interval = {1, 0}, .it_value = {1, 0}};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->timerfd};
    if (timerfd_settime(r->timerfd, 0, &its, NULL) < 0 ||
        epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->timerfd, &ev) < 0) {
        goto error;
    }
    return r;

error:
    PyErr_SetFromErrno(PyExc_OSError);
    sk_reactor_free(r);
    return NULL;
}

int
sk_reactor_fd(const sk_reactor_t *r)
{
    return r->epfd;
}

int
sk_reactor_start_accepting(sk_reactor_t *r)
{
    if (r->closed || listen_register(r, 1) < 0) {
        return -1;
    }
    r->accepting = 1;
    r->accept_paused = 0;
    return 0;
}

void
sk_reactor_stop_accepting(sk_reactor_t *r)
{
    if (r->accepting) {
        if (!r->accept_paused) {
            (void)listen_register(r, 0);
        }
        r->accepting = 0;
        r->accept_paused = 0;
    }
}

/* Rule 1 of sk_stream.h: with the layer waiting on the other readiness (io_want), the events
 * become those of the side each readiness serves: EPOLLIN (or a hang-up) for a write or shutdown
 * waiting to read runs the write side (as EPOLLOUT), EPOLLOUT (or a hang-up) for a read waiting
 * to write runs the read side (as EPOLLIN); a side that waits gets nothing of its own readiness.
 * Each wait is answered once (asked again if the layer blocks again), and the mask follows.
 * Returns the events to handle. */
static uint32_t
crossed(sk_transport_t *t, uint32_t e)
{
    uint8_t w = t->io_want;
    uint32_t out = e & ~(uint32_t)(EPOLLIN | EPOLLPRI | EPOLLOUT); /* hang-ups stay */
    if (!(w & IO_READ_WANTS_WRITE)) {
        out |= e & (EPOLLIN | EPOLLPRI);
    }
    else if (e & (EPOLLOUT | EPOLLHUP)) {
        t->io_want &= (uint8_t)~IO_READ_WANTS_WRITE;
        out |= EPOLLIN;
    }
    if (!(w & IO_WRITE_WANTS_READ)) {
        if (writing_wanted(t) || (w & IO_SHUTDOWN)) {
            out |= e & EPOLLOUT;
        }
    }
    else if (e & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
        t->io_want &= (uint8_t)~IO_WRITE_WANTS_READ;
        out |= EPOLLOUT;
    }
    if (t->io_want != w) {
        update_events(t);
    }
    return out;
}

/* One non-blocking epoll_wait and the handling of what it reports (at most SK_MAX_EVENTS ready
 * descriptors): the listener accepts, connections flush and read. The timer is only noted
 * (*timer): its sweep runs once ready input has been taken (sk_reactor_on_ready). Returns the
 * descriptors reported other than the timer. */
static int
poll_ready(sk_reactor_t *r, int *timer)
{
    struct epoll_event evs[SK_MAX_EVENTS];
    int n = epoll_wait(r->epfd, evs, SK_MAX_EVENTS, 0);
    int others = 0;
    for (int i = 0; i < n; i++) {
        void *tag = evs[i].data.ptr;
        uint32_t e = evs[i].events;
        if (tag == &r->timerfd) {
            *timer = 1;
            continue;
        }
        others++;
        if (tag == &r->cfg.listen_fd) {
            reactor_accept(r);
            continue;
        }
        sk_transport_t *t = tag;
        if (t->state == TP_CLOSED) {
            continue;
        }
        if (e & EPOLLERR) {
            tp_closed(t, SK_CLOSED_PEER);
            continue;
        }
        if (t->io_want != 0) {
            e = crossed(t, e);
        }
        if ((e & EPOLLOUT) && (t->state == TP_OPEN || t->state == TP_CLOSING)) {
            if (tp_flush(t) < 0 || t->state == TP_CLOSED) {
                continue;
            }
        }
        if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) {
            tp_readable(t, e);
        }
    }
    return others;
}

/* The pending list (pending_link): input the layer holds is read, buffered input fed. The caller
 * batches. */
static void
run_pending_list(sk_reactor_t *r)
{
    while (r->pending_head) {
        sk_transport_t *t = r->pending_head;
        r->pending_head = t->pending_next;
        if (r->pending_head == NULL) {
            r->pending_tail = NULL;
        }
        t->pending_next = NULL;
        t->on_pending = 0;
        int read = t->read_soon && reading_wanted(t); /* the layer holds input (rule 2b) */
        t->read_soon = 0;
        if (!read || !tp_readable(t, 0)) {
            feed_buffered(t); /* a read fed the buffered input with the new */
        }
    }
}

/* Rounds of drain_ready before a sweep: each one the pending list and one epoll_wait. */
#define DRAIN_ROUNDS 8

/* Before the deadline sweep: takes the input that is ready now, so that no deadline expires over
 * input that arrived in time. After the loop was blocked (an app's synchronous work), the timer
 * and the connections whose input arrived during the block are ready together, in an order epoll
 * does not promise (the timer is level-triggered: it goes back on the ready list each time it is
 * reported), and a connection may be past the first SK_MAX_EVENTS. So the sweep runs only after
 * the events of its own epoll_wait, the pending list (input a layer holds, buffered input) and
 * further non-blocking epoll_waits until one reports nothing: what nginx does (events, then
 * timers). Once a second, so off the hot path; at most DRAIN_ROUNDS rounds, so a busy server's
 * sweep is not put off. */
static void
drain_ready(sk_reactor_t *r)
{
    uint64_t expirations;
    if (read(r->timerfd, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: a spurious wake-up; the sweep is harmless. */
    }
    for (int round = 0; round < DRAIN_ROUNDS && !r->closed; round++) {
        int fed = r->pending_head != NULL;
        run_pending_list(r);
        int timer = 0;
        if (poll_ready(r, &timer) == 0 && !fed) {
            break;
        }
    }
}

void
sk_reactor_on_ready(sk_reactor_t *r)
{
    if (r->closed) {
        return;
    }
    assert(!r->batching); /* the loop's callbacks never nest */
    r->batching = 1;
    int timer = 0;
    (void)poll_ready(r, &timer);
    if (timer && !r->closed) {
        drain_ready(r);
        reactor_tick(r);
    }
    r->batching = 0;
    flush_batch(r);
    reap(r);
}

void
sk_reactor_run_pending(sk_reactor_t *r)
{
    r->pending_scheduled = 0;
    assert(!r->batching); /* the loop's callbacks never nest */
    r->batching = 1;
    run_pending_list(r);
    r->batching = 0;
    flush_batch(r); /* and what waited for this iteration (sk_transport_write_later) */
    reap(r);
}

void
sk_reactor_shutdown(sk_reactor_t *r)
{
    /* The batch ends first: a handler tells an idle connection by its unsent output, and a
     * response waiting for the batch is not a busy connection's. */
    sk_reactor_flush(r);
    sk_transport_t *t = r->all_head;
    while (t != NULL) {
        sk_transport_t *next = t->all_next; /* shutdown() closes only its own transport */
        if (t->state == TP_OPEN) {
            t->ops->shutdown(t->h);
        }
        t = next;
    }
    reap(r);
}

void
sk_reactor_close(sk_reactor_t *r)
{
    if (r->closed) {
        return;
    }
    r->closed = 1;
    sk_reactor_stop_accepting(r);
    while (r->all_head) {
        tp_closed(r->all_head, SK_CLOSED_SERVER);
    }
    if (r->epfd >= 0) {
        close(r->epfd);
        r->epfd = -1;
    }
    if (r->timerfd >= 0) {
        close(r->timerfd);
        r->timerfd = -1;
    }
    r->pending_head = r->pending_tail = NULL;
    assert(r->flush_head == NULL); /* tp_closed unlinked every transport */
    reap(r);
}

void
sk_reactor_free(sk_reactor_t *r)
{
    if (r == NULL) {
        return;
    }
    sk_reactor_close(r); /* every transport is freed, and every handler with it */
    while (r->spare_rg != NULL) {
        tp_range_t *rg = r->spare_rg;
        r->spare_rg = rg->next;
        PyMem_RawFree(rg);
    }
    sk_slab_release(&r->tslab);
    sk_slab_release(&r->hslab);
    PyMem_Free(r);
}

Py_ssize_t
sk_reactor_connections(const sk_reactor_t *r)
{
    return SK_LOAD(r->connections);
}

int
sk_reactor_traverse(sk_reactor_t *r, visitproc visit, void *arg)
{
    for (sk_transport_t *t = r->all_head; t != NULL; t = t->all_next) {
        int rc = t->ops->traverse(t->h, visit, arg);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}
