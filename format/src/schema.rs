//! What the numbers in a slot mean: record kinds, call ids (with the names of their nine
//! arguments) and blob kinds. Writers store ids, never strings, so a record costs one 128-byte
//! store; the reader turns ids back into names with these tables. [`SlotRef`] is how one record
//! names another in its arguments. Ids are append-only: a new id is a minor format change, and a
//! reader that meets an id it does not know keeps the record under a numeric name instead of
//! failing.

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

macro_rules! call_ids {
    ($( $(#[$doc:meta])* $variant:ident = $id:literal, $name:literal, [$($arg:literal),* $(,)?]; )*) => {
        /// Every function or event a record can be about.
        #[repr(u16)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum CallId {
            $( $(#[$doc])* $variant = $id, )*
        }

        impl CallId {
            pub fn from_u16(v: u16) -> Option<Self> {
                match v {
                    $( $id => Some(Self::$variant), )*
                    _ => None,
                }
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
                    $( Self::$variant => &[$($arg),*], )*
                }
            }

            /// Every id, for tests and for tools that list the schema.
            pub const ALL: &'static [CallId] = &[$( Self::$variant, )*];
        }
    };
}

call_ids! {
    // ---- NCCL API (0x0001..) ----
    NcclGetVersion = 0x0001, "ncclGetVersion", ["version"];
    /// uid0..uid4 are the first 40 bytes of the id: magic, root sockaddr, nRanks.
    NcclGetUniqueId = 0x0002, "ncclGetUniqueId", ["uid_hash", "uid0", "uid1", "uid2", "uid3", "uid4"];
    /// `comm` is the new communicator once the call returns.
    NcclCommInitRank = 0x0003, "ncclCommInitRank",
        ["nranks", "rank", "uid_hash", "uid0", "uid1", "uid2", "uid3", "uid4", "cuda_dev"];
    /// The shim writes the `ncclConfig_t` of every init/split/shrink/grow as an `Event` record
    /// of the same call id just before the call, with a `CommConfig` blob (the call's own blob
    /// slot is kept for NCCL's error text).
    NcclCommInitRankConfig = 0x0004, "ncclCommInitRankConfig",
        ["nranks", "rank", "uid_hash", "uid0", "uid1", "uid2", "uid3", "uid4", "cuda_dev"];
    NcclCommInitRankScalable = 0x0005, "ncclCommInitRankScalable",
        ["nranks", "rank", "uid_hash", "uid0", "uid1", "uid2", "uid3", "n_ids", "cuda_dev"];
    NcclCommInitAll = 0x0006, "ncclCommInitAll", ["ndev", "dev0", "dev1", "dev2", "dev3", "first_comm"];
    /// `comm` is the parent.
    NcclCommSplit = 0x0007, "ncclCommSplit", ["color", "key", "new_comm", "comm_hash", "nranks", "rank"];
    NcclCommShrink = 0x0008, "ncclCommShrink",
        ["exclude_count", "shrink_flags", "new_comm", "exclude0", "exclude1", "exclude2", "exclude3"];
    NcclCommGrow = 0x0009, "ncclCommGrow", ["nranks", "rank", "uid_hash", "new_comm"];
    NcclCommFinalize = 0x000a, "ncclCommFinalize", [];
    NcclCommDestroy = 0x000b, "ncclCommDestroy", [];
    NcclCommAbort = 0x000c, "ncclCommAbort", [];
    NcclCommRevoke = 0x000d, "ncclCommRevoke", ["flags"];
    /// Recorded only when the value changes (PyTorch's watchdog polls it constantly).
    NcclCommGetAsyncError = 0x000e, "ncclCommGetAsyncError", ["async_error", "previous"];
    NcclGroupStart = 0x000f, "ncclGroupStart", ["depth"];
    NcclGroupEnd = 0x0010, "ncclGroupEnd", ["depth"];
    NcclAllReduce = 0x0011, "ncclAllReduce",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclBroadcast = 0x0012, "ncclBroadcast",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclBcast = 0x0013, "ncclBcast",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclReduce = 0x0014, "ncclReduce",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclAllGather = 0x0015, "ncclAllGather",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclReduceScatter = 0x0016, "ncclReduceScatter",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclAlltoAll = 0x0017, "ncclAlltoAll",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclGather = 0x0018, "ncclGather",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclScatter = 0x0019, "ncclScatter",
        ["count", "datatype", "op", "root", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclSend = 0x001a, "ncclSend",
        ["count", "datatype", "op", "peer", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclRecv = 0x001b, "ncclRecv",
        ["count", "datatype", "op", "peer", "sendbuff", "recvbuff", "stream", "seq", "op_seq"];
    NcclMemAlloc = 0x001c, "ncclMemAlloc", ["ptr", "size"];
    NcclMemFree = 0x001d, "ncclMemFree", ["ptr"];
    NcclCommRegister = 0x001e, "ncclCommRegister", ["buff", "size", "handle"];
    NcclCommDeregister = 0x001f, "ncclCommDeregister", ["handle"];
    NcclCommWindowRegister = 0x0020, "ncclCommWindowRegister", ["buff", "size", "window", "flags"];
    NcclCommWindowDeregister = 0x0021, "ncclCommWindowDeregister", ["window"];
    NcclCommSuspend = 0x0022, "ncclCommSuspend", ["flags"];
    NcclCommResume = 0x0023, "ncclCommResume", [];
    NcclCommGetUniqueId = 0x0024, "ncclCommGetUniqueId", ["uid_hash"];
    NcclRedOpCreatePreMulSum = 0x0025, "ncclRedOpCreatePreMulSum", ["op", "datatype", "residence"];
    NcclRedOpDestroy = 0x0026, "ncclRedOpDestroy", ["op"];

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
    CuMemExportToShareableHandle = 0x0100, "cuMemExportToShareableHandle",
        ["shareable_handle", "handle", "handle_type", "flags", "device", "pci_bus_id", "caller"];
    /// `os_handle` is the fd for POSIX_FD (handle_type 1), the raw pointer value otherwise;
    /// device/pci/uuid describe the calling thread's current device.
    CuMemImportFromShareableHandle = 0x0101, "cuMemImportFromShareableHandle",
        ["handle", "os_handle", "handle_type", "device", "pci_bus_id", "uuid_hi", "uuid_lo", "caller"];
    CuMemCreate = 0x0102, "cuMemCreate",
        ["handle", "size", "prop_type", "location_type", "location_id", "handle_types", "flags", "caller"];
    CuMemRelease = 0x0103, "cuMemRelease", ["handle", "caller"];
    CuMemMap = 0x0104, "cuMemMap", ["ptr", "size", "offset", "handle", "flags", "caller"];
    CuMemUnmap = 0x0105, "cuMemUnmap", ["ptr", "size", "caller"];
    CuMemSetAccess = 0x0106, "cuMemSetAccess",
        ["ptr", "size", "count", "location_type", "location_id", "access_flags", "caller"];
    CuMemAddressReserve = 0x0107, "cuMemAddressReserve", ["ptr", "size", "alignment", "addr", "flags", "caller"];
    CuMemAddressFree = 0x0108, "cuMemAddressFree", ["ptr", "size", "caller"];
    CuMemRetainAllocationHandle = 0x0109, "cuMemRetainAllocationHandle", ["handle", "addr", "caller"];
    CuMemGetHandleForAddressRange = 0x010a, "cuMemGetHandleForAddressRange",
        ["handle", "ptr", "size", "handle_type", "flags", "caller"];
    CuMulticastCreate = 0x010b, "cuMulticastCreate",
        ["handle", "size", "num_devices", "handle_types", "flags", "caller"];
    CuMulticastAddDevice = 0x010c, "cuMulticastAddDevice", ["mc_handle", "device", "caller"];
    CuMulticastBindMem = 0x010d, "cuMulticastBindMem",
        ["mc_handle", "mc_offset", "mem_handle", "mem_offset", "size", "flags", "caller"];
    CuMulticastBindAddr = 0x010e, "cuMulticastBindAddr", ["mc_handle", "mc_offset", "ptr", "size", "flags", "caller"];
    CuMulticastUnbind = 0x010f, "cuMulticastUnbind", ["mc_handle", "device", "mc_offset", "size", "caller"];
    /// `handle_w0`/`handle_w1`: the first 16 bytes of the 64-byte IPC handle, little-endian.
    CuIpcGetMemHandle = 0x0110, "cuIpcGetMemHandle", ["ptr", "handle_w0", "handle_w1", "device", "caller"];
    /// `abi` is 1 for the 4010 entry point and 2 for the 11000 one.
    CuIpcOpenMemHandle = 0x0111, "cuIpcOpenMemHandle",
        ["ptr", "handle_w0", "handle_w1", "flags", "abi", "device", "pci_bus_id", "caller"];
    CuIpcCloseMemHandle = 0x0112, "cuIpcCloseMemHandle", ["ptr", "caller"];
    CuMulticastGetGranularity = 0x0113, "cuMulticastGetGranularity", ["granularity", "option", "caller"];

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
    ProfGroup = 0x0200, "Group", ["handle", "parent", "seq", "comm_hash", "rank"];
    /// `count` is in bytes with datatype ncclInt8 for AllGather/Broadcast (NCCL's convention);
    /// `algo_proto` = algo | proto << 8, `channels_warps` = channels | warps << 8 | flags << 16.
    ProfColl = 0x0201, "Coll",
        ["handle", "parent", "seq", "func", "count", "datatype", "root", "algo_proto", "channels_warps"];
    ProfP2p = 0x0202, "P2p", ["handle", "parent", "func", "count", "datatype", "peer", "channels", "buff"];
    ProfProxyOp = 0x0203, "ProxyOp", ["handle", "parent", "pid", "channel", "peer", "n_steps", "chunk_size", "is_send"];
    ProfProxyStep = 0x0204, "ProxyStep", ["handle", "parent", "step"];
    ProfProxyCtrl = 0x0205, "ProxyCtrl", ["handle", "parent"];
    /// `gpu_stop_ns` (state 22's pTimer) is filled in place when the thread that started the
    /// event reports its kernel stop; otherwise it stays 0 and a `ProfState` 22 record holds it.
    ProfKernelCh = 0x0206, "KernelCh", ["handle", "parent", "channel", "gpu_start_ns", "gpu_stop_ns"];
    /// `w0..w2` copy the net plugin's event (IB: device | opcode << 32, wr_id, length;
    /// socket: fd | op << 32, 0, length); the event struct type byte is in `plugin_id`'s high bits.
    ProfNetPlugin = 0x0207, "NetPlugin", ["handle", "parent", "plugin_id", "w0", "w1", "w2"];
    ProfGroupApi = 0x0208, "GroupApi", ["handle", "parent", "depth", "graph_captured"];
    ProfCollApi = 0x0209, "CollApi", ["handle", "parent", "func", "count", "datatype", "root", "stream", "graph_captured", "user_tag"];
    ProfP2pApi = 0x020a, "P2pApi", ["handle", "parent", "func", "count", "datatype", "stream", "graph_captured", "user_tag"];
    ProfKernelLaunch = 0x020b, "KernelLaunch", ["handle", "parent", "stream"];
    ProfCeColl = 0x020c, "CeColl", ["handle", "parent", "seq", "func", "count", "datatype", "root", "stream"];
    ProfCeSync = 0x020d, "CeSync", ["handle", "parent", "is_complete", "nranks"];
    ProfCeBatch = 0x020e, "CeBatch", ["handle", "parent", "num_ops", "total_bytes", "intra_sync"];
    /// `gpu_stop_ns`: state 31's pTimer, in place or in a `ProfState` 31 record (as KernelCh).
    ProfKernelPhase = 0x020f, "KernelPhase", ["handle", "parent", "channel", "phase", "gpu_start_ns", "gpu_stop_ns"];

    // ---- Recorder events (0x0300..) ----
    /// A profiler plugin `init`: comm hash, rank, size; `blob` is the communicator name.
    /// `agg_blob` is the file offset of the comm's `ProfAggregates` blob (0 when the arena was full);
    /// v1-v3 inits carry no comm facts (comm_hash 0, rank/nranks -1 as u64).
    ProfInit = 0x0300, "profilerInit",
        ["comm_hash", "nnodes", "nranks", "rank", "abi_version", "mask", "agg_blob", "ctx"];
    ProfFinalize = 0x0301, "profilerFinalize", ["comm_hash", "events", "ctx"];
    /// A communicator came up (shim: after a successful init): join key for cross-rank analysis.
    CommCreated = 0x0302, "commCreated", ["comm_hash", "nranks", "rank", "cuda_dev", "uid_hash", "nccl_version"];
    /// A free-text note from the recorder itself (`blob`).
    RecorderNote = 0x0303, "recorderNote", [];
    /// A fatal signal reached the process (if the recorder installed a handler).
    FatalSignal = 0x0304, "fatalSignal", ["signo", "code", "addr"];
    /// A snapshot of environment / libraries / host facts (`blob`). `reason`: 0 = the dump was
    /// created (first NCCL event), 1 = a communicator init (only changed snapshots are stored),
    /// 2 = the shim's driver hooks first saw a device (a `gpu` blob: ordinal, pci_bus_id, uuid, name),
    /// 3 = the first call through a handle lookup (`dlsym(handle, "ncclX")`) of a libnccl not seen
    /// before (only a changed `libraries` snapshot is stored);
    /// `blob_kind` repeats the blob's `BlobKind`.
    SnapshotTaken = 0x0305, "snapshot", ["reason", "blob_kind"];
    /// A test or benchmark record with no meaning of its own.
    Test = 0x03ff, "test", ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"];
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
    /// operations and group brackets a training loop makes millions of. Every other NCCL call
    /// (communicator lifecycle, errors, registration, version) is rare and goes to the keep
    /// ring, which no number of hot calls can overwrite.
    pub fn is_hot(self) -> bool {
        self.is_nccl_operation()
            || matches!(self, CallId::NcclGroupStart | CallId::NcclGroupEnd)
            || self.is_cuda()
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
    use crate::layout::SLOT_ARGS;

    #[test]
    fn every_call_fits_the_slot_and_round_trips() {
        for &id in CallId::ALL {
            assert!(id.arg_names().len() <= SLOT_ARGS, "{:?}", id);
            assert_eq!(CallId::from_u16(id as u16), Some(id));
        }
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
        assert_eq!(CallId::ProfKernelCh.profiler_type_bit(), Some(1 << 6));
        assert_eq!(
            CallId::from_profiler_bit_index(15),
            Some(CallId::ProfKernelPhase)
        );
    }
}
