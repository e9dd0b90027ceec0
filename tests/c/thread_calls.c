/* Threads issuing NCCL calls against the NCCL TEST DOUBLE (shim/tests/doubles/nccl_double.c), for
 * the dump-size and growth tests:
 *   thread_calls THREADS OPS         THREADS threads each issue OPS all-reduces on one
 *                                    communicator, then the process prints "done" and exits 0
 *   thread_calls storm OPS           threads are started forever, one after another, each
 *                                    issuing OPS all-reduces (every one claims a new ring, so the
 *                                    dump keeps growing); prints "storming" once the first ran
 * THREADS 0 with OPS 0 makes one call (ncclGetVersion) and exits. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int ncclResult_t;
typedef struct double_comm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
ncclResult_t ncclGetVersion(int*);
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t ncclAllReduce(const void*, void*, size_t, int, int, ncclComm_t, void*);

static ncclComm_t comm;
static long ops;

static void* work(void* arg) {
    (void)arg;
    float x = 0;
    for (long i = 0; i < ops; i++) ncclAllReduce(&x, &x, 1, 7, 0, comm, NULL);
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 3) return 2;
    ops = atol(argv[2]);
    if (!strcmp(argv[1], "0")) {
        int v;
        ncclGetVersion(&v);
        printf("done\n");
        return 0;
    }
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) || ncclCommInitRank(&comm, 1, id, 0)) return 3;
    if (!strcmp(argv[1], "storm")) {
        for (long n = 0;; n++) {
            pthread_t t;
            if (pthread_create(&t, NULL, work, NULL)) return 4;
            pthread_join(t, NULL);
            if (n == 0) { printf("storming\n"); fflush(stdout); }
        }
    }
    int threads = atoi(argv[1]);
    pthread_t t[64];
    if (threads > 64) return 2;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, work, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("done\n");
    return 0;
}
