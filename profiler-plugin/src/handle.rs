//! Event handles without allocation. The `void*` the plugin gives NCCL for an event is never a
//! pointer: it is an integer that says where the event's start record lives, so stop and state
//! callbacks (from any thread) can name it in their own records, and it is never dereferenced
//! (a handle that came from another process through PXN is harmless).
//!
//! ```text
//! bits  0..40  seq of the start record in its ring (modulo 2^40)
//! bits 40..48  ring + 1 (never 0, so a handle is never NULL)
//! bits 48..59  in-flight table entry + 1 (Coll, P2p and their KernelCh children), 0 = none
//! bits 59..63  event type bit index (0 = Group ... 15 = KernelPhase)
//! bit  63      FOREIGN: the event belongs to another process's communicator (PXN)
//! ```
//!
//! Records name an event by `SlotRef::encode()` of its start record with the seq taken modulo
//! 2^40 (over a trillion records per thread): [`Handle::record_ref`]. The [`raw`] functions
//! answer the hot path's questions from the integer itself, without decoding it.

use ncclshim_dump::SlotRef;

const SEQ_BITS: u32 = 40;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const RING_SHIFT: u32 = 40;
const INFLIGHT_SHIFT: u32 = 48;
const INFLIGHT_MASK: u64 = 0x7ff;
const TYPE_SHIFT: u32 = 59;
const FOREIGN_BIT: u64 = 1 << 63;

/// A decoded handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    pub slot: SlotRef,
    /// Index into the in-flight table, when the event has an entry.
    pub inflight: Option<u16>,
    /// Event type bit index.
    pub type_index: u8,
    pub foreign: bool,
}

impl Handle {
    #[inline(always)]
    pub fn encode(self) -> u64 {
        let ring = u64::from(self.slot.ring.saturating_add(1).min(255));
        let inflight = self.inflight.map_or(0, |i| u64::from(i) + 1) & INFLIGHT_MASK;
        (self.slot.seq & SEQ_MASK)
            | ring << RING_SHIFT
            | inflight << INFLIGHT_SHIFT
            | u64::from(self.type_index & 0xf) << TYPE_SHIFT
            | if self.foreign { FOREIGN_BIT } else { 0 }
    }

    /// `None` for 0 (NCCL passes NULL when there is no parent).
    #[inline(always)]
    pub fn decode(v: u64) -> Option<Self> {
        let ring = (v >> RING_SHIFT) & 0xff;
        if ring == 0 {
            return None;
        }
        let inflight = (v >> INFLIGHT_SHIFT) & INFLIGHT_MASK;
        Some(Self {
            slot: SlotRef {
                ring: ring as u32 - 1,
                seq: v & SEQ_MASK,
            },
            inflight: (inflight != 0).then(|| (inflight - 1) as u16),
            type_index: ((v >> TYPE_SHIFT) & 0xf) as u8,
            foreign: v & FOREIGN_BIT != 0,
        })
    }

    /// What records store to name this event: `SlotRef::encode()` (seq modulo 2^40).
    #[inline(always)]
    pub fn record_ref(self) -> u64 {
        SlotRef {
            ring: self.slot.ring,
            seq: self.slot.seq & SEQ_MASK,
        }
        .encode()
    }
}

/// Questions about a handle answered from its bits, for the hot path.
pub mod raw {
    use super::*;

    /// One of our handles (NULL and foreign garbage have no ring field).
    #[inline(always)]
    pub fn is_handle(v: u64) -> bool {
        (v >> RING_SHIFT) & 0xff != 0
    }

    /// Its in-flight entry, if it has one.
    #[inline(always)]
    pub fn inflight(v: u64) -> Option<u16> {
        let field = (v >> INFLIGHT_SHIFT) & INFLIGHT_MASK;
        (field != 0).then(|| (field - 1) as u16)
    }

    #[inline(always)]
    pub fn type_index(v: u64) -> u8 {
        ((v >> TYPE_SHIFT) & 0xf) as u8
    }

    #[inline(always)]
    pub fn is_foreign(v: u64) -> bool {
        v & FOREIGN_BIT != 0
    }

    /// [`Handle::record_ref`] of a handle (`is_handle` must hold).
    #[inline(always)]
    pub fn record_ref(v: u64) -> u64 {
        ((v >> RING_SHIFT) & 0xff) << SlotRef::SEQ_BITS | (v & SEQ_MASK)
    }

    /// The same handle with another event type (a kernel channel named after its parent).
    #[inline(always)]
    pub fn with_type(v: u64, type_index: u8) -> u64 {
        (v & !(0xf << TYPE_SHIFT)) | u64::from(type_index & 0xf) << TYPE_SHIFT
    }
}

/// The record reference of a raw parent handle (0 for NULL).
pub fn parent_ref(raw: u64) -> u64 {
    Handle::decode(raw).map_or(0, Handle::record_ref)
}

/// The seq a record stores for its own handle, for matching against `record_ref`.
pub fn seq_of(seq: u64) -> u64 {
    seq & SEQ_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_record_ref_is_a_slot_ref() {
        for (ring, seq, inflight, ty, foreign) in [
            (0u32, 1u64, None, 1u8, false),
            (15, (1 << 40) - 1, Some(1023u16), 6, true),
            (253, 77, Some(0), 15, false),
        ] {
            let h = Handle {
                slot: SlotRef { ring, seq },
                inflight,
                type_index: ty,
                foreign,
            };
            let v = h.encode();
            assert_ne!(v, 0);
            assert_eq!(Handle::decode(v), Some(h));
            assert_eq!(SlotRef::decode(h.record_ref()), Some(SlotRef { ring, seq }));
            assert_eq!(parent_ref(v), h.record_ref());
            // The hot path's answers from the bits agree with the decoded handle.
            assert!(raw::is_handle(v));
            assert_eq!(raw::inflight(v), inflight);
            assert_eq!(raw::type_index(v), ty);
            assert_eq!(raw::is_foreign(v), foreign);
            assert_eq!(raw::record_ref(v), h.record_ref());
            let k = Handle::decode(raw::with_type(v, 6)).unwrap();
            assert_eq!((k.type_index, k.slot, k.inflight), (6, h.slot, inflight));
        }
        assert_eq!(Handle::decode(0), None);
        assert!(!raw::is_handle(0));
        assert_eq!(parent_ref(0), 0);
    }

    #[test]
    fn seq_is_taken_modulo_2_pow_40() {
        let h = Handle {
            slot: SlotRef {
                ring: 2,
                seq: (1 << 40) + 5,
            },
            inflight: None,
            type_index: 1,
            foreign: false,
        };
        assert_eq!(Handle::decode(h.encode()).unwrap().slot.seq, 5);
        assert_eq!(seq_of((1 << 40) + 5), 5);
    }
}
