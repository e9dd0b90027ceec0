//! The allocator of the `ncclshim` executable (never of the recorders, which run inside the
//! host's process on its allocator), and its tuning.
//!
//! The readers decode thousands of dumps or summaries, each into buffers of a few hundred KB
//! that live only until the compact model is built, and keep a small part of each. Under
//! glibc's malloc what was freed stayed resident between what was kept: the report on 16,384
//! ranks' summaries held 748 MB for 360 MB of live heap (BENCHMARKS.md, "Summaries", second
//! pass). mimalloc (v2), without transparent huge pages on its segments (the crate's `no_thp`: a
//! 2 MB page kept resident for a few live KB), holds 503 MB there; the direct read of 16,384
//! ranks' dumps takes 1.39 GB for glibc's 1.31, in less time. (Handing freed pages back at once,
//! mimalloc's `purge_delay` 0, held 432 MB but doubled the direct read's time on 1,024 ranks in
//! page faults: not taken.)
//!
//! glibc's `malloc` still serves the C libraries inside the executable (zstd's decompression
//! contexts, one per summary read): large blocks from the heap and freed tops kept, so each
//! summary does not pay for zeroed pages again (a third of `report`'s CPU over 1,024 ranks was
//! page faults when the Rust side was on glibc too; BENCHMARKS.md, "CLI at scale").

/// The executable's allocator (`#[global_allocator]` in a library is the binary's: this crate
/// is linked into the `ncclshim` executable and into the tests that use it).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Blocks up to this size come from glibc's heap (glibc: default 128 KB, at most 32 MB).
const MMAP_THRESHOLD: i32 = 16 << 20;
/// Freed memory at glibc's heap top is returned to the kernel only beyond this much.
const TRIM_THRESHOLD: i32 = 256 << 20;

/// Tunes glibc's allocator for the C libraries' short-lived large buffers; call once, first
/// thing in `main`.
pub fn tune() {
    // SAFETY: `mallopt` only changes glibc's parameters; it is called before any other thread
    // exists, with parameters glibc documents. A refused value (returns 0) leaves glibc's
    // defaults: slower, never wrong.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
