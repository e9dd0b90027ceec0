//! Numbers with names and meanings: CUDA driver results (`CUresult`) and the runtime's
//! `cudaError_t` where it differs (`knowledge/cuda.toml`), Linux errno values (`errno.toml`),
//! InfiniBand verbs completion statuses and async events (`ibverbs.toml`) and NCCL's own
//! `ncclResult_t` (`nccl-results.toml`). A report says `CUDA_ERROR_INVALID_DEVICE (invalid device
//! ordinal)` or `IBV_WC_RETRY_EXC_ERR` instead of a bare integer, and can find the CUDA error
//! inside NCCL's text (`Cuda failure 101 'invalid device ordinal'`, or 2.21's
//! `Cuda failure 'CUDA driver version is insufficient...'` with no number).

use serde::Deserialize;
use std::sync::OnceLock;

/// One numbered code.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Code {
    pub number: i64,
    pub name: String,
    /// What the library's own `*ErrorString` / `*_str` returns for it.
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub meaning: String,
    /// What the code usually means around NCCL.
    #[serde(default)]
    pub nccl: String,
    /// Typical causes (verbs completion statuses).
    #[serde(default)]
    pub causes: String,
    /// `fatal`, `error`, `info` (verbs async events).
    #[serde(default)]
    pub severity: String,
    /// Where the fault usually lies (NCCL results: success, local, usage, remote, pending).
    #[serde(default)]
    pub kind: String,
    /// First NCCL version with the code (NCCL results).
    #[serde(default)]
    pub since: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaFile {
    pub source: String,
    pub cu_result: Vec<Code>,
    pub cuda_error: Vec<Code>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrnoFile {
    pub source: String,
    pub errno: Vec<Code>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IbverbsFile {
    pub source: String,
    pub wc_status: Vec<Code>,
    pub async_event: Vec<Code>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclResultsFile {
    pub source: String,
    pub result: Vec<Code>,
}

pub fn cuda() -> &'static CudaFile {
    static F: OnceLock<CudaFile> = OnceLock::new();
    F.get_or_init(|| super::parse("cuda.toml", include_str!("../../knowledge/cuda.toml")))
}

pub fn errno() -> &'static ErrnoFile {
    static F: OnceLock<ErrnoFile> = OnceLock::new();
    F.get_or_init(|| super::parse("errno.toml", include_str!("../../knowledge/errno.toml")))
}

pub fn ibverbs() -> &'static IbverbsFile {
    static F: OnceLock<IbverbsFile> = OnceLock::new();
    F.get_or_init(|| super::parse("ibverbs.toml", include_str!("../../knowledge/ibverbs.toml")))
}

pub fn nccl_results() -> &'static NcclResultsFile {
    static F: OnceLock<NcclResultsFile> = OnceLock::new();
    F.get_or_init(|| {
        super::parse(
            "nccl-results.toml",
            include_str!("../../knowledge/nccl-results.toml"),
        )
    })
}

fn by_number(codes: &[Code], n: i64) -> Option<&Code> {
    codes.iter().find(|c| c.number == n)
}

/// A driver `CUresult`.
pub fn cu_result(n: i32) -> Option<&'static Code> {
    by_number(&cuda().cu_result, i64::from(n))
}

/// A runtime `cudaError_t` (falls back to the CUresult of the same number, which shares the
/// value for every code NCCL runs into above 100).
pub fn cuda_error(n: i32) -> Option<&'static Code> {
    by_number(&cuda().cuda_error, i64::from(n)).or_else(|| cu_result(n))
}

pub fn errno_code(n: i32) -> Option<&'static Code> {
    by_number(&errno().errno, i64::from(n))
}

/// An errno by name (`ECONNREFUSED`).
pub fn errno_named(name: &str) -> Option<&'static Code> {
    errno().errno.iter().find(|c| c.name == name)
}

/// An `ibv_wc_status`.
pub fn wc_status(n: i32) -> Option<&'static Code> {
    by_number(&ibverbs().wc_status, i64::from(n))
}

/// An `ibv_event_type`.
pub fn async_event(n: i32) -> Option<&'static Code> {
    by_number(&ibverbs().async_event, i64::from(n))
}

/// An `ncclResult_t`.
pub fn nccl_result(n: i32) -> Option<&'static Code> {
    by_number(&nccl_results().result, i64::from(n))
}

/// The CUDA error NCCL's text reports: `Cuda failure 101 'invalid device ordinal'` (number), or
/// `Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'` (text only, as
/// NCCL's runtime-call check printed it before it added the number). Returns the code found.
pub fn cuda_error_in_text(text: &str) -> Option<&'static Code> {
    const MARK: &str = "Cuda failure ";
    let Some(at) = text.find(MARK).map(|i| i + MARK.len()) else {
        return cuda_error_string_in(text);
    };
    let rest = &text[at..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if let Ok(n) = digits.parse::<i32>() {
        return cu_result(n).or_else(|| cuda_error(n));
    }
    // Text only: the quoted error string.
    let quoted = rest.trim_start().strip_prefix('\'')?;
    let msg = &quoted[..quoted.find('\'')?];
    let c = cuda();
    c.cuda_error
        .iter()
        .chain(c.cu_result.iter())
        .find(|e| !e.text.is_empty() && e.text.eq_ignore_ascii_case(msg))
}

/// A CUDA error string quoted anywhere in a text without NCCL's `Cuda failure` mark (a
/// framework's wrapper, a plugin's log), the longest that matches. Short
/// strings ("unknown error") are too generic to identify a code and are skipped.
fn cuda_error_string_in(text: &str) -> Option<&'static Code> {
    let (finder, codes) = cuda_error_strings();
    // "operation not permitted when stream is capturing" contains "operation not
    // permitted": the longest string is the one quoted (and of two as long, the later entry).
    finder
        .find_overlapping_iter(text)
        .map(|m| m.pattern().as_usize())
        .max_by_key(|&i| (codes[i].text.len(), i))
        .map(|i| codes[i])
}

/// The CUDA error strings specific enough to identify a code (short ones such as "unknown
/// error" are too generic and left out), in one automaton: every text of a job's failed calls is
/// searched for all of them in one pass, instead of lowering the text and each of some 200
/// strings per call (that was 170 k instructions per rank of a 16k-rank job).
fn cuda_error_strings() -> &'static (aho_corasick::AhoCorasick, Vec<&'static Code>) {
    const MIN_SPECIFIC_LEN: usize = 16;
    static F: OnceLock<(aho_corasick::AhoCorasick, Vec<&'static Code>)> = OnceLock::new();
    F.get_or_init(|| {
        let c = cuda();
        let codes: Vec<&'static Code> = c
            .cu_result
            .iter()
            .chain(c.cuda_error.iter())
            .filter(|e| e.text.len() >= MIN_SPECIFIC_LEN)
            .collect();
        let finder = aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(codes.iter().map(|e| e.text.as_str()))
            .expect("the CUDA error strings of cuda.toml build one automaton");
        (finder, codes)
    })
}

/// The verbs completion status NCCL's text reports (`... with status=12 opcode=...`).
pub fn wc_status_in_text(text: &str) -> Option<&'static Code> {
    let at = text.find("status=")? + "status=".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    wc_status(digits.parse().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cuda_error_string_without_nccls_mark_is_found() {
        let c = cuda_error_in_text("operation not permitted when stream is capturing").unwrap();
        assert_eq!(c.number, 900);
        assert!(cuda_error_in_text("unknown error").is_none());
    }
    use std::collections::HashSet;

    fn unique(codes: &[Code], what: &str) {
        let mut nums = HashSet::new();
        let mut names = HashSet::new();
        for c in codes {
            assert!(nums.insert(c.number), "{what}: number {} twice", c.number);
            assert!(
                names.insert(c.name.as_str()),
                "{what}: name {} twice",
                c.name
            );
            assert!(!c.name.is_empty(), "{what} {}", c.number);
        }
    }

    #[test]
    fn every_file_parses_with_unique_codes_and_a_source() {
        unique(&cuda().cu_result, "cu_result");
        unique(&cuda().cuda_error, "cuda_error");
        unique(&errno().errno, "errno");
        unique(&ibverbs().wc_status, "wc_status");
        unique(&ibverbs().async_event, "async_event");
        unique(&nccl_results().result, "nccl result");
        for s in [
            &cuda().source,
            &errno().source,
            &ibverbs().source,
            &nccl_results().source,
        ] {
            assert!(!s.trim().is_empty());
        }
        for c in cuda().cu_result.iter().chain(&cuda().cuda_error) {
            assert!(!c.text.is_empty(), "{} has no error string", c.name);
        }
        // Every ncclResult_t from ncclSuccess to ncclTimeout, in order.
        let names: Vec<&str> = nccl_results()
            .result
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names.len(), 9);
        assert_eq!(names[6], "ncclRemoteError");
        assert!(ibverbs().wc_status.len() >= 22 && errno().errno.len() >= 130);
    }

    #[test]
    fn the_result_enum_and_the_knowledge_file_agree() {
        use ncclshim_format::NcclResult;
        // Every code the file knows is a named variant with the same C name, and back.
        for c in &nccl_results().result {
            let r = NcclResult::from_i32(c.number as i32);
            assert_eq!(r.c_name(), Some(c.name.as_str()), "{}", c.number);
        }
        for r in NcclResult::KNOWN {
            let c = nccl_result(r.as_i32()).expect("a variant the knowledge file lacks");
            assert_eq!(Some(c.name.as_str()), r.c_name());
            // The file's `kind` says which values are no error at all.
            assert_eq!(
                r.is_error(),
                !matches!(c.kind.as_str(), "success" | "pending"),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn lookups() {
        assert_eq!(cu_result(101).unwrap().name, "CUDA_ERROR_INVALID_DEVICE");
        assert_eq!(cuda_error(35).unwrap().name, "cudaErrorInsufficientDriver");
        assert_eq!(cuda_error(700).unwrap().name, "cudaErrorIllegalAddress");
        assert_eq!(errno_code(111).unwrap().name, "ECONNREFUSED");
        assert_eq!(errno_named("ENOSPC").unwrap().number, 28);
        assert_eq!(wc_status(12).unwrap().name, "IBV_WC_RETRY_EXC_ERR");
        assert_eq!(async_event(8).unwrap().name, "IBV_EVENT_DEVICE_FATAL");
        assert_eq!(nccl_result(5).unwrap().name, "ncclInvalidUsage");
        assert!(nccl_result(9).is_none());
    }

    #[test]
    fn the_cuda_error_inside_nccls_text() {
        let c = cuda_error_in_text(
            "transport/p2p.cc:275 NCCL WARN Cuda failure 101 'invalid device ordinal'",
        );
        assert_eq!(c.unwrap().name, "CUDA_ERROR_INVALID_DEVICE");
        // The text of the real 2.21.5 capture (tests/fixtures/real/init-no-gpu-cu11).
        let c = cuda_error_in_text(
            "Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'",
        );
        assert_eq!(c.unwrap().number, 35);
        assert!(cuda_error_in_text("Bootstrap : no socket interface found").is_none());
        let w = wc_status_in_text("NET/IB : Got completion from peer 10.0.0.2<4242> with status=12 opcode=0 len=0 vendor err 129 (Recv)");
        assert_eq!(w.unwrap().name, "IBV_WC_RETRY_EXC_ERR");
    }
}
