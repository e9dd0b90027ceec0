/* A program that maps libtorch_cuda.so (the TEST DOUBLE) and no libnccl, and calls ncclGetVersion
 * through a weak reference: without the shim it has no NCCL at all; with the shim preloaded the
 * call reaches the shim's export, which finds no NCCL to forward to. */
#include <stdio.h>
int torch_cuda_double_marker(void);
int ncclGetVersion(int* v) __attribute__((weak));

int main(void) {
    int v = 0;
    printf("torch_cuda=%d\n", torch_cuda_double_marker());
    if (ncclGetVersion) printf("ncclGetVersion rc=%d\n", ncclGetVersion(&v));
    else printf("ncclGetVersion absent\n");
    return 0;
}
