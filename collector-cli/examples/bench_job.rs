//! Writes the benchmark job (`scenarios::bench_job`) into a directory, so `ncclshim report DIR`
//! can be timed by hand: `cargo run --release -p collector-cli --example bench_job -- DIR [RANKS] [COLLS]`.

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: bench_job DIR [RANKS] [COLLS]"))?,
    );
    let ranks = args.next().map(|v| v.parse()).transpose()?.unwrap_or(1024);
    let colls = args.next().map(|v| v.parse()).transpose()?.unwrap_or(3000);
    let t = std::time::Instant::now();
    let bytes = collector_cli::scenarios::bench_job(&dir, ranks, colls, 4096)?;
    eprintln!(
        "{ranks} ranks x {colls} collectives, {:.1} MB to decode, written in {:.1} s",
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
