//! Tests: one failure, every wording. NCCL rewords its messages between releases (the shared-GPU
//! error three times from 2.29 to 2.30.7) and frameworks print their own texts around NCCL's
//! (PyTorch's `nccl2` backend); a classification that holds for one wording and misses the next
//! release's would pass every other test and fail the users who upgraded. Each text here is the
//! format string copied verbatim from the release named beside it, instantiated the way the
//! coverage test instantiates every format ([`messages::instantiate`]), so the same path reads it.

use super::messages::{self, classify, instantiate};

/// The entry a text classifies as, through the same `classify` the rules use.
fn entry_of(text: &str) -> Option<String> {
    classify(text).map(|m| m.entry.id.clone())
}

/// NVIDIA/nccl's wordings of "several ranks of one communicator on one GPU", each with its tag
/// and file.
const SHARED_GPU: &[(&str, &str)] = &[
    (
        "v2.29.7-1 src/init.cc",
        "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx",
    ),
    (
        "v2.30.3-1 src/graph/topo.cc (ncclCheckMultiRank)",
        "Multiple ranks detected using the same GPU on this node. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.",
    ),
    (
        "v2.30.7-1 src/init.cc (and the 2.32.3 binary)",
        "Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.",
    ),
];

/// The NVLS texts that also speak of several ranks on one GPU, but whose cause is
/// NCCL_NVLS_ENABLE=1 on such a communicator: they must not read as the shared-GPU error.
const NVLS_SHARED_GPU: &[(&str, &str)] = &[
    (
        "v2.30.3-1 src/init.cc",
        "Multiple ranks detected using the same GPU on this node and NCCL_NVLS_ENABLE has been set to \"1\". At this time multiple ranks per gpu is incompatible with NVLS.",
    ),
    (
        "v2.30.7-1 src/transport/nvls.cc (and the 2.32.3 binary)",
        "NCCL_NVLS_ENABLE has been set to \"1\" and communicator has multiple ranks using the same NVML device. This is not compatible with NCCL_NVLS_ENABLE=1.",
    ),
];

#[test]
fn every_wording_of_the_shared_gpu_error_classifies_alike() {
    for (source, format) in SHARED_GPU {
        let text = instantiate(format);
        assert_eq!(
            entry_of(&text).as_deref(),
            Some("init-duplicate-gpu"),
            "{source}: {text}"
        );
        // As NCCL logs it and as PyTorch wraps ncclGetLastError's text.
        let logged = format!("gpu-a:4242:4242 [0] init.cc:1057 NCCL WARN {text}");
        let wrapped = format!("NCCL error in: ProcessGroupNCCL.cpp:1269, invalid usage (run with NCCL_DEBUG=WARN for details)\nLast error:\n{text}");
        for t in [logged, wrapped] {
            assert_eq!(entry_of(&t).as_deref(), Some("init-duplicate-gpu"), "{t}");
        }
    }
    for (source, text) in NVLS_SHARED_GPU {
        assert_eq!(
            entry_of(text).as_deref(),
            Some("nvls-config"),
            "{source}: {text}"
        );
    }
}

/// The extracted formats agree: every version that prints a shared-GPU wording is one the entry
/// covers, from 2.18.1 through the 2.32.3 binary with no gap at the rewordings.
#[test]
fn the_shared_gpu_entry_covers_every_release() {
    let printing = messages::versions_printing("init-duplicate-gpu");
    for v in ["2.18.1", "2.29.7", "2.30.3", "2.30.4", "2.30.7", "2.32.3"] {
        assert!(printing.contains(v), "{v} not covered: {printing:?}");
    }
}

/// The wording the real 2.32.3 library carries (PyPI nvidia-nccl-cu12, `.cache/nccl/cu12`,
/// fetched by `scripts/fetch-nccl.sh`): read out of the binary's own bytes, so a future wheel
/// that rewords it again fails here, not in a user's report.
#[test]
fn the_real_2_32_3_binary_wording_classifies() {
    let lib = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../.cache/nccl/cu12/lib/libnccl.so.2"
    );
    let Ok(bytes) = std::fs::read(lib) else {
        eprintln!("SKIP: {lib} not fetched (scripts/fetch-nccl.sh)");
        return;
    };
    let strings: Vec<String> = bytes
        .split(|&b| b == 0)
        .filter_map(|s| std::str::from_utf8(s).ok())
        .filter(|s| s.contains("same GPU") || s.contains("same NVML device"))
        .map(str::to_owned)
        .collect();
    let shared: Vec<&String> = strings.iter().filter(|s| !s.contains("NVLS")).collect();
    assert!(!shared.is_empty(), "no shared-GPU text in {lib}");
    for s in shared {
        assert_eq!(
            entry_of(&instantiate(s)).as_deref(),
            Some("init-duplicate-gpu"),
            "{s}"
        );
    }
    for s in strings.iter().filter(|s| s.contains("NVLS")) {
        assert_eq!(
            entry_of(&instantiate(s)).as_deref(),
            Some("nvls-config"),
            "{s}"
        );
    }
}

/// ncclTimeout (8, NCCL 2.30) has its name and text wherever a code is named.
#[test]
fn nccl_timeout_is_named() {
    assert_eq!(crate::names::rc_name(8, false), "ncclTimeout");
    let c = super::codes::nccl_result(8).expect("ncclTimeout in nccl-results.toml");
    assert_eq!(c.text, "timeout");
}

/// PyTorch's nccl2 texts, as its sources print them (the `<<` pieces joined), classify as the
/// framework's entries; what NCCL itself said still wins when both are in one text.
#[test]
fn pytorch_nccl2_texts_classify() {
    // torch/csrc/distributed/c10d/nccl2/ProcessGroupNCCLUtils.cpp, timeoutWatchdog.
    let cases = [
        (
            "Aborting process due to timeout on rank 3 - timeout watchdog detected operation timeout",
            "pytorch-watchdog-timeout",
        ),
        // checkAndAbortIfTimedOutOrError / abortNcclComm.
        ("Aborting process due to timeout", "pytorch-watchdog-timeout"),
        ("NCCL operation timed out", "pytorch-watchdog-timeout"),
        (
            "Aborting process due to error on rank 1 - nccl hit async error: remote process exited or there was a network error",
            "pytorch-watchdog-error",
        ),
        (
            "Aborting process due to error on rank 1 - timeout watchdog detected operation error. ",
            "pytorch-watchdog-error",
        ),
        // HeartbeatMonitor.cpp, handleStall (480 s: TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC's default).
        (
            "[PG ID 0 PG GUID 0(default_pg) Rank 2] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.",
            "pytorch-heartbeat-stuck",
        ),
        (
            "Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
            "pytorch-heartbeat-stuck",
        ),
        // NCCLBootstrap.cpp.
        (
            "Failed to initialize NCCL communicator: invalid usage (run with NCCL_DEBUG=WARN for details)",
            "pytorch-nccl2-init",
        ),
        ("No way to exchange unique ID", "pytorch-nccl2-no-id-exchange"),
        // ProcessGroupNCCLBackend.cpp, ensureInitialized.
        (
            "ProcessGroupNCCL is bound to device cuda:0 but an operation was issued on cuda:1",
            "pytorch-nccl2-device-bound",
        ),
    ];
    for (text, id) in cases {
        assert_eq!(entry_of(text).as_deref(), Some(id), "{text}");
    }
    let m = classify(
        "Aborting process due to timeout on rank 3 - timeout watchdog detected operation timeout",
    )
    .unwrap();
    assert_eq!(m.capture("rank"), Some("3"));
    assert!(m.entry.role.is_consequence());
    // The wrapper around NCCL's own text: NCCL's text decides.
    let both = format!(
        "Failed to initialize NCCL communicator: invalid usage (run with NCCL_DEBUG=WARN for details)\n{}",
        instantiate(SHARED_GPU[2].1)
    );
    assert_eq!(entry_of(&both).as_deref(), Some("init-duplicate-gpu"));
}
