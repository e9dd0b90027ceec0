/* One rank of a job driven against the NCCL TEST DOUBLE (shim/tests/doubles/nccl_double.c), for
 * the long-job and killed/crashed/hung tests:
 *   job_rank RANK NRANKS OPS THEN
 * joins the communicator (the double's fixed uniqueId, so every rank shares its hash), issues OPS
 * all-reduces, prints "ready" and then THEN:
 *   exit    returns 0                  segv   writes through NULL (outside NCCL)
 *   kill    raise(SIGKILL)             wait   polls ncclCommGetAsyncError forever (a watchdog)
 *   sleep   sleeps forever outside NCCL
 *   block   one more all-reduce, which blocks inside the double under NCCL_DOUBLE_BLOCK_AT=OPS
 *   race    like block, while a second thread issues an all-reduce on the same communicator
 *           (a user bug: communicators are not thread-safe); "ready" comes after that thread's call
 * With NCCL_DOUBLE_BLOCK_AT=K the K-th all-reduce blocks inside the double ("ready" never comes). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int ncclResult_t;
typedef struct double_comm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*);
ncclResult_t ncclAllReduce(const void*, void*, size_t, int, int, ncclComm_t, void*);

static ncclComm_t shared_comm;

/* The second thread of `race`: enters an all-reduce on the communicator the main thread is
 * blocked in, then says "ready". */
static void* racing_thread(void* arg) {
    (void)arg;
    usleep(50000);
    float y = 0;
    ncclAllReduce(&y, &y, 1, 7, 0, shared_comm, NULL);
    printf("ready\n");
    fflush(stdout);
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 5) return 2;
    int rank = atoi(argv[1]), nranks = atoi(argv[2]);
    long ops = atol(argv[3]);
    const char* then = argv[4];
    ncclUniqueId id;
    ncclComm_t comm;
    if (ncclGetUniqueId(&id) || ncclCommInitRank(&comm, nranks, id, rank)) return 3;
    float x = 0;
    for (long i = 0; i < ops; i++) ncclAllReduce(&x, &x, 1, 7, 0, comm, NULL);
    if (!strcmp(then, "race")) {
        pthread_t t;
        shared_comm = comm;
        if (pthread_create(&t, NULL, racing_thread, NULL)) return 4;
        ncclAllReduce(&x, &x, 1, 7, 0, comm, NULL); /* blocks under NCCL_DOUBLE_BLOCK_AT=OPS */
        return 0;
    }
    printf("ready\n");
    fflush(stdout);
    if (!strcmp(then, "segv")) *(volatile int*)0 = 1;
    if (!strcmp(then, "kill")) raise(SIGKILL);
    if (!strcmp(then, "wait")) {
        ncclResult_t e;
        for (;;) { ncclCommGetAsyncError(comm, &e); usleep(2000); }
    }
    if (!strcmp(then, "sleep")) for (;;) pause();
    if (!strcmp(then, "block")) ncclAllReduce(&x, &x, 1, 7, 0, comm, NULL);
    return 0;
}
