/*
 * Reaches the CUDA driver exactly the way NCCL's static cudart does (dlopen libcuda.so.1, one
 * dlsym of cuGetProcAddress_v2, a probe, cuInit@2000, the self-lookups of cuGetProcAddress at
 * 11030 and 12000, then every further lookup through the re-fetched pointer), then calls the
 * watched functions. Prints every CUresult, symbolStatus and argument-derived out-value, never a
 * raw function address, so its stdout must be byte-identical with and without the shim.
 *
 * usage: cudart_like MODE
 *   import   cuInit, then one cuMemImportFromShareableHandle(POSIX_FD) of an fd
 *   all      every watched function, with distinctive arguments
 *   v1       NCCL <= 2.20: dlsym(h, "cuGetProcAddress") and the 4-argument ABI
 *   direct   the DOCA path: plain dlsym of the watched cu* names
 *   nodriver dlsym lookups only (cu* and others), no call into the driver
 *   threads  4 threads, each looking up and calling cuMemRelease 1000 times (own handle value)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef uint64_t CUmemGenericAllocationHandle;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { unsigned int type, requestedHandleTypes, locType; int locId; void *meta; unsigned char f[8]; } CUmemAllocationProp;
typedef struct { unsigned int locType; int locId; unsigned int flags; } CUmemAccessDesc;
typedef struct { unsigned int numDevices; size_t size; unsigned long long handleTypes; unsigned long long flags; } CUmulticastObjectProp;

typedef CUresult (*gpa_v1_t)(const char *, void **, int, unsigned long long);
typedef CUresult (*gpa_v2_t)(const char *, void **, int, unsigned long long, int *);

static gpa_v2_t gpa2;
static gpa_v1_t gpa1;

static void *look(const char *name, int version, unsigned long long flags) {
    void *p = (void *)0x1;
    int st = -7;
    CUresult rc;
    if (gpa2) rc = gpa2(name, &p, version, flags, &st);
    else rc = gpa1(name, &p, version, flags);
    printf("lookup %s@%d flags=%llu rc=%d status=%d found=%d\n", name ? (*name ? name : "<empty>") : "<null>", version, flags, rc, st, p != NULL);
    return p;
}

static void *open_driver(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); exit(2); }
    return h;
}

/* cudart's start-up sequence. */
static void cudart_init(void *h, int use_v1) {
    if (use_v1) {
        gpa1 = (gpa_v1_t)dlsym(h, "cuGetProcAddress");
        printf("dlsym cuGetProcAddress %s\n", gpa1 ? "ok" : "missing");
        gpa1 = (gpa_v1_t)look("cuGetProcAddress", 11030, 0);
        return;
    }
    gpa2 = (gpa_v2_t)dlsym(h, "cuGetProcAddress_v2");
    printf("dlsym cuGetProcAddress_v2 %s\n", gpa2 ? "ok" : "missing");
    if (!gpa2) exit(2);
    look("", 0, 0);
    look(NULL, 12000, 0);
    look("cuInit", 2000, 0);
    gpa1 = (gpa_v1_t)look("cuGetProcAddress", 11030, 0);
    /* The v1 pointer must answer with the v1 ABI (4 arguments). */
    { void *p = NULL; CUresult rc = gpa1("cuDriverGetVersion", &p, 2020, 0); printf("v1 lookup rc=%d found=%d\n", rc, p != NULL); }
    gpa2 = (gpa_v2_t)look("cuGetProcAddress", 12000, 0);
    look("cuGetExportTable", 3000, 0);
    look("cuStreamSynchronize", 2000, 2);
    look("cuMemCreate", 10010, 0); /* below the first version: not found / version too low */
}

static CUresult init_driver(void) {
    CUresult (*init)(unsigned) = (CUresult (*)(unsigned))look("cuInit", 2000, 0);
    CUresult rc = init(0);
    printf("cuInit rc=%d\n", rc);
    return rc;
}

static int mode_import(void) {
    void *h = open_driver();
    cudart_init(h, 0);
    init_driver();
    CUresult (*imp)(CUmemGenericAllocationHandle *, void *, unsigned) = look("cuMemImportFromShareableHandle", 10020, 0);
    int fd = open("/dev/null", O_RDONLY);
    CUmemGenericAllocationHandle mh = 0;
    fflush(stdout);
    CUresult rc = imp(&mh, (void *)(uintptr_t)fd, 1);
    printf("import fd=%d rc=%d handle=%#llx\n", fd, rc, (unsigned long long)mh);
    return 0;
}

static int mode_all(int use_v1) {
    void *h = open_driver();
    cudart_init(h, use_v1);
    init_driver();
    CUresult rc;
    CUmemGenericAllocationHandle mh = 0, mh2 = 0, mc = 0;
    CUmemAllocationProp prop = {2, 1, 1, 0, NULL, {0}};
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) = look("cuMemCreate", 10020, 0);
    errno = 4242; /* the first recorded call creates the dump (many syscalls): errno must survive */
    rc = create(&mh, 1 << 21, &prop, 0);
    printf("cuMemCreate rc=%d handle=%#llx errno=%d\n", rc, (unsigned long long)mh, errno);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = look("cuMemAddressReserve", 10020, 0);
    CUdeviceptr va = 0;
    rc = reserve(&va, 1 << 21, 1 << 16, 0, 0);
    printf("cuMemAddressReserve rc=%d va=%#llx\n", rc, (unsigned long long)va);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = look("cuMemMap", 10020, 0);
    printf("cuMemMap rc=%d\n", map(va, 1 << 21, 0, mh, 0));
    printf("cuMemMap(bad offset) rc=%d\n", map(va, 1 << 21, 1 << 22, mh, 0));
    CUresult (*setacc)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) = look("cuMemSetAccess", 10020, 0);
    CUmemAccessDesc desc = {1, 0, 3};
    printf("cuMemSetAccess rc=%d\n", setacc(va, 1 << 21, &desc, 1));
    CUresult (*exp)(void *, CUmemGenericAllocationHandle, unsigned, unsigned long long) = look("cuMemExportToShareableHandle", 10020, 0);
    int fd = -1;
    rc = exp(&fd, mh, 1, 0);
    printf("cuMemExportToShareableHandle rc=%d fd_valid=%d\n", rc, fd >= 0);
    CUresult (*imp)(CUmemGenericAllocationHandle *, void *, unsigned) = look("cuMemImportFromShareableHandle", 10020, 0);
    rc = imp(&mh2, (void *)(uintptr_t)fd, 1);
    printf("cuMemImportFromShareableHandle rc=%d handle_minus_fd=%#llx\n", rc, (unsigned long long)(mh2 - (unsigned)fd));
    CUresult (*retain)(CUmemGenericAllocationHandle *, void *) = look("cuMemRetainAllocationHandle", 11000, 0);
    CUmemGenericAllocationHandle rh = 0;
    rc = retain(&rh, (void *)(uintptr_t)0x1234);
    printf("cuMemRetainAllocationHandle rc=%d handle=%#llx\n", rc, (unsigned long long)rh);
    CUresult (*range)(void *, CUdeviceptr, size_t, unsigned, unsigned long long) = look("cuMemGetHandleForAddressRange", 11070, 0);
    int dfd = -1;
    rc = range(&dfd, va, 1 << 21, 1, 0);
    printf("cuMemGetHandleForAddressRange rc=%d fd_valid=%d\n", rc, dfd >= 0);
    CUresult (*unmap)(CUdeviceptr, size_t) = look("cuMemUnmap", 10020, 0);
    printf("cuMemUnmap rc=%d\n", unmap(va, 1 << 21));
    CUresult (*afree)(CUdeviceptr, size_t) = look("cuMemAddressFree", 10020, 0);
    printf("cuMemAddressFree rc=%d\n", afree(va, 1 << 21));
    CUresult (*release)(CUmemGenericAllocationHandle) = look("cuMemRelease", 10020, 0);
    printf("cuMemRelease rc=%d\n", release(mh));
    errno = 4343;
    rc = release(0);
    printf("cuMemRelease(0) rc=%d errno=%d\n", rc, errno);
    /* Per-thread-stream flavour: a different driver function behind the same name. */
    CUresult (*release_ptds)(CUmemGenericAllocationHandle) = look("cuMemRelease", 10020, 2);
    printf("cuMemRelease[ptds] rc=%d\n", release_ptds(mh));
    printf("cuMemRelease again rc=%d\n", release(mh));
    /* A version from a CUDA the shim does not know: must come back unwrapped (not recorded). */
    CUresult (*release_future)(CUmemGenericAllocationHandle) = look("cuMemRelease", 14000, 0);
    printf("cuMemRelease@14000 rc=%d\n", release_future(mh));

    CUmulticastObjectProp mprop = {2, 1 << 21, 1, 0};
    CUresult (*mcc)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *) = look("cuMulticastCreate", 12010, 0);
    rc = mcc(&mc, &mprop);
    printf("cuMulticastCreate rc=%d handle=%#llx\n", rc, (unsigned long long)mc);
    CUresult (*mcadd)(CUmemGenericAllocationHandle, int) = look("cuMulticastAddDevice", 12010, 0);
    printf("cuMulticastAddDevice rc=%d\n", mcadd(mc, 1));
    CUresult (*bindmem)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle, size_t, size_t, unsigned long long) = look("cuMulticastBindMem", 12010, 0);
    printf("cuMulticastBindMem rc=%d\n", bindmem(mc, 0x100, mh, 0x200, 1 << 20, 0));
    CUresult (*bindaddr)(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t, unsigned long long) = look("cuMulticastBindAddr", 12010, 0);
    printf("cuMulticastBindAddr rc=%d\n", bindaddr(mc, 0, va, 1 << 20, 0));
    CUresult (*unbind)(CUmemGenericAllocationHandle, int, size_t, size_t) = look("cuMulticastUnbind", 12010, 0);
    printf("cuMulticastUnbind rc=%d\n", unbind(mc, 1, 0, 1 << 20));

    CUresult (*ipcget)(CUipcMemHandle *, CUdeviceptr) = look("cuIpcGetMemHandle", 4010, 0);
    CUipcMemHandle ih;
    memset(&ih, 0, sizeof ih);
    rc = ipcget(&ih, 0xabc000);
    printf("cuIpcGetMemHandle rc=%d byte63=%d\n", rc, ih.reserved[63]);
    CUresult (*open1)(CUdeviceptr *, CUipcMemHandle, unsigned) = look("cuIpcOpenMemHandle", 4010, 0);
    CUresult (*open2)(CUdeviceptr *, CUipcMemHandle, unsigned) = look("cuIpcOpenMemHandle", 11000, 0);
    CUdeviceptr p1 = 0, p2 = 0;
    rc = open1(&p1, ih, 1);
    printf("cuIpcOpenMemHandle@4010 rc=%d ptr=%#llx\n", rc, (unsigned long long)p1);
    rc = open2(&p2, ih, 1);
    printf("cuIpcOpenMemHandle@11000 rc=%d ptr=%#llx\n", rc, (unsigned long long)p2);
    CUresult (*ipcclose)(CUdeviceptr) = look("cuIpcCloseMemHandle", 4010, 0);
    printf("cuIpcCloseMemHandle rc=%d\n", ipcclose(p2));
    return 0;
}

#define THREADS 4
#define CALLS_PER_THREAD 1000

/* Each thread looks cuMemRelease up itself (concurrent lookups through the wrapped
 * cuGetProcAddress) and calls it with its own handle value. */
static void *thread_main(void *arg) {
    uintptr_t id = (uintptr_t)arg;
    CUresult (*release)(CUmemGenericAllocationHandle) = NULL;
    int st = 0;
    if (gpa2("cuMemRelease", (void **)&release, 10020, 0, &st) != 0 || !release) return (void *)1;
    for (int i = 0; i < CALLS_PER_THREAD; i++)
        if (release(0x1000 + id) != 0) return (void *)2;
    return NULL;
}

static int mode_threads(void) {
    void *h = open_driver();
    cudart_init(h, 0);
    init_driver();
    /* The first recorded event creates the dump; events that race with its creation are
     * skipped (counted), never waited for. Make it exist first, as NCCL's first call does. */
    CUresult (*release)(CUmemGenericAllocationHandle) = look("cuMemRelease", 10020, 0);
    printf("main cuMemRelease rc=%d\n", release(0x999));
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, thread_main, (void *)i);
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad |= r != NULL;
    }
    printf("threads=%d calls=%d ok=%d\n", THREADS, CALLS_PER_THREAD, !bad);
    return bad;
}

__attribute__((noinline)) static int mode_direct(void) {
    if (getenv("CUDART_LIKE_PRINT_ADDR")) printf("mode_direct at=%p\n", (void *)mode_direct);
    void *h = open_driver();
    CUresult (*init)(unsigned) = dlsym(h, "cuInit");
    printf("cuInit rc=%d\n", init(0));
    CUresult (*release)(CUmemGenericAllocationHandle) = dlsym(h, "cuMemRelease");
    printf("cuMemRelease rc=%d\n", release(0x42));
    CUresult (*open2)(CUdeviceptr *, CUipcMemHandle, unsigned) = dlsym(h, "cuIpcOpenMemHandle_v2");
    CUipcMemHandle ih;
    memset(&ih, 7, sizeof ih);
    CUdeviceptr p = 0;
    printf("cuIpcOpenMemHandle_v2 rc=%d ptr=%#llx\n", open2(&p, ih, 1), (unsigned long long)p);
    printf("dlsym cuNotAThing %s\n", dlsym(h, "cuNotAThing") ? "found" : "missing");
    printf("dlsym(RTLD_DEFAULT, cuMemRelease) %s\n", dlsym(RTLD_DEFAULT, "cuMemRelease") ? "found" : "missing");
    return 0;
}

static int mode_nodriver(void) {
    printf("dlsym(RTLD_DEFAULT, cuMemRelease) %s\n", dlsym(RTLD_DEFAULT, "cuMemRelease") ? "found" : "missing");
    printf("dlsym(RTLD_DEFAULT, cuGetProcAddress_v2) %s\n", dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2") ? "found" : "missing");
    printf("dlsym(RTLD_DEFAULT, puts) %s\n", dlsym(RTLD_DEFAULT, "puts") == (void *)puts ? "libc" : "other");
    printf("dlsym(RTLD_NEXT, cuInit) %s\n", dlsym(RTLD_NEXT, "cuInit") ? "found" : "missing");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "import";
    if (!strcmp(mode, "import")) return mode_import();
    if (!strcmp(mode, "all")) return mode_all(0);
    if (!strcmp(mode, "v1")) return mode_all(1);
    if (!strcmp(mode, "direct")) return mode_direct();
    if (!strcmp(mode, "threads")) return mode_threads();
    if (!strcmp(mode, "nodriver")) return mode_nodriver();
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
