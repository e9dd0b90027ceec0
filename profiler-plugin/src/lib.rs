//! libnccl-profiler-ncclshim.so (placeholder).
