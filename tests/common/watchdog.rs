//! A bound on a whole test binary. A test that waits for something that never comes holds
//! its binary, and with it `cargo test`, until whatever runs it gives up: libtest has no
//! timeout of its own, and says only once, early in a long output, that a test has run for
//! over 60 seconds. Once the first gateway of the binary starts, a thread of its own waits
//! [`SUITE_LIMIT`] (the suite takes about five minutes on two cores), then names the tests
//! whose gateways are still running, ends the processes the tests started, and ends its own,
//! failing the run. A binary that starts no gateway has no such bound.
//!
//! Each gateway the tests start (in process or as a child process) holds a [`Live`] with the
//! name of the test's thread, which libtest names after the test.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long one test binary may run, unless `PEERGATE_TEST_LIMIT_SECONDS` says otherwise.
const SUITE_LIMIT: Duration = Duration::from_secs(25 * 60);

/// The gateways running now, by a number of their own: the test that started each, and what.
static LIVE: Mutex<BTreeMap<u64, String>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A running gateway, named in the watchdog's report while it is held.
pub struct Live(u64);

impl Live {
    /// Registers `what`, started by the current test, and starts the watchdog if it is not yet.
    pub fn new(what: &str) -> Self {
        start_watchdog();
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        let test = std::thread::current()
            .name()
            .unwrap_or("a thread with no name")
            .to_owned();
        live().insert(number, format!("{test} ({what})"));
        Self(number)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        live().remove(&self.0);
    }
}

fn live() -> std::sync::MutexGuard<'static, BTreeMap<u64, String>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

fn start_watchdog() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let limit = std::env::var("PEERGATE_TEST_LIMIT_SECONDS")
            .ok()
            .and_then(|seconds| seconds.parse().ok())
            .map_or(SUITE_LIMIT, Duration::from_secs);
        std::thread::Builder::new()
            .name("suite watchdog".into())
            .spawn(move || {
                std::thread::sleep(limit);
                report_and_exit(limit);
            })
            .expect("the watchdog's thread starts");
    });
}

/// Names what still runs on standard error (past libtest's capture) and ends the process.
fn report_and_exit(limit: Duration) -> ! {
    use std::io::Write;
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(
        stderr,
        "\nthe test binary ran past {} seconds and is stopped; gateways still running:",
        limit.as_secs()
    );
    let live = live();
    if live.is_empty() {
        let _ = writeln!(stderr, "  none: the test that hangs started no gateway");
    }
    for what in live.values() {
        let _ = writeln!(stderr, "  {what}");
    }
    let _ = stderr.flush();
    kill_children();
    std::process::exit(101);
}

/// Ends every process the tests started (servers, agents, providers), which `exit` would
/// leave running without their `Drop`, some holding the run's output open: each process whose
/// parent is this one (`/proc/PID/stat`'s fourth field).
fn kill_children() {
    use rustix::process::{Pid, Signal, kill_process};
    let me = std::process::id().to_string();
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return;
    };
    for process in processes.flatten() {
        let Ok(stat) = std::fs::read_to_string(process.path().join("stat")) else {
            continue;
        };
        // The name in parentheses may hold spaces: the fields after it are counted.
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let parent = after_name.split_whitespace().nth(1);
        let pid = process.file_name().to_string_lossy().parse().ok();
        if parent == Some(me.as_str())
            && let Some(pid) = pid.and_then(Pid::from_raw)
        {
            let _ = kill_process(pid, Signal::KILL);
        }
    }
}
