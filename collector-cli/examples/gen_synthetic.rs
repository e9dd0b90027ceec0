//! Writes every synthetic scenario to `tests/fixtures/synthetic/<case>/` (or the directory given
//! as the first argument), replacing what was there. The files are labelled synthetic: made-up
//! hosts and pids, `WriterKind::Synthetic`.

fn main() -> anyhow::Result<()> {
    let root = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/synthetic")
        });
    for (name, build) in collector_cli::scenarios::ALL {
        let dir = root.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        build(&dir)?;
        println!("{}", dir.display());
    }
    Ok(())
}
