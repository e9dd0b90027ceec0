//! Cost of one record against the floor measured in the same run.
//!
//! Floor: what any crash-safe recorder must do per event: read the clock the recorder uses (the
//! TSC where the CPU and kernel allow it, else CLOCK_MONOTONIC) and store 128 bytes into a
//! MAP_SHARED file mapping. The vDSO CLOCK_MONOTONIC read is reported too, for scale. Record: claim the slot in this thread's ring, take the
//! timestamp, fill, commit with the commit-word protocol and publish the head. Rounds alternate
//! between the variants so frequency changes and noise hit both alike; medians are reported.
//!
//! Run: `cargo bench -p ncclshim-dump --bench record`

use ncclshim_dump::clock::{self, monotonic_ns};
use ncclshim_dump::config::RecorderConfig;
use ncclshim_dump::process::ProcessRecorder;
use ncclshim_dump::{CallId, Entry, RecordKind, Recorder, WriterKind};
use std::hint::black_box;
use std::time::Instant;

const ITERS: u64 = 200_000;
const ROUNDS: usize = 21;

static LAZY: ProcessRecorder = ProcessRecorder::new(WriterKind::Synthetic, 0);

fn time_per_op(mut f: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..ITERS {
        f(i);
    }
    start.elapsed().as_nanos() as f64 / ITERS as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("NCCLSHIM_DIR", dir.path());
    let mut cfg = RecorderConfig::defaults(WriterKind::Synthetic, dir.path().to_path_buf());
    cfg.rings = 2;
    cfg.slots_per_ring = 1 << 16;
    let rec = Recorder::create(&cfg.clone().normalized()).unwrap();
    let ring = rec.claim_ring();

    // The floor writes into the same kind of mapping: the second ring's slots, untouched by
    // the record benchmark.
    let floor_dir = tempfile::tempdir().unwrap();
    let floor_rec = Recorder::create(&{
        let mut c = cfg.clone();
        c.dir = floor_dir.path().to_path_buf();
        c.normalized()
    })
    .unwrap();
    let floor_slots = {
        let g = floor_rec.geometry();
        // SAFETY: reopening our own dump read-write to get a pointer into the same kind of
        // mapping; we only write whole 128-byte slots inside ring 0.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(floor_rec.path())
            .unwrap();
        use std::os::fd::AsRawFd;
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                g.file_size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: rings_offset lies inside the mapping.
        unsafe { (p as *mut u8).add(g.rings_offset as usize) as *mut [u64; 16] }
    };
    let mask = (1u64 << 16) - 1;

    let entry = {
        let mut e = Entry::new(RecordKind::Call, CallId::NcclAllReduce);
        e.comm = 0x1234;
        e.args = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        e
    };

    let (mut floor, mut record, mut lazy, mut floor2, mut call, mut vdso) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for _ in 0..ROUNDS {
        vdso.push(time_per_op(|_| {
            black_box(monotonic_ns());
        }));
        floor.push(time_per_op(|i| {
            let t = clock::now();
            let v = [t, i, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
            // SAFETY: index masked into ring 0 of the floor mapping.
            unsafe { std::ptr::write_volatile(floor_slots.add((i & mask) as usize), v) };
        }));
        record.push(time_per_op(|i| {
            let mut e = entry;
            e.args[0] = i;
            black_box(ring.instant(&e));
        }));
        lazy.push(time_per_op(|i| {
            LAZY.with_ring(|_, r| {
                let mut e = entry;
                e.args[0] = i;
                black_box(r.instant(&e));
            });
        }));
        floor2.push(time_per_op(|i| {
            let t = clock::now();
            let v = [t, i, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
            // SAFETY: as above.
            unsafe { std::ptr::write_volatile(floor_slots.add((i & mask) as usize), v) };
            let t2 = clock::now();
            // SAFETY: as above.
            unsafe {
                std::ptr::write_volatile(floor_slots.add((i & mask) as usize) as *mut u64, t2)
            };
        }));
        call.push(time_per_op(|i| {
            LAZY.with_ring(|_, r| {
                let mut e = entry;
                e.args[0] = i;
                r.begin(&e).complete(0);
            });
        }));
    }
    let v = median(&mut vdso);
    let kind = clock::select();
    let (f, r, l, f2, c) = (
        median(&mut floor),
        median(&mut record),
        median(&mut lazy),
        median(&mut floor2),
        median(&mut call),
    );
    println!("record clock: {kind:?}; CLOCK_MONOTONIC (vDSO) alone: {v:.1} ns/op");
    println!("floor: timestamp + 128 B store          {f:6.1} ns/op");
    println!(
        "record (own ring handle)                {r:6.1} ns/op   ratio to floor {:.2}x",
        r / f
    );
    println!(
        "record (process recorder + TLS ring)    {l:6.1} ns/op   ratio to floor {:.2}x",
        l / f
    );
    println!("floor: 2 timestamps + 128 B store       {f2:6.1} ns/op");
    println!(
        "call begin + complete (2 timestamps)    {c:6.1} ns/op   ratio to floor {:.2}x",
        c / f2
    );
}
