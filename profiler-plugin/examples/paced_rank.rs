//! Writeback benchmark for the profiler plugin (BENCHMARKS.md "Disk and writeback"): one
//! process loads the real plugin through the NCCL emulator test harness (a test double for
//! NCCL; no GPU) and issues paced all-reduces on `--comms` communicators, each with its own
//! user thread and proxy thread (so `--comms 2` is a rank with four recording threads).
//!
//! ```text
//! cargo build --release -p ncclshim-profiler --examples
//! NCCLSHIM_DIR=DIR target/release/examples/paced_rank [--comms 2] [--rate 1000] [--seconds 90]
//! ```
//! Prints `/proc/self/io` `write_bytes` every 10 s: the bytes of dump pages that went from clean
//! to dirty, which is what writeback writes.

#[path = "../tests/emulator/mod.rs"]
mod emulator;

use emulator::{plugin_path, Comm, Plugin, Proxy};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn write_bytes() -> i64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(-1)
}

fn main() {
    let (mut comms, mut rate, mut seconds) = (2u64, 1000u64, 90u64);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: paced_rank [--comms N] [--rate PER_SECOND] [--seconds S]");
            std::process::exit(2)
        });
        match a.as_str() {
            "--comms" => comms = v,
            "--rate" => rate = v,
            "--seconds" => seconds = v,
            _ => std::process::exit(2),
        }
    }
    let plugin = Arc::new(Plugin::load(&plugin_path(), Some(6)).expect("load plugin"));
    let workers: Vec<_> = (0..comms)
        .map(|c| {
            let plugin = plugin.clone();
            std::thread::spawn(move || {
                let log = Arc::new(Mutex::new(Vec::new()));
                let mut comm = Comm::init(plugin.clone(), 0xbe7c_0000 + c, 0, 1, log);
                let proxy = Proxy::spawn(plugin, 0, false);
                let start = Instant::now();
                for i in 0..rate * seconds {
                    comm.all_reduce(&proxy, 1 << 20, 2, false);
                    let due = start + Duration::from_secs_f64((i + 1) as f64 / rate as f64);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
                drop(proxy);
                std::mem::forget(comm);
            })
        })
        .collect();
    let mut t = 0;
    while t <= seconds {
        println!("t={t}s write_bytes={}", write_bytes());
        std::thread::sleep(Duration::from_secs(10));
        t += 10;
    }
    for w in workers {
        let _ = w.join();
    }
}
