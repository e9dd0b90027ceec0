/* One rank of a scenario-lab job (tests/lab/, tests/scenarios/): plays the rank's script
 * ($LAB_SCRIPT, format in tests/doubles/lab/lab_script.h) by calling NCCL through the normal
 * linked path — against the lab's scripted libnccl TEST DOUBLE or the real PyPI libnccl,
 * whichever libnccl.so.2 the simulated host's loader path holds — and doing what a training
 * process does around it: sleeping, hanging outside NCCL, crashing by a signal, exiting.
 * Prints one line per NCCL step ("<call> rc=<n>") so a failing scenario can be read. Keeps
 * going after a failed call unless the script says otherwise (frameworks often do: the
 * watchdog aborts later). An `app_driver` step is the application's own CUDA driver call (made
 * outside NCCL, reached through cuGetProcAddress as the CUDA runtime reaches it). */
#define _GNU_SOURCE
#include "../doubles/lab/lab_script.h"
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

typedef int ncclResult_t;
typedef struct opaque_comm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
ncclResult_t ncclGetVersion(int*);
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, void*);
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*);
ncclResult_t ncclCommAbort(ncclComm_t);
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void*, void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclBroadcast(const void*, void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclAllGather(const void*, void*, size_t, int, ncclComm_t, void*);
ncclResult_t ncclReduceScatter(const void*, void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclSend(const void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclRecv(void*, size_t, int, int, ncclComm_t, void*);
ncclResult_t ncclCommRegister(ncclComm_t, void*, size_t, void**);
ncclResult_t ncclCommDeregister(ncclComm_t, void*);
const char* ncclGetLastError(ncclComm_t);

static void say(const char* call, long n, ncclResult_t rc) {
    if (rc) printf("%s rc=%d (after %ld) last error: %s\n", call, rc, n, ncclGetLastError(NULL));
    else printf("%s rc=0 x%ld\n", call, n);
    fflush(stdout);
}

/* Never read or written (the scripted libnccl does not touch buffers; the real one fails before
 * it would): large enough for the biggest count a scenario names, as 4-byte elements. */
static char buf[1 << 22];

/* Registration handles of the segments currently registered (a window: older ones are
 * reused once deregistered). */
#define REG_SLOTS 1024
static void* reg[REG_SLOTS];
static long reg_next, reg_first;

/* The application's own driver call `name` (the CUDA doubles answer it from the script). */
typedef struct { char reserved[64]; } ipc_handle;
static int app_driver_call(const char* name) {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) { printf("app %s: %s\n", name, dlerror()); return -1; }
    int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*gpa)(const char*, void**, int, uint64_t, int*) =
        (int (*)(const char*, void**, int, uint64_t, int*))dlsym(h, "cuGetProcAddress_v2");
    void* fn = NULL;
    if (!cu_init || !gpa || cu_init(0) || gpa(name, &fn, 12080, 0, NULL) || !fn) return -1;
    if (!strcmp(name, "cuIpcOpenMemHandle")) {
        uint64_t dptr = 0;
        ipc_handle handle;
        memset(&handle, 0x5a, sizeof handle); /* what a peer process sent over */
        return ((int (*)(uint64_t*, ipc_handle, unsigned))fn)(&dptr, handle, 1 /* LAZY_ENABLE_PEER_ACCESS */);
    }
    printf("app %s: lab_rank does not know how to call it\n", name);
    return -1;
}

int main(void) {
    lab_load();
    ncclComm_t comm = NULL;
    int rank = getenv("RANK") ? atoi(getenv("RANK")) : 0;
    for (int i = 0; i < lab_nsteps; i++) {
        const struct lab_step* s = &lab_steps[i];
        const char* op = s->op;
        size_t count = s->count > 0 ? (size_t)s->count : 1024;
        if (count * 4 > sizeof buf) count = sizeof buf / 4;
        ncclResult_t rc = 0;
        long n = 0;
        int dt = s->dtype >= 0 ? s->dtype : 7; /* ncclFloat32 unless the step names its type */
        /* identity lines, and driver calls the libraries play inside the next NCCL step */
        if (!strcmp(op, "nccl") || !strcmp(op, "cuda") || !strcmp(op, "cudart") || !strcmp(op, "driver")) continue;
        else if (!strcmp(op, "load")) { if (!dlopen(s->name, RTLD_NOW | RTLD_GLOBAL)) printf("load %s: %s\n", s->name, dlerror()); continue; }
        else if (!strcmp(op, "sleep")) { usleep((useconds_t)(s->ms * 1000)); continue; }
        else if (!strcmp(op, "hang")) { printf("hanging outside NCCL\n"); fflush(stdout); for (;;) pause(); }
        else if (!strcmp(op, "signal")) { fflush(stdout); raise(s->sig); continue; }
        else if (!strcmp(op, "exit")) { fflush(stdout); exit(s->code); }
        else if (!strcmp(op, "app_driver")) {
            int r = app_driver_call(s->cu);
            printf("app %s -> CUresult %d\n", s->cu, r);
            fflush(stdout);
            continue;
        }
        else if (!strcmp(op, "ncclGetVersion")) { int v; rc = ncclGetVersion(&v); n = 1; }
        else if (!strcmp(op, "ncclGetUniqueId")) { ncclUniqueId id; rc = ncclGetUniqueId(&id); n = 1; }
        else if (!strcmp(op, "ncclCommInitRank")) {
            ncclUniqueId id;
            lab_unique_id(s->uid, s->root, id.internal);
            rc = ncclCommInitRank(&comm, s->nranks, id, s->nranks ? s->rank : rank);
            n = 1;
        } else if (!strcmp(op, "ncclCommSplit")) {
            /* sub-communicators of the current one (FSDP / TP groups): kept, never used here */
            for (n = 0; n < s->repeat && !rc; n++) {
                ncclComm_t sub = NULL;
                rc = ncclCommSplit(comm, s->color, rank, &sub, NULL);
            }
        } else if (!strcmp(op, "ncclCommGetAsyncError")) {
            ncclResult_t err = 0;
            for (n = 0; n < s->repeat && !err && !rc; n++) {
                rc = ncclCommGetAsyncError(comm, &err);
                if (s->ms) usleep((useconds_t)(s->ms * 1000));
            }
            if (err) { printf("async error %d: %s\n", err, ncclGetLastError(comm)); fflush(stdout); }
        } else if (!strcmp(op, "ncclCommAbort")) { rc = ncclCommAbort(comm); comm = NULL; n = 1; }
        /* the handle stays in `comm` after destroy, as in an application that keeps its variable:
         * a later step on it is a use after destroy (its scripted failure touches nothing) */
        else if (!strcmp(op, "ncclCommDestroy")) { rc = ncclCommDestroy(comm); n = 1; }
        /* PyTorch's nccl2 registers every caching-allocator segment with every communicator of
         * its device and deregisters it when the segment is freed: `repeat` calls over a window
         * of REG_SLOTS segments, each deregister taking the oldest registration still held */
        else if (!strcmp(op, "ncclCommRegister")) {
            for (n = 0; n < s->repeat && !rc; n++) {
                rc = ncclCommRegister(comm, buf + (reg_next % REG_SLOTS) * 4096, 4096, &reg[reg_next % REG_SLOTS]);
                reg_next++;
            }
        } else if (!strcmp(op, "ncclCommDeregister")) {
            for (n = 0; n < s->repeat && !rc; n++) {
                rc = ncclCommDeregister(comm, reg[reg_first % REG_SLOTS]);
                reg_first++;
            }
        }
        else if (!strcmp(op, "ncclGroupStart")) { rc = ncclGroupStart(); n = 1; }
        else if (!strcmp(op, "ncclGroupEnd")) { rc = ncclGroupEnd(); n = 1; }
        else {
            /* collectives and point-to-point: `repeat` calls, stopping at a failure */
            for (n = 0; n < s->repeat && !rc; n++) {
                if (!strcmp(op, "ncclAllReduce")) rc = ncclAllReduce(buf, buf, count, dt, 0, comm, NULL);
                else if (!strcmp(op, "ncclBroadcast")) rc = ncclBroadcast(buf, buf, count, dt, 0, comm, NULL);
                else if (!strcmp(op, "ncclAllGather")) rc = ncclAllGather(buf, buf, count, dt, comm, NULL);
                else if (!strcmp(op, "ncclReduceScatter")) rc = ncclReduceScatter(buf, buf, count, dt, 0, comm, NULL);
                else if (!strcmp(op, "ncclSend")) rc = ncclSend(buf, count, dt, s->peer, comm, NULL);
                else if (!strcmp(op, "ncclRecv")) rc = ncclRecv(buf, count, dt, s->peer, comm, NULL);
                else { fprintf(stderr, "lab_rank: unknown step %s\n", op); return 2; }
                if (s->ms) usleep((useconds_t)(s->ms * 1000));
            }
        }
        say(op, n, rc);
    }
    return 0;
}
