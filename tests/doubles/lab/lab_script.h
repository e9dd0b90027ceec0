/* The scenario lab's per-rank script, shared by the TEST DOUBLES of libnccl, libcuda and
 * libcudart (tests/doubles/lab/) and the rank driver (tests/c/lab_rank.c). Header-only: each
 * library keeps its own copy of the parsed script and its own cursor.
 *
 * The file (path in $LAB_SCRIPT) is written by the lab runner (tests/lab/script.rs) from a
 * scenario's TOML: one line per step, TAB-separated `key=value` fields, the first being
 * `op=NAME`. NAME is an NCCL function (`ncclAllReduce`), a driver-side action (`sleep`, `hang`,
 * `signal`, `exit`, `load`) or an identity line (`nccl`, `cuda`, `cudart`). Values never hold a
 * TAB or a newline (the runner refuses such scenarios). `op=driver` lines (`cu`, `cu_rc`,
 * `repeat`, `loc`/`locid`: a cuMemCreate's location) are driver calls NCCL makes inside the NCCL
 * step that follows them, in order: the
 * scripted libnccl makes them, the CUDA double answers them, the rank driver skips them. */
#ifndef LAB_SCRIPT_H
#define LAB_SCRIPT_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>

#define LAB_TEXT 1024
#define LAB_MAX_STEPS 4096

struct lab_step {
    char op[64];
    long repeat;      /* how many calls this step stands for (>= 1) */
    int rc;           /* result of the last of them */
    char text[LAB_TEXT]; /* ncclGetLastError() after a failure */
    int hang;         /* the last call never returns */
    int khang;        /* a collective whose kernel never ends (the call itself returns) */
    long kus;         /* a collective's kernel time on the GPU, us (0: as long as the double takes) */
    long ms;          /* sleep / delay between polls */
    long tms;         /* the (last) call takes this long before it returns, ms */
    int sig;          /* signal to raise */
    int code;         /* exit status */
    int nranks, rank;
    unsigned long uid; /* seed of the uniqueId bytes */
    char root[96];     /* "a.b.c.d:port" or "[v6%ifname]:port": the bootstrap root the uniqueId names (default 10.0.0.1) */
    int peer;
    int color;        /* ncclCommSplit's color */
    int dtype;        /* a collective's ncclDataType_t (-1: the rank driver's default) */
    long count;
    int async;        /* ncclCommGetAsyncError's answer at the last poll */
    char cu[64];      /* a driver function NCCL calls inside this step */
    int cu_rc;        /* what the driver returns for it */
    int loc_type;     /* cuMemCreate: CUmemLocationType of the allocation (0: an all-zero prop) */
    int loc_id;       /* ... and its id (device ordinal, NUMA node) */
    long version;     /* identity lines: NCCL / CUDA versions */
    int device, pci_bus;
    char name[128];   /* GPU name (cuda line) or library (load) */
    char uuid[64];    /* cuda line: what cuDeviceGetUuid_v2 answers (`GPU-...` / `MIG-...`) */
};

static struct lab_step lab_steps[LAB_MAX_STEPS];
static int lab_nsteps = -1;

static __attribute__((unused)) void lab_field(struct lab_step* s, const char* k, const char* v) {
    if (!strcmp(k, "op")) snprintf(s->op, sizeof s->op, "%s", v);
    else if (!strcmp(k, "repeat")) s->repeat = atol(v);
    else if (!strcmp(k, "rc")) s->rc = atoi(v);
    else if (!strcmp(k, "text")) snprintf(s->text, sizeof s->text, "%s", v);
    else if (!strcmp(k, "hang")) s->hang = atoi(v);
    else if (!strcmp(k, "khang")) s->khang = atoi(v);
    else if (!strcmp(k, "kus")) s->kus = atol(v);
    else if (!strcmp(k, "ms")) s->ms = atol(v);
    else if (!strcmp(k, "tms")) s->tms = atol(v);
    else if (!strcmp(k, "color")) s->color = atoi(v);
    else if (!strcmp(k, "dtype")) s->dtype = atoi(v);
    else if (!strcmp(k, "uuid")) snprintf(s->uuid, sizeof s->uuid, "%s", v);
    else if (!strcmp(k, "sig")) s->sig = atoi(v);
    else if (!strcmp(k, "code")) s->code = atoi(v);
    else if (!strcmp(k, "nranks")) s->nranks = atoi(v);
    else if (!strcmp(k, "rank")) s->rank = atoi(v);
    else if (!strcmp(k, "uid")) s->uid = strtoul(v, NULL, 0);
    else if (!strcmp(k, "root")) snprintf(s->root, sizeof s->root, "%s", v);
    else if (!strcmp(k, "peer")) s->peer = atoi(v);
    else if (!strcmp(k, "count")) s->count = atol(v);
    else if (!strcmp(k, "async")) s->async = atoi(v);
    else if (!strcmp(k, "cu")) snprintf(s->cu, sizeof s->cu, "%s", v);
    else if (!strcmp(k, "cu_rc")) s->cu_rc = atoi(v);
    else if (!strcmp(k, "loc")) s->loc_type = atoi(v);
    else if (!strcmp(k, "locid")) s->loc_id = atoi(v);
    else if (!strcmp(k, "version")) s->version = atol(v);
    else if (!strcmp(k, "device")) s->device = atoi(v);
    else if (!strcmp(k, "pci_bus")) s->pci_bus = (int)strtol(v, NULL, 0);
    else if (!strcmp(k, "name")) snprintf(s->name, sizeof s->name, "%s", v);
}

/* Parses $LAB_SCRIPT once; a missing file is an empty script (every call succeeds). */
static __attribute__((unused)) void lab_load(void) {
    if (lab_nsteps >= 0) return;
    lab_nsteps = 0;
    const char* path = getenv("LAB_SCRIPT");
    FILE* f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    static char line[LAB_TEXT * 2];
    while (lab_nsteps < LAB_MAX_STEPS && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0]) continue;
        struct lab_step* s = &lab_steps[lab_nsteps++];
        memset(s, 0, sizeof *s);
        s->repeat = 1;
        s->device = -1;
        s->pci_bus = -1;
        s->dtype = -1;
        for (char* save = NULL, *tok = strtok_r(line, "\t", &save); tok; tok = strtok_r(NULL, "\t", &save)) {
            char* eq = strchr(tok, '=');
            if (!eq) continue;
            *eq = 0;
            lab_field(s, tok, eq + 1);
        }
        if (s->repeat < 1) s->repeat = 1;
    }
    fclose(f);
}

/* The identity line `op=NAME`, or NULL. */
static __attribute__((unused)) const struct lab_step* lab_identity(const char* name) {
    lab_load();
    for (int i = 0; i < lab_nsteps; i++)
        if (!strcmp(lab_steps[i].op, name)) return &lab_steps[i];
    return NULL;
}

/* A library's position in the script: the next call of a given name consumes one repetition of
 * the first step at or after the cursor that names it. `matches` picks the key compared. */
struct lab_cursor { int cur; long done; };

/* The step answering this call of `name` (NULL: the script does not mention it, so it
 * succeeds), and whether this is the step's last repetition (where rc/hang/text apply). */
static __attribute__((unused)) const struct lab_step* lab_next(struct lab_cursor* c, const char* name, int by_cu, int* last) {
    lab_load();
    *last = 0;
    for (int j = c->cur; j < lab_nsteps; j++) {
        const char* key = by_cu ? lab_steps[j].cu : lab_steps[j].op;
        if (strcmp(key, name)) continue;
        if (j != c->cur) { c->cur = j; c->done = 0; }
        const struct lab_step* s = &lab_steps[j];
        if (++c->done >= s->repeat) { *last = 1; c->cur = j + 1; c->done = 0; }
        return s;
    }
    return NULL;
}

/* The uniqueId bytes NCCL's root would hand out, from a seed every rank of the communicator
 * shares (rank 0 gets them from ncclGetUniqueId, the others build them, as if broadcast):
 * NCCL's ncclBootstrapHandle, a magic then the root's sockaddr_in (`a.b.c.d:port`) or
 * sockaddr_in6 (`[addr%ifname]:port`; the scope is the interface's index where this runs). */
static __attribute__((unused)) void lab_unique_id(unsigned long seed, const char* root, char out[128]) {
    memset(out, 0, 128);
    uint64_t magic = 0x9e3779b97f4a7c15ull * (seed + 1);
    memcpy(out, &magic, 8);
    unsigned port = 0xa410 + (seed & 0x3f); /* a port per seed */
    if (root && root[0] == '[') {
        char addr[96] = {0};
        const char* close = strchr(root, ']');
        size_t n = close ? (size_t)(close - root - 1) : 0;
        if (n >= sizeof addr) n = sizeof addr - 1;
        memcpy(addr, root + 1, n);
        if (close && close[1] == ':') port = (unsigned)atoi(close + 2);
        char* pct = strchr(addr, '%');
        unsigned scope = 0;
        if (pct) { *pct = 0; scope = if_nametoindex(pct + 1); if (!scope) scope = (unsigned)atoi(pct + 1); }
        struct sockaddr_in6 sa;
        memset(&sa, 0, sizeof sa);
        sa.sin6_family = AF_INET6;
        sa.sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, addr, &sa.sin6_addr);
        sa.sin6_scope_id = scope;
        memcpy(out + 8, &sa, sizeof sa);
        return;
    }
    out[8] = 2; /* AF_INET, as NCCL's ncclBootstrapHandle: magic, then the root's sockaddr */
    unsigned a = 10, b = 0, c = 0, d = 1;
    if (root && root[0]) sscanf(root, "%u.%u.%u.%u:%u", &a, &b, &c, &d, &port);
    out[10] = (char)(port >> 8); out[11] = (char)(port & 0xff);
    out[12] = (char)a; out[13] = (char)b; out[14] = (char)c; out[15] = (char)d;
}
#endif
