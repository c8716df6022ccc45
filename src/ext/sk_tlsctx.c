/* sk_tlsctx.c — the serving TLS context (`_native.TLSContext`) and the ASGI `tls` extension of a
 * connection. See sk_tlsctx.h for what every SSL_CTX says and the errors.
 *
 * Owns: the TLSContext object (its options, kept for reload, and the sk_tls_source_t whose
 * SSL_CTX it swaps), the SNI table attached to each default SSL_CTX (freed with it), the ALPN
 * and servername callbacks. Never: touches a socket or a connection's I/O (sk_tls.c does).
 */
#include "sk_tlsctx.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

/* TLS 1.2 suites when --ssl-ciphers is not given (or is uvicorn's default "TLSv1", which meant
 * OpenSSL's own list): forward-secret AEAD only, ECDSA and RSA, as Mozilla's "intermediate"
 * profile (RFC 9325 §4.2). */
#define DEFAULT_CIPHERS                                                                        \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:" \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"   \
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305"

/* TLS 1.3 suites (RFC 8446 §9.1: all AEAD and forward secret), in the server's order: OpenSSL's
 * three with AES-128-GCM first (Mozilla's order), where OpenSSL's own puts AES-256-GCM first:
 * the same security level for a 128-bit handshake, and less CPU per record. --ssl-ciphers does
 * not change them (as uvicorn's, it is the TLS 1.2 list). */
#define TLS13_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

/* TLS 1.3 tickets sent after a full handshake (RFC 8446 §4.6.1): one, where OpenSSL sends two.
 * A client resumes with one (browsers and HTTP clients keep the last); each ticket costs an
 * encryption and a record on every new connection. */
#define TLS13_TICKETS 1

/* ALPN (RFC 7301 §3.1 wire format: length-prefixed names), the server's order of preference,
 * per --http mode (enum sk_http_mode: auto, 1, 2): h2 first (RFC 9113 §3.2), then http/1.1, then
 * http/1.0 (served by the HTTP/1.x handler, as a 1.0 request without ALPN is; nginx selects it
 * too, and `curl --http1.0` offers it alone). */
typedef struct {
    const unsigned char *list;
    unsigned int len;
} alpn_list_t;
static const alpn_list_t ALPN_PROTOCOLS[3] = {
    {(const unsigned char *)"\x02h2\x08http/1.1\x08http/1.0", 21},
    {(const unsigned char *)"\x08http/1.1\x08http/1.0", 18},
    {(const unsigned char *)"\x02h2", 3},
};

#define TICKET_KEY_LEN 80 /* SSL_CTX_set_tlsext_ticket_keys: 16 name + 32 HMAC + 32 AES */
#define SID_LEN 32        /* session id context: SHA-256 of what decides who gets in */
#define PASSWORD_MAX 1024 /* bytes of a key password */

/* The extra certificates of one default SSL_CTX, picked by server name. Owned by that SSL_CTX
 * (its ex_data, freed by sni_free when it is freed), so a connection made before a reload that
 * has not finished its handshake still finds the table it was made with. */
typedef struct {
    size_t nctx;
    SSL_CTX **ctx; /* owned: one per extra certificate */
    size_t nnames;
    char **names;   /* owned, lowercase: a DNS name of a certificate, maybe "*.suffix" */
    size_t *target; /* per name: its index in ctx */
} sni_table_t;

typedef struct {
    PyObject_HEAD sk_state *st;
    sk_tls_source_t source; /* ctx NULL only while being made */
    /* the options, kept for reload (strong references; None when not given) */
    PyObject *certfile, *keyfile, *password, *ca_certs, *crl, *ciphers;
    PyObject *sni; /* tuple of (certfile, keyfile, password) tuples */
    int cert_reqs, min_version, max_version;
    int http; /* --http: enum sk_http_mode (0 auto, 1, 2): the ALPN protocols offered */
    unsigned char ticket_key[TICKET_KEY_LEN];
} TLSContextObject;

/* ---- errors --------------------------------------------------------------------------------- */

static void
raise_ssl(const char *flag, PyObject *path, const char *what)
{
    /* Sets ValueError "<flag> <path>: <what> (OpenSSL: <reason>)" with the reason of the first
     * error in OpenSSL's queue (the cause; the queue is emptied), or without it when the queue
     * is empty; "<flag>: ..." when path is NULL. */
    unsigned long e = ERR_peek_error();
    const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;
    ERR_clear_error();
    PyObject *where =
        path != NULL ? PyUnicode_FromFormat("%s %U", flag, path) : PyUnicode_FromString(flag);
    if (where == NULL) {
        return;
    }
    if (reason != NULL) {
        PyErr_Format(PyExc_ValueError, "%U: %s (OpenSSL: %s)", where, what, reason);
    }
    else {
        PyErr_Format(PyExc_ValueError, "%U: %s", where, what);
    }
    Py_DECREF(where);
}

static PyObject *
fs_path(const char *flag, PyObject *path)
{
    /* New reference: path (a str) encoded for the file system, after checking the file can be
     * opened for reading (so the message says the system's reason, not OpenSSL's "system lib").
     * NULL with ValueError. */
    PyObject *fs = PyUnicode_EncodeFSDefault(path);
    if (fs == NULL) {
        return NULL;
    }
    FILE *f = fopen(PyBytes_AS_STRING(fs), "rb");
    if (f == NULL) {
        PyErr_Format(PyExc_ValueError, "%s %U: %s", flag, path, strerror(errno));
        Py_DECREF(fs);
        return NULL;
    }
    fclose(f);
    return fs;
}

/* ---- key passwords -------------------------------------------------------------------------- */

typedef struct {
    PyObject *password; /* None, str, bytes or a callable returning one (borrowed) */
    int asked;          /* the key is encrypted: the callback ran */
    int failed;         /* a Python exception is set (the callable raised, or a wrong type) */
} password_t;

static int
password_cb(char *buf, int size, int rwflag, void *u)
{
    /* pem_password_cb: copies the password into buf; -1 without one (never prompts). Runs with
     * the GIL held (inside a TLSContext call). */
    (void)rwflag;
    password_t *pw = u;
    PyObject *v = NULL;
    const char *p;
    Py_ssize_t n;
    int rc = -1;
    pw->asked = 1;
    if (pw->password == NULL || pw->password == Py_None || size <= 0) {
        return -1;
    }
    v = PyCallable_Check(pw->password) ? PyObject_CallNoArgs(pw->password)
                                       : Py_NewRef(pw->password);
    if (v == NULL) {
        goto done;
    }
    if (PyUnicode_Check(v)) {
        p = PyUnicode_AsUTF8AndSize(v, &n);
        if (p == NULL) {
            goto done;
        }
    }
    else if (PyBytes_Check(v)) {
        p = PyBytes_AS_STRING(v);
        n = PyBytes_GET_SIZE(v);
    }
    else {
        PyErr_Format(PyExc_TypeError, "--ssl-keyfile-password must be a str or bytes, got %.50s",
                     Py_TYPE(v)->tp_name);
        goto done;
    }
    if (n > size || n > PASSWORD_MAX) {
        PyErr_Format(PyExc_ValueError, "--ssl-keyfile-password is longer than %d bytes",
                     size < PASSWORD_MAX ? size : PASSWORD_MAX);
        goto done;
    }
    memcpy(buf, p, (size_t)n);
    rc = (int)n; /* n <= size, an int */
done:
    if (rc < 0 && PyErr_Occurred()) {
        pw->failed = 1;
    }
    Py_XDECREF(v);
    return rc;
}

/* ---- loading a certificate and its key ------------------------------------------------------ */

static int
load_cert_key(SSL_CTX *ctx, PyObject *certfile, PyObject *keyfile, PyObject *password, int sni)
{
    /* Loads the certificate chain of certfile and the private key of keyfile (certfile when
     * None) into ctx, and checks they match; sni: an --ssl-sni pair (the messages say so).
     * 0, or -1 with an exception. */
    const char *certflag = sni ? "--ssl-sni" : "--ssl-certfile";
    PyObject *certfs = NULL, *keyfs = NULL;
    BIO *bio = NULL;
    EVP_PKEY *key = NULL;
    PyObject *keyname = keyfile != Py_None ? keyfile : certfile;
    const char *keyflag = sni ? "--ssl-sni" : keyfile != Py_None ? "--ssl-keyfile" : certflag;
    password_t pw = {password, 0, 0};
    int rc = -1;
    certfs = fs_path(certflag, certfile);
    if (certfs == NULL) {
        goto done;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, PyBytes_AS_STRING(certfs)) != 1) {
        raise_ssl(certflag, certfile, "not a PEM certificate chain");
        goto done;
    }
    keyfs = fs_path(keyflag, keyname);
    if (keyfs == NULL) {
        goto done;
    }
    bio = BIO_new_file(PyBytes_AS_STRING(keyfs), "r");
    if (bio == NULL) {
        raise_ssl(keyflag, keyname, "cannot be read");
        goto done;
    }
    key = PEM_read_bio_PrivateKey(bio, NULL, password_cb, &pw);
    if (key == NULL) {
        if (pw.failed) {
            ERR_clear_error();
        }
        else if (pw.asked && (password == Py_None || password == NULL)) {
            ERR_clear_error();
            PyErr_Format(PyExc_ValueError,
                         "%s %U: the key is encrypted: give --ssl-keyfile-password", keyflag,
                         keyname);
        }
        else if (pw.asked) {
            /* No OpenSSL reason: for a wrong password it is chance. The decryption ends in bad
             * padding ("bad decrypt") unless the garbage happens to end in valid padding (about
             * 1 in 200 keys), and then the decoder says "unsupported". */
            ERR_clear_error();
            PyErr_Format(PyExc_ValueError,
                         "%s %U: cannot decrypt the key: wrong --ssl-keyfile-password?", keyflag,
                         keyname);
        }
        else {
            /* the key was looked for in the certificate file: say where it goes */
            raise_ssl(keyflag, keyname,
                      keyfile != Py_None ? "no PEM private key in it"
                      : sni ? "no PEM private key in it: give the key as --ssl-sni CERTFILE:KEYFILE"
                            : "no PEM private key in it: give the key with --ssl-keyfile");
        }
        goto done;
    }
    if (SSL_CTX_use_PrivateKey(ctx, key) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        unsigned long e = ERR_peek_last_error();
        const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;
        ERR_clear_error();
        PyErr_Format(PyExc_ValueError,
                     "%s %U: the key does not match the certificate of %s %U (OpenSSL: %s)",
                     keyflag, keyname, certflag, certfile, reason ? reason : "key values mismatch");
        goto done;
    }
    rc = 0;
done:
    EVP_PKEY_free(key);
    BIO_free(bio);
    Py_XDECREF(certfs);
    Py_XDECREF(keyfs);
    return rc;
}

/* ---- callbacks ------------------------------------------------------------------------------ */

static int
alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
            unsigned int inlen, void *arg)
{
    /* RFC 7301 §3.2: the first of the server's protocols the client offers; none: the fatal
     * no_application_protocol alert. arg: the --http mode's ALPN_PROTOCOLS entry. */
    (void)ssl;
    const alpn_list_t *offer = arg;
    unsigned char *o = NULL;
    if (SSL_select_next_proto(&o, outlen, offer->list, offer->len, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED) {
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    *out = o;
    return SSL_TLSEXT_ERR_OK;
}

static int
verify_optional(int ok, X509_STORE_CTX *store)
{
    /* cert_reqs 1: a client certificate that fails verification is let through; the error
     * stays in SSL_get_verify_result for client_cert_error. */
    (void)ok;
    (void)store;
    return 1;
}

static int
name_matches(const char *pattern, const char *name)
{
    /* 1 when name (lowercase) matches pattern (lowercase; "*.suffix" matches one label). */
    if (pattern[0] == '*' && pattern[1] == '.') {
        const char *dot = strchr(name, '.');
        return dot != NULL && dot != name && strcmp(dot, pattern + 1) == 0;
    }
    return strcmp(pattern, name) == 0;
}

static SSL_CTX *
sni_pick(const sni_table_t *t, const unsigned char *req, size_t n)
{
    /* RFC 6066 §3: the SSL_CTX whose certificate's names match the requested host name req (n
     * bytes, as the client sent it: compared in lowercase, without a final dot), or NULL (the
     * default's). Borrowed. */
    char name[256];
    if (n == 0 || n >= sizeof(name)) {
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (req[i] == '\0') {
            return NULL; /* not a host name */
        }
        name[i] = (char)tolower(req[i]);
    }
    name[n] = '\0';
    if (name[n - 1] == '.') {
        name[n - 1] = '\0'; /* an absolute name */
    }
    for (size_t i = 0; i < t->nnames; i++) {
        if (name_matches(t->names[i], name)) {
            return t->ctx[t->target[i]];
        }
    }
    return NULL;
}

static int
client_hello_cb(SSL *ssl, int *alert, void *arg)
{
    /* Switches the connection to the certificate its server_name extension selects (RFC 6066 §3:
     * a ServerNameList, its first host_name entry), before OpenSSL looks at a session to resume
     * or makes a new one: each certificate has its own session id context (new_ctx), so a
     * session is resumed only under a name that selects the certificate it was made with. A
     * malformed extension selects nothing here (OpenSSL's own parsing refuses it). Never fails
     * the handshake (the alert is only read when the callback fails). */
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    const sni_table_t *t = arg;
    const unsigned char *p;
    size_t len;
    if (t == NULL || !SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &len) ||
        len < 2 || (size_t)((p[0] << 8) | p[1]) != len - 2) {
        return SSL_CLIENT_HELLO_SUCCESS;
    }
    for (size_t off = 2; off + 3 <= len;) {
        size_t n = ((size_t)p[off + 1] << 8) | p[off + 2];
        if (off + 3 + n > len) {
            break;
        }
        if (p[off] == TLSEXT_NAMETYPE_host_name) {
            SSL_CTX *ctx = sni_pick(t, p + off + 3, n);
            if (ctx != NULL) {
                SSL_set_SSL_CTX(ssl, ctx);
            }
            break;
        }
        off += 3 + n;
    }
    return SSL_CLIENT_HELLO_SUCCESS;
}

static int
servername_cb(SSL *ssl, int *alert, void *arg)
{
    /* Acknowledges the server name (RFC 6066 §3; OpenSSL then keeps it in a new session): the
     * certificate was chosen by client_hello_cb. Never refuses a name (the alert is only read
     * when the callback says so). */
    (void)ssl;
    (void)arg;
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_OK;
}

static void
sni_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
    /* CRYPTO_EX_free for the SNI table of a default SSL_CTX: runs when that SSL_CTX is freed. */
    (void)parent;
    (void)ad;
    (void)idx;
    (void)argl;
    (void)argp;
    sni_table_t *t = ptr;
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; t->ctx != NULL && i < t->nctx; i++) {
        SSL_CTX_free(t->ctx[i]);
    }
    for (size_t i = 0; i < t->nnames; i++) {
        PyMem_RawFree(t->names[i]);
    }
    PyMem_RawFree(t->ctx);
    PyMem_RawFree(t->names);
    PyMem_RawFree(t->target);
    PyMem_RawFree(t);
}

/* ---- the session id context ----------------------------------------------------------------- */

static int
digest_file(EVP_MD_CTX *md, const char *flag, PyObject *path)
{
    /* Feeds the length-framed bytes of the file at path (a str) into md: "<flag>\0", the
     * bytes, then their count as 8 bytes (so two files cannot run into each other). 0, or -1
     * with ValueError (the file cannot be read). */
    PyObject *fs = fs_path(flag, path);
    FILE *f = NULL;
    unsigned char buf[16384];
    unsigned long long total = 0;
    int rc = -1;
    if (fs == NULL) {
        return -1;
    }
    if ((f = fopen(PyBytes_AS_STRING(fs), "rb")) == NULL) {
        PyErr_Format(PyExc_ValueError, "%s %U: %s", flag, path, strerror(errno));
        goto done;
    }
    if (EVP_DigestUpdate(md, flag, strlen(flag) + 1) != 1) {
        goto ssl_error;
    }
    for (;;) {
        size_t n = fread(buf, 1, sizeof(buf), f);
        if (n > 0 && EVP_DigestUpdate(md, buf, n) != 1) {
            goto ssl_error;
        }
        total += n;
        if (n < sizeof(buf)) {
            break;
        }
    }
    if (ferror(f)) {
        PyErr_Format(PyExc_ValueError, "%s %U: %s", flag, path, strerror(errno));
        goto done;
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++) {
        len[i] = (unsigned char)(total >> (8 * (7 - i)));
    }
    if (EVP_DigestUpdate(md, len, sizeof(len)) != 1) {
        goto ssl_error;
    }
    rc = 0;
    goto done;
ssl_error:
    raise_ssl("TLS session id context", NULL, "cannot digest");
done:
    if (f != NULL) {
        fclose(f);
    }
    Py_DECREF(fs);
    return rc;
}

static int
sid_context(TLSContextObject *o, unsigned char out[SID_LEN])
{
    /* out = SHA-256 of what decides whether a client certificate gets in: --ssl-cert-reqs and
     * the bytes of the --ssl-ca-certs and --ssl-crl files. Every SSL_CTX of one build (the
     * default and each SNI one) gets it as its session id context, so OpenSSL resumes a
     * session (a TLS 1.2 session id or ticket, a TLS 1.3 ticket) only under the configuration
     * that verified its client (RFC 8446 §4.6.1, RFC 5077 §3.4: a server may refuse to resume):
     * a CRL reloaded with SIGHUP revokes the sessions of the certificates it revokes, and
     * workers reading the same files resume each other's tickets. 0, or -1 with ValueError. */
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned int n = 0;
    unsigned char reqs = (unsigned char)o->cert_reqs; /* 0, 1 or 2 (checked at creation) */
    int rc = -1;
    if (md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(md, "skirr sid 1", 11) != 1 || EVP_DigestUpdate(md, &reqs, 1) != 1) {
        raise_ssl("TLS session id context", NULL, "cannot digest");
        goto done;
    }
    if ((o->ca_certs != Py_None && digest_file(md, "--ssl-ca-certs", o->ca_certs) < 0) ||
        (o->crl != Py_None && digest_file(md, "--ssl-crl", o->crl) < 0)) {
        goto done;
    }
    if (EVP_DigestFinal_ex(md, out, &n) != 1 || n != SID_LEN) {
        raise_ssl("TLS session id context", NULL, "cannot digest");
        goto done;
    }
    rc = 0;
done:
    EVP_MD_CTX_free(md);
    return rc;
}

/* ---- building an SSL_CTX -------------------------------------------------------------------- */

/* The PEM of an SSL_CTX's certificate (its ex_data at st->tls_pem_index), made once when the
 * SSL_CTX is built: the `tls` extension's server_cert of every connection is a copy of it
 * (sk_tls_info), not a PEM encoding per connection (bench/LEVERS.md "TLS handshakes"). Plain
 * C memory, freed with the SSL_CTX (pem_free) from whichever thread frees it. */
typedef struct {
    size_t len;  /* bytes of text, ASCII */
    char text[]; /* "-----BEGIN CERTIFICATE-----\n...", not NUL-terminated */
} cert_pem_t;

static void
pem_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
    /* CRYPTO_EX_free for the cert_pem_t of an SSL_CTX: runs when that SSL_CTX is freed. */
    (void)parent;
    (void)ad;
    (void)idx;
    (void)argl;
    (void)argp;
    free(ptr);
}

static BIO *
pem_bio(X509 *cert, char **data, long *n)
{
    /* A memory BIO holding cert as PEM, its bytes at *data (*n of them, not NUL-terminated,
     * valid until the BIO is freed); NULL (OpenSSL's error queue cleared) when cert is NULL or
     * memory ran out. */
    BIO *bio = cert != NULL ? BIO_new(BIO_s_mem()) : NULL;
    if (bio == NULL || PEM_write_bio_X509(bio, cert) != 1 ||
        (*n = BIO_get_mem_data(bio, data)) < 0) {
        ERR_clear_error();
        BIO_free(bio);
        return NULL;
    }
    return bio;
}

static int
attach_pem(TLSContextObject *o, SSL_CTX *ctx)
{
    /* Attaches the PEM of ctx's certificate (cert_pem_t) to ctx. 0, or -1 with MemoryError. */
    char *data;
    long n;
    BIO *bio = pem_bio(SSL_CTX_get0_certificate(ctx), &data, &n);
    cert_pem_t *pem = NULL;
    int rc = -1;
    if (bio == NULL || (pem = malloc(sizeof(*pem) + (size_t)n)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    pem->len = (size_t)n;
    memcpy(pem->text, data, (size_t)n);
    if (SSL_CTX_set_ex_data(ctx, o->st->tls_pem_index, pem) != 1) {
        ERR_clear_error();
        free(pem);
        PyErr_NoMemory();
        goto done;
    }
    rc = 0;
done:
    BIO_free(bio);
    return rc;
}

static SSL_CTX *
new_ctx(TLSContextObject *o, PyObject *certfile, PyObject *keyfile, PyObject *password,
        size_t which, const unsigned char sid[SID_LEN])
{
    /* A new SSL_CTX (one reference, the caller's) with every setting of the object, the
     * certificate and key given (which: 0 the default, k the k-th --ssl-sni one) and the session
     * id context sid (sid_context) made that certificate's own: RFC 6066 §3, a server MUST NOT
     * resume a session under another server name than it was made for, and OpenSSL resumes only
     * under the session id context it was made with. NULL with an exception. */
    unsigned char own[SID_LEN];
    memcpy(own, sid, SID_LEN);
    own[SID_LEN - 1] ^= (unsigned char)(which & 0xff);
    own[SID_LEN - 2] ^= (unsigned char)((which >> 8) & 0xff);
    int sni = which > 0;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    PyObject *fs = NULL;
    if (ctx == NULL) {
        raise_ssl("TLS", NULL, "cannot make an SSL_CTX");
        return NULL;
    }
    if (SSL_CTX_set_min_proto_version(ctx, o->min_version) != 1 ||
        SSL_CTX_set_max_proto_version(ctx, o->max_version) != 1) {
        raise_ssl("--ssl-min-version", NULL, "refused");
        goto error;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_ENABLE_KTLS);
    SSL_CTX_clear_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_dh_auto(ctx, 1);
    if (o->ciphers != Py_None) {
        const char *c = PyUnicode_AsUTF8(o->ciphers);
        if (c == NULL) {
            goto error;
        }
        if (SSL_CTX_set_cipher_list(ctx, c) != 1) {
            raise_ssl("--ssl-ciphers", o->ciphers, "selects no cipher");
            goto error;
        }
    }
    else if (SSL_CTX_set_cipher_list(ctx, DEFAULT_CIPHERS) != 1) {
        raise_ssl("--ssl-ciphers", NULL, "the default list was refused");
        goto error;
    }
    if (SSL_CTX_set_ciphersuites(ctx, TLS13_SUITES) != 1 ||
        SSL_CTX_set_num_tickets(ctx, TLS13_TICKETS) != 1) {
        raise_ssl("TLS 1.3", NULL, "the suites or the ticket count were refused");
        goto error;
    }
    if (SSL_CTX_set_tlsext_ticket_keys(ctx, o->ticket_key, TICKET_KEY_LEN) != 1 ||
        SSL_CTX_set_session_id_context(ctx, own, SID_LEN) != 1) {
        raise_ssl("TLS session tickets", NULL, "cannot set the key");
        goto error;
    }
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, (void *)&ALPN_PROTOCOLS[o->http]);
    if (o->ca_certs != Py_None) {
        fs = fs_path("--ssl-ca-certs", o->ca_certs);
        if (fs == NULL) {
            goto error;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(PyBytes_AS_STRING(fs));
        if (SSL_CTX_load_verify_locations(ctx, PyBytes_AS_STRING(fs), NULL) != 1 || names == NULL) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            raise_ssl("--ssl-ca-certs", o->ca_certs, "not a PEM CA certificate file");
            goto error;
        }
        SSL_CTX_set_client_CA_list(ctx, names); /* takes names */
        Py_CLEAR(fs);
    }
    if (o->crl != Py_None) {
        fs = fs_path("--ssl-crl", o->crl);
        if (fs == NULL) {
            goto error;
        }
        X509_STORE *store = SSL_CTX_get_cert_store(ctx);
        X509_LOOKUP *lookup = X509_STORE_add_lookup(store, X509_LOOKUP_file());
        if (lookup == NULL ||
            X509_load_crl_file(lookup, PyBytes_AS_STRING(fs), X509_FILETYPE_PEM) <= 0) {
            raise_ssl("--ssl-crl", o->crl, "not a PEM certificate revocation list");
            goto error;
        }
        X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
        Py_CLEAR(fs);
    }
    if (o->cert_reqs == 1) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_optional);
    }
    else if (o->cert_reqs == 2) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    if (load_cert_key(ctx, certfile, keyfile, password, sni) < 0 || attach_pem(o, ctx) < 0) {
        goto error;
    }
    return ctx;
error:
    Py_XDECREF(fs);
    SSL_CTX_free(ctx);
    return NULL;
}

static int
sni_add_names(sni_table_t *t, SSL_CTX *ctx, size_t target, PyObject *certfile)
{
    /* Adds the subjectAltName DNS names of ctx's certificate to t, pointing at ctx[target].
     * 0, or -1 with an exception (memory, or a certificate without DNS names). */
    X509 *cert = SSL_CTX_get0_certificate(ctx);
    GENERAL_NAMES *sans = cert ? X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL) : NULL;
    int found = 0, rc = -1;
    for (int i = 0; sans != NULL && i < sk_GENERAL_NAME_num(sans); i++) {
        GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
        if (g->type != GEN_DNS) {
            continue;
        }
        const unsigned char *s = ASN1_STRING_get0_data(g->d.dNSName);
        int len = ASN1_STRING_length(g->d.dNSName);
        if (len <= 0 || len > 253 || memchr(s, '\0', (size_t)len) != NULL) {
            continue;
        }
        char **names = PyMem_RawRealloc(t->names, (t->nnames + 1) * sizeof(char *));
        if (names != NULL) {
            t->names = names;
        }
        size_t *tg = PyMem_RawRealloc(t->target, (t->nnames + 1) * sizeof(size_t));
        if (tg != NULL) {
            t->target = tg;
        }
        char *copy = PyMem_RawMalloc((size_t)len + 1);
        if (names == NULL || tg == NULL || copy == NULL) {
            PyMem_RawFree(copy);
            PyErr_NoMemory();
            goto done;
        }
        for (int k = 0; k < len; k++) {
            copy[k] = (char)tolower(s[k]);
        }
        copy[len] = '\0';
        t->names[t->nnames] = copy;
        t->target[t->nnames] = target;
        t->nnames++;
        found = 1;
    }
    if (!found) {
        PyErr_Format(PyExc_ValueError,
                     "--ssl-sni %U: the certificate names no DNS subjectAltName to select it by",
                     certfile);
        goto done;
    }
    rc = 0;
done:
    GENERAL_NAMES_free(sans);
    return rc;
}

static SSL_CTX *
build(TLSContextObject *o)
{
    /* The default SSL_CTX with the SNI table of the extra certificates attached; NULL with an
     * exception. */
    unsigned char sid[SID_LEN];
    if (sid_context(o, sid) < 0) {
        return NULL;
    }
    SSL_CTX *ctx = new_ctx(o, o->certfile, o->keyfile, o->password, 0, sid);
    sni_table_t *t = NULL;
    if (ctx == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(o->sni);
    if (n == 0) {
        return ctx;
    }
    t = PyMem_RawCalloc(1, sizeof(*t));
    if (t == NULL || (t->ctx = PyMem_RawCalloc((size_t)n, sizeof(SSL_CTX *))) == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyTuple_GET_ITEM(o->sni, i);
        SSL_CTX *c = new_ctx(o, PyTuple_GET_ITEM(e, 0), PyTuple_GET_ITEM(e, 1),
                             PyTuple_GET_ITEM(e, 2), (size_t)i + 1, sid);
        if (c == NULL) {
            goto error;
        }
        t->ctx[t->nctx++] = c;
        if (sni_add_names(t, c, (size_t)i, PyTuple_GET_ITEM(e, 0)) < 0) {
            goto error;
        }
    }
    if (SSL_CTX_set_ex_data(ctx, o->st->tls_sni_index, t) != 1) {
        raise_ssl("--ssl-sni", NULL, "cannot attach the SNI table");
        goto error;
    }
    SSL_CTX_set_client_hello_cb(ctx, client_hello_cb, t); /* t is freed with ctx (sni_free) */
    SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
    return ctx;
error:
    sni_free(NULL, t, NULL, 0, 0, NULL);
    SSL_CTX_free(ctx);
    return NULL;
}

/* ---- the TLSContext type -------------------------------------------------------------------- */

static int
opt_path(PyObject **slot, PyObject *value, const char *name)
{
    /* *slot = os.fspath(value) as a str, or None for None. 0, or -1 with TypeError. */
    if (value == NULL || value == Py_None) {
        *slot = Py_NewRef(Py_None);
        return 0;
    }
    PyObject *p = PyOS_FSPath(value);
    if (p != NULL && !PyUnicode_Check(p)) {
        Py_SETREF(p, PyUnicode_DecodeFSDefaultAndSize(PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p)));
    }
    if (p == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be a path", name);
        return -1;
    }
    *slot = p;
    return 0;
}

static int
check_password(PyObject *pw)
{
    if (pw != Py_None && !PyUnicode_Check(pw) && !PyBytes_Check(pw) && !PyCallable_Check(pw)) {
        PyErr_SetString(PyExc_TypeError,
                        "password must be a str, bytes, a callable returning one, or None");
        return -1;
    }
    return 0;
}

static PyObject *
tlsctx_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    /* New reference, or NULL with an exception. */
    static char *kwlist[] = {"certfile",   "keyfile",     "password", "ca_certs", "cert_reqs",
                             "ciphers",    "min_version", "version",  "crl",      "sni",
                             "ticket_key", "http",        NULL};
    PyObject *certfile, *keyfile = Py_None, *password = Py_None, *ca_certs = Py_None;
    PyObject *ciphers = Py_None, *min_version = NULL, *crl = Py_None, *sni = NULL;
    PyObject *ticket_key = Py_None;
    int cert_reqs = 0, version = 17; /* ssl.PROTOCOL_TLS_SERVER, uvicorn's default */
    int http = 0;                    /* --http auto */
    TLSContextObject *o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOOiOUiOOOi", kwlist, &certfile, &keyfile,
                                     &password, &ca_certs, &cert_reqs, &ciphers, &min_version,
                                     &version, &crl, &sni, &ticket_key, &http)) {
        return NULL;
    }
    if (http < 0 || http > 2) {
        PyErr_Format(PyExc_ValueError, "http must be 0 (auto), 1 or 2, got %d", http);
        return NULL;
    }
    if (check_password(password) < 0) {
        return NULL;
    }
    if (cert_reqs < 0 || cert_reqs > 2) {
        PyErr_Format(PyExc_ValueError,
                     "--ssl-cert-reqs must be 0 (none), 1 (optional) or 2 (required), got %d",
                     cert_reqs);
        return NULL;
    }
    if (ciphers != Py_None && !PyUnicode_Check(ciphers)) {
        PyErr_SetString(PyExc_TypeError, "ciphers must be a str or None");
        return NULL;
    }
    if (ticket_key != Py_None &&
        (!PyBytes_Check(ticket_key) || PyBytes_GET_SIZE(ticket_key) != TICKET_KEY_LEN)) {
        PyErr_Format(PyExc_ValueError, "ticket_key must be %d bytes or None", TICKET_KEY_LEN);
        return NULL;
    }
    o = (TLSContextObject *)tp->tp_alloc(tp, 0);
    if (o == NULL) {
        return NULL;
    }
    pthread_mutex_init(&o->source.lock, NULL); /* destroyed in tlsctx_dealloc */
    o->st = sk_get_state_by_type(tp);
    o->cert_reqs = cert_reqs;
    o->http = http;
    o->min_version = TLS1_2_VERSION;
    o->max_version = 0; /* the highest libssl has: TLS 1.3 */
    if (o->st == NULL) {
        goto error;
    }
    if (min_version != NULL && PyUnicode_CompareWithASCIIString(min_version, "TLSv1.3") == 0) {
        o->min_version = TLS1_3_VERSION;
    }
    else if (min_version != NULL && PyUnicode_CompareWithASCIIString(min_version, "TLSv1.2") != 0) {
        PyErr_Format(PyExc_ValueError, "--ssl-min-version must be TLSv1.2 or TLSv1.3, got %R",
                     min_version);
        goto error;
    }
    /* --ssl-version: uvicorn's int, an ssl.PROTOCOL_* value */
    if (version == 5) { /* PROTOCOL_TLSv1_2: that version alone */
        if (o->min_version > TLS1_2_VERSION) {
            PyErr_SetString(PyExc_ValueError,
                            "--ssl-version 5 (TLS 1.2 only) contradicts --ssl-min-version TLSv1.3");
            goto error;
        }
        o->max_version = TLS1_2_VERSION;
    }
    else if (version != 2 && version != 17) {
        PyErr_Format(PyExc_ValueError,
                     "--ssl-version %d is not served: use 17 (ssl.PROTOCOL_TLS_SERVER, the "
                     "default) or 2 (ssl.PROTOCOL_TLS), which negotiate TLS 1.2 or 1.3 (set the "
                     "lowest with --ssl-min-version); SSL 3, TLS 1.0 and TLS 1.1 are obsolete "
                     "(RFC 8996) and 16 is a client protocol",
                     version);
        goto error;
    }
    if (opt_path(&o->certfile, certfile, "certfile") < 0 ||
        opt_path(&o->keyfile, keyfile, "keyfile") < 0 ||
        opt_path(&o->ca_certs, ca_certs, "ca_certs") < 0 || opt_path(&o->crl, crl, "crl") < 0) {
        goto error;
    }
    if (o->certfile == Py_None) {
        PyErr_SetString(PyExc_TypeError, "certfile must be a path");
        goto error;
    }
    o->password = Py_NewRef(password);
    o->ciphers = Py_NewRef(ciphers);
    /* uvicorn's default --ssl-ciphers "TLSv1" meant OpenSSL's list: the hardened one here */
    if (ciphers != Py_None && PyUnicode_CompareWithASCIIString(ciphers, "TLSv1") == 0) {
        Py_SETREF(o->ciphers, Py_NewRef(Py_None));
    }
    if ((o->cert_reqs > 0 || o->crl != Py_None) && o->ca_certs == Py_None) {
        PyErr_SetString(PyExc_ValueError, o->crl != Py_None
                                              ? "--ssl-crl needs --ssl-ca-certs"
                                              : "--ssl-cert-reqs 1 or 2 needs --ssl-ca-certs");
        goto error;
    }
    /* sni: an iterable of (certfile, keyfile[, password]) */
    o->sni = PyTuple_New(0);
    if (o->sni == NULL) {
        goto error;
    }
    if (sni != NULL && sni != Py_None) {
        PyObject *seq = PySequence_Tuple(sni);
        if (seq == NULL) {
            goto error;
        }
        PyObject *items = PyTuple_New(PyTuple_GET_SIZE(seq));
        if (items == NULL) {
            Py_DECREF(seq);
            goto error;
        }
        Py_SETREF(o->sni, items);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) {
            PyObject *e = PyTuple_GET_ITEM(seq, i);
            PyObject *c = NULL, *k = NULL, *item;
            Py_ssize_t en = PyTuple_Check(e) ? PyTuple_GET_SIZE(e) : -1;
            if (en != 2 && en != 3) {
                PyErr_SetString(PyExc_TypeError,
                                "sni items must be (certfile, keyfile[, password]) tuples");
                Py_DECREF(seq);
                goto error;
            }
            PyObject *pw = en == 3 ? PyTuple_GET_ITEM(e, 2) : Py_None;
            if (check_password(pw) < 0 ||
                opt_path(&c, PyTuple_GET_ITEM(e, 0), "sni certfile") < 0 ||
                opt_path(&k, PyTuple_GET_ITEM(e, 1), "sni keyfile") < 0 ||
                (item = PyTuple_Pack(3, c, k, pw)) == NULL) {
                Py_XDECREF(c);
                Py_XDECREF(k);
                Py_DECREF(seq);
                goto error;
            }
            Py_DECREF(c);
            Py_DECREF(k);
            PyTuple_SET_ITEM(items, i, item);
        }
        Py_DECREF(seq);
    }
    if (ticket_key != Py_None) {
        memcpy(o->ticket_key, PyBytes_AS_STRING(ticket_key), TICKET_KEY_LEN);
    }
    else if (RAND_bytes(o->ticket_key, TICKET_KEY_LEN) != 1) {
        raise_ssl("TLS session tickets", NULL, "cannot set the key");
        goto error;
    }
    o->source.ctx = build(o);
    if (o->source.ctx == NULL) {
        goto error;
    }
    return (PyObject *)o;
error:
    Py_DECREF(o);
    return NULL;
}

static PyObject *
tlsctx_reload(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference to None, or NULL with an exception (the current SSL_CTX is kept). Builds a
     * new SSL_CTX from the same files and swaps it in: new connections get it, open ones keep
     * theirs. */
    TLSContextObject *o = (TLSContextObject *)op;
    SSL_CTX *ctx = build(o);
    if (ctx == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&o->source.lock); /* listeners on other threads' loops read it */
    SSL_CTX *old = o->source.ctx;
    o->source.ctx = ctx;
    pthread_mutex_unlock(&o->source.lock);
    SSL_CTX_free(old); /* freed once no connection holds it */
    Py_RETURN_NONE;
}

static PyObject *
tlsctx_names(PyObject *op, PyObject *Py_UNUSED(arg))
{
    /* New reference: {name: certfile} of the SNI table of the current SSL_CTX (empty without
     * extra certificates). For the startup log and the tests. */
    TLSContextObject *o = (TLSContextObject *)op;
    pthread_mutex_lock(&o->source.lock); /* a reload on another thread frees the one it replaces */
    SSL_CTX *ctx = o->source.ctx;
    SSL_CTX_up_ref(ctx);
    pthread_mutex_unlock(&o->source.lock);
    sni_table_t *t = SSL_CTX_get_ex_data(ctx, o->st->tls_sni_index);
    PyObject *d = PyDict_New();
    for (size_t i = 0; d != NULL && t != NULL && i < t->nnames; i++) {
        PyObject *e = PyTuple_GET_ITEM(o->sni, (Py_ssize_t)t->target[i]);
        if (PyDict_SetItemString(d, t->names[i], PyTuple_GET_ITEM(e, 0)) < 0) {
            Py_CLEAR(d);
        }
    }
    SSL_CTX_free(ctx);
    return d;
}

static PyObject *
tlsctx_get_min_version(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference: "TLSv1.2" or "TLSv1.3". */
    TLSContextObject *o = (TLSContextObject *)op;
    return PyUnicode_FromString(o->min_version == TLS1_3_VERSION ? "TLSv1.3" : "TLSv1.2");
}

static PyObject *
tlsctx_get_max_version(PyObject *op, void *Py_UNUSED(closure))
{
    /* New reference: "TLSv1.2" (--ssl-version 5), or None: the highest libssl has (TLS 1.3). */
    TLSContextObject *o = (TLSContextObject *)op;
    return o->max_version == TLS1_2_VERSION ? PyUnicode_FromString("TLSv1.2") : Py_NewRef(Py_None);
}

static int
tlsctx_traverse(PyObject *op, visitproc visit, void *arg)
{
    TLSContextObject *o = (TLSContextObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(o->password);
    Py_VISIT(o->sni); /* may hold password callables */
    return 0;
}

static int
tlsctx_clear(PyObject *op)
{
    TLSContextObject *o = (TLSContextObject *)op;
    Py_CLEAR(o->password);
    return 0;
}

static void
tlsctx_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    TLSContextObject *o = (TLSContextObject *)op;
    PyObject_GC_UnTrack(op);
    tlsctx_clear(op);
    SSL_CTX_free(o->source.ctx); /* connections still open hold their own reference */
    o->source.ctx = NULL;
    pthread_mutex_destroy(&o->source.lock);
    OPENSSL_cleanse(o->ticket_key, sizeof(o->ticket_key));
    Py_CLEAR(o->certfile);
    Py_CLEAR(o->keyfile);
    Py_CLEAR(o->ca_certs);
    Py_CLEAR(o->crl);
    Py_CLEAR(o->ciphers);
    Py_CLEAR(o->sni);
    tp->tp_free(op);
    Py_DECREF(tp);
}

sk_tls_source_t *
sk_tlsctx_source(sk_state *st, PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, st->tlsctx_type)) {
        PyErr_Format(PyExc_TypeError, "ssl_context must be a skirr._native.TLSContext, got %.50s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return &((TLSContextObject *)obj)->source;
}

int
sk_tlsctx_module_init(sk_state *st)
{
    /* The ex_data indexes of the SNI tables and of the certificates' PEM (their free
     * functions), once per module. */
    st->tls_sni_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, sni_free);
    st->tls_pem_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, pem_free);
    if (st->tls_sni_index < 0 || st->tls_pem_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL: no SSL_CTX ex_data index");
        return -1;
    }
    return 0;
}

PyObject *
sk_tlsctx_ktls_available(PyObject *module, PyObject *Py_UNUSED(arg))
{
    /* New reference: True when the kernel offers kernel TLS (sk_tls_ktls_available); the layer
     * does not use it (libssl never has the socket): files are read and encrypted either way. */
    (void)module;
    return PyBool_FromLong(sk_tls_ktls_available());
}

/* ---- the ASGI tls extension ----------------------------------------------------------------- */

static PyObject *
pem_of(X509 *cert)
{
    /* New reference: cert as a PEM str; NULL with an exception. */
    char *data;
    long n;
    BIO *bio = pem_bio(cert, &data, &n);
    PyObject *s =
        bio != NULL ? PyUnicode_DecodeASCII(data, (Py_ssize_t)n, "strict") : PyErr_NoMemory();
    BIO_free(bio);
    return s;
}

static const char *
rfc4514_type(int nid)
{
    /* The short name RFC 4514 §3 lists for nid, or NULL (then the dotted OID is written). */
    switch (nid) {
    case NID_commonName: return "CN";
    case NID_localityName: return "L";
    case NID_stateOrProvinceName: return "ST";
    case NID_organizationName: return "O";
    case NID_organizationalUnitName: return "OU";
    case NID_countryName: return "C";
    case NID_streetAddress: return "STREET";
    case NID_domainComponent: return "DC";
    case NID_userId: return "UID";
    default: return NULL;
    }
}

static int
rfc4514_value(BIO *bio, const ASN1_STRING *value)
{
    /* Writes value as RFC 4514 §2.4 wants: a string type as UTF-8 with '\', '"', '+', ',',
     * ';', '<', '>' escaped by a backslash, NUL as \00, a leading '#' or space and a trailing
     * space escaped (as cryptography's Name.rfc4514_string); any other type (BIT STRING) as
     * '#' and the hex of its bytes. 0, or -1 (memory). */
    unsigned char *utf8 = NULL;
    int n = ASN1_STRING_to_UTF8(&utf8, value);
    int rc = -1;
    if (n < 0) {
        ERR_clear_error();
        const unsigned char *d = ASN1_STRING_get0_data(value);
        int len = ASN1_STRING_length(value);
        if (BIO_write(bio, "#", 1) != 1) {
            return -1;
        }
        for (int i = 0; i < len; i++) {
            if (BIO_printf(bio, "%02x", d[i]) != 2) {
                return -1;
            }
        }
        return 0;
    }
    for (int i = 0; i < n; i++) {
        unsigned char c = utf8[i];
        int ok;
        if (c == '\0') {
            ok = BIO_write(bio, "\\00", 3) == 3;
        }
        else if (strchr("\\\"+,;<>", c) != NULL || (i == 0 && (c == '#' || c == ' ')) ||
                 (i == n - 1 && c == ' ')) {
            char esc[2] = {'\\', (char)c};
            ok = BIO_write(bio, esc, 2) == 2;
        }
        else {
            ok = BIO_write(bio, &c, 1) == 1;
        }
        if (!ok) {
            goto done;
        }
    }
    rc = 0;
done:
    OPENSSL_free(utf8);
    return rc;
}

static PyObject *
rfc4514_of(X509_NAME *name)
{
    /* New reference: name as an RFC 4514 string: the RDNs last first, joined by ',', the
     * attributes of a multi-valued RDN joined by '+'; each attribute TYPE=VALUE with the short
     * name of RFC 4514 §3's table (CN, L, ST, O, OU, C, STREET, DC, UID) or else the dotted
     * OID (emailAddress is 1.2.840.113549.1.9.1), the value escaped (rfc4514_value). Equal to
     * cryptography's Name.rfc4514_string(). NULL with an exception. */
    BIO *bio = BIO_new(BIO_s_mem());
    PyObject *s = NULL;
    char *data;
    long n;
    int ok = bio != NULL;
    /* RDNs last first; the entries of one RDN (one set number) in their order, '+' between */
    for (int last = X509_NAME_entry_count(name) - 1; ok && last >= 0;) {
        int set = X509_NAME_ENTRY_set(X509_NAME_get_entry(name, last)), first = last;
        while (first > 0 && X509_NAME_ENTRY_set(X509_NAME_get_entry(name, first - 1)) == set) {
            first--;
        }
        for (int i = first; ok && i <= last; i++) {
            const X509_NAME_ENTRY *e = X509_NAME_get_entry(name, i);
            const ASN1_OBJECT *obj = X509_NAME_ENTRY_get_object(e);
            const char *type = rfc4514_type(OBJ_obj2nid(obj));
            char oid[128];
            if (type == NULL) {
                int len = OBJ_obj2txt(oid, sizeof(oid), obj, 1);
                ok = len > 0 && (size_t)len < sizeof(oid);
                type = oid;
            }
            if (ok && (i > first || last < X509_NAME_entry_count(name) - 1)) {
                ok = BIO_write(bio, i > first ? "+" : ",", 1) == 1;
            }
            ok = ok && BIO_printf(bio, "%s=", type) > 0 &&
                 rfc4514_value(bio, X509_NAME_ENTRY_get_data(e)) == 0;
        }
        last = first - 1;
    }
    if (!ok || (n = BIO_get_mem_data(bio, &data)) < 0) {
        ERR_clear_error();
        PyErr_NoMemory();
    }
    else {
        s = PyUnicode_DecodeUTF8(data, (Py_ssize_t)n, "replace");
    }
    BIO_free(bio);
    return s;
}

PyObject *
sk_tls_info(sk_state *st, SSL *ssl)
{
    PyObject *d = NULL, *v = NULL, *chain = NULL;
    X509 *own = SSL_get_certificate(ssl);
    X509 *peer = SSL_get0_peer_certificate(ssl);
    const SSL_CIPHER *cipher = SSL_get_current_cipher(ssl);
    d = PyDict_New();
    chain = PyList_New(0);
    if (d == NULL || chain == NULL) {
        goto error;
    }
#define SET(key, expr)                                          \
    do {                                                        \
        v = (expr);                                             \
        if (v == NULL || PyDict_SetItemString(d, (key), v) < 0) \
            goto error;                                         \
        Py_CLEAR(v);                                            \
    } while (0)
    const cert_pem_t *own_pem = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), st->tls_pem_index);
    SET("server_cert",
        own == NULL       ? Py_NewRef(Py_None)
        : own_pem != NULL ? PyUnicode_DecodeASCII(own_pem->text, (Py_ssize_t)own_pem->len, "strict")
                          : pem_of(own));
    if (peer != NULL) {
        STACK_OF(X509) *rest = SSL_get_peer_cert_chain(ssl); /* server side: without the leaf */
        v = pem_of(peer);
        if (v == NULL || PyList_Append(chain, v) < 0) {
            goto error;
        }
        Py_CLEAR(v);
        for (int i = 0; rest != NULL && i < sk_X509_num(rest); i++) {
            /* The leaf is given apart (server side), and OpenSSL 3.0's verification appends
             * the trust anchor to this stack (the untrusted list it was given): the leaf, a
             * repeat and a self-signed certificate are skipped, so the list is what the
             * client sent, less any root it sent too. */
            X509 *c = sk_X509_value(rest, i);
            int skip = X509_cmp(c, peer) == 0 || X509_check_issued(c, c) == X509_V_OK;
            for (int k = 0; !skip && k < i; k++) {
                skip = X509_cmp(c, sk_X509_value(rest, k)) == 0;
            }
            if (skip) {
                continue;
            }
            v = pem_of(c);
            if (v == NULL || PyList_Append(chain, v) < 0) {
                goto error;
            }
            Py_CLEAR(v);
        }
    }
    SET("client_cert_chain", Py_NewRef(chain));
    SET("client_cert_name",
        peer != NULL ? rfc4514_of(X509_get_subject_name(peer)) : Py_NewRef(Py_None));
    long verify = SSL_get_verify_result(ssl);
    SET("client_cert_error", peer != NULL && verify != X509_V_OK
                                 ? PyUnicode_FromString(X509_verify_cert_error_string(verify))
                                 : Py_NewRef(Py_None));
    SET("tls_version", PyLong_FromLong(SSL_version(ssl)));
    SET("cipher_suite",
        PyLong_FromUnsignedLong(cipher != NULL ? SSL_CIPHER_get_protocol_id(cipher) : 0));
#undef SET
    Py_DECREF(chain);
    return d;
error:
    Py_XDECREF(v);
    Py_XDECREF(chain);
    Py_XDECREF(d);
    return NULL;
}

/* ---- the type ------------------------------------------------------------------------------- */

static PyMethodDef tlsctx_methods[] = {
    {"reload", tlsctx_reload, METH_NOARGS,
     "reload(): builds a new SSL_CTX from the same files and options and swaps it in (new "
     "connections get it, open ones keep theirs). On failure raises ValueError and keeps the "
     "current one."},
    {"sni_names", tlsctx_names, METH_NOARGS,
     "sni_names() -> dict[str, str]: each DNS name of the extra certificates -> its certfile."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tlsctx_getset[] = {
    {"min_version", tlsctx_get_min_version, NULL, "'TLSv1.2' or 'TLSv1.3'.", NULL},
    {"max_version", tlsctx_get_max_version, NULL,
     "'TLSv1.2' (--ssl-version 5), or None: the highest libssl has.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot tlsctx_slots[] = {
    {Py_tp_new, tlsctx_new},
    {Py_tp_methods, tlsctx_methods},
    {Py_tp_getset, tlsctx_getset},
    {Py_tp_traverse, tlsctx_traverse},
    {Py_tp_clear, tlsctx_clear},
    {Py_tp_dealloc, tlsctx_dealloc},
    {Py_tp_doc, (void *)"TLSContext(certfile, keyfile=None, password=None, ca_certs=None, "
                        "cert_reqs=0, ciphers=None, min_version='TLSv1.2', version=17, crl=None, "
                        "sni=(), ticket_key=None)\n\n"
                        "The serving TLS context of a Server's ssl_context (OpenSSL 3). See "
                        "skirr/_native.pyi."},
    {0, NULL},
};

PyType_Spec sk_tlsctx_spec = {
    .name = "skirr._native.TLSContext",
    .basicsize = sizeof(TLSContextObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = tlsctx_slots,
};
