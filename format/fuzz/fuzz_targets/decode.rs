//! Fuzzes the dump reader with arbitrary bytes: it must return a dump or a typed error, never
//! panic, hang or allocate beyond the input's size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(dump) = ncclshim_format::reader::decode_bytes(data, Path::new("fuzz-input")) {
        assert_eq!(dump.summary.records as usize, dump.records.len());
        for r in &dump.records {
            let _ = r.call_name();
            if r.blob != 0 {
                let _ = dump.blob(r.blob).map(|b| b.text());
            }
        }
    }
});
