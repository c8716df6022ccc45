/* replay.c — runs a LLVMFuzzerTestOneInput harness over files, without any fuzzer.
 *
 * Owns: main() for the replay builds (gcc or clang, with ASan/UBSan from sanitizers/sanitize.mk):
 * every argument is a file or a directory of files (seed corpora, fuzz/regressions/); each file is
 * read into a heap block of exactly its size and run once. Prints how many inputs ran; a failing
 * check in the harness aborts, so the exit status tells.
 * Never: mutates inputs or writes files.
 */
#define _DEFAULT_SOURCE

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *data;
    long size;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        if (f != NULL)
            fclose(f);
        return -1;
    }
    data = malloc(size > 0 ? (size_t)size : 1);
    if (data == NULL || fread(data, 1, (size_t)size, f) != (size_t)size) {
        perror(path);
        free(data);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
    return 0;
}

static int
run_path(const char *path, long *count)
{
    struct stat st;
    DIR *dir;
    struct dirent *e;
    int rc = 0;

    if (stat(path, &st) != 0) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (run_file(path) != 0)
            return -1;
        (*count)++;
        return 0;
    }
    dir = opendir(path);
    if (dir == NULL) {
        perror(path);
        return -1;
    }
    while ((e = readdir(dir)) != NULL && rc == 0) {
        char child[4096];

        if (e->d_name[0] == '.')
            continue; /* ., .., and hidden files such as .gitkeep */
        snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
        rc = run_path(child, count);
    }
    closedir(dir);
    return rc;
}

int
main(int argc, char **argv)
{
    long count = 0;

    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count) != 0)
            return 2;
    printf("%s: %ld inputs ran clean\n", argv[0], count);
    return 0;
}
