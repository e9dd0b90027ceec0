//! C string → `profnames` code, without a string compare on the hot path. NCCL hands the
//! plugin pointers to its own static literals, so a pointer seen once always means the same
//! text: a small lock-free cache maps (pointer, table) to the code, and only a miss reads and
//! compares the string. One `AtomicU64` per entry (pointer in the low 48 bits, table and code
//! above) makes every entry self-validating, so racing inserts can only cost another miss.

use ncclshim_dump::profnames::NameTable;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};

const ENTRIES: usize = 256;
const PTR_BITS: u64 = (1 << 48) - 1;

static CACHE: [AtomicU64; ENTRIES] = [const { AtomicU64::new(0) }; ENTRIES];

#[inline(always)]
fn table_id(t: NameTable) -> u64 {
    match t {
        NameTable::Func => 1,
        NameTable::Datatype => 2,
        NameTable::Algo => 3,
        NameTable::Proto => 4,
    }
}

/// A code and, on the first sighting of a string the table does not know, its text.
pub struct Lookup {
    pub code: u8,
    pub unknown_text: Option<&'static [u8]>,
}

/// The code for `p` in `table`; 0 for NULL or unknown text.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid and unchanged for the
/// life of the process (NCCL's static literals; the plugin keeps libnccl loaded while NCCL
/// calls it).
#[inline]
pub unsafe fn code(table: NameTable, p: *const c_char) -> Lookup {
    if let Some(code) = cached(table, p) {
        return Lookup {
            code,
            unknown_text: None,
        };
    }
    // SAFETY: forwarded contract.
    unsafe { uncached(table, p) }
}

/// The cached code for `p` (NULL is code 0), or `None` on a miss. Separate from [`code`] so
/// the hit path returns one byte in a register: the three-word `Lookup` went through memory.
#[inline(always)]
pub fn cached(table: NameTable, p: *const c_char) -> Option<u8> {
    let key = p as u64;
    if key == 0 {
        return Some(0);
    }
    let v = slot_of(key).load(Ordering::Relaxed);
    (key <= PTR_BITS && v & !(0xff << 56) == tag_of(table, key)).then_some((v >> 56) as u8)
}

#[inline(always)]
fn tag_of(table: NameTable, key: u64) -> u64 {
    key | table_id(table) << 48
}

#[inline(always)]
fn slot_of(key: u64) -> &'static AtomicU64 {
    &CACHE[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % ENTRIES]
}

/// The code for `p` read from the string itself, after [`cached`] missed; fills the cache.
///
/// # Safety
/// As [`code`].
#[cold]
pub unsafe fn uncached(table: NameTable, p: *const c_char) -> Lookup {
    if p.is_null() {
        return Lookup {
            code: 0,
            unknown_text: None,
        };
    }
    let key = p as u64;
    // SAFETY: p is a valid NUL-terminated string (contract); strnlen bounds the read.
    let len = unsafe { libc::strnlen(p, 64) };
    // SAFETY: the first `len` bytes are readable (strnlen just scanned them) and static.
    let text: &'static [u8] = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    let code = table.code_of(text);
    if key <= PTR_BITS {
        slot_of(key).store(
            tag_of(table, key) | u64::from(code) << 56,
            Ordering::Relaxed,
        );
    }
    Lookup {
        code,
        unknown_text: (code == 0 && !text.is_empty()).then_some(text),
    }
}

/// v1 passes enums, not strings. These are NCCL's enum orders (`ncclFunc_t`,
/// `ncclDataType_t`, `NCCL_ALGO_*`, `NCCL_PROTO_*`) as of the v1 ABI (2.23).
pub mod v1_enums {
    use ncclshim_dump::profnames::NameTable;

    const FUNCS: &[&str] = &[
        "Broadcast",
        "Reduce",
        "AllGather",
        "ReduceScatter",
        "AllReduce",
        "SendRecv",
        "Send",
        "Recv",
    ];
    // ncclUint8 is reported as "ncclUint8" here: v1 passes the enum, so there is no ambiguity.
    const DATATYPES: &[&str] = &[
        "ncclInt8",
        "ncclUint8",
        "ncclInt32",
        "ncclUint32",
        "ncclInt64",
        "ncclUint64",
        "ncclFloat16",
        "ncclFloat32",
        "ncclFloat64",
        "ncclBfloat16",
        "ncclFloat8e4m3",
        "ncclFloat8e5m2",
    ];
    const ALGOS: &[&str] = &[
        "TREE",
        "RING",
        "COLLNET_DIRECT",
        "COLLNET_CHAIN",
        "NVLS",
        "NVLS_TREE",
        "PAT",
    ];
    const PROTOS: &[&str] = &["LL", "LL128", "SIMPLE"];

    /// Our code for NCCL's enum value `v` in `table` (0 when out of range).
    pub fn code(table: NameTable, v: u8) -> u8 {
        let names = match table {
            NameTable::Func => FUNCS,
            NameTable::Datatype => DATATYPES,
            NameTable::Algo => ALGOS,
            NameTable::Proto => PROTOS,
        };
        names
            .get(usize::from(v))
            .map_or(0, |n| table.code_of(n.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_strings_hit_the_cache_and_unknowns_report_their_text_once() {
        static ALL_REDUCE: &[u8] = b"AllReduce\0";
        static ODD: &[u8] = b"FancyNewColl\0";
        let p = ALL_REDUCE.as_ptr().cast::<c_char>();
        // SAFETY: static NUL-terminated strings.
        unsafe {
            let first = code(NameTable::Func, p);
            assert_eq!(first.code, NameTable::Func.code_of(b"AllReduce"));
            assert!(first.unknown_text.is_none());
            assert_eq!(code(NameTable::Func, p).code, first.code);
            // Same pointer, other table: not confused with the func entry.
            assert_eq!(code(NameTable::Algo, p).code, 0);
            let q = ODD.as_ptr().cast::<c_char>();
            let u = code(NameTable::Func, q);
            assert_eq!(u.code, 0);
            assert_eq!(u.unknown_text, Some(&b"FancyNewColl"[..]));
            assert_eq!(code(NameTable::Func, std::ptr::null()).code, 0);
        }
    }

    #[test]
    fn v1_enums_map_to_the_same_codes_as_strings() {
        assert_eq!(
            v1_enums::code(NameTable::Func, 4),
            NameTable::Func.code_of(b"AllReduce")
        );
        assert_eq!(
            v1_enums::code(NameTable::Datatype, 7),
            NameTable::Datatype.code_of(b"ncclFloat32")
        );
        assert_eq!(
            v1_enums::code(NameTable::Algo, 1),
            NameTable::Algo.code_of(b"RING")
        );
        assert_eq!(
            v1_enums::code(NameTable::Proto, 2),
            NameTable::Proto.code_of(b"SIMPLE")
        );
        assert_eq!(v1_enums::code(NameTable::Func, 200), 0);
    }
}
