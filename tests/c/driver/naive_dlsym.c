/*
 * NEGATIVE CONTROL for the RTLD_NEXT regression test, not part of the product: the naive way
 * to interpose dlsym (call the real one from our own frame). It answers RTLD_NEXT relative to
 * this library, which is exactly the bug the shim's trampoline avoids; the test runs it to
 * prove that rtld_next_wrap notices the bug.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

void *dlsym(void *handle, const char *name) {
    static void *(*real)(void *, const char *);
    if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return real(handle, name);
}
