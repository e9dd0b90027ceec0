/* TEST DOUBLE of libnccl.so.2 for the scenario lab — not NCCL. No communicator can be made on a
 * machine without a GPU, so the lab's scenarios play a per-rank script ($LAB_SCRIPT, see
 * lab_script.h) instead: every call answers with the scripted result, sets the scripted
 * ncclGetLastError() text, blocks forever where the script says the call hangs, and makes the
 * CUDA driver calls NCCL would make inside it (through cuGetProcAddress, as NCCL's cudart does,
 * so the shim's driver hooks see them). Exports pncclX (GLOBAL) and ncclX (WEAK alias) like NCCL.
 * Whatever fails for real without a GPU is tested against the real PyPI libnccl instead. */
#define _GNU_SOURCE
#include "lab_script.h"
#include <dlfcn.h>
#include <unistd.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
struct script_comm { int nranks, rank, dev; };
typedef struct script_comm* ncclComm_t;

static char last_error[LAB_TEXT];
static struct lab_cursor cursor;

const char* pncclGetLastError(ncclComm_t c) { (void)c; return last_error; }
const char* ncclGetLastError(ncclComm_t c) __attribute__((weak, alias("pncclGetLastError")));

const char* pncclGetErrorString(ncclResult_t r) {
    static const char* names[] = {"no error", "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "internal error - please report this issue to the NCCL developers",
        "invalid argument (run with NCCL_DEBUG=WARN for details)",
        "invalid usage (run with NCCL_DEBUG=WARN for details)",
        "remote process exited or there was a network error", "NCCL operation in progress"};
    return r >= 0 && r < 8 ? names[r] : "unknown result code";
}
const char* ncclGetErrorString(ncclResult_t r) __attribute__((weak, alias("pncclGetErrorString")));

/* The driver call NCCL makes inside a step (`cu=NAME`), reached as NCCL reaches it. */
typedef int (*gpa_v2_t)(const char*, void**, int, uint64_t, int*);
static void driver_call(const char* name) {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return;
    int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    gpa_v2_t gpa = (gpa_v2_t)dlsym(h, "cuGetProcAddress_v2");
    if (!cu_init || !gpa) return;
    cu_init(0);
    void* fn = NULL;
    int status = 0;
    if (gpa(name, &fn, 12080, 0, &status) || !fn) return;
    uint64_t handle = 0;
    char prop[128] = {0};
    int fd = -1;
    if (!strcmp(name, "cuMemImportFromShareableHandle"))
        ((int (*)(uint64_t*, void*, int))fn)(&handle, (void*)(intptr_t)3, 1);
    else if (!strcmp(name, "cuMemCreate"))
        ((int (*)(uint64_t*, size_t, const void*, unsigned long long))fn)(&handle, 2u << 20, prop, 0);
    else if (!strcmp(name, "cuMemExportToShareableHandle"))
        ((int (*)(void*, uint64_t, int, unsigned long long))fn)(&fd, 0x1000, 1, 0);
    else if (!strcmp(name, "cuMulticastBindMem"))
        ((int (*)(uint64_t, size_t, uint64_t, size_t, size_t, unsigned long long))fn)(0x2000, 0, 0x1000, 0, 2u << 20, 0);
    else if (!strcmp(name, "cuMulticastCreate"))
        ((int (*)(uint64_t*, const void*))fn)(&handle, prop);
    else if (!strcmp(name, "cuMemMap"))
        ((int (*)(uint64_t, size_t, size_t, uint64_t, unsigned long long))fn)(0x7f0000000000ull, 2u << 20, 0, 0x1000, 0);
}

/* Plays this call: the scripted driver call, then a hang or the scripted result and text. */
static ncclResult_t play(const char* name) {
    int last = 0;
    const struct lab_step* s = lab_next(&cursor, name, 0, &last);
    if (!s || !last) return 0;
    if (s->cu[0]) driver_call(s->cu);
    if (s->hang) for (;;) pause();
    if (s->rc) snprintf(last_error, sizeof last_error, "%s", s->text);
    return s->rc;
}

#define API(name, ...) \
    ncclResult_t name(__VA_ARGS__) __attribute__((weak, alias("p" #name))); \
    ncclResult_t p##name(__VA_ARGS__)

API(ncclGetVersion, int* v) {
    const struct lab_step* id = lab_identity("nccl");
    *v = id && id->version ? (int)id->version : 22803;
    return play("ncclGetVersion");
}

API(ncclGetUniqueId, ncclUniqueId* id) {
    int last = 0;
    const struct lab_step* s = lab_next(&cursor, "ncclGetUniqueId", 0, &last);
    lab_unique_id(s ? s->uid : 0, s ? s->root : NULL, id->internal);
    if (!s || !last) return 0;
    if (s->rc) snprintf(last_error, sizeof last_error, "%s", s->text);
    return s->rc;
}

static ncclResult_t init(const char* name, ncclComm_t* comm, int nranks, int rank) {
    ncclResult_t rc = play(name);
    if (rc) { *comm = NULL; return rc; }
    struct script_comm* c = calloc(1, sizeof *c);
    c->nranks = nranks; c->rank = rank; c->dev = rank;
    *comm = c;
    return 0;
}
API(ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    (void)id; return init("ncclCommInitRank", comm, nranks, rank);
}
API(ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, void* cfg) {
    (void)id; (void)cfg; return init("ncclCommInitRankConfig", comm, nranks, rank);
}
API(ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, void* cfg) {
    (void)color; (void)cfg;
    return init("ncclCommSplit", newcomm, comm ? comm->nranks : 1, key);
}

/* ncclCommGetAsyncError answers the scripted async error at the step's last poll. */
API(ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* err) {
    (void)comm;
    int last = 0;
    const struct lab_step* s = lab_next(&cursor, "ncclCommGetAsyncError", 0, &last);
    *err = 0;
    if (s && last && s->async) {
        *err = s->async;
        snprintf(last_error, sizeof last_error, "%s", s->text);
    }
    return 0;
}
API(ncclCommCuDevice, ncclComm_t comm, int* dev) { *dev = comm ? comm->dev : 0; return 0; }
API(ncclCommCount, ncclComm_t comm, int* n) { *n = comm ? comm->nranks : 0; return 0; }
API(ncclCommUserRank, ncclComm_t comm, int* r) { *r = comm ? comm->rank : 0; return 0; }
API(ncclCommDestroy, ncclComm_t comm) { ncclResult_t rc = play("ncclCommDestroy"); free(comm); return rc; }
API(ncclCommAbort, ncclComm_t comm) { ncclResult_t rc = play("ncclCommAbort"); free(comm); return rc; }
API(ncclCommFinalize, ncclComm_t comm) { (void)comm; return play("ncclCommFinalize"); }
API(ncclGroupStart, void) { return play("ncclGroupStart"); }
API(ncclGroupEnd, void) { return play("ncclGroupEnd"); }

API(ncclAllReduce, const void* s, void* r, size_t n, int dt, int op, ncclComm_t comm, void* stream) {
    (void)s; (void)r; (void)n; (void)dt; (void)op; (void)comm; (void)stream; return play("ncclAllReduce");
}
API(ncclBroadcast, const void* s, void* r, size_t n, int dt, int root, ncclComm_t comm, void* stream) {
    (void)s; (void)r; (void)n; (void)dt; (void)root; (void)comm; (void)stream; return play("ncclBroadcast");
}
API(ncclAllGather, const void* s, void* r, size_t n, int dt, ncclComm_t comm, void* stream) {
    (void)s; (void)r; (void)n; (void)dt; (void)comm; (void)stream; return play("ncclAllGather");
}
API(ncclReduceScatter, const void* s, void* r, size_t n, int dt, int op, ncclComm_t comm, void* stream) {
    (void)s; (void)r; (void)n; (void)dt; (void)op; (void)comm; (void)stream; return play("ncclReduceScatter");
}
API(ncclSend, const void* s, size_t n, int dt, int peer, ncclComm_t comm, void* stream) {
    (void)s; (void)n; (void)dt; (void)peer; (void)comm; (void)stream; return play("ncclSend");
}
API(ncclRecv, void* r, size_t n, int dt, int peer, ncclComm_t comm, void* stream) {
    (void)r; (void)n; (void)dt; (void)peer; (void)comm; (void)stream; return play("ncclRecv");
}
