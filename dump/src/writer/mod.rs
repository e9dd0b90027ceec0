//! The crash-safe writer: creates one dump file, hands each thread its own ring, and records
//! 128-byte slots with the commit-word protocol. Everything written is in a `MAP_SHARED` file
//! mapping the moment it is stored, so SIGKILL or a segfault loses at most the slot being written.
//!
//! Creation does all the work that can fail for the fixed part (open `O_EXCL` 0600,
//! `posix_fallocate`, `mmap` of the largest size the file may reach, prefault). The file then
//! grows only on rare paths: a thread's first event allocates its ring, a blob allocates its
//! bytes (reopen by path, check it is still our file, `posix_fallocate` the new extent, prefault
//! it). A failed allocation sends the thread to the overflow ring (or drops the blob), counted.
//! The record path makes no allocation, takes no lock and makes no syscall beyond the vDSO
//! clock read; the mapping is never unmapped.
//!
//! Files of one idea each, bottom up: `file` (system calls around the file), `anchors` (clock
//! anchors), `recorder` (the open file and its header's live fields), `ring` (recording into a
//! ring), `space` (rings, extents, blobs, keep ring and communicator table allocated in the
//! file), `create` (creating the file), `comm_entry` (the communicator table's writer side).
//! This file only names them.

mod anchors;
mod comm_entry;
mod create;
mod file;
mod recorder;
mod ring;
mod space;

pub use comm_entry::CommEntryWriter;
pub use create::CreateError;
pub use file::current_tid;
pub use recorder::Recorder;
pub use ring::{Entry, PendingCall, RingWriter};
