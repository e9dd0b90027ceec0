/* "Is NCCL loaded?" asked the way programs ask before loading it (issue 35): dlsym(RTLD_DEFAULT)
 * and dlsym(dlopen(NULL)) of ncclGetVersion, then libnccl loaded by path (argv[1]) with
 * RTLD_GLOBAL (argv[2] "global") or RTLD_LOCAL ("local"), called through its handle, and
 * RTLD_DEFAULT asked again and called when found, then asked for two APIs of later NCCLs
 * (ncclCommShrink 2.27, ncclCommWindowRegister 2.28). Prints found/absent, never dlerror's text
 * (which names the object that searched). Without the shim and with it the output must be
 * the same (after a local load the shim's export stays visible: README). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*getver_t)(int*);

static void probe(const char* what, void* handle) {
    dlerror();
    void* p = dlsym(handle, "ncclGetVersion");
    const char* e = dlerror();
    printf("%s: %s, dlerror %s\n", what, p ? "found" : "absent", e ? "set" : "clear");
}

int main(int argc, char** argv) {
    if (argc < 3) return 2;
    probe("RTLD_DEFAULT before loading", RTLD_DEFAULT);
    probe("dlopen(NULL) before loading", dlopen(NULL, RTLD_NOW));
    int mode = RTLD_NOW | (strcmp(argv[2], "global") ? RTLD_LOCAL : RTLD_GLOBAL);
    void* h = dlopen(argv[1], mode);
    if (!h) {
        printf("dlopen failed\n");
        return 1;
    }
    getver_t f = (getver_t)dlsym(h, "ncclGetVersion");
    int v = 0;
    int rc = f ? f(&v) : -1;
    printf("by handle: rc=%d version=%d\n", rc, v);
    if (!strcmp(argv[2], "global")) {
        getver_t g = (getver_t)dlsym(RTLD_DEFAULT, "ncclGetVersion");
        v = 0;
        rc = g ? g(&v) : -1;
        printf("RTLD_DEFAULT after loading: %s rc=%d version=%d\n", g ? "found" : "absent", rc, v);
        /* APIs of later NCCLs (2.27, 2.28): present only when the loaded NCCL has them. */
        printf("  (ncclCommShrink) %s\n", dlsym(RTLD_DEFAULT, "ncclCommShrink") ? "found" : "absent");
        printf("  (ncclCommWindowRegister) %s\n",
               dlsym(RTLD_DEFAULT, "ncclCommWindowRegister") ? "found" : "absent");
    }
    return 0;
}
