/*
 * tests/fuzz_mutate.c - a seeded file mutator for tests/fuzz.sh:
 *
 *   fuzz_mutate SEED IN OUT [HEAD [TAIL]]
 *
 * writes a copy of IN with 1 to 3 damages chosen by SEED (the same seed,
 * the same mutant): a flipped bit, a random byte, a run of 0x00 or 0xff
 * bytes, or a truncation. Half of them fall in the first HEAD bytes
 * (default 4096: where HDF5 and IDX keep their metadata), a quarter in
 * the last TAIL bytes (default 4096), a quarter anywhere; HEAD = TAIL = 0
 * with a file of n bytes means the whole file. OUT always differs from
 * IN. Exit 0 when written, 1 on an I/O error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t s;

static uint64_t next(void)   /* xorshift64* */
{
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dULL;
}

static size_t pick(size_t n, size_t head, size_t tail)
{
    uint64_t r = next() % 4;
    if (r < 2 && head) return (size_t)(next() % (head < n ? head : n));
    if (r == 2 && tail) return n - 1 - (size_t)(next() % (tail < n ? tail : n));
    return (size_t)(next() % n);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: fuzz_mutate SEED IN OUT [HEAD [TAIL]]\n");
        return 1;
    }
    s = strtoull(argv[1], NULL, 10) * 0x9e3779b97f4a7c15ULL + 1;
    size_t head = argc > 4 ? strtoul(argv[4], NULL, 10) : 4096, tail = argc > 5 ? strtoul(argv[5], NULL, 10) : 4096;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    rewind(f);
    unsigned char *a = malloc(n + 1), *b = malloc(n + 1);
    if (!a || !b || fread(a, 1, n, f) != n || n == 0) return 1;
    fclose(f);
    size_t len;
    do {
        memcpy(b, a, n);
        len = n;
        int k = 1 + (int)(next() % 3);
        for (int i = 0; i < k; i++) {
            size_t at = pick(len, head, tail);
            switch (next() % 8) {
            case 0: case 1: case 2: b[at] ^= (unsigned char)(1u << (next() % 8)); break;
            case 3: case 4: b[at] = (unsigned char)next(); break;
            case 5: case 6: {
                size_t run = 1 + next() % 8;
                memset(b + at, next() % 2 ? 0xff : 0x00, at + run <= len ? run : len - at);
                break;
            }
            default: len = at ? at : 1; break;   /* truncate */
            }
        }
    } while (len == n && !memcmp(a, b, n));
    f = fopen(argv[3], "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) return 1;
    free(a);
    free(b);
    return 0;
}
