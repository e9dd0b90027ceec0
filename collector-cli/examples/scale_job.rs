//! Writes the scale benchmark job (`scenarios::scale_job`: a shim and a profiler dump per rank,
//! of the writers' real format-2 sizes) into a directory, so `ncclshim report DIR` can be timed
//! over 1,024 to 16,384 ranks (`scripts/bench-report-scale.sh` does both):
//! `cargo run --release -p collector-cli --example scale_job -- DIR RANKS [COLLS] [SHIM_SLOTS] [PROF_SLOTS]`.

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: scale_job DIR RANKS [COLLS] [SHIM_SLOTS] [PROF_SLOTS]";
    let dir = std::path::PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!(usage))?);
    let mut num = |default: u64| -> anyhow::Result<u64> {
        Ok(args
            .next()
            .map(|v| v.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let ranks = num(1024)? as usize;
    let sizes = collector_cli::scenarios::ScaleSizes {
        colls: num(3000)?,
        shim_slots: num(2048)? as u32,
        prof_slots: num(8192)? as u32,
    };
    let t = std::time::Instant::now();
    let bytes = collector_cli::scenarios::scale_job(&dir, ranks, sizes)?;
    eprintln!(
        "{ranks} ranks, {sizes:?}: {:.2} GB of dumps, written in {:.1} s",
        bytes as f64 / 1e9,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
