//! `ncclshim exporter --listen ADDR DIR`: a per-node Prometheus endpoint over the live dumps of
//! that node, for a DaemonSet or a systemd unit beside the job. `/metrics` serves the text
//! exposition format ([`text`]) of the metrics [`metrics`] computes; `/` is a short page saying
//! what is served.
//!
//! A scrape walks DIR, re-reads only the dumps that changed since the last scrape ([`cache`]),
//! and builds the job model and story again only when one did. It runs on the thread that
//! serves the request: Prometheus scrapes one at a time, and a second scraper simply waits.
//! The HTTP server is `tiny_http` (synchronous, no runtime); the loop wakes every
//! [`POLL`] to see whether SIGINT or SIGTERM asked it to stop.

pub mod cache;
pub mod metrics;
pub mod text;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the serving loop looks at the stop flag between requests.
pub const POLL: Duration = Duration::from_millis(200);

/// The exporter: its socket, its directory and what the last scrape read.
pub struct Exporter {
    server: tiny_http::Server,
    dir: PathBuf,
    stall_after_ns: u64,
    cache: cache::DumpCache,
    /// The joined model of the last scrape, reused while no dump changed.
    joined: Option<metrics::Joined>,
}

/// What one scrape cost, for its own metrics and for BENCHMARKS.md.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScrapeCost {
    pub wall: Duration,
    /// CPU time of the whole process (every rayon thread) during the scrape.
    pub cpu: Duration,
    pub files: usize,
    pub parsed: usize,
}

impl Exporter {
    /// Checks `dir` and binds `listen`; each failure is one line for the user.
    pub fn bind(listen: &str, dir: &Path, stall_after_ns: u64) -> Result<Self, String> {
        // The directory must exist now; it may hold no dump yet (the job starts after us).
        ncclshim_diagnose::open_job_dir(dir).map_err(|e| e.message)?;
        let server = tiny_http::Server::http(listen)
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        Ok(Self {
            server,
            dir: dir.to_path_buf(),
            stall_after_ns,
            cache: cache::DumpCache::default(),
            joined: None,
        })
    }

    /// The address bound (the port chosen when `listen` asked for port 0).
    pub fn local_addr(&self) -> String {
        match self.server.server_addr() {
            tiny_http::ListenAddr::IP(a) => a.to_string(),
            #[allow(unreachable_patterns)]
            other => format!("{other:?}"),
        }
    }

    /// Serves requests until `stop` is set.
    pub fn serve(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            match self.server.recv_timeout(POLL) {
                Ok(Some(request)) => self.answer(request),
                Ok(None) => {}
                // An interrupted accept (the signal that sets `stop`) is no failure.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // stderr may be closed (a supervisor that read the address): never panic.
                    let _ = writeln!(std::io::stderr(), "ncclshim exporter: {e}");
                    std::thread::sleep(POLL);
                }
            }
        }
    }

    fn answer(&mut self, request: tiny_http::Request) {
        let path = request.url().split('?').next().unwrap_or("");
        let (status, body, content_type) = match (request.method(), path) {
            (tiny_http::Method::Get, "/metrics") => match self.scrape() {
                Ok((body, _)) => (200, body, text::CONTENT_TYPE),
                Err(e) => (500, format!("{e}\n"), "text/plain; charset=utf-8"),
            },
            (tiny_http::Method::Get, "/") => (200, self.index(), "text/html; charset=utf-8"),
            (tiny_http::Method::Get, _) => (404, "not found: /metrics\n".into(), "text/plain"),
            _ => (405, "GET only\n".into(), "text/plain"),
        };
        let mut response = tiny_http::Response::from_string(body).with_status_code(status);
        // Our own constant names and values: always valid header bytes.
        if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", content_type) {
            response = response.with_header(h);
        }
        // A scraper that hung up is its own business.
        let _ = request.respond(response);
    }

    fn index(&self) -> String {
        // The directory is the user's own, but a page shows it as HTML: escaped as such.
        let dir = self
            .dir
            .display()
            .to_string()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        format!(
            "<html><head><title>ncclshim exporter</title></head><body>\
             <h1>ncclshim exporter</h1><p>The NCCL progress of the dumps in <code>{dir}</code>, \
             per process and communicator: <a href=\"/metrics\">/metrics</a>.</p></body></html>\n"
        )
    }

    /// One scrape: the exposition text and what it cost.
    pub fn scrape(&mut self) -> Result<(String, ScrapeCost), String> {
        scrape_with(
            &self.dir,
            self.stall_after_ns,
            &mut self.cache,
            &mut self.joined,
        )
    }
}

/// A scrape of `dir` with `cache` and the last joined model (the exporter's state, apart from
/// its socket, so a benchmark can scrape without serving).
pub fn scrape_with(
    dir: &Path,
    stall_after_ns: u64,
    cache: &mut cache::DumpCache,
    joined: &mut Option<metrics::Joined>,
) -> Result<(String, ScrapeCost), String> {
    let started = std::time::Instant::now();
    let cpu0 = process_cpu();
    let scan = cache.scan(dir).map_err(|e| e.message)?;
    if scan.changed || joined.is_none() {
        *joined = Some(metrics::join(&scan.models));
    }
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let at = metrics::Instant {
        now_ns,
        stall_after_ns,
    };
    let mut families = match joined {
        Some(j) => metrics::compute(j, at),
        None => Vec::new(),
    };
    let cost = ScrapeCost {
        wall: started.elapsed(),
        cpu: process_cpu().saturating_sub(cpu0),
        files: scan.files,
        parsed: scan.parsed,
    };
    families.extend(self_metrics(&cost, scan.problems.len()));
    Ok((text::render(&families), cost))
}

/// The exporter's own series: what the scrape read and what it cost.
fn self_metrics(cost: &ScrapeCost, problems: usize) -> Vec<text::Family> {
    use text::{Family, Kind::Gauge};
    let mut out = vec![
        Family::new(
            "ncclshim_exporter_dumps",
            Gauge,
            "Dump files in the directory.",
        ),
        Family::new(
            "ncclshim_exporter_dumps_parsed",
            Gauge,
            "Dump files parsed by this scrape (the others had not changed).",
        ),
        Family::new(
            "ncclshim_exporter_dump_problems",
            Gauge,
            "Files that could not be read as dumps.",
        ),
        Family::new(
            "ncclshim_exporter_scrape_duration_seconds",
            Gauge,
            "Wall time of this scrape.",
        ),
        Family::new(
            "ncclshim_exporter_scrape_cpu_seconds",
            Gauge,
            "CPU time of this scrape (every thread of the exporter).",
        ),
    ];
    let values = [
        cost.files as f64,
        cost.parsed as f64,
        problems as f64,
        cost.wall.as_secs_f64(),
        cost.cpu.as_secs_f64(),
    ];
    for (f, v) in out.iter_mut().zip(values) {
        f.push(Vec::new(), v);
    }
    out
}

/// CPU time (user + system) of this process so far.
fn process_cpu() -> Duration {
    // SAFETY: getrusage writes the struct it is handed, which lives on this stack frame;
    // zeroed is a valid `rusage` (plain integers).
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer; it fails only on a bad `who`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let tv =
        |t: libc::timeval| Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Set by SIGINT or SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM set the returned flag instead of killing the process, so the
/// exporter stops serving, answers nothing half-written and exits 0.
pub fn stop_on_signals() -> &'static AtomicBool {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler is an
        // `extern "C" fn(c_int)` that only stores to an atomic, which is async-signal-safe.
        // No SA_RESTART: the blocking accept returns EINTR and the loop sees the flag.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    &STOP
}
