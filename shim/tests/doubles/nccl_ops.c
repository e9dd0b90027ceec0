/* Drives the communicator paths of the shim against the NCCL TEST DOUBLE (nccl_double.c):
 * prints every call's result as "<step> rc=<n>". */
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <stddef.h>

typedef int ncclResult_t;
typedef struct double_comm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { size_t size; unsigned int magic, version; int blocking; } cfg_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, cfg_t*);
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*);
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, void*);
ncclResult_t ncclCommDestroy(ncclComm_t);
/* Weak: the double does not export it; only the preloaded shim does. */
ncclResult_t ncclCommGrow(ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*, void*) __attribute__((weak));
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void*, void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclBroadcast(const void*, void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclBcast(void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclSend(const void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclRecv(void*, size_t, int, int, ncclComm_t, void*);

#define P(step, expr) printf("%s rc=%d\n", step, (int)(expr))

int main(void) {
    ncclUniqueId id;
    ncclComm_t comm = NULL, child = NULL, nb = NULL, grown = NULL;
    char buf[64];
    P("uniqueid", ncclGetUniqueId(&id));
    P("init", ncclCommInitRank(&comm, 2, id, 1));
    P("groupstart", ncclGroupStart());
    P("allreduce0", ncclAllReduce(buf, buf, 16, 7, 0, comm, NULL));
    P("allreduce1", ncclAllReduce(buf, buf, 16, 7, 0, comm, NULL));
    P("broadcast", ncclBroadcast(buf, buf, 8, 0, 1, comm, NULL));
    P("bcast", ncclBcast(buf, 8, 0, 0, comm, NULL));
    P("send", ncclSend(buf, 4, 2, 0, comm, NULL));
    P("recv", ncclRecv(buf, 4, 2, 0, comm, NULL));
    P("groupend", ncclGroupEnd());
    P("allreduce2", ncclAllReduce(buf, buf, 32, 7, 0, comm, NULL));
    P("split", ncclCommSplit(comm, 5, 0, &child, NULL));
    P("child_allreduce", ncclAllReduce(buf, buf, 1, 7, 0, child, NULL));
    cfg_t cfg = { sizeof cfg, 0xcafebeef, 22800, 0 };
    P("init_nonblocking", ncclCommInitRankConfig(&nb, 2, id, 0, &cfg));
    ncclResult_t a = 7;
    for (int i = 0; i < 6; i++) {
        P("poll", ncclCommGetAsyncError(nb, &a));
        printf("async=%d\n", (int)a);
    }
    P("null_comm_allreduce", ncclAllReduce(buf, buf, 1, 7, 0, NULL, NULL));
    if (ncclCommGrow) P("grow", ncclCommGrow(comm, 3, &id, 2, &grown, NULL));
    else printf("grow absent\n");
    P("destroy", ncclCommDestroy(comm));
    fflush(stdout);
    return 0;
}
