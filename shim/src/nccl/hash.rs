//! NCCL's 64-bit hash (`getHash`, nccl-facts §4.4), reimplemented so the shim's uniqueId hash
//! equals the `commHash` NCCL logs as "commId 0x…" and hands the profiler plugin as `commId`:
//! shim records, profiler records and other ranks' records then join on one key.

/// The two-word accumulator NCCL's hash threads through each `eat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hasher {
    acc: [u64; 2],
}

impl Default for Hasher {
    fn default() -> Self {
        Self::new()
    }
}

impl Hasher {
    pub const fn new() -> Self {
        Self { acc: [1, 1] }
    }

    /// Mixes in `bytes`: the length first, then each (zero-padded, little-endian) 8-byte chunk.
    pub fn eat(&mut self, bytes: &[u8]) -> &mut Self {
        let [mut a0, mut a1] = self.acc;
        a0 ^= bytes.len() as u64;
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            a0 = a0.wrapping_add(a1);
            a1 ^= a0;
            a0 ^= a0 >> 31;
            a0 = a0.wrapping_mul(0x9de6_2bbc_8cef_3ce3);
            a1 ^= a1 >> 32;
            a1 = a1.wrapping_mul(0x485c_d631_1b59_9e79);
            a0 = a0.wrapping_add(u64::from_le_bytes(w));
        }
        self.acc = [a0, a1];
        self
    }

    pub fn digest(&self) -> u64 {
        let mut h = self.acc[0];
        h ^= h >> 31;
        h = h.wrapping_mul(0xbac3_bd56_2846_de6b);
        h = h.wrapping_add(self.acc[1]);
        h ^= h >> 32;
        h.wrapping_mul(0x995a_187a_14e7_b445)
    }
}

/// `getHash(bytes, len)`.
pub fn get_hash(bytes: &[u8]) -> u64 {
    Hasher::new().eat(bytes).digest()
}

/// The `commHash` of a communicator made by `ncclCommSplit`: parent hash, the parent's child
/// count and the color, each eaten separately.
pub fn split_hash(parent: u64, child_count: i32, color: i32) -> u64 {
    Hasher::new()
        .eat(&parent.to_le_bytes())
        .eat(&child_count.to_le_bytes())
        .eat(&color.to_le_bytes())
        .digest()
}

/// The first 40 bytes of a uniqueId as five little-endian words (magic, root sockaddr, nRanks).
pub fn uid_words(id: &[u8; 128]) -> [u64; 5] {
    let mut out = [0u64; 5];
    for (i, w) in out.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&id[i * 8..i * 8 + 8]);
        *w = u64::from_le_bytes(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-computed reference: one eat of the 8 bytes `01 00 .. 00`, step by step.
    #[test]
    fn one_word_by_hand() {
        // acc = {1, 1}; acc0 ^= 8 -> 9
        // acc0 += acc1 -> 10; acc1 ^= acc0 -> 11; acc0 ^= acc0 >> 31 -> 10
        let mut a0: u64 = 10u64.wrapping_mul(0x9de6_2bbc_8cef_3ce3);
        let mut a1: u64 = 11; // 11 >> 32 == 0
        a1 = a1.wrapping_mul(0x485c_d631_1b59_9e79);
        a0 = a0.wrapping_add(1);
        // digest
        let mut h = a0;
        h ^= h >> 31;
        h = h.wrapping_mul(0xbac3_bd56_2846_de6b);
        h = h.wrapping_add(a1);
        h ^= h >> 32;
        h = h.wrapping_mul(0x995a_187a_14e7_b445);
        assert_eq!(get_hash(&1u64.to_le_bytes()), h);
        // The same value as a literal, computed independently (Python big-int arithmetic masked to
        // 64 bits), so a change to a constant above is caught too.
        assert_eq!(h, 0x4c4a_56a0_611d_2ee2);
    }

    #[test]
    fn full_unique_id_vectors() {
        // Independently computed (Python) for the 128-byte id NCCL hashes into commHash.
        assert_eq!(get_hash(&[0u8; 128]), 0xcc97_6ec6_c24b_b53c);
        let ramp: Vec<u8> = (0u8..128).collect();
        assert_eq!(get_hash(&ramp), 0x6afe_1cc1_7717_e1f4);
    }

    #[test]
    fn partial_chunks_are_zero_padded_but_length_matters() {
        // 3 bytes vs the same bytes padded to 8: same chunk value, different length -> different hash.
        let a = get_hash(&[1, 2, 3]);
        let b = get_hash(&[1, 2, 3, 0, 0, 0, 0, 0]);
        assert_ne!(a, b);
        let mut h = Hasher::new();
        h.eat(&[1, 2, 3]);
        assert_eq!(h.digest(), a);
    }

    #[test]
    fn uid_words_are_little_endian() {
        let mut id = [0u8; 128];
        id[0] = 0x80;
        id[7] = 0x02;
        id[8] = 2; // AF_INET
        id[36] = 4;
        let w = uid_words(&id);
        assert_eq!(w[0], 0x0200_0000_0000_0080);
        assert_eq!(w[1] & 0xffff, 2);
        assert_eq!(w[4] >> 32, 4); // nRanks at byte 36 is the high half of word 4
    }
}
