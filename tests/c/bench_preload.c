/* Cost of one intercepted call through the real preload path (PLT into libncclshim.so, its
 * global-dynamic TLS, the recorder), against the same NCCL function called directly
 * (pncclGetVersion, which the shim never exports), in one process: run it with
 * LD_PRELOAD=libncclshim.so. 21 alternating rounds of 200,000 calls, medians.
 * Build: cc -O2 -o bench_preload tests/c/bench_preload.c -L<nccl lib> -l:libnccl.so.2 -Wl,-rpath,<nccl lib> */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int ncclGetVersion(int* v);
int pncclGetVersion(int* v);

#define ROUNDS 21
#define CALLS 200000

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double round_ns(int (*f)(int*)) {
    int v = 0;
    double t0 = now_ns();
    for (int i = 0; i < CALLS; i++) f(&v);
    return (now_ns() - t0) / CALLS;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

int main(void) {
    double d[ROUNDS], s[ROUNDS], added[ROUNDS];
    int v = 0;
    ncclGetVersion(&v); /* the first call creates the dump and takes the snapshots */
    for (int r = 0; r < ROUNDS; r++) {
        d[r] = round_ns(pncclGetVersion);
        s[r] = round_ns(ncclGetVersion);
        added[r] = s[r] - d[r];
    }
    qsort(d, ROUNDS, sizeof d[0], cmp);
    qsort(s, ROUNDS, sizeof s[0], cmp);
    qsort(added, ROUNDS, sizeof added[0], cmp);
    printf("NCCL %d: direct %.1f ns/call, ncclGetVersion %.1f ns/call, added %.1f ns/call (medians)\n",
           v, d[ROUNDS / 2], s[ROUNDS / 2], added[ROUNDS / 2]);
    return 0;
}
