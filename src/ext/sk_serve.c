/* sk_serve.c — what every handler shares from the server: the cached `date` field value. */
#include "sk_serve.h"

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
