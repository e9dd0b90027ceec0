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
