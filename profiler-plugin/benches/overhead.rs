//! Added cost per all-reduce of the profiler plugin, against the record floor measured in the
//! same run and the same mapping.
//!
//! One all-reduce is the callback sequence NCCL (v6 ABI) makes for a single-comm all-reduce with
//! two kernel channels: GroupApi start, CollApi start/stop, GroupApi state 24, KernelLaunch
//! start/stop, Coll start/stop, GroupApi stop, then per channel KernelCh start, state 22 and
//! stop. Events the mask does not want are started by NCCL (ancestors) and answered NULL; NCCL
//! then skips their stop/state calls, and so does this loop. Everything runs on one thread
//! (in NCCL the KernelCh calls come from the proxy thread): this measures CPU cost per call.
//!
//! The plugin is the built `libnccl_profiler_ncclshim.so`, dlopened as NCCL opens it and called
//! through its exported `ncclProfiler_v6` table.
//!
//! The floor is one `RingWriter::instant` (a record-clock read, TSC where the dump uses it, +
//! one 128-byte slot store, commit protocol included) into a profiler dump in the same
//! directory, per record the plugin wrote (counted from its dump's ring heads, not assumed).
//!
//! Each round times the plugin, a null plugin and the floor back to back, in the bench thread's
//! CPU time (so rounds in which other jobs took the CPU do not count their wait); the figures
//! are medians over the rounds.
//!
//! Run: `cargo bench -p ncclshim-profiler --bench overhead` (each mask runs in a child process,
//! because the activation mask is read once per process, as NCCL expects).
//! `NCCLSHIM_BENCH_PHASES=1|3|7|15|31` runs only the first parts of the all-reduce (see `phase`).

use nccl_profiler_ncclshim::abi::{
    self, CollApiV5, CollV5, GroupApi, KernelCh, KernelLaunch, StateArgsV4,
};
use nccl_profiler_ncclshim::core::PROF;
use nccl_profiler_ncclshim::v6;
use ncclshim_dump::{CallId, Entry, RecordKind};
use ncclshim_format::reader::read_dump;
use std::ffi::c_void;
use std::hint::black_box;
use std::mem::MaybeUninit;

/// The calling thread's CPU time: on a shared machine, time the bench thread spent descheduled
/// (other jobs' builds) is not the plugin's cost, and wall-clock rounds all include some.
struct CpuClock(u64);

impl CpuClock {
    fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec out-pointer; CLOCK_THREAD_CPUTIME_ID is always available.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Self(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    fn elapsed(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(Self::now().0 - self.0)
    }
}

type V6Table = abi::ProfilerTable<abi::InitV5, v6::Descr, StateArgsV4>;

/// All-reduces per timed round and rounds per run; `NCCLSHIM_BENCH_ITERS` / `NCCLSHIM_BENCH_ROUNDS`
/// cut them down for instruction counting under callgrind.
fn iters() -> u64 {
    env_or("NCCLSHIM_BENCH_ITERS", 100_000)
}

fn rounds() -> usize {
    env_or("NCCLSHIM_BENCH_ROUNDS", 21)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Which parts of the all-reduce the loop makes (`NCCLSHIM_BENCH_PHASES`, a sum of these; all
/// by default). Cumulative sums (1, 3, 7, 15, 31) give the cost of each part by difference:
/// where an all-reduce's time goes.
mod phase {
    pub const ANCESTORS: u32 = 1;
    pub const COLL_START: u32 = 2;
    pub const COLL_STOP: u32 = 4;
    pub const CHANNEL_STARTS: u32 = 8;
    pub const CHANNEL_STOPS: u32 = 16;
    pub const ALL: u32 = 31;
}
static PHASES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(phase::ALL);

fn zeroed<T>() -> T {
    // SAFETY: descriptor types are integers, raw pointers and bools: all-zero is valid.
    unsafe { MaybeUninit::<T>::zeroed().assume_init() }
}

struct Descrs {
    group: v6::Descr,
    api: v6::Descr,
    launch: v6::Descr,
    coll: v6::Descr,
    kch: v6::Descr,
}

fn descrs() -> Descrs {
    let mut group: v6::Descr = zeroed();
    group.type_ = u64::from(abi::event::GROUP_API);
    group.u.v5.group_api = GroupApi {
        graph_captured: false,
        group_depth: 1,
    };
    let mut api: v6::Descr = zeroed();
    api.type_ = u64::from(abi::event::COLL_API);
    api.u.v5.coll_api = CollApiV5 {
        func: c"AllReduce".as_ptr(),
        count: 1 << 20,
        datatype: c"ncclFloat32".as_ptr(),
        root: -1,
        stream: std::ptr::null_mut(),
        graph_captured: false,
    };
    let mut launch: v6::Descr = zeroed();
    launch.type_ = u64::from(abi::event::KERNEL_LAUNCH);
    launch.u.v5.kernel_launch = KernelLaunch {
        stream: std::ptr::null_mut(),
    };
    let mut coll: v6::Descr = zeroed();
    coll.type_ = u64::from(abi::event::COLL);
    coll.u.v5.coll = CollV5 {
        seq_number: 0,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: 1 << 20,
        root: -1,
        datatype: c"ncclFloat32".as_ptr(),
        n_channels: 2,
        n_warps: 16,
        algo: c"RING".as_ptr(),
        proto: c"SIMPLE".as_ptr(),
        parent_group: std::ptr::null_mut(),
    };
    let mut kch: v6::Descr = zeroed();
    kch.type_ = u64::from(abi::event::KERNEL_CH);
    Descrs {
        group,
        api,
        launch,
        coll,
        kch,
    }
}

/// One all-reduce's callbacks; returns the number of callbacks made (NCCL skips the stop and
/// state calls of events the plugin answered with NULL).
#[inline(never)]
fn all_reduce(t: &'static V6Table, ctx: *mut c_void, d: &mut Descrs, i: u64) -> u32 {
    let mut records = 0u32;
    let starts = std::cell::Cell::new(0u32);
    let start = |descr: &mut v6::Descr, parent: *mut c_void| -> *mut c_void {
        let mut h: *mut c_void = std::ptr::null_mut();
        descr.parent_obj = parent;
        // SAFETY: a valid v6 descriptor and out-pointer; the plugin's own entry points.
        unsafe { (t.start_event)(ctx, &mut h, descr) };
        starts.set(starts.get() + 1);
        h
    };
    // SAFETY (all calls below): handles come from start_event; NULL ones are skipped as NCCL does.
    let phases = PHASES.load(std::sync::atomic::Ordering::Relaxed);
    unsafe {
        let none = std::ptr::null_mut();
        let (g, api, kl) = if phases & phase::ANCESTORS != 0 {
            let g = start(&mut d.group, none);
            (g, start(&mut d.api, g), start(&mut d.launch, g))
        } else {
            (none, none, none)
        };
        d.coll.u.v5.coll.seq_number = i;
        let c = if phases & phase::COLL_START != 0 {
            start(&mut d.coll, api)
        } else {
            none
        };
        for (h, state) in [(api, None), (g, Some(24)), (kl, None), (c, None), (g, None)] {
            if h.is_null() || (h == c && phases & phase::COLL_STOP == 0) {
                continue;
            }
            records += 1;
            match state {
                Some(s) => (t.record_event_state)(h, s, std::ptr::null_mut()),
                None => (t.stop_event)(h),
            };
        }
        if phases & phase::CHANNEL_STARTS == 0 {
            return records + starts.get();
        }
        let base = 1_000_000 + i * 100_000;
        let mut k = [std::ptr::null_mut(); 2];
        for (ch, h) in k.iter_mut().enumerate() {
            d.kch.u.v5.kernel_ch = KernelCh {
                channel_id: ch as u8,
                p_timer: base + ch as u64,
            };
            *h = start(&mut d.kch, c);
        }
        if phases & phase::CHANNEL_STOPS == 0 {
            return records + starts.get();
        }
        for (ch, h) in k.iter().enumerate() {
            if !h.is_null() {
                let mut a = StateArgsV4 {
                    p_timer: base + 50_000 + ch as u64,
                };
                (t.record_event_state)(*h, 22, &mut a);
                (t.stop_event)(*h);
                records += 2;
            }
        }
    }
    records + starts.get()
}

/// The plugins to measure, as NCCL gets them: built cdylibs, each opened `RTLD_NOW |
/// RTLD_LOCAL`, through their exported `ncclProfiler_v6` table (so the `.so`'s general-dynamic
/// TLS and calls through the table are measured, not a statically linked shortcut). By default
/// the one built next to this bench; `NCCLSHIM_PLUGIN_PATH=a.so:b.so` names others, which are
/// then measured in the same process, round by round, so that two builds are compared under
/// the same conditions (each has its own statics and its own dump).
fn plugin_paths() -> Vec<std::path::PathBuf> {
    match std::env::var_os("NCCLSHIM_PLUGIN_PATH") {
        Some(list) => std::env::split_paths(&list).collect(),
        None => {
            let exe = std::env::current_exe().expect("current_exe");
            vec![exe.with_file_name("libnccl_profiler_ncclshim.so")]
        }
    }
}

fn load_plugin(path: &std::path::Path) -> &'static V6Table {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid C string; the library stays loaded for the rest of the process.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null(), "dlopen {} failed", path.display());
    // SAFETY: a live handle and a valid symbol name.
    let sym = unsafe { libc::dlsym(lib, c"ncclProfiler_v6".as_ptr()) };
    assert!(!sym.is_null(), "no ncclProfiler_v6 in {}", path.display());
    // SAFETY: the symbol is the plugin's v6 table (same definition as `v6::ncclProfiler_v6`),
    // a static that lives as long as the never-closed library.
    unsafe { &*sym.cast::<V6Table>() }
}

/// The profiler dumps in `dir`.
fn prof_dumps(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("dir entry").path())
                .filter(|p| p.to_string_lossy().contains(".prof.ncclshim"))
                .collect()
        })
        .unwrap_or_default()
}

/// Records in the plugin's dump so far: the sum of every ring's head (measured, so the bench
/// reports what the plugin really wrote, however it shapes its records).
fn records_written(dump: &std::path::Path) -> u64 {
    read_dump(dump)
        .expect("read the plugin's dump")
        .rings
        .iter()
        .map(|r| r.head)
        .sum()
}

/// The emulated NCCL's own loop cost: the same calls into a plugin that does nothing but hand
/// out a dummy handle for the event types the real plugin asked for.
static NULL_MASK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

unsafe extern "C" fn null_init(
    _: *mut *mut c_void,
    _: u64,
    _: *mut std::ffi::c_int,
    _: *const std::ffi::c_char,
    _: std::ffi::c_int,
    _: std::ffi::c_int,
    _: std::ffi::c_int,
    _: *const c_void,
) -> std::ffi::c_int {
    0
}

unsafe extern "C" fn null_start(
    _: *mut c_void,
    h: *mut *mut c_void,
    d: *mut v6::Descr,
) -> std::ffi::c_int {
    // SAFETY: valid pointers from the loop.
    unsafe {
        let wanted = (*d).type_ & NULL_MASK.load(std::sync::atomic::Ordering::Relaxed) != 0;
        *h = if wanted {
            8 as *mut c_void
        } else {
            std::ptr::null_mut()
        };
    }
    0
}

unsafe extern "C" fn null_stop(h: *mut c_void) -> std::ffi::c_int {
    black_box(h);
    0
}

unsafe extern "C" fn null_state(
    h: *mut c_void,
    _: std::ffi::c_int,
    a: *mut StateArgsV4,
) -> std::ffi::c_int {
    black_box((h, a));
    0
}

unsafe extern "C" fn null_fini(_: *mut c_void) -> std::ffi::c_int {
    0
}

static NULL_PLUGIN: V6Table = abi::ProfilerTable {
    name: c"null".as_ptr(),
    init: null_init,
    start_event: null_start,
    stop_event: null_stop,
    record_event_state: null_state,
    finalize: null_fini,
};

/// One plugin under measurement.
struct Plugin {
    name: String,
    table: &'static V6Table,
    ctx: *mut c_void,
    mask: i32,
    /// Callbacks and records per all-reduce (records counted in its dump).
    callbacks: u32,
    records: f64,
    /// Per round: ns per all-reduce less the null plugin's, that over the floor, and the raw
    /// ns per all-reduce.
    ns: Vec<f64>,
    ratios: Vec<f64>,
    raw: Vec<f64>,
}

/// Loads, inits and warms up the plugin at `path`, and counts what one all-reduce writes.
fn start_plugin(path: &std::path::Path, dir: &std::path::Path, d: &mut Descrs) -> Plugin {
    let before: Vec<_> = prof_dumps(dir);
    let table = load_plugin(path);
    let mut ctx: *mut c_void = std::ptr::null_mut();
    let mut mask = 0i32;
    // SAFETY: v6 init with valid out-pointers.
    let rc = unsafe {
        (table.init)(
            &mut ctx,
            0xbe7c_4000_0000_0001,
            &mut mask,
            c"bench".as_ptr(),
            1,
            8,
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0);
    // Warm up: ring claimed, caches warm, name cache filled.
    for i in 0..10_000 {
        all_reduce(table, ctx, d, i);
    }
    let dump = prof_dumps(dir)
        .into_iter()
        .find(|p| !before.contains(p))
        .expect("the plugin's dump");
    let written = records_written(&dump);
    let callbacks = all_reduce(table, ctx, d, 10_000);
    Plugin {
        name: path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        table,
        ctx,
        mask,
        callbacks,
        records: (records_written(&dump) - written) as f64,
        ns: Vec::new(),
        ratios: Vec::new(),
        raw: Vec::new(),
    }
}

fn child(label: &str) {
    let dir = std::path::PathBuf::from(std::env::var_os("NCCLSHIM_DIR").expect("NCCLSHIM_DIR"));
    let mut d = descrs();
    if let Some(p) = std::env::var("NCCLSHIM_BENCH_PHASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        PHASES.store(p, std::sync::atomic::Ordering::Relaxed);
    }
    let mut plugins: Vec<Plugin> = plugin_paths()
        .iter()
        .map(|p| start_plugin(p, &dir, &mut d))
        .collect();
    let first = &plugins[0];
    let null_ctx = first.ctx;
    NULL_MASK.store(
        first.mask as u32 as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    assert_eq!(
        all_reduce(&NULL_PLUGIN, first.ctx, &mut d, 0),
        first.callbacks
    );

    let (iters, rounds) = (iters(), rounds());
    let (mut floors, mut nulls) = (Vec::new(), Vec::new());
    let mut e = Entry::new(RecordKind::ProfStart, CallId::ProfColl);
    // The floor's recorder (this binary's statically linked copy of the writer, its own dump
    // file in the same directory): created before timing starts.
    PROF.with_ring(|_, w| w.instant(&e))
        .expect("floor recorder");
    let time = |f: &mut dyn FnMut(u64)| {
        let t0 = CpuClock::now();
        for i in 0..iters {
            f(i);
        }
        t0.elapsed().as_nanos() as f64 / iters as f64
    };
    for _ in 0..rounds {
        let round: Vec<f64> = plugins
            .iter()
            .map(|p| {
                time(&mut |i| {
                    all_reduce(p.table, p.ctx, &mut d, i);
                })
            })
            .collect();
        let null = time(&mut |i| {
            all_reduce(&NULL_PLUGIN, null_ctx, &mut d, i);
        });
        nulls.push(null);
        let per_op = plugins[0].records.round().max(1.0) as u64;
        let floor = PROF
            .with_ring(|_, w| {
                time(&mut |i| {
                    for k in 0..per_op {
                        e.args[2] = i * per_op + k;
                        black_box(w.instant(black_box(&e)));
                    }
                })
            })
            .expect("floor recorder")
            / per_op as f64;
        floors.push(floor);
        for (p, ns) in plugins.iter_mut().zip(round) {
            p.ns.push(ns - null);
            p.ratios.push((ns - null) / floor);
            p.raw.push(ns);
        }
    }
    // Interference from other jobs only ever adds time: the fastest round of each series is
    // the best estimate of the undisturbed cost, the medians are what a job sees typically.
    let (quiet_floor, quiet_null) = (minimum(&floors), minimum(&nulls));
    let (floor, null) = (median(floors), median(nulls));
    let phases_note = match PHASES.load(std::sync::atomic::Ordering::Relaxed) {
        phase::ALL => String::new(),
        p => format!(" phases={p}"),
    };
    for p in &mut plugins {
        let (ns, ratio) = (
            median(std::mem::take(&mut p.ns)),
            median(std::mem::take(&mut p.ratios)),
        );
        println!(
            "{label:<8} {name} mask={mask:#06x}{phases_note} ({callbacks} callbacks, {records:.0} records) | plugin {ns:>6.1} ns/all-reduce = {ratio:>5.2} x floor ({floor:.1} ns/record) | added over {records:.0} records {:>6.1} ns | (loop with a null plugin: {null:.1} ns)",
            ns - floor * p.records,
            name = p.name,
            mask = p.mask,
            callbacks = p.callbacks,
            records = p.records,
        );
        let quiet = minimum(&p.raw) - quiet_null;
        println!(
            "{label:<8} {name} fastest rounds: plugin {quiet:>6.1} ns/all-reduce = {:>5.2} x floor ({quiet_floor:.1} ns/record), null loop {quiet_null:.1} ns",
            quiet / quiet_floor,
            name = p.name,
        );
    }
    // One callback alone: stopEvent on a live handle started on this thread (it completes the
    // start record in place; NCCL would stop a handle once, the cost is the same each time).
    let p = &plugins[0];
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: a valid descriptor and out-pointer.
    unsafe { (p.table.start_event)(p.ctx, &mut h, &mut d.coll) };
    let stops: Vec<f64> = (0..rounds)
        .map(|_| {
            // SAFETY: a handle from start_event; stopping it again only rewrites its exit time.
            time(&mut |_| unsafe {
                (p.table.stop_event)(black_box(h));
            })
        })
        .collect();
    let stop_ns = median(stops);
    println!(
        "{label:<8} {} one stopEvent (completes its start record in place) {stop_ns:.1} ns = {:.2} x floor",
        p.name,
        stop_ns / floor
    );
}

fn minimum(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if let Ok(label) = std::env::var("NCCLSHIM_BENCH_CHILD") {
        child(&label);
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = std::env::temp_dir().join(format!("ncclshim-bench-{}", std::process::id()));
    println!(
        "profiler plugin overhead, v6 ABI, {} all-reduces x {} alternating rounds (medians)",
        iters(),
        rounds()
    );
    for (label, profile) in [("default", "default"), ("all", "all")] {
        let out = std::process::Command::new(&exe)
            .env("NCCLSHIM_BENCH_CHILD", label)
            .env("NCCLSHIM_PROFILE", profile)
            .env("NCCLSHIM_DIR", dir.join(label))
            .env_remove("NCCLSHIM_DISABLE")
            .output()
            .expect("run bench child");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
