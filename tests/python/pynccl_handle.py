"""vLLM's `pynccl_wrapper.py` flow, standalone: load libnccl with `ctypes.CDLL(path)` (RTLD_LOCAL)
and call NCCL through functions looked up on that handle (`getattr`, i.e. `dlsym(handle, name)`),
with vLLM's argument and result types. For the shim's handle-lookup tests.

usage: pynccl_handle.py MODE LIB [LIB...]
  MODE uniqueid  ncclGetVersion, ncclGetUniqueId (fails under NCCL_SOCKET_IFNAME=nonexistent0)
  MODE init      ncclGetVersion, ncclGetUniqueId, ncclCommInitRank(nranks=1, rank=0) (no GPU: fails)
  MODE mixed     as init for the first LIB; then NCCL_SOCKET_IFNAME=nonexistent0 is set and the next
                 LIBs fail ncclGetUniqueId instead: each library's last-error text differs, so the
                 text recorded with a call tells which library was asked for it
Each LIB is loaded, then driven, in turn in this one process; lines start with the LIB's index.
"""
import ctypes
import os
import sys

ncclResult_t = ctypes.c_int
ncclComm_t = ctypes.c_void_p


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


# name, restype, argtypes (as vllm/distributed/device_communicators/pynccl_wrapper.py declares them)
EXPORTED_FUNCTIONS = [
    ("ncclGetErrorString", ctypes.c_char_p, [ncclResult_t]),
    ("ncclGetVersion", ncclResult_t, [ctypes.POINTER(ctypes.c_int)]),
    ("ncclGetUniqueId", ncclResult_t, [ctypes.POINTER(ncclUniqueId)]),
    ("ncclCommInitRank", ncclResult_t,
     [ctypes.POINTER(ncclComm_t), ctypes.c_int, ncclUniqueId, ctypes.c_int]),
    ("ncclGetLastError", ctypes.c_char_p, [ctypes.c_void_p]),
]


class NCCLLibrary:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.funcs = {}
        for name, restype, argtypes in EXPORTED_FUNCTIONS:
            f = getattr(self.lib, name)
            f.restype = restype
            f.argtypes = argtypes
            self.funcs[name] = f

    def describe(self, rc: int) -> str:
        err = self.funcs["ncclGetErrorString"](rc).decode()
        last = self.funcs["ncclGetLastError"](None)
        return f"error={err} last_error={last.decode() if last else ''}"


def main() -> int:
    mode, paths = sys.argv[1], sys.argv[2:]
    for i, path in enumerate(paths):
        if mode == "mixed" and i == 1:
            os.environ["NCCL_SOCKET_IFNAME"] = "nonexistent0"
        # Loaded only when its turn comes: a second NCCL appears after the first one was used.
        nccl = NCCLLibrary(path)
        version = ctypes.c_int()
        rc = nccl.funcs["ncclGetVersion"](ctypes.byref(version))
        print(f"{i} ncclGetVersion rc={rc} version={version.value}", flush=True)
        uid = ncclUniqueId()
        rc = nccl.funcs["ncclGetUniqueId"](ctypes.byref(uid))
        print(f"{i} ncclGetUniqueId rc={rc} {nccl.describe(rc) if rc else ''}", flush=True)
        if mode == "uniqueid" or rc != 0:
            continue
        comm = ncclComm_t()
        rc = nccl.funcs["ncclCommInitRank"](ctypes.byref(comm), 1, uid, 0)
        print(f"{i} ncclCommInitRank rc={rc} {nccl.describe(rc) if rc else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
