//! CUDA driver interposition (dlsym trampoline, cuGetProcAddress wrappers). Placeholder.
