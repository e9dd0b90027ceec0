//! `ncclshim report` over a synthetic 1,024-rank job (8 ranks per host, ~3,000 records per rank),
//! on one thread and on all cores, plus decode throughput. `NCCLSHIM_BENCH_RANKS` and
//! `NCCLSHIM_BENCH_COLLS` change the job size.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn bench(c: &mut Criterion) {
    let ranks = env_num("NCCLSHIM_BENCH_RANKS", 1024) as usize;
    let colls = env_num("NCCLSHIM_BENCH_COLLS", 3000);
    let dir = tempfile::tempdir().expect("tempdir");
    let t = std::time::Instant::now();
    let bytes =
        ncclshim_fixtures::scenarios::bench_job(dir.path(), ranks, colls, 4096).expect("bench job");
    eprintln!(
        "bench job: {ranks} ranks x {colls} collectives, {:.1} MB to decode, written in {:.1} s",
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let files = ncclshim_diagnose::load::find_dumps(dir.path()).expect("list");
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);

    let mut g = c.benchmark_group("report_1024");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    for threads in [1, cores] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        g.bench_function(format!("threads_{threads}"), |b| {
            b.iter(|| {
                let r = pool
                    .install(|| ncclshim_diagnose::analyze_dir(dir.path(), None).expect("report"));
                assert_eq!(r.job.processes, ranks);
                r
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("decode");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Bytes(bytes));
    for threads in [1, cores] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        g.bench_function(format!("threads_{threads}"), |b| {
            b.iter(|| {
                pool.install(|| {
                    ncclshim_diagnose::load::load_files(dir.path(), &files, None)
                        .dumps
                        .len()
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
