/* sk_serve.c — what every handler shares from the server: the cached `date` field value and a
 * connection's ASGI addresses. */
#include "sk_serve.h"
#include "sk_asgi.h"

#include <time.h>

const char *
sk_serve_date(sk_serve_t *srv)
{
    /* IMF-fixdate for now, formatted once per second (RFC 9110 §5.6.7). Borrowed: valid until the
     * next second. NULL with --no-date-header. */
    if (!srv->date_header) {
        return NULL;
    }
    int64_t now = (int64_t)time(NULL);
    if (now != srv->date_sec) {
        srv->date_sec = now;
        sk_format_date(now, srv->date);
    }
    return srv->date;
}

int
sk_serve_thread_refused(const char *what, const char *hint)
{
    PyErr_Format(PyExc_RuntimeError, "skirr: %s called from another thread; %s", what, hint);
    return -1;
}

int
sk_serve_addresses(sk_serve_t *srv, sk_transport_t *t, PyObject **client, PyObject **local)
{
    if (*client == NULL) {
        socklen_t plen;
        *client = (srv->unix_path != Py_None) ? Py_NewRef(Py_None)
                                              : sk_asgi_address(sk_transport_peer(t, &plen));
        if (*client == NULL) {
            return -1;
        }
    }
    if (*local == NULL) {
        struct sockaddr_storage ss;
        if (srv->unix_path != Py_None) {
            *local = PyTuple_Pack(2, srv->unix_path, Py_None);
        }
        else if (sk_transport_local(t, &ss) == 0) {
            if (srv->local_last != NULL && memcmp(&ss, &srv->local_last_addr, sizeof(ss)) == 0) {
                *local = Py_NewRef(srv->local_last); /* the same address: one shared tuple */
            }
            else if ((*local = sk_asgi_address((const struct sockaddr *)&ss)) != NULL) {
                Py_XSETREF(srv->local_last, Py_NewRef(*local));
                srv->local_last_addr = ss;
            }
        }
        else {
            *local = Py_NewRef(Py_None);
        }
        if (*local == NULL) {
            return -1;
        }
    }
    return 0;
}
