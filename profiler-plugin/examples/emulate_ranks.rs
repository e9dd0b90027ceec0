//! Generates the dumps of an emulated multi-rank job in which one rank falls behind: one
//! process per rank loads the real profiler plugin through the NCCL emulator test harness
//! (a test double for NCCL; no GPU) and writes its own `*.prof.ncclshim` dump.
//!
//! ```text
//! cargo build -p ncclshim-profiler --examples
//! target/debug/examples/emulate_ranks --out DIR [--ranks 8] [--collectives 10]
//!     [--stop-rank 3] [--stop-at 5] [--abi 6] [--comm-id c0ffee] [--exit kill|clean] [--small]
//! ```
//! Rank `--stop-rank` issues all-reduces 0..stop-at-1 and then stops calling NCCL; every other
//! rank enters all-reduce `stop-at` and hangs in its kernel. Then all ranks are SIGKILLed
//! (`--exit kill`, the default) or exit normally. `--small` makes compact dumps (fixtures).

#[path = "../tests/emulator/mod.rs"]
mod emulator;

use emulator::Job;
use std::path::PathBuf;

fn usage() -> ! {
    eprintln!("usage: emulate_ranks --out DIR [--ranks N] [--collectives N] [--stop-rank R] [--stop-at SEQ] [--abi 1..7] [--comm-id HEX] [--exit kill|clean] [--small]");
    std::process::exit(2)
}

fn main() {
    if emulator::rank_main_if_child().is_some() {
        unreachable!();
    }
    let mut job = Job {
        ranks: 8,
        collectives: 10,
        stop_rank: 3,
        stop_at: 5,
        abi: 6,
        comm_id: 0x5eed_c0ff_ee00_0001,
        kill: true,
    };
    let mut out: Option<PathBuf> = None;
    let mut small = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--out" => out = Some(val().into()),
            "--ranks" => job.ranks = val().parse().unwrap_or_else(|_| usage()),
            "--collectives" => job.collectives = val().parse().unwrap_or_else(|_| usage()),
            "--stop-rank" => job.stop_rank = val().parse().unwrap_or_else(|_| usage()),
            "--stop-at" => job.stop_at = val().parse().unwrap_or_else(|_| usage()),
            "--abi" => {
                job.abi = val()
                    .parse()
                    .ok()
                    .filter(|v| (1..=7).contains(v))
                    .unwrap_or_else(|| usage())
            }
            "--comm-id" => {
                job.comm_id = u64::from_str_radix(&val(), 16).unwrap_or_else(|_| usage())
            }
            "--exit" => {
                job.kill = match val().as_str() {
                    "kill" => true,
                    "clean" => false,
                    _ => usage(),
                }
            }
            "--small" => small = true,
            _ => usage(),
        }
    }
    let Some(out) = out else { usage() };
    std::fs::create_dir_all(&out).expect("create --out");
    let exe = std::env::current_exe().expect("current_exe");
    let env: &[(&str, &str)] = if small {
        &[
            ("NCCLSHIM_RINGS", "2"),
            ("NCCLSHIM_PROFILER_RING_SLOTS", "64"),
            ("NCCLSHIM_ARENA_BYTES", "32k"),
        ]
    } else {
        &[]
    };
    for o in job.run(&exe, &[], &out, env) {
        print!("{}", String::from_utf8_lossy(&o.stdout));
        eprint!("{}", String::from_utf8_lossy(&o.stderr));
    }
    println!("dumps in {}", out.display());
}
