/* NCCL's newer calls (ncclCommSuspend/Resume/GetUniqueId, 2.29) and its custom reduction
 * operators, reached the way bindings reach them (dlopen of libnccl by path, argv[1], then
 * dlsym on its handle), each called on a NULL communicator: a real NCCL rejects that itself, so
 * no GPU is needed. Prints "<name> rc=<n>" per call, or "<name> absent" when the library lacks
 * it; without the shim and with it the output must be the same. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef int (*comm_int_t)(void*, int);
typedef int (*comm_t)(void*);
typedef int (*comm_ptr_t)(void*, void*);
typedef int (*premul_t)(int*, void*, int, int, void*);
typedef int (*destroy_t)(int, void*);

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen failed\n");
        return 1;
    }
    char id[128];
    float scalar = 0.5f;
    int op = -1;
    comm_int_t suspend = (comm_int_t)dlsym(h, "ncclCommSuspend");
    comm_t resume = (comm_t)dlsym(h, "ncclCommResume");
    comm_ptr_t get_id = (comm_ptr_t)dlsym(h, "ncclCommGetUniqueId");
    premul_t premul = (premul_t)dlsym(h, "ncclRedOpCreatePreMulSum");
    destroy_t destroy = (destroy_t)dlsym(h, "ncclRedOpDestroy");
    if (suspend) printf("ncclCommSuspend rc=%d\n", suspend(NULL, 1)); else printf("ncclCommSuspend absent\n");
    if (resume) printf("ncclCommResume rc=%d\n", resume(NULL)); else printf("ncclCommResume absent\n");
    if (get_id) printf("ncclCommGetUniqueId rc=%d\n", get_id(NULL, id)); else printf("ncclCommGetUniqueId absent\n");
    /* ncclFloat32 = 7, ncclScalarHostImmediate = 1 */
    if (premul) printf("ncclRedOpCreatePreMulSum rc=%d\n", premul(&op, &scalar, 7, 1, NULL));
    else printf("ncclRedOpCreatePreMulSum absent\n");
    if (destroy) printf("ncclRedOpDestroy rc=%d\n", destroy(5, NULL)); else printf("ncclRedOpDestroy absent\n");
    /* The per-collective configuration calls (2.31), each with a config laid out as
     * NCCL_COLLCONFIG_INITIALIZER leaves it (nccl.h 2.32.3, ncclCollConfig_v23200: size 72,
     * magic at 8, version at 12, minCTAs at 24, forceAlgSelection at 48, userProfilerTag at 56),
     * minCTAs 2 and the tag 0x7a60 + i: NCCL rejects the NULL communicator first. */
    static const char* names[] = {"ncclAllReduceConfig", "ncclBroadcastConfig", "ncclReduceConfig",
                                  "ncclAllGatherConfig", "ncclReduceScatterConfig", "ncclAlltoAllConfig",
                                  "ncclGatherConfig", "ncclScatterConfig"};
    static long long config[32];
    static char coll_config[72] __attribute__((aligned(8)));
    float buf[4];
    for (int i = 0; i < 8; i++) {
        void* f = dlsym(h, names[i]);
        if (!f) {
            printf("%s absent\n", names[i]);
            continue;
        }
        int rc;
        void* config = coll_config;
        memset(coll_config, 0, sizeof coll_config);
        *(unsigned long long*)coll_config = 72;
        *(unsigned*)(coll_config + 8) = 0xcafebeef;
        *(unsigned*)(coll_config + 12) = 23203;
        for (int at = 24; at <= 52; at += 4) *(int*)(coll_config + at) = INT_MIN;
        *(void**)(coll_config + 40) = NULL;
        *(int*)(coll_config + 24) = 2;
        *(int*)(coll_config + 48) = 1;
        *(unsigned long long*)(coll_config + 56) = 0x7a60ULL + (unsigned)i;
        if (i == 0 || i == 4) /* (send, recv, count, dt, op, comm, stream, config) */
            rc = ((int (*)(const void*, void*, size_t, int, int, void*, void*, const void*))f)(
                buf, buf, 1, 7, 0, NULL, NULL, config);
        else if (i == 2) /* reduce: (send, recv, count, dt, op, root, comm, stream, config) */
            rc = ((int (*)(const void*, void*, size_t, int, int, int, void*, void*, const void*))f)(
                buf, buf, 1, 7, 0, 0, NULL, NULL, config);
        else if (i == 3 || i == 5) /* (send, recv, count, dt, comm, stream, config) */
            rc = ((int (*)(const void*, void*, size_t, int, void*, void*, const void*))f)(
                buf, buf, 1, 7, NULL, NULL, config);
        else /* broadcast, gather, scatter: (send, recv, count, dt, root, comm, stream, config) */
            rc = ((int (*)(const void*, void*, size_t, int, int, void*, void*, const void*))f)(
                buf, buf, 1, 7, 0, NULL, NULL, config);
        printf("%s rc=%d\n", names[i], rc);
    }
    /* 2.29-2.32: memory statistics, a window's user pointer, one-sided signals (NULL
     * communicator), and a simulated group end after a group start. */
    unsigned long long value = 0;
    void* user_ptr = NULL;
    int desc[4] = {1, 0, 0, 0};
    void* f;
    if ((f = dlsym(h, "ncclCommMemStats")))
        printf("ncclCommMemStats rc=%d\n", ((int (*)(void*, int, unsigned long long*))f)(NULL, 0, &value));
    else printf("ncclCommMemStats absent\n");
    if ((f = dlsym(h, "ncclWinGetUserPtr")))
        printf("ncclWinGetUserPtr rc=%d\n", ((int (*)(void*, void*, void**))f)(NULL, NULL, &user_ptr));
    else printf("ncclWinGetUserPtr absent\n");
    if ((f = dlsym(h, "ncclPutSignal")))
        printf("ncclPutSignal rc=%d\n",
               ((int (*)(const void*, size_t, int, int, void*, size_t, int, int, unsigned, void*, void*))f)(
                   buf, 1, 7, 1, NULL, 0, 0, 0, 0, NULL, NULL));
    else printf("ncclPutSignal absent\n");
    if ((f = dlsym(h, "ncclSignal")))
        printf("ncclSignal rc=%d\n", ((int (*)(int, int, int, unsigned, void*, void*))f)(1, 0, 0, 0, NULL, NULL));
    else printf("ncclSignal absent\n");
    if ((f = dlsym(h, "ncclWaitSignal")))
        printf("ncclWaitSignal rc=%d\n", ((int (*)(int, void*, void*, void*))f)(1, desc, NULL, NULL));
    else printf("ncclWaitSignal absent\n");
    char dev_comm[512];
    if ((f = dlsym(h, "ncclDevCommCreate")))
        printf("ncclDevCommCreate rc=%d\n", ((int (*)(void*, const void*, void*))f)(NULL, config, dev_comm));
    else printf("ncclDevCommCreate absent\n");
    if ((f = dlsym(h, "ncclDevCommDestroy")))
        printf("ncclDevCommDestroy rc=%d\n", ((int (*)(void*, const void*))f)(NULL, dev_comm));
    else printf("ncclDevCommDestroy absent\n");
    void* start = dlsym(h, "ncclGroupStart");
    if ((f = dlsym(h, "ncclGroupSimulateEnd")) && start) {
        int s = ((int (*)(void))start)();
        printf("ncclGroupSimulateEnd rc=%d (after ncclGroupStart rc=%d)\n", ((int (*)(void*))f)(NULL), s);
    } else printf("ncclGroupSimulateEnd absent\n");
    return 0;
}
