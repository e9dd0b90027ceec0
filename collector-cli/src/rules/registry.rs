//! Every finding the rules can make, declared once: its id, catalog case, role in the job's
//! story, what kind of failure-graph node it explains, and one line for the docs
//! (`docs/report-json.md`'s id table is checked against this list). Findings whose id comes from
//! the knowledge files (error signatures, known bugs, NCCL messages) take their role from that
//! data when they are made.
//!
//! Roles: a `Cause` may be primary when it explains a root of the story; a `Condition` (two
//! libraries, an environment that differs) only when no cause explains that root; a
//! `Consequence` never is; an `Advisory` never makes the report fail.

use crate::story::NodeClass;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Cause,
    Condition,
    Consequence,
    Advisory,
}

/// One declared finding.
#[derive(Debug, Clone, Copy)]
pub struct Declared {
    pub id: &'static str,
    pub catalog: Option<&'static str>,
    pub role: Role,
    /// The failure-graph nodes it explains besides the calls it names (`Finding::explain`).
    pub covers: &'static [NodeClass],
    /// A failure in its own right even when nothing else failed (a hang, a silent fallback).
    pub standalone: bool,
    /// Names a specific mechanism (beats a generic finding on the same root).
    pub specific: bool,
    pub doc: &'static str,
}

macro_rules! declare_findings {
    ($( $id:literal, $catalog:expr, $role:ident, [$($cover:ident),*], standalone $sa:literal, specific $sp:literal, $doc:literal; )*) => {
        /// Every finding a rule of this crate makes.
        pub const DECLARED: &[Declared] = &[
            $( Declared {
                id: $id,
                catalog: $catalog,
                role: Role::$role,
                covers: &[$(NodeClass::$cover),*],
                standalone: $sa,
                specific: $sp,
                doc: $doc,
            }, )*
        ];
    };
}

declare_findings! {
    "nccl-net-unavailable", Some("C01"), Cause, [], standalone false, specific true, "NCCL_NET forces a network that cannot initialise on this host";
    "unpaired-p2p", Some("C02"), Cause, [Mismatch], standalone true, specific true, "point-to-point sends and receives do not pair up between ranks";
    "nccl-version-mismatch", Some("C03"), Cause, [], standalone true, specific true, "ranks run different NCCL versions";
    "cumem-import-invalid-device", Some("C04"), Cause, [], standalone false, specific true, "a cuMem import names a device that is not the exporter's";
    "gdr-peermem-undetected", Some("C05"), Cause, [], standalone true, specific true, "nvidia_peermem is loaded but NCCL cannot see it: GPUDirect RDMA silently off";
    "duplicate-gpu", Some("C06"), Cause, [], standalone true, specific true, "several ranks use the same GPU";
    "dev-shm-too-small", Some("C07"), Cause, [], standalone false, specific true, "/dev/shm is too small for NCCL's shared-memory segments";
    "socket-ifname-no-match", Some("C08"), Cause, [], standalone false, specific true, "NCCL_SOCKET_IFNAME matches no network interface";
    "cuda-driver-older-than-runtime", Some("C18"), Cause, [], standalone true, specific true, "the CUDA driver is older than the CUDA runtime";
    "cuda-driver-missing", Some("C18"), Cause, [], standalone false, specific true, "no usable CUDA driver or GPU";
    "collective-desync", Some("C19"), Cause, [Desync], standalone true, specific true, "ranks issued different collectives at one point";
    "collective-size-mismatch", Some("C19"), Cause, [Mismatch], standalone true, specific true, "ranks issued one collective with a different count, datatype, reduction or root";
    "p2p-size-mismatch", Some("C19"), Cause, [Mismatch], standalone true, specific true, "a send and the receive it pairs with have different sizes";
    "peer-failure-seen-by-survivors", Some("C20"), Consequence, [], standalone false, specific false, "remote errors on surviving ranks: a peer failed first";
    "two-libnccl-in-process", Some("C23"), Condition, [], standalone true, specific true, "more than one libnccl is loaded in one process";
    "nccl-tuning-env-differs", Some("C26"), Cause, [], standalone true, specific true, "an NCCL tuning variable differs between ranks";
    "nranks-disagreement", Some("C27"), Cause, [], standalone true, specific true, "ranks disagree on the communicator's size";
    "local-rank-beyond-visible-gpus", Some("C28"), Cause, [], standalone false, specific true, "a local rank names a GPU beyond the visible ones";
    "libnccl-not-loaded", Some("C35"), Cause, [], standalone true, specific true, "no libnccl was loaded";
    "fatal-signal", None, Cause, [Signal], standalone true, specific false, "a rank received a fatal signal";
    "invalid-argument", None, Cause, [], standalone false, specific false, "NCCL rejected the arguments of a call";
    "rank-ended-abruptly", None, Cause, [Vanished], standalone true, specific false, "a rank's dump stops without a clean exit and without an error of its own";
    "rank-left-early", None, Cause, [LeftEarly], standalone true, specific false, "a rank exited while its peers still waited for it";
    "ranks-never-arrived", None, Cause, [], standalone true, specific false, "ranks of a communicator left no trace";
    "failing-rank-left-no-dump", None, Cause, [], standalone false, specific false, "the rank that failed first left no dump; the others saw it fail";
    "communicator-used-from-several-threads", Some("C25"), Cause, [Behind, StuckInside], standalone true, specific true, "one communicator is used from several threads at once";
    "ranks-waiting-when-stopped", None, Consequence, [], standalone false, specific false, "ranks without an error of their own waited until they were stopped";
    "unique-id-split", None, Cause, [], standalone true, specific true, "ranks of one job joined with different uniqueIds";
    "stuck-outside-nccl", None, Cause, [Behind], standalone true, specific false, "hang: a rank stopped issuing collectives; the others wait for it";
    "stuck-inside-nccl", None, Cause, [StuckInside], standalone true, specific false, "hang: ranks entered an operation that never completed";
    "late-rank", None, Advisory, [], standalone false, specific false, "a rank arrives late at the collectives of a job that ran";
    "nccl-env-differs", None, Condition, [], standalone false, specific false, "NCCL variables differ between ranks";
    "library-differs", None, Condition, [], standalone false, specific false, "libraries differ between ranks";
    "failing-ranks-differ", None, Condition, [], standalone false, specific false, "what only the failing ranks have";
    "application-cuda-call-failed", None, Cause, [], standalone false, specific true, "the application's own CUDA driver call (outside any NCCL call) failed";
    "unexplained-error", None, Cause, [], standalone false, specific false, "an NCCL or CUDA error no known cause matches";
}

/// The declaration of `id`, when a rule of this crate declares it.
pub fn declared(id: &str) -> Option<&'static Declared> {
    DECLARED.iter().find(|d| d.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<&str> = DECLARED.iter().map(|d| d.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(n, ids.len());
    }
}
