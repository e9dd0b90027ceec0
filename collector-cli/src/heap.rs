//! Heap tuning for the CLI process: the readers decode thousands of dumps, each into buffers of
//! a few hundred KB (ring slots, records, call events) that live only until the dump's compact
//! model is built. glibc serves blocks that large with fresh `mmap`s and returns freed heap
//! tops to the kernel, so every dump paid for zeroed pages again: a third of the CPU time of
//! `report` over 1,024 ranks was page faults and `clear_page` (BENCHMARKS.md, "CLI at scale").
//! Keeping freed memory in the heap lets the next dump reuse the same, already mapped pages;
//! peak memory still follows the largest working set, not the number of dumps.
//!
//! Since the executable allocates with mimalloc (`main.rs`), this tunes only what C libraries
//! inside it take from glibc's `malloc` (zstd's decompression contexts, one per summary read).

/// Blocks up to this size come from the heap (glibc: default 128 KB, at most 32 MB).
const MMAP_THRESHOLD: i32 = 16 << 20;
/// Freed memory at the heap's top is returned to the kernel only beyond this much.
const TRIM_THRESHOLD: i32 = 256 << 20;

/// Tunes the allocator for many short-lived large buffers; call once, first thing in `main`.
pub fn reuse_freed_memory() {
    // SAFETY: `mallopt` only changes allocator parameters; it is called before any other
    // thread exists, with parameters glibc documents.
    // A refused value (returns 0) leaves glibc's defaults: slower, never wrong.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
