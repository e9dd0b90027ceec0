/* Writeback benchmark for the shim (BENCHMARKS.md "Disk and writeback"), against the NCCL TEST
 * DOUBLE (shim/tests/doubles/nccl_double.c):
 *   paced_calls THREADS RATE SECONDS
 * THREADS threads each issue RATE all-reduces per second on one communicator for SECONDS
 * seconds. The process prints its /proc/self/io write_bytes (bytes it caused to be written to
 * storage: each page of its MAP_SHARED dump counted when it goes from clean to dirty, which is
 * what writeback then writes) at every 10 s mark. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int ncclResult_t;
typedef struct double_comm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t ncclAllReduce(const void*, void*, size_t, int, int, ncclComm_t, void*);

static ncclComm_t comm;
static long rate, seconds;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void* work(void* arg) {
    (void)arg;
    float x = 0;
    double t0 = now();
    for (long i = 0; i < rate * seconds; i++) {
        ncclAllReduce(&x, &x, 1, 7, 0, comm, NULL);
        double due = t0 + (double)(i + 1) / rate, t = now();
        if (due > t) usleep((useconds_t)((due - t) * 1e6));
    }
    return NULL;
}

static long write_bytes(void) {
    FILE* f = fopen("/proc/self/io", "r");
    char line[128];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "write_bytes:", 12)) v = atol(line + 12);
    if (f) fclose(f);
    return v;
}

int main(int argc, char** argv) {
    if (argc < 4) return 2;
    int threads = atoi(argv[1]);
    rate = atol(argv[2]);
    seconds = atol(argv[3]);
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) || ncclCommInitRank(&comm, 1, id, 0)) return 3;
    pthread_t t[64];
    if (threads > 64) return 2;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, work, NULL);
    for (long s = 0; s <= seconds; s += 10) {
        printf("t=%lds write_bytes=%ld\n", s, write_bytes());
        fflush(stdout);
        sleep(10);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return 0;
}
