/* sk_server.c — the native reactor: the Server type, its epoll set, client sockets and timers.
 *
 * Owns: accepting (accept4), reading (one recv per readiness: the short-read rule), feeding the
 * sans-I/O parser, the per-connection output buffer and EPOLLOUT, flow control (which connections
 * are read), the keep-alive/linger timer (one timerfd in the same epoll set, one sweep per tick),
 * refusals (the one error sink: refuse()), pipelining (the next buffered request starts as the
 * previous response completes; responses that follow each other at once leave in one write), and
 * connection lifetime. One epoll descriptor is
 * registered with the running loop through loop.add_reader, so asyncio and uvloop only wake it.
 * Never: builds scopes or talks ASGI (sk_request.c does); frees a connection while a frame may
 * still hold it (closed connections are reaped at the end of each entry point: server_reap()).
 */
#include "sk_native.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define LINGER_SECONDS 2.0 /* after a server-side close: read and discard for at most this long */

static double
monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *
sk_server_date(ServerObject *s)
{
    int64_t now = (int64_t)time(NULL);
    if (now != s->date_sec) {
        s->date_sec = now;
        sk_format_date(now, s->date);
    }
    return s->date;
}

static int listen_register(ServerObject *s, int add);

/* ---- connection lists ------------------------------------------------------------------------- */

static void
timer_disarm(sk_conn_t *c)
{
    ServerObject *s = c->server;
    if (!c->in_idle) {
        return;
    }
    if (c->idle_prev) {
        c->idle_prev->idle_next = c->idle_next;
    }
    else {
        s->idle_head = c->idle_next;
    }
    if (c->idle_next) {
        c->idle_next->idle_prev = c->idle_prev;
    }
    else {
        s->idle_tail = c->idle_prev;
    }
    c->idle_prev = c->idle_next = NULL;
    c->in_idle = 0;
    c->timer_kind = SK_TIMER_NONE;
}

static void
timer_arm(sk_conn_t *c, int kind, double seconds)
{
    ServerObject *s = c->server;
    timer_disarm(c);
    c->timer_kind = (uint8_t)kind;
    c->deadline = monotonic() + seconds;
    c->idle_prev = s->idle_tail;
    c->idle_next = NULL;
    if (s->idle_tail) {
        s->idle_tail->idle_next = c;
    }
    else {
        s->idle_head = c;
    }
    s->idle_tail = c;
    c->in_idle = 1;
}

/* Between requests: the keep-alive timer, or the head timer if the next request has begun. */
static void
conn_arm_idle(sk_conn_t *c)
{
    ServerObject *s = c->server;
    if (sk_buf_len(&c->in) > 0 || !sk_parser_idle(&c->parser)) {
        if (c->timer_kind != SK_TIMER_HEAD) {
            timer_arm(c, SK_TIMER_HEAD, s->head_timeout);
        }
    }
    else {
        timer_arm(c, SK_TIMER_KEEPALIVE, s->keep_alive);
    }
}

static void
conn_free(sk_conn_t *c)
{
    sk_parser_free(&c->parser);
    sk_buf_free(&c->in);
    sk_buf_free(&c->out);
    Py_CLEAR(c->client);
    Py_CLEAR(c->local);
    c->server->st->live_conns--;
    PyMem_Free(c);
}

/* Frees every closed connection. Called when no frame below holds a connection pointer. */
static void
server_reap(ServerObject *s)
{
    while (s->reap_head) {
        sk_conn_t *c = s->reap_head;
        s->reap_head = c->reap_next;
        conn_free(c);
    }
}

/* ---- epoll mask and closing ------------------------------------------------------------------- */

void
sk_conn_update_events(sk_conn_t *c)
{
    if (c->closed) {
        return;
    }
    uint32_t want = EPOLLRDHUP;
    RequestObject *r = c->current;
    if (c->lingering) {
        want |= EPOLLIN;
    }
    else if (!c->close_after_write && sk_buf_len(&c->in) < SK_INPUT_HIGH_WATER &&
             sk_buf_len(&c->out) < SK_WRITE_HIGH_WATER &&
             !(r != NULL && r->body_buffered >= SK_BODY_HIGH_WATER)) {
        want |= EPOLLIN;
    }
    if (sk_buf_len(&c->out) > 0 && !c->out_deferred) {
        want |= EPOLLOUT;
    }
    if (want != c->epoll_events) {
        struct epoll_event ev = {.events = want, .data.ptr = c};
        if (epoll_ctl(c->server->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0) {
            c->epoll_events = want;
        }
    }
}

void
sk_conn_close(sk_conn_t *c)
{
    ServerObject *s = c->server;
    if (c->closed) {
        return;
    }
    c->closed = 1;
    if (c->pending) { /* unlink: a reaped connection must not stay on the pending list */
        sk_conn_t **pp = &s->pending_head, *prev = NULL;
        while (*pp != NULL && *pp != c) {
            prev = *pp;
            pp = &(*pp)->pending_next;
        }
        if (*pp == c) {
            *pp = c->pending_next;
            if (s->pending_tail == c) {
                s->pending_tail = prev;
            }
        }
        c->pending = 0;
    }
    if (c->current) {
        sk_request_disconnect(c->current); /* detaches: c->current becomes NULL */
    }
    timer_disarm(c);
    (void)epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    if (c->all_prev) {
        c->all_prev->all_next = c->all_next;
    }
    else {
        s->all_head = c->all_next;
    }
    if (c->all_next) {
        c->all_next->all_prev = c->all_prev;
    }
    s->connections--;
    if (s->accept_paused && s->accepting && s->limit_connections > 0 &&
        s->connections < s->limit_connections && listen_register(s, 1) == 0) {
        s->accept_paused = 0;
    }
    c->reap_next = s->reap_head;
    s->reap_head = c;
}

/* The server is done with the connection and its output is flushed: half-close and read what
 * the peer still sends for a while, so unread input does not turn our last response into a RST. */
static void
conn_linger(sk_conn_t *c)
{
    if (c->current) {
        sk_request_disconnect(c->current);
    }
    if (shutdown(c->fd, SHUT_WR) < 0) {
        sk_conn_close(c);
        return;
    }
    c->lingering = 1;
    timer_arm(c, SK_TIMER_LINGER, LINGER_SECONDS);
    sk_conn_update_events(c);
}

/* The peer went away (EOF, reset, error): tell the request and close. */
static void
conn_peer_gone(sk_conn_t *c)
{
    sk_conn_close(c);
}

int
sk_conn_write(sk_conn_t *c)
{
    int progress = 0;
    int was_high = sk_buf_len(&c->out) >= SK_WRITE_HIGH_WATER;
    c->out_deferred = 0;
    while (sk_buf_len(&c->out) > 0) {
        ssize_t n = send(c->fd, sk_buf_head(&c->out), sk_buf_len(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            sk_buf_consume(&c->out, (size_t)n);
            progress = 1;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        }
        conn_peer_gone(c);
        return -1;
    }
    RequestObject *r = c->current;
    if (r != NULL && r->drain_waiter != NULL && sk_buf_len(&c->out) < SK_WRITE_HIGH_WATER) {
        PyObject *fut = r->drain_waiter; /* move out before calling into the loop */
        r->drain_waiter = NULL;
        PyObject *done = PyObject_CallMethodNoArgs(fut, r->st->s_done);
        if (done == Py_False) {
            PyObject *res = PyObject_CallMethodOneArg(fut, r->st->s_set_result, Py_None);
            if (res == NULL) {
                PyErr_WriteUnraisable(fut);
            }
            Py_XDECREF(res);
        }
        else if (done == NULL) {
            PyErr_WriteUnraisable(fut);
        }
        Py_XDECREF(done);
        Py_DECREF(fut);
    }
    if (sk_buf_len(&c->out) == 0 && c->close_after_write && !c->lingering) {
        conn_linger(c);
        return 0;
    }
    if (was_high && sk_buf_len(&c->out) < SK_WRITE_HIGH_WATER && c->current == NULL &&
        sk_buf_len(&c->in) > 0) {
        sk_conn_schedule(c); /* pipelined requests held back by unread responses may go on */
    }
    if (!c->lingering) {
        if (sk_buf_len(&c->out) > 0) {
            if (progress || c->timer_kind != SK_TIMER_WRITE) {
                timer_arm(c, SK_TIMER_WRITE, c->server->write_timeout);
            }
        }
        else if (c->timer_kind == SK_TIMER_WRITE) {
            timer_disarm(c);
            if (c->current == NULL) {
                conn_arm_idle(c);
            }
        }
    }
    sk_conn_update_events(c);
    return 0;
}

/* The one error sink: answers status, never reaches the app, and closes after the write. */
static void
refuse(sk_conn_t *c, int status)
{
    int started = 0;
    if (c->current) {
        started = c->current->resp.started && c->current->resp.head_written;
        sk_request_disconnect(c->current);
    }
    if (!started) {
        /* c->out may still hold earlier pipelined responses: the refusal goes after them. */
        int head = (c->parser.method == HTTP_HEAD); /* valid on SK_EV_ERROR too */
        if (sk_resp_error(&c->out, status, head, sk_server_date(c->server)) < 0) {
            sk_conn_close(c);
            return;
        }
    }
    c->close_after_write = 1;
    (void)sk_conn_write(c);
}

void
sk_server_abort_response(sk_conn_t *c)
{
    RequestObject *r = c->current;
    if (r != NULL && r->resp.head_written && r->resp.framing == SK_FRAME_CLOSE) {
        /* A close-delimited body would look complete after a FIN: reset instead. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        sk_buf_consume(&c->out, sk_buf_len(&c->out));
    }
    else if (sk_buf_len(&c->out) > 0) {
        /* Best effort: what was already produced goes out; the message stays incomplete. */
        (void)send(c->fd, sk_buf_head(&c->out), sk_buf_len(&c->out), MSG_NOSIGNAL);
    }
    if (!c->closed) {
        sk_conn_close(c);
    }
}

/* ---- parsing ---------------------------------------------------------------------------------- */

/* Parses data for connection c until the input is used up or a request blocks further parsing
 * (its response is pending, or its unconsumed body is over the high-water mark). Returns bytes
 * consumed. The connection may be closed on return. */
/* Parses one request's worth of events and starts its app (which, when started eagerly, may
 * answer before this returns). Returns bytes consumed. */
static size_t
conn_parse_one(sk_conn_t *c, const char *data, size_t len)
{
    size_t total = 0;
    RequestObject *to_run =
        NULL; /* strong: a request whose app starts once these bytes are parsed */
    /* Runs until the parser says it needs more input (SK_EV_NONE): after a head or body event
     * the parser may have an event due with no bytes left (the end of a Content-Length body). */
    while (!c->closed) {
        RequestObject *r = c->current;
        if (r != NULL && r->body_complete) {
            break;
        }
        if (r == NULL && sk_buf_len(&c->out) >= SK_WRITE_HIGH_WATER) {
            break; /* earlier responses are not read yet: start no new request (bounded memory) */
        }
        /* Over the body mark no more bytes are fed; but the end of a Content-Length body whose
         * last byte was in the last piece carries none and is due now: collect it with an
         * empty execute, or the app's next receive() waits for bytes that never come. */
        int paused = (r != NULL && r->body_buffered >= SK_BODY_HIGH_WATER);
        sk_event_t ev;
        size_t n = sk_parser_execute(&c->parser, data + total, paused ? 0 : len - total, &ev);
        total += n;
        if (ev.type == SK_EV_NONE) {
            break;
        }
        if (ev.type == SK_EV_HEAD) {
            ServerObject *s = c->server;
            if (c->timer_kind == SK_TIMER_HEAD || c->timer_kind == SK_TIMER_KEEPALIVE) {
                timer_disarm(c);
            }
            if (s->limit_concurrency > 0 && s->active_requests >= s->limit_concurrency) {
                refuse(c, 503); /* --limit-concurrency: over capacity, try again later */
                break;
            }
            s->total_requests++;
            c->requests++;
            r = sk_request_new(c->server, c);
            if (r == NULL) {
                PyErr_WriteUnraisable((PyObject *)c->server);
                refuse(c, 500);
                break;
            }
            c->current = r; /* strong: released by detach */
            to_run = (RequestObject *)Py_NewRef(r);
        }
        else if (ev.type == SK_EV_BODY) {
            if (r != NULL && sk_request_body(r, ev.data, ev.len) < 0) {
                PyErr_WriteUnraisable((PyObject *)c->server);
                refuse(c, 500);
                break;
            }
        }
        else if (ev.type == SK_EV_END) {
            if (r != NULL) {
                sk_request_end(r);
            }
            c->discarding = 0;
        }
        else { /* SK_EV_ERROR: the one error sink */
            refuse(c, ev.status);
            break;
        }
    }
    if (to_run != NULL) {
        if (to_run->conn == c && !c->closed && !c->close_after_write &&
            sk_request_run(to_run) < 0) {
            if (PyErr_Occurred()) {
                PyErr_WriteUnraisable((PyObject *)c->server);
            }
            refuse(c, 500);
        }
        Py_DECREF(to_run);
    }
    return total;
}

/* Parses data for connection c until the input is used up or a request blocks further parsing
 * (its response is pending, or its unconsumed body is over the high-water mark). A request whose
 * eagerly started app answered at once lets the next pipelined one go in the same pass; their
 * responses are written together when the pass ends (c->parsing defers sk_request.c's writes).
 * Returns bytes consumed. The connection may be closed on return. */
static size_t
conn_parse(sk_conn_t *c, const char *data, size_t len)
{
    size_t total = 0;
    c->parsing = 1;
    do {
        total += conn_parse_one(c, data + total, len - total);
    } while (!c->closed && !c->close_after_write && c->current == NULL && total < len &&
             c->server->eager_budget > 0 && c->server->eager);
    c->parsing = 0;
    if (!c->closed && sk_buf_len(&c->out) > 0) {
        RequestObject *r = c->current;
        if (!c->close_after_write && r != NULL && !r->stepped) {
            /* Responses to pipelined requests wait for the first step of the request just
             * started: if it answers at once, they all leave in one write; if not, that step's
             * end writes them (sk_conn_flush_deferred). */
            c->out_deferred = 1;
        }
        else {
            (void)sk_conn_write(c);
        }
    }
    return total;
}

/* Parses what c has buffered, keeps the rest, and re-derives its epoll mask. */
static void
conn_process_buffered(sk_conn_t *c)
{
    if (c->closed || c->lingering || sk_buf_len(&c->in) == 0) {
        return;
    }
    size_t used = conn_parse(c, sk_buf_head(&c->in), sk_buf_len(&c->in));
    if (c->closed || c->close_after_write) {
        return; /* refused: what is left is never parsed */
    }
    sk_buf_consume(&c->in, used);
    sk_conn_update_events(c);
}

static void
conn_readable(sk_conn_t *c, uint32_t events)
{
    ServerObject *s = c->server;
    if (!(c->epoll_events & EPOLLIN)) {
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            conn_peer_gone(c);
        }
        return;
    }
    ssize_t n = recv(c->fd, s->readbuf, SK_READ_SIZE, 0);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            conn_peer_gone(c);
        }
        return;
    }
    if (n == 0) {
        conn_peer_gone(c);
        return;
    }
    if (c->lingering) {
        return; /* discard */
    }
    if (c->timer_kind == SK_TIMER_KEEPALIVE) {
        timer_arm(c, SK_TIMER_HEAD, s->head_timeout); /* the next request head has begun */
    }
    if (sk_buf_len(&c->in) > 0) {
        if (sk_buf_append(&c->in, s->readbuf, (size_t)n) < 0) {
            sk_conn_close(c);
            return;
        }
        conn_process_buffered(c);
        return;
    }
    size_t used = conn_parse(c, s->readbuf, (size_t)n);
    if (c->closed || c->close_after_write) {
        return;
    }
    if (used < (size_t)n) {
        if (sk_buf_append(&c->in, s->readbuf + used, (size_t)n - used) < 0) {
            sk_conn_close(c);
            return;
        }
        if (c->current == NULL) {
            /* An eagerly started app already finished its response: go on with the rest. */
            sk_conn_schedule(c);
        }
    }
    sk_conn_update_events(c);
}

void
sk_conn_request_done(sk_conn_t *c, int keep_alive)
{
    ServerObject *s = c->server;
    RequestObject *r = c->current;
    if (r == NULL) {
        return;
    }
    /* A body the app did not read is read and discarded so the connection stays usable, unless
     * the client may be waiting for a 100 Continue that never came (RFC 9110 §10.1.1) or more
     * than SK_DISCARD_MAX bytes of it are still announced. */
    int discard = 0;
    if (!r->body_complete) {
        sk_parser_t *p = &c->parser;
        int waits_for_100 = r->expect_continue && !r->continue_sent;
        int too_much =
            p->has_content_length && p->content_length - p->body_received > SK_DISCARD_MAX;
        discard = !waits_for_100 && !too_much;
    }
    int reuse = keep_alive && (r->body_complete || discard) && !s->shutting_down && !c->closed;
    if (reuse && discard) {
        c->discarding = 1;
    }
    r->conn = NULL;
    c->current = NULL;
    Py_DECREF(r);
    if (c->closed) {
        return;
    }
    if (!reuse) {
        c->close_after_write = 1;
        (void)sk_conn_write(c);
        return;
    }
    if (c->timer_kind != SK_TIMER_WRITE) {
        conn_arm_idle(c);
    }
    if (sk_buf_len(&c->in) > 0) {
        if (c->parsing) {
            sk_conn_schedule(c); /* the pass on the stack owns the input */
        }
        else {
            /* A pipelined request is buffered: start it now rather than a loop iteration later.
             * Lazily (this may run inside the previous app's send()): its app never runs nested
             * in another's; its Task gets a fresh copy of the server's context, not the caller's.
             * The response just completed waits in out (see conn_parse). */
            int budget = s->eager_budget;
            s->eager_budget = 0;
            conn_process_buffered(c);
            s->eager_budget = budget;
            return;
        }
    }
    sk_conn_update_events(c);
}

static PyObject *
server_run_pending(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. loop.call_soon target: parses buffered pipelined input. */
    ServerObject *s = (ServerObject *)op;
    s->pending_scheduled = 0;
    s->eager_budget = SK_MAX_EAGER;
    while (s->pending_head) {
        sk_conn_t *c = s->pending_head;
        s->pending_head = c->pending_next;
        if (s->pending_head == NULL) {
            s->pending_tail = NULL;
        }
        c->pending_next = NULL;
        c->pending = 0;
        /* the next pipelined request, or more of a body once flow control let go */
        conn_process_buffered(c);
    }
    server_reap(s);
    Py_RETURN_NONE;
}

void
sk_conn_schedule(sk_conn_t *c)
{
    ServerObject *s = c->server;
    if (c->pending || c->closed) {
        return;
    }
    c->pending = 1;
    c->pending_next = NULL;
    if (s->pending_tail) {
        s->pending_tail->pending_next = c;
    }
    else {
        s->pending_head = c;
    }
    s->pending_tail = c;
    if (!s->pending_scheduled) {
        /* In the server's own context: this may run inside an app task's send(), whose context
         * must not leak into the next request's task (which copies the current context). */
        PyObject *args[3] = {s->loop, s->run_pending, s->context};
        PyObject *h = PyObject_VectorcallMethod(
            s->st->s_call_soon, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, s->call_soon_kw);
        if (h == NULL) {
            PyErr_WriteUnraisable((PyObject *)s);
            return;
        }
        Py_DECREF(h);
        s->pending_scheduled = 1;
    }
}

void
sk_conn_flush_deferred(sk_conn_t *c)
{
    if (c->closed || !c->out_deferred || c->parsing) {
        return; /* inside a parse pass, the pass writes at its end */
    }
    if (sk_conn_write(c) == 0) {
        sk_conn_update_events(c);
    }
}

/* ---- accepting and timers --------------------------------------------------------------------- */

static int
listen_register(ServerObject *s, int add)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->listen_fd};
    return epoll_ctl(s->epfd, add ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->listen_fd, add ? &ev : NULL);
}

static void
server_accept(ServerObject *s)
{
    for (int i = 0; i < SK_MAX_ACCEPTS && s->accepting; i++) {
        struct sockaddr_storage addr = {0};
        socklen_t alen = sizeof(addr);
        int fd =
            accept4(s->listen_fd, (struct sockaddr *)&addr, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) {
                continue;
            }
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors: stop polling the listener until the next timer tick. */
                if (listen_register(s, 0) == 0) {
                    s->accept_paused = 1;
                }
            }
            return;
        }
        if (addr.ss_family == AF_INET || addr.ss_family == AF_INET6) {
            int one = 1;
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        sk_conn_t *c = PyMem_Calloc(1, sizeof(sk_conn_t));
        if (c == NULL) {
            close(fd);
            return;
        }
        c->fd = fd;
        c->server = s;
        s->st->live_conns++;
        memcpy(&c->peer, &addr, alen);
        c->peer_len = alen;
        sk_parser_init(&c->parser, &s->limits);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            conn_free(c);
            return;
        }
        c->epoll_events = ev.events;
        c->all_next = s->all_head;
        if (s->all_head) {
            s->all_head->all_prev = c;
        }
        s->all_head = c;
        s->connections++;
        timer_arm(c, SK_TIMER_HEAD, s->head_timeout);
        if (s->limit_connections > 0 && s->connections >= s->limit_connections) {
            /* --limit-connections: resume when one closes (sk_conn_close) */
            if (listen_register(s, 0) == 0) {
                s->accept_paused = 1;
            }
            return;
        }
    }
}

static void
server_tick(ServerObject *s)
{
    uint64_t expirations;
    if (read(s->timerfd, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: a spurious wake-up; the sweep below is harmless. */
    }
    double now = monotonic();
    sk_conn_t *c = s->idle_head;
    while (c != NULL) {
        sk_conn_t *next = c->idle_next;
        if (c->in_idle && c->deadline <= now) {
            if (c->timer_kind == SK_TIMER_HEAD && !c->discarding &&
                (sk_buf_len(&c->in) > 0 || !sk_parser_idle(&c->parser))) {
                refuse(c, 408); /* RFC 9110 §15.5.9: some of a request head, never all of it */
            }
            else {
                sk_conn_close(c); /* idle, linger over, no write progress, or no byte at all */
            }
        }
        c = next;
    }
    /* EMFILE pauses accepting until this tick; --limit-connections until a connection closes
     * (sk_conn_close): a tick must not resume it over the cap. */
    if (s->accept_paused && s->accepting &&
        (s->limit_connections == 0 || s->connections < s->limit_connections) &&
        listen_register(s, 1) == 0) {
        s->accept_paused = 0;
    }
}

static PyObject *
server_on_ready(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. loop.add_reader callback: handles at most SK_MAX_EVENTS ready
     * descriptors (level-triggered: the rest are reported on the next wake-up). */
    ServerObject *s = (ServerObject *)op;
    struct epoll_event evs[SK_MAX_EVENTS];
    if (s->closed) {
        Py_RETURN_NONE;
    }
    s->eager_budget = SK_MAX_EAGER;
    int n = epoll_wait(s->epfd, evs, SK_MAX_EVENTS, 0);
    for (int i = 0; i < n; i++) {
        void *tag = evs[i].data.ptr;
        uint32_t e = evs[i].events;
        if (tag == &s->listen_fd) {
            server_accept(s);
            continue;
        }
        if (tag == &s->timerfd) {
            server_tick(s);
            continue;
        }
        sk_conn_t *c = tag;
        if (c->closed) {
            continue;
        }
        if (e & EPOLLERR) {
            conn_peer_gone(c);
            continue;
        }
        if (e & EPOLLOUT) {
            if (sk_conn_write(c) < 0 || c->closed) {
                continue;
            }
        }
        if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) {
            conn_readable(c, e);
        }
    }
    server_reap(s);
    Py_RETURN_NONE;
}

/* ---- Python-visible methods ------------------------------------------------------------------- */

static PyObject *
server_start(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None, or NULL with an exception. */
    ServerObject *s = (ServerObject *)op;
    if (s->started || s->closed) {
        PyErr_SetString(PyExc_RuntimeError, "server already started or closed");
        return NULL;
    }
    PyObject *fd = PyLong_FromLong(s->epfd);
    if (fd == NULL) {
        return NULL;
    }
    PyObject *h = PyObject_CallMethodObjArgs(s->loop, s->st->s_add_reader, fd, s->on_ready, NULL);
    Py_DECREF(fd);
    if (h == NULL) {
        return NULL;
    }
    Py_DECREF(h);
    Py_XSETREF(s->context, PyContext_CopyCurrent());
    if (s->context == NULL) {
        return NULL;
    }
    /* With no custom task factory (a factory must see every task), request tasks are made by
     * calling asyncio.Task directly. Eager start (3.12+): the app runs up to its first real
     * suspension inside the reactor callback, as the request's own asyncio.Task (current_task()
     * is that task). */
    PyObject *factory = PyObject_CallMethod(s->loop, "get_task_factory", NULL);
    if (factory == NULL) {
        return NULL;
    }
    int no_factory = (factory == Py_None);
    Py_DECREF(factory);
    if (no_factory) {
        PyObject *asyncio = PyImport_ImportModule("asyncio");
        if (asyncio == NULL) {
            return NULL;
        }
        Py_XSETREF(s->task_type, PyObject_GetAttrString(asyncio, "Task"));
        Py_DECREF(asyncio);
#if PY_VERSION_HEX >= 0x030C0000
        s->eager = 1;
        Py_XSETREF(s->task_kw, Py_BuildValue("(sss)", "loop", "eager_start", "context"));
#else
        Py_XSETREF(s->task_kw, Py_BuildValue("(ss)", "loop", "context"));
#endif
        if (s->task_type == NULL || s->task_kw == NULL) {
            return NULL;
        }
    }
    if (listen_register(s, 1) < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    s->started = 1;
    s->accepting = 1;
    Py_RETURN_NONE;
}

static PyObject *
server_stop_accepting(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. */
    ServerObject *s = (ServerObject *)op;
    if (s->accepting) {
        if (!s->accept_paused) {
            (void)listen_register(s, 0);
        }
        s->accepting = 0;
    }
    Py_RETURN_NONE;
}

static PyObject *
server_shutdown(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. Closes idle connections; busy ones close after their response. */
    ServerObject *s = (ServerObject *)op;
    s->shutting_down = 1;
    sk_conn_t *c = s->all_head;
    while (c != NULL) {
        sk_conn_t *next = c->all_next;
        if (c->current == NULL && sk_buf_len(&c->out) == 0 && !c->lingering) {
            sk_conn_close(c);
        }
        c = next;
    }
    server_reap(s);
    Py_RETURN_NONE;
}

static void
server_close_all(ServerObject *s)
{
    if (s->closed) {
        return;
    }
    s->closed = 1;
    if (s->accepting && !s->accept_paused) {
        (void)listen_register(s, 0);
    }
    s->accepting = 0;
    while (s->all_head) {
        sk_conn_close(s->all_head);
    }
    if (s->started) {
        PyObject *fd = PyLong_FromLong(s->epfd);
        PyObject *r = fd ? PyObject_CallMethodOneArg(s->loop, s->st->s_remove_reader, fd) : NULL;
        if (r == NULL) {
            PyErr_Clear(); /* the loop may already be closed */
        }
        Py_XDECREF(r);
        Py_XDECREF(fd);
    }
    if (s->epfd >= 0) {
        close(s->epfd);
        s->epfd = -1;
    }
    if (s->timerfd >= 0) {
        close(s->timerfd);
        s->timerfd = -1;
    }
    s->pending_head = s->pending_tail = NULL;
    server_reap(s);
}

static PyObject *
server_close(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None. Idempotent. */
    server_close_all((ServerObject *)op);
    Py_RETURN_NONE;
}

static PyObject *
server_get_connections(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference. */
    return PyLong_FromSsize_t(((ServerObject *)op)->connections);
}

static PyObject *
server_get_total(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference. */
    return PyLong_FromUnsignedLongLong(((ServerObject *)op)->total_requests);
}

static PyObject *
server_get_active(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference. */
    return PyLong_FromSsize_t(((ServerObject *)op)->active_requests);
}

static PyObject *
server_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    /* New reference, or NULL with an exception. */
    static char *kwlist[] = {"app",
                             "loop",
                             "listen_fd",
                             "unix_path",
                             "root_path",
                             "state",
                             "timeout_keep_alive",
                             "limit_request_body",
                             "limit_request_line",
                             "limit_request_fields",
                             "limit_request_field_size",
                             "logger",
                             "timeout_request_head",
                             "timeout_write",
                             "limit_concurrency",
                             "limit_connections",
                             NULL};
    PyObject *app, *loop, *unix_path = Py_None, *root_path = NULL, *state = Py_None;
    PyObject *logger = Py_None;
    int listen_fd;
    double keep_alive = 5.0, head_timeout = 10.0, write_timeout = 30.0;
    Py_ssize_t limit_concurrency = 0, limit_connections = 0;
    unsigned long long max_body = 0;
    Py_ssize_t max_line = 8190, max_fields = 100, max_section = 65536;
    ServerObject *s = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, "OOi|$OUOdKnnnOddnn", kwlist, &app, &loop, &listen_fd, &unix_path,
            &root_path, &state, &keep_alive, &max_body, &max_line, &max_fields, &max_section,
            &logger, &head_timeout, &write_timeout, &limit_concurrency, &limit_connections)) {
        return NULL;
    }
    if (max_line <= 0 || max_fields <= 0 || max_section <= 0 || keep_alive < 0 ||
        head_timeout <= 0 || write_timeout <= 0 || limit_concurrency < 0 || limit_connections < 0) {
        PyErr_SetString(PyExc_ValueError, "limits and timeouts must be positive");
        return NULL;
    }
    s = (ServerObject *)tp->tp_alloc(tp, 0);
    if (s == NULL) {
        return NULL;
    }
    s->epfd = -1;
    s->timerfd = -1;
    s->listen_fd = listen_fd;
    s->st = sk_get_state_by_type(tp);
    if (s->st == NULL) {
        goto error;
    }
    s->st->live_servers++;
    s->app = Py_NewRef(app);
    s->loop = Py_NewRef(loop);
    s->logger = Py_NewRef(logger);
    s->state = Py_NewRef(state);
    s->unix_path = Py_NewRef(unix_path);
    s->root_path = root_path ? Py_NewRef(root_path) : PyUnicode_FromString("");
    if (s->root_path == NULL) {
        goto error;
    }
    s->root_path_b = PyUnicode_AsUTF8String(s->root_path);
    if (s->root_path_b == NULL) {
        goto error;
    }
    s->keep_alive = keep_alive;
    s->head_timeout = head_timeout;
    s->write_timeout = write_timeout;
    s->limit_concurrency = limit_concurrency;
    s->limit_connections = limit_connections;
    sk_limits_default(&s->limits);
    s->limits.max_body = max_body;
    s->limits.max_request_line = (size_t)max_line;
    s->limits.max_fields = (uint32_t)max_fields;
    s->limits.max_field_section = (size_t)max_section;
    s->on_ready = PyObject_GetAttrString((PyObject *)s, "_on_ready");
    if (s->on_ready == NULL) {
        goto error;
    }
    s->run_pending = PyObject_GetAttrString((PyObject *)s, "_run_pending");
    if (s->run_pending == NULL) {
        goto error;
    }
    s->call_soon_kw = Py_BuildValue("(s)", "context");
    s->context = PyContext_CopyCurrent();
    if (s->call_soon_kw == NULL || s->context == NULL) {
        goto error;
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    s->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (s->timerfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    struct itimerspec its = {.it_interval = {1, 0}, .it_value = {1, 0}};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->timerfd};
    if (timerfd_settime(s->timerfd, 0, &its, NULL) < 0 ||
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->timerfd, &ev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto error;
    }
    return (PyObject *)s;

error:
    Py_XDECREF(s);
    return NULL;
}

static int
server_traverse(PyObject *op, visitproc visit, void *arg)
{
    ServerObject *s = (ServerObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(s->app);
    Py_VISIT(s->loop);
    Py_VISIT(s->logger);
    Py_VISIT(s->state);
    Py_VISIT(s->root_path);
    Py_VISIT(s->root_path_b);
    Py_VISIT(s->unix_path);
    Py_VISIT(s->on_ready);
    Py_VISIT(s->run_pending);
    Py_VISIT(s->context);
    Py_VISIT(s->call_soon_kw);
    Py_VISIT(s->task_type);
    Py_VISIT(s->task_kw);
    for (sk_conn_t *c = s->all_head; c != NULL; c = c->all_next) {
        Py_VISIT(c->current);
    }
    return 0;
}

static int
server_clear(PyObject *op)
{
    ServerObject *s = (ServerObject *)op;
    server_close_all(s);
    Py_CLEAR(s->app);
    Py_CLEAR(s->loop);
    Py_CLEAR(s->logger);
    Py_CLEAR(s->state);
    Py_CLEAR(s->root_path);
    Py_CLEAR(s->root_path_b);
    Py_CLEAR(s->unix_path);
    Py_CLEAR(s->on_ready);
    Py_CLEAR(s->run_pending);
    Py_CLEAR(s->context);
    Py_CLEAR(s->call_soon_kw);
    Py_CLEAR(s->task_type);
    Py_CLEAR(s->task_kw);
    return 0;
}

static void
server_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((ServerObject *)op)->loop != NULL) {
        server_clear(op);
    }
    else {
        server_close_all((ServerObject *)op);
    }
    if (((ServerObject *)op)->st != NULL) {
        ((ServerObject *)op)->st->live_servers--;
    }
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef server_methods[] = {
    {"start", server_start, METH_NOARGS,
     "Registers the reactor with the loop and starts accepting."},
    {"stop_accepting", server_stop_accepting, METH_NOARGS, "Stops accepting new connections."},
    {"shutdown", server_shutdown, METH_NOARGS,
     "Graceful phase: closes idle connections; busy ones close after their response."},
    {"close", server_close, METH_NOARGS,
     "Closes every connection and leaves the loop. Idempotent."},
    {"_on_ready", server_on_ready, METH_NOARGS, NULL},
    {"_run_pending", server_run_pending, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef server_getset[] = {
    {"connections", server_get_connections, NULL, "Open client connections.", NULL},
    {"active_requests", server_get_active, NULL, "Requests whose application task is running.",
     NULL},
    {"total_requests", server_get_total, NULL, "Requests started since the server was made.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot server_slots[] = {
    {Py_tp_new, server_new},
    {Py_tp_methods, server_methods},
    {Py_tp_getset, server_getset},
    {Py_tp_traverse, server_traverse},
    {Py_tp_clear, server_clear},
    {Py_tp_dealloc, server_dealloc},
    {Py_tp_doc, (void *)"Server(app, loop, listen_fd, *, unix_path=None, root_path='', state=None, "
                        "timeout_keep_alive=5.0, limit_request_body=0, limit_request_line=8190, "
                        "limit_request_fields=100, limit_request_field_size=65536, logger=None, "
                        "timeout_request_head=10.0, timeout_write=30.0, limit_concurrency=0, "
                        "limit_connections=0)\n\n"
                        "A native HTTP/1.1 reactor serving one ASGI 3 application on one "
                        "listening socket. See skirr/_native.pyi."},
    {0, NULL},
};

PyType_Spec sk_server_spec = {
    .name = "skirr._native.Server",
    .basicsize = sizeof(ServerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = server_slots,
};
