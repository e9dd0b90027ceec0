/*
 * One rank of a job whose NCCL is torchcomms' NCCLX: loads the extension (argv[1], the NCCLX
 * TEST DOUBLE tests/doubles/ncclx/ncclx_double.c) RTLD_LOCAL as Python imports an extension,
 * and calls it only through its renamed torchcomms_nccl* entry points: init, two all-reduces,
 * destroy. No nccl* name is ever called or looked up, so a preloaded shim sees no NCCL call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stddef.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *x = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!x) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    int (*version)(int *) = (int (*)(int *))dlsym(x, "torchcomms_ncclGetVersion");
    int (*init)(void **, int, const char *, int) =
        (int (*)(void **, int, const char *, int))dlsym(x, "torchcomms_ncclCommInitRank");
    int (*all_reduce)(const void *, void *, size_t, int, int, void *, void *) =
        (int (*)(const void *, void *, size_t, int, int, void *, void *))dlsym(x, "torchcomms_ncclAllReduce");
    int (*destroy)(void *) = (int (*)(void *))dlsym(x, "torchcomms_ncclCommDestroy");
    if (!version || !init || !all_reduce || !destroy) return 2;
    int v = 0;
    version(&v);
    printf("ncclx version %d\n", v);
    char id[128] = {0};
    void *comm = NULL;
    init(&comm, 1, id, 0);
    float buf[256] = {0};
    all_reduce(buf, buf, 256, 7, 0, comm, NULL);
    all_reduce(buf, buf, 256, 7, 0, comm, NULL);
    destroy(comm);
    printf("done\n");
    return 0;
}
