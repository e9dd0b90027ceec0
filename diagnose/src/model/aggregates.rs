//! The profiler plugin's running aggregates in the job model: per communicator and rank, how
//! many operations started, how many bytes they moved, how many of their kernels ended and the
//! GPU time those took. Decoded with the layout the plugin writes with
//! (`ncclshim_format::aggregates`). They never wrap: a rank's counts cover its whole life even
//! when its rings kept only the last seconds, which is what comparing ranks' progress and speed
//! over a long job needs.

use ncclshim_format::aggregates::{self, AggSnapshot, AggTotals};
use ncclshim_format::reader::Dump;
use ncclshim_format::BlobKind;

/// One rank's running totals on one communicator.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CommAggregate {
    pub comm_hash: u64,
    pub rank: i32,
    pub nranks: i32,
    pub totals: AggTotals,
    /// Per operation (profnames func code): its totals.
    pub by_func: Vec<(u8, AggTotals)>,
    /// Σ timed_bytes × bus factor (nccl-tests' busbw), for the bus bandwidth.
    pub bus_bytes: f64,
}

impl CommAggregate {
    fn from_snapshot(s: &AggSnapshot) -> Self {
        let mut by_func: Vec<(u8, AggTotals)> = Vec::new();
        let mut bus_bytes = 0.0;
        let nranks = u32::try_from(s.nranks).unwrap_or(0);
        for c in &s.cells {
            match by_func.iter_mut().find(|(f, _)| *f == c.func) {
                Some((_, t)) => t.add(c),
                None => {
                    let mut t = AggTotals::default();
                    t.add(c);
                    by_func.push((c.func, t));
                }
            }
            bus_bytes += c.timed_bytes as f64 * aggregates::bus_factor(c.func, nranks);
        }
        by_func.sort_by_key(|(f, _)| *f);
        Self {
            comm_hash: s.comm_id,
            rank: s.rank,
            nranks: s.nranks,
            totals: s.totals(),
            by_func,
            bus_bytes,
        }
    }

    /// Adds another table of the same communicator (the process initialized it twice).
    pub fn merge(&mut self, o: &CommAggregate) {
        for (f, t) in &o.by_func {
            match self.by_func.iter_mut().find(|(g, _)| g == f) {
                Some((_, mine)) => mine.merge(t),
                None => self.by_func.push((*f, *t)),
            }
        }
        self.totals.merge(&o.totals);
        self.bus_bytes += o.bus_bytes;
    }

    /// Mean GPU time of an operation whose kernel ended, in ns.
    pub fn mean_gpu_ns(&self) -> Option<f64> {
        (self.totals.timed_count > 0 && self.totals.gpu_ns_sum > 0)
            .then(|| self.totals.gpu_ns_sum as f64 / self.totals.timed_count as f64)
    }

    /// Algorithm bandwidth (bytes / GPU time) over the timed operations, in GB/s.
    pub fn algbw_gbps(&self) -> Option<f64> {
        (self.totals.gpu_ns_sum > 0)
            .then(|| self.totals.timed_bytes as f64 / self.totals.gpu_ns_sum as f64)
    }

    /// Bus bandwidth (nccl-tests' busbw), in GB/s.
    pub fn busbw_gbps(&self) -> Option<f64> {
        (self.totals.gpu_ns_sum > 0).then(|| self.bus_bytes / self.totals.gpu_ns_sum as f64)
    }
}

/// Every aggregate table of a dump that names its communicator, merged per communicator.
/// Tables of v1-v3 plugins whose communicator no operation named yet (comm id 0) say nothing
/// comparable and are left out.
pub fn from_dump(d: &Dump) -> Vec<CommAggregate> {
    let mut out: Vec<CommAggregate> = Vec::new();
    for s in d
        .blobs
        .values()
        .filter(|b| b.kind() == Some(BlobKind::ProfAggregates))
        .filter_map(|b| aggregates::decode(&b.bytes))
        .filter(|s| s.comm_id != 0)
    {
        let a = CommAggregate::from_snapshot(&s);
        match out
            .iter_mut()
            .find(|x| x.comm_hash == a.comm_hash && x.rank == a.rank)
        {
            Some(x) => x.merge(&a),
            None => out.push(a),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ncclshim_format::aggregates::{CellSnapshot, TableHeader};

    fn cell(func: u8, count: u64, bytes: u64, gpu_ns: u64) -> CellSnapshot {
        CellSnapshot {
            func,
            bucket: aggregates::bucket(bytes / count.max(1)) as u8,
            bucket_floor: 0,
            count,
            bytes,
            timed_count: count,
            timed_bytes: bytes,
            gpu_ns_sum: gpu_ns,
            gpu_ns_max: gpu_ns / count.max(1),
        }
    }

    #[test]
    fn bandwidths_follow_the_bus_factor_of_each_operation() {
        let s = AggSnapshot {
            comm_id: 7,
            rank: 0,
            nranks: 4,
            nnodes: 1,
            abi: 5,
            ctx: 0,
            // AllReduce: 4 GB in 2 s; Broadcast: 1 GB in 1 s.
            cells: vec![
                cell(2, 4, 4_000_000_000, 2_000_000_000),
                cell(4, 1, 1_000_000_000, 1_000_000_000),
            ],
        };
        let a = CommAggregate::from_snapshot(&s);
        assert_eq!(a.totals.count, 5);
        assert_eq!(a.by_func.len(), 2);
        let alg = a.algbw_gbps().unwrap();
        assert!((alg - 5.0 / 3.0).abs() < 1e-9, "{alg}");
        // 4 GB × 1.5 + 1 GB × 1 over 3 s.
        let bus = a.busbw_gbps().unwrap();
        assert!((bus - 7.0 / 3.0).abs() < 1e-9, "{bus}");
        assert_eq!(a.mean_gpu_ns(), Some(600_000_000.0));
    }

    #[test]
    fn an_empty_table_has_no_bandwidth() {
        let p = aggregates::encode_empty(&TableHeader {
            comm_id: 9,
            nranks: 2,
            ..TableHeader::default()
        });
        let a = CommAggregate::from_snapshot(&aggregates::decode(&p).unwrap());
        assert_eq!(a.totals.count, 0);
        assert_eq!((a.busbw_gbps(), a.mean_gpu_ns()), (None, None));
    }
}
