/* dlopen + dlsym(handle, "ncclX"): how C programs (and ctypes underneath) reach NCCL without
 * linking it, for the shim's handle-lookup tests. Every line reads the same with and without
 * the shim preloaded, except where noted:
 *   handle_lookup LIB
 *     "<scope> <name> found=F same=S": dlsym through the process's dlsym (the shim's, when
 *     preloaded) against glibc's own dlsym (dlvsym), called from here with the same arguments;
 *     same=1 means the lookup was left untouched. Under the shim, only "handle ncclGetVersion"
 *     (a name the shim exports, in a libnccl, through a handle) is expected to differ (same=0),
 *     and RTLD_NEXT / RTLD_DEFAULT lookups find the shim's export (found=1) where without it
 *     they find nothing (libnccl is loaded RTLD_LOCAL).
 *     "call ...": the looked-up ncclGetVersion called (the version its library reports).
 *     "dladdr ..." / "dladdr1 ...": what dladdr says about the looked-up pointer.
 *     "default dladdr ...": dladdr of dlsym(RTLD_DEFAULT, "ncclGetVersion") (nccl4py's way of
 *     finding libnccl; only printed when that lookup finds something, i.e. under the shim).
 * Built with -DLINKED (and linked against LIB), ncclGetVersion is first called through the link,
 * then the handle lookup must give back the linked function itself ("handle_is_linked=1").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

typedef int (*get_version_t)(int*);
typedef void* (*dlsym_t)(void*, const char*);

#ifdef LINKED
int ncclGetVersion(int* version);
#endif

static dlsym_t glibc_dlsym(void) {
    /* dlvsym asks for a version node, which the shim's unversioned dlsym does not carry. */
    void* p = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    if (!p) p = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    return (dlsym_t)p;
}

static void* compare(const char* scope, void* handle, const char* name) {
    void* a = dlsym(handle, name);
    void* b = glibc_dlsym()(handle, name);
    printf("%s %s found=%d same=%d\n", scope, name, a != NULL, a == b);
    return a;
}

static const char* base(const char* path) {
    const char* s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : (path ? path : "(null)");
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
#ifdef LINKED
    int lv = 0;
    int lrc = ncclGetVersion(&lv);
    printf("linked ncclGetVersion rc=%d version=%d\n", lrc, lv);
#endif
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen failed: %s\n", dlerror());
        return 3;
    }
    compare("handle", h, "ncclGetErrorString");
    compare("handle", h, "pncclGetVersion");
    compare("handle", h, "ncclNoSuchFunction");
    compare("next", RTLD_NEXT, "ncclGetVersion");
    void* dflt = compare("default", RTLD_DEFAULT, "ncclGetVersion");
    void* real = glibc_dlsym()(h, "ncclGetVersion");
    void* f = compare("handle", h, "ncclGetVersion");
    if (!f) return 4;
    int v = 0;
    int rc = ((get_version_t)f)(&v);
    printf("call ncclGetVersion rc=%d version=%d\n", rc, v);
#ifdef LINKED
    printf("handle_is_linked=%d\n", f == (void*)ncclGetVersion);
#endif
    Dl_info info;
    memset(&info, 0, sizeof info);
    int ok = dladdr(f, &info);
    printf("dladdr ok=%d fname=%s sname=%s saddr_is_real=%d\n", ok != 0, base(info.dli_fname),
           info.dli_sname ? info.dli_sname : "(null)", info.dli_saddr == real);
    struct link_map* map = NULL;
    memset(&info, 0, sizeof info);
    ok = dladdr1(f, &info, (void**)&map, RTLD_DL_LINKMAP);
    printf("dladdr1 ok=%d fname=%s map=%s\n", ok != 0, base(info.dli_fname),
           map ? base(map->l_name) : "(null)");
    if (dflt) {
        memset(&info, 0, sizeof info);
        ok = dladdr(dflt, &info);
        printf("default dladdr ok=%d fname=%s saddr_is_real=%d\n", ok != 0, info.dli_fname,
               info.dli_saddr == real);
    }
    /* dladdr of an address that is no function entry of ours: glibc's answer, untouched. */
    memset(&info, 0, sizeof info);
    ok = dladdr((void*)&compare, &info);
    printf("self dladdr ok=%d sname=%s\n", ok != 0, info.dli_sname ? info.dli_sname : "(null)");
    return 0;
}
