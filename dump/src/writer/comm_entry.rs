//! The writer's side of the communicator table ([`CommEntryWriter`]).

use crate::clock;
use ncclshim_format::layout::*;
use ncclshim_format::schema::CallId;
use std::sync::atomic::Ordering;

/// The writer's side of the communicator table (the entry's layout is the format's; stamping
/// times with the recorder's clock is the runtime's): identity once, progress on every
/// operation. Plain atomic stores (no read-modify-write): one thread issues a communicator's
/// operations.
pub trait CommEntryWriter {
    /// Fills the identity of a newly claimed entry and publishes it (`state` last).
    #[allow(clippy::too_many_arguments)] // the communicator's identity, field by field
    fn publish(
        &self,
        created_by: CallId,
        comm: u64,
        comm_hash: u64,
        uid_hash: u64,
        nranks: i32,
        rank: i32,
        parent: (u64, i32, i32),
        ready: bool,
    );

    /// The communicator is ready: its size, rank (when they were unknown), device and NCCL
    /// version. Called by the thread that created it, before it issues any operation.
    fn ready(&self, nranks: i32, rank: i32, cuda_dev: i32, nccl_version: i32);

    /// An operation was issued: its arguments first, then the count that publishes them.
    #[allow(clippy::too_many_arguments)] // the operation's own arguments
    fn issue(
        &self,
        seq: u64,
        call: CallId,
        count: u64,
        datatype: i32,
        redop: i32,
        peer: i32,
        t: u64,
    );

    /// The call of operation `seq` returned `rc`.
    fn complete(&self, seq: u64, rc: i32);

    /// The communicator was destroyed (or aborted).
    fn end(&self, aborted: bool);
}

impl CommEntryWriter for CommTableEntry {
    #[allow(clippy::too_many_arguments)] // the communicator's identity, field by field
    fn publish(
        &self,
        created_by: CallId,
        comm: u64,
        comm_hash: u64,
        uid_hash: u64,
        nranks: i32,
        rank: i32,
        parent: (u64, i32, i32),
        ready: bool,
    ) {
        let me = (self as *const Self).cast_mut();
        // SAFETY: the entry was claimed by this caller alone (`Recorder::claim_comm_entry`) and
        // is not yet published (state FREE), so no one else writes its plain fields; readers
        // ignore it until `state` is stored below with Release.
        unsafe {
            (*me).created_by = created_by as u32;
            (*me).comm = comm;
            (*me).comm_hash = comm_hash;
            (*me).uid_hash = uid_hash;
            (*me).nranks = nranks;
            (*me).rank = rank;
            (*me).cuda_dev = -1;
            (*me).nccl_version = 0;
            (*me).parent_hash = parent.0;
            (*me).split_color = parent.1;
            (*me).split_key = parent.2;
            (*me).created_t = clock::now();
        }
        self.last_peer.store(-1, Ordering::Relaxed);
        self.last_dtype_op.store(0xffff, Ordering::Relaxed);
        let state = if ready {
            comm_state::LIVE
        } else {
            comm_state::PENDING
        };
        self.state.store(state, Ordering::Release);
    }

    fn ready(&self, nranks: i32, rank: i32, cuda_dev: i32, nccl_version: i32) {
        let me = (self as *const Self).cast_mut();
        // SAFETY: identity fields are written only by the creating thread (here, once the
        // communicator is ready); a concurrent reader may see the old or the new value of each
        // plain 4-byte field, both of which are meaningful.
        unsafe {
            (*me).nranks = nranks;
            (*me).rank = rank;
            (*me).cuda_dev = cuda_dev;
            (*me).nccl_version = nccl_version;
        }
        self.state.store(comm_state::LIVE, Ordering::Release);
    }

    #[inline]
    #[allow(clippy::too_many_arguments)] // the operation's own arguments
    fn issue(
        &self,
        seq: u64,
        call: CallId,
        count: u64,
        datatype: i32,
        redop: i32,
        peer: i32,
        t: u64,
    ) {
        let small = |v: i32| {
            if (0..0xff).contains(&v) {
                v as u32
            } else {
                0xff
            }
        };
        self.last_call.store(call as u32, Ordering::Relaxed);
        self.last_count.store(count, Ordering::Relaxed);
        self.last_dtype_op
            .store(small(datatype) | small(redop) << 8, Ordering::Relaxed);
        self.last_peer.store(peer, Ordering::Relaxed);
        self.last_t.store(t, Ordering::Relaxed);
        self.issued.store(seq.wrapping_add(1), Ordering::Release);
    }

    #[inline]
    fn complete(&self, seq: u64, rc: i32) {
        self.last_rc.store(rc, Ordering::Relaxed);
        self.completed.store(seq.wrapping_add(1), Ordering::Release);
    }

    fn end(&self, aborted: bool) {
        self.ended_t.store(clock::now(), Ordering::Relaxed);
        let state = if aborted {
            comm_state::ABORTED
        } else {
            comm_state::DESTROYED
        };
        self.state.store(state, Ordering::Release);
    }
}
