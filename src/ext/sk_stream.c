/* sk_stream.c — the plain stream layer: a transport's byte I/O on its socket as it is.
 *
 * Owns: the system calls that move a connection's bytes (recv/recvmsg, send/sendmsg, sendfile,
 * shutdown) and the mapping of their errno to the layer's answers (sk_stream.h, rule 1).
 * Never: buffers, closes the socket, touches epoll, or includes Python (a layer is plain C).
 */
#include "sk_stream.h"

#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>

/* Answers a failed call on the socket: would-block is `want`, anything else an error. */
static ssize_t
failed(ssize_t want)
{
    return errno == EAGAIN || errno == EWOULDBLOCK ? want : SK_STREAM_ERROR;
}

static ssize_t
plain_read(sk_stream_t *s, char *buf, size_t cap, int *cut)
{
    ssize_t n;
    if (s->family == AF_UNIX) {
        /* recvmsg(): its MSG_CTRUNC tells a read the kernel cut after a message carrying
         * descriptors or another sender's credentials (skirr takes no control data, so the
         * kernel closes the descriptors and says so); what follows raises no new edge. */
        struct iovec iov = {buf, cap};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        do {
            n = recvmsg(s->fd, &msg, 0);
        } while (n < 0 && errno == EINTR);
        if (n > 0 && (msg.msg_flags & MSG_CTRUNC)) {
            *cut = 1;
        }
    }
    else {
        do {
            n = recv(s->fd, buf, cap, 0);
        } while (n < 0 && errno == EINTR); /* no edge would bring it back */
    }
    return n >= 0 ? n : failed(SK_STREAM_WANT_READ);
}

static ssize_t
plain_writev(sk_stream_t *s, const struct iovec *iov, int iovcnt, int more)
{
    int flags = MSG_NOSIGNAL | (more ? MSG_MORE : 0);
    for (;;) {
        ssize_t n;
        if (iovcnt == 1) {
            n = send(s->fd, iov[0].iov_base, iov[0].iov_len, flags);
        }
        else {
            struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
            n = sendmsg(s->fd, &msg, flags);
        }
        if (n > 0) {
            return n;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n == 0) {
            errno = EPIPE; /* not for a non-empty write on a stream socket; never "progress" */
            return SK_STREAM_ERROR;
        }
        return failed(SK_STREAM_WANT_WRITE);
    }
}

static ssize_t
plain_sendfile(sk_stream_t *s, int file_fd, uint64_t *offset, size_t count)
{
    for (;;) {
        off_t off = (off_t)*offset;
        ssize_t n = sendfile(s->fd, file_fd, &off, count);
        if (n >= 0) {
            *offset += (uint64_t)n;
            return n; /* 0: the file ended before `count` */
        }
        if (errno != EINTR) {
            return failed(SK_STREAM_WANT_WRITE);
        }
    }
}

static int
plain_shutdown(sk_stream_t *s)
{
    return shutdown(s->fd, SHUT_WR) == 0 ? 0 : SK_STREAM_ERROR;
}

const sk_stream_ops_t sk_stream_plain = {
    .name = "plain",
    .open = NULL,
    .read = plain_read,
    .pending = NULL,
    .writev = plain_writev,
    .sendfile = plain_sendfile,
    .shutdown = plain_shutdown,
    .close = NULL,
};
