/*
 * bench/bench_peak.c - the FMA peak of this CPU per instruction set and
 * thread count (bench/peak.h), the ceiling against which bench/run.sh
 * reads every GEMM and convolution rate.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench/peak.h"
#include "mpiflow.h"

int main(int argc, char **argv)
{
    const char *threads = "1,2";
    int repeat = 5;
    static const struct option opts[] = {{"threads", 1, 0, 't'}, {"repeat", 1, 0, 'r'}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (o == 't') threads = optarg;
        else if (o == 'r') repeat = atoi(optarg);
        else {
            puts("usage: bench_peak [--threads LIST] [--repeat R]\n"
                 "GFLOP/s of a register-only FMA loop (and bfloat16 dot products, AMX tile products where the CPU\n"
                 "and kernel allow them) per ISA and thread count:\n"
                 "the ceiling no GEMM can pass. Rows: isa threads gflops.");
            return o == 'h' ? 0 : 2;
        }
    }
    if (repeat < 1) repeat = 1;
    printf("%-12s %7s %10s\n", "isa", "threads", "GFLOP/s");
    int list[8], n = 0;
    for (const char *p = threads; *p && n < 8;) {
        list[n++] = atoi(p);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    for (int i = 0; i < PEAK_ISA_COUNT; i++)
        for (int t = 0; t < n; t++) {
            if (!peak_isa_supported((peak_isa)i)) continue;
            printf("%-12s %7d %10.1f\n", peak_isa_name((peak_isa)i), list[t], peak_gflops((peak_isa)i, list[t], repeat));
            fflush(stdout);
        }
    return 0;
}
