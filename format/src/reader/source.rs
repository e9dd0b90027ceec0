//! Where a dump's bytes come from ([`Source`]: a file read with `pread`, or bytes in memory),
//! and how a dump file is opened without trusting what the path names `bytes` for the fields).

use super::model::DumpError;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Random access to the bytes of a dump: a file (read with `pread`, so a file that shrinks
/// under us gives an error instead of SIGBUS) or a byte slice (tests, fuzzing).
pub trait Source {
    fn size(&self) -> io::Result<u64>;
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
}

impl Source for std::fs::File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_exact_at(buf, offset)
    }
}

impl Source for [u8] {
    fn size(&self) -> io::Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start
            .checked_add(buf.len())
            .filter(|&e| e <= <[u8]>::len(self))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(&self[start..end]);
        Ok(())
    }
}

/// Opens a dump for reading: a regular file only, and without waiting on a FIFO.
pub(super) fn open_dump_file(path: &Path) -> Result<std::fs::File, DumpError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Non-blocking: opening a FIFO named like a dump would otherwise wait forever for a writer.
    // O_NONBLOCK is 0o4000 on every Linux architecture this builds for (asm-generic/fcntl.h).
    const O_NONBLOCK: i32 = 0o4000;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(io(io::Error::other(
            "not a regular file (a FIFO, socket or device is never read)",
        )));
    }
    Ok(file)
}
