/* afl_driver.c — AFL++ persistent-mode driver for a LLVMFuzzerTestOneInput harness.
 *
 * Owns: main() for the AFL++ builds (afl-clang-fast): the test case arrives through shared memory
 * (__AFL_FUZZ_TESTCASE_BUF) and __AFL_LOOP runs many inputs per process, so a harness body is
 * written once and built for libFuzzer and AFL++ alike. Without afl-clang-fast it reads one file
 * (argv[1] or stdin) and runs it, so the binary also replays a saved crash.
 * Never: keeps state between inputs; the harness does that.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT();
#endif

int
main(int argc, char **argv)
{
#ifdef __AFL_FUZZ_TESTCASE_LEN
    unsigned char *buf;

    (void)argc;
    (void)argv;
    __AFL_INIT();
    buf = __AFL_FUZZ_TESTCASE_BUF; /* after __AFL_INIT, before __AFL_LOOP */
    while (__AFL_LOOP(100000)) {
        size_t len = (size_t)__AFL_FUZZ_TESTCASE_LEN;
        /* a heap copy of exactly len bytes, so ASan sees reads past the end */
        uint8_t *copy = malloc(len ? len : 1);

        if (copy == NULL)
            abort();
        memcpy(copy, buf, len);
        LLVMFuzzerTestOneInput(copy, len);
        free(copy);
    }
    return 0;
#else
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : stdin;
    uint8_t *data = NULL;
    size_t len = 0;
    size_t cap = 0;
    size_t n;

    if (f == NULL) {
        perror(argv[1]);
        return 2;
    }
    do {
        if (len == cap) {
            uint8_t *grown = realloc(data, cap ? cap * 2 : 4096);

            if (grown == NULL)
                abort();
            data = grown;
            cap = cap ? cap * 2 : 4096;
        }
        n = fread(data + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    return 0;
#endif
}
