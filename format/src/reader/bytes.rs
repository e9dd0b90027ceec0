//! Little-endian fields read at an offset: every part of the reader reads the file through these.

use crate::layout::SLOT_SIZE;

pub(super) fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

pub(super) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

pub(super) fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// A field of one slot (`o` is a constant offset inside it, so the check folds away).
#[inline(always)]
pub(super) fn slot_u64(s: &[u8; SLOT_SIZE], o: usize) -> u64 {
    u64::from_le_bytes(s[o..o + 8].try_into().expect("8 bytes inside the slot"))
}

#[inline(always)]
pub(super) fn slot_u32(s: &[u8; SLOT_SIZE], o: usize) -> u32 {
    u32::from_le_bytes(s[o..o + 4].try_into().expect("4 bytes inside the slot"))
}

pub(super) fn i32_at(b: &[u8], o: usize) -> i32 {
    u32_at(b, o) as i32
}
