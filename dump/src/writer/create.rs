//! Creating a dump file: open `O_EXCL` 0600 in the checked dump directory, `posix_fallocate`,
//! `mmap` of the largest size the file may reach, prefault, the header filled and published
//! (magic last), the mapping handed to the fault guard. Why it failed ([`CreateError`]) turns
//! recording off.

use super::anchors::add_anchor;
use super::file::{errno, file_id_of, prefault, within_file_size_limit};
use super::recorder::Recorder;
use crate::clock;
use crate::config::{file_name, RecorderConfig};
use crate::dumpdir::{create_in, open_dump_dir, DirError};
use crate::identity::ProcessIdentity;
use ncclshim_format::layout::*;
use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{fence, Ordering};

/// Why a dump file could not be created. Each one turns recording off; the host never notices.
#[derive(Debug)]
pub struct CreateError {
    pub step: &'static str,
    pub path: PathBuf,
    pub errno: i32,
    /// Set when the dump directory exists but is not safe to use: the sentence saying why.
    pub refused: Option<String>,
}

impl fmt::Display for CreateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(why) = &self.refused {
            return write!(f, "refusing dump directory {}: {why}", self.path.display());
        }
        let msg = std::io::Error::from_raw_os_error(self.errno);
        write!(
            f,
            "{} failed for {}: {}",
            self.step,
            self.path.display(),
            msg
        )
    }
}

impl std::error::Error for CreateError {}

impl Recorder {
    /// Creates the dump file described by `config` and maps it. Creates the directory if needed.
    pub fn create(config: &RecorderConfig) -> Result<Self, CreateError> {
        let identity = ProcessIdentity::current();
        Self::create_with_identity(config, &identity)
    }

    pub fn create_with_identity(
        config: &RecorderConfig,
        identity: &ProcessIdentity,
    ) -> Result<Self, CreateError> {
        let cfg = config.clone().normalized();
        let fail = |step, path: &Path, errno| CreateError {
            step,
            path: path.to_path_buf(),
            errno,
            refused: None,
        };
        let geometry = Geometry::grown(
            cfg.rings,
            cfg.slots_per_ring,
            cfg.arena_bytes,
            cfg.keep_slots,
            cfg.comm_entries,
            cfg.slots_per_ring.min(DEFAULT_OVERFLOW_SLOTS),
        )
        .filter(|g| usize::try_from(g.max_file_size()).is_ok())
        .ok_or_else(|| fail("sizing", &cfg.dir, libc::EOVERFLOW))?;
        let dir_fd = open_dump_dir(&cfg.dir, cfg.dir_policy).map_err(|e| match e {
            DirError::Os(step, errno) => fail(step, &cfg.dir, errno),
            DirError::Refused(why) => CreateError {
                refused: Some(why),
                ..fail("checking the dump directory", &cfg.dir, libc::EPERM)
            },
        })?;
        let dir = std::path::absolute(&cfg.dir).unwrap_or_else(|_| cfg.dir.clone());
        let base_name = file_name(
            &identity.hostname,
            identity.pid,
            identity.start_ticks,
            cfg.writer_kind,
        );
        let (fd, path) = open_exclusive(&dir_fd, &dir, &base_name)?;
        drop(dir_fd);
        let result = (|| {
            let size = libc::off_t::try_from(geometry.file_size)
                .ok()
                .filter(|_| within_file_size_limit(geometry.file_size))
                .ok_or_else(|| fail("sizing", &path, libc::EFBIG))?;
            // SAFETY: fd is a valid, open, writable descriptor.
            let rc = unsafe { libc::posix_fallocate(fd, 0, size) };
            if rc != 0 {
                return Err(fail("posix_fallocate", &path, rc));
            }
            let file_id = file_id_of(fd).ok_or_else(|| fail("fstat", &path, errno()))?;
            // SAFETY: a shared, writable mapping of the largest size the file may reach. Only
            // the allocated fixed part is touched now; a tail extent is touched only after it
            // was allocated (`Recorder::allocate`), so no access lands past the end of the file.
            let base = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    geometry.max_file_size() as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(fail("mmap", &path, errno()));
            }
            prefault(base.cast::<u8>(), geometry.file_size as usize);
            Ok((base.cast::<u8>(), file_id))
        })();
        // SAFETY: fd was opened above and is closed exactly once; the mapping keeps the file.
        unsafe { libc::close(fd) };
        let (base, file_id) = match result {
            Ok(b) => b,
            Err(e) => {
                let c = CString::new(path.as_os_str().as_bytes()).unwrap_or_default();
                // SAFETY: c is a valid NUL-terminated path; unlinking our own half-made file.
                unsafe { libc::unlink(c.as_ptr()) };
                return Err(e);
            }
        };
        let guard_slot = crate::fault_guard::guard(base, geometry.max_file_size() as usize);
        let recorder = Self {
            base,
            geometry,
            path,
            file_id,
            guard_slot,
        };
        recorder.init_header(&cfg, identity);
        Ok(recorder)
    }

    pub(super) fn init_header(&self, cfg: &RecorderConfig, id: &ProcessIdentity) {
        let g = &self.geometry;
        // SAFETY: the mapping is at least HEADER_SIZE bytes, page-aligned (so aligned for
        // FileHeader), zero-filled, and no other thread knows about it yet.
        let h = unsafe { &mut *self.base.cast::<FileHeader>() };
        h.major = FORMAT_MAJOR;
        h.minor = FORMAT_MINOR;
        h.endian = ENDIAN_MARKER;
        h.header_size = HEADER_SIZE as u32;
        h.slot_size = SLOT_SIZE as u32;
        h.page_size = 4096;
        h.writer_kind = cfg.writer_kind as u32;
        fill_fixed(&mut h.writer_version, env!("CARGO_PKG_VERSION").as_bytes());
        h.pid = id.pid;
        h.ppid = id.ppid;
        h.pid_start_ticks = id.start_ticks;
        h.ext2.pid_namespace = id.pid_namespace;
        fill_fixed(&mut h.boot_id, id.boot_id.as_bytes());
        fill_fixed(&mut h.hostname, id.hostname.as_bytes());
        fill_fixed(&mut h.clocksource, id.clocksource.as_bytes());
        h.clock = clock::calibrate();
        if clock::select() == clock::ClockKind::Tsc {
            let (hz, a, b) = clock::calibrate_tsc_hz();
            h.clock_kind = clock::ClockKind::Tsc as u32;
            h.tsc_hz = hz;
            add_anchor(h, a);
            add_anchor(h, b);
        }
        h.ring_count = g.ring_count;
        h.slots_per_ring = g.slots_per_ring;
        h.ring_dir_offset = g.ring_dir_offset;
        h.rings_offset = g.rings_offset;
        h.arena_offset = g.arena_offset;
        h.arena_size = g.arena_size;
        h.file_size = g.file_size;
        h.ext.keep_slots = g.keep_slots;
        h.ext.comm_entries = g.comm_entries;
        h.ext.keep_offset = g.keep_offset;
        h.ext.comm_offset = g.comm_offset;
        h.ext.keep_dir.state.store(1, Ordering::Relaxed);
        h.ext2.overflow_slots = g.overflow_slots;
        h.ext2.tail_max = g.tail_max;
        fill_fixed(&mut h.ext2.run_source, id.run.source.as_bytes());
        fill_fixed(&mut h.ext2.run_id, id.run.id.as_bytes());
        h.ext2.launcher_rank = id.run.rank;
        let overflow = self.dir_entry(g.overflow_ring());
        // SAFETY: no other thread knows the mapping yet.
        unsafe {
            let e = (overflow as *const RingDirEntry).cast_mut();
            (*e).slots_offset = g.rings_offset;
            (*e).slots = g.overflow_slots;
        }
        overflow.state.store(1, Ordering::Relaxed);
        // The magic goes last: a reader that sees it sees a complete header.
        fence(Ordering::Release);
        h.magic = MAGIC;
    }
}

/// Creates the dump file in the opened directory, picking `<name>.N` when `<name>` exists (a
/// pid reused within one boot's clock tick): the descriptor and the file's absolute path.
pub(super) fn open_exclusive(
    dir_fd: &std::os::fd::OwnedFd,
    dir: &Path,
    base_name: &str,
) -> Result<(i32, PathBuf), CreateError> {
    for attempt in 0..16u32 {
        let name = if attempt == 0 {
            base_name.to_owned()
        } else {
            format!("{base_name}.{attempt}")
        };
        let path = dir.join(&name);
        match create_in(dir_fd, &name) {
            Ok(fd) => return Ok((fd, path)),
            Err(libc::EEXIST) => continue,
            Err(errno) => {
                return Err(CreateError {
                    step: "open",
                    path,
                    errno,
                    refused: None,
                })
            }
        }
    }
    Err(CreateError {
        step: "open",
        path: dir.join(base_name),
        errno: libc::EEXIST,
        refused: None,
    })
}
