"""Loads a library that uses NCCL the way Python loads extension modules (RTLD_LOCAL) and runs one
of its failure scenarios, for the shim's integration tests.

usage: nccl_ctypes.py LIB MODE   (LIB: tests/c/nccl_fail.c built with -DNCCL_FAIL_LIB)
"""
import ctypes
import os
import sys


def main() -> int:
    lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
    lib.nccl_fail_run.argtypes = [ctypes.c_char_p]
    lib.nccl_fail_run.restype = ctypes.c_int
    return lib.nccl_fail_run(sys.argv[2].encode())


if __name__ == "__main__":
    sys.exit(main())
