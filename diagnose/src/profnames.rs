//! Names for the profiler plugin's function and datatype codes (`ncclshim_format::profnames`),
//! with a numeric fallback for codes a newer plugin may write.

use ncclshim_format::profnames::NameTable;

pub fn func_name(code: u64) -> String {
    NameTable::Func
        .name_of(code)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("func({code})"))
}

pub fn datatype_name(code: u64) -> String {
    NameTable::Datatype
        .name_of(code)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("datatype({code})"))
}

/// The code of a function name (for synthetic dumps and tests).
pub fn func_code(name: &str) -> u64 {
    u64::from(NameTable::Func.code_of(name.as_bytes()))
}

/// The code of a datatype name (for synthetic dumps and tests).
pub fn datatype_code(name: &str) -> u64 {
    u64::from(NameTable::Datatype.code_of(name.as_bytes()))
}
