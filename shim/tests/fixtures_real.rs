//! The real dumps committed under `tests/fixtures/real/` (captured with this shim and the PyPI
//! NCCL wheels on a GPU-less machine; the CLI's golden tests read them) still decode and still say
//! what the programs saw (`<scenario>.stdout` next to each).

mod common;

use common::*;
use ncclshim_dump::{BlobKind, CallId};

fn fixture(name: &str) -> (ncclshim_format::reader::Dump, String) {
    let dir = repo_root().join("tests/fixtures/real").join(name);
    let d = single_dump(&dir);
    let stdout = std::fs::read_to_string(dir.with_extension("stdout")).unwrap();
    (d, stdout)
}

#[test]
fn socket_ifname_cu12_fixture() {
    let (d, stdout) = fixture("socket-ifname-cu12");
    let u = calls(&d, CallId::NcclGetUniqueId);
    assert_eq!(u[0].rc.to_string(), field(&stdout, "ncclGetUniqueId", "rc"));
    assert!(error_text(&d, u[0])
        .unwrap()
        .contains("no socket interface found"));
    assert_eq!(
        snapshots(&d, BlobKind::Environment)[0]["NCCL_SOCKET_IFNAME"],
        "nonexistent0"
    );
    assert!(!d.header.nccl_static && d.header.clean_exit && d.header.dropped_blobs == 0);
}

#[test]
fn init_no_gpu_cu11_fixture() {
    let (d, stdout) = fixture("init-no-gpu-cu11");
    let i = calls(&d, CallId::NcclCommInitRank);
    assert_eq!(
        i[0].rc.to_string(),
        field(&stdout, "ncclCommInitRank", "rc")
    );
    assert_eq!(
        error_text(&d, i[0]).unwrap(),
        field(&stdout, "last_error", "last_error")
    );
    let libs = snapshots(&d, BlobKind::Libraries);
    assert_eq!(
        libs[0]["nccl_version"].to_string(),
        field(&stdout, "ncclGetVersion", "version")
    );
    assert_eq!(d.header.dropped_blobs, 0);
}

#[test]
fn null_comm_cu12_fixture() {
    let (d, stdout) = fixture("null-comm-cu12");
    let ar = calls(&d, CallId::NcclAllReduce);
    assert_eq!(ar[0].rc.to_string(), field(&stdout, "ncclAllReduce", "rc"));
    assert_eq!(
        error_text(&d, ar[0]).unwrap(),
        "AllReduce : comm argument is NULL"
    );
    assert_eq!(calls(&d, CallId::NcclGroupEnd)[0].rc, 4);
    assert_eq!(calls(&d, CallId::NcclCommGetAsyncError)[0].rc, 4);
}
