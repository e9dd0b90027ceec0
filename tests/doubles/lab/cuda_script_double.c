/* TEST DOUBLE of the CUDA driver (libcuda.so.1) and, built with -DLAB_CUDART, of the CUDA
 * runtime (libcudart.so.12) for the scenario lab — not CUDA. The identity (driver / runtime
 * version, current device, PCI bus, GPU name) comes from the rank's script ($LAB_SCRIPT lines
 * `op=cuda` / `op=cudart`); each watched driver function answers the CUresult of the next
 * script step naming it (`cu=NAME cu_rc=N`), else success. cuGetProcAddress hands out this
 * library's own functions, as the real driver does. */
#define _GNU_SOURCE
#include "lab_script.h"

#define EXPORT __attribute__((visibility("default")))

#ifdef LAB_CUDART
EXPORT int cudaRuntimeGetVersion(int* v) {
    const struct lab_step* id = lab_identity("cudart");
    *v = id && id->version ? (int)id->version : 12040;
    return 0;
}
EXPORT int cudaDriverGetVersion(int* v) {
    const struct lab_step* id = lab_identity("cuda");
    *v = id && id->version ? (int)id->version : 12080;
    return 0;
}
#else
static struct lab_cursor cursor;
static int initialized;

static int answer(const char* name) {
    int last = 0;
    const struct lab_step* s = lab_next(&cursor, name, 1, &last);
    return s && last ? s->cu_rc : 0;
}
static const struct lab_step* ident(void) { return lab_identity("cuda"); }

EXPORT int cuInit(unsigned flags) { (void)flags; initialized = 1; return 0; }
EXPORT int cuDriverGetVersion(int* v) {
    const struct lab_step* id = ident();
    *v = id && id->version ? (int)id->version : 12080;
    return 0;
}
EXPORT int cuCtxGetDevice(int* d) {
    if (!initialized) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
    const struct lab_step* id = ident();
    *d = id && id->device >= 0 ? id->device : 0;
    return 0;
}
EXPORT int cuDeviceGetPCIBusId(char* buf, int len, int dev) {
    const struct lab_step* id = ident();
    int bus = id && id->pci_bus >= 0 ? id->pci_bus : 0x65 + dev;
    snprintf(buf, (size_t)len, "0000:%02x:00.0", bus & 0xff);
    return 0;
}
/* cuDeviceGetUuid (9.2) answers the physical GPU's UUID; cuDeviceGetUuid_v2 (11.4, what
 * cuGetProcAddress hands out from cudaVersion 11040 on) the MIG instance's where the device is
 * one, as the real driver does. The script's `uuid` (`GPU-...` / `MIG-...`, 32 hex digits) is
 * that v2 answer; without it both derive one UUID from the PCI bus. */
EXPORT int cuDeviceGetUuid(unsigned char* u, int dev) {
    const struct lab_step* id = ident();
    int bus = id && id->pci_bus >= 0 ? id->pci_bus : 0x65 + dev;
    for (int i = 0; i < 16; i++) u[i] = (unsigned char)(0x10 * (i & 3) + bus + i);
    return 0;
}
EXPORT int cuDeviceGetUuid_v2(unsigned char* u, int dev) {
    const struct lab_step* id = ident();
    if (!id || !id->uuid[0]) return cuDeviceGetUuid(u, dev);
    const char* p = strchr(id->uuid, '-');
    p = p ? p + 1 : id->uuid;
    for (int i = 0; i < 16 && *p;) {
        if (*p == '-') { p++; continue; }
        unsigned v = 0;
        if (sscanf(p, "%2x", &v) != 1) break;
        u[i++] = (unsigned char)v;
        p += 2;
    }
    return 0;
}
EXPORT int cuDeviceGetName(char* name, int len, int dev) {
    (void)dev;
    const struct lab_step* id = ident();
    snprintf(name, (size_t)len, "%s", id && id->name[0] ? id->name : "NVIDIA H100 80GB HBM3");
    return 0;
}
EXPORT int cuGetErrorString(int e, const char** s) {
    switch (e) {
    case 1: *s = "invalid argument"; break;
    case 2: *s = "out of memory"; break;
    case 101: *s = "invalid device ordinal"; break;
    case 201: *s = "invalid device context"; break;
    case 217: *s = "peer access is not supported between these two devices"; break;
    case 401: *s = "the operation cannot be performed in the present state"; break;
    case 700: *s = "an illegal memory access was encountered"; break;
    case 802: *s = "system not yet initialized"; break;
    default: *s = "unknown error";
    }
    return 0;
}
EXPORT int cuMemImportFromShareableHandle(void* h, void* os, int type) { (void)h; (void)os; (void)type; return answer("cuMemImportFromShareableHandle"); }
EXPORT int cuMemCreate(void* h, size_t n, const void* p, unsigned long long f) { (void)h; (void)n; (void)p; (void)f; return answer("cuMemCreate"); }
EXPORT int cuMemExportToShareableHandle(void* o, uint64_t h, int t, unsigned long long f) { (void)o; (void)h; (void)t; (void)f; return answer("cuMemExportToShareableHandle"); }
EXPORT int cuMulticastBindMem(uint64_t a, size_t b, uint64_t c, size_t d, size_t e, unsigned long long f) { (void)a; (void)b; (void)c; (void)d; (void)e; (void)f; return answer("cuMulticastBindMem"); }
EXPORT int cuMulticastCreate(uint64_t* h, const void* prop) { (void)h; (void)prop; return answer("cuMulticastCreate"); }
EXPORT int cuMemMap(uint64_t a, size_t b, size_t c, uint64_t d, unsigned long long e) { (void)a; (void)b; (void)c; (void)d; (void)e; return answer("cuMemMap"); }
/* cuIpcOpenMemHandle(CUdeviceptr*, CUipcMemHandle (64 bytes, by value), unsigned flags): the
 * `_v2` symbol is what cuGetProcAddress hands out from CUDA 11.0 on, as the real driver does. */
typedef struct { char reserved[64]; } lab_ipc_handle;
EXPORT int cuIpcOpenMemHandle_v2(uint64_t* dptr, lab_ipc_handle h, unsigned flags) {
    (void)h; (void)flags;
    int rc = answer("cuIpcOpenMemHandle");
    if (!rc && dptr) *dptr = 0x7f2000000000ull;
    return rc;
}
EXPORT int cuIpcOpenMemHandle(uint64_t* dptr, lab_ipc_handle h, unsigned flags) { return cuIpcOpenMemHandle_v2(dptr, h, flags); }

static const struct { const char* name; void* fn; } TABLE[] = {
    {"cuInit", (void*)cuInit}, {"cuDriverGetVersion", (void*)cuDriverGetVersion},
    {"cuCtxGetDevice", (void*)cuCtxGetDevice}, {"cuDeviceGetPCIBusId", (void*)cuDeviceGetPCIBusId},
    {"cuDeviceGetUuid", (void*)cuDeviceGetUuid}, {"cuDeviceGetName", (void*)cuDeviceGetName},
    {"cuGetErrorString", (void*)cuGetErrorString},
    {"cuMemImportFromShareableHandle", (void*)cuMemImportFromShareableHandle},
    {"cuMemCreate", (void*)cuMemCreate}, {"cuMemExportToShareableHandle", (void*)cuMemExportToShareableHandle},
    {"cuMulticastBindMem", (void*)cuMulticastBindMem}, {"cuMemMap", (void*)cuMemMap},
    {"cuMulticastCreate", (void*)cuMulticastCreate},
    {"cuIpcOpenMemHandle", (void*)cuIpcOpenMemHandle_v2},
};
EXPORT int cuGetProcAddress_v2(const char* sym, void** pfn, int ver, uint64_t flags, int* status) {
    (void)flags;
    if (!strcmp(sym, "cuDeviceGetUuid") && ver >= 11040) {
        *pfn = (void*)cuDeviceGetUuid_v2;
        if (status) *status = 0;
        return 0;
    }
    for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++)
        if (!strcmp(TABLE[i].name, sym)) { *pfn = TABLE[i].fn; if (status) *status = 0; return 0; }
    *pfn = NULL;
    if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return 500;              /* CUDA_ERROR_NOT_FOUND */
}
EXPORT int cuGetProcAddress(const char* sym, void** pfn, int ver, uint64_t flags) {
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
#endif
