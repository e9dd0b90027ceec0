/* Fatal-signal transparency for the shim's tests: the program calls real NCCL once (which makes
 * the preloaded shim create its dump and chain its handlers), then dies or survives as its mode
 * says. The test runs it with and without the shim and compares stdout and the wait status.
 *   signals segv          writes through NULL (kernel-raised SIGSEGV, core if allowed)
 *   signals abort         abort()
 *   signals term          raise(SIGTERM) with the default action
 *   signals own-before    own SA_SIGINFO SIGSEGV handler installed before NCCL: prints, _exit(42)
 *   signals own-after     own plain SIGTERM handler installed after NCCL: prints, exits 0
 *   signals resethand     SA_RESETHAND SIGTERM handler before NCCL: runs once, the 2nd SIGTERM kills
 *   signals restart       a SIGINT handler with SA_RESTART before NCCL; a read() on a pipe is
 *                         interrupted by SIGINT from a child and must be restarted, not fail EINTR
 *   signals ignored       SIGINT ignored before NCCL, raise(SIGINT): still ignored, exits 0
 *   signals recover-jump  own SIGSEGV handler installed before NCCL that siglongjmps back (how
 *                         probing code, the JVM, Julia and Go recover); three real faults, each
 *                         recovered; then ncclGetUniqueId (fails under a bad NCCL_SOCKET_IFNAME):
 *                         prints its rc and exits 1 when it failed
 *   signals recover-return  own plain SIGSEGV handler before NCCL that returns; raise(SIGSEGV)
 *                         twice (sent, so returning goes on), then as recover-jump
 */
#include "nccl_min.h"
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void on_segv(int sig, siginfo_t* info, void* ctx) {
    (void)ctx;
    char buf[96];
    int n = snprintf(buf, sizeof buf, "own handler: sig=%d code=%d addr=%p\n", sig, info->si_code, info->si_addr);
    write(1, buf, n);
    _exit(42);
}
static volatile sig_atomic_t seen;
static void on_plain(int sig) {
    char buf[64];
    seen++;
    int n = snprintf(buf, sizeof buf, "plain handler: sig=%d n=%d\n", sig, (int)seen);
    write(1, buf, n);
}

static sigjmp_buf probe;
static volatile sig_atomic_t faults;
static void on_segv_jump(int sig) {
    (void)sig;
    faults++;
    siglongjmp(probe, 1);
}
static void on_segv_return(int sig) {
    (void)sig;
    faults++;
}

/* ncclGetUniqueId after surviving the faults: its rc decides the exit status. */
static int unique_id_after(void) {
    ncclUniqueId id;
    ncclResult_t rc = ncclGetUniqueId(&id);
    printf("recovered from %d fault(s); ncclGetUniqueId rc=%d\n", (int)faults, (int)rc);
    fflush(stdout);
    return rc == ncclSuccess ? 0 : 1;
}

static void nccl_once(void) {
    int v = 0;
    ncclResult_t rc = ncclGetVersion(&v);
    printf("ncclGetVersion rc=%d\n", (int)rc);
    fflush(stdout);
}

int main(int argc, char** argv) {
    const char* m = argc > 1 ? argv[1] : "";
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (!strcmp(m, "own-before")) {
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
    } else if (!strcmp(m, "resethand")) {
        sa.sa_handler = on_plain;
        sa.sa_flags = SA_RESETHAND;
        sigaction(SIGTERM, &sa, NULL);
    } else if (!strcmp(m, "restart")) {
        sa.sa_handler = on_plain;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGINT, &sa, NULL);
    } else if (!strcmp(m, "ignored")) {
        signal(SIGINT, SIG_IGN);
    } else if (!strcmp(m, "recover-jump")) {
        signal(SIGSEGV, on_segv_jump);
    } else if (!strcmp(m, "recover-return")) {
        signal(SIGSEGV, on_segv_return);
    }
    nccl_once();
    if (!strcmp(m, "recover-jump")) {
        for (int i = 0; i < 3; i++) {
            if (sigsetjmp(probe, 1) == 0) *(volatile int*)0 = i;
        }
        return unique_id_after();
    } else if (!strcmp(m, "recover-return")) {
        raise(SIGSEGV);
        raise(SIGSEGV);
        return unique_id_after();
    }
    if (!strcmp(m, "segv") || !strcmp(m, "own-before")) {
        *(volatile int*)0 = 1;
    } else if (!strcmp(m, "abort")) {
        abort();
    } else if (!strcmp(m, "term")) {
        raise(SIGTERM);
    } else if (!strcmp(m, "own-after")) {
        signal(SIGTERM, on_plain);
        raise(SIGTERM);
        return 0;
    } else if (!strcmp(m, "resethand")) {
        raise(SIGTERM);
        raise(SIGTERM);
    } else if (!strcmp(m, "restart")) {
        int fds[2];
        if (pipe(fds) != 0) return 3;
        if (fork() == 0) {
            usleep(50000);
            kill(getppid(), SIGINT);
            usleep(250000);
            write(fds[1], "x", 1);
            _exit(0);
        }
        char c;
        ssize_t r = read(fds[0], &c, 1);
        printf("read=%zd after %d signal(s)\n", r, (int)seen);
        return 0;
    } else if (!strcmp(m, "ignored")) {
        raise(SIGINT);
        printf("still here\n");
        return 0;
    }
    printf("not reached\n");
    return 1;
}
