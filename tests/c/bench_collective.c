/* Cost the shim adds to one collective (ncclAllReduce: the thread-ring record at entry and its
 * completion in place, the communicator's sequence number and progress-table stores), against
 * the same function called directly (pncclAllReduce, which the shim never exports) and against
 * the same-run floor of any recorded call: two reads of the record clock and a 128-byte store
 * into a MAP_SHARED file mapping, ring-indexed like the shim's. Runs against the NCCL TEST DOUBLE
 * (shim/tests/doubles/nccl_double.c), whose all-reduce returns at once, so the difference is the
 * shim's whole cost. 21 alternating rounds of 200,000 calls, medians. Run with
 * LD_PRELOAD=libncclshim.so; BENCHMARKS.md has the commands. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t stamp(void) { return __rdtsc(); }
#else
static inline uint64_t stamp(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
#endif

typedef int ncclResult_t;
typedef struct double_comm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
typedef ncclResult_t (*allreduce_t)(const void*, void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclAllReduce(const void*, void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t pncclAllReduce(const void*, void*, size_t, int, int, ncclComm_t, void*);

#define ROUNDS 21
#define CALLS 200000
#define SLOTS 2048

static ncclComm_t comm;

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double round_ns(allreduce_t f) {
    float x = 0;
    double t0 = now_ns();
    for (int i = 0; i < CALLS; i++) f(&x, &x, 1, 7, 0, comm, NULL);
    return (now_ns() - t0) / CALLS;
}

static volatile uint64_t* ring;

static double floor_ns(void) {
    double t0 = now_ns();
    for (uint64_t i = 0; i < CALLS; i++) {
        volatile uint64_t* s = ring + (i & (SLOTS - 1)) * 16;
        s[0] = i << 1;
        s[1] = stamp();
        for (int k = 3; k < 16; k++) s[k] = i + (uint64_t)k;
        s[2] = stamp();
        s[0] = (i << 1) | 1;
    }
    return (now_ns() - t0) / CALLS;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double median(double* v) {
    qsort(v, ROUNDS, sizeof *v, cmp);
    return v[ROUNDS / 2];
}

int main(void) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) || ncclCommInitRank(&comm, 1, id, 0)) return 3;
    char path[] = "/tmp/bench_collective_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ftruncate(fd, SLOTS * 128)) return 4;
    ring = mmap(NULL, SLOTS * 128, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    unlink(path);
    if (ring == MAP_FAILED) return 4;
    double d[ROUNDS], s[ROUNDS], added[ROUNDS], fl[ROUNDS], beyond[ROUNDS];
    round_ns(ncclAllReduce); /* claims the thread's ring */
    for (int r = 0; r < ROUNDS; r++) {
        d[r] = round_ns(pncclAllReduce);
        s[r] = round_ns(ncclAllReduce);
        fl[r] = floor_ns();
        added[r] = s[r] - d[r];
        beyond[r] = added[r] - fl[r];
    }
    printf("ncclAllReduce on the test double, %d alternating rounds of %d calls, medians:\n", ROUNDS, CALLS);
    printf("  direct (pncclAllReduce)        %7.1f ns/call\n", median(d));
    printf("  through the shim               %7.1f ns/call\n", median(s));
    printf("  added by the shim              %7.1f ns/call\n", median(added));
    printf("  floor: 2 clock reads + 128 B   %7.1f ns/call\n", median(fl));
    printf("  shim cost beyond the floor     %7.1f ns/call\n", median(beyond));
    return 0;
}
