//! Reader-side helper (feature `reader`): the running aggregates of every communicator in a
//! profiler dump, decoded from their `ProfAggregates` blobs. A pure function of the dump.

use crate::agg::{self, AggSnapshot};
use ncclshim_format::reader::Dump;
use ncclshim_format::BlobKind;

/// Every aggregate table in `dump`, in file order. Tables that do not decode are skipped.
pub fn aggregates(dump: &Dump) -> Vec<AggSnapshot> {
    dump.blobs
        .values()
        .filter(|b| b.kind() == Some(BlobKind::ProfAggregates))
        .filter_map(|b| agg::decode(&b.bytes))
        .collect()
}
