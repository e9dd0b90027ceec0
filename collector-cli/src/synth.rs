//! Synthetic job dumps written with the real dump writer, for golden tests, the fixture
//! generator (`examples/gen_synthetic.rs`) and the benchmark. Every file is marked
//! `WriterKind::Synthetic` and every identity is made up (`synthetic-boot-<host>`), so a report
//! over them says they are synthetic and nobody mistakes them for a capture.
//!
//! Records get real CLOCK_MONOTONIC times as they are written; a scenario that needs one rank's
//! event to come measurably later than another's calls [`Scenario::step`], which sleeps a few
//! milliseconds (far above the clock calibration uncertainty).

use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::identity::ProcessIdentity;
use ncclshim_dump::{Entry, Recorder, RingWriter};
use ncclshim_format::schema::slot_flags;
use ncclshim_format::{args, ArgView, BlobKind, CallId, RecordKind, WriterKind};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Size of the synthetic dumps (small: fixtures are committed).
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    pub rings: u32,
    pub slots_per_ring: u32,
    pub arena_bytes: u64,
}

impl Default for Geometry {
    fn default() -> Self {
        Self {
            rings: 2,
            slots_per_ring: 64,
            arena_bytes: 16 << 10,
        }
    }
}

/// One synthetic process (one rank): its shim dump and, on demand, its profiler dump.
pub struct SynthRank {
    pub host: String,
    pub rank: u32,
    rec: Recorder,
    ring: RingWriter,
    prof: Option<(Recorder, RingWriter)>,
    identity: ProcessIdentity,
    dir: PathBuf,
    prof_geometry: Geometry,
    next_comm: u64,
}

/// A whole synthetic job in one directory.
pub struct Scenario {
    pub dir: PathBuf,
    pub ranks: Vec<SynthRank>,
}

/// The uniqueId hash / commHash a scenario uses for its world communicator.
pub const WORLD_UID: u64 = 0x5eed_0000_c0ff_ee01;

fn config(dir: &Path, kind: WriterKind, g: Geometry) -> RecorderConfig {
    let mut c = RecorderConfig::defaults(kind, dir.to_path_buf());
    c.rings = g.rings;
    c.slots_per_ring = g.slots_per_ring;
    c.arena_bytes = g.arena_bytes;
    c.normalized()
}

impl Scenario {
    /// `hosts[i]` is the host of rank i (ranks on one host share a boot id); `name@machine`
    /// gives a container `name` on physical machine `machine` (containers of one machine share
    /// its boot id but not its hostname).
    pub fn new(dir: &Path, hosts: &[&str]) -> anyhow::Result<Self> {
        Self::with_geometry(dir, hosts, Geometry::default())
    }

    pub fn with_geometry(dir: &Path, hosts: &[&str], g: Geometry) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut ranks = Vec::with_capacity(hosts.len());
        for (i, spec) in hosts.iter().enumerate() {
            ranks.push(SynthRank::create(dir, spec, i as u32, g)?);
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            ranks,
        })
    }

    /// Lets enough time pass that what is written next is unambiguously later.
    pub fn step(&self) {
        std::thread::sleep(std::time::Duration::from_millis(3));
    }

    pub fn rank(&mut self, i: usize) -> &mut SynthRank {
        &mut self.ranks[i]
    }

    /// Standard snapshots on every rank: env (plus `extra_env`), libraries, host facts, GPU.
    pub fn snapshot_all(&mut self, nccl_version: i32) {
        let n = self.ranks.len();
        for r in &mut self.ranks {
            r.standard_snapshots(nccl_version, n);
        }
    }

    /// Every rank: `ncclGetVersion`, `ncclCommInitRank` on the world uid, `commCreated`.
    pub fn init_world(&mut self, nccl_version: u64) -> Vec<u64> {
        let n = self.ranks.len() as u64;
        self.ranks
            .iter_mut()
            .map(|r| {
                r.get_version(nccl_version);
                let rank = u64::from(r.rank);
                r.init_rank(n, rank, WORLD_UID, rank, 0, None, nccl_version)
            })
            .collect()
    }
}

/// Default host-facts JSON in the shape of `ncclshim_host_facts::HostFacts`.
pub fn host_facts_json(host: &str) -> Value {
    json!({
        "hostname": host,
        "boot_id": format!("synthetic-boot-{host}"),
        "kernel": "6.8.0-synthetic",
        "container": {"dockerenv": false, "containerenv": false, "cgroup": "0::/", "runtime": null},
        "dev_shm_bytes": 68_719_476_736u64,
        "dev_shm_free_bytes": 68_719_476_736u64,
        "memlock_soft_bytes": null,
        "memlock_hard_bytes": null,
        "memlock_unlimited": true,
        "peermem": [
            {"path": "/sys/kernel/mm/memory_peers/nv_mem/version", "exists": false, "content": null},
            {"path": "/sys/kernel/mm/memory_peers/nv_mem_nc/version", "exists": false, "content": null},
            {"path": "/sys/module/nvidia_peermem/version", "exists": false, "content": null}
        ],
        "libibverbs_dlopen": true,
        "libibverbs_path": "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
        "infiniband": ["mlx5_0"],
        "dev_infiniband": true,
        "netifs": [
            {"name": "lo", "up": true, "loopback": true, "addrs": ["127.0.0.1"]},
            {"name": "eth0", "up": true, "loopback": false, "addrs": ["10.0.0.1"]}
        ],
        "cpu_count": 64
    })
}

/// Libraries JSON in the shape of `ncclshim_host_facts::Libraries`.
pub fn libraries_json(nccl_path: &str, nccl_version: i32, driver: i32, runtime: i32) -> Value {
    json!({
        "libs": [
            {"kind": "nccl", "path": nccl_path, "version": nccl_version},
            {"kind": "cuda_driver", "path": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "version": driver},
            {"kind": "cuda_runtime", "path": "/opt/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12", "version": runtime}
        ],
        "nccl_paths": [nccl_path],
        "nccl_version": nccl_version,
        "cuda_driver": driver,
        "cuda_runtime": runtime,
        "nccl_static": false
    })
}

pub const WHEEL_NCCL: &str = "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2";

impl SynthRank {
    /// Rank `i` of a generated job on host `spec` (`name@machine` as in [`Scenario::new`]):
    /// its shim dump is created now. Ranks can be made one at a time (and dropped, closing their
    /// files) when a job is too large to hold every rank open at once.
    pub fn create(dir: &Path, spec: &str, i: u32, g: Geometry) -> anyhow::Result<Self> {
        let (host, machine) = spec.split_once('@').unwrap_or((spec, spec));
        let identity = ProcessIdentity {
            pid: 10_000 + i,
            ppid: 9_999,
            start_ticks: 70_000 + u64::from(i),
            boot_id: format!("synthetic-boot-{machine}"),
            hostname: host.to_owned(),
            clocksource: "synthetic".into(),
            // One generated job is one run (the CLI separates runs by this id).
            run: ncclshim_dump::run::RunIdentity {
                source: "synthetic".into(),
                id: "synthetic-job".into(),
                rank: i as i32,
            },
        };
        let rec = Recorder::create_with_identity(&config(dir, WriterKind::Synthetic, g), &identity)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let ring = rec.claim_ring();
        Ok(SynthRank {
            host: host.to_owned(),
            rank: i,
            rec,
            ring,
            prof: None,
            identity,
            dir: dir.to_path_buf(),
            prof_geometry: g,
            next_comm: 0x7f00_0000_1000 + (u64::from(i) << 20),
        })
    }

    /// The geometry of the profiler dump this rank makes on its first profiler event (the
    /// shim dump's by default).
    pub fn set_prof_geometry(&mut self, g: Geometry) {
        self.prof_geometry = g;
    }

    pub fn path(&self) -> &Path {
        self.rec.path()
    }

    fn snapshot(&self, kind: BlobKind, v: &Value) {
        let blob = self.rec.append_blob(kind, v.to_string().as_bytes());
        let mut e = Entry::new(RecordKind::Snapshot, CallId::SnapshotTaken);
        e.blob = blob;
        e.args = args::SnapshotTaken {
            reason: 0,
            blob_kind: kind as u64,
        }
        .to_args();
        self.ring.instant(&e);
    }

    pub fn env(&self, vars: &[(&str, &str)]) {
        let m: serde_json::Map<String, Value> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        self.snapshot(BlobKind::Environment, &Value::Object(m));
    }

    pub fn libraries(&self, v: &Value) {
        self.snapshot(BlobKind::Libraries, v);
    }

    pub fn host_facts(&self, v: &Value) {
        self.snapshot(BlobKind::HostFacts, v);
    }

    pub fn gpu(&self, ordinal: u32, pci_bus_id: &str, uuid: &str) {
        self.snapshot(
            BlobKind::Gpu,
            &json!({"ordinal": ordinal, "pci_bus_id": pci_bus_id, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3"}),
        );
    }

    /// Environment with launcher variables, libraries from the pip wheel, default host facts,
    /// and GPU `LOCAL_RANK` of the host.
    pub fn standard_snapshots(&mut self, nccl_version: i32, world: usize) {
        let local = self.rank % 8;
        let rank = self.rank.to_string();
        let local_s = local.to_string();
        let world_s = world.to_string();
        self.env(&[
            ("RANK", &rank),
            ("LOCAL_RANK", &local_s),
            ("WORLD_SIZE", &world_s),
            ("MASTER_ADDR", "10.0.0.1"),
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"),
        ]);
        self.libraries(&libraries_json(WHEEL_NCCL, nccl_version, 12080, 12040));
        self.host_facts(&host_facts_json(&self.host));
        self.gpu(
            local,
            &format!("0000:{:02x}:00.0", 0x18 + local * 0x10),
            &format!("GPU-synthetic-{}-{local}", self.host),
        );
    }

    /// Argument words from a slice (at most a slot's worth), zeros after.
    fn words(args: &[u64]) -> [u64; ncclshim_format::layout::SLOT_ARGS] {
        let mut w = [0; ncclshim_format::layout::SLOT_ARGS];
        w[..args.len()].copy_from_slice(args);
        w
    }

    fn call(&self, id: CallId, comm: u64, args: &[u64], rc: i32, err: Option<&str>, flags: u32) {
        let mut e = Entry::new(RecordKind::Call, id);
        e.comm = comm;
        e.flags = flags;
        e.args = Self::words(args);
        let p = self.ring.begin(&e);
        if let Some(text) = err {
            let b = self.rec.append_blob(BlobKind::ErrorText, text.as_bytes());
            p.set_blob(b, slot_flags::HAS_ERROR_TEXT);
        }
        p.complete(rc);
    }

    /// A call that never returns (the process died in it, or is still in it).
    pub fn in_flight(&self, id: CallId, comm: u64, args: &[u64]) {
        let mut e = Entry::new(RecordKind::Call, id);
        e.comm = comm;
        e.args = Self::words(args);
        // Never completed: the slot keeps its IN_FLIGHT exit time.
        let _pending = self.ring.begin(&e);
    }

    pub fn get_version(&self, v: u64) {
        let a = args::NcclGetVersion { version: v };
        self.call(CallId::NcclGetVersion, 0, &a.to_args(), 0, None, 0);
    }

    pub fn get_unique_id(&self, uid: u64, rc: i32, err: Option<&str>) {
        let a = args::NcclGetUniqueId {
            uid_hash: uid,
            ..Default::default()
        };
        self.call(CallId::NcclGetUniqueId, 0, &a.to_args(), rc, err, 0);
    }

    /// `ncclCommInitRank`; on success also a `commCreated` record. Returns the comm pointer.
    #[allow(clippy::too_many_arguments)]
    pub fn init_rank(
        &mut self,
        nranks: u64,
        rank: u64,
        uid: u64,
        dev: u64,
        rc: i32,
        err: Option<&str>,
        nccl_version: u64,
    ) -> u64 {
        let comm = if rc == 0 {
            self.next_comm += 0x100;
            self.next_comm
        } else {
            0
        };
        let init = Self::init_args(nranks, rank, uid, dev);
        self.call(CallId::NcclCommInitRank, comm, &init, rc, err, 0);
        if rc == 0 {
            let mut e = Entry::new(RecordKind::CommInfo, CallId::CommCreated);
            e.comm = comm;
            e.args = args::CommCreated {
                comm_hash: uid,
                nranks,
                rank,
                cuda_dev: dev,
                uid_hash: uid,
                nccl_version,
            }
            .to_args();
            self.ring.instant(&e);
        }
        comm
    }

    /// `ncclCommInitRank` that never returns.
    pub fn init_rank_in_flight(&self, nranks: u64, rank: u64, uid: u64, dev: u64) {
        let init = Self::init_args(nranks, rank, uid, dev);
        self.in_flight(CallId::NcclCommInitRank, 0, &init);
    }

    /// An init's arguments (the id's words are not synthesized: zeros).
    fn init_args(nranks: u64, rank: u64, uid: u64, dev: u64) -> [u64; 9] {
        args::CommInitRank {
            nranks,
            rank,
            uid_hash: uid,
            cuda_dev: dev,
            ..Default::default()
        }
        .to_args()
    }

    /// An operation's arguments (fixed buffer and stream addresses; `seq` is also `op_seq`).
    /// Send/recv store their peer in `root`'s slot.
    fn op_args(seq: u64, count: u64, datatype: u64, op: u64, root: u64) -> [u64; 9] {
        args::Collective {
            count,
            datatype,
            op,
            root,
            sendbuff: 0x7000_0000,
            recvbuff: 0x7100_0000,
            stream: 0x10,
            seq,
            op_seq: seq,
        }
        .to_args()
    }

    /// A collective with its per-comm sequence number; `root` is the peer for send/recv.
    #[allow(clippy::too_many_arguments)]
    pub fn coll(
        &self,
        id: CallId,
        comm: u64,
        seq: u64,
        count: u64,
        dtype: u64,
        op: u64,
        root: u64,
        rc: i32,
        err: Option<&str>,
    ) {
        let a = Self::op_args(seq, count, dtype, op, root);
        self.call(id, comm, &a, rc, err, 0);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn coll_in_flight(
        &self,
        id: CallId,
        comm: u64,
        seq: u64,
        count: u64,
        dtype: u64,
        op: u64,
        root: u64,
    ) {
        self.in_flight(id, comm, &Self::op_args(seq, count, dtype, op, root));
    }

    /// Any call with explicit arguments.
    pub fn raw_call(&self, id: CallId, comm: u64, args: &[u64], rc: i32, err: Option<&str>) {
        let flags = if id.is_cuda() {
            slot_flags::RC_IS_CUDA
        } else {
            0
        };
        self.call(id, comm, args, rc, err, flags);
    }

    /// `ncclCommGetAsyncError` observed changing to `value`.
    pub fn async_error(&self, comm: u64, value: u64, err: Option<&str>) {
        let a = args::NcclCommGetAsyncError {
            async_error: value,
            previous: 0,
        };
        self.call(CallId::NcclCommGetAsyncError, comm, &a.to_args(), 0, err, 0);
    }

    pub fn fatal_signal(&self, signo: u64) {
        let mut e = Entry::new(RecordKind::Event, CallId::FatalSignal);
        e.args = args::FatalSignal {
            signo,
            ..Default::default()
        }
        .to_args();
        self.ring.instant(&e);
    }

    pub fn clean_exit(&self) {
        self.rec.mark_clean_exit();
        if let Some((p, _)) = &self.prof {
            p.mark_clean_exit();
        }
    }

    fn prof(&mut self) -> &(Recorder, RingWriter) {
        if self.prof.is_none() {
            let mut cfg = config(&self.dir, WriterKind::Synthetic, self.prof_geometry);
            // Same identity, same writer kind: the file name gets a `.1` suffix from O_EXCL.
            cfg.writer_kind = WriterKind::Synthetic;
            let rec = Recorder::create_with_identity(&cfg, &self.identity).expect("profiler dump");
            let ring = rec.claim_ring();
            self.prof = Some((rec, ring));
        }
        self.prof.as_ref().expect("just set")
    }

    /// The profiler plugin's `init` for a communicator.
    pub fn prof_init(&mut self, comm_hash: u64, nranks: u64, rank: u64) {
        let (_, ring) = self.prof();
        let mut e = Entry::new(RecordKind::Event, CallId::ProfInit);
        e.comm = comm_hash;
        e.args = args::ProfInit {
            comm_hash,
            nnodes: 1,
            nranks,
            rank,
            abi_version: 7,
            mask: 0xffff,
            ..Default::default()
        }
        .to_args();
        ring.instant(&e);
    }

    /// The plugin's running aggregates for a communicator, as `agg::create` lays them out:
    /// `ops` AllReduce calls of `bytes` each that started, `ended` of them with their kernel's
    /// end and `gpu_ns` of GPU time each.
    #[allow(clippy::too_many_arguments)]
    pub fn prof_aggregates(
        &mut self,
        comm_hash: u64,
        nranks: i32,
        rank: i32,
        ops: u64,
        ended: u64,
        bytes: u64,
        gpu_ns: u64,
    ) {
        use ncclshim_format::aggregates as agg;
        if self.prof.is_none() {
            // Room for the table next to the rings, as the plugin's default arena has.
            self.prof_geometry.arena_bytes = self.prof_geometry.arena_bytes.max(256 << 10);
        }
        let mut p = agg::encode_empty(&agg::TableHeader {
            abi: 5,
            comm_id: comm_hash,
            rank,
            nranks,
            nnodes: 1,
            ctx: 0,
        });
        let func = ncclshim_format::profnames::NameTable::Func.code_of(b"AllReduce");
        let base = agg::HEADER_BYTES + agg::cell_index(func, bytes) * agg::CELL_WORDS * 8;
        let words = [
            ops,
            ops * bytes,
            ended,
            ended * bytes,
            ended * gpu_ns,
            gpu_ns,
        ];
        for (k, v) in words.iter().enumerate() {
            p[base + 8 * k..base + 8 * k + 8].copy_from_slice(&v.to_le_bytes());
        }
        let (rec, _) = self.prof();
        assert_ne!(
            rec.append_blob(BlobKind::ProfAggregates, &p),
            0,
            "the profiler dump's arena holds the table"
        );
    }

    /// One profiler Coll event with a KernelCh child; `stopped`/`kernel_done` say how far it got.
    #[allow(clippy::too_many_arguments)]
    pub fn prof_coll(
        &mut self,
        comm_hash: u64,
        seq: u64,
        func: u64,
        count: u64,
        dtype: u64,
        root: u64,
        stopped: bool,
        kernel_done: bool,
    ) {
        let (_, ring) = self.prof();
        let mut e = Entry::new(RecordKind::ProfStart, CallId::ProfColl);
        e.comm = comm_hash;
        e.args = args::ProfColl {
            seq,
            func,
            count,
            datatype: dtype,
            root,
            ..Default::default()
        }
        .to_args();
        let coll = ring.instant(&e).encode();
        let mut k = Entry::new(RecordKind::ProfStart, CallId::ProfKernelCh);
        k.comm = comm_hash;
        k.args = args::ProfKernelCh {
            parent: coll,
            ..Default::default()
        }
        .to_args();
        let kernel = ring.instant(&k).encode();
        if kernel_done {
            let mut s = Entry::new(RecordKind::ProfStop, CallId::ProfKernelCh);
            s.comm = comm_hash;
            s.args = args::ProfStop { handle: kernel }.to_args();
            ring.instant(&s);
        }
        if stopped {
            let mut s = Entry::new(RecordKind::ProfStop, CallId::ProfColl);
            s.comm = comm_hash;
            s.args = args::ProfStop { handle: coll }.to_args();
            ring.instant(&s);
        }
    }

    /// A profiler P2p event with the default event mask (channels summarized): NCCL starts it
    /// after the kernel launch and the plugin completes it in place; a GPU-done record follows
    /// when `gpu_done`. A send/recv to the rank itself never gets one on a real NCCL
    /// (`knowledge/profiler.toml`, `self-p2p-no-gpu-end`).
    pub fn prof_p2p_summarized(
        &mut self,
        comm_hash: u64,
        func: &[u8],
        count: u64,
        peer: u64,
        gpu_done: bool,
    ) {
        use ncclshim_format::profnames::NameTable;
        let (_, ring) = self.prof();
        let mut e = Entry::new(RecordKind::ProfStart, CallId::ProfP2p);
        e.comm = comm_hash;
        e.flags = slot_flags::COMPLETES_IN_PLACE | slot_flags::ENDS_AT_GPU_DONE;
        e.args = args::ProfP2p {
            func: u64::from(NameTable::Func.code_of(func)),
            count,
            datatype: u64::from(NameTable::Datatype.code_of(b"ncclFloat32")),
            peer,
            ..Default::default()
        }
        .to_args();
        let op = ring.begin(&e).slot_ref();
        if gpu_done {
            let mut d = Entry::new(RecordKind::ProfState, CallId::ProfP2p);
            d.args = args::ProfGpuDone {
                handle: op.encode(),
                state: ncclshim_format::schema::PROF_STATE_GPU_DONE,
                gpu_start: 1_000,
                gpu_stop: 2_000,
                channels: 1,
            }
            .to_args();
            ring.instant(&d);
        }
    }
}
