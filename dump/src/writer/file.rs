//! The system calls around the dump file that both its creation and its growth make: the
//! error number, the `RLIMIT_FSIZE` check, the file's identity, prefaulting, the thread id.

pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Whether a file may reach `size` bytes under `RLIMIT_FSIZE`. Growing past the limit would
/// fail with EFBIG *and* send the process SIGXFSZ (whose default action kills it), so the
/// writer checks first and treats the limit like a full disk.
pub(super) fn within_file_size_limit(size: u64) -> bool {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut rl) } != 0 {
        return false;
    }
    rl.rlim_cur == libc::RLIM_INFINITY || size <= rl.rlim_cur
}

/// `(st_dev, st_ino)` of an open file.
pub(super) fn file_id_of(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open and st is a valid out-pointer.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Faults `[base, base + len)` of the mapping in without dirtying it (`MADV_POPULATE_READ`,
/// Linux 5.14+; on older kernels the first store takes a minor fault instead), so the record
/// path does not fault on every new page.
pub(super) fn prefault(base: *mut u8, len: usize) {
    const MADV_POPULATE_READ: i32 = 22;
    // SAFETY: advice on a range inside our own mapping; a failure changes nothing.
    unsafe { libc::madvise(base.cast(), len, MADV_POPULATE_READ) };
}

/// The kernel thread id (a syscall: callers cache it with their ring).
pub fn current_tid() -> u32 {
    // SAFETY: SYS_gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}
