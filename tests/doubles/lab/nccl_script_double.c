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
#include <time.h>
#include <unistd.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
struct script_comm {
    int nranks, rank, dev;
    uint64_t comm_hash;
    void* prof_ctx;   /* the profiler plugin's context (NULL: no plugin) */
    int prof_mask;    /* the event types the plugin asked for */
    uint64_t seq[4];  /* per-function collective counters, as NCCL's coll.seqNumber */
    int kernel_stuck; /* a kernel on this communicator's stream never ended: nor do later ones */
};
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
static void driver_call(const char* name, const struct lab_step* line) {
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
    else if (!strcmp(name, "cuMemCreate")) {
        if (line && line->loc_type) {
            /* CUmemAllocationProp's head: PINNED, POSIX_FD handles, the scripted location
             * (NCCL's host-memory probe: CU_MEM_LOCATION_TYPE_HOST_NUMA and the CPU's node) */
            unsigned head[4] = {1, 1, (unsigned)line->loc_type, (unsigned)line->loc_id};
            memcpy(prop, head, sizeof head);
        }
        ((int (*)(uint64_t*, size_t, const void*, unsigned long long))fn)(&handle, 2u << 20, prop, 0);
    }
    else if (!strcmp(name, "cuMemExportToShareableHandle"))
        ((int (*)(void*, uint64_t, int, unsigned long long))fn)(&fd, 0x1000, 1, 0);
    else if (!strcmp(name, "cuMulticastBindMem"))
        ((int (*)(uint64_t, size_t, uint64_t, size_t, size_t, unsigned long long))fn)(0x2000, 0, 0x1000, 0, 2u << 20, 0);
    else if (!strcmp(name, "cuMulticastCreate"))
        ((int (*)(uint64_t*, const void*))fn)(&handle, prop);
    else if (!strcmp(name, "cuMemMap"))
        ((int (*)(uint64_t, size_t, size_t, uint64_t, unsigned long long))fn)(0x7f0000000000ull, 2u << 20, 0, 0x1000, 0);
}

/* The driver calls NCCL makes inside step `s`, in order: the `op=driver` lines just before it
 * (each `repeat` times), then its own `cu`. */
static void step_driver_calls(const struct lab_step* s) {
    int i = (int)(s - lab_steps), first = i;
    while (first > 0 && !strcmp(lab_steps[first - 1].op, "driver")) first--;
    for (int j = first; j < i; j++)
        for (long k = 0; k < lab_steps[j].repeat; k++) driver_call(lab_steps[j].cu, &lab_steps[j]);
    if (s->cu[0]) driver_call(s->cu, NULL);
}

/* The (last) call of a step takes `tms` before it returns (a connect that retries, a timeout). */
static void step_takes(const struct lab_step* s) {
    if (s->tms > 0) usleep((useconds_t)(s->tms * 1000));
}

/* Plays this call: the scripted driver calls, then a hang or the scripted result and text.
 * `step` (optional) gets the step that answered the call's last repetition. */
static ncclResult_t play_step(const char* name, const struct lab_step** step) {
    int last = 0;
    const struct lab_step* s = lab_next(&cursor, name, 0, &last);
    if (step) *step = s && last ? s : NULL;
    if (!s || !last) return 0;
    step_driver_calls(s);
    if (s->hang) for (;;) pause();
    step_takes(s);
    if (s->rc) snprintf(last_error, sizeof last_error, "%s", s->text);
    return s->rc;
}
static ncclResult_t play(const char* name) { return play_step(name, NULL); }

/* ---- The profiler plugin, loaded and driven as NCCL 2.28/2.29 do (docs/profiler.md,
 * nccl-facts §1): NCCL_PROFILER_PLUGIN names the library (a path, or NAME for
 * libnccl-profiler-NAME.so); the newest `ncclProfiler_vN` this NCCL knows is taken (v6 from
 * 2.29, v5 from 2.28; both share the v5 descriptor); init per communicator with its commHash,
 * then per collective a Coll event (started after the launch, stopped once enqueued) and one
 * kernel channel whose GPU stop comes as state 22 (KernelChStop) — the channel never stops
 * when the scripted call hangs, as a kernel stuck on the GPU — and finalize at destroy/abort.
 * Point-to-point calls are P2p events (no sequence number: NCCL numbers only collectives, per
 * communicator and function) started when their group is launched; a pair with a remote peer gets
 * a kernel channel like a collective, a send/recv to self none (NCCL 2.28 enqueue.cc addP2pToPlan:
 * a self pair has no proxy op, and kernel channel events come from the proxy). */
struct prof_descr_v5 {          /* ncclProfilerEventDescr_v5_t, 112 bytes (offsets in nccl-facts §1.6) */
    uint64_t type;
    void* parent;
    int rank;
    union {
        struct {
            uint64_t seq; const char* func; const void* sendbuff; void* recvbuff; size_t count;
            int root; const char* datatype; uint8_t nchannels, nwarps; const char* algo; const char* proto;
            void* parent_group;
        } coll;
        struct { uint8_t channel; uint64_t ptimer; } kernel_ch;
        struct {
            const char* func; void* buff; const char* datatype; size_t count; int peer; uint8_t nchannels;
            void* parent_group;
        } p2p;
    };
};
_Static_assert(sizeof(struct prof_descr_v5) == 112, "ncclProfilerEventDescr_v5_t is 112 bytes");
_Static_assert(__builtin_offsetof(struct prof_descr_v5, coll.parent_group) == 104, "coll.parentGroup @104");
_Static_assert(__builtin_offsetof(struct prof_descr_v5, kernel_ch.ptimer) == 32, "kernelCh.pTimer @32");
_Static_assert(__builtin_offsetof(struct prof_descr_v5, p2p.peer) == 56, "p2p.peer @56");
_Static_assert(__builtin_offsetof(struct prof_descr_v5, p2p.parent_group) == 64, "p2p.parentGroup @64");
typedef void (*prof_log_t)(int, unsigned long, const char*, int, const char*, ...);
struct prof_v5 {
    const char* name;
    int (*init)(void** ctx, uint64_t comm_id, int* mask, const char* comm_name, int nnodes, int nranks, int rank, prof_log_t log);
    int (*start)(void* ctx, void** handle, struct prof_descr_v5* d);
    int (*stop)(void* handle);
    int (*record)(void* handle, int state, void* args);
    int (*finalize)(void* ctx);
};
enum { PROF_COLL = 1 << 1, PROF_P2P = 1 << 2, PROF_KERNEL_CH = 1 << 6, PROF_KERNEL_CH_STOP = 22 };

static void prof_log(int level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
    (void)level; (void)flags; (void)file; (void)line; (void)fmt; /* NCCL_DEBUG is not played */
}

static const struct prof_v5* prof_plugin(void) {
    static int looked;
    static const struct prof_v5* plugin;
    if (looked) return plugin;
    looked = 1;
    const char* env = getenv("NCCL_PROFILER_PLUGIN");
    if (!env || !env[0] || !strcmp(env, "none")) return NULL;
    char lib[512];
    if (strchr(env, '/') || strstr(env, ".so")) snprintf(lib, sizeof lib, "%s", env);
    else snprintf(lib, sizeof lib, "libnccl-profiler-%s.so", env);
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "nccl_script_double: profiler plugin %s: %s\n", lib, dlerror()); return NULL; }
    const struct lab_step* id = lab_identity("nccl");
    long version = id && id->version ? id->version : 22803;
    if (version >= 22900) plugin = dlsym(h, "ncclProfiler_v6");
    if (!plugin) plugin = dlsym(h, "ncclProfiler_v5");
    if (!plugin) fprintf(stderr, "nccl_script_double: %s has no ncclProfiler_v5/v6\n", lib);
    return plugin;
}

/* NCCL's getHash (hash.rs in the shim): commHash = getHash(uniqueId, 128). */
static uint64_t nccl_hash(const unsigned char* bytes, size_t n) {
    uint64_t a0 = 1 ^ n, a1 = 1;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, bytes + i, n - i < 8 ? n - i : 8);
        a0 += a1; a1 ^= a0; a0 ^= a0 >> 31; a0 *= 0x9de62bbc8cef3ce3ull;
        a1 ^= a1 >> 32; a1 *= 0x485cd6311b599e79ull; a0 += w;
    }
    uint64_t h = a0;
    h ^= h >> 31; h *= 0xbac3bd562846de6bull; h += a1; h ^= h >> 32;
    return h * 0x995a187a14e7b445ull;
}

static uint64_t gpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void prof_init(struct script_comm* c, const ncclUniqueId* id) {
    const struct prof_v5* p = prof_plugin();
    if (!p) return;
    c->comm_hash = nccl_hash((const unsigned char*)id->internal, sizeof id->internal);
    c->prof_mask = 0;
    if (p->init(&c->prof_ctx, c->comm_hash, &c->prof_mask, NULL, 1, c->nranks, c->rank, prof_log)) c->prof_ctx = NULL;
}

static const char* prof_datatype(int dt) {
    static const char* names[] = {"ncclInt8", "Unknown", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
        "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
    return dt >= 0 && dt < 12 ? names[dt] : "Unknown";
}

/* One enqueued collective; `hangs`: its kernel never ends; `kernel_us` > 0: its kernel's GPU time
 * (the channel's stop timer is that much after its start: a rank that waits on the GPU for a late
 * peer shows a longer kernel than the late rank). AllGather/Broadcast report bytes as ncclInt8. */
static void prof_coll(struct script_comm* c, int f, const void* s, void* r, size_t n, int dt, int root, int hangs,
                      long kernel_us) {
    static const char* funcs[] = {"AllReduce", "Broadcast", "AllGather", "ReduceScatter"};
    const struct prof_v5* p = prof_plugin();
    if (!p || !c || !c->prof_ctx || !(c->prof_mask & (PROF_COLL | PROF_KERNEL_CH))) return;
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    if (f == 1 || f == 2) { n *= dt >= 0 && dt < 12 ? sizes[dt] : 1; dt = 0; }
    struct prof_descr_v5 d;
    memset(&d, 0, sizeof d);
    d.type = PROF_COLL;
    d.rank = c->rank;
    d.coll.seq = c->seq[f]++;
    d.coll.func = funcs[f];
    d.coll.sendbuff = s; d.coll.recvbuff = r; d.coll.count = n; d.coll.root = root;
    d.coll.datatype = prof_datatype(dt);
    d.coll.nchannels = 1; d.coll.nwarps = 16; d.coll.algo = "RING"; d.coll.proto = "SIMPLE";
    void* coll = NULL;
    p->start(c->prof_ctx, &coll, &d);
    if (coll) p->stop(coll); /* handed to the proxy */
    if (!(c->prof_mask & PROF_KERNEL_CH)) return;
    struct prof_descr_v5 k;
    memset(&k, 0, sizeof k);
    k.type = PROF_KERNEL_CH;
    k.parent = coll;
    k.rank = c->rank;
    k.kernel_ch.channel = 0;
    k.kernel_ch.ptimer = gpu_ns();
    void* ch = NULL;
    p->start(c->prof_ctx, &ch, &k);
    if (hangs) c->kernel_stuck = 1;
    if (!ch || c->kernel_stuck) return;
    uint64_t stop = kernel_us > 0 ? k.kernel_ch.ptimer + (uint64_t)kernel_us * 1000u : gpu_ns();
    p->record(ch, PROF_KERNEL_CH_STOP, &stop);
    p->stop(ch);
}

/* One point-to-point task as NCCL's ncclProfilerStartTaskEvents reports it when its plan is
 * launched: a P2p event (started, stopped once enqueued) and, for a remote peer only, one kernel
 * channel that ends on the GPU. `func` is ncclFuncToString's "Send" / "Recv"; count in elements. */
static void prof_p2p(struct script_comm* c, const char* func, void* buff, size_t n, int dt, int peer) {
    const struct prof_v5* p = prof_plugin();
    if (!p || !c || !c->prof_ctx || !(c->prof_mask & (PROF_P2P | PROF_KERNEL_CH))) return;
    struct prof_descr_v5 d;
    memset(&d, 0, sizeof d);
    d.type = PROF_P2P;
    d.rank = c->rank;
    d.p2p.func = func; d.p2p.buff = buff; d.p2p.datatype = prof_datatype(dt); d.p2p.count = n;
    d.p2p.peer = peer; d.p2p.nchannels = 1;
    void* ev = NULL;
    p->start(c->prof_ctx, &ev, &d);
    if (ev) p->stop(ev);
    if (peer == c->rank || !(c->prof_mask & PROF_KERNEL_CH)) return;
    struct prof_descr_v5 k;
    memset(&k, 0, sizeof k);
    k.type = PROF_KERNEL_CH;
    k.parent = ev;
    k.rank = c->rank;
    k.kernel_ch.ptimer = gpu_ns();
    void* ch = NULL;
    p->start(c->prof_ctx, &ch, &k);
    if (!ch || c->kernel_stuck) return;
    uint64_t stop = gpu_ns();
    p->record(ch, PROF_KERNEL_CH_STOP, &stop);
    p->stop(ch);
}

/* Send/recv calls made inside ncclGroupStart/End wait for the outermost ncclGroupEnd, which
 * launches them (NCCL reports their P2p events then, not at the call). */
struct p2p_task { struct script_comm* comm; const char* func; void* buff; size_t count; int dt, peer; };
static struct p2p_task p2p_queue[1024];
static int p2p_queued, group_depth;

static void p2p_issue(struct script_comm* c, const char* func, void* buff, size_t n, int dt, int peer) {
    if (group_depth == 0) { prof_p2p(c, func, buff, n, dt, peer); return; }
    if (p2p_queued < (int)(sizeof p2p_queue / sizeof p2p_queue[0]))
        p2p_queue[p2p_queued++] = (struct p2p_task){c, func, buff, n, dt, peer};
}

static void p2p_launch(void) {
    for (int i = 0; i < p2p_queued; i++) {
        struct p2p_task* t = &p2p_queue[i];
        prof_p2p(t->comm, t->func, t->buff, t->count, t->dt, t->peer);
    }
    p2p_queued = 0;
}

static void prof_finalize(struct script_comm* c) {
    const struct prof_v5* p = prof_plugin();
    if (p && c && c->prof_ctx) p->finalize(c->prof_ctx);
}

/* A collective: played like any call, and reported to the profiler plugin when it is enqueued
 * (not when it fails: NCCL returns such errors before enqueueing anything). */
static ncclResult_t play_coll(const char* name, struct script_comm* comm, int f, const void* sb, void* rb,
                              size_t n, int dt, int root) {
    int last = 0;
    const struct lab_step* s = lab_next(&cursor, name, 0, &last);
    long kus = s ? s->kus : 0;
    if (!s || !last) { prof_coll(comm, f, sb, rb, n, dt, root, 0, kus); return 0; }
    step_driver_calls(s);
    if (s->hang) { prof_coll(comm, f, sb, rb, n, dt, root, 1, kus); for (;;) pause(); }
    step_takes(s);
    if (s->rc) { snprintf(last_error, sizeof last_error, "%s", s->text); return s->rc; }
    prof_coll(comm, f, sb, rb, n, dt, root, s->khang, kus);
    return 0;
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

/* `id` NULL: a split (its commHash derives from the parent's; no profiler context for now);
 * a split's size is the step's `nranks` where the script gives it (the ranks of its color:
 * consecutive parent ranks, ordered by key), else the parent's. */
static ncclResult_t init(const char* name, ncclComm_t* comm, int nranks, int rank, const ncclUniqueId* id) {
    const struct lab_step* s = NULL;
    ncclResult_t rc = play_step(name, &s);
    if (rc) { *comm = NULL; return rc; }
    struct script_comm* c = calloc(1, sizeof *c);
    if (!id && s && s->nranks > 0) { nranks = s->nranks; rank %= nranks; }
    c->nranks = nranks; c->rank = rank; c->dev = rank;
    if (id) prof_init(c, id);
    *comm = c;
    return 0;
}
API(ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    return init("ncclCommInitRank", comm, nranks, rank, &id);
}
API(ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, void* cfg) {
    (void)cfg; return init("ncclCommInitRankConfig", comm, nranks, rank, &id);
}
API(ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm, void* cfg) {
    (void)color; (void)cfg;
    return init("ncclCommSplit", newcomm, comm ? comm->nranks : 1, key, NULL);
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
API(ncclCommDestroy, ncclComm_t comm) {
    ncclResult_t rc = play("ncclCommDestroy"); prof_finalize(comm); free(comm); return rc;
}
API(ncclCommAbort, ncclComm_t comm) {
    ncclResult_t rc = play("ncclCommAbort"); prof_finalize(comm); free(comm); return rc;
}
/* Buffer registration answers a distinct handle per call (NCCL's is a pointer it allocates). */
static uintptr_t reg_handles;
API(ncclCommRegister, ncclComm_t comm, void* buff, size_t size, void** handle) {
    (void)comm; (void)buff; (void)size;
    ncclResult_t rc = play("ncclCommRegister");
    *handle = rc ? NULL : (void*)(++reg_handles << 4);
    return rc;
}
API(ncclCommDeregister, ncclComm_t comm, void* handle) {
    (void)comm; (void)handle; return play("ncclCommDeregister");
}
API(ncclCommFinalize, ncclComm_t comm) { (void)comm; return play("ncclCommFinalize"); }
API(ncclGroupStart, void) { group_depth++; return play("ncclGroupStart"); }
API(ncclGroupEnd, void) {
    ncclResult_t rc = play("ncclGroupEnd");
    if (group_depth > 0 && --group_depth == 0) {
        if (rc) p2p_queued = 0; /* a failed launch enqueues nothing */
        else p2p_launch();
    }
    return rc;
}

API(ncclAllReduce, const void* s, void* r, size_t n, int dt, int op, ncclComm_t comm, void* stream) {
    (void)stream; (void)op; return play_coll("ncclAllReduce", comm, 0, s, r, n, dt, 0);
}
API(ncclBroadcast, const void* s, void* r, size_t n, int dt, int root, ncclComm_t comm, void* stream) {
    (void)stream; return play_coll("ncclBroadcast", comm, 1, s, r, n, dt, root);
}
API(ncclAllGather, const void* s, void* r, size_t n, int dt, ncclComm_t comm, void* stream) {
    (void)stream; return play_coll("ncclAllGather", comm, 2, s, r, n, dt, 0);
}
API(ncclReduceScatter, const void* s, void* r, size_t n, int dt, int op, ncclComm_t comm, void* stream) {
    (void)stream; (void)op; return play_coll("ncclReduceScatter", comm, 3, s, r, n, dt, 0);
}
API(ncclSend, const void* s, size_t n, int dt, int peer, ncclComm_t comm, void* stream) {
    (void)stream;
    ncclResult_t rc = play("ncclSend");
    if (!rc) p2p_issue(comm, "Send", (void*)s, n, dt, peer);
    return rc;
}
API(ncclRecv, void* r, size_t n, int dt, int peer, ncclComm_t comm, void* stream) {
    (void)stream;
    ncclResult_t rc = play("ncclRecv");
    if (!rc) p2p_issue(comm, "Recv", r, n, dt, peer);
    return rc;
}
