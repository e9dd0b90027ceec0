//! The fuzzer's seeds (`fuzz/seeds/`) must be what they claim: real dumps the reader decodes
//! without a warning, one of them in the current format with every section filled (rings, keep
//! ring, communicator table, blobs) and small enough for the fuzzer's 64 KiB input cap
//! (`-max_len=65536` in `.ci/run`), so that mutations start from the format the recorders write.

use ncclshim_format::layout::FORMAT_MAJOR;
use ncclshim_format::reader::decode_bytes;
use ncclshim_format::CallId;
use std::path::Path;

/// The fuzzer's `-max_len` (`.ci/run`): a longer seed would be cut before it is ever decoded.
const FUZZ_MAX_LEN: usize = 65536;

fn seed(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_seed_decodes_cleanly_and_fits_the_fuzzers_input_cap() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            bytes.len() <= FUZZ_MAX_LEN,
            "{}: {} bytes",
            path.display(),
            bytes.len()
        );
        let dump =
            decode_bytes(&bytes, &path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            dump.warnings.is_empty(),
            "{}: {:?}",
            path.display(),
            dump.warnings
        );
        assert!(!dump.records.is_empty(), "{}", path.display());
        seen += 1;
    }
    assert!(
        seen >= 2,
        "expected the format-1 and format-2 seeds in {}",
        dir.display()
    );
}

#[test]
fn the_format2_seed_fills_every_section() {
    let bytes = seed("sample-format2.ncclshim");
    let dump = decode_bytes(&bytes, Path::new("sample-format2.ncclshim")).unwrap();
    assert_eq!(dump.header.major, FORMAT_MAJOR);
    assert_eq!(dump.comms.len(), 1, "{:?}", dump.comms);
    assert!(!dump.blobs.is_empty());
    let calls = |call: CallId| {
        dump.records
            .iter()
            .filter(|r| r.call() == Some(call))
            .count()
    };
    assert!(calls(CallId::NcclAllReduce) >= 5);
    assert_eq!(
        calls(CallId::NcclCommInitRank),
        2,
        "the failed one and the kept one"
    );
}
