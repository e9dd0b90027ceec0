//! Small integer codes for the strings NCCL hands the profiler plugin (collective function,
//! datatype, algorithm, protocol). NCCL passes pointers to its own static literals; the plugin
//! stores one of these codes in a slot argument instead of the text, so a record stays one
//! 128-byte store, and the reader turns the codes back into NCCL's names with these tables.
//!
//! Code 0 always means "other": a string this table does not know (the plugin then attaches
//! the text once, as a `BlobKind::Name` blob, to the first record that carried it).
//! Codes are append-only, like call ids.

/// Collective / point-to-point function names, exactly as NCCL spells them (`src/collectives.cc`).
/// The index is the code; 0 is "other".
pub const FUNCS: &[&str] = &[
    "other",
    "AllGather",
    "AllReduce",
    "AlltoAll",
    "Broadcast",
    "Gather",
    "Recv",
    "Reduce",
    "ReduceScatter",
    "Scatter",
    "SendRecv",
    "Send",
    "PutSignal",
    "Signal",
    "WaitSignal",
    "Invalid",
];

/// Datatype names as NCCL passes them. NCCL names `ncclUint8` "Unknown" (profiler API quirk).
pub const DATATYPES: &[&str] = &[
    "other",
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
    "Unknown",
];

/// Element size in bytes per datatype code (0 for "other"; "Unknown" is NCCL's name for
/// `ncclUint8`, so 1).
pub const DATATYPE_SIZES: &[u8] = &[0, 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1, 1];

/// Algorithm names (`NCCL_ALGO_*` string forms).
pub const ALGOS: &[&str] = &[
    "other",
    "TREE",
    "RING",
    "COLLNET_DIRECT",
    "COLLNET_CHAIN",
    "NVLS",
    "NVLS_TREE",
    "PAT",
];

/// Protocol names.
pub const PROTOS: &[&str] = &["other", "LL", "LL128", "SIMPLE"];

/// Which table a code belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameTable {
    Func,
    Datatype,
    Algo,
    Proto,
}

impl NameTable {
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Self::Func => FUNCS,
            Self::Datatype => DATATYPES,
            Self::Algo => ALGOS,
            Self::Proto => PROTOS,
        }
    }

    /// The code of `name` in this table, 0 ("other") when unknown.
    pub fn code_of(self, name: &[u8]) -> u8 {
        self.names()
            .iter()
            .skip(1)
            .position(|n| n.as_bytes() == name)
            .map_or(0, |i| (i + 1) as u8)
    }

    /// The name of `code`, `None` when the code is out of range (a newer writer).
    pub fn name_of(self, code: u64) -> Option<&'static str> {
        usize::try_from(code)
            .ok()
            .and_then(|i| self.names().get(i).copied())
    }
}

/// Bytes moved by one collective as NCCL counts them: `count` elements of `datatype`.
/// (For AllGather and Broadcast the Coll event's count is already in bytes, with "ncclInt8".)
#[inline]
pub fn payload_bytes(count: u64, datatype: u64) -> u64 {
    let size = usize::try_from(datatype)
        .ok()
        .and_then(|i| DATATYPE_SIZES.get(i).copied())
        .unwrap_or(0);
    count.saturating_mul(u64::from(size.max(1)))
}

/// The two codes packed into the Coll record's `algo_proto` argument.
pub fn unpack_algo_proto(v: u64) -> (u64, u64) {
    (v & 0xff, (v >> 8) & 0xff)
}

/// `channels_warps` of a Coll record: (channels, warps, flags); flag bit 0 = symmetric kernel (v7).
pub fn unpack_channels_warps(v: u64) -> (u64, u64, u64) {
    (v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknowns_are_other() {
        for t in [
            NameTable::Func,
            NameTable::Datatype,
            NameTable::Algo,
            NameTable::Proto,
        ] {
            for (i, n) in t.names().iter().enumerate().skip(1) {
                assert_eq!(t.code_of(n.as_bytes()), i as u8);
                assert_eq!(t.name_of(i as u64), Some(*n));
            }
            assert_eq!(t.code_of(b"NoSuchThing"), 0);
            assert_eq!(t.name_of(999), None);
            assert!(t.names().len() <= 256);
        }
        assert_eq!(DATATYPES.len(), DATATYPE_SIZES.len());
    }

    #[test]
    fn payload_bytes_uses_the_element_size() {
        let f32 = u64::from(NameTable::Datatype.code_of(b"ncclFloat32"));
        assert_eq!(payload_bytes(1000, f32), 4000);
        let bf16 = u64::from(NameTable::Datatype.code_of(b"ncclBfloat16"));
        assert_eq!(payload_bytes(3, bf16), 6);
        assert_eq!(payload_bytes(7, 0), 7);
        assert_eq!(payload_bytes(u64::MAX, 5), u64::MAX);
    }
}
