//! The typed structs of [`super::format`], built straight from the nodes of a read pickle
//! ([`super::pickle`]): one hand-written `from_node` per struct, matching keys as bytes, with
//! no intermediate value tree and no string copied except the ones kept.
//!
//! Lenient as the dumps need: a field that is absent, or of a type this reader does not
//! expect, keeps its default (older versions lack some; a field of an odd type must never make
//! the whole dump unreadable); unknown keys (`thread_name`, `thread_id`...) are skipped. Only
//! the root must be a dict. Bounded: the walk follows the format's fixed shape (no recursion
//! into arbitrary nesting, so a pickle that refers to itself ends), and a budget on decoded
//! values stops a small pickle whose memo references would multiply into gigabytes (a list of
//! N references to an entry of M references to a frame decodes N x M frames).
//!
//! Shared as the pickle shares: an entry's strings and frames are decoded once per pickle node
//! (PyTorch memoizes each distinct string and frame and refers back to it), so 2,000 entries
//! naming the same state, dtype and three frames cost one allocation each, not 2,000.

use super::format::{FrEntry, FrFile, Frame, Lenient, PgConfig, PgStatus, Ranks};
use super::pickle::{Node, NodeId, Pickle};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Decoded values allowed per input byte: an honest dump decodes less than one value per byte
/// (a memo reference to a shared string costs 2 bytes, a shared 3-frame stack 2 bytes for 10
/// values); this bound is far above that and still keeps a hostile dump's output within a
/// small multiple of its size.
const VALUES_PER_BYTE: usize = 32;

pub struct Decoder<'p, 'a> {
    p: &'p Pickle<'a>,
    /// Values still allowed (see [`VALUES_PER_BYTE`]).
    budget: usize,
    /// Strings already decoded, by node: a memoized string is one node however often used.
    shared_strings: FxHashMap<NodeId, Arc<str>>,
    /// Frames already decoded, by node (a memoized frame dict).
    shared_frames: FxHashMap<NodeId, Arc<Frame>>,
}

type Result<T> = std::result::Result<T, String>;

impl<'p, 'a> Decoder<'p, 'a> {
    pub fn new(p: &'p Pickle<'a>, input_len: usize) -> Self {
        Decoder {
            p,
            budget: input_len
                .saturating_mul(VALUES_PER_BYTE)
                .saturating_add(4096),
            shared_strings: FxHashMap::default(),
            shared_frames: FxHashMap::default(),
        }
    }

    fn spend(&mut self, n: usize) -> Result<()> {
        match self.budget.checked_sub(n) {
            Some(left) => {
                self.budget = left;
                Ok(())
            }
            None => Err(
                "the pickle refers back to the same objects far more often than a Flight Recorder dump does"
                    .into(),
            ),
        }
    }

    fn int(&self, id: NodeId) -> Option<i64> {
        match self.p.node(id) {
            Node::Int(i) => Some(i),
            Node::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }

    fn string(&mut self, id: NodeId) -> Result<Option<String>> {
        match self.p.node(id) {
            Node::Str(b) => {
                self.spend(1)?;
                Ok(Some(String::from_utf8_lossy(b).into_owned()))
            }
            _ => Ok(None),
        }
    }

    /// A string node as a shared `Arc<str>` (the same one for every reference to the node).
    fn shared_string(&mut self, id: NodeId) -> Result<Option<Arc<str>>> {
        let Node::Str(b) = self.p.node(id) else {
            return Ok(None);
        };
        self.spend(1)?;
        let s = self
            .shared_strings
            .entry(id)
            .or_insert_with(|| Arc::from(String::from_utf8_lossy(b)));
        Ok(Some(s.clone()))
    }

    fn shared_strings(&mut self, id: NodeId) -> Result<Vec<Arc<str>>> {
        let items = self.p.items(id);
        self.spend(items.len())?;
        let mut out = Vec::with_capacity(items.len());
        for &i in items {
            out.push(self.shared_string(i)?.unwrap_or_default());
        }
        Ok(out)
    }

    fn lenient(&mut self, id: NodeId) -> Result<Lenient> {
        Ok(match self.p.node(id) {
            Node::Str(_) => Lenient::Text(self.string(id)?.unwrap_or_default()),
            Node::Int(i) => Lenient::Int(i),
            Node::Float(f) => Lenient::Float(f),
            _ => Lenient::None,
        })
    }

    fn ints(&mut self, id: NodeId) -> Result<Vec<i64>> {
        let items = self.p.items(id);
        self.spend(items.len())?;
        Ok(items
            .iter()
            .map(|&i| self.int(i).unwrap_or_default())
            .collect())
    }

    fn sizes(&mut self, id: NodeId) -> Result<Vec<Vec<i64>>> {
        let items = self.p.items(id);
        self.spend(items.len())?;
        items.iter().map(|&i| self.ints(i)).collect()
    }

    /// Keys as bytes (non-string keys are skipped by every struct).
    fn key(&self, id: NodeId) -> &'a [u8] {
        self.p.bytes(id).unwrap_or_default()
    }

    pub fn file(&mut self) -> Result<FrFile> {
        let root = self.p.root;
        if !matches!(self.p.node(root), Node::Dict(_)) {
            return Err("the pickle is not a dict".into());
        }
        let mut f = FrFile::default();
        for &(k, v) in self.p.pairs(root) {
            match self.key(k) {
                b"version" => f.version = self.lenient(v)?,
                b"comm_lib_version" => f.comm_lib_version = self.lenient(v)?,
                b"pg_config" => {
                    for &(id, c) in self.p.pairs(v) {
                        let id = self.lenient(id)?.text();
                        let c = self.pg_config(c)?;
                        f.pg_config.insert(id, c);
                    }
                }
                b"pg_status" => {
                    for &(id, s) in self.p.pairs(v) {
                        let id = self.lenient(id)?.text();
                        let s = self.pg_status(s)?;
                        f.pg_status.insert(id, s);
                    }
                }
                b"entries" => {
                    let items = self.p.items(v);
                    f.entries.reserve_exact(items.len());
                    for &e in items {
                        let e = self.entry(e)?;
                        f.entries.push(e);
                    }
                }
                _ => {}
            }
        }
        Ok(f)
    }

    fn pg_config(&mut self, id: NodeId) -> Result<PgConfig> {
        let mut c = PgConfig::default();
        for &(k, v) in self.p.pairs(id) {
            match self.key(k) {
                b"name" => c.name = self.lenient(v)?,
                b"desc" => c.desc = self.lenient(v)?,
                b"ranks" => {
                    c.ranks = match self.p.node(v) {
                        Node::Str(_) => Ranks::Text(self.string(v)?.unwrap_or_default()),
                        Node::List(_) | Node::Tuple(_) => Ranks::List(self.ints(v)?),
                        _ => Ranks::None,
                    }
                }
                _ => {}
            }
        }
        Ok(c)
    }

    fn pg_status(&mut self, id: NodeId) -> Result<PgStatus> {
        let mut s = PgStatus::default();
        for &(k, v) in self.p.pairs(id) {
            let n = self.int(v).unwrap_or_default();
            match self.key(k) {
                b"last_enqueued_collective" => s.last_enqueued_collective = n,
                b"last_started_collective" => s.last_started_collective = n,
                b"last_completed_collective" => s.last_completed_collective = n,
                _ => {}
            }
        }
        Ok(s)
    }

    fn entry(&mut self, id: NodeId) -> Result<FrEntry> {
        let pairs = self.p.pairs(id);
        self.spend(pairs.len() + 1)?;
        let mut e = FrEntry::default();
        let (mut seq_id, mut have_collective_seq) = (None, false);
        for &(k, v) in pairs {
            match self.key(k) {
                b"record_id" => e.record_id = self.int(v).unwrap_or_default(),
                b"pg_id" => e.pg_id = self.int(v).unwrap_or_default(),
                b"process_group" => e.process_group = self.shared_strings(v)?,
                b"collective_seq_id" => {
                    have_collective_seq = true;
                    e.collective_seq_id = self.int(v).unwrap_or_default();
                }
                // The name before 2.2, read when the newer one is absent.
                b"seq_id" => seq_id = self.int(v),
                b"p2p_seq_id" => e.p2p_seq_id = self.int(v).unwrap_or_default(),
                b"op_id" => e.op_id = self.int(v).unwrap_or_default(),
                b"profiling_name" => e.profiling_name = self.shared_string(v)?.unwrap_or_default(),
                b"input_sizes" => e.input_sizes = self.sizes(v)?,
                b"input_dtypes" => e.input_dtypes = self.shared_strings(v)?,
                b"output_sizes" => e.output_sizes = self.sizes(v)?,
                b"output_dtypes" => e.output_dtypes = self.shared_strings(v)?,
                b"state" => e.state = self.shared_string(v)?.unwrap_or_default(),
                b"time_created_ns" => e.time_created_ns = self.int(v),
                b"time_discovered_started_ns" => e.time_discovered_started_ns = self.int(v),
                b"time_discovered_completed_ns" => e.time_discovered_completed_ns = self.int(v),
                b"retired" => e.retired = matches!(self.p.node(v), Node::Bool(true)),
                b"timeout_ms" => e.timeout_ms = self.int(v),
                b"is_p2p" => e.is_p2p = matches!(self.p.node(v), Node::Bool(true)),
                b"frames" => {
                    let items = self.p.items(v);
                    self.spend(items.len())?;
                    e.frames.reserve_exact(items.len());
                    for &f in items {
                        let f = self.shared_frame(f)?;
                        e.frames.push(f);
                    }
                }
                _ => {}
            }
        }
        if let (Some(s), false) = (seq_id, have_collective_seq) {
            e.collective_seq_id = s;
        }
        Ok(e)
    }

    /// A frame dict as a shared `Arc<Frame>` (decoded once per node).
    fn shared_frame(&mut self, id: NodeId) -> Result<Arc<Frame>> {
        if let Some(f) = self.shared_frames.get(&id) {
            return Ok(f.clone());
        }
        let f = Arc::new(self.frame(id)?);
        self.shared_frames.insert(id, f.clone());
        Ok(f)
    }

    fn frame(&mut self, id: NodeId) -> Result<Frame> {
        let mut f = Frame::default();
        for &(k, v) in self.p.pairs(id) {
            match self.key(k) {
                b"name" => f.name = self.string(v)?.unwrap_or_default(),
                b"filename" => f.filename = self.string(v)?.unwrap_or_default(),
                b"line" => f.line = self.int(v).unwrap_or_default(),
                _ => {}
            }
        }
        Ok(f)
    }
}
