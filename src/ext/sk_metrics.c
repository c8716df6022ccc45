/* sk_metrics.c — the native counters behind --metrics-port (see sk_metrics.h). */
#include "sk_metrics.h"

#include "llhttp.h"

static const char *const METHODS[SK_M_METHODS] = {"GET",    "HEAD",  "POST",    "PUT",
                                                  "DELETE", "PATCH", "OPTIONS", "other"};
static const int REFUSALS[SK_M_REFUSALS - 1] = {400, 408, 413, 414, 426, 431, 500, 501, 503, 505};
static const char *const CLASSES[SK_M_CLASSES] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
static const char *const TIMEOUTS[SK_TIMEOUTS] = {"request_head", "keep_alive", "write",
                                                  "request_body"};
static const char *const DISC_KINDS[SK_DISC_KINDS] = {"http", "websocket"};
static const char *const DISC_APPS[SK_DISC_APPS] = {"none", "absorbed", "error"};
/* Seconds: Prometheus client's default buckets up to 10 s, minus the largest. */
static const double BOUNDS[SK_M_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1,   0.25,   0.5,   1.0,  2.5,   5.0};

int
sk_metrics_method(int m)
{
    switch (m) {
    case HTTP_GET: return 0;
    case HTTP_HEAD: return 1;
    case HTTP_POST: return 2;
    case HTTP_PUT: return 3;
    case HTTP_DELETE: return 4;
    case HTTP_PATCH: return 5;
    case HTTP_OPTIONS: return 6;
    default: return 7;
    }
}

void
sk_metrics_response(sk_metrics_t *m, int method, int status, uint64_t bytes, double seconds)
{
    int cls = status / 100 - 1;
    if (cls < 0 || cls >= SK_M_CLASSES) {
        cls = SK_M_CLASSES - 1;
    }
    SK_ADD(m->requests[method][cls], 1);
    SK_ADD(m->bytes_out, bytes);
    SK_STORE(m->sum, SK_LOAD(m->sum) + seconds); /* one writer: the loop's thread */
    /* the count before its bucket, which the snapshot reads first (acquire), so a snapshot's
     * buckets never add up to more than its count (the +Inf bucket) */
    SK_ADD(m->count, 1);
    for (int i = 0; i < SK_M_BUCKETS; i++) {
        if (seconds <= BOUNDS[i]) {
            SK_ADD_RELEASE(m->buckets[i], 1);
            break;
        }
    }
}

void
sk_metrics_refusal(sk_metrics_t *m, int status)
{
    int i = 0;
    while (i < SK_M_REFUSALS - 1 && REFUSALS[i] != status) {
        i++;
    }
    SK_ADD(m->refusals[i], 1);
}

static int
set_n(PyObject *d, PyObject *key, uint64_t n)
{
    /* d[key] = n (key stolen). 0 or -1. */
    PyObject *v = key ? PyLong_FromUnsignedLongLong(n) : NULL;
    int rc = (v == NULL) ? -1 : PyDict_SetItem(d, key, v);
    Py_XDECREF(key);
    Py_XDECREF(v);
    return rc;
}

PyObject *
sk_metrics_snapshot(const sk_metrics_t *m, Py_ssize_t connections, Py_ssize_t in_flight)
{
    PyObject *out = PyDict_New(), *req = PyDict_New(), *ref = PyDict_New(), *tmo = PyDict_New();
    PyObject *disc = PyDict_New(), *buckets = PyList_New(0), *res = NULL;
    if (out == NULL || req == NULL || ref == NULL || tmo == NULL || disc == NULL ||
        buckets == NULL) {
        goto done;
    }
    for (int i = 0; i < SK_M_METHODS; i++) {
        for (int c = 0; c < SK_M_CLASSES; c++) {
            uint64_t n = SK_LOAD(m->requests[i][c]);
            if (n > 0 && set_n(req, Py_BuildValue("(ss)", METHODS[i], CLASSES[c]), n) < 0) {
                goto done;
            }
        }
    }
    for (int i = 0; i < SK_M_REFUSALS; i++) {
        uint64_t n = SK_LOAD(m->refusals[i]);
        if (n > 0 && set_n(ref,
                           i < SK_M_REFUSALS - 1 ? PyUnicode_FromFormat("%d", REFUSALS[i])
                                                 : PyUnicode_FromString("other"),
                           n) < 0) {
            goto done;
        }
    }
    for (int i = 0; i < SK_TIMEOUTS; i++) {
        if (set_n(tmo, PyUnicode_FromString(TIMEOUTS[i]), SK_LOAD(m->timeouts[i])) < 0) {
            goto done;
        }
    }
    for (int k = 0; k < SK_DISC_KINDS; k++) {
        for (int a = 0; a < SK_DISC_APPS; a++) {
            if (set_n(disc, Py_BuildValue("(ss)", DISC_KINDS[k], DISC_APPS[a]),
                      SK_LOAD(m->disconnects[k][a])) < 0) {
                goto done;
            }
        }
    }
    uint64_t cumulative = 0;
    for (int i = 0; i < SK_M_BUCKETS; i++) {
        cumulative += SK_LOAD_ACQUIRE(m->buckets[i]);
        PyObject *b = Py_BuildValue("(dK)", BOUNDS[i], (unsigned long long)cumulative);
        if (b == NULL || PyList_Append(buckets, b) < 0) {
            Py_XDECREF(b);
            goto done;
        }
        Py_DECREF(b);
    }
    PyObject *rest = Py_BuildValue(
        "{sOsOsOsOsOsKsKsKsdsnsn}", "requests", req, "refusals", ref, "timeouts", tmo,
        "disconnects", disc, "buckets", buckets, "bytes_in",
        (unsigned long long)SK_LOAD(m->bytes_in), "bytes_out",
        (unsigned long long)SK_LOAD(m->bytes_out), "count", (unsigned long long)SK_LOAD(m->count),
        "sum", (double)SK_LOAD(m->sum), "connections", connections, "in_flight", in_flight);
    if (rest == NULL || PyDict_Update(out, rest) < 0) {
        Py_XDECREF(rest);
        goto done;
    }
    Py_DECREF(rest);
    res = Py_NewRef(out);
done:
    Py_XDECREF(out);
    Py_XDECREF(req);
    Py_XDECREF(ref);
    Py_XDECREF(tmo);
    Py_XDECREF(disc);
    Py_XDECREF(buckets);
    return res;
}
