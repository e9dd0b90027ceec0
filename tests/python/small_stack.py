"""The first NCCL calls of a process made from a Python thread with a small stack
(`threading.stack_size`), through `ctypes.CDLL(path)` (RTLD_LOCAL, `getattr` lookups on the
handle, made on that thread), for the shim's stack tests.

usage: small_stack.py LIB STACK_BYTES
Prints what each step returned; reads the same with and without the shim preloaded. A call that
needs more stack than the thread has kills the process (SIGSEGV).
"""
import ctypes
import sys
import threading


def first_calls(lib):
    version = ctypes.c_int(0)
    rc = lib.ncclGetVersion(ctypes.byref(version))
    print(f"ncclGetVersion rc={rc} version={version.value}", flush=True)
    unique_id = ctypes.create_string_buffer(128)
    rc = lib.ncclGetUniqueId(unique_id)
    print(f"ncclGetUniqueId rc={rc}", flush=True)


def main():
    lib = ctypes.CDLL(sys.argv[1])
    try:
        threading.stack_size(int(sys.argv[2]))
    except ValueError as e:
        print(f"stack_size refused: {e}", flush=True)
        return
    try:
        t = threading.Thread(target=first_calls, args=(lib,))
        t.start()
        t.join()
        print("thread done", flush=True)
    except RuntimeError as e:
        print(f"thread refused: {e}", flush=True)


main()
