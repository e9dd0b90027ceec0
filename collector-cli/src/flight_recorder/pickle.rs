//! A small pickle reader for the data-only pickles PyTorch's Flight Recorder writes (dicts,
//! lists, tuples, strings, numbers; protocols 2 to 5), producing a `serde_pickle::Value` that
//! `serde_pickle::from_value` turns into the typed structs of [`super::format`].
//!
//! Why not `serde_pickle::from_slice`: PyTorch's C++ pickler memoizes every string and frame
//! dict and refers back to them (`BINGET`) from later entries; serde-pickle 1.2 counts memo
//! references per value, and a memoized dict that itself holds references is cloned without
//! counting those, so it then refuses the real dumps with "recursive structure found" (or
//! drops the values, with `replace_recursive_structures`). Here every object lives once in an
//! arena and the memo holds its index, as Python's own unpickler does; the value tree is built
//! at the end. Class instances (`GLOBAL`, `REDUCE`) are refused: a Flight Recorder dump holds
//! none, and a reader of data must never run code.

use serde_pickle::{HashableValue, Value};
use std::collections::{BTreeMap, HashMap};

/// An object under construction.
enum Node {
    Scalar(Value),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Dict(Vec<(usize, usize)>),
}

/// Nesting beyond this is refused (no Flight Recorder dump nests more than a few levels; a
/// cycle would otherwise never end).
const MAX_DEPTH: usize = 64;

struct Machine<'a> {
    bytes: &'a [u8],
    pos: usize,
    arena: Vec<Node>,
    stack: Vec<usize>,
    marks: Vec<usize>,
    memo: HashMap<u32, usize>,
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

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(PickleError::Truncated {
                at: self.bytes.len(),
            }),
        }
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn line(&mut self) -> Result<&'a str> {
        let rest = &self.bytes[self.pos..];
        let Some(n) = rest.iter().position(|b| *b == b'\n') else {
            return Err(PickleError::Truncated {
                at: self.bytes.len(),
            });
        };
        self.pos += n + 1;
        std::str::from_utf8(&rest[..n]).or_else(|_| invalid("a text argument is not UTF-8"))
    }

    fn text(&mut self, n: usize) -> Result<()> {
        let b = self.take(n)?;
        let s = String::from_utf8_lossy(b).into_owned();
        self.push(Node::Scalar(Value::String(s)));
        Ok(())
    }

    fn push(&mut self, n: Node) {
        self.arena.push(n);
        self.stack.push(self.arena.len() - 1);
    }

    fn pop(&mut self) -> Result<usize> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return invalid("the pickle pops more than it pushed");
        }
        Ok(self.stack.pop().expect("checked above"))
    }

    fn pop_mark(&mut self) -> Result<Vec<usize>> {
        let Some(m) = self.marks.pop() else {
            return invalid("the pickle closes a mark it never opened");
        };
        Ok(self.stack.split_off(m.min(self.stack.len())))
    }

    fn top(&self) -> Result<usize> {
        match self.stack.last() {
            Some(t) => Ok(*t),
            None => invalid("the pickle refers to an empty stack"),
        }
    }

    fn get(&mut self, id: u32) -> Result<()> {
        match self.memo.get(&id) {
            Some(&i) => {
                self.stack.push(i);
                Ok(())
            }
            None => invalid(format!("the pickle refers to memo {id}, never stored")),
        }
    }

    fn put(&mut self, id: u32) -> Result<()> {
        let t = self.top()?;
        self.memo.insert(id, t);
        Ok(())
    }

    fn extend_list(&mut self, list: usize, items: Vec<usize>) -> Result<()> {
        match &mut self.arena[list] {
            Node::List(v) => {
                v.extend(items);
                Ok(())
            }
            _ => invalid("the pickle appends to something that is not a list"),
        }
    }

    fn set_items(&mut self, dict: usize, items: Vec<usize>) -> Result<()> {
        if !items.len().is_multiple_of(2) {
            return invalid("the pickle sets a key without a value");
        }
        match &mut self.arena[dict] {
            Node::Dict(v) => {
                v.extend(items.chunks(2).map(|kv| (kv[0], kv[1])));
                Ok(())
            }
            _ => invalid("the pickle sets items on something that is not a dict"),
        }
    }

    fn run(&mut self) -> Result<usize> {
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
                b'}' => self.push(Node::Dict(Vec::new())),
                b']' => self.push(Node::List(Vec::new())),
                b')' => self.push(Node::Tuple(Vec::new())),
                b'd' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Dict(Vec::new()));
                    let d = self.top()?;
                    self.set_items(d, items)?;
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Node::List(items));
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Node::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Node::Tuple(items));
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.top()?;
                    self.set_items(d, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let d = self.top()?;
                    self.set_items(d, items)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    let l = self.top()?;
                    self.extend_list(l, vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let l = self.top()?;
                    self.extend_list(l, items)?;
                }
                b'X' => {
                    let n = u32::from_le_bytes(self.le()?) as usize;
                    self.text(n)?;
                }
                0x8c | b'U' | b'C' => {
                    let n = usize::from(self.u8()?);
                    self.text(n)?;
                }
                0x8d | 0x8e => {
                    let n = usize::try_from(u64::from_le_bytes(self.le()?))
                        .or_else(|_| invalid("a string longer than memory"))?;
                    self.text(n)?;
                }
                b'T' | b'B' => {
                    let n = u32::from_le_bytes(self.le()?) as usize;
                    self.text(n)?;
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.push(Node::Scalar(Value::I64(i64::from(v))));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Node::Scalar(Value::I64(i64::from(v))));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.push(Node::Scalar(Value::I64(i64::from(v))));
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        usize::from(self.u8()?)
                    } else {
                        u32::from_le_bytes(self.le()?) as usize
                    };
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
                    self.push(Node::Scalar(Value::I64(v)));
                }
                b'I' | b'L' => {
                    let l = self.line()?.trim_end_matches('L');
                    let v = match l {
                        "01" => Value::Bool(true),
                        "00" => Value::Bool(false),
                        _ => Value::I64(l.parse().or_else(|_| invalid("an unreadable integer"))?),
                    };
                    self.push(Node::Scalar(v));
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.le()?);
                    self.push(Node::Scalar(Value::F64(v)));
                }
                b'F' => {
                    let v = self.line()?.parse().or_else(|_| invalid("an unreadable float"))?;
                    self.push(Node::Scalar(Value::F64(v)));
                }
                b'N' => self.push(Node::Scalar(Value::None)),
                0x88 => self.push(Node::Scalar(Value::Bool(true))),
                0x89 => self.push(Node::Scalar(Value::Bool(false))),
                b'q' => {
                    let id = u32::from(self.u8()?);
                    self.put(id)?;
                }
                b'r' => {
                    let id = u32::from_le_bytes(self.le()?);
                    self.put(id)?;
                }
                b'p' => {
                    let id = self.line()?.parse().or_else(|_| invalid("an unreadable memo id"))?;
                    self.put(id)?;
                }
                0x94 => {
                    let id = self.memo.len() as u32;
                    self.put(id)?;
                }
                b'h' => {
                    let id = u32::from(self.u8()?);
                    self.get(id)?;
                }
                b'j' => {
                    let id = u32::from_le_bytes(self.le()?);
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

    fn value(&self, i: usize, depth: usize) -> Result<Value> {
        if depth > MAX_DEPTH {
            return invalid("the pickle nests too deep (or refers to itself)");
        }
        Ok(match &self.arena[i] {
            Node::Scalar(v) => v.clone(),
            Node::List(v) => Value::List(
                v.iter()
                    .map(|c| self.value(*c, depth + 1))
                    .collect::<Result<_>>()?,
            ),
            Node::Tuple(v) => Value::Tuple(
                v.iter()
                    .map(|c| self.value(*c, depth + 1))
                    .collect::<Result<_>>()?,
            ),
            Node::Dict(kv) => {
                let mut m: BTreeMap<HashableValue, Value> = BTreeMap::new();
                for (k, v) in kv {
                    let key = self
                        .value(*k, depth + 1)?
                        .into_hashable()
                        .or_else(|_| invalid("a dict key that cannot be a key"))?;
                    m.insert(key, self.value(*v, depth + 1)?);
                }
                Value::Dict(m)
            }
        })
    }
}

/// Reads one pickle.
pub fn parse(bytes: &[u8]) -> Result<Value> {
    let mut m = Machine {
        bytes,
        pos: 0,
        arena: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    };
    let root = m.run()?;
    m.value(root, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memo_entries_are_read_whole() {
        // {"a": [d, d]} with d = {"k": 1} memoized once and referred back to (protocol 2).
        let p = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01]q\x02(}q\x03X\x01\x00\x00\x00kq\x04K\x01sh\x03es.";
        let v = parse(p).unwrap();
        let s = format!("{v:?}");
        assert_eq!(s.matches("I64(1)").count(), 2, "{s}");
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
    }

    #[test]
    fn negative_long1() {
        let v = parse(b"\x80\x02\x8a\x01\xff.").unwrap();
        assert_eq!(v, Value::I64(-1));
    }
}
