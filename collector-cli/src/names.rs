//! Names for the numbers NCCL and the CUDA driver return, and for NCCL's version codes,
//! datatypes and reduction ops. Our own tables, written from the public enum values, so a report
//! can say `ncclRemoteError` or `CUDA_ERROR_INVALID_DEVICE` instead of a bare integer.

/// `ncclResult_t` name.
pub fn nccl_result_name(rc: i32) -> Option<&'static str> {
    Some(match rc {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => return None,
    })
}

/// `CUresult` name for the codes NCCL's transports and the IPC / cuMem paths run into.
pub fn cu_result_name(rc: i32) -> Option<&'static str> {
    Some(match rc {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        5 => "CUDA_ERROR_PROFILER_DISABLED",
        34 => "CUDA_ERROR_STUB_LIBRARY",
        46 => "CUDA_ERROR_DEVICE_UNAVAILABLE",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        102 => "CUDA_ERROR_DEVICE_NOT_LICENSED",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        205 => "CUDA_ERROR_MAP_FAILED",
        206 => "CUDA_ERROR_UNMAP_FAILED",
        208 => "CUDA_ERROR_ALREADY_MAPPED",
        214 => "CUDA_ERROR_ECC_UNCORRECTABLE",
        216 => "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
        217 => "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
        300 => "CUDA_ERROR_INVALID_SOURCE",
        304 => "CUDA_ERROR_OPERATING_SYSTEM",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        401 => "CUDA_ERROR_ILLEGAL_STATE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        704 => "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
        705 => "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
        708 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
        709 => "CUDA_ERROR_ASSERT",
        712 => "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        800 => "CUDA_ERROR_NOT_PERMITTED",
        801 => "CUDA_ERROR_NOT_SUPPORTED",
        802 => "CUDA_ERROR_SYSTEM_NOT_READY",
        803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        900 => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => return None,
    })
}

/// The name of a return code, `ncclResult_t` or (`is_cuda`) `CUresult`; a numeric name when unknown.
pub fn rc_name(rc: i32, is_cuda: bool) -> String {
    let known = if is_cuda {
        cu_result_name(rc)
    } else {
        nccl_result_name(rc)
    };
    match known {
        Some(n) => n.to_owned(),
        None if is_cuda => format!("CUresult({rc})"),
        None => format!("ncclResult({rc})"),
    }
}

/// `ncclGetVersion` code as text: 21903 → "2.19.3" (codes before 2.9 used `major*1000`).
pub fn nccl_version_string(code: u64) -> String {
    if code >= 20900 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else if code >= 1000 {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    } else {
        format!("{code}")
    }
}

/// CUDA version code as text: 12020 → "12.2".
pub fn cuda_version_string(code: i64) -> String {
    format!("{}.{}", code / 1000, (code % 1000) / 10)
}

/// `ncclDataType_t` name.
pub fn datatype_name(v: u64) -> String {
    let n = match v {
        0 => "int8",
        1 => "uint8",
        2 => "int32",
        3 => "uint32",
        4 => "int64",
        5 => "uint64",
        6 => "float16",
        7 => "float32",
        8 => "float64",
        9 => "bfloat16",
        10 => "float8e4m3",
        11 => "float8e5m2",
        _ => return format!("datatype({v})"),
    };
    n.to_owned()
}

/// `ncclRedOp_t` name (user-created PreMulSum ops are numbered after the built-ins).
pub fn redop_name(v: u64) -> String {
    let n = match v {
        0 => "sum",
        1 => "prod",
        2 => "max",
        3 => "min",
        4 => "avg",
        _ => return format!("redop({v})"),
    };
    n.to_owned()
}

/// Signal name for a fatal signal number.
pub fn signal_name(signo: u64) -> String {
    let n = match signo {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return format!("signal {signo}"),
    };
    n.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_names() {
        assert_eq!(rc_name(6, false), "ncclRemoteError");
        assert_eq!(rc_name(101, true), "CUDA_ERROR_INVALID_DEVICE");
        assert_eq!(rc_name(101, false), "ncclResult(101)");
        assert_eq!(rc_name(12345, true), "CUresult(12345)");
    }

    #[test]
    fn versions() {
        assert_eq!(nccl_version_string(21903), "2.19.3");
        assert_eq!(nccl_version_string(22304), "2.23.4");
        assert_eq!(nccl_version_string(2708), "2.7.8");
        assert_eq!(cuda_version_string(12080), "12.8");
    }
}
