//! What the numbers in a slot mean: record kinds, call ids (with the names of their nine
//! arguments) and blob kinds. Writers store ids, never strings, so a record costs one 128-byte
//! store; the reader turns ids back into names with these tables. [`SlotRef`] is how one record
//! names another in its arguments. Ids are append-only: a new id is a minor format change, and a
//! reader that meets an id it does not know keeps the record under a numeric name instead of
//! failing.

use crate::layout::SLOT_ARGS;

/// What a slot holds.
#[repr(u16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "reader", derive(serde::Serialize))]
#[cfg_attr(feature = "reader", serde(rename_all = "snake_case"))]
pub enum RecordKind {
    /// An intercepted API call: written at entry, completed in place at return.
    Call = 1,
    /// A point-in-time observation (an async error appeared, the recorder noted something).
    Event = 2,
    /// A snapshot blob (environment, libraries, host facts) and when it was taken.
    Snapshot = 3,
    /// Facts about a communicator: hash, rank, size, device.
    CommInfo = 4,
    /// A profiler event started; `call` is its event type.
    ProfStart = 5,
    /// A profiler event stopped; `args[0]` is the handle of its start record.
    ProfStop = 6,
    /// A profiler event changed state; `args[0]` is the handle, `args[1]` the state, `args[2]` its value.
    ProfState = 7,
}

impl RecordKind {
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Call,
            2 => Self::Event,
            3 => Self::Snapshot,
            4 => Self::CommInfo,
            5 => Self::ProfStart,
            6 => Self::ProfStop,
            7 => Self::ProfState,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Call => "call",
            Self::Event => "event",
            Self::Snapshot => "snapshot",
            Self::CommInfo => "comm_info",
            Self::ProfStart => "prof_start",
            Self::ProfStop => "prof_stop",
            Self::ProfState => "prof_state",
        }
    }
}

/// Bits of `Slot::flags`.
pub mod slot_flags {
    /// `Slot::rc` is a CUresult rather than an ncclResult_t.
    pub const RC_IS_CUDA: u32 = 1 << 0;
    /// The call was made from inside another intercepted call (NCCL calling its own API).
    pub const NESTED: u32 = 1 << 1;
    /// The call happened inside an ncclGroupStart/End pair opened by the user.
    pub const IN_GROUP: u32 = 1 << 2;
    /// The event came from another process (PXN proxy): its parent and context were not ours.
    pub const FOREIGN: u32 = 1 << 3;
    /// The blob referenced by `Slot::blob` is NCCL's `ncclGetLastError()` text (for a CUDA
    /// driver record: the driver's `cuGetErrorString` of its CUresult).
    pub const HAS_ERROR_TEXT: u32 = 1 << 4;
    /// A profiler start record written in flight and completed in place: its exit time is the
    /// event's stop (and KernelCh/KernelPhase `gpu_stop_ns` its kernel stop). Without the flag
    /// (older plugins, other generators) a start record's exit time means nothing; only a
    /// `prof_stop` / `prof_state` record says the event stopped.
    pub const COMPLETES_IN_PLACE: u32 = 1 << 5;
    /// A profiler Coll/P2p start record that stays open until its kernel ends: its end is the
    /// `prof_state` [`PROF_STATE_GPU_DONE`] record naming it, and its own stop is not recorded
    /// (NCCL starts the event after the kernel launch and stops it once the proxy has it, so
    /// the stop says nothing the start does not). The profiler's default mask does this for
    /// every operation whose kernel channels it summarizes.
    ///
    /// [`PROF_STATE_GPU_DONE`]: super::PROF_STATE_GPU_DONE
    pub const ENDS_AT_GPU_DONE: u32 = 1 << 6;
    /// No clock was read for this record: its time is the entry time of the record it names in
    /// `args[0]` (a [`PROF_STATE_GPU_DONE`] record carries its operation's start time; for one
    /// operation in 64, the process's first included, the clock is read and the flag is absent,
    /// which ties the GPU clock to the CPU clock).
    ///
    /// [`PROF_STATE_GPU_DONE`]: super::PROF_STATE_GPU_DONE
    pub const TIME_OF_NAMED: u32 = 1 << 7;
    /// A copy, in the keep ring, of a failed call recorded in a thread's ring (same entry time,
    /// thread and arguments): readers use the original while it is still there.
    pub const KEEP_COPY: u32 = 1 << 8;
}

/// A `prof_state` value of ncclshim's own (NCCL's states are below 64): the Coll/P2p named by
/// `args[0]` finished on the GPU. The record's time is when the plugin saw the last kernel
/// channel stop; `args[2]`/`args[3]` are the earliest channel start and the latest channel stop
/// in GPU %globaltimer ns, `args[4]` the channel count. Written once per operation instead of
/// one record per kernel channel, unless `NCCLSHIM_PROFILE` asks for `channels`.
pub const PROF_STATE_GPU_DONE: u64 = 1 << 16;

/// What a blob holds. Text blobs are UTF-8; JSON blobs are one JSON value.
#[repr(u16)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "reader", derive(serde::Serialize))]
#[cfg_attr(feature = "reader", serde(rename_all = "snake_case"))]
pub enum BlobKind {
    /// Free text (a note from the recorder).
    Text = 1,
    /// `ncclGetLastError()` text captured right after a failing call.
    ErrorText = 2,
    /// JSON object: filtered, redacted environment.
    Environment = 3,
    /// JSON: loaded NCCL libraries and plugins, CUDA driver/runtime versions.
    Libraries = 4,
    /// JSON: host facts (hostname, container hints, /dev/shm, memlock, peermem, libibverbs, interfaces).
    HostFacts = 5,
    /// JSON: an `ncclConfig_t` as read within its declared size and version.
    CommConfig = 6,
    /// JSON: GPU identity (ordinal, PCI bus id, UUID, name).
    Gpu = 7,
    /// A C string NCCL handed the profiler (communicator name, algorithm...).
    Name = 8,
    /// JSON: the process command line and other per-process facts.
    Process = 9,
    /// Binary: a profiler communicator's running aggregates, updated in place with atomics
    /// (layout in `crate::aggregates`, shared with the writer `ncclshim_profiler::agg`).
    ProfAggregates = 10,
    /// Format 2 tail extent: one thread's ring slots (page-aligned; its ring directory entry
    /// points here). Not a blob: readers skip it when listing blobs.
    RingSlots = 11,
    /// Format 2 tail extent: padding before a page-aligned extent. Skipped by readers.
    Pad = 12,
}

impl BlobKind {
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Text,
            2 => Self::ErrorText,
            3 => Self::Environment,
            4 => Self::Libraries,
            5 => Self::HostFacts,
            6 => Self::CommConfig,
            7 => Self::Gpu,
            8 => Self::Name,
            9 => Self::Process,
            10 => Self::ProfAggregates,
            11 => Self::RingSlots,
            12 => Self::Pad,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::ErrorText => "error_text",
            Self::Environment => "environment",
            Self::Libraries => "libraries",
            Self::HostFacts => "host_facts",
            Self::CommConfig => "comm_config",
            Self::Gpu => "gpu",
            Self::Name => "name",
            Self::Process => "process",
            Self::ProfAggregates => "prof_aggregates",
            Self::RingSlots => "ring_slots",
            Self::Pad => "pad",
        }
    }

    /// Whether the payload is a JSON value (the reader parses it) rather than plain text.
    pub fn is_json(self) -> bool {
        !matches!(
            self,
            Self::Text
                | Self::ErrorText
                | Self::Name
                | Self::ProfAggregates
                | Self::RingSlots
                | Self::Pad
        )
    }
}

/// What every generated argument view can do: name its fields in slot order, read itself from
/// a slot's argument words and write itself back. Views are plain `Copy` structs of `u64` words
/// (`#[repr(C)]`, field `i` at byte `8 * i`), so making one costs what filling the array by
/// hand did.
pub trait ArgView: Copy + Default {
    /// The view's name (`Collective`, `CommInitRank`...), as [`CallId::view_name`] gives it.
    const VIEW: &'static str;
    /// The field names, in slot order (`Slot::args[0..]`).
    const NAMES: &'static [&'static str];
    /// Reads the view from argument words; words past the slice read as 0.
    fn from_args(args: &[u64]) -> Self;
    /// The argument words of a slot: the fields in order, then zeros.
    fn to_args(&self) -> [u64; SLOT_ARGS];
}

/// Index in `Slot::args` of a view's field, checked by the compiler: `arg_index!(CommInitRank,
/// cuda_dev)` is 8, and a field the view lacks does not compile. For writers that fill one
/// result argument in place after the call returned.
#[macro_export]
macro_rules! arg_index {
    ($view:ident, $field:ident) => {
        ::core::mem::offset_of!($crate::schema::args::$view, $field) / 8
    };
}

macro_rules! arg_view {
    ($view:ident { $($arg:ident),* }) => {
        #[doc = concat!("Arguments of the records whose view is `", stringify!($view), "`: ",
            $("`", stringify!($arg), "` ",)* "(in slot order).")]
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $view {
            $( pub $arg: u64, )*
        }

        impl $crate::schema::ArgView for $view {
            const VIEW: &'static str = stringify!($view);
            const NAMES: &'static [&'static str] = &[$(stringify!($arg)),*];

            #[inline]
            #[allow(unused_mut, unused_variables)]
            fn from_args(args: &[u64]) -> Self {
                // Struct expressions evaluate their fields in the order written: slot order.
                let mut words = args.iter().copied();
                Self { $( $arg: words.next().unwrap_or(0), )* }
            }

            #[inline]
            #[allow(unused_mut, unused_variables, unused_assignments)]
            fn to_args(&self) -> [u64; SLOT_ARGS] {
                let mut a = [0u64; SLOT_ARGS];
                let mut i = 0;
                $( a[i] = self.$arg; i += 1; )*
                a
            }
        }
    };
}

/// One past the largest call id (ids are grouped by family below 0x400).
const CALL_ID_TABLE_LEN: usize = 0x400;

macro_rules! call_ids {
    ($( $(#[$doc:meta])* $variant:ident = $id:literal, $name:literal,
        $view:ident $({ $($arg:ident),* $(,)? })?; )*) => {
        /// Every function or event a record can be about.
        #[repr(u16)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum CallId {
            $( $(#[$doc])* $variant = $id, )*
        }

        /// Typed views of a record's arguments, one struct per argument list of the schema
        /// (calls sharing a list share the view: every collective is a [`Collective`], send
        /// and recv a [`PointToPoint`]). Writers build one and store `to_args()`; readers get
        /// one with `from_args` (or `Record::view`) instead of indexing `args[..]` by hand.
        pub mod args {
            use crate::layout::SLOT_ARGS;
            $( $( arg_view!($view { $($arg),* }); )? )*
            arg_view!(ProfStop { handle });
            arg_view!(ProfState { handle, state, value, value2 });
            arg_view!(ProfGpuDone { handle, state, gpu_start, gpu_stop, channels });
        }

        /// Every id below [`CALL_ID_TABLE_LEN`] to its variant, built at compile time: readers
        /// map the id of every record of every dump of a job, and a table lookup is a few
        /// instructions where the `match` over about 90 sparse ids was a search.
        const CALL_ID_TABLE: [Option<CallId>; CALL_ID_TABLE_LEN] = {
            let mut table = [None; CALL_ID_TABLE_LEN];
            $(
                assert!(($id as usize) < CALL_ID_TABLE_LEN, "call id past CALL_ID_TABLE_LEN");
                table[$id as usize] = Some(CallId::$variant);
            )*
            table
        };

        impl CallId {
            #[inline]
            pub fn from_u16(v: u16) -> Option<Self> {
                CALL_ID_TABLE.get(usize::from(v)).copied().flatten()
            }

            /// The C name of the function, or the profiler event's name.
            pub fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $name, )*
                }
            }

            /// Names of `Slot::args[0..]`; arguments past the list are unused.
            pub fn arg_names(self) -> &'static [&'static str] {
                match self {
                    $( Self::$variant => <args::$view as ArgView>::NAMES, )*
                }
            }

            /// The name of the [`args`] view of this call's arguments (its `ArgView::VIEW`).
            pub fn view_name(self) -> &'static str {
                match self {
                    $( Self::$variant => <args::$view as ArgView>::VIEW, )*
                }
            }

            /// Every id, for tests and for tools that list the schema.
            pub const ALL: &'static [CallId] = &[$( Self::$variant, )*];
        }
    };
}

call_ids! {
    // ---- NCCL API (0x0001..) ----
    NcclGetVersion = 0x0001, "ncclGetVersion", NcclGetVersion { version };
    /// uid0..uid4 are the first 40 bytes of the id: magic, root sockaddr, nRanks.
    NcclGetUniqueId = 0x0002, "ncclGetUniqueId", NcclGetUniqueId { uid_hash, uid0, uid1, uid2, uid3, uid4 };
    /// `comm` is the new communicator once the call returns.
    NcclCommInitRank = 0x0003, "ncclCommInitRank", CommInitRank { nranks, rank, uid_hash, uid0, uid1, uid2, uid3, uid4, cuda_dev };
    /// The shim writes the `ncclConfig_t` of every init/split/shrink/grow as an `Event` record
    /// of the same call id just before the call, with a `CommConfig` blob (the call's own blob
    /// slot is kept for NCCL's error text).
    NcclCommInitRankConfig = 0x0004, "ncclCommInitRankConfig", CommInitRank;
    NcclCommInitRankScalable = 0x0005, "ncclCommInitRankScalable", NcclCommInitRankScalable { nranks, rank, uid_hash, uid0, uid1, uid2, uid3, n_ids, cuda_dev };
    NcclCommInitAll = 0x0006, "ncclCommInitAll", NcclCommInitAll { ndev, dev0, dev1, dev2, dev3, first_comm };
    /// `comm` is the parent.
    NcclCommSplit = 0x0007, "ncclCommSplit", NcclCommSplit { color, key, new_comm, comm_hash, nranks, rank };
    NcclCommShrink = 0x0008, "ncclCommShrink", NcclCommShrink { exclude_count, shrink_flags, new_comm, exclude0, exclude1, exclude2, exclude3 };
    NcclCommGrow = 0x0009, "ncclCommGrow", NcclCommGrow { nranks, rank, uid_hash, new_comm };
    NcclCommFinalize = 0x000a, "ncclCommFinalize", NoArgs {  };
    NcclCommDestroy = 0x000b, "ncclCommDestroy", NoArgs;
    NcclCommAbort = 0x000c, "ncclCommAbort", NoArgs;
    NcclCommRevoke = 0x000d, "ncclCommRevoke", NcclCommRevoke { flags };
    /// Recorded only when the value changes (PyTorch's watchdog polls it constantly).
    NcclCommGetAsyncError = 0x000e, "ncclCommGetAsyncError", NcclCommGetAsyncError { async_error, previous };
    NcclGroupStart = 0x000f, "ncclGroupStart", Group { depth };
    NcclGroupEnd = 0x0010, "ncclGroupEnd", Group;
    NcclAllReduce = 0x0011, "ncclAllReduce", Collective { count, datatype, op, root, sendbuff, recvbuff, stream, seq, op_seq };
    NcclBroadcast = 0x0012, "ncclBroadcast", Collective;
    NcclBcast = 0x0013, "ncclBcast", Collective;
    NcclReduce = 0x0014, "ncclReduce", Collective;
    NcclAllGather = 0x0015, "ncclAllGather", Collective;
    NcclReduceScatter = 0x0016, "ncclReduceScatter", Collective;
    NcclAlltoAll = 0x0017, "ncclAlltoAll", Collective;
    NcclGather = 0x0018, "ncclGather", Collective;
    NcclScatter = 0x0019, "ncclScatter", Collective;
    NcclSend = 0x001a, "ncclSend", PointToPoint { count, datatype, op, peer, sendbuff, recvbuff, stream, seq, op_seq };
    NcclRecv = 0x001b, "ncclRecv", PointToPoint;
    NcclMemAlloc = 0x001c, "ncclMemAlloc", NcclMemAlloc { ptr, size };
    NcclMemFree = 0x001d, "ncclMemFree", NcclMemFree { ptr };
    NcclCommRegister = 0x001e, "ncclCommRegister", NcclCommRegister { buff, size, handle };
    NcclCommDeregister = 0x001f, "ncclCommDeregister", NcclCommDeregister { handle };
    NcclCommWindowRegister = 0x0020, "ncclCommWindowRegister", NcclCommWindowRegister { buff, size, window, flags };
    NcclCommWindowDeregister = 0x0021, "ncclCommWindowDeregister", NcclCommWindowDeregister { window };
    NcclCommSuspend = 0x0022, "ncclCommSuspend", NcclCommSuspend { flags };
    NcclCommResume = 0x0023, "ncclCommResume", NoArgs;
    NcclCommGetUniqueId = 0x0024, "ncclCommGetUniqueId", NcclCommGetUniqueId { uid_hash };
    NcclRedOpCreatePreMulSum = 0x0025, "ncclRedOpCreatePreMulSum", NcclRedOpCreatePreMulSum { op, datatype, residence };
    NcclRedOpDestroy = 0x0026, "ncclRedOpDestroy", NcclRedOpDestroy { op };
    /// NCCL 2.29+ (nccl.h v2.32.3). `value` is filled in on success.
    NcclCommMemStats = 0x0027, "ncclCommMemStats", NcclCommMemStats { stat, value };
    NcclWinGetUserPtr = 0x0028, "ncclWinGetUserPtr", NcclWinGetUserPtr { window, user_ptr };
    /// Ends the group as ncclGroupEnd does (estimating, not launching).
    NcclGroupSimulateEnd = 0x0029, "ncclGroupSimulateEnd", Group;
    /// One-sided put with a signal to `peer`'s window (`localbuff` is not kept).
    NcclPutSignal = 0x002a, "ncclPutSignal", NcclPutSignal { count, datatype, peer, window, offset, sig_idx, ctx, flags, stream };
    NcclSignal = 0x002b, "ncclSignal", NcclSignal { peer, sig_idx, ctx, flags, stream };
    /// The first descriptor's peer and count of signals to wait for, of `n_desc`.
    NcclWaitSignal = 0x002c, "ncclWaitSignal", NcclWaitSignal { n_desc, peer0, op_cnt0, stream };
    /// The device communicator's address (the caller's struct NCCL fills or reads).
    NcclDevCommCreate = 0x002d, "ncclDevCommCreate", NcclDevCommCreate { dev_comm };
    NcclDevCommDestroy = 0x002e, "ncclDevCommDestroy", NcclDevCommCreate;

    // ---- CUDA driver (0x0100..) ----
    // Written by the shim's driver hooks (shim/src/driver). Conventions for every Cu* record:
    // rc is the CUresult (flag RC_IS_CUDA); u64::MAX marks a value that is unknown (device
    // identity before cuInit or without a context; an out-value after a failed call);
    // `device` is the calling thread's current device ordinal, `pci_bus_id` is packed as
    // `domain << 16 | bus << 8 | device << 3 | function`, `uuid_hi`/`uuid_lo` are the UUID's
    // bytes 0..8 / 8..16 read big-endian; `caller` is the return address in the code that
    // called the driver; flag NESTED means NCCL made the call (inside an intercepted nccl* call).
    // Out-values (`handle` of Create/Import/Retain, `ptr` of Reserve/IpcOpen, the fd of an
    // export or dma-buf) are filled in on success only.
    /// `shareable_handle`: the exported fd (POSIX_FD) or the first 8 bytes of the handle.
    CuMemExportToShareableHandle = 0x0100, "cuMemExportToShareableHandle", CuMemExportToShareableHandle { shareable_handle, handle, handle_type, flags, device, pci_bus_id, caller };
    /// `os_handle` is the fd for POSIX_FD (handle_type 1), the raw pointer value otherwise;
    /// device/pci/uuid describe the calling thread's current device.
    CuMemImportFromShareableHandle = 0x0101, "cuMemImportFromShareableHandle", CuMemImportFromShareableHandle { handle, os_handle, handle_type, device, pci_bus_id, uuid_hi, uuid_lo, caller };
    CuMemCreate = 0x0102, "cuMemCreate", CuMemCreate { handle, size, prop_type, location_type, location_id, handle_types, flags, caller };
    CuMemRelease = 0x0103, "cuMemRelease", CuMemRelease { handle, caller };
    CuMemMap = 0x0104, "cuMemMap", CuMemMap { ptr, size, offset, handle, flags, caller };
    CuMemUnmap = 0x0105, "cuMemUnmap", CuMemUnmap { ptr, size, caller };
    CuMemSetAccess = 0x0106, "cuMemSetAccess", CuMemSetAccess { ptr, size, count, location_type, location_id, access_flags, caller };
    CuMemAddressReserve = 0x0107, "cuMemAddressReserve", CuMemAddressReserve { ptr, size, alignment, addr, flags, caller };
    CuMemAddressFree = 0x0108, "cuMemAddressFree", CuMemAddressFree { ptr, size, caller };
    CuMemRetainAllocationHandle = 0x0109, "cuMemRetainAllocationHandle", CuMemRetainAllocationHandle { handle, addr, caller };
    CuMemGetHandleForAddressRange = 0x010a, "cuMemGetHandleForAddressRange", CuMemGetHandleForAddressRange { handle, ptr, size, handle_type, flags, caller };
    CuMulticastCreate = 0x010b, "cuMulticastCreate", CuMulticastCreate { handle, size, num_devices, handle_types, flags, caller };
    CuMulticastAddDevice = 0x010c, "cuMulticastAddDevice", CuMulticastAddDevice { mc_handle, device, caller };
    CuMulticastBindMem = 0x010d, "cuMulticastBindMem", CuMulticastBindMem { mc_handle, mc_offset, mem_handle, mem_offset, size, flags, caller };
    CuMulticastBindAddr = 0x010e, "cuMulticastBindAddr", CuMulticastBindAddr { mc_handle, mc_offset, ptr, size, flags, caller };
    CuMulticastUnbind = 0x010f, "cuMulticastUnbind", CuMulticastUnbind { mc_handle, device, mc_offset, size, caller };
    /// `handle_w0`/`handle_w1`: the first 16 bytes of the 64-byte IPC handle, little-endian.
    CuIpcGetMemHandle = 0x0110, "cuIpcGetMemHandle", CuIpcGetMemHandle { ptr, handle_w0, handle_w1, device, caller };
    /// `abi` is 1 for the 4010 entry point and 2 for the 11000 one.
    CuIpcOpenMemHandle = 0x0111, "cuIpcOpenMemHandle", CuIpcOpenMemHandle { ptr, handle_w0, handle_w1, flags, abi, device, pci_bus_id, caller };
    CuIpcCloseMemHandle = 0x0112, "cuIpcCloseMemHandle", CuIpcCloseMemHandle { ptr, caller };
    CuMulticastGetGranularity = 0x0113, "cuMulticastGetGranularity", CuMulticastGetGranularity { granularity, option, caller };

    // ---- NCCL profiler events (0x0200 + bit index of the event type) ----
    // Start records (`RecordKind::ProfStart`). `handle` is 0: a record's own handle is its
    // (ring, seq), i.e. `SlotRef::encode()` (seq modulo 2^40). `parent` is the parent's handle
    // in that encoding, 0 when NCCL passed none (for FOREIGN records: the originating process's
    // handle). Strings are `profnames` codes; `gpu_*_ns` are GPU %globaltimer values.
    // Start records are written in flight (t_exit = IN_FLIGHT); the event is complete when its
    // start record has an exit time (stopped on the starting thread, completed in place) or a
    // stop record names it (stopped elsewhere, or the start record was overwritten).
    // Stop records: `args[0]` = the start record's handle. State records: `args[0]` handle,
    // `args[1]` state, `args[2]` value (pTimer, transSize, appendedProxyOps...), `args[3]` a
    // second value (v1-v3 proxyOp steps).
    ProfGroup = 0x0200, "Group", ProfGroup { handle, parent, seq, comm_hash, rank };
    /// `count` is in bytes with datatype ncclInt8 for AllGather/Broadcast (NCCL's convention);
    /// `algo_proto` = algo | proto << 8, `channels_warps` = channels | warps << 8 | flags << 16.
    ProfColl = 0x0201, "Coll", ProfColl { handle, parent, seq, func, count, datatype, root, algo_proto, channels_warps };
    ProfP2p = 0x0202, "P2p", ProfP2p { handle, parent, func, count, datatype, peer, channels, buff };
    ProfProxyOp = 0x0203, "ProxyOp", ProfProxyOp { handle, parent, pid, channel, peer, n_steps, chunk_size, is_send };
    ProfProxyStep = 0x0204, "ProxyStep", ProfProxyStep { handle, parent, step };
    ProfProxyCtrl = 0x0205, "ProxyCtrl", ProfProxyCtrl { handle, parent };
    /// `gpu_stop_ns` (state 22's pTimer) is filled in place when the thread that started the
    /// event reports its kernel stop; otherwise it stays 0 and a `ProfState` 22 record holds it.
    ProfKernelCh = 0x0206, "KernelCh", ProfKernelCh { handle, parent, channel, gpu_start_ns, gpu_stop_ns };
    /// `w0..w2` copy the net plugin's event (IB: device | opcode << 32, wr_id, length;
    /// socket: fd | op << 32, 0, length); the event struct type byte is in `plugin_id`'s high bits.
    ProfNetPlugin = 0x0207, "NetPlugin", ProfNetPlugin { handle, parent, plugin_id, w0, w1, w2 };
    ProfGroupApi = 0x0208, "GroupApi", ProfGroupApi { handle, parent, depth, graph_captured };
    ProfCollApi = 0x0209, "CollApi", ProfCollApi { handle, parent, func, count, datatype, root, stream, graph_captured, user_tag };
    ProfP2pApi = 0x020a, "P2pApi", ProfP2pApi { handle, parent, func, count, datatype, stream, graph_captured, user_tag };
    ProfKernelLaunch = 0x020b, "KernelLaunch", ProfKernelLaunch { handle, parent, stream };
    ProfCeColl = 0x020c, "CeColl", ProfCeColl { handle, parent, seq, func, count, datatype, root, stream };
    ProfCeSync = 0x020d, "CeSync", ProfCeSync { handle, parent, is_complete, nranks };
    ProfCeBatch = 0x020e, "CeBatch", ProfCeBatch { handle, parent, num_ops, total_bytes, intra_sync };
    /// `gpu_stop_ns`: state 31's pTimer, in place or in a `ProfState` 31 record (as KernelCh).
    ProfKernelPhase = 0x020f, "KernelPhase", ProfKernelPhase { handle, parent, channel, phase, gpu_start_ns, gpu_stop_ns };

    // ---- Recorder events (0x0300..) ----
    /// A profiler plugin `init`: comm hash, rank, size; `blob` is the communicator name.
    /// `agg_blob` is the file offset of the comm's `ProfAggregates` blob (0 when the arena was full);
    /// v1-v3 inits carry no comm facts (comm_hash 0, rank/nranks -1 as u64).
    ProfInit = 0x0300, "profilerInit", ProfInit { comm_hash, nnodes, nranks, rank, abi_version, mask, agg_blob, ctx };
    ProfFinalize = 0x0301, "profilerFinalize", ProfFinalize { comm_hash, events, ctx };
    /// A communicator came up (shim: after a successful init): join key for cross-rank analysis.
    CommCreated = 0x0302, "commCreated", CommCreated { comm_hash, nranks, rank, cuda_dev, uid_hash, nccl_version };
    /// A free-text note from the recorder itself (`blob`).
    RecorderNote = 0x0303, "recorderNote", NoArgs;
    /// A fatal signal reached the process (if the recorder installed a handler).
    FatalSignal = 0x0304, "fatalSignal", FatalSignal { signo, code, addr };
    /// A snapshot of environment / libraries / host facts (`blob`). `reason`: 0 = the dump was
    /// created (first NCCL event), 1 = a communicator init (only changed snapshots are stored),
    /// 2 = the shim's driver hooks first saw a device (a `gpu` blob: ordinal, pci_bus_id, uuid, name),
    /// 3 = the first call through a handle lookup (`dlsym(handle, "ncclX")`) of a libnccl not seen
    /// before (only a changed `libraries` snapshot is stored);
    /// `blob_kind` repeats the blob's `BlobKind`.
    SnapshotTaken = 0x0305, "snapshot", SnapshotTaken { reason, blob_kind };
    /// The `ncclCollConfig_t` of a per-collective configuration call (NCCL 2.31's
    /// `ncclAllReduceConfig` ...), an `event` record in the calling thread's ring written just
    /// before the collective's own call record (which keeps the collective's id and view), only
    /// when the config pointer is not NULL. `comm` and `seq` are the collective's, so a reader
    /// joins the two by (comm, seq). Fields are read as NCCL reads the struct (within its `size`,
    /// only when its magic is NCCL's); one the struct does not reach, or left unset
    /// (`NCCL_CONFIG_UNDEF_INT`), reads as `u64::MAX`. `user_tag` is `userProfilerTag` (0:
    /// untagged), the value NCCL hands profiler plugins as v7's `userTag`. Format 2.2.
    CollConfig = 0x0306, "collConfig", CollConfig { seq, user_tag, min_ctas, max_ctas, nvls_ctas, cga_cluster_size, cta_policy, force_alg_selection, version };
    /// A test or benchmark record with no meaning of its own.
    Test = 0x03ff, "test", Test { a0, a1, a2, a3, a4, a5, a6, a7, a8 };
}

impl CallId {
    /// Whether the id is a CUDA driver function (its rc is a CUresult).
    pub fn is_cuda(self) -> bool {
        (0x0100..0x0200).contains(&(self as u16))
    }

    /// Whether the id is an NCCL collective or point-to-point call (it carries `seq`).
    pub fn is_nccl_operation(self) -> bool {
        (CallId::NcclAllReduce as u16..=CallId::NcclRecv as u16).contains(&(self as u16))
    }

    /// Whether the shim records this NCCL call in the calling thread's wrapping ring: the
    /// operations and group brackets a training loop makes millions of.
    pub fn is_hot(self) -> bool {
        self.is_nccl_operation()
            || matches!(self, CallId::NcclGroupStart | CallId::NcclGroupEnd)
            || self.is_cuda()
    }

    /// Whether this NCCL call is routine: not an operation, but a program may still make any
    /// number of them (`ncclGetVersion` in a loop, a buffer registered per step, a PreMulSum
    /// op per reduction), and its success says nothing the diagnosis needs. The shim records
    /// routine calls in the calling thread's wrapping ring, like hot calls, so they can never
    /// push a failure or a lifecycle record out of the keep ring; a routine call that fails is
    /// copied into the keep ring (`slot_flags::KEEP_COPY`), and so is the first successful
    /// `ncclGetVersion` (the version fact the report uses).
    pub fn is_routine(self) -> bool {
        matches!(
            self,
            CallId::NcclGetVersion
                | CallId::NcclMemAlloc
                | CallId::NcclMemFree
                | CallId::NcclCommRegister
                | CallId::NcclCommDeregister
                | CallId::NcclCommWindowRegister
                | CallId::NcclCommWindowDeregister
                | CallId::NcclRedOpCreatePreMulSum
                | CallId::NcclRedOpDestroy
                | CallId::NcclCommMemStats
                | CallId::NcclWinGetUserPtr
                | CallId::NcclGroupSimulateEnd
                | CallId::NcclPutSignal
                | CallId::NcclSignal
                | CallId::NcclWaitSignal
        )
    }

    /// Whether the shim records this call in the keep ring from its entry on: the rare
    /// records that must survive any volume of other calls (communicator creation, split,
    /// teardown, revoke, suspend/resume, uniqueId, async-error changes). Neither hot nor routine.
    pub fn is_kept(self) -> bool {
        !self.is_hot() && !self.is_routine()
    }

    /// The profiler event type bit (`1 << n`) for a profiler event id.
    pub fn profiler_type_bit(self) -> Option<u64> {
        let v = self as u16;
        (0x0200..0x0300).contains(&v).then(|| 1u64 << (v - 0x0200))
    }

    /// The profiler event id for an event type bit index (0 = Group … 15 = KernelPhase).
    pub fn from_profiler_bit_index(index: u32) -> Option<Self> {
        u16::try_from(index)
            .ok()
            .and_then(|i| Self::from_u16(0x0200 + i))
    }
}

/// A reference to a committed record: which ring and which sequence number. Profiler handles
/// and stop/state records carry it encoded as one `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotRef {
    pub ring: u32,
    pub seq: u64,
}

impl SlotRef {
    pub const SEQ_BITS: u32 = 48;

    /// `(ring + 1) << 48 | seq`: never 0, so 0 can mean "no record".
    #[inline]
    pub fn encode(self) -> u64 {
        (u64::from(self.ring + 1) << Self::SEQ_BITS) | (self.seq & ((1 << Self::SEQ_BITS) - 1))
    }

    #[inline]
    pub fn decode(v: u64) -> Option<Self> {
        let ring = (v >> Self::SEQ_BITS) as u32;
        (ring != 0).then(|| Self {
            ring: ring - 1,
            seq: v & ((1 << Self::SEQ_BITS) - 1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_fits_the_slot_and_round_trips() {
        for &id in CallId::ALL {
            assert!(id.arg_names().len() <= SLOT_ARGS, "{:?}", id);
            assert_eq!(CallId::from_u16(id as u16), Some(id));
        }
        // Every other value, inside the table and past it, is no call.
        let known: std::collections::BTreeSet<u16> =
            CallId::ALL.iter().map(|&c| c as u16).collect();
        let unknown = (0..=u16::MAX).filter(|v| !known.contains(v));
        assert!(unknown.clone().all(|v| CallId::from_u16(v).is_none()));
        assert_eq!(unknown.count(), 65536 - CallId::ALL.len());
    }

    /// A view reads the words it names and writes them back in the same slots, zeros after.
    fn round_trips<V: ArgView + std::fmt::Debug + PartialEq>() {
        let words: Vec<u64> = (1..=SLOT_ARGS as u64).collect();
        let v = V::from_args(&words);
        let back = v.to_args();
        let n = V::NAMES.len();
        assert_eq!(&back[..n], &words[..n], "{}", V::VIEW);
        assert!(back[n..].iter().all(|&w| w == 0), "{}", V::VIEW);
        assert_eq!(V::from_args(&back), v);
        // Words past a short slice read as 0.
        assert_eq!(V::from_args(&[]), V::default());
    }

    #[test]
    fn every_view_round_trips_and_indexes_by_name() {
        round_trips::<args::Collective>();
        round_trips::<args::PointToPoint>();
        round_trips::<args::CommInitRank>();
        round_trips::<args::NoArgs>();
        round_trips::<args::CuMemImportFromShareableHandle>();
        round_trips::<args::ProfColl>();
        round_trips::<args::ProfGpuDone>();
        round_trips::<args::Test>();
        assert_eq!(arg_index!(CommInitRank, cuda_dev), 8);
        assert_eq!(arg_index!(Collective, seq), 7);
        assert_eq!(arg_index!(PointToPoint, peer), 3);
        let v = args::Collective::from_args(&[0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((v.count, v.root, v.op_seq), (0, 3, 8));
    }

    #[test]
    fn every_call_names_its_view() {
        for &id in CallId::ALL {
            assert!(!id.view_name().is_empty());
        }
        assert_eq!(CallId::NcclBroadcast.view_name(), "Collective");
        assert_eq!(CallId::NcclRecv.view_name(), "PointToPoint");
        assert_eq!(CallId::NcclCommInitRankConfig.view_name(), "CommInitRank");
        assert_eq!(CallId::NcclRecv.arg_names()[3], "peer");
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = CallId::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }

    #[test]
    fn classification() {
        assert!(CallId::CuMemImportFromShareableHandle.is_cuda());
        assert!(!CallId::NcclAllReduce.is_cuda());
        assert!(CallId::NcclRecv.is_nccl_operation());
        assert!(!CallId::NcclGroupEnd.is_nccl_operation());
        // The diagnosis prunes successful operations by their own return code alone
        // (`prunable` in the diagnosis model): an async-error poll must never be one.
        assert!(!CallId::NcclCommGetAsyncError.is_nccl_operation());
        assert_eq!(CallId::ProfKernelCh.profiler_type_bit(), Some(1 << 6));
        assert_eq!(
            CallId::from_profiler_bit_index(15),
            Some(CallId::ProfKernelPhase)
        );
    }
}
