//! The `peergate serve` binary in a child process.

use super::cli::bin;
use super::store::store_args;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `peergate serve` binary in a child process.
pub struct ServeProcess {
    pub child: Child,
    pub addr: SocketAddr,
    /// The admin API's address.
    pub admin_addr: SocketAddr,
    /// The gRPC listener's address, with `[grpc]`.
    pub grpc_addr: Option<SocketAddr>,
    pub log: Arc<Mutex<Vec<String>>>,
    /// Names the test to the watchdog while the process runs.
    _live: super::watchdog::Live,
}

impl ServeProcess {
    /// Starts `peergate serve --listen 127.0.0.1:0` in `cwd` on the store under `data` (the
    /// suite's engine), and waits for it to listen.
    pub fn start(cwd: &Path, data: &Path) -> Self {
        Self::start_with(cwd, data, &[], &[])
    }

    /// Like [`ServeProcess::start`], with more arguments and environment variables for the
    /// child only.
    pub fn start_with(cwd: &Path, data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in_shell(cwd, "", data, extra, env)
    }

    /// Like [`ServeProcess::start_with`], with `setup` run by bash in the same process first
    /// (e.g. `ulimit -f 2048;`); the server then replaces the shell.
    pub fn start_in_shell(
        cwd: &Path,
        setup: &str,
        data: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let store = store_args(data);
        let mut args: Vec<&str> = store.iter().map(String::as_str).collect();
        args.extend(extra);
        Self::spawn(cwd, setup, &args, env)
    }

    /// Starts `peergate serve` with no store arguments at all: the default data directory under
    /// `cwd`, whatever engine the suite runs on.
    pub fn start_on_defaults(cwd: &Path) -> Self {
        Self::spawn(cwd, "", &[], &[])
    }

    /// Starts `peergate serve` with exactly `args` after the listen addresses.
    pub fn start_args(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(cwd, "", args, env)
    }

    /// Starts `peergate serve` with the door on `listen` (the admin API on any free port),
    /// then exactly `args`.
    pub fn start_listening_on(
        cwd: &Path,
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn_on(cwd, "", listen, args, env)
    }

    fn spawn(cwd: &Path, setup: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_on(cwd, setup, "127.0.0.1:0", extra, env)
    }

    fn spawn_on(
        cwd: &Path,
        setup: &str,
        listen: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        crate::common::install_test_crypto();
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!("{setup} exec \"$0\" \"$@\""))
            .arg(bin())
            .arg("serve")
            .args(["--listen", listen, "--admin-listen", "127.0.0.1:0"])
            .args(grpc_listen(cwd, extra))
            .args(extra)
            .current_dir(cwd)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn peergate serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            let (mut admin_addr, mut grpc_addr) = (None, None);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // Logged before the address is handed over, so a test that has the address
                // also sees the line.
                let address_after = |marker: &str| {
                    line.split(marker).nth(1).map(|rest| {
                        rest.chars()
                            .take_while(|c| !matches!(c, ';' | ' '))
                            .collect::<String>()
                    })
                };
                let admin = address_after("admin API on http://");
                let grpc = address_after("gRPC binding on ");
                let addr = address_after("listening on http://")
                    .or_else(|| address_after("listening on https://"));
                sink.lock().unwrap().push(line);
                if let Some(admin) = admin {
                    admin_addr = Some(admin);
                }
                if let Some(grpc) = grpc {
                    grpc_addr = Some(grpc);
                }
                if let Some(addr) = addr
                    && let Some(tx) = tx.take()
                {
                    let admin = admin_addr.take().unwrap_or_default();
                    let _ = tx.send((addr, admin, grpc_addr.take()));
                }
            }
        });
        let (addr, admin_addr, grpc_addr) = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("peergate did not start: {:?}", log.lock().unwrap()));
        Self {
            child,
            addr: addr.parse().unwrap(),
            admin_addr: admin_addr.parse().expect("admin API address in the log"),
            grpc_addr: grpc_addr.map(|addr| addr.parse().expect("gRPC address in the log")),
            log,
            _live: super::watchdog::Live::new("peergate serve"),
        }
    }

    pub fn door(&self) -> String {
        format!("http://{}/a2a/v1", self.addr)
    }

    /// Where its public documents are served: `http://<door's address>`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The public Agent Card it serves.
    pub async fn card(&self) -> serde_json::Value {
        let url = format!("http://{}/.well-known/agent-card.json", self.addr);
        reqwest::get(url).await.unwrap().json().await.unwrap()
    }

    /// The log once it holds `needle` (its lines are read by a thread of their own, so a line
    /// written before an answer may arrive after it), or as it is after ten seconds.
    pub fn log_with(&self, needle: &str) -> String {
        for _ in 0..500 {
            let log = self.log_text();
            if log.contains(needle) {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.log_text()
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGKILL: nothing gets a chance to flush.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `peergate serve` on a policy file written from a [`super::policy::PolicyEdit`], in a fresh
/// directory, with peers added through the CLI first.
pub struct ServedPolicy {
    pub dir: tempfile::TempDir,
    pub data: std::path::PathBuf,
    pub server: ServeProcess,
    /// The tokens of the peers, in the order they were named.
    pub tokens: Vec<String>,
}

impl ServedPolicy {
    /// Sends the server `SIGHUP` (a policy reload).
    pub fn hang_up(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Serves `policy` with `peers` added and `env` in the server's environment.
    pub fn start(policy: &super::policy::PolicyEdit, peers: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let policy_path = dir.path().join("policy.toml");
        std::fs::write(&policy_path, policy.text()).unwrap();
        let data = dir.path().join("data");
        let tokens = peers
            .iter()
            .map(|peer| super::cli::add_peer(&data, peer))
            .collect();
        let server = ServeProcess::start_with(
            dir.path(),
            &data,
            &["--policy", policy_path.to_str().unwrap()],
            env,
        );
        Self {
            dir,
            data,
            server,
            tokens,
        }
    }
}

/// The resident size of process `pid`, in MiB, from `/proc`.
pub fn resident_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib / 1024
}

/// `--grpc-listen 127.0.0.1:0` when the policy among `args` serves gRPC, so tests never fight
/// over its port.
fn grpc_listen(cwd: &Path, args: &[&str]) -> Vec<&'static str> {
    let policy = args
        .iter()
        .position(|arg| *arg == "--policy")
        .and_then(|at| args.get(at + 1))
        .and_then(|path| std::fs::read_to_string(cwd.join(path)).ok());
    match policy {
        Some(text) if text.lines().any(|line| line.trim() == "[grpc]") => {
            vec!["--grpc-listen", "127.0.0.1:0"]
        }
        _ => Vec::new(),
    }
}
