/* TEST DOUBLE named libtorch_cuda.so: an empty library whose only purpose is its file name. A
 * process that maps libtorch_cuda.so but no libnccl has NCCL linked in statically (PyTorch built
 * with USE_STATIC_NCCL=1), and the shim must flag that. */
int torch_cuda_double_marker(void) { return 1; }
