/* Cost of the handle-lookup path: ncclGetVersion called through a pointer from
 * dlsym(dlopen(LIB), "ncclGetVersion") (under the shim: a bound stub into the recording
 * export) against pncclGetVersion of the same handle (never wrapped), and the cost of one
 * dlsym of a name the shim does not handle ("malloc" on libc's handle) and of a handle lookup
 * of an exported NCCL name (the bound-stub decision). Run with and without
 * LD_PRELOAD=libncclshim.so. 21 alternating rounds, medians.
 * Build: cc -O2 -o bench_handle tests/c/bench_handle.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 21
#define CALLS 200000

typedef int (*gv_t)(int*);

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double calls_ns(gv_t f) {
    int v = 0;
    double t0 = now_ns();
    for (int i = 0; i < CALLS; i++) f(&v);
    return (now_ns() - t0) / CALLS;
}

static double lookups_ns(void* h, const char* name) {
    double t0 = now_ns();
    for (int i = 0; i < CALLS / 10; i++) {
        void* volatile p = dlsym(h, name);
        (void)p;
    }
    return (now_ns() - t0) / (CALLS / 10);
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double median(double* v) {
    qsort(v, ROUNDS, sizeof *v, cmp);
    return v[ROUNDS / 2];
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!h || !libc) return 3;
    gv_t bound = (gv_t)dlsym(h, "ncclGetVersion");
    gv_t direct = (gv_t)dlsym(h, "pncclGetVersion");
    int v = 0;
    bound(&v); /* creates the dump, takes the snapshots */
    double d[ROUNDS], b[ROUNDS], o[ROUNDS], n[ROUNDS], add[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        d[r] = calls_ns(direct);
        b[r] = calls_ns(bound);
        add[r] = b[r] - d[r];
        o[r] = lookups_ns(libc, "malloc");
        n[r] = lookups_ns(h, "ncclGetVersion");
    }
    printf("ncclGetVersion %d via handle: direct %.1f ns, looked up %.1f ns, added %.1f ns/call\n", v,
           median(d), median(b), median(add));
    printf("dlsym(libc, \"malloc\") %.1f ns, dlsym(libnccl, \"ncclGetVersion\") %.1f ns\n", median(o),
           median(n));
    return 0;
}
