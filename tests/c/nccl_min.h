/* The NCCL declarations the test programs use, written from the documented ABI (nccl.h itself
 * needs cuda_runtime.h, which a machine without the CUDA toolkit does not have). */
#ifndef NCCL_MIN_H
#define NCCL_MIN_H
#include <stddef.h>
#include <limits.h>

typedef int ncclResult_t;
enum { ncclSuccess = 0 };
typedef struct ncclComm* ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

/* ncclConfig_t up to commName (the 2.27 layout; NCCL reads only `size` bytes of it). */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking, cgaClusterSize, minCTAs, maxCTAs;
    const char* netName;
    int splitShare, trafficClass;
    const char* commName;
} ncclConfig_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define TEST_CONFIG_INITIALIZER(ver) { sizeof(ncclConfig_t), 0xcafebeef, (ver), \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NULL, \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NULL }

ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op,
                           ncclComm_t comm, void* stream);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
#endif
