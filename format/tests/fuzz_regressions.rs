//! Replays every input the `decode` fuzz target once crashed on (`fuzz/regressions/`), through the
//! same checks the fuzz target makes, so a fixed reader bug stays fixed in a plain `cargo test`
//! (debug build, overflow checks on) without nightly or cargo-fuzz.

use ncclshim_format::reader::decode_bytes;
use std::path::{Path, PathBuf};

fn regression_inputs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn every_saved_fuzz_crash_decodes_without_panicking() {
    let inputs = regression_inputs();
    assert!(!inputs.is_empty(), "fuzz/regressions holds no inputs");
    for path in inputs {
        let bytes = std::fs::read(&path).unwrap();
        match decode_bytes(&bytes, &path) {
            Ok(dump) => {
                assert_eq!(dump.summary.records as usize, dump.records.len());
                for r in &dump.records {
                    let _ = r.call_name();
                    if r.blob != 0 {
                        let _ = dump.blob(r.blob).map(|b| b.text());
                    }
                }
            }
            Err(e) => assert!(!e.to_string().is_empty(), "{}", path.display()),
        }
    }
}

#[test]
fn a_corrupt_head_claiming_two_to_the_64_lost_records_saturates_the_total() {
    // The input behind `sum-overflow-lost.bin`: rings whose heads claim nearly 2^64 records, so the
    // per-ring lost counts alone overflow when summed.
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/sum-overflow-lost.bin"),
    )
    .unwrap();
    let dump = decode_bytes(&bytes, Path::new("sum-overflow-lost.bin"))
        .expect("a dump with warnings, not an error");
    let per_ring: u128 = dump.rings.iter().map(|r| u128::from(r.lost)).sum();
    assert!(
        per_ring > u128::from(u64::MAX),
        "the input no longer overflows"
    );
    assert_eq!(dump.summary.lost, u64::MAX);
}
