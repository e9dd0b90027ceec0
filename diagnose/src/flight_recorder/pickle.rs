//! A small pickle reader for the data-only pickles PyTorch's Flight Recorder writes (dicts,
//! lists, tuples, strings, numbers; protocols 2 to 5), into an arena of nodes that borrow the
//! input: a string is a slice of the pickle's bytes, never copied here, and a memoized object
//! (a string or a frame dict referred back to with `BINGET`) is one node shared by index, as
//! Python's own unpickler shares one object. [`super::decode`] builds the typed structs of
//! [`super::format`] straight from these nodes.
//!
//! Why not `serde_pickle`: PyTorch's C++ pickler memoizes every string and frame dict and
//! refers back to them from later entries; serde-pickle 1.2 refuses such shared dicts
//! ("recursive structure found"), and its `Value` tree (every string cloned, a `BTreeMap` per
//! dict) made a 2,000-entry dump cost about 100 ms (BENCHMARKS.md). Class instances (`GLOBAL`,
//! `REDUCE`, ...) are refused: a Flight Recorder dump holds none, and a reader of data must
//! never run code.
//!
//! Bounded on hostile input: every length is checked against the bytes left before anything
//! is allocated for it, the stack and arena grow at most one element per input byte, and memo
//! ids beyond the input's length (no honest pickler gets there) go to a map instead of a
//! vector indexed by them.

use std::collections::HashMap;

/// Index of a node in [`Pickle::nodes`].
pub type NodeId = u32;

/// One object of the pickle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Node<'a> {
    /// A text or bytes object: its bytes in the input (UTF-8 is checked by the reader of it).
    Str(&'a [u8]),
    Int(i64),
    Float(f64),
    Bool(bool),
    None,
    /// Index into [`Pickle::seqs`].
    List(u32),
    /// Index into [`Pickle::seqs`].
    Tuple(u32),
    /// Index into [`Pickle::dicts`].
    Dict(u32),
}

/// A pickle, read: its objects and the one it returns.
#[derive(Debug, Default)]
pub struct Pickle<'a> {
    pub nodes: Vec<Node<'a>>,
    /// Items of lists and tuples.
    pub seqs: Vec<Vec<NodeId>>,
    /// (key, value) pairs of dicts, in the order the pickle set them.
    pub dicts: Vec<Vec<(NodeId, NodeId)>>,
    pub root: NodeId,
}

impl<'a> Pickle<'a> {
    pub fn node(&self, id: NodeId) -> Node<'a> {
        self.nodes[id as usize]
    }

    /// The items of a list or tuple (none for anything else).
    pub fn items(&self, id: NodeId) -> &[NodeId] {
        match self.node(id) {
            Node::List(s) | Node::Tuple(s) => &self.seqs[s as usize],
            _ => &[],
        }
    }

    /// The (key, value) pairs of a dict (none for anything else).
    pub fn pairs(&self, id: NodeId) -> &[(NodeId, NodeId)] {
        match self.node(id) {
            Node::Dict(d) => &self.dicts[d as usize],
            _ => &[],
        }
    }

    /// The bytes of a string node.
    pub fn bytes(&self, id: NodeId) -> Option<&'a [u8]> {
        match self.node(id) {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Why a pickle could not be read, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickleError {
    /// The bytes end before the pickle does (a dump cut short while being written).
    Truncated {
        at: usize,
    },
    Invalid(String),
}

impl std::fmt::Display for PickleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PickleError::Truncated { at } => write!(f, "the pickle ends early, at byte {at}"),
            PickleError::Invalid(s) => f.write_str(s),
        }
    }
}

type Result<T> = std::result::Result<T, PickleError>;

fn invalid<T>(s: impl Into<String>) -> Result<T> {
    Err(PickleError::Invalid(s.into()))
}

/// The memo: a vector indexed by id for the dense ids picklers write (0, 1, 2...), a map for
/// ids a vector that size would be too big for.
#[derive(Default)]
struct Memo {
    dense: Vec<Option<NodeId>>,
    sparse: HashMap<u32, NodeId>,
    /// Distinct ids stored (`MEMOIZE` stores at this id, as Python's `len(memo)`).
    len: u32,
}

impl Memo {
    fn put(&mut self, id: u32, node: NodeId, input_len: usize) {
        let i = id as usize;
        let fresh = if i < input_len {
            if self.dense.len() <= i {
                self.dense.resize(i + 1, None);
            }
            self.dense[i].replace(node).is_none()
        } else {
            self.sparse.insert(id, node).is_none()
        };
        if fresh {
            self.len = self.len.saturating_add(1);
        }
    }

    fn get(&self, id: u32) -> Option<NodeId> {
        match self.dense.get(id as usize) {
            Some(n) => *n,
            None => self.sparse.get(&id).copied(),
        }
    }
}

struct Machine<'a> {
    bytes: &'a [u8],
    pos: usize,
    out: Pickle<'a>,
    stack: Vec<NodeId>,
    marks: Vec<usize>,
    memo: Memo,
}

impl<'a> Machine<'a> {
    fn truncated<T>(&self) -> Result<T> {
        Err(PickleError::Truncated {
            at: self.bytes.len(),
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        // `n` is checked against what is left before it is used: a hostile length never
        // allocates or reads past the end.
        if n > self.bytes.len() - self.pos {
            return self.truncated();
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        match self.bytes.get(self.pos) {
            Some(b) => {
                self.pos += 1;
                Ok(*b)
            }
            None => self.truncated(),
        }
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.le()?))
    }

    fn line(&mut self) -> Result<&'a str> {
        let rest = &self.bytes[self.pos..];
        let Some(n) = rest.iter().position(|b| *b == b'\n') else {
            return self.truncated();
        };
        self.pos += n + 1;
        std::str::from_utf8(&rest[..n]).or_else(|_| invalid("a text argument is not UTF-8"))
    }

    fn new_node(&mut self, n: Node<'a>) -> NodeId {
        // At most one node per input byte, and `parse` refuses inputs of 4 GB or more: the
        // index fits a u32.
        let id = self.out.nodes.len() as NodeId;
        self.out.nodes.push(n);
        id
    }

    fn push(&mut self, n: Node<'a>) {
        let id = self.new_node(n);
        self.stack.push(id);
    }

    fn push_seq(&mut self, items: Vec<NodeId>, tuple: bool) {
        let s = self.out.seqs.len() as u32;
        self.out.seqs.push(items);
        self.push(if tuple { Node::Tuple(s) } else { Node::List(s) });
    }

    fn push_dict(&mut self) {
        let d = self.out.dicts.len() as u32;
        self.out.dicts.push(Vec::new());
        self.push(Node::Dict(d));
    }

    fn text(&mut self, n: usize) -> Result<()> {
        let b = self.take(n)?;
        self.push(Node::Str(b));
        Ok(())
    }

    fn pop(&mut self) -> Result<NodeId> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return invalid("the pickle pops more than it pushed");
        }
        match self.stack.pop() {
            Some(t) => Ok(t),
            None => invalid("the pickle pops more than it pushed"),
        }
    }

    /// The items above the last mark, removed from the stack (the stack's tail: no copy of
    /// what lies below).
    fn pop_mark(&mut self) -> Result<std::vec::Drain<'_, NodeId>> {
        let Some(m) = self.marks.pop() else {
            return invalid("the pickle closes a mark it never opened");
        };
        let m = m.min(self.stack.len());
        Ok(self.stack.drain(m..))
    }

    fn top(&self) -> Result<NodeId> {
        match self.stack.last() {
            Some(t) => Ok(*t),
            None => invalid("the pickle refers to an empty stack"),
        }
    }

    fn get(&mut self, id: u32) -> Result<()> {
        match self.memo.get(id) {
            Some(i) => {
                self.stack.push(i);
                Ok(())
            }
            None => invalid(format!("the pickle refers to memo {id}, never stored")),
        }
    }

    fn put(&mut self, id: u32) -> Result<()> {
        let t = self.top()?;
        self.memo.put(id, t, self.bytes.len());
        Ok(())
    }

    fn list_of(&self, list: NodeId) -> Result<usize> {
        match self.out.nodes[list as usize] {
            Node::List(s) => Ok(s as usize),
            _ => invalid("the pickle appends to something that is not a list"),
        }
    }

    fn dict_of(&self, dict: NodeId) -> Result<usize> {
        match self.out.nodes[dict as usize] {
            Node::Dict(d) => Ok(d as usize),
            _ => invalid("the pickle sets items on something that is not a dict"),
        }
    }

    /// `APPENDS` / `SETITEMS`: the items above the last mark go into the container below it.
    fn extend_below_mark(&mut self, dict: bool) -> Result<()> {
        let Some(&m) = self.marks.last() else {
            return invalid("the pickle closes a mark it never opened");
        };
        let m = m.min(self.stack.len());
        let Some(&target) = m.checked_sub(1).and_then(|i| self.stack.get(i)) else {
            return invalid("the pickle refers to an empty stack");
        };
        if dict {
            let d = self.dict_of(target)?;
            if !(self.stack.len() - m).is_multiple_of(2) {
                return invalid("the pickle sets a key without a value");
            }
            let items = self.pop_mark()?;
            let mut pairs = Vec::new();
            let mut it = items;
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            drop(it);
            self.out.dicts[d].extend(pairs);
        } else {
            let s = self.list_of(target)?;
            let items = self.pop_mark()?;
            let items: Vec<NodeId> = items.collect();
            self.out.seqs[s].extend(items);
        }
        Ok(())
    }

    /// `DICT`: the items above the mark become a new dict.
    fn dict_from_mark(&mut self) -> Result<()> {
        if let Some(&m) = self.marks.last() {
            if !(self.stack.len() - m.min(self.stack.len())).is_multiple_of(2) {
                return invalid("the pickle sets a key without a value");
            }
        }
        let mut pairs = Vec::new();
        let mut it = self.pop_mark()?;
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            pairs.push((k, v));
        }
        drop(it);
        let d = self.out.dicts.len() as u32;
        self.out.dicts.push(pairs);
        self.push(Node::Dict(d));
        Ok(())
    }

    /// `TUPLE1` to `TUPLE3`: the top `n` items become a tuple.
    fn tuple_of_top(&mut self, n: usize) -> Result<()> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() < floor + n {
            return invalid("the pickle pops more than it pushed");
        }
        let items = self.stack.split_off(self.stack.len() - n);
        self.push_seq(items, true);
        Ok(())
    }

    /// `LONG1` / `LONG4`: an integer of the next `n` bytes.
    fn long(&mut self, n: usize) -> Result<()> {
        let b = self.take(n)?;
        if n > 8 {
            return invalid(format!("an integer of {n} bytes (more than 64 bits)"));
        }
        // Little-endian two's complement of n bytes, sign-extended.
        let mut v: i64 = if b.last().is_some_and(|x| x & 0x80 != 0) {
            -1
        } else {
            0
        };
        for (i, x) in b.iter().enumerate() {
            v &= !(0xff << (8 * i));
            v |= i64::from(*x) << (8 * i);
        }
        self.push(Node::Int(v));
        Ok(())
    }

    /// `INT` / `LONG` (protocol 0): an integer in a line of text, `01` / `00` for a bool.
    fn int_line(&mut self) -> Result<()> {
        let l = self.line()?.trim_end_matches('L');
        let v = match l {
            "01" => Node::Bool(true),
            "00" => Node::Bool(false),
            _ => Node::Int(l.parse().or_else(|_| invalid("an unreadable integer"))?),
        };
        self.push(v);
        Ok(())
    }

    /// The pickle machine: one opcode at a time until `STOP`, the root object. One `match` over
    /// the opcodes on purpose (about 130 lines): it is the instruction set, read side by side
    /// with the pickle format's table (CPython's `Lib/pickletools.py`); each arm is the opcode's
    /// few lines, and those that take more are methods above.
    fn run(&mut self) -> Result<NodeId> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return invalid(format!("pickle protocol {proto} is newer than 5"));
                    }
                }
                0x95 => {
                    self.le::<8>()?;
                }
                b'.' => return self.pop(),
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.stack.push(t);
                }
                b'}' => self.push_dict(),
                b']' => self.push_seq(Vec::new(), false),
                b')' => self.push_seq(Vec::new(), true),
                b'd' => self.dict_from_mark()?,
                b'l' | b't' => {
                    let items: Vec<NodeId> = self.pop_mark()?.collect();
                    self.push_seq(items, op == b't');
                }
                0x85..=0x87 => self.tuple_of_top(usize::from(op - 0x84))?,
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.dict_of(self.top()?)?;
                    self.out.dicts[d].push((k, v));
                }
                b'u' => self.extend_below_mark(true)?,
                b'a' => {
                    let v = self.pop()?;
                    let s = self.list_of(self.top()?)?;
                    self.out.seqs[s].push(v);
                }
                b'e' => self.extend_below_mark(false)?,
                b'X' | b'T' | b'B' => {
                    let n = self.u32()? as usize;
                    self.text(n)?;
                }
                0x8c | b'U' | b'C' => {
                    let n = usize::from(self.u8()?);
                    self.text(n)?;
                }
                0x8d | 0x8e => {
                    // A length beyond what is left is a cut-off pickle, whatever its size.
                    let n = usize::try_from(u64::from_le_bytes(self.le()?)).unwrap_or(usize::MAX);
                    self.text(n)?;
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.push(Node::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Node::Int(i64::from(v)));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.push(Node::Int(i64::from(v)));
                }
                0x8a => {
                    let n = usize::from(self.u8()?);
                    self.long(n)?;
                }
                0x8b => {
                    let n = self.u32()? as usize;
                    self.long(n)?;
                }
                b'I' | b'L' => self.int_line()?,
                b'G' => {
                    let v = f64::from_be_bytes(self.le()?);
                    self.push(Node::Float(v));
                }
                b'F' => {
                    let v = self.line()?.parse().or_else(|_| invalid("an unreadable float"))?;
                    self.push(Node::Float(v));
                }
                b'N' => self.push(Node::None),
                0x88 => self.push(Node::Bool(true)),
                0x89 => self.push(Node::Bool(false)),
                b'q' => {
                    let id = u32::from(self.u8()?);
                    self.put(id)?;
                }
                b'r' => {
                    let id = self.u32()?;
                    self.put(id)?;
                }
                b'p' => {
                    let id = self.line()?.parse().or_else(|_| invalid("an unreadable memo id"))?;
                    self.put(id)?;
                }
                0x94 => {
                    let id = self.memo.len;
                    self.put(id)?;
                }
                b'h' => {
                    let id = u32::from(self.u8()?);
                    self.get(id)?;
                }
                b'j' => {
                    let id = self.u32()?;
                    self.get(id)?;
                }
                b'g' => {
                    let id = self.line()?.parse().or_else(|_| invalid("an unreadable memo id"))?;
                    self.get(id)?;
                }
                b'c' | 0x93 | b'R' | b'b' | 0x81 | 0x92 | b'i' | b'o' => {
                    return invalid(format!(
                        "the pickle builds a Python object (opcode {:?} at byte {at}); a Flight Recorder dump holds only data",
                        op as char
                    ))
                }
                other => {
                    return invalid(format!(
                        "not a pickle this reader knows: opcode 0x{other:02x} at byte {at}"
                    ))
                }
            }
        }
    }
}

/// Reads one pickle.
pub fn parse(bytes: &[u8]) -> Result<Pickle<'_>> {
    if u32::try_from(bytes.len()).is_err() {
        // Node ids are u32 and each byte makes at most one node.
        return invalid("a pickle of 4 GB or more");
    }
    let mut m = Machine {
        bytes,
        pos: 0,
        // About one node per 8 bytes in PyTorch's dumps (the synthetic 2,000-entry dump: 54,053
        // nodes in 443,484 bytes): reserved once instead of grown by doubling.
        out: Pickle {
            nodes: Vec::with_capacity(bytes.len() / 6),
            ..Pickle::default()
        },
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Memo::default(),
    };
    m.out.root = m.run()?;
    Ok(m.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memo_entries_are_one_node() {
        // {"a": [d, d]} with d = {"k": 1} memoized once and referred back to (protocol 2).
        let p = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01]q\x02(}q\x03X\x01\x00\x00\x00kq\x04K\x01sh\x03es.";
        let v = parse(p).unwrap();
        let (k, list) = v.pairs(v.root)[0];
        assert_eq!(v.bytes(k), Some(&b"a"[..]));
        let items = v.items(list);
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], items[1], "one object, referred to twice");
        let (k, one) = v.pairs(items[1])[0];
        assert_eq!((v.bytes(k), v.node(one)), (Some(&b"k"[..]), Node::Int(1)));
    }

    #[test]
    fn truncated_and_garbage() {
        assert!(matches!(
            parse(b"\x80\x02}q\x00X\x05\x00\x00"),
            Err(PickleError::Truncated { .. })
        ));
        assert!(matches!(
            parse(b"\x80\x02\xff"),
            Err(PickleError::Invalid(_))
        ));
        assert!(matches!(
            parse(b"\x80\x02cos\nsystem\n"),
            Err(PickleError::Invalid(_))
        ));
        // A hostile length (2^64 - 1 bytes of string) is a cut-off pickle, not an allocation.
        assert!(matches!(
            parse(b"\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\xff"),
            Err(PickleError::Truncated { .. })
        ));
        // A hostile memo id (4 G) is stored without a 4 G vector.
        let v = parse(b"\x80\x02K\x07r\xff\xff\xff\xff0j\xff\xff\xff\xff.").unwrap();
        assert_eq!(v.node(v.root), Node::Int(7));
    }

    #[test]
    fn negative_long1() {
        let v = parse(b"\x80\x02\x8a\x01\xff.").unwrap();
        assert_eq!(v.node(v.root), Node::Int(-1));
    }

    #[test]
    fn random_bytes_never_panic() {
        // A small xorshift over pickle-like bytes (opcodes this reader knows, mixed with
        // noise): any outcome but a panic is fine.
        let ops = b"\x80\x02}]()dltsuaeXK\x8aqhjr\x94\x85\x86\x87.N\x88\x89J0120";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut p = vec![0x80, 2];
            let len = (x % 64) as usize;
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p.push(if x.is_multiple_of(3) {
                    (x >> 8) as u8
                } else {
                    ops[(x >> 8) as usize % ops.len()]
                });
            }
            let _ = parse(&p);
        }
    }
}
