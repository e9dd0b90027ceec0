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

/// `", tag 0x7a6"` for an operation the application tagged (ncclCollConfig_t's
/// `userProfilerTag`, the profiler's v7 `userTag`); empty for 0, NCCL's "untagged".
pub fn user_tag_text(tag: u64) -> String {
    if tag == 0 {
        String::new()
    } else {
        format!(", tag {tag:#x}")
    }
}
