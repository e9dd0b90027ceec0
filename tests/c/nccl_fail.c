/* Drives real libnccl through its failure paths on a machine without a GPU, for the shim's
 * integration tests. Each step prints "<call> rc=<n>" so the test can compare what the program
 * saw with what the dump recorded.
 *   nccl_fail version        ncclGetVersion
 *   nccl_fail uniqueid       ncclGetUniqueId (fails under NCCL_SOCKET_IFNAME=nonexistent0); returns 0
 *                            whatever it returned (a program that catches the error and goes on)
 *   nccl_fail uniqueidcheck  as uniqueid, checked the way a real program checks each NCCL call (the
 *                            NCCLCHECK macro of nccl-tests and NCCL's examples): a failure prints
 *                            NCCL's error string and returns 1
 *   nccl_fail init           ncclGetUniqueId, then ncclCommInitRank(nranks=1, rank=0) (no GPU: fails)
 *   nccl_fail initconfig     as init, with ncclCommInitRankConfig and a config (blocking=1, netName="Socket",
 *                            commName="ncclshim-test")
 * Built as a program (argv[1] is the mode) or, with -DNCCL_FAIL_LIB, as a shared library whose
 * nccl_fail_run(mode) a Python ctypes test calls after loading it RTLD_LOCAL.
 *   nccl_fail errno          errno set to 77 before the first ncclGetVersion (which creates the dump
 *                            under the shim) and printed after it
 *   nccl_fail nullcomm       calls on a NULL communicator (NCCL rejects them itself, no GPU needed):
 *                            ncclGroupStart, ncclAllReduce, ncclGroupEnd, ncclCommGetAsyncError,
 *                            ncclCommDestroy; each line also shows ncclGetLastError()
 *   nccl_fail lateenv        as init, with NCCL_LATE_SETTING=1 set (setenv) after the first call
 *   nccl_fail fork           ncclGetVersion in the parent, then in a forked child
 *   nccl_fail retry N        ncclGetVersion, then ncclGetUniqueId N times (each fails under a bad
 *                            NCCL_SOCKET_IFNAME: a rank retrying its rendezvous); prints how many
 *                            failed, returns 1 if any did
 *   nccl_fail hold           ncclGetVersion, prints "ready", then stays alive until its stdin
 *                            ends (a live rank the reader must not call dead)
 *   nccl_fail truncate       ncclGetVersion (creates the dump), then truncates every file in
 *                            $NCCLSHIM_DIR to 0 bytes (a cleanup script under a live job), then
 *                            more calls: the process must go on and exit 0 as without the shim;
 *                            then a forked child calls ncclGetVersion (a recorder switched off
 *                            for good stays off in the child, which inherits the process image)
 *   nccl_fail chdir:DIR      chdir(DIR) after the shim loaded, then as version (a daemon that changes
 *                            directory before its first NCCL call)
 *   nccl_fail flood          2,000 ncclGetVersion, ncclGetUniqueId (fails under a bad NCCL_SOCKET_IFNAME),
 *                            2,000 ncclGetVersion: routine calls on both sides of a failure
 *   nccl_fail floodstr       as flood, each ncclGetVersion followed by ncclGetErrorString
 * Exit modes (the program only, not the library): how the process ends.
 *   nccl_fail exit0 | exit1  ncclGetVersion, then exit(0) / exit(1)
 *   nccl_fail uexit3         ncclGetVersion, then _exit(3)
 *   nccl_fail Uexit4         ncclGetVersion, then _Exit(4)
 *   nccl_fail forkuexit3     ncclGetVersion, fork; the child calls ncclGetVersion then _exit(3); the
 *                            parent prints "child status=<n>" and returns 0
 *   nccl_fail vforkexec2     ncclGetVersion, vfork; the child execs a missing program and _exit(127)s;
 *                            the parent prints "child status=<n>" and calls exit(2)
 *   nccl_fail noncclexit5 | nonccluexit6   no NCCL call; exit(5) / _exit(6)
 */
#include "nccl_min.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int nccl_fail_run(const char* what) {
    int v = 0;
    if (!strncmp(what, "chdir:", 6)) {
        if (chdir(what + 6) != 0) return 4;
        what = "version";
    }
    errno = 77;
    ncclResult_t rc = ncclGetVersion(&v);
    if (!strcmp(what, "errno")) printf("errno=%d\n", errno);
    printf("ncclGetVersion rc=%d version=%d\n", (int)rc, v);
    if (!strcmp(what, "version") || !strcmp(what, "errno")) return 0;
    int flood = !strcmp(what, "flood") || !strcmp(what, "floodstr");
    if (flood) {
        for (int i = 0; i < 2000; i++) {
            if (ncclGetVersion(&v) != ncclSuccess) return 3;
            if (what[5] == 's' && ncclGetErrorString(ncclSuccess) == NULL) return 3;
        }
    }
    if (!strncmp(what, "retry ", 6)) {
        int n = atoi(what + 6), failed = 0;
        for (int i = 0; i < n; i++) {
            ncclUniqueId rid;
            if (ncclGetUniqueId(&rid) != ncclSuccess) failed++;
        }
        printf("ncclGetUniqueId failed %d of %d\n", failed, n);
        fflush(stdout);
        return failed ? 1 : 0;
    }
    if (!strcmp(what, "hold")) {
        printf("ready\n");
        fflush(stdout);
        while (getchar() != EOF) {
        }
        return 0;
    }
    if (!strcmp(what, "fork")) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int cv = 0;
            ncclResult_t crc = ncclGetVersion(&cv);
            printf("child ncclGetVersion rc=%d version=%d\n", (int)crc, cv);
            fflush(stdout);
            _exit(crc == ncclSuccess ? 0 : 1);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
    }
    if (!strcmp(what, "truncate")) {
        const char* dir = getenv("NCCLSHIM_DIR");
        DIR* d = dir ? opendir(dir) : NULL;
        int cut = 0;
        struct dirent* e;
        while (d && (e = readdir(d))) {
            char path[4096];
            if (e->d_name[0] == '.') continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (truncate(path, 0) == 0) cut++;
        }
        if (d) closedir(d);
        printf("truncated %d file(s)\n", cut);
        fflush(stdout);
        for (int i = 0; i < 100; i++) rc = ncclGetVersion(&v);
        ncclUniqueId tid;
        ncclResult_t urc = ncclGetUniqueId(&tid);
        printf("after truncation ncclGetVersion rc=%d ncclGetUniqueId rc=%d\n", (int)rc, (int)urc);
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) _exit(ncclGetVersion(&v) == ncclSuccess ? 0 : 3);
        int st = 0;
        if (child < 0 || waitpid(child, &st, 0) < 0) return 4;
        printf("child status=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        fflush(stdout);
        return 0;
    }
    if (!strcmp(what, "nullcomm")) {
        char buf[16];
        ncclResult_t a = 0;
        rc = ncclGroupStart();
        printf("ncclGroupStart rc=%d last_error=%s\n", (int)rc, ncclGetLastError(NULL));
        rc = ncclAllReduce(buf, buf, 4, 7, 0, NULL, NULL);
        printf("ncclAllReduce rc=%d last_error=%s\n", (int)rc, ncclGetLastError(NULL));
        rc = ncclGroupEnd();
        printf("ncclGroupEnd rc=%d last_error=%s\n", (int)rc, ncclGetLastError(NULL));
        rc = ncclCommGetAsyncError(NULL, &a);
        printf("ncclCommGetAsyncError rc=%d last_error=%s\n", (int)rc, ncclGetLastError(NULL));
        rc = ncclCommDestroy(NULL);
        printf("ncclCommDestroy rc=%d last_error=%s\n", (int)rc, ncclGetLastError(NULL));
        fflush(stdout);
        return 0;
    }
    if (!strcmp(what, "lateenv")) setenv("NCCL_LATE_SETTING", "1", 1);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    rc = ncclGetUniqueId(&id);
    printf("ncclGetUniqueId rc=%d id=", (int)rc);
    for (int i = 0; i < 128; i++) printf("%02x", (unsigned char)id.internal[i]);
    printf("\n");
    if (flood) {
        for (int i = 0; i < 2000; i++) {
            if (ncclGetVersion(&v) != ncclSuccess) return 3;
            if (what[5] == 's' && ncclGetErrorString(ncclSuccess) == NULL) return 3;
        }
        fflush(stdout);
        return 0;
    }
    if (!strcmp(what, "uniqueid")) return 0;
    if (!strcmp(what, "uniqueidcheck")) {
        if (rc == ncclSuccess) return 0;
        fflush(stdout);
        fprintf(stderr, "nccl_fail: ncclGetUniqueId failed: %s (%s)\n", ncclGetErrorString(rc),
                ncclGetLastError(NULL));
        return 1;
    }
    ncclComm_t comm = NULL;
    if (!strcmp(what, "initconfig")) {
        int ver = 0;
        ncclGetVersion(&ver);
        ncclConfig_t cfg = TEST_CONFIG_INITIALIZER((unsigned)ver);
        cfg.blocking = 1;
        cfg.netName = "Socket";
        cfg.commName = "ncclshim-test";
        rc = ncclCommInitRankConfig(&comm, 1, id, 0, &cfg);
        printf("ncclCommInitRankConfig rc=%d\n", (int)rc);
    } else {
        rc = ncclCommInitRank(&comm, 1, id, 0);
        printf("ncclCommInitRank rc=%d\n", (int)rc);
    }
    printf("last_error=%s\n", ncclGetLastError(NULL));
    fflush(stdout);
    return 0;
}

#ifndef NCCL_FAIL_LIB
/* The exit modes: returns only for a mode that is not one of them. */
static void exit_mode(const char* what) {
    if (!strcmp(what, "noncclexit5")) exit(5);
    if (!strcmp(what, "nonccluexit6")) _exit(6);
    if (strcmp(what, "exit0") && strcmp(what, "exit1") && strcmp(what, "uexit3") &&
        strcmp(what, "Uexit4") && strcmp(what, "forkuexit3") && strcmp(what, "vforkexec2"))
        return;
    int v = 0;
    ncclResult_t rc = ncclGetVersion(&v);
    printf("ncclGetVersion rc=%d version=%d\n", (int)rc, v);
    fflush(stdout);
    if (!strcmp(what, "exit0")) exit(0);
    if (!strcmp(what, "exit1")) exit(1);
    if (!strcmp(what, "uexit3")) _exit(3);
    if (!strcmp(what, "Uexit4")) _Exit(4);
    pid_t pid;
    if (!strcmp(what, "forkuexit3")) {
        pid = fork();
        if (pid == 0) {
            int cv = 0;
            ncclGetVersion(&cv);
            _exit(3);
        }
    } else {
        pid = vfork();
        if (pid == 0) {
            char* argv[] = {"/nonexistent/ncclshim-test", NULL};
            execv(argv[0], argv);
            _exit(127);
        }
    }
    int st = 0;
    waitpid(pid, &st, 0);
    printf("child status=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    fflush(stdout);
    if (!strcmp(what, "vforkexec2")) exit(2);
    exit(0);
}

int main(int argc, char** argv) {
    if (argc > 1) exit_mode(argv[1]);
    int rc = nccl_fail_run(argc > 1 ? argv[1] : "version");
    fflush(stdout);
    return rc;
}
#endif
