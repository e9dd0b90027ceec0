//! Names for the numbers NCCL and the CUDA driver return (from the knowledge files, with their
//! sources), and for NCCL's version codes, datatypes and reduction ops, so a report can say
//! `ncclRemoteError` or `CUDA_ERROR_INVALID_DEVICE` instead of a bare integer.

/// `ncclResult_t` name (knowledge/nccl-results.toml).
pub fn nccl_result_name(rc: i32) -> Option<&'static str> {
    crate::knowledge::codes::nccl_result(rc).map(|c| c.name.as_str())
}

/// `CUresult` name (knowledge/cuda.toml).
pub fn cu_result_name(rc: i32) -> Option<&'static str> {
    crate::knowledge::codes::cu_result(rc).map(|c| c.name.as_str())
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

/// Bytes per element of an `ncclDataType_t` (NCCL's `ncclTypeSize`).
pub fn datatype_size(v: u64) -> Option<u64> {
    Some(match v {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => return None,
    })
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
