//! Reading an `ncclCollConfig_t` (NCCL 2.31's per-collective configuration, nccl.h 2.32.3
//! `ncclCollConfig_v23200`) the way NCCL does: `size` first, then only fields inside `size`
//! bytes, and nothing past the header unless the magic is NCCL's (NCCL rejects such a config
//! itself). The result is the fixed-width `collConfig` record (`schema.rs`), not a blob: these
//! calls are collectives, made as often as any, and the blob arena never wraps.
//!
//! Recorded: the resource tuning (min/max/NVLS CTAs, cluster size, CTA policy), whether an
//! unsatisfiable algorithm selection is an error, and `userProfilerTag`, the application's
//! name for the operation that NCCL hands profiler plugins as v7's `userTag`. Not recorded: the
//! algorithm selection string and the vendor extension list (pointers to text of any length),
//! and the launch-completion event (a handle that means nothing outside the process).

use ncclshim_dump::schema::args;
use std::ffi::c_void;

/// `NCCL_API_MAGIC`.
const MAGIC: u32 = 0xcafe_beef;
/// `NCCL_CONFIG_UNDEF_INT`.
const UNDEF_INT: i32 = i32::MIN;
/// What the record holds for a field the struct does not reach or leaves unset.
const ABSENT: u64 = u64::MAX;

/// Field offsets in `ncclCollConfig_v23200` (x86_64; checked against the 2.32.3 header with
/// `offsetof`: size 72).
mod off {
    pub const MIN_CTAS: usize = 24;
    pub const MAX_CTAS: usize = 28;
    pub const NVLS_CTAS: usize = 32;
    pub const CGA_CLUSTER_SIZE: usize = 36;
    pub const FORCE_ALG_SELECTION: usize = 48;
    pub const CTA_POLICY: usize = 52;
    pub const USER_PROFILER_TAG: usize = 56;
}

/// # Safety
/// `base + off .. + size_of::<T>()` must be readable.
unsafe fn rd<T: Copy>(base: *const u8, off: usize) -> T {
    base.add(off).cast::<T>().read_unaligned()
}

/// The record of `cfg` for the collective numbered `seq`, or None for a NULL config (the plain
/// collective: nothing to add).
///
/// # Safety
/// `cfg` must be null or point to at least `cfg->size` readable bytes (NCCL reads it too).
pub unsafe fn read(cfg: *const c_void, seq: u64) -> Option<args::CollConfig> {
    if cfg.is_null() {
        return None;
    }
    let base = cfg.cast::<u8>();
    let size: usize = rd(base, 0);
    let mut r = args::CollConfig {
        seq,
        user_tag: ABSENT,
        min_ctas: ABSENT,
        max_ctas: ABSENT,
        nvls_ctas: ABSENT,
        cga_cluster_size: ABSENT,
        cta_policy: ABSENT,
        force_alg_selection: ABSENT,
        version: ABSENT,
    };
    if size < 16 || rd::<u32>(base, 8) != MAGIC {
        // Not initialized with NCCL_COLLCONFIG_INITIALIZER: NCCL refuses it; the rest is garbage.
        return Some(r);
    }
    r.version = u64::from(rd::<u32>(base, 12));
    let int = |at: usize| -> u64 {
        if at + 4 > size {
            return ABSENT;
        }
        // SAFETY: inside `size` bytes, which the caller guarantees readable.
        let v: i32 = unsafe { rd(base, at) };
        if v == UNDEF_INT {
            ABSENT
        } else {
            v as i64 as u64
        }
    };
    r.min_ctas = int(off::MIN_CTAS);
    r.max_ctas = int(off::MAX_CTAS);
    r.nvls_ctas = int(off::NVLS_CTAS);
    r.cga_cluster_size = int(off::CGA_CLUSTER_SIZE);
    r.force_alg_selection = int(off::FORCE_ALG_SELECTION);
    r.cta_policy = int(off::CTA_POLICY);
    if off::USER_PROFILER_TAG + 8 <= size {
        r.user_tag = rd(base, off::USER_PROFILER_TAG);
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config as NCCL_COLLCONFIG_INITIALIZER (2.32.3) leaves it, `size` bytes long.
    fn initialized(size: usize) -> [u64; 9] {
        let mut buf = [0u64; 9];
        let p = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: buf is 72 bytes; every write lies inside it.
        unsafe {
            p.cast::<usize>().write(size);
            p.add(8).cast::<u32>().write(MAGIC);
            p.add(12).cast::<u32>().write(23203);
            for at in [24, 28, 32, 36, 52] {
                p.add(at).cast::<i32>().write(UNDEF_INT);
            }
            p.add(48).cast::<i32>().write(1);
        }
        buf
    }

    fn set<T>(buf: &mut [u64; 9], at: usize, v: T) {
        // SAFETY: every offset used below plus its width is within 72 bytes.
        unsafe {
            buf.as_mut_ptr()
                .cast::<u8>()
                .add(at)
                .cast::<T>()
                .write_unaligned(v)
        }
    }

    #[test]
    fn an_initialized_config_reads_unset_fields_as_absent() {
        let c = initialized(72);
        // SAFETY: 72 readable bytes.
        let r = unsafe { read(c.as_ptr().cast(), 7) }.unwrap();
        assert_eq!((r.seq, r.version, r.user_tag), (7, 23203, 0));
        assert_eq!(r.force_alg_selection, 1);
        assert_eq!([r.min_ctas, r.max_ctas, r.cta_policy], [ABSENT; 3]);
    }

    #[test]
    fn set_fields_and_the_tag_are_read() {
        let mut c = initialized(72);
        set(&mut c, off::MIN_CTAS, 4i32);
        set(&mut c, off::MAX_CTAS, 16i32);
        set(&mut c, off::USER_PROFILER_TAG, 0x7a6u64);
        // SAFETY: 72 readable bytes.
        let r = unsafe { read(c.as_ptr().cast(), 0) }.unwrap();
        assert_eq!((r.min_ctas, r.max_ctas, r.user_tag), (4, 16, 0x7a6));
    }

    #[test]
    fn nothing_past_size_and_nothing_without_the_magic() {
        // A struct from a header that ends before the tag: the tag is not read.
        let mut c = initialized(56);
        set(&mut c, off::USER_PROFILER_TAG, 0x7a6u64);
        // SAFETY: 72 readable bytes.
        let r = unsafe { read(c.as_ptr().cast(), 0) }.unwrap();
        assert_eq!(r.user_tag, ABSENT);
        assert_eq!(r.force_alg_selection, 1);
        // A zeroed config (never initialized): only the header is looked at.
        let z = [0u64; 9];
        // SAFETY: as above.
        let r = unsafe { read(z.as_ptr().cast(), 3) }.unwrap();
        assert_eq!((r.seq, r.version, r.user_tag), (3, ABSENT, ABSENT));
        // SAFETY: a null config is allowed.
        assert!(unsafe { read(std::ptr::null(), 0) }.is_none());
    }
}
