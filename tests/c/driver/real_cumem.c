/*
 * GPU check (needs an NVIDIA GPU and the real libcuda.so.1): reaches the driver the way NCCL's
 * static cudart does (dlopen, dlsym cuGetProcAddress_v2, self-lookup at 12000), then does one
 * cuMem export/import round trip inside this process on device 0, the sequence NCCL's P2P
 * transport uses, and one import of a bad fd that must fail. Prints CUresults and
 * address-free facts only, so stdout is identical with and without the shim.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef uint64_t CUdeviceptr;
typedef uint64_t CUmemGenericAllocationHandle;
typedef struct {
    unsigned int type, requestedHandleTypes, locType;
    int locId;
    void *win32HandleMetaData;
    unsigned char compressionType, gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
} CUmemAllocationProp;
typedef struct { unsigned int locType; int locId; unsigned int flags; } CUmemAccessDesc;
typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);

static gpa_t gpa;

static void *get(const char *name, int version) {
    void *p = NULL;
    int st = -1;
    CUresult rc = gpa(name, &p, version, 0, &st);
    if (rc != 0 || !p) {
        printf("lookup %s@%d failed rc=%d status=%d\n", name, version, rc, st);
        exit(3);
    }
    return p;
}

#define CHECK(what, call) do { CUresult r_ = (call); printf("%s rc=%d\n", what, r_); if (r_) return 1; } while (0)

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("no libcuda.so.1: %s\n", dlerror()); return 2; }
    gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) { printf("no cuGetProcAddress_v2\n"); return 2; }
    gpa = (gpa_t)get("cuGetProcAddress", 12000);
    CUresult (*init)(unsigned) = get("cuInit", 2000);
    CUresult (*devget)(CUdevice *, int) = get("cuDeviceGet", 2000);
    CUresult (*retain_ctx)(CUcontext *, CUdevice) = get("cuDevicePrimaryCtxRetain", 7000);
    CUresult (*set_ctx)(CUcontext) = get("cuCtxSetCurrent", 4000);
    CUresult (*gran)(size_t *, const CUmemAllocationProp *, int) = get("cuMemGetAllocationGranularity", 10020);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) = get("cuMemCreate", 10020);
    CUresult (*exp)(void *, CUmemGenericAllocationHandle, unsigned, unsigned long long) = get("cuMemExportToShareableHandle", 10020);
    CUresult (*imp)(CUmemGenericAllocationHandle *, void *, unsigned) = get("cuMemImportFromShareableHandle", 10020);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = get("cuMemAddressReserve", 10020);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = get("cuMemMap", 10020);
    CUresult (*setacc)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) = get("cuMemSetAccess", 10020);
    CUresult (*unmap)(CUdeviceptr, size_t) = get("cuMemUnmap", 10020);
    CUresult (*afree)(CUdeviceptr, size_t) = get("cuMemAddressFree", 10020);
    CUresult (*release)(CUmemGenericAllocationHandle) = get("cuMemRelease", 10020);

    CUdevice dev = 0;
    CUcontext ctx = NULL;
    CHECK("cuInit", init(0));
    CHECK("cuDeviceGet", devget(&dev, 0));
    CHECK("cuDevicePrimaryCtxRetain", retain_ctx(&ctx, dev));
    CHECK("cuCtxSetCurrent", set_ctx(ctx));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;                 /* PINNED */
    prop.requestedHandleTypes = 1; /* POSIX_FILE_DESCRIPTOR */
    prop.locType = 1;              /* DEVICE */
    prop.locId = dev;
    size_t g = 0;
    CHECK("cuMemGetAllocationGranularity", gran(&g, &prop, 0));
    CUmemGenericAllocationHandle mh = 0, ih = 0;
    CHECK("cuMemCreate", create(&mh, g, &prop, 0));
    int fd = -1;
    CHECK("cuMemExportToShareableHandle", exp(&fd, mh, 1, 0));
    printf("exported fd_valid=%d\n", fd >= 0);
    CHECK("cuMemImportFromShareableHandle", imp(&ih, (void *)(uintptr_t)fd, 1));
    CUdeviceptr va = 0;
    CHECK("cuMemAddressReserve", reserve(&va, g, 0, 0, 0));
    CHECK("cuMemMap", map(va, g, 0, ih, 0));
    CUmemAccessDesc acc = {1, dev, 3};
    CHECK("cuMemSetAccess", setacc(va, g, &acc, 1));
    CHECK("cuMemUnmap", unmap(va, g));
    CHECK("cuMemAddressFree", afree(va, g));
    CHECK("cuMemRelease(imported)", release(ih));
    CHECK("cuMemRelease(created)", release(mh));
    close(fd);
    /* An fd that is not a cuMem export: the driver must refuse it, and the shim records that. */
    int bad = open("/dev/null", O_RDONLY);
    CUmemGenericAllocationHandle bh = 0;
    CUresult r = imp(&bh, (void *)(uintptr_t)bad, 1);
    printf("bad import fd=%d failed=%d\n", bad, r != 0);
    return 0;
}
