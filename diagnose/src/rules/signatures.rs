//! Catalog cases recognised by NCCL's or CUDA's own words alone: the error text (or CUresult)
//! is specific enough that no cross-rank evidence is needed. What a text means and which cause
//! the recorded facts point to come from the message knowledge (`knowledge/messages.toml`); this
//! table only says which (message, cause) pairs are which catalog case, how the finding is
//! titled, and which CUresults of the driver wrappers say the same without a text.

use crate::finding::registry;
use crate::finding::{Confidence, Evidence, EvidenceKind, Finding};
use crate::knowledge::messages::{self, Fit};
use crate::message_facts::ProcessFacts;
use crate::model::JobModel;
use std::collections::HashMap;

/// One recognisable signature.
pub struct Signature {
    /// Its finding's declaration (id, catalog case, the id table's line): [`registry`].
    pub finding: &'static registry::Declared,
    pub title: &'static str,
    /// (message entry id, cause id) in `knowledge/messages.toml`: the signature holds when the
    /// error text is classified as that entry and that cause ranks first for the process's facts.
    pub causes: &'static [(&'static str, &'static str)],
    /// Or a driver call returning one of these CUresults.
    pub cu_results: &'static [i32],
    /// Environment variables worth quoting as evidence.
    pub env: &'static [&'static str],
    pub confidence: Confidence,
}

pub const SIGNATURES: &[Signature] = &[
    Signature {
        finding: &registry::FABRIC_MANAGER_NOT_RUNNING,
        title: "CUDA is not initialised: Fabric Manager not running on an NVSwitch system",
        causes: &[("cuda-system-not-initialized", "fabric-manager-not-running")],
        cu_results: &[802],
        env: &[],
        confidence: Confidence::High,
    },
    Signature {
        finding: &registry::NVLS_MULTICAST_BIND_FAILED,
        title: "NVLS multicast setup refused by the Fabric Manager / NVSwitch state",
        causes: &[
            ("cuda-illegal-state-multicast", "fabric-state"),
            ("nvls-bind-failed", "fabric-state"),
        ],
        cu_results: &[401],
        env: &["NCCL_NVLS_ENABLE"],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::ILLEGAL_MEMORY_ACCESS,
        title: "A CUDA kernel made an illegal memory access (sticky error surfacing through NCCL)",
        causes: &[("cuda-illegal-address", "application-kernel")],
        cu_results: &[700],
        env: &["CUDA_LAUNCH_BLOCKING"],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::INIT_DURING_GRAPH_CAPTURE,
        title: "Communicator created while a CUDA graph was being captured",
        causes: &[("cuda-stream-capture", "init-during-capture")],
        cu_results: &[900],
        env: &[],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::SHM_REMOVED_BY_SYSTEMD,
        title: "NCCL's shared-memory file disappeared (systemd RemoveIPC)",
        causes: &[
            ("shm-unlink-failed", "systemd-removeipc"),
            ("shm-unlink-failed", "other"),
        ],
        cu_results: &[],
        env: &[],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::CUMEM_HOST_PEER_UNSUPPORTED,
        title: "cuMem host shared memory needs peer access the GPUs do not support",
        causes: &[("cuda-peer-access-unsupported", "cumem-host-without-p2p")],
        cu_results: &[217],
        env: &["NCCL_CUMEM_HOST_ENABLE"],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::MALFORMED_TOPOLOGY_XML,
        title: "The topology XML NCCL was given is missing mandatory attributes",
        causes: &[
            ("topo-xml-malformed", "topo-file"),
            ("topo-xml-malformed", "graph-file"),
            ("topo-xml-malformed", "generated"),
        ],
        cu_results: &[],
        env: &["NCCL_TOPO_FILE"],
        confidence: Confidence::High,
    },
    Signature {
        finding: &registry::IBV_CREATE_QP_FAILED,
        title: "Creating an InfiniBand queue pair failed (locked-memory limit)",
        causes: &[("ib-verbs-call-failed", "memlock-limit")],
        cu_results: &[],
        env: &["NCCL_IB_DISABLE"],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::ROCE_GID_NOT_ROUTABLE,
        title: "RoCE traffic uses a link-local GID: the peer never answers (retry exceeded)",
        causes: &[
            ("ib-completion-error", "roce-gid"),
            ("ib-completion-error", "roce-gid-default"),
        ],
        cu_results: &[],
        env: &["NCCL_IB_GID_INDEX"],
        confidence: Confidence::High,
    },
    Signature {
        finding: &registry::GDR_LOCAL_PROTECTION,
        title: "GPUDirect RDMA rejected by the PCIe path (IB local protection error with peermem)",
        causes: &[("ib-completion-error", "gdr-acs")],
        cu_results: &[],
        env: &["NCCL_NET_GDR_LEVEL"],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::NVLS_FABRIC_MANAGER_RESTARTED,
        title: "NVLS multicast setup fails with 'invalid argument': Fabric Manager restarted without a GPU reset",
        causes: &[("cuda-error", "nvls-fabric-manager-restarted")],
        cu_results: &[],
        env: &["NCCL_NVLS_ENABLE"],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::OFI_DEVICES_NOT_EXPOSED,
        title: "The OFI network plugin (aws-ofi-nccl) finds no EFA/RDMA device",
        causes: &[("net-plugin-init-failed", "efa-not-exposed")],
        cu_results: &[],
        env: &["FI_PROVIDER", "NCCL_NET"],
        confidence: Confidence::High,
    },
    Signature {
        finding: &registry::IB_LINK_FAILED,
        title: "An InfiniBand/RoCE link failed during the run",
        causes: &[
            ("ib-completion-error", "link-port-down"),
            ("ib-completion-error", "link"),
            ("ib-async-event", "link-flap"),
        ],
        cu_results: &[],
        env: &["NCCL_IB_HCA", "NCCL_IB_TIMEOUT"],
        confidence: Confidence::Medium,
    },
    Signature {
        finding: &registry::NET_PLUGIN_INCOMPATIBLE,
        title: "The network plugin does not fit this NCCL / libfabric",
        causes: &[
            ("net-plugin-invalid", "plugin-version"),
            ("net-plugin-init-failed", "plugin-incompatible"),
        ],
        cu_results: &[],
        env: &["NCCL_NET_PLUGIN"],
        confidence: Confidence::Medium,
    },
];

/// The remedy of a signature: its first cause's, from the knowledge file.
fn remedy_of(sig: &Signature) -> &'static str {
    let (entry, cause) = sig.causes[0];
    messages::entry(entry)
        .and_then(|e| e.causes.iter().find(|c| c.id == cause))
        .map(|c| c.remedy.as_str())
        .unwrap_or_default()
}

/// The CUDA driver calls that failed while `outer` (an NCCL call) was running, in the same
/// process: NCCL made them.
fn failed_driver_calls_inside<'a>(
    pm: &'a crate::model::ProcessModel,
    outer: &'a crate::model::CallEvent,
) -> impl Iterator<Item = (usize, &'a crate::model::CallEvent)> + 'a {
    let end = outer.t_exit.unwrap_or(u64::MAX);
    pm.calls.iter().enumerate().filter(move |(_, d)| {
        d.is_cuda && d.failed() && d.tid == outer.tid && (outer.t_enter..=end).contains(&d.t_enter)
    })
}

/// (message entry id, cause id) in `knowledge/messages.toml`.
type CauseKey = (&'static str, &'static str);

/// What one error-reporting call says, independent of the signature asked about.
struct ErrorCall {
    process: usize,
    call: usize,
    /// (message entry id, best cause id) and the facts that decided it, unless ruled out.
    best: Option<(CauseKey, Vec<(String, bool)>)>,
    /// The CUresult: a driver call's own, or the CUDA error NCCL's text quotes.
    quoted: Option<i32>,
    is_cuda_rc: Option<i32>,
}

/// Every error-reporting call of the job with its classification: each call is classified once
/// (not once per signature) and each distinct text once (the survivors of a 16k-rank job
/// report the same few texts).
fn error_calls(job: &JobModel) -> Vec<ErrorCall> {
    let mut by_text: HashMap<&str, Option<messages::Match>> = HashMap::new();
    let mut out = Vec::new();
    for (p, pm) in job.processes.iter().enumerate() {
        let facts = ProcessFacts(pm);
        for (i, c) in pm.error_calls() {
            let text = c.error_text.as_deref();
            let classified = text.and_then(|t| {
                by_text
                    .entry(t)
                    .or_insert_with(|| messages::classify(t))
                    .as_ref()
            });
            // The cause the knowledge ranks first for this text and this process's facts.
            let best = classified.and_then(|m| {
                let best = m.entry.assess(m, &facts).into_iter().next()?;
                (best.fit != Fit::RuledOut)
                    .then_some(((m.entry.id.as_str(), best.cause.id.as_str()), best.facts))
            });
            let quoted = text
                .and_then(crate::knowledge::codes::cuda_error_in_text)
                .and_then(|code| i32::try_from(code.number).ok());
            out.push(ErrorCall {
                process: p,
                call: i,
                best,
                quoted,
                is_cuda_rc: c.is_cuda.then_some(c.rc),
            });
        }
    }
    out
}

pub fn check(job: &JobModel) -> Vec<Finding> {
    let errors = error_calls(job);
    let mut out = Vec::new();
    for sig in SIGNATURES {
        let mut f = Finding::new(sig.finding, sig.title, sig.confidence).remedy(remedy_of(sig));
        for e in &errors {
            let (p, i) = (e.process, e.call);
            let pm = &job.processes[p];
            let c = &pm.calls[i];
            let by_text = e
                .best
                .as_ref()
                .filter(|(key, _)| sig.causes.contains(key))
                .map(|(_, facts)| facts.clone());
            // A driver call's CUresult, or the CUDA error NCCL's text quotes.
            let by_result = e.is_cuda_rc.is_some_and(|rc| sig.cu_results.contains(&rc))
                || e.quoted.is_some_and(|n| sig.cu_results.contains(&n));
            if by_text.is_none() && !by_result {
                continue;
            }
            f.involve(job, p);
            f.explain(p, i);
            f.fact(Evidence::call(c).of(job, p));
            // The driver calls that failed inside this NCCL call are the same failure (the
            // failing call's context the knowledge may have weighed).
            if !c.is_cuda {
                for (j, d) in failed_driver_calls_inside(pm, c) {
                    f.explain(p, j);
                    f.fact(Evidence::call_worded(d, "inside it: ", "").of(job, p));
                }
            }
            let env: Vec<Evidence> = sig
                .env
                .iter()
                .map(|k| Evidence::env(k, pm.env_var(k), "").of(job, p))
                .collect();
            // The facts the knowledge weighed, unless one is an environment value stated
            // below already (one fact, once).
            for (fact, _) in by_text.unwrap_or_default() {
                if !env.iter().any(|e| e.fact == fact) {
                    f.fact(Evidence::new(EvidenceKind::Inference, fact).of(job, p));
                }
            }
            for e in env {
                f.fact(e);
            }
        }
        if !f.process_ids.is_empty() {
            out.push(f);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testutil::{analyze, find};
    use ncclshim_fixtures::synth::{host_facts_json, WORLD_UID};
    use ncclshim_format::CallId;

    /// One real text per signature (NCCL's WARN as printed; see tests/signatures/ for sources).
    /// `None`: the signature's cause rests on host facts (RoCE GID tables, NVSwitches, loaded
    /// plugins, a long history) that the synthetic host lacks; its lab scenario
    /// (tests/scenarios/cNN-*.toml) proves it through the real shim.
    fn sample_text(catalog: &str) -> Option<&'static str> {
        Some(match catalog {
            "C15" => "Cuda failure 802 'system not yet initialized'",
            "C17" => "Cuda failure 401 'the operation cannot be performed in the present state'",
            "C21" => "Cuda failure 'an illegal memory access was encountered'",
            "C24" => "Cuda failure 'operation not permitted when stream is capturing'",
            "C29" => "unlink shared memory /dev/shm/nccl-d5rTd0 failed, error: No such file or directory (2)",
            "C32" => "Cuda failure 217 'peer access is not supported between these two devices'",
            "C33" => "Attribute busid of node nic not found",
            "C11" => "Call to ibv_create_qp failed",
            "C12" | "C14" | "C16" | "C22" | "C30" | "C34" => return None,
            other => panic!("no sample text for {other}"),
        })
    }

    #[test]
    fn every_signature_matches_its_own_text() {
        for sig in SIGNATURES {
            assert!(!remedy_of(sig).is_empty(), "{}: remedy", sig.finding.id());
            let catalog = sig
                .finding
                .catalog()
                .expect("a signature is a catalog case");
            let Some(text) = sample_text(catalog) else {
                continue;
            };
            let text = text.to_owned();
            let (_, fs) = analyze(&["n0"], move |s| {
                s.snapshot_all(22703);
                // A limited locked-memory limit: the fact C11's cause depends on.
                let mut h = host_facts_json("n0");
                h["memlock_unlimited"] = false.into();
                h["memlock_soft_bytes"] = 65536.into();
                s.ranks[0].host_facts(&h);
                s.ranks[0].init_rank(
                    1,
                    0,
                    WORLD_UID,
                    0,
                    1,
                    Some(&format!("NCCL WARN something: {text}")),
                    22703,
                );
                s.ranks[0].clean_exit();
            });
            let f = find(&fs, sig.finding.id()).unwrap_or_else(|| panic!("{catalog} not found"));
            assert_eq!(f.catalog(), Some(catalog));
            assert_eq!(f.explains.len(), 1);
            assert!(find(&fs, registry::UNEXPLAINED_ERROR.id()).is_none());
        }
    }

    /// One rank failing its first all-reduce with retry-exceeded on a host with `port`.
    fn retry_exceeded_on(port: serde_json::Value, nccl: u64) -> Vec<Finding> {
        let (_, fs) = analyze(&["n0"], move |s| {
            s.snapshot_all(nccl as i32);
            let mut h = host_facts_json("n0");
            h["ib_ports"] = serde_json::json!([port]);
            s.ranks[0].host_facts(&h);
            s.ranks[0].init_rank(
                1,
                0,
                WORLD_UID,
                0,
                6,
                Some("NET/IB : Got completion from peer 10.0.0.2<4711> with error 12, opcode 0, len 0, vendor err 129"),
                nccl,
            );
            s.ranks[0].clean_exit();
        });
        fs
    }

    #[test]
    fn retry_exceeded_is_told_apart_by_the_gid_table_the_version_and_the_port_state() {
        let roce = serde_json::json!({"device": "mlx5_0", "port": 1, "state": "4: ACTIVE",
            "link_layer": "Ethernet", "gids": [
                {"index": 0, "gid": "fe80:0000:0000:0000:0a42:a1ff:fe10:0001", "kind": "IB/RoCE v1"},
                {"index": 3, "gid": "0000:0000:0000:0000:0000:ffff:0a00:0001", "kind": "RoCE v2"}]});
        // NCCL 2.19 uses GID 0 when NCCL_IB_GID_INDEX is unset: link-local.
        let fs = retry_exceeded_on(roce.clone(), 21903);
        let f = find(&fs, registry::ROCE_GID_NOT_ROUTABLE.id()).expect("C12 on NCCL 2.19");
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("selected_gid_link_local = true")));
        assert!(find(&fs, registry::IB_LINK_FAILED.id()).is_none());
        // NCCL 2.22 selects the RoCE v2 GID itself: not C12.
        let fs = retry_exceeded_on(roce, 22203);
        assert!(find(&fs, registry::ROCE_GID_NOT_ROUTABLE.id()).is_none());
        // InfiniBand, port ACTIVE, no history: neither a GID nor a link problem is claimed.
        let mut ib = serde_json::json!({"device": "mlx5_0", "port": 1, "state": "4: ACTIVE",
            "link_layer": "InfiniBand", "gids": []});
        let fs = retry_exceeded_on(ib.clone(), 21903);
        assert!(find(&fs, registry::ROCE_GID_NOT_ROUTABLE.id()).is_none());
        assert!(find(&fs, registry::IB_LINK_FAILED.id()).is_none());
        // The same port DOWN: a link failure.
        ib["state"] = "1: DOWN".into();
        let fs = retry_exceeded_on(ib, 21903);
        assert!(find(&fs, registry::IB_LINK_FAILED.id()).is_some());
    }

    #[test]
    fn cuda_result_alone_matches() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            s.ranks[0].raw_call(CallId::CuMulticastAddDevice, 0, &[1, 0, 1], 401, None);
            s.ranks[0].clean_exit();
        });
        let f = find(&fs, registry::NVLS_MULTICAST_BIND_FAILED.id()).expect("C17");
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("CUDA_ERROR_ILLEGAL_STATE")));
        assert!(f
            .evidence
            .iter()
            .any(|e| e.contains("NCCL_NVLS_ENABLE unset")));
    }

    #[test]
    fn a_cause_the_recorded_facts_rule_out_is_not_claimed() {
        // memlock unlimited (the synthetic default): ibv_create_qp failing is not C11.
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            s.ranks[0].init_rank(
                1,
                0,
                WORLD_UID,
                0,
                2,
                Some("Call to ibv_create_qp failed"),
                22703,
            );
            s.ranks[0].clean_exit();
        });
        assert!(find(&fs, registry::IBV_CREATE_QP_FAILED.id()).is_none());
        let f = find(&fs, "nccl-message-ib-verbs-call-failed").expect("still explained");
        assert!(f.evidence.iter().any(|e| e.contains(
            "cause memlock-limit: ruled out (call 'ibv_create_qp', memlock_unlimited = true)"
        )));
    }

    #[test]
    fn unrelated_text_does_not_match() {
        let (_, fs) = analyze(&["n0"], |s| {
            s.snapshot_all(22703);
            s.ranks[0].init_rank(
                1,
                0,
                WORLD_UID,
                0,
                3,
                Some("something else entirely"),
                22703,
            );
            s.ranks[0].clean_exit();
        });
        assert!(SIGNATURES
            .iter()
            .all(|sig| find(&fs, sig.finding.id()).is_none()));
    }
}
