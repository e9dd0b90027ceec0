//! NCCL emulator test harness: drives a built profiler plugin `.so` the way NCCL does, with no
//! GPU and no libnccl. It is a test double for NCCL's profiler core (named as such): it
//! `dlopen`s the library `RTLD_NOW | RTLD_LOCAL`, probes `ncclProfiler_v7` ... `_v1` newest
//! first (or forces one version), calls `init` with that version's argument order, honours the
//! activation mask the plugin wrote (an event is started when its bit or a descendant's is
//! set; a NULL handle means no stop/state and a NULL parent for children), emits the documented
//! event order from a user thread and a proxy thread, then finalizes and `dlclose`s.
//!
//! What it emits is also logged ([`Expect`]) so tests compare the dump against the scenario,
//! never against hard-coded numbers.

#![allow(dead_code)]

use nccl_profiler_ncclshim::abi::{self, event, StateArgsV1, StateArgsV4};
use nccl_profiler_ncclshim::{v1, v2, v3, v4, v5, v6, v7};
use std::ffi::{c_char, c_int, c_void, CString};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// The cargo-built plugin, found from the running test or example binary
/// (`target/<profile>/{deps,examples}/x`). `cargo test` refreshes only the copy in `deps/`
/// (the one next to `target/<profile>/` is updated by `cargo build`), so `deps/` comes first.
/// `NCCLSHIM_PLUGIN_PATH` overrides.
pub fn plugin_path() -> PathBuf {
    if let Some(p) = std::env::var_os("NCCLSHIM_PLUGIN_PATH") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    let fresh = dir.join("deps").join("libnccl_profiler_ncclshim.so");
    if fresh.exists() {
        return fresh;
    }
    dir.join("libnccl_profiler_ncclshim.so")
}

/// The library names NCCL tries for an `NCCL_PROFILER_PLUGIN` value (nccl-facts §2).
pub fn nccl_library_names(value: Option<&str>) -> Vec<String> {
    match value {
        None => vec!["libnccl-profiler.so".into()],
        Some(v) => {
            let mut names = vec![v.to_owned()];
            let lib_so = v.starts_with("lib") && v.ends_with(".so");
            if !v.contains('/') && !lib_so {
                names.push(format!("libnccl-profiler-{v}.so"));
            }
            names
        }
    }
}

type AnyTable = abi::ProfilerTable<*const c_void, c_void, c_void>;

/// A loaded plugin at one ABI version.
pub struct Plugin {
    lib: *mut c_void,
    table: *const AnyTable,
    pub version: u32,
    pub name: String,
}

// SAFETY: the table is immutable static data inside a library that stays loaded while the
// Plugin exists; NCCL calls it from many threads too.
unsafe impl Send for Plugin {}
// SAFETY: as above.
unsafe impl Sync for Plugin {}

/// The process-global activation mask NCCL owns and hands to every init.
pub static MASK: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

fn mask() -> u32 {
    MASK.load(std::sync::atomic::Ordering::Relaxed) as u32
}

impl Plugin {
    /// `force`: load exactly `ncclProfiler_v{force}`; otherwise the newest the library has.
    pub fn load(path: &Path, force: Option<u32>) -> Result<Self, String> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: valid C string; RTLD_NOW|RTLD_LOCAL exactly as NCCL opens plugins.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns a static message or NULL.
            let err = unsafe { libc::dlerror() };
            let msg = if err.is_null() {
                "unknown".to_owned()
            } else {
                // SAFETY: non-null C string from dlerror.
                unsafe { std::ffi::CStr::from_ptr(err) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(format!("dlopen {}: {msg}", path.display()));
        }
        let versions: Vec<u32> = match force {
            Some(v) => vec![v],
            None => (1..=7).rev().collect(),
        };
        for v in versions {
            let sym = CString::new(format!("ncclProfiler_v{v}")).expect("symbol name");
            // SAFETY: lib is a live handle; sym a valid C string.
            let t = unsafe { libc::dlsym(lib, sym.as_ptr()) };
            if !t.is_null() {
                let table = t as *const AnyTable;
                // SAFETY: every ncclProfiler_vN starts with `const char* name`.
                let name = unsafe { std::ffi::CStr::from_ptr((*table).name) }
                    .to_string_lossy()
                    .into_owned();
                return Ok(Self {
                    lib,
                    table,
                    version: v,
                    name,
                });
            }
        }
        // SAFETY: lib is live; closing our reference.
        unsafe { libc::dlclose(lib) };
        Err("no ncclProfiler_vN symbol".into())
    }

    fn t(&self) -> &AnyTable {
        // SAFETY: points into the loaded library (see Send/Sync).
        unsafe { &*self.table }
    }

    /// `init` with this version's argument order. Returns NCCL's result and the context.
    pub fn init(
        &self,
        comm_id: u64,
        name: Option<&str>,
        nnodes: i32,
        nranks: i32,
        rank: i32,
    ) -> (i32, *mut c_void) {
        let mut ctx: *mut c_void = std::ptr::null_mut();
        let name_c = name.map(|n| CString::new(n).expect("name"));
        let name_p = name_c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let mask_p = MASK.as_ptr();
        let f = self.t().init;
        let _e = ErrnoCheck::new();
        // SAFETY: `init` has the signature of this version (transmuted from the table's raw
        // pointer), all pointers are valid for the call.
        let rc = unsafe {
            match self.version {
                1..=3 => std::mem::transmute::<*const c_void, abi::InitV1>(f)(&mut ctx, mask_p),
                4 => std::mem::transmute::<*const c_void, abi::InitV4>(f)(
                    &mut ctx,
                    mask_p,
                    name_p,
                    comm_id,
                    nnodes,
                    nranks,
                    rank,
                    std::ptr::null(),
                ),
                _ => std::mem::transmute::<*const c_void, abi::InitV5>(f)(
                    &mut ctx,
                    comm_id,
                    mask_p,
                    name_p,
                    nnodes,
                    nranks,
                    rank,
                    std::ptr::null(),
                ),
            }
        };
        (rc, ctx)
    }

    fn start_raw(&self, ctx: *mut c_void, descr: *mut c_void) -> u64 {
        let mut h: *mut c_void = std::ptr::null_mut();
        let _e = ErrnoCheck::new();
        // SAFETY: descr points to a descriptor of this version's layout.
        let rc = unsafe { (self.t().start_event)(ctx, &mut h, descr) };
        assert_eq!(rc, 0, "startEvent must not fail");
        h as u64
    }

    pub fn stop(&self, h: u64) {
        if h != 0 {
            let _e = ErrnoCheck::new();
            // SAFETY: a handle the plugin returned.
            assert_eq!(unsafe { (self.t().stop_event)(h as *mut c_void) }, 0);
        }
    }

    /// `recordEventState` with the version's state-args type; `value` goes where the state
    /// puts its value (pTimer, transSize...). `None` passes NULL args.
    pub fn state(&self, h: u64, state: u32, value: Option<u64>) {
        if h == 0 {
            return;
        }
        let f = self.t().record_event_state;
        let _e = ErrnoCheck::new();
        let rc = if self.version <= 3 {
            let mut a: StateArgsV1 = unsafe_zeroed();
            a.proxy_op.trans_size = value.unwrap_or(0) as usize;
            let p = value.map_or(std::ptr::null_mut(), |_| {
                (&mut a as *mut StateArgsV1).cast()
            });
            // SAFETY: handle from the plugin, args NULL or a valid v1 union.
            unsafe { f(h as *mut c_void, state as c_int, p) }
        } else {
            let mut a = StateArgsV4 {
                p_timer: value.unwrap_or(0),
            };
            let p = value.map_or(std::ptr::null_mut(), |_| {
                (&mut a as *mut StateArgsV4).cast()
            });
            // SAFETY: handle from the plugin, args NULL or a valid v4 union.
            unsafe { f(h as *mut c_void, state as c_int, p) }
        };
        assert_eq!(rc, 0, "recordEventState must not fail");
    }

    pub fn finalize(&self, ctx: *mut c_void) -> i32 {
        if ctx.is_null() {
            return 0; // NCCL calls finalize only for a non-NULL context
        }
        // SAFETY: ctx from this plugin's init.
        unsafe { (self.t().finalize)(ctx) }
    }

    /// Starts an event if the mask asks for it or a descendant (NCCL's rule); 0 otherwise.
    pub fn start(&self, ctx: *mut c_void, ev: &Ev, parent: u64, rank: i32) -> u64 {
        if mask() & ev.wanted_if() == 0 {
            return 0;
        }
        match self.version {
            1 => self.start_v1(ctx, ev, parent, rank),
            2 => self.start_v2(ctx, ev, parent, rank),
            3 => self.start_v3(ctx, ev, parent, rank),
            4 => self.start_v4(ctx, ev, parent, rank),
            _ => self.start_v5plus(ctx, ev, parent, rank),
        }
    }
}

/// Sets errno to a sentinel before a callback and checks the plugin left it alone (NCCL and
/// the application around it may be in the middle of reading errno).
struct ErrnoCheck;

const ERRNO_SENTINEL: c_int = 4242;

impl ErrnoCheck {
    fn new() -> Self {
        // SAFETY: the calling thread's errno.
        unsafe { *libc::__errno_location() = ERRNO_SENTINEL };
        Self
    }
}

impl Drop for ErrnoCheck {
    fn drop(&mut self) {
        // SAFETY: the calling thread's errno.
        let e = unsafe { *libc::__errno_location() };
        if !std::thread::panicking() {
            assert_eq!(e, ERRNO_SENTINEL, "the plugin changed errno");
        }
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        // SAFETY: the handle from dlopen, closed once (NCCL dlcloses at the last finalize).
        unsafe { libc::dlclose(self.lib) };
    }
}

fn unsafe_zeroed<T>() -> T {
    // SAFETY: only used for repr(C) descriptor/args types made of integers, raw pointers and
    // bools, for which all-zero bytes are valid.
    unsafe { MaybeUninit::<T>::zeroed().assume_init() }
}

/// An event as the emulator describes it, before it is laid out for one ABI version.
#[derive(Debug, Clone)]
pub enum Ev {
    Group,
    GroupApi {
        depth: i32,
    },
    CollApi {
        func: &'static str,
        count: u64,
        dtype: &'static str,
        root: i32,
    },
    P2pApi {
        func: &'static str,
        count: u64,
        dtype: &'static str,
    },
    KernelLaunch,
    Coll(CollEv),
    P2p {
        func: &'static str,
        count: u64,
        dtype: &'static str,
        peer: i32,
        channels: u8,
        comm_hash: u64,
    },
    ProxyOp {
        pid: i32,
        channel: u8,
        peer: i32,
    },
    ProxyStep {
        step: i32,
    },
    KernelCh {
        channel: u8,
        p_timer: u64,
    },
}

#[derive(Debug, Clone)]
pub struct CollEv {
    pub seq: u64,
    pub func: &'static str,
    pub count: u64,
    pub dtype: &'static str,
    pub root: i32,
    pub channels: u8,
    pub algo: &'static str,
    pub proto: &'static str,
    pub comm_hash: u64,
}

impl Ev {
    /// The mask bits for which NCCL starts this event (itself or a descendant).
    fn wanted_if(&self) -> u32 {
        use event::*;
        let below_coll = COLL | PROXY_OP | PROXY_STEP | KERNEL_CH | NET_PLUGIN;
        match self {
            Ev::Group => GROUP | below_coll | P2P,
            Ev::GroupApi { .. } => {
                GROUP_API | COLL_API | P2P_API | KERNEL_LAUNCH | below_coll | P2P
            }
            Ev::CollApi { .. } => COLL_API | below_coll,
            Ev::P2pApi { .. } => P2P_API | P2P | PROXY_OP | PROXY_STEP | KERNEL_CH | NET_PLUGIN,
            Ev::KernelLaunch => KERNEL_LAUNCH,
            Ev::Coll(_) => below_coll,
            Ev::P2p { .. } => P2P | PROXY_OP | PROXY_STEP | KERNEL_CH | NET_PLUGIN,
            Ev::ProxyOp { .. } => PROXY_OP | PROXY_STEP | NET_PLUGIN,
            Ev::ProxyStep { .. } => PROXY_STEP | NET_PLUGIN,
            Ev::KernelCh { .. } => KERNEL_CH,
        }
    }

    fn type_bit(&self) -> u32 {
        use event::*;
        match self {
            Ev::Group => GROUP,
            Ev::GroupApi { .. } => GROUP_API,
            Ev::CollApi { .. } => COLL_API,
            Ev::P2pApi { .. } => P2P_API,
            Ev::KernelLaunch => KERNEL_LAUNCH,
            Ev::Coll(_) => COLL,
            Ev::P2p { .. } => P2P,
            Ev::ProxyOp { .. } => PROXY_OP,
            Ev::ProxyStep { .. } => PROXY_STEP,
            Ev::KernelCh { .. } => KERNEL_CH,
        }
    }
}

/// NCCL's static string literals: one stable pointer per text, like NCCL's.
pub fn lit(s: &str) -> *const c_char {
    let p: &'static std::ffi::CStr = match s {
        "AllReduce" => c"AllReduce",
        "AllGather" => c"AllGather",
        "ReduceScatter" => c"ReduceScatter",
        "Broadcast" => c"Broadcast",
        "Send" => c"Send",
        "Recv" => c"Recv",
        "ncclFloat32" => c"ncclFloat32",
        "ncclBfloat16" => c"ncclBfloat16",
        "ncclInt8" => c"ncclInt8",
        "RING" => c"RING",
        "TREE" => c"TREE",
        "SIMPLE" => c"SIMPLE",
        "LL" => c"LL",
        "LL128" => c"LL128",
        "FutureColl" => c"FutureColl",
        _ => panic!("emulator has no literal for {s}"),
    };
    p.as_ptr()
}

/// NCCL's v1 enum values.
fn v1_enum(s: &str) -> u8 {
    match s {
        "Broadcast" => 0,
        "AllGather" => 2,
        "ReduceScatter" => 3,
        "AllReduce" => 4,
        "Send" => 6,
        "Recv" => 7,
        "ncclInt8" => 0,
        "ncclFloat32" => 7,
        "ncclBfloat16" => 9,
        "TREE" => 0,
        "RING" => 1,
        "LL" => 0,
        "LL128" => 1,
        "SIMPLE" => 2,
        _ => 255,
    }
}

impl Plugin {
    fn start_v1(&self, ctx: *mut c_void, ev: &Ev, parent: u64, rank: i32) -> u64 {
        let mut d: v1::Descr = unsafe_zeroed();
        d.type_ = ev.type_bit() as u8;
        d.parent_obj = parent as *mut c_void;
        d.rank = rank;
        match ev {
            Ev::Coll(c) => {
                d.u.coll = v1::CollV1 {
                    comm_hash: c.comm_hash,
                    seq_number: c.seq,
                    func: v1_enum(c.func),
                    count: c.count as usize,
                    root: c.root,
                    datatype: v1_enum(c.dtype),
                    n_max_channels: c.channels,
                    n_warps: 16,
                    algo: v1_enum(c.algo),
                    proto: v1_enum(c.proto),
                    ..unsafe_zeroed()
                }
            }
            Ev::P2p {
                func,
                count,
                dtype,
                peer,
                comm_hash,
                ..
            } => {
                d.u.p2p = v1::P2pV1 {
                    comm_hash: *comm_hash,
                    func: v1_enum(func),
                    datatype: v1_enum(dtype),
                    count: *count as usize,
                    peer: *peer,
                    ..unsafe_zeroed()
                }
            }
            Ev::ProxyOp { pid, channel, peer } => d.u.proxy_op = proxy_op(*pid, *channel, *peer),
            Ev::ProxyStep { step } => d.u.proxy_step = abi::ProxyStep { step: *step },
            Ev::Group => {}
            _ => return 0, // not in this ABI
        }
        self.start_raw(ctx, (&mut d as *mut v1::Descr).cast())
    }

    fn start_v2(&self, ctx: *mut c_void, ev: &Ev, parent: u64, rank: i32) -> u64 {
        let mut d: v2::Descr = unsafe_zeroed();
        d.type_ = ev.type_bit() as u8;
        d.parent_obj = parent as *mut c_void;
        d.rank = rank;
        match ev {
            Ev::Coll(c) => {
                d.u.coll = v2::CollV2 {
                    comm_hash: c.comm_hash,
                    seq_number: c.seq,
                    func: lit(c.func),
                    count: c.count as usize,
                    root: c.root,
                    datatype: lit(c.dtype),
                    n_max_channels: c.channels,
                    n_warps: 16,
                    algo: lit(c.algo),
                    proto: lit(c.proto),
                    ..unsafe_zeroed()
                }
            }
            Ev::P2p {
                func,
                count,
                dtype,
                peer,
                comm_hash,
                ..
            } => d.u.p2p = p2p_v2(func, *count, dtype, *peer, *comm_hash),
            Ev::ProxyOp { pid, channel, peer } => d.u.proxy_op = proxy_op(*pid, *channel, *peer),
            Ev::ProxyStep { step } => d.u.proxy_step = abi::ProxyStep { step: *step },
            Ev::Group => {}
            _ => return 0,
        }
        self.start_raw(ctx, (&mut d as *mut v2::Descr).cast())
    }

    fn start_v3(&self, ctx: *mut c_void, ev: &Ev, parent: u64, rank: i32) -> u64 {
        let mut d: v3::Descr = unsafe_zeroed();
        d.type_ = ev.type_bit() as u8;
        d.parent_obj = parent as *mut c_void;
        d.rank = rank;
        match ev {
            Ev::Coll(c) => {
                d.u.coll = v3::CollV3 {
                    comm_hash: c.comm_hash,
                    seq_number: c.seq,
                    func: lit(c.func),
                    count: c.count as usize,
                    root: c.root,
                    datatype: lit(c.dtype),
                    n_max_channels: c.channels,
                    n_warps: 16,
                    algo: lit(c.algo),
                    proto: lit(c.proto),
                    ..unsafe_zeroed()
                }
            }
            Ev::P2p {
                func,
                count,
                dtype,
                peer,
                comm_hash,
                ..
            } => d.u.p2p = p2p_v2(func, *count, dtype, *peer, *comm_hash),
            Ev::ProxyOp { pid, channel, peer } => d.u.proxy_op = proxy_op(*pid, *channel, *peer),
            Ev::ProxyStep { step } => d.u.proxy_step = abi::ProxyStep { step: *step },
            Ev::KernelCh { channel, .. } => {
                d.u.kernel_ch = v3::KernelChV3 {
                    channel_id: *channel,
                }
            }
            Ev::Group => {}
            _ => return 0,
        }
        self.start_raw(ctx, (&mut d as *mut v3::Descr).cast())
    }

    fn start_v4(&self, ctx: *mut c_void, ev: &Ev, parent: u64, rank: i32) -> u64 {
        let mut d: v4::Descr = unsafe_zeroed();
        d.type_ = ev.type_bit() as u8;
        d.parent_obj = parent as *mut c_void;
        d.rank = rank;
        match ev {
            Ev::Coll(c) => {
                d.u.coll = v4::CollV4 {
                    seq_number: c.seq,
                    func: lit(c.func),
                    count: c.count as usize,
                    root: c.root,
                    datatype: lit(c.dtype),
                    n_channels: c.channels,
                    n_warps: 16,
                    algo: lit(c.algo),
                    proto: lit(c.proto),
                    ..unsafe_zeroed()
                }
            }
            Ev::P2p {
                func,
                count,
                dtype,
                peer,
                channels,
                ..
            } => {
                d.u.p2p = v4::P2pV4 {
                    func: lit(func),
                    buff: std::ptr::null_mut(),
                    datatype: lit(dtype),
                    count: *count as usize,
                    peer: *peer,
                    n_channels: *channels,
                }
            }
            Ev::ProxyOp { pid, channel, peer } => d.u.proxy_op = proxy_op(*pid, *channel, *peer),
            Ev::ProxyStep { step } => d.u.proxy_step = abi::ProxyStep { step: *step },
            Ev::KernelCh { channel, p_timer } => {
                d.u.kernel_ch = abi::KernelCh {
                    channel_id: *channel,
                    p_timer: *p_timer,
                }
            }
            Ev::Group => {}
            _ => return 0,
        }
        self.start_raw(ctx, (&mut d as *mut v4::Descr).cast())
    }

    /// v5, v6 and v7 share the header and most members; v7's CollApi/P2pApi/Coll/P2p are longer.
    fn start_v5plus(&self, ctx: *mut c_void, ev: &Ev, parent: u64, rank: i32) -> u64 {
        let mut d: v7::Descr = unsafe_zeroed();
        d.type_ = u64::from(ev.type_bit());
        d.parent_obj = parent as *mut c_void;
        d.rank = rank;
        let v7 = self.version >= 7;
        // SAFETY (for the union writes): plain field stores into a zeroed repr(C) union.
        match ev {
            Ev::GroupApi { depth } => {
                d.u.v6.v5.group_api = abi::GroupApi {
                    graph_captured: false,
                    group_depth: *depth,
                }
            }
            Ev::CollApi {
                func,
                count,
                dtype,
                root,
            } => {
                let base = abi::CollApiV5 {
                    func: lit(func),
                    count: *count as usize,
                    datatype: lit(dtype),
                    root: *root,
                    stream: 0x5000 as *mut c_void,
                    graph_captured: false,
                };
                if v7 {
                    d.u.coll_api = v7::CollApiV7 {
                        base,
                        user_tag: 0x7a6,
                    }
                } else {
                    d.u.v6.v5.coll_api = base
                }
            }
            Ev::P2pApi { func, count, dtype } => {
                let base = abi::P2pApiV5 {
                    func: lit(func),
                    count: *count as usize,
                    datatype: lit(dtype),
                    stream: 0x5000 as *mut c_void,
                    graph_captured: false,
                };
                if v7 {
                    d.u.p2p_api = v7::P2pApiV7 {
                        base,
                        user_tag: 0x7a6,
                    }
                } else {
                    d.u.v6.v5.p2p_api = base
                }
            }
            Ev::KernelLaunch => {
                d.u.v6.v5.kernel_launch = abi::KernelLaunch {
                    stream: 0x5000 as *mut c_void,
                }
            }
            Ev::Coll(c) => {
                let base = abi::CollV5 {
                    seq_number: c.seq,
                    func: lit(c.func),
                    send_buff: std::ptr::null(),
                    recv_buff: std::ptr::null_mut(),
                    count: c.count as usize,
                    root: c.root,
                    datatype: lit(c.dtype),
                    n_channels: c.channels,
                    n_warps: 16,
                    algo: lit(c.algo),
                    proto: lit(c.proto),
                    parent_group: std::ptr::null_mut(),
                };
                if v7 {
                    d.u.coll = v7::CollV7 {
                        base,
                        kernel_variant: std::ptr::null(),
                        is_sym_coll: false,
                        user_tag: 0x7a6,
                    }
                } else {
                    d.u.v6.v5.coll = base
                }
            }
            Ev::P2p {
                func,
                count,
                dtype,
                peer,
                channels,
                ..
            } => {
                let base = abi::P2pV5 {
                    func: lit(func),
                    buff: std::ptr::null_mut(),
                    datatype: lit(dtype),
                    count: *count as usize,
                    peer: *peer,
                    n_channels: *channels,
                    parent_group: std::ptr::null_mut(),
                };
                if v7 {
                    d.u.p2p = v7::P2pV7 {
                        base,
                        user_tag: 0x7a6,
                    }
                } else {
                    d.u.v6.v5.p2p = base
                }
            }
            Ev::ProxyOp { pid, channel, peer } => {
                d.u.v6.v5.proxy_op = proxy_op(*pid, *channel, *peer)
            }
            Ev::ProxyStep { step } => d.u.v6.v5.proxy_step = abi::ProxyStep { step: *step },
            Ev::KernelCh { channel, p_timer } => {
                d.u.v6.v5.kernel_ch = abi::KernelCh {
                    channel_id: *channel,
                    p_timer: *p_timer,
                }
            }
            Ev::Group => {}
        }
        // v5/v6 plugins get a 112-byte prefix of the same bytes (the extra v7 fields sit
        // past the members they read).
        let p = (&mut d as *mut v7::Descr).cast();
        let _ = (
            std::mem::size_of::<v5::Descr>(),
            std::mem::size_of::<v6::Descr>(),
        );
        self.start_raw(ctx, p)
    }
}

fn proxy_op(pid: i32, channel: u8, peer: i32) -> abi::ProxyOp {
    abi::ProxyOp {
        pid,
        channel_id: channel,
        peer,
        n_steps: 4,
        chunk_size: 1 << 19,
        is_send: 1,
    }
}

fn p2p_v2(func: &str, count: u64, dtype: &str, peer: i32, comm_hash: u64) -> v3::P2pV2 {
    v3::P2pV2 {
        name: std::ptr::null(),
        comm_hash,
        func: lit(func),
        buff: std::ptr::null_mut(),
        datatype: lit(dtype),
        count: count as usize,
        peer,
    }
}

// ---- scenario driver ----

/// One operation the emulator issued, with what the dump should show for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    pub comm_id: u64,
    pub version: u32,
    pub p2p: bool,
    pub seq: u64,
    pub func: &'static str,
    pub count: u64,
    pub bytes: u64,
    pub channels: u8,
    /// max(channel stop) - min(channel start), when the kernel finished and the ABI has pTimer.
    pub gpu_ns: Option<u64>,
    /// The kernel never finished (a hung collective).
    pub hung: bool,
}

enum ProxyWork {
    Kernel {
        parent: u64,
        ctx: usize,
        channels: u8,
        base: u64,
        hang: bool,
        done: mpsc::Sender<()>,
    },
    Quit,
}

/// NCCL's proxy progress thread for one communicator: reports KernelCh events (and, when
/// asked, ProxyOp/ProxyStep and a PXN op from another process).
pub struct Proxy {
    tx: mpsc::Sender<ProxyWork>,
    join: Option<std::thread::JoinHandle<()>>,
}

/// GPU time the emulated kernel takes on channel `ch`: start/stop %globaltimer values.
pub fn channel_times(base: u64, ch: u8) -> (u64, u64) {
    let start = base + u64::from(ch) * 100;
    (start, start + 50_000 + u64::from(ch) * 1_000)
}

impl Proxy {
    pub fn spawn(plugin: Arc<Plugin>, rank: i32, pxn: bool) -> Self {
        let (tx, rx) = mpsc::channel::<ProxyWork>();
        let join = std::thread::Builder::new()
            .name(format!("emu-proxy-{rank}"))
            .spawn(move || {
                // SAFETY: getpid has no preconditions.
                let pid = unsafe { libc::getpid() };
                while let Ok(w) = rx.recv() {
                    match w {
                        ProxyWork::Quit => break,
                        ProxyWork::Kernel {
                            parent,
                            ctx,
                            channels,
                            base,
                            hang,
                            done,
                        } => {
                            let ctx = ctx as *mut c_void;
                            if mask() & (event::PROXY_OP | event::PROXY_STEP) != 0 {
                                let op = plugin.start(
                                    ctx,
                                    &Ev::ProxyOp {
                                        pid,
                                        channel: 0,
                                        peer: (rank + 1) % 8,
                                    },
                                    parent,
                                    rank,
                                );
                                let st = plugin.start(ctx, &Ev::ProxyStep { step: 0 }, op, rank);
                                plugin.state(st, 8, Some(1 << 19));
                                plugin.stop(st);
                                plugin.stop(op);
                                if pxn {
                                    // PXN: an op from another process's communicator, with that
                                    // process's context and parent pointer values.
                                    let foreign = plugin.start(
                                        0x7f00_dead_0000usize as *mut c_void,
                                        &Ev::ProxyOp {
                                            pid: pid + 100_000,
                                            channel: 1,
                                            peer: rank,
                                        },
                                        0x0000_0100_0000_0042,
                                        rank,
                                    );
                                    let st = plugin.start(
                                        0x7f00_dead_0000usize as *mut c_void,
                                        &Ev::ProxyStep { step: 1 },
                                        foreign,
                                        rank,
                                    );
                                    plugin.state(st, 9, Some(4096));
                                    plugin.stop(st);
                                    plugin.stop(foreign);
                                }
                            }
                            let mut started = Vec::new();
                            for ch in 0..channels {
                                let (t0, _) = channel_times(base, ch);
                                started.push(plugin.start(
                                    ctx,
                                    &Ev::KernelCh {
                                        channel: ch,
                                        p_timer: t0,
                                    },
                                    parent,
                                    rank,
                                ));
                            }
                            if !hang {
                                for (ch, h) in started.into_iter().enumerate() {
                                    let (_, t1) = channel_times(base, ch as u8);
                                    if plugin.version >= 4 {
                                        plugin.state(h, abi::state::KERNEL_CH_STOP, Some(t1));
                                    }
                                    plugin.stop(h);
                                }
                            }
                            let _ = done.send(());
                        }
                    }
                }
            })
            .expect("spawn proxy thread");
        Self {
            tx,
            join: Some(join),
        }
    }

    fn kernel(&self, parent: u64, ctx: *mut c_void, channels: u8, base: u64, hang: bool) {
        let (done, wait) = mpsc::channel();
        self.tx
            .send(ProxyWork::Kernel {
                parent,
                ctx: ctx as usize,
                channels,
                base,
                hang,
                done,
            })
            .expect("proxy alive");
        wait.recv().expect("proxy finished the kernel");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.tx.send(ProxyWork::Quit);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// One emulated communicator on one rank.
pub struct Comm {
    pub plugin: Arc<Plugin>,
    pub ctx: *mut c_void,
    pub comm_id: u64,
    pub rank: i32,
    pub nranks: i32,
    coll_seq: std::collections::HashMap<&'static str, u64>,
    gpu_clock: u64,
    pub log: Arc<Mutex<Vec<Expect>>>,
}

// SAFETY: ctx is an opaque token the plugin hands out; NCCL passes it from any thread.
unsafe impl Send for Comm {}

impl Comm {
    pub fn init(
        plugin: Arc<Plugin>,
        comm_id: u64,
        rank: i32,
        nranks: i32,
        log: Arc<Mutex<Vec<Expect>>>,
    ) -> Self {
        let (rc, ctx) = plugin.init(comm_id, Some(&format!("emu-{comm_id:x}")), 1, nranks, rank);
        assert_eq!(rc, 0, "plugin init failed");
        Self {
            plugin,
            ctx,
            comm_id,
            rank,
            nranks,
            coll_seq: Default::default(),
            gpu_clock: 1_000_000_000 + (comm_id & 0xffff) * 1_000_000_000,
            log,
        }
    }

    fn hash_for_descr(&self) -> u64 {
        // v1-v3 name the communicator in Coll/P2p descriptors (commHash).
        if self.plugin.version <= 3 {
            self.comm_id
        } else {
            0
        }
    }

    fn next_base(&mut self) -> u64 {
        self.gpu_clock += 1_000_000;
        self.gpu_clock
    }

    fn expect_coll(
        &mut self,
        func: &'static str,
        count: u64,
        elem: u64,
        channels: u8,
        base: u64,
        hang: bool,
    ) -> CollEv {
        let seq = self.coll_seq.entry(func).or_insert(0);
        let s = *seq;
        *seq += 1;
        let gpu_ns = (self.plugin.version >= 4 && !hang).then(|| {
            let start = (0..channels)
                .map(|c| channel_times(base, c).0)
                .min()
                .unwrap_or(0);
            let stop = (0..channels)
                .map(|c| channel_times(base, c).1)
                .max()
                .unwrap_or(0);
            stop - start
        });
        self.log.lock().unwrap().push(Expect {
            comm_id: self.comm_id,
            version: self.plugin.version,
            p2p: false,
            seq: s,
            func,
            count,
            bytes: count * elem,
            channels,
            gpu_ns,
            hung: hang,
        });
        CollEv {
            seq: s,
            func,
            count,
            dtype: "ncclFloat32",
            root: -1,
            channels,
            algo: "RING",
            proto: "SIMPLE",
            comm_hash: self.hash_for_descr(),
        }
    }

    /// The outer group: GroupApi (v5+) or the legacy Group (v1-v4).
    fn group_start(&self, depth: i32) -> u64 {
        let p = &self.plugin;
        if p.version >= 5 {
            p.start(self.ctx, &Ev::GroupApi { depth }, 0, self.rank)
        } else {
            p.start(self.ctx, &Ev::Group, 0, self.rank)
        }
    }

    /// One all-reduce in an implicit group, in NCCL's order: GroupApi → CollApi (start/stop)
    /// → GroupEndApiStart → KernelLaunch → Coll start/stop → GroupApi stop, then the proxy
    /// thread's KernelCh start / state 22 / stop per channel.
    pub fn all_reduce(&mut self, proxy: &Proxy, count: u64, channels: u8, hang: bool) {
        let base = self.next_base();
        let ev = self.expect_coll("AllReduce", count, 4, channels, base, hang);
        let p = self.plugin.clone();
        let g = self.group_start(1);
        let mut parent = g;
        if p.version >= 5 {
            let api = p.start(
                self.ctx,
                &Ev::CollApi {
                    func: "AllReduce",
                    count,
                    dtype: "ncclFloat32",
                    root: -1,
                },
                g,
                self.rank,
            );
            p.stop(api);
            p.state(g, 24, None);
            let kl = p.start(self.ctx, &Ev::KernelLaunch, g, self.rank);
            p.stop(kl);
            parent = api;
        }
        let coll = p.start(self.ctx, &Ev::Coll(ev), parent, self.rank);
        p.stop(coll);
        p.stop(g);
        proxy.kernel(coll, self.ctx, channels, base, hang);
    }

    /// A send/recv pair in a user group (ring neighbours).
    pub fn send_recv(&mut self, proxy: &Proxy, count: u64) {
        let p = self.plugin.clone();
        let g = self.group_start(2);
        let next = (self.rank + 1) % self.nranks;
        let prev = (self.rank + self.nranks - 1) % self.nranks;
        let mut apis = [g, g];
        if p.version >= 5 {
            p.state(g, 23, None);
            for (i, f) in ["Send", "Recv"].into_iter().enumerate() {
                apis[i] = p.start(
                    self.ctx,
                    &Ev::P2pApi {
                        func: f,
                        count,
                        dtype: "ncclFloat32",
                    },
                    g,
                    self.rank,
                );
                p.stop(apis[i]);
            }
            p.state(g, 24, None);
            let kl = p.start(self.ctx, &Ev::KernelLaunch, g, self.rank);
            p.stop(kl);
        }
        for (i, (f, peer)) in [("Send", next), ("Recv", prev)].into_iter().enumerate() {
            let base = self.next_base();
            let gpu_ns =
                (p.version >= 4).then(|| channel_times(base, 0).1 - channel_times(base, 0).0);
            self.log.lock().unwrap().push(Expect {
                comm_id: self.comm_id,
                version: p.version,
                p2p: true,
                seq: 0,
                func: f,
                count,
                bytes: count * 4,
                channels: 1,
                gpu_ns,
                hung: false,
            });
            let h = p.start(
                self.ctx,
                &Ev::P2p {
                    func: f,
                    count,
                    dtype: "ncclFloat32",
                    peer,
                    channels: 1,
                    comm_hash: self.hash_for_descr(),
                },
                apis[i],
                self.rank,
            );
            p.stop(h);
            proxy.kernel(h, self.ctx, 1, base, false);
        }
        p.stop(g);
    }

    /// A user group with three collectives launched together.
    pub fn grouped_batch(&mut self, proxy: &Proxy, count: u64) {
        let p = self.plugin.clone();
        let g = self.group_start(2);
        let funcs = ["AllReduce", "AllGather", "ReduceScatter"];
        let mut apis = [g; 3];
        if p.version >= 5 {
            for (i, f) in funcs.iter().enumerate() {
                apis[i] = p.start(
                    self.ctx,
                    &Ev::CollApi {
                        func: f,
                        count,
                        dtype: "ncclFloat32",
                        root: -1,
                    },
                    g,
                    self.rank,
                );
                p.stop(apis[i]);
            }
            p.state(g, 24, None);
            let kl = p.start(self.ctx, &Ev::KernelLaunch, g, self.rank);
            p.stop(kl);
        }
        let mut work = Vec::new();
        for (i, f) in funcs.into_iter().enumerate() {
            let base = self.next_base();
            let ev = self.expect_coll(f, count, 4, 2, base, false);
            let h = p.start(self.ctx, &Ev::Coll(ev), apis[i], self.rank);
            p.stop(h);
            work.push((h, base));
        }
        p.stop(g);
        for (h, base) in work {
            proxy.kernel(h, self.ctx, 2, base, false);
        }
    }

    pub fn finalize(self) {
        assert_eq!(self.plugin.finalize(self.ctx), 0);
    }
}

/// Runs the full per-version scenario: for each version, two communicators driven from two
/// user threads (each with its own proxy thread) doing all-reduces, a send/recv pair and a
/// grouped batch, then finalize and dlclose, and the next version reloads the library.
pub fn run_versions(path: &Path, versions: &[u32], allreduces: u64, pxn: bool) -> Vec<Expect> {
    let log = Arc::new(Mutex::new(Vec::new()));
    for &v in versions {
        let plugin = Arc::new(Plugin::load(path, Some(v)).expect("load plugin"));
        assert_eq!(plugin.version, v);
        let mut threads = Vec::new();
        for i in 0..2u64 {
            let plugin = plugin.clone();
            let log = log.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("emu-user-{i}"))
                    .spawn(move || {
                        let comm_id = 0xC0DE_0000_0000_0000 | u64::from(v) << 8 | i;
                        let mut comm = Comm::init(plugin.clone(), comm_id, i as i32, 2, log);
                        let proxy = Proxy::spawn(plugin, i as i32, pxn);
                        for k in 0..allreduces {
                            comm.all_reduce(&proxy, 1024 << k, 2, false);
                        }
                        comm.send_recv(&proxy, 4096);
                        comm.grouped_batch(&proxy, 1 << 16);
                        drop(proxy);
                        comm.finalize();
                    })
                    .expect("spawn user thread"),
            );
        }
        for t in threads {
            t.join().expect("user thread");
        }
        drop(plugin); // dlclose, like NCCL after the last finalize
    }
    Arc::try_unwrap(log)
        .expect("threads done")
        .into_inner()
        .unwrap()
}

/// One rank of a job: `n` all-reduces on a shared communicator. `stop_at`: this rank stops
/// issuing collectives before seq `stop_at` (its host code is stuck elsewhere). `hang_at`: the
/// collective with this seq starts but its kernel never finishes (waiting for a missing peer).
#[allow(clippy::too_many_arguments)]
pub fn run_rank(
    path: &Path,
    version: u32,
    comm_id: u64,
    rank: i32,
    nranks: i32,
    n: u64,
    stop_at: Option<u64>,
    hang_at: Option<u64>,
) -> Vec<Expect> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let plugin = Arc::new(Plugin::load(path, Some(version)).expect("load plugin"));
    let mut comm = Comm::init(plugin.clone(), comm_id, rank, nranks, log.clone());
    let proxy = Proxy::spawn(plugin.clone(), rank, false);
    for seq in 0..n {
        if stop_at == Some(seq) {
            break;
        }
        let hang = hang_at == Some(seq);
        comm.all_reduce(&proxy, 1 << 20, 2, hang);
        if hang {
            break;
        }
    }
    drop(proxy);
    let out = log.lock().unwrap().clone();
    std::mem::forget(comm); // a hung job never finalizes
    std::mem::forget(plugin);
    out
}

// ---- expectations across the process boundary (child emulates, parent checks) ----

impl Expect {
    pub fn to_line(&self) -> String {
        format!(
            "{:x}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.comm_id,
            self.version,
            u8::from(self.p2p),
            self.seq,
            self.func,
            self.count,
            self.bytes,
            self.channels,
            self.gpu_ns.map_or("-".to_owned(), |g| g.to_string()),
            u8::from(self.hung)
        )
    }

    pub fn from_line(l: &str) -> Option<Self> {
        let f: Vec<&str> = l.split('\t').collect();
        let func: &'static str = match *f.get(4)? {
            "AllReduce" => "AllReduce",
            "AllGather" => "AllGather",
            "ReduceScatter" => "ReduceScatter",
            "Send" => "Send",
            "Recv" => "Recv",
            _ => return None,
        };
        Some(Self {
            comm_id: u64::from_str_radix(f[0], 16).ok()?,
            version: f[1].parse().ok()?,
            p2p: f[2] == "1",
            seq: f[3].parse().ok()?,
            func,
            count: f[5].parse().ok()?,
            bytes: f[6].parse().ok()?,
            channels: f[7].parse().ok()?,
            gpu_ns: f[8].parse().ok(),
            hung: f.get(9)? == &"1",
        })
    }
}

pub fn write_expect(path: &Path, v: &[Expect]) {
    let text: String = v.iter().map(|e| e.to_line() + "\n").collect();
    std::fs::write(path, text).expect("write expectations");
}

pub fn read_expect(path: &Path) -> Vec<Expect> {
    std::fs::read_to_string(path)
        .expect("read expectations")
        .lines()
        .map(|l| Expect::from_line(l).expect("expectation line"))
        .collect()
}

/// The dump files (`*.prof.ncclshim`) in `dir`, sorted.
pub fn prof_dumps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.to_string_lossy().contains(".prof.ncclshim"));
    v.sort();
    v
}

// ---- multi-rank jobs: one process per rank, one dump per rank ----

/// A job of `ranks` processes sharing one communicator. Rank `stop_rank` stops issuing
/// collectives before seq `stop_at`; every other rank enters collective `stop_at` and hangs
/// in its kernel (waiting for the missing peer). Then every rank is SIGKILLed (`kill`) or
/// exits normally, as a launcher would end a hung job.
#[derive(Debug, Clone)]
pub struct Job {
    pub ranks: i32,
    pub collectives: u64,
    pub stop_rank: i32,
    pub stop_at: u64,
    pub abi: u32,
    pub comm_id: u64,
    pub kill: bool,
}

const JOB_ENV: &str = "NCCLSHIM_EMU_JOB";
const RANK_ENV: &str = "NCCLSHIM_EMU_RANK";

impl Job {
    fn to_env(&self) -> String {
        format!(
            "{},{},{},{},{},{:x},{}",
            self.ranks,
            self.collectives,
            self.stop_rank,
            self.stop_at,
            self.abi,
            self.comm_id,
            u8::from(self.kill)
        )
    }

    fn from_env(s: &str) -> Option<Self> {
        let f: Vec<&str> = s.split(',').collect();
        Some(Self {
            ranks: f.first()?.parse().ok()?,
            collectives: f.get(1)?.parse().ok()?,
            stop_rank: f.get(2)?.parse().ok()?,
            stop_at: f.get(3)?.parse().ok()?,
            abi: f.get(4)?.parse().ok()?,
            comm_id: u64::from_str_radix(f.get(5)?, 16).ok()?,
            kill: f.get(6)? == &"1",
        })
    }

    /// Starts one process per rank: `exe args...` with the job and rank in the environment
    /// and `NCCLSHIM_DIR=dir`. `env` adds variables (dump sizes, say). Waits for all of them.
    pub fn run(
        &self,
        exe: &Path,
        args: &[&str],
        dir: &Path,
        env: &[(&str, &str)],
    ) -> Vec<std::process::Output> {
        let children: Vec<_> = (0..self.ranks)
            .map(|r| {
                let mut c = std::process::Command::new(exe);
                c.args(args)
                    .env(JOB_ENV, self.to_env())
                    .env(RANK_ENV, r.to_string())
                    .env("NCCLSHIM_DIR", dir)
                    .env_remove("NCCLSHIM_DISABLE")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                for (k, v) in env {
                    c.env(k, v);
                }
                c.spawn().expect("spawn rank")
            })
            .collect();
        children
            .into_iter()
            .map(|c| c.wait_with_output().expect("rank finished"))
            .collect()
    }
}

/// In a rank process: runs that rank and never returns. `None` when this process is not a
/// rank of an emulated job.
pub fn rank_main_if_child() -> Option<std::convert::Infallible> {
    let job = Job::from_env(&std::env::var(JOB_ENV).ok()?)?;
    let rank: i32 = std::env::var(RANK_ENV).ok()?.parse().ok()?;
    let stop_at = (rank == job.stop_rank).then_some(job.stop_at);
    let hang_at = (rank != job.stop_rank).then_some(job.stop_at);
    let ops = run_rank(
        &plugin_path(),
        job.abi,
        job.comm_id,
        rank,
        job.ranks,
        job.collectives,
        stop_at,
        hang_at,
    );
    let last = ops.last().map_or(-1, |e| e.seq as i64);
    println!(
        "rank {rank} pid {} issued {} collectives, last seq {last}",
        std::process::id(),
        ops.len()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if job.kill {
        // SAFETY: raising a signal on ourselves; SIGKILL ends the process like a launcher's kill.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    std::process::exit(0)
}
