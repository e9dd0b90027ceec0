//! The fields of a PyTorch Flight Recorder dump, as typed structs ([`super::decode`] builds them
//! from the pickle).
//!
//! Source: PyTorch's writer (`torch/csrc/distributed/c10d/FlightRecorder.cpp`, formerly
//! `TraceUtils.h` / `NCCLUtils`) and its analyzer (`torch/distributed/flight_recorder/components/
//! loader.py`, `types.py`). The dump is a dict: `version` ("2.2" ... "2.10" over PyTorch 2.4 to
//! 2.15), `pg_config` ({pg id: {name, desc, ranks}}), `pg_status`, `comm_lib_version`,
//! `nccl_comm_state` and `entries`. Every field has a default: older versions lack some
//! (`frames` when stacks were off, `process_group`, `p2p_seq_id` before 2.5, `collective_seq_id`
//! was `seq_id`), and a field that is absent must never make the whole dump unreadable.

use std::collections::BTreeMap;
use std::sync::Arc;

/// The dump as a whole.
#[derive(Debug, Clone, Default)]
pub struct FrFile {
    /// "2.10"; written as a string by every version seen (a number is accepted too).
    pub version: Lenient,
    /// Process groups by their id ("0"): name, description, member ranks.
    pub pg_config: BTreeMap<String, PgConfig>,
    /// Per process group: last enqueued / started / completed collective sequence number.
    pub pg_status: BTreeMap<String, PgStatus>,
    /// The NCCL version PyTorch ran ("2.28.9").
    pub comm_lib_version: Lenient,
    pub entries: Vec<FrEntry>,
}

/// A process group as `pg_config` describes it.
#[derive(Debug, Clone, Default)]
pub struct PgConfig {
    /// PyTorch's name for it ("0", or a user's `group_name`).
    pub name: Lenient,
    /// Its description ("default_pg", "undefined", a user's `group_desc`).
    pub desc: Lenient,
    /// Member global ranks: the text "[0, 1, 2]" (what PyTorch writes), or a list.
    pub ranks: Ranks,
}

/// `pg_status` of one process group (2.6 and later).
#[derive(Debug, Clone, Default)]
pub struct PgStatus {
    pub last_enqueued_collective: i64,
    pub last_started_collective: i64,
    pub last_completed_collective: i64,
}

/// One collective or point-to-point operation of the ring.
///
/// Its strings are `Arc<str>` and its frames `Arc<Frame>`: PyTorch's pickler writes each
/// distinct string and frame once and refers back to it, and [`super::decode`] keeps that
/// sharing (one allocation per distinct value per dump, not one per entry).
#[derive(Debug, Clone, Default)]
pub struct FrEntry {
    pub record_id: i64,
    pub pg_id: i64,
    /// (name, description) of its process group.
    pub process_group: Vec<Arc<str>>,
    /// The process group's collective sequence number (1 for the first); `seq_id` before 2.2.
    pub collective_seq_id: i64,
    pub p2p_seq_id: i64,
    pub op_id: i64,
    /// "nccl:all_reduce", "nccl:send 0->1", "nccl:_allgather_base", "nccl:coalesced"; PyTorch
    /// 2.15's c10d FlightRecorderHook writes "<backend>:<op>" ("nccl2:all_reduce",
    /// "nccl-lazy:send", no peers).
    pub profiling_name: Arc<str>,
    pub input_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<Arc<str>>,
    pub output_sizes: Vec<Vec<i64>>,
    pub output_dtypes: Vec<Arc<str>>,
    /// "scheduled", "started" or "completed" (never "started" from nccl2, nccl-lazy or
    /// torchcomms: they record no start event).
    pub state: Arc<str>,
    pub time_created_ns: Option<i64>,
    pub time_discovered_started_ns: Option<i64>,
    pub time_discovered_completed_ns: Option<i64>,
    pub retired: bool,
    pub timeout_ms: Option<i64>,
    pub is_p2p: bool,
    /// The Python stack, innermost first.
    pub frames: Vec<Arc<Frame>>,
}

/// One Python frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    pub name: String,
    pub filename: String,
    pub line: i64,
}

/// A scalar written as a string by some versions and a number by others.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Lenient {
    Text(String),
    Int(i64),
    Float(f64),
    #[default]
    None,
}

impl Lenient {
    pub fn text(&self) -> String {
        match self {
            Lenient::Text(s) => s.clone(),
            Lenient::Int(i) => i.to_string(),
            Lenient::Float(f) => f.to_string(),
            Lenient::None => String::new(),
        }
    }
}

/// Member ranks of a process group.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Ranks {
    /// "[0, 1, 2]", as `pg_config` stores them.
    Text(String),
    List(Vec<i64>),
    #[default]
    None,
}

impl Ranks {
    /// The ranks, or None when the text is not a list of integers. "[0, 1]" is what PyTorch
    /// writes; torchcomms writes "0,1" (`ranks_str`, no brackets).
    pub fn list(&self) -> Option<Vec<u32>> {
        match self {
            Ranks::List(v) => v.iter().map(|r| u32::try_from(*r).ok()).collect(),
            Ranks::Text(s) => {
                let t = s.trim();
                let inner = match t.strip_prefix('[') {
                    Some(rest) => rest.strip_suffix(']')?,
                    None => t,
                };
                if inner.trim().is_empty() {
                    return Some(Vec::new());
                }
                inner.split(',').map(|r| r.trim().parse().ok()).collect()
            }
            Ranks::None => None,
        }
    }
}

impl FrEntry {
    /// The backend prefix of the profiling name ("nccl", "nccl2", "nccl-lazy"; empty without).
    pub fn backend(&self) -> &str {
        self.profiling_name.split_once(':').map_or("", |(b, _)| b)
    }

    /// The operation without the backend prefix and the p2p peers: "all_reduce", "send".
    pub fn op_name(&self) -> &str {
        let n = self
            .profiling_name
            .split_once(':')
            .map_or(&*self.profiling_name, |(_, op)| op);
        n.split_whitespace().next().unwrap_or(n)
    }

    /// The user's frame: the innermost one outside PyTorch's own package (its
    /// `distributed_c10d.py` and `c10d_logger.py` wrappers are in every stack).
    pub fn user_frame(&self) -> Option<&Frame> {
        self.frames
            .iter()
            .find(|f| !is_torch_frame(&f.filename))
            .or_else(|| self.frames.first())
            .map(|f| &**f)
    }

    /// `mr.py:50` for the user's frame.
    pub fn site(&self) -> Option<String> {
        self.user_frame().map(|f| {
            let base = f.filename.rsplit('/').next().unwrap_or(&f.filename);
            format!("{base}:{}", f.line)
        })
    }

    pub fn completed(&self) -> bool {
        &*self.state == "completed"
    }

    /// Elements of the first input tensor (what NCCL's count is for the usual one-tensor call).
    pub fn input_count(&self) -> u64 {
        self.input_sizes
            .first()
            .map(|dims| dims.iter().map(|d| (*d).max(0) as u64).product())
            .unwrap_or(0)
    }

    /// Send/recv peers from the profiling name: "nccl:send 0->1" is (0, 1), "nccl:recv 1<-0"
    /// is (0, 1) too: (sender, receiver) in the process group's own ranks (PyTorch writes its
    /// group rank and the group-local peer: global ranks only in the default group).
    pub fn p2p_peers(&self) -> Option<(u32, u32)> {
        let tail = self.profiling_name.split_whitespace().nth(1)?;
        if let Some((a, b)) = tail.split_once("->") {
            return Some((a.parse().ok()?, b.parse().ok()?));
        }
        let (a, b) = tail.split_once("<-")?;
        Some((b.parse().ok()?, a.parse().ok()?))
    }
}

/// A frame of PyTorch itself (site-packages/torch/, dist-packages/torch/, a source checkout's
/// torch/distributed/).
pub fn is_torch_frame(filename: &str) -> bool {
    filename.contains("-packages/torch/") || filename.contains("/torch/distributed/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_text_and_list() {
        assert_eq!(Ranks::Text("[0, 1, 2]".into()).list(), Some(vec![0, 1, 2]));
        assert_eq!(Ranks::Text("[]".into()).list(), Some(vec![]));
        assert_eq!(Ranks::Text("all".into()).list(), None);
        assert_eq!(
            Ranks::Text("0,1".into()).list(),
            Some(vec![0, 1]),
            "torchcomms"
        );
        assert_eq!(Ranks::List(vec![3, 4]).list(), Some(vec![3, 4]));
    }

    #[test]
    fn names_and_peers() {
        let e = FrEntry {
            profiling_name: "nccl:recv 1<-0".into(),
            ..Default::default()
        };
        assert_eq!(e.op_name(), "recv");
        assert_eq!(e.p2p_peers(), Some((0, 1)));
        let e = FrEntry {
            profiling_name: "nccl:send 0->1".into(),
            ..Default::default()
        };
        assert_eq!(e.p2p_peers(), Some((0, 1)));
    }

    #[test]
    fn user_frame_skips_torch() {
        let f = |filename: &str, line| {
            Arc::new(Frame {
                name: "x".into(),
                filename: filename.into(),
                line,
            })
        };
        let e = FrEntry {
            frames: vec![
                f(
                    "/v/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py",
                    3068,
                ),
                f(
                    "/v/lib/python3.12/site-packages/torch/distributed/c10d_logger.py",
                    83,
                ),
                f("/opt/gpu-kit/mr.py", 50),
            ],
            ..Default::default()
        };
        assert_eq!(e.site().as_deref(), Some("mr.py:50"));
    }
}
