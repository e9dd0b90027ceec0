/* The first NCCL calls of a process made on a thread with a small stack (Python's
 * threading.stack_size, C worker pools sized to their own code), for the shim's stack tests:
 *   small_stack LIB STACK_BYTES
 * dlopens LIB (the real libnccl, RTLD_LOCAL: the calls reach the shim through its handle
 * lookups) and starts one thread with a STACK_BYTES stack that makes the process's first NCCL
 * calls, ncclGetVersion then ncclGetUniqueId (which fails without a network; its rc is printed
 * either way), and prints what each step returned. Every line reads the same with and without
 * the shim preloaded, and so does the exit status: a call that needs more stack than the thread
 * has kills the process with SIGSEGV, and that must happen at the same sizes with and without
 * the shim; pthread_create must refuse the same sizes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "nccl_min.h"

typedef ncclResult_t (*get_version_t)(int*);
typedef ncclResult_t (*get_unique_id_t)(ncclUniqueId*);

static get_version_t get_version;
static get_unique_id_t get_unique_id;

static void* first_calls(void* arg) {
    (void)arg;
    int v = 0;
    ncclResult_t rc = get_version(&v);
    printf("ncclGetVersion rc=%d version=%d\n", rc, v);
    fflush(stdout);
    ncclUniqueId id;
    rc = get_unique_id(&id);
    printf("ncclGetUniqueId rc=%d\n", rc);
    fflush(stdout);
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 3) return 2;
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen failed: %s\n", dlerror());
        return 3;
    }
    get_version = (get_version_t)dlsym(h, "ncclGetVersion");
    get_unique_id = (get_unique_id_t)dlsym(h, "ncclGetUniqueId");
    if (!get_version || !get_unique_id) return 4;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    int rc = pthread_attr_setstacksize(&attr, (size_t)atol(argv[2]));
    printf("pthread_attr_setstacksize rc=%d\n", rc);
    fflush(stdout);
    pthread_t t;
    rc = pthread_create(&t, &attr, first_calls, NULL);
    /* Printed after the join, so the lines come in one order. */
    if (rc == 0) pthread_join(t, NULL);
    printf("pthread_create rc=%d\n", rc);
    return 0;
}
