//! The named synthetic scenarios behind the golden tests and `tests/fixtures/synthetic/`: one
//! per seed case (C01–C05) and for a job with missing and still-running ranks, a desync (C19),
//! a dead peer (C20), a version mismatch (C03) and a duplicate GPU (C06). Each writes real dumps
//! with the real writer (`WriterKind::Synthetic`, made-up identities) into a directory.

use crate::profnames::{datatype_code, func_code};
use crate::synth::{host_facts_json, libraries_json, Scenario, WHEEL_NCCL, WORLD_UID};
use ncclshim_format::CallId;
use serde_json::json;
use std::path::Path;

/// `ncclFloat32` in NCCL's own enum (shim records carry NCCL's values).
const F32: u64 = 7;
const SUM: u64 = 0;

pub type Builder = fn(&Path) -> anyhow::Result<()>;

/// Every scenario by directory name.
pub const ALL: &[(&str, Builder)] = &[
    ("c01-nccl-net-ib", c01),
    ("c02-unpaired-p2p", c02),
    ("c03-version-mismatch", c03),
    ("c04-cumem-containers", c04),
    ("c05-gdr-peermem", c05),
    ("c06-duplicate-gpu", c06),
    ("c19-desync", c19),
    ("c20-dead-peer", c20),
    ("missing-and-running", missing_and_running),
    ("healthy", healthy),
];

/// C01 on NCCL 2.16.5: NCCL_NET=IB in a container without libibverbs.
pub fn c01(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["h800-a", "h800-a"])?;
    s.snapshot_all(21605);
    for r in &mut s.ranks {
        let rank = r.rank.to_string();
        r.env(&[
            ("NCCL_NET", "IB"),
            ("RANK", &rank),
            ("LOCAL_RANK", &rank),
            ("WORLD_SIZE", "2"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
        ]);
        let mut h = host_facts_json(&r.host);
        h["container"] = json!({"dockerenv": true, "containerenv": false, "cgroup": "0::/docker/abc", "runtime": "docker"});
        h["libibverbs_dlopen"] = false.into();
        h["libibverbs_path"] = serde_json::Value::Null;
        h["infiniband"] = json!([]);
        h["dev_infiniband"] = false.into();
        r.host_facts(&h);
        r.get_version(21605);
    }
    s.ranks[0].get_unique_id(WORLD_UID, 0, None);
    for r in &mut s.ranks {
        let rank = u64::from(r.rank);
        r.init_rank(
            2,
            rank,
            WORLD_UID,
            rank,
            5,
            Some("Error: network IB not found."),
            21605,
        );
        r.clean_exit();
    }
    Ok(())
}

/// C02 on NCCL 2.22.3: rank 1 posts one receive too few; the watchdog aborts; proxy WARNs follow.
pub fn c02(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["node0", "node0"])?;
    s.snapshot_all(22203);
    let comms = s.init_world(22203);
    for (r, &c) in s.ranks.iter().zip(&comms) {
        let peer = u64::from(1 - r.rank);
        r.raw_call(CallId::NcclGroupStart, 0, &[1], 0, None);
        r.coll(CallId::NcclSend, c, 0, 4096, F32, 0, peer, 0, None);
        if r.rank == 0 {
            r.coll(CallId::NcclSend, c, 1, 4096, F32, 0, peer, 0, None);
        }
        r.coll(CallId::NcclRecv, c, 2, 4096, F32, 0, peer, 0, None);
        r.raw_call(CallId::NcclGroupEnd, 0, &[0], 0, None);
    }
    s.step();
    for (r, &c) in s.ranks.iter().zip(&comms) {
        // The watchdog aborts; the proxy thread's teardown WARN is the last error text.
        let warn = "[Service thread] Could not receive type from localRank 0, res=3, closed=0";
        r.raw_call(CallId::NcclCommAbort, c, &[], 3, Some(warn));
        r.clean_exit();
    }
    Ok(())
}

/// C03: node A runs NCCL 2.14.3 (CUDA 11.7), node B 2.19.3 (CUDA 12.3) from /usr/lib.
pub fn c03(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["gcp-a", "gcp-a", "gcp-b", "gcp-b"])?;
    s.snapshot_all(21403);
    for r in &mut s.ranks {
        if r.host == "gcp-a" {
            r.libraries(&libraries_json(WHEEL_NCCL, 21403, 12020, 11070));
        } else {
            r.libraries(&libraries_json(
                "/usr/lib/x86_64-linux-gnu/libnccl.so.2.19.3",
                21903,
                12030,
                12030,
            ));
        }
    }
    s.ranks[0].get_unique_id(WORLD_UID, 0, None);
    for r in &mut s.ranks {
        let v = if r.host == "gcp-a" { 21403 } else { 21903 };
        r.get_version(v);
    }
    for i in 0..4 {
        let r = &mut s.ranks[i];
        let rank = u64::from(r.rank);
        if r.host == "gcp-b" {
            r.init_rank(4, rank, WORLD_UID, rank % 2, 3, Some("ncclSocketInit: connecting to address with family 0 is neither AF_INET(2) nor AF_INET6(10)"), 21903);
            r.clean_exit();
        } else {
            r.init_rank_in_flight(4, rank, WORLD_UID, rank % 2);
        }
    }
    Ok(())
}

/// C04 on NCCL 2.26.2 / driver 12.8: two containers on one machine, GPU 0 each.
pub fn c04(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["pod-a@dgx1", "pod-b@dgx1"])?;
    s.snapshot_all(22602);
    for r in &mut s.ranks {
        let rank = r.rank.to_string();
        r.env(&[
            ("RANK", &rank),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("CUDA_VISIBLE_DEVICES", "0"),
        ]);
        let bus = if r.rank == 0 {
            "0000:18:00.0"
        } else {
            "0000:2a:00.0"
        };
        r.gpu(0, bus, &format!("GPU-{bus}"));
    }
    let comms = s.init_world(22602);
    for (i, r) in s.ranks.iter().enumerate() {
        r.raw_call(
            CallId::CuMemCreate,
            0,
            &[0x1000 + i as u64, 1 << 21, 1, 1, 0, 1, 0, 1],
            0,
            None,
        );
        r.raw_call(
            CallId::CuMemExportToShareableHandle,
            0,
            &[40 + i as u64, 0x1000 + i as u64, 1, 0, 0, 0, 1],
            0,
            None,
        );
    }
    s.step();
    for (r, &c) in s.ranks.iter().zip(&comms) {
        r.raw_call(
            CallId::CuMemImportFromShareableHandle,
            0,
            &[0, 41 - u64::from(r.rank), 1, 0, 0, 0, 0, 1],
            101,
            None,
        );
        r.coll(
            CallId::NcclAllReduce,
            c,
            0,
            1 << 20,
            F32,
            SUM,
            0,
            1,
            Some("Cuda failure 101 'invalid device ordinal'"),
        );
        r.clean_exit();
    }
    Ok(())
}

/// C05: NCCL 2.19.4 on kernel 6.8 with nvidia_peermem loaded; nothing fails, GDR is off.
pub fn c05(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["roce-a", "roce-b"])?;
    s.snapshot_all(21904);
    for r in &mut s.ranks {
        let mut h = host_facts_json(&r.host);
        h["peermem"] = json!([
            {"path": "/sys/kernel/mm/memory_peers/nv_mem/version", "exists": false, "content": null},
            {"path": "/sys/kernel/mm/memory_peers/nv_mem_nc/version", "exists": false, "content": null},
            {"path": "/sys/module/nvidia_peermem/version", "exists": true, "content": "555.42.02"}
        ]);
        r.host_facts(&h);
        let rank = r.rank.to_string();
        r.env(&[
            ("RANK", &rank),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("NCCL_NET_GDR_LEVEL", "SYS"),
        ]);
    }
    let comms = s.init_world(21904);
    for (r, &c) in s.ranks.iter().zip(&comms) {
        for seq in 0..4 {
            r.coll(CallId::NcclAllReduce, c, seq, 1 << 28, F32, SUM, 0, 0, None);
        }
        r.clean_exit();
    }
    Ok(())
}

/// C06 on NCCL 2.20.5: every local rank stayed on device 0.
pub fn c06(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["node0", "node0", "node0", "node0"])?;
    s.snapshot_all(22005);
    for r in &mut s.ranks {
        r.gpu(0, "0000:0f:00.0", "GPU-0f");
    }
    for r in &mut s.ranks {
        let rank = u64::from(r.rank);
        let other = if rank == 0 { 1 } else { rank };
        let err =
            format!("Duplicate GPU detected : rank {other} and rank 0 both on CUDA device f000");
        r.init_rank(4, rank, WORLD_UID, 0, 5, Some(&err), 22005);
        r.clean_exit();
    }
    Ok(())
}

/// C19: rank 1 all-reduces a tensor of another shape at seq 3; everybody hangs.
pub fn c19(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["node0", "node0"])?;
    s.snapshot_all(22203);
    let comms = s.init_world(22203);
    let ar = func_code("AllReduce");
    let f32 = datatype_code("ncclFloat32");
    for (i, &c) in comms.iter().enumerate() {
        let r = &mut s.ranks[i];
        r.prof_init(WORLD_UID, 2, i as u64);
        for seq in 0..4u64 {
            let n = if seq == 3 && i == 1 {
                51_123_456
            } else if seq == 3 {
                195_812_480
            } else {
                1 << 20
            };
            r.coll(CallId::NcclAllReduce, c, seq, n, F32, SUM, 0, 0, None);
            r.prof_coll(WORLD_UID, seq, ar, n, f32, 0, seq < 3, seq < 3);
        }
    }
    Ok(())
}

/// C20: rank 2 is OOM-killed inside a collective; the survivors see remote errors.
pub fn c20(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["node-a", "node-a", "node-b", "node-b"])?;
    s.snapshot_all(22105);
    let comms = s.init_world(22105);
    for (r, &c) in s.ranks.iter().zip(&comms) {
        for seq in 0..3 {
            r.coll(CallId::NcclAllReduce, c, seq, 1 << 20, F32, SUM, 0, 0, None);
        }
    }
    s.ranks[2].coll_in_flight(CallId::NcclAllReduce, comms[2], 3, 1 << 20, F32, SUM, 0);
    s.step();
    for (r, &c) in s.ranks.iter().zip(&comms) {
        if r.rank == 2 {
            continue;
        }
        r.coll(CallId::NcclAllReduce, c, 3, 1 << 20, F32, SUM, 0, 0, None);
        r.async_error(c, 6, Some("socketProgressOpt: Call to recv from 10.0.0.2<33759> failed : Connection reset by peer"));
        r.raw_call(CallId::NcclCommAbort, c, &[], 0, None);
        r.clean_exit();
    }
    Ok(())
}

/// A 4-rank job where ranks 2 and 3 never arrived and ranks 0 and 1 are still in init.
pub fn missing_and_running(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["node0", "node0"])?;
    s.snapshot_all(22703);
    s.ranks[0].get_unique_id(WORLD_UID, 0, None);
    for r in &s.ranks {
        r.get_version(22703);
        let rank = u64::from(r.rank);
        r.init_rank_in_flight(4, rank, WORLD_UID, rank);
    }
    Ok(())
}

/// A job that ran and exited cleanly: the report must find nothing.
pub fn healthy(dir: &Path) -> anyhow::Result<()> {
    let mut s = Scenario::new(dir, &["node0", "node0", "node1", "node1"])?;
    s.snapshot_all(22703);
    let comms = s.init_world(22703);
    for (r, &c) in s.ranks.iter().zip(&comms) {
        for seq in 0..16 {
            r.coll(CallId::NcclAllReduce, c, seq, 1 << 20, F32, SUM, 0, 0, None);
        }
        r.raw_call(CallId::NcclCommDestroy, c, &[], 0, None);
        r.clean_exit();
    }
    Ok(())
}

/// The benchmark job: `ranks` ranks, 8 per host, one world communicator, `colls` all-reduces per
/// rank (one ring of `slots` slots per process), and one rank that dies near the end so the
/// analysis does its full work. Returns the bytes a reader has to decode.
pub fn bench_job(dir: &Path, ranks: usize, colls: u64, slots: u32) -> anyhow::Result<u64> {
    let hosts: Vec<String> = (0..ranks).map(|r| format!("node{:04}", r / 8)).collect();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let g = crate::synth::Geometry {
        rings: 1,
        slots_per_ring: slots,
        arena_bytes: 64 << 10,
    };
    let mut s = Scenario::with_geometry(dir, &hosts, g)?;
    s.snapshot_all(22703);
    let comms = s.init_world(22703);
    let victim = ranks / 2;
    for (i, (r, &c)) in s.ranks.iter().zip(&comms).enumerate() {
        let n = if i == victim { colls - 1 } else { colls };
        for seq in 0..n {
            r.coll(CallId::NcclAllReduce, c, seq, 1 << 20, F32, SUM, 0, 0, None);
        }
        if i == victim {
            r.coll_in_flight(CallId::NcclAllReduce, c, n, 1 << 20, F32, SUM, 0);
        }
    }
    s.step();
    for (i, (r, &c)) in s.ranks.iter().zip(&comms).enumerate() {
        if i != victim {
            r.async_error(c, 6, Some("socketProgressOpt: Call to recv from 10.0.0.9<40001> failed : Connection reset by peer"));
            r.clean_exit();
        }
    }
    let files = crate::load::find_dumps(dir)?;
    let mut bytes = 0;
    for f in files {
        let d = ncclshim_format::reader::read_dump(&f)?;
        bytes += 4096 + d.summary.records * 128 + d.header.arena_used;
    }
    Ok(bytes)
}

/// Sizes of the scale job's dumps (see [`scale_job`]).
#[derive(Debug, Clone, Copy)]
pub struct ScaleSizes {
    /// All-reduces each rank made (the victim one fewer, then one in flight).
    pub colls: u64,
    /// Slots of the shim's thread ring (the shim's default: 2,048).
    pub shim_slots: u32,
    /// Slots of the profiler dump's thread ring (the plugin's default: 8,192); 0: no profiler dumps.
    pub prof_slots: u32,
}

/// The scale benchmark job: `ranks` ranks, 8 per host, one world communicator, each rank with a
/// shim dump and a profiler dump of the writers' real format-2 geometry (ring directory of 64 /
/// 16 entries, 4 MB blob budget, one recording thread whose ring wraps when `colls` exceeds its
/// slots), the standard snapshots, `colls` all-reduces, and the profiler's Coll events with their
/// kernel. Rank `ranks / 2` dies inside its last all-reduce; the others then report
/// `ncclRemoteError` and exit cleanly. Ranks are written in parallel and closed one by one, so
/// any number of ranks can be made. Returns the dump files' total size.
pub fn scale_job(dir: &Path, ranks: usize, sizes: ScaleSizes) -> anyhow::Result<u64> {
    use rayon::prelude::*;
    std::fs::create_dir_all(dir)?;
    let geometry = |slots| crate::synth::Geometry {
        rings: 64,
        slots_per_ring: slots,
        arena_bytes: 4 << 20,
    };
    let victim = ranks / 2;
    let n = ranks as u64;
    let write_rank = |i: usize| -> anyhow::Result<()> {
        let host = format!("node{:04}", i / 8);
        let mut r =
            crate::synth::SynthRank::create(dir, &host, i as u32, geometry(sizes.shim_slots))?;
        r.set_prof_geometry(crate::synth::Geometry {
            rings: 16,
            ..geometry(sizes.prof_slots)
        });
        r.standard_snapshots(22703, ranks);
        r.get_version(22703);
        let rank = i as u64;
        let c = r.init_rank(n, rank, WORLD_UID, rank % 8, 0, None, 22703);
        let profile = sizes.prof_slots > 0;
        if profile {
            r.prof_init(WORLD_UID, n, rank);
        }
        let done = if i == victim {
            sizes.colls - 1
        } else {
            sizes.colls
        };
        for seq in 0..done {
            r.coll(CallId::NcclAllReduce, c, seq, 1 << 20, F32, SUM, 0, 0, None);
            if profile {
                r.prof_coll(
                    WORLD_UID,
                    seq,
                    func_code("AllReduce"),
                    1 << 20,
                    datatype_code("ncclFloat32"),
                    0,
                    true,
                    true,
                );
            }
        }
        if i == victim {
            r.coll_in_flight(CallId::NcclAllReduce, c, done, 1 << 20, F32, SUM, 0);
            if profile {
                r.prof_coll(
                    WORLD_UID,
                    done,
                    func_code("AllReduce"),
                    1 << 20,
                    datatype_code("ncclFloat32"),
                    0,
                    false,
                    false,
                );
            }
        } else {
            r.async_error(c, 6, Some("socketProgressOpt: Call to recv from 10.0.0.9<40001> failed : Connection reset by peer"));
            r.clean_exit();
        }
        Ok(())
    };
    // The victim first: the survivors' errors come after its death.
    write_rank(victim)?;
    std::thread::sleep(std::time::Duration::from_millis(3));
    (0..ranks)
        .into_par_iter()
        .filter(|&i| i != victim)
        .try_for_each(write_rank)?;
    let mut bytes = 0;
    for f in crate::load::find_dumps(dir)? {
        bytes += std::fs::metadata(f)?.len();
    }
    Ok(bytes)
}
