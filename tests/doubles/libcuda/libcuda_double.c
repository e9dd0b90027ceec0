/*
 * TEST DOUBLE of the CUDA driver (libcuda.so.1) -- not the real driver.
 *
 * Built by the shim's driver tests with `cc -shared -fPIC` into a temporary directory as
 * `libcuda.so.1`, so that cudart (static inside the PyPI libnccl.so.2) and our test programs
 * reach "the driver" on a machine without a GPU. It answers cuGetProcAddress / _v2 the way the
 * real driver does (CUresult, symbolStatus, per-symbol minimum versions, ABI by version), and
 * implements the cuMem / multicast / legacy IPC functions with deterministic, argument-derived
 * results so tests can tell whether a wrapper forwarded every argument unchanged.
 *
 * Knobs (environment):
 *   LIBCUDA_DOUBLE_INIT_RC=N        cuInit returns N (default 0)
 *   LIBCUDA_DOUBLE_IMPORT_RC=N      cuMemImportFromShareableHandle returns N (e.g. 101)
 *   LIBCUDA_DOUBLE_IMPORT_SLEEP=S   cuMemImportFromShareableHandle prints
 *                                   "libcuda-double: import sleeping" on stderr, then sleeps S s
 *   LIBCUDA_DOUBLE_DEVICE=N         the current device ordinal (default 0)
 *   LIBCUDA_DOUBLE_PCI_BUS=N        bus number of every device (default 0x65 + ordinal)
 *   LIBCUDA_DOUBLE_UNKNOWN=stub|notfound  unknown "cu*" names: a generic stub that returns
 *                                   CUDA_ERROR_NOT_SUPPORTED (default), or "not found"
 *   LIBCUDA_DOUBLE_LOG=path         append one line per cuGetProcAddress call:
 *                                   "gpa <v1|v2> <name> <version> <flags> <rc> <status>"
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef uint64_t CUmemGenericAllocationHandle;
typedef struct { char reserved[64]; } CUipcMemHandle;
typedef struct { char bytes[16]; } CUuuid;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_SUPPORTED 801

/* CUdriverProcAddressQueryResult */
#define STATUS_SUCCESS 0
#define STATUS_SYMBOL_NOT_FOUND 1
#define STATUS_VERSION_NOT_SUFFICIENT 2

static int initialized;

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return (v && *v) ? strtol(v, NULL, 0) : dflt;
}

#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = (CUresult)env_long("LIBCUDA_DOUBLE_INIT_RC", 0);
    if (rc == CUDA_SUCCESS) initialized = 1;
    return rc;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 12080;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    *n = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx || dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    *ctx = (void *)0x1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(void *ctx) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    (void)ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!g || !prop || option < 0 || option > 1) return CUDA_ERROR_INVALID_VALUE;
    *g = 2u << 20;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    *d = (CUdevice)env_long("LIBCUDA_DOUBLE_DEVICE", 0);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!buf || len < 13 || dev < 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(buf, (size_t)len, "0000:%02lx:00.0", env_long("LIBCUDA_DOUBLE_PCI_BUS", 0x65 + dev) & 0xff);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!name || len < 1 || dev < 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "libcuda test double");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!u || dev < 0) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 16; i++) u->bytes[i] = (char)(0xa0 + i + dev * 16);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice dev) { return cuDeviceGetUuid(u, dev); }

static const char *error_name(CUresult e) {
    switch (e) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return NULL;
    }
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    *s = error_name(e);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    switch (e) {
    case 101: *s = "invalid device ordinal"; return CUDA_SUCCESS;
    case 100: *s = "no CUDA-capable device is detected"; return CUDA_SUCCESS;
    default: *s = error_name(e); return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
}

EXPORT CUresult cuGetExportTable(const void **table, const void *id) {
    (void)id;
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- cuMem: results derived from the arguments so a test sees what arrived ---- */

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const void *prop, unsigned long long flags) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !prop) return CUDA_ERROR_INVALID_VALUE;
    const unsigned int *p = prop; /* type, requestedHandleTypes, location.type, location.id */
    *h = 0x10000000ull + size + p[1] * 0x100 + p[3] + flags;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return h == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* What the lookup returns for cuMemRelease with flags=2 (per-thread default stream): a distinct
 * function, as a real driver may hand out, so a test sees whether each wrapper calls its own
 * target. */
static CUresult cuMemRelease_ptds(CUmemGenericAllocationHandle h) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return h == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, unsigned int type, unsigned long long flags) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (type == 1) { *(int *)out = dup(2); return CUDA_SUCCESS; }
    if (type == 8) { memset(out, 0, 64); memcpy(out, &h, sizeof h); return CUDA_SUCCESS; }
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, unsigned int type) {
    long sleep_s = env_long("LIBCUDA_DOUBLE_IMPORT_SLEEP", 0);
    if (sleep_s > 0) {
        static const char msg[] = "libcuda-double: import sleeping\n";
        (void)!write(2, msg, sizeof msg - 1);
        sleep((unsigned)sleep_s);
    }
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult forced = (CUresult)env_long("LIBCUDA_DOUBLE_IMPORT_RC", 0);
    if (forced) return forced;
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    *h = 0x20000000ull + (type == 1 ? (uint64_t)(uintptr_t)os_handle : 0x8000);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return (ptr && size && h && !flags && offset < size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return (ptr && size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return (ptr && size && desc && count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || flags) return CUDA_ERROR_INVALID_VALUE;
    *ptr = (addr ? addr : 0x7f0000000000ull) + size + align;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return (ptr && size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !addr) return CUDA_ERROR_INVALID_VALUE;
    *h = 0x30000000ull + ((uintptr_t)addr & 0xffff);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr ptr, size_t size, unsigned int type, unsigned long long flags) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || !ptr || !size || flags || type != 1) return CUDA_ERROR_INVALID_VALUE;
    *(int *)handle = dup(2);
    return CUDA_SUCCESS;
}

typedef struct { unsigned int numDevices; size_t size; unsigned long long handleTypes; unsigned long long flags; } CUmulticastObjectProp;

EXPORT CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mc, const CUmulticastObjectProp *prop) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!mc || !prop) return CUDA_ERROR_INVALID_VALUE;
    *mc = 0x40000000ull + prop->numDevices * 0x1000 + prop->size + prop->handleTypes;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mc, CUdevice dev) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return (mc && dev >= 0) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mc, size_t mcOff, CUmemGenericAllocationHandle mem, size_t memOff, size_t size, unsigned long long flags) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    /* Six arguments: a wrapper that loses the last one is caught here. */
    return (mc && mem && size && mcOff == 0x100 && memOff == 0x200 && flags == 0) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mc, size_t mcOff, CUdeviceptr ptr, size_t size, unsigned long long flags) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return (mc && ptr && size && !flags && mcOff < size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mc, CUdevice dev, size_t mcOff, size_t size) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return (mc && dev >= 0 && size && mcOff < size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- legacy IPC ---- */

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr ptr) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !ptr) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 64; i++) h->reserved[i] = (char)(i + 1);
    memcpy(h->reserved, &ptr, sizeof ptr);
    return CUDA_SUCCESS;
}

static CUresult ipc_open(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags, uint64_t abi) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    uint64_t w0, last;
    memcpy(&w0, h.reserved, 8);
    memcpy(&last, h.reserved + 56, 8);
    /* Every part of the by-value handle and the flags shows in the result. */
    *p = w0 + (last & 0xff) * 0x10000 + flags * 0x100 + abi;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) { return ipc_open(p, h, flags, 1); }
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) { return ipc_open(p, h, flags, 2); }

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return ptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Every unknown "cu*" name resolves here (like a driver function the double does not model). */
static CUresult generic_stub(void) { return CUDA_ERROR_NOT_SUPPORTED; }

/* ---- cuGetProcAddress ---- */

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status);

struct entry { const char *name; int min_version; int max_version; void *fn; };
/* Several entries for one name: the ABI the requested version selects (first match wins). */
static const struct entry table[] = {
    {"cuInit", 2000, 0, (void *)cuInit},
    {"cuDriverGetVersion", 2020, 0, (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", 2000, 0, (void *)cuDeviceGetCount},
    {"cuDeviceGet", 2000, 0, (void *)cuDeviceGet},
    {"cuCtxGetDevice", 2000, 0, (void *)cuCtxGetDevice},
    {"cuDevicePrimaryCtxRetain", 7000, 0, (void *)cuDevicePrimaryCtxRetain},
    {"cuCtxSetCurrent", 4000, 0, (void *)cuCtxSetCurrent},
    {"cuMemGetAllocationGranularity", 10020, 0, (void *)cuMemGetAllocationGranularity},
    {"cuDeviceGetPCIBusId", 4010, 0, (void *)cuDeviceGetPCIBusId},
    {"cuDeviceGetName", 2000, 0, (void *)cuDeviceGetName},
    {"cuDeviceGetUuid", 11040, 0, (void *)cuDeviceGetUuid_v2},
    {"cuDeviceGetUuid", 9020, 11040, (void *)cuDeviceGetUuid},
    {"cuGetErrorName", 6000, 0, (void *)cuGetErrorName},
    {"cuGetErrorString", 6000, 0, (void *)cuGetErrorString},
    {"cuGetExportTable", 3000, 0, (void *)cuGetExportTable},
    {"cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2},
    {"cuGetProcAddress", 11030, 12000, (void *)cuGetProcAddress},
    {"cuMemCreate", 10020, 0, (void *)cuMemCreate},
    {"cuMemRelease", 10020, 0, (void *)cuMemRelease},
    {"cuMemExportToShareableHandle", 10020, 0, (void *)cuMemExportToShareableHandle},
    {"cuMemImportFromShareableHandle", 10020, 0, (void *)cuMemImportFromShareableHandle},
    {"cuMemMap", 10020, 0, (void *)cuMemMap},
    {"cuMemUnmap", 10020, 0, (void *)cuMemUnmap},
    {"cuMemSetAccess", 10020, 0, (void *)cuMemSetAccess},
    {"cuMemAddressReserve", 10020, 0, (void *)cuMemAddressReserve},
    {"cuMemAddressFree", 10020, 0, (void *)cuMemAddressFree},
    {"cuMemRetainAllocationHandle", 11000, 0, (void *)cuMemRetainAllocationHandle},
    {"cuMemGetHandleForAddressRange", 11070, 0, (void *)cuMemGetHandleForAddressRange},
    {"cuMulticastCreate", 12010, 0, (void *)cuMulticastCreate},
    {"cuMulticastAddDevice", 12010, 0, (void *)cuMulticastAddDevice},
    {"cuMulticastBindMem", 12010, 0, (void *)cuMulticastBindMem},
    {"cuMulticastBindAddr", 12010, 0, (void *)cuMulticastBindAddr},
    {"cuMulticastUnbind", 12010, 0, (void *)cuMulticastUnbind},
    {"cuIpcGetMemHandle", 4010, 0, (void *)cuIpcGetMemHandle},
    {"cuIpcOpenMemHandle", 11000, 0, (void *)cuIpcOpenMemHandle_v2},
    {"cuIpcOpenMemHandle", 4010, 11000, (void *)cuIpcOpenMemHandle},
    {"cuIpcCloseMemHandle", 4010, 0, (void *)cuIpcCloseMemHandle},
};

static CUresult lookup(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    int st = STATUS_SYMBOL_NOT_FOUND;
    CUresult rc = CUDA_ERROR_NOT_FOUND;
    if (!symbol || !pfn || flags > 2) {
        rc = CUDA_ERROR_INVALID_VALUE;
        if (pfn) *pfn = NULL;
        if (status) *status = st;
        return rc;
    }
    *pfn = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) != 0) continue;
        known = 1;
        if (version >= table[i].min_version && (table[i].max_version == 0 || version < table[i].max_version)) {
            *pfn = table[i].fn;
            st = STATUS_SUCCESS;
            rc = CUDA_SUCCESS;
            break;
        }
        st = STATUS_VERSION_NOT_SUFFICIENT;
    }
    if (rc == CUDA_SUCCESS && flags == 2 && *pfn == (void *)cuMemRelease) *pfn = (void *)cuMemRelease_ptds;
    if (!known && strncmp(symbol, "cu", 2) == 0 && strlen(symbol) > 2) {
        const char *mode = getenv("LIBCUDA_DOUBLE_UNKNOWN");
        if (!(mode && strcmp(mode, "notfound") == 0)) {
            *pfn = (void *)generic_stub;
            st = STATUS_SUCCESS;
            rc = CUDA_SUCCESS;
        }
    }
    if (status) *status = st;
    return rc;
}

static void log_lookup(const char *abi, const char *symbol, int version, unsigned long long flags, CUresult rc, int st) {
    const char *path = getenv("LIBCUDA_DOUBLE_LOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "gpa %s %s %d %llu %d %d\n", abi, symbol ? (*symbol ? symbol : "<empty>") : "<null>", version, flags, rc, st);
    fclose(f);
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    int st = -1;
    CUresult rc = lookup(symbol, pfn, version, flags, &st);
    if (status) *status = st;
    log_lookup("v2", symbol, version, flags, rc, st);
    return rc;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    int st = -1;
    CUresult rc = lookup(symbol, pfn, version, flags, &st);
    log_lookup("v1", symbol, version, flags, rc, st);
    return rc;
}
