/*
 * TEST DOUBLE of torchcomms' NCCLX extension (`torchcomms_ncclx/_comms_ncclx*.so`) -- not NCCLX.
 *
 * torchcomms links NCCLX statically into its extension and renames every nccl* / pnccl* symbol
 * torchcomms_nccl* / torchcomms_pnccl* (rename_symbols.sh), so no NCCL call reaches an
 * LD_PRELOAD wrapper, while NCCL inside still loads the profiler plugin (NCCL_PROFILER_PLUGIN)
 * and reaches the CUDA driver through cuGetProcAddress. This double does exactly those visible
 * things, and nothing of NCCL's work:
 *   - exports torchcomms_ncclGetVersion / torchcomms_pncclGetVersion (2.27.3, NCCLX's base);
 *   - torchcomms_ncclCommInitRank reaches the driver the way NCCL's static cudart does (dlopen
 *     libcuda.so.1, cuGetProcAddress_v2, cuInit) and imports a shareable handle (NCCL's P2P
 *     transport does), whose CUresult the libcuda double's LIBCUDA_DOUBLE_IMPORT_RC chooses; then
 *     loads the profiler plugin as NCCL does (dlopen RTLD_NOW|RTLD_LOCAL, ncclProfiler_v5) and
 *     calls its init with the v5 argument order;
 *   - torchcomms_ncclAllReduce emits the CollApi and Coll events of one all-reduce (start,
 *     stop), with NCCL's strings;
 *   - torchcomms_ncclCommDestroy finalizes the plugin's context.
 * Layouts: NCCL's profiler_v5.h as in shared/reference/nccl-facts.md §1.3-1.6.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERSION 22703

int torchcomms_ncclGetVersion(int *v) { *v = VERSION; return 0; }
int torchcomms_pncclGetVersion(int *v) { *v = VERSION; return 0; }

typedef struct {
    uint64_t type;
    void *parentObj;
    int rank;
    union {
        struct { const char *func; size_t count; const char *datatype; int root; void *stream; bool graphCaptured; } collApi;
        struct {
            uint64_t seqNumber; const char *func; const void *sendBuff; void *recvBuff; size_t count; int root;
            const char *datatype; uint8_t nChannels; uint8_t nWarps; const char *algo; const char *proto; void *parentGroup;
        } coll;
        char bytes[88];
    };
} descr_v5;
_Static_assert(sizeof(descr_v5) == 112, "ncclProfilerEventDescr_v5_t is 112 bytes");

typedef void (*logfn_t)(int, unsigned long, const char *, int, const char *, ...);
typedef struct {
    const char *name;
    int (*init)(void **ctx, uint64_t commId, int *mask, const char *commName, int nNodes, int nranks, int rank, logfn_t log);
    int (*startEvent)(void *ctx, void **handle, descr_v5 *d);
    int (*stopEvent)(void *handle);
    int (*recordEventState)(void *handle, int state, void *args);
    int (*finalize)(void *ctx);
} profiler_v5;

enum { EV_COLL = 1 << 1, EV_COLL_API = 1 << 9 };

static void quiet_log(int l, unsigned long f, const char *file, int line, const char *fmt, ...) {
    (void)l; (void)f; (void)file; (void)line; (void)fmt;
}

static profiler_v5 *prof;
static void *prof_ctx;
static int mask;
static int my_rank;
static uint64_t seq;

typedef int (*gpa_v2_t)(const char *, void **, int, unsigned long long, int *);

/* The driver, as NCCL's static cudart reaches it; returns the import's CUresult (-1: no driver). */
static int touch_driver(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) return -1;
    gpa_v2_t gpa = (gpa_v2_t)dlsym(cuda, "cuGetProcAddress_v2");
    if (!gpa) return -1;
    int status = 0;
    int (*cu_init)(unsigned) = 0;
    if (gpa("cuInit", (void **)&cu_init, 2000, 0, &status) || !cu_init) return -1;
    cu_init(0);
    int (*import)(uint64_t *, void *, int) = 0;
    if (gpa("cuMemImportFromShareableHandle", (void **)&import, 12000, 0, &status) || !import) return -1;
    uint64_t handle = 0;
    return import(&handle, (void *)(intptr_t)97, 1 /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */);
}

int torchcomms_ncclCommInitRank(void **comm, int nranks, const char *id, int rank) {
    (void)id;
    my_rank = rank;
    *comm = &prof_ctx;
    printf("driver import rc=%d\n", touch_driver());
    const char *name = getenv("NCCL_PROFILER_PLUGIN");
    void *lib = name ? dlopen(name, RTLD_NOW | RTLD_LOCAL) : NULL;
    prof = lib ? (profiler_v5 *)dlsym(lib, "ncclProfiler_v5") : NULL;
    if (!prof) { printf("no profiler plugin\n"); return 0; }
    int rc = prof->init(&prof_ctx, 0x5eed0000c0ffee00ull, &mask, "ncclx-double", 1, nranks, rank, quiet_log);
    printf("profiler %s init rc=%d\n", prof->name, rc);
    if (rc) prof = NULL;
    return 0;
}

int torchcomms_ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, void *comm, void *stream) {
    (void)type; (void)op; (void)comm;
    if (!prof || !prof_ctx || !(mask & (EV_COLL | EV_COLL_API))) return 0;
    descr_v5 api = {0};
    api.type = EV_COLL_API;
    api.rank = my_rank;
    api.collApi.func = "AllReduce";
    api.collApi.count = count;
    api.collApi.datatype = "ncclFloat32";
    api.collApi.stream = stream;
    void *api_h = NULL;
    prof->startEvent(prof_ctx, &api_h, &api);
    descr_v5 c = {0};
    c.type = EV_COLL;
    c.parentObj = api_h;
    c.rank = my_rank;
    c.coll.seqNumber = seq++;
    c.coll.func = "AllReduce";
    c.coll.sendBuff = send;
    c.coll.recvBuff = recv;
    c.coll.count = count;
    c.coll.datatype = "ncclFloat32";
    c.coll.nChannels = 2;
    c.coll.nWarps = 16;
    c.coll.algo = "RING";
    c.coll.proto = "SIMPLE";
    void *h = NULL;
    if (mask & EV_COLL) prof->startEvent(prof_ctx, &h, &c);
    if (h) prof->stopEvent(h);
    if (api_h) prof->stopEvent(api_h);
    return 0;
}

int torchcomms_ncclCommDestroy(void *comm) {
    (void)comm;
    if (prof && prof_ctx) prof->finalize(prof_ctx);
    prof_ctx = NULL;
    return 0;
}
