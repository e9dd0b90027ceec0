/* TEST DOUBLE of libnccl.so.2 — not NCCL. Real NCCL cannot create a communicator on a machine
 * without a GPU, so the shim's communicator paths (collective sequence numbers, groups, split
 * hashes, non-blocking init and async-error polling, a function the loaded NCCL lacks) are
 * exercised against this stand-in. It exports pncclX (GLOBAL) and ncclX (WEAK alias) like NCCL,
 * and deliberately does NOT export ncclCommGrow. Everything that real NCCL can do here
 * (version, uniqueId, init failures) is tested against the real wheels instead. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
    size_t size;
    unsigned int magic, version;
    int blocking;
} double_config_t;
struct double_comm {
    int nranks, rank, dev;
    int async;      /* current async error */
    int polls_left; /* polls still answering InProgress */
};
typedef struct double_comm* ncclComm_t;

static char last_error[256];
static void set_error(const char* m) { strncpy(last_error, m, sizeof last_error - 1); }

#define API(name, ...) \
    ncclResult_t name(__VA_ARGS__) __attribute__((weak, alias("p" #name))); \
    ncclResult_t p##name(__VA_ARGS__)

API(ncclGetVersion, int* v) { *v = 22800; return 0; }
const char* pncclGetLastError(ncclComm_t c) { (void)c; return last_error; }
const char* ncclGetLastError(ncclComm_t c) __attribute__((weak, alias("pncclGetLastError")));

API(ncclGetUniqueId, ncclUniqueId* id) {
    memset(id, 0, sizeof *id);
    uint64_t magic = 0x1122334455667788ull;
    memcpy(id->internal, &magic, 8);
    id->internal[8] = 2; /* AF_INET */
    id->internal[10] = 0x1f; id->internal[11] = 0x90; /* port 8080, big-endian */
    id->internal[12] = 127; id->internal[15] = 1;
    return 0;
}

static ncclResult_t make(ncclComm_t* out, int nranks, int rank, int blocking) {
    if (nranks <= 0 || rank < 0 || rank >= nranks) { set_error("double: invalid rank"); return 4; }
    struct double_comm* c = calloc(1, sizeof *c);
    c->nranks = nranks; c->rank = rank; c->dev = 3;
    c->async = blocking ? 0 : 7;
    c->polls_left = blocking ? 0 : 3;
    *out = c;
    return blocking ? 0 : 7;
}

API(ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    (void)id; return make(comm, nranks, rank, 1);
}
API(ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, double_config_t* cfg) {
    (void)id; return make(comm, nranks, rank, cfg == NULL || cfg->blocking != 0);
}
API(ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* err) {
    if (!comm) { set_error("double: invalid comm"); return 4; }
    if (comm->polls_left > 0 && --comm->polls_left == 0) comm->async = 0;
    *err = comm->async;
    return 0;
}
API(ncclCommCuDevice, ncclComm_t comm, int* dev) { *dev = comm->dev; return 0; }
API(ncclCommCount, ncclComm_t comm, int* n) { *n = comm->nranks; return 0; }
API(ncclCommUserRank, ncclComm_t comm, int* r) { *r = comm->rank; return 0; }
API(ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, void* cfg) {
    (void)color; (void)key; (void)cfg;
    if (!comm) { set_error("double: invalid comm"); return 4; }
    return make(newcomm, 1, 0, 1);
}
API(ncclCommDestroy, ncclComm_t comm) { free(comm); return 0; }
API(ncclGroupStart, void) { return 0; }
API(ncclGroupEnd, void) { return 0; }

#define CHECK_COMM if (!comm) { set_error("double: invalid comm"); return 4; } (void)stream; return 0;
/* NCCL_DOUBLE_BLOCK_AT=N: the process's N-th all-reduce (from 0) never returns, as a real one
 * blocks when a peer never joins (a test-double knob: real NCCL blocks on the GPU, not here). */
static long block_at = -2, allreduces;
API(ncclAllReduce, const void* s, void* r, size_t n, int dt, int op, ncclComm_t comm, void* stream) {
    (void)s; (void)r; (void)n; (void)dt; (void)op;
    if (block_at == -2) { const char* b = getenv("NCCL_DOUBLE_BLOCK_AT"); block_at = b ? atol(b) : -1; }
    /* Atomic: a test may issue all-reduces from two threads (the concurrent-use case). */
    if (comm && __atomic_fetch_add(&allreduces, 1, __ATOMIC_RELAXED) == block_at) for (;;) pause();
    CHECK_COMM
}
API(ncclBroadcast, const void* s, void* r, size_t n, int dt, int root, ncclComm_t comm, void* stream) {
    (void)s; (void)r; (void)n; (void)dt; (void)root; CHECK_COMM
}
API(ncclBcast, void* b, size_t n, int dt, int root, ncclComm_t comm, void* stream) {
    (void)b; (void)n; (void)dt; (void)root; CHECK_COMM
}
API(ncclSend, const void* s, size_t n, int dt, int peer, ncclComm_t comm, void* stream) {
    (void)s; (void)n; (void)dt; (void)peer; CHECK_COMM
}
API(ncclRecv, void* r, size_t n, int dt, int peer, ncclComm_t comm, void* stream) {
    (void)r; (void)n; (void)dt; (void)peer; CHECK_COMM
}
