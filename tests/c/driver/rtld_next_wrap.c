/*
 * A library that wraps libc's puts and getenv the classic way, with dlsym(RTLD_NEXT, ...).
 * glibc answers RTLD_NEXT relative to the caller's return address: under an interposed dlsym
 * that calls the real one from its own frame, this library would get itself back and recurse.
 * The wrappers detect that and exit with a distinctive status instead of overflowing the stack.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *msg, int code) {
    (void)!write(2, msg, strlen(msg));
    _exit(code);
}

int puts(const char *s) {
    static int (*next)(const char *);
    static int depth;
    if (depth++ > 0) die("rtld_next_wrap: puts recursion\n", 3);
    if (!next) next = (int (*)(const char *))dlsym(RTLD_NEXT, "puts");
    if (!next) die("rtld_next_wrap: RTLD_NEXT found no puts\n", 4);
    if (next == puts) die("rtld_next_wrap: RTLD_NEXT returned the wrapper itself\n", 5);
    fputs("[wrapped] ", stdout);
    int r = next(s);
    depth--;
    return r;
}

char *getenv(const char *name) {
    static char *(*next)(const char *);
    if (!next) next = (char *(*)(const char *))dlsym(RTLD_NEXT, "getenv");
    if (!next || next == getenv) die("rtld_next_wrap: bad RTLD_NEXT getenv\n", 6);
    if (strcmp(name, "RTLD_NEXT_WRAP_PROBE") == 0) return "intercepted";
    return next(name);
}
