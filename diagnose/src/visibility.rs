//! What the shim could not see: processes whose NCCL never reached the `LD_PRELOAD` wrappers
//! because it is linked statically into another object or renamed (torchcomms' NCCLX exports
//! `torchcomms_nccl*`, conda's PyTorch carries NCCL inside libtorch_cuda), while the profiler
//! plugin, which NCCL loads whatever way it is linked, and the CUDA driver hooks still recorded.
//!
//! An empty shim dump beside the plugin's records is otherwise read as "this rank never called
//! NCCL", and every rule that looks for a failed call finds none. This module tells the two
//! apart from the dump alone: the shim's library snapshot names the object that holds NCCL
//! (`ncclshim_host_facts::EmbeddedNccl`, or libtorch_cuda without a libnccl), and the plugin's
//! records prove NCCL ran. The report states it as an evidence gap (`nccl_calls_invisible`) and
//! `ncclshim doctor DIR` as a check, both with the texts of `knowledge/static-nccl.toml`.

use crate::knowledge::static_nccl::text;
use crate::model::{JobModel, ProcessModel};
use crate::names::nccl_version_string;

/// One process whose NCCL calls the shim could not see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invisible {
    /// Index into `job.processes`.
    pub process: usize,
    /// The profiler plugin recorded NCCL in this process.
    pub plugin_saw_nccl: bool,
    /// Where NCCL is, in words (the object and the name that showed it).
    pub place: String,
    /// The object holding NCCL, when the shim found it.
    pub object: Option<String>,
    /// NCCL's version code (the plugin's, else the embedded copy's).
    pub version: Option<u64>,
    /// The sentence the report and doctor say.
    pub text: String,
}

/// Whether the shim's own records hold no NCCL API call (only CUDA driver calls, or none):
/// calls are the shim's alone (the plugin writes events, not calls). With records lost to ring
/// wrap, the communicator table (which never wraps) must be empty too.
fn shim_saw_no_nccl_call(p: &ProcessModel) -> bool {
    p.has_shim
        && !p.disabled
        && !p.calls.iter().any(|c| !c.is_cuda)
        && (p.lost == 0 || p.progress.is_empty())
}

/// The profiler plugin's records show NCCL running in this process.
fn plugin_saw_nccl(p: &ProcessModel) -> bool {
    p.has_prof && (p.prof_abi.is_some() || !p.prof_ops.is_empty())
}

/// The process's NCCL the shim could not see, if that is what its dumps show.
pub fn of_process(p: &ProcessModel, process: usize) -> Option<Invisible> {
    if !shim_saw_no_nccl_call(p) {
        return None;
    }
    let plugin = plugin_saw_nccl(p);
    let libs = p.libs.as_ref();
    let embedded = libs.and_then(|l| l.nccl_embedded.first());
    let (place, object) = match (embedded, libs) {
        (Some(e), Some(l)) => {
            let more = match l.nccl_embedded.len() {
                0 | 1 => String::new(),
                n => format!(", and {} more", n - 1),
            };
            (
                format!("{} exported by {}{more}", e.symbol, e.path),
                Some(e.path.clone()),
            )
        }
        (None, Some(l)) if l.nccl_static => (
            text("where_libtorch_cuda", "", ""),
            l.libs
                .iter()
                .find(|(k, _)| k == "torch_cuda")
                .map(|(_, p)| p.clone()),
        ),
        // The plugin saw NCCL and no libnccl is loaded in the process: NCCL is inside some
        // object whose names are hidden.
        (None, Some(l)) if plugin && l.nccl_paths.is_empty() => (
            "no libnccl is loaded in it, so NCCL is inside another object, its names hidden"
                .to_owned(),
            None,
        ),
        _ => return None,
    };
    let version = p.nccl_version.or_else(|| {
        embedded
            .and_then(|e| e.version)
            .and_then(|v| u64::try_from(v).ok())
    });
    let shown = version
        .map(|v| format!("NCCL {}", nccl_version_string(v)))
        .unwrap_or_else(|| "NCCL".to_owned());
    let id = if plugin {
        "invisible_with_plugin"
    } else {
        "invisible_without_plugin"
    };
    Some(Invisible {
        process,
        plugin_saw_nccl: plugin,
        text: text(id, &shown, &place),
        place,
        object,
        version,
    })
}

/// Every process of the job whose NCCL calls the shim could not see.
pub fn invisible(job: &JobModel) -> Vec<Invisible> {
    job.processes
        .iter()
        .enumerate()
        .filter_map(|(i, p)| of_process(p, i))
        .collect()
}

/// What to do about it.
pub fn remedy() -> String {
    text("remedy", "", "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::facts::LibFacts;
    use ncclshim_host_facts::EmbeddedNccl;

    fn process(libs: LibFacts, prof: bool) -> ProcessModel {
        ProcessModel {
            has_shim: true,
            has_prof: prof,
            prof_abi: prof.then_some(5),
            nccl_version: prof.then_some(22703),
            libs: Some(libs),
            ..ProcessModel::default()
        }
    }

    fn ncclx() -> LibFacts {
        LibFacts {
            nccl_static: true,
            nccl_embedded: vec![EmbeddedNccl {
                path: "/venv/torchcomms_ncclx/_comms_ncclx.so".into(),
                symbol: "torchcomms_pncclGetVersion".into(),
                version: Some(22703),
            }],
            ..LibFacts::default()
        }
    }

    #[test]
    fn renamed_nccl_beside_the_plugins_records_is_named_with_its_object() {
        let v = of_process(&process(ncclx(), true), 3).unwrap();
        assert_eq!(v.process, 3);
        assert!(v.plugin_saw_nccl);
        assert_eq!(
            v.object.as_deref(),
            Some("/venv/torchcomms_ncclx/_comms_ncclx.so")
        );
        assert!(
            v.text.starts_with("this process ran NCCL 2.27.3 (the profiler plugin saw it) but no NCCL API call reached the shim: NCCL is linked statically or renamed (torchcomms_pncclGetVersion exported by /venv/torchcomms_ncclx/_comms_ncclx.so)"),
            "{}",
            v.text
        );
        // Without the plugin, the shim's own finding still names it (the version from the copy).
        let v = of_process(&process(ncclx(), false), 0).unwrap();
        assert!(!v.plugin_saw_nccl);
        assert!(
            v.text.contains("holds NCCL 2.27.3 linked statically"),
            "{}",
            v.text
        );
    }

    #[test]
    fn libtorch_cuda_without_libnccl_and_hidden_nccl_are_said_too() {
        let conda = LibFacts {
            nccl_static: true,
            libs: vec![("torch_cuda".into(), "/c/lib/libtorch_cuda.so".into())],
            ..LibFacts::default()
        };
        let v = of_process(&process(conda, true), 0).unwrap();
        assert_eq!(v.object.as_deref(), Some("/c/lib/libtorch_cuda.so"));
        assert!(
            v.text
                .contains("libtorch_cuda is loaded without any libnccl"),
            "{}",
            v.text
        );
        // The plugin saw NCCL, nothing exports it and no libnccl is loaded: hidden inside.
        let v = of_process(&process(LibFacts::default(), true), 0).unwrap();
        assert!(v.text.contains("its names hidden"), "{}", v.text);
    }

    /// The shim saw NCCL calls, the shim was not there, or nothing shows NCCL: nothing to say.
    #[test]
    fn nothing_is_said_where_the_shim_saw_nccl_or_nothing_shows_it() {
        let mut seen = process(ncclx(), true);
        seen.calls.push(crate::model::CallEvent {
            call: None,
            name: "ncclAllReduce".into(),
            rc: 0,
            is_cuda: false,
            t_enter: 1,
            t_exit: Some(2),
            comm: 0,
            args: [0; 9],
            error_text: None,
            tid: 1,
            nested: false,
        });
        assert_eq!(of_process(&seen, 0), None);
        let plugin_only = ProcessModel {
            has_shim: false,
            ..process(ncclx(), true)
        };
        assert_eq!(of_process(&plugin_only, 0), None);
        // Driver calls alone, libnccl loaded, no plugin: a process that never used NCCL.
        let plain = LibFacts {
            nccl_paths: vec!["/n/libnccl.so.2".into()],
            ..LibFacts::default()
        };
        assert_eq!(of_process(&process(plain.clone(), false), 0), None);
        assert_eq!(of_process(&process(plain, true), 0), None);
    }
}
