/* test_stream.c — the plain stream layer (src/ext/sk_stream.c) against the contract of its table
 * (sk_stream.h): byte counts, would-block answers, errors with errno, the AF_UNIX cut read, file
 * ranges, the half-close. Plain C over socketpairs and a temporary file (no Python, no network).
 *
 * Owns: nothing beyond the descriptors each case opens and closes. Never: depends on the wall
 * clock or on a transport (the layer is driven alone, as a transport would call it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sk_stream.h"
#include "test/sk_test.h" /* src/core/test/ */

/* A nonblocking AF_UNIX stream pair: sv[0] is the layer's socket, sv[1] the peer. 0 or -1. */
static int
pair(int sv[2])
{
    return socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv);
}

/* What the peer has received, up to cap bytes (nonblocking): the count, or -1. */
static ssize_t
peer_read(int fd, char *buf, size_t cap)
{
    return recv(fd, buf, cap, MSG_DONTWAIT);
}

/* The table itself: the plain layer holds no state and no input. */
static void
test_table(T *t)
{
    CHECK(t, strcmp(sk_stream_plain.name, "plain") == 0);
    CHECK(t, sk_stream_plain.open == NULL);
    CHECK(t, sk_stream_plain.pending == NULL);
    CHECK(t, sk_stream_plain.close == NULL);
    CHECK(t, sk_stream_plain.read != NULL && sk_stream_plain.writev != NULL);
    CHECK(t, sk_stream_plain.sendfile != NULL && sk_stream_plain.shutdown != NULL);
}

/* read: bytes, then SK_STREAM_WANT_READ on an empty socket, then 0 at the peer's FIN. */
static void
test_read(T *t)
{
    int sv[2];
    char buf[64];
    int cut = 0;
    if (pair(sv) != 0) {
        CHECK(t, !"socketpair");
        return;
    }
    sk_stream_t s = {.fd = sv[0], .family = AF_UNIX};
    CHECK(t, sk_stream_plain.read(&s, buf, sizeof(buf), &cut) == SK_STREAM_WANT_READ);
    CHECK(t, write(sv[1], "hello", 5) == 5);
    CHECK(t, sk_stream_plain.read(&s, buf, sizeof(buf), &cut) == 5);
    CHECK(t, memcmp(buf, "hello", 5) == 0 && cut == 0);
    CHECK(t, write(sv[1], "abcdef", 6) == 6);
    CHECK(t, sk_stream_plain.read(&s, buf, 4, &cut) == 4); /* a full read: cap bytes */
    CHECK(t, sk_stream_plain.read(&s, buf, sizeof(buf), &cut) == 2);
    CHECK(t, memcmp(buf, "ef", 2) == 0);
    CHECK(t, shutdown(sv[1], SHUT_WR) == 0);
    CHECK(t, sk_stream_plain.read(&s, buf, sizeof(buf), &cut) == 0); /* the orderly end */
    CHECK(t, cut == 0);
    close(sv[0]);
    close(sv[1]);
}

/* read on AF_UNIX stops at a message carrying a descriptor (the kernel closes it: MSG_CTRUNC) and
 * says so through *cut: the bytes behind it raise no new edge (rule 2a). */
static void
test_read_cut(T *t)
{
    int sv[2];
    char buf[64];
    int cut = 0;
    if (pair(sv) != 0) {
        CHECK(t, !"socketpair");
        return;
    }
    sk_stream_t s = {.fd = sv[0], .family = AF_UNIX};
    int passed = dup(STDERR_FILENO);
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {(void *)"ab", 2};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &passed, sizeof(int));
    CHECK(t, write(sv[1], "xy", 2) == 2);
    CHECK(t, sendmsg(sv[1], &msg, 0) == 2);
    CHECK(t, write(sv[1], "cd", 2) == 2);
    ssize_t n = sk_stream_plain.read(&s, buf, sizeof(buf), &cut);
    CHECK(t, n > 0 && (size_t)n < 6 && cut == 1); /* stopped short, and said so */
    size_t got = n > 0 ? (size_t)n : 0;
    while (got < 6) {
        int more = 0;
        n = sk_stream_plain.read(&s, buf + got, sizeof(buf) - got, &more);
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
    }
    CHECK(t, got == 6 && memcmp(buf, "xyabcd", 6) == 0); /* nothing lost behind the cut */
    /* TCP-family reads never look at control data: *cut is left alone */
    cut = 0;
    s.family = AF_INET;
    CHECK(t, write(sv[1], "z", 1) == 1);
    CHECK(t, sk_stream_plain.read(&s, buf, sizeof(buf), &cut) == 1 && cut == 0);
    close(passed);
    close(sv[0]);
    close(sv[1]);
}

/* writev: one entry and two (the buffer and a by-reference range), in order; WANT_WRITE once the
 * kernel takes no more; SK_STREAM_ERROR with EPIPE (and no SIGPIPE) once the peer is gone. */
static void
test_writev(T *t)
{
    int sv[2];
    char buf[64];
    if (pair(sv) != 0) {
        CHECK(t, !"socketpair");
        return;
    }
    sk_stream_t s = {.fd = sv[0], .family = AF_UNIX};
    struct iovec one[1] = {{(void *)"head", 4}};
    struct iovec two[2] = {{(void *)"HEAD ", 5}, {(void *)"body", 4}};
    CHECK(t, sk_stream_plain.writev(&s, one, 1, 0) == 4);
    CHECK(t, sk_stream_plain.writev(&s, two, 2, 1) == 9); /* more = 1: MSG_MORE, same bytes */
    CHECK(t, peer_read(sv[1], buf, sizeof(buf)) == 13);
    CHECK(t, memcmp(buf, "headHEAD body", 13) == 0);
    /* fill the socket: the answer is would-block, never an error or 0 */
    static char big[65536];
    struct iovec fill = {big, sizeof(big)};
    ssize_t n = 0;
    for (int i = 0; i < 1000; i++) {
        n = sk_stream_plain.writev(&s, &fill, 1, 0);
        if (n <= 0) {
            break;
        }
    }
    CHECK(t, n == SK_STREAM_WANT_WRITE);
    close(sv[1]);
    errno = 0;
    n = sk_stream_plain.writev(&s, one, 1, 0);
    CHECK(t, n == SK_STREAM_ERROR && (errno == EPIPE || errno == ECONNRESET));
    close(sv[0]);
}

/* sendfile: a range from an offset, advancing it; a range past the end sends what there is, then
 * 0 (the file ended); shutdown: the peer reads the end. */
static void
test_sendfile_shutdown(T *t)
{
    int sv[2];
    char buf[64];
    char path[] = "/tmp/skirr-test-stream-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || pair(sv) != 0) {
        CHECK(t, !"mkstemp or socketpair");
        return;
    }
    unlink(path);
    CHECK(t, write(fd, "0123456789", 10) == 10);
    sk_stream_t s = {.fd = sv[0], .family = AF_UNIX};
    uint64_t off = 2;
    CHECK(t, sk_stream_plain.sendfile(&s, fd, &off, 5) == 5 && off == 7);
    CHECK(t, peer_read(sv[1], buf, sizeof(buf)) == 5 && memcmp(buf, "23456", 5) == 0);
    off = 8;
    CHECK(t, sk_stream_plain.sendfile(&s, fd, &off, 5) == 2 && off == 10);
    CHECK(t, sk_stream_plain.sendfile(&s, fd, &off, 3) == 0 && off == 10); /* the file ended */
    CHECK(t, peer_read(sv[1], buf, sizeof(buf)) == 2 && memcmp(buf, "89", 2) == 0);
    CHECK(t, sk_stream_plain.shutdown(&s) == 0);
    CHECK(t, peer_read(sv[1], buf, sizeof(buf)) == 0); /* the peer reads the end */
    close(fd);
    close(sv[0]);
    close(sv[1]);
}

int
main(void)
{
    T t;
    memset(&t, 0, sizeof(t));
    signal(SIGPIPE, SIG_DFL); /* a write without MSG_NOSIGNAL would kill the test */
    test_table(&t);
    test_read(&t);
    test_read_cut(&t);
    test_writev(&t);
    test_sendfile_shutdown(&t);
    printf("test_stream: %d passed, %d failed\n", t.passed, t.failed);
    return t.failed == 0 ? 0 : 1;
}
