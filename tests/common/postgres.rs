//! A throwaway PostgreSQL cluster for the tests, started from Debian's `postgresql` package:
//! one per test binary, on a free loopback port, in a temporary directory, with one database
//! per test data directory. It stops, and its directory goes, when the test binary exits. No
//! system service is used.
//!
//! Without the package the tests that need it say so in one loud line and skip, except under
//! `CI=true`, where they fail (`.ci/run` installs the package).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The cluster of this test binary, if PostgreSQL is installed.
pub struct Cluster {
    port: u16,
    /// Where the server writes its log (statements only of databases that ask for them).
    log: PathBuf,
    /// The watchdog shell that owns the server; it ends with this test binary.
    _server: std::process::Child,
    _dir: tempfile::TempDir,
}

fn binaries() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists() && bin.join("postgres").exists())
        .collect();
    found.sort();
    found.pop()
}

/// The cluster, started on first use; `None` (after one loud line) when PostgreSQL is not
/// installed outside CI.
pub fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| match binaries() {
            Some(bin) => Some(Cluster::start(&bin)),
            None if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("PostgreSQL is not installed (Debian package postgresql); CI must have it")
            }
            None => {
                super::skipped("PostgreSQL is not installed (apt-get install postgresql); the PostgreSQL store is not tested");
                None
            }
        })
        .as_ref()
}

/// Runs a PostgreSQL program as the `postgres` user when the tests run as root (PostgreSQL
/// refuses to run as root).
fn as_postgres(program: &Path) -> Command {
    let root = std::env::var("USER").is_ok_and(|u| u == "root")
        || Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// A free port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    fn start(bin: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("peergate-pg-")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        let _ = Command::new("chown")
            .args(["postgres:postgres", dir.path().to_str().unwrap()])
            .status();
        let init = as_postgres(&bin.join("initdb"))
            .args([
                "-D",
                data.to_str().unwrap(),
                "--auth=trust",
                "--username=postgres",
            ])
            .args(["-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run initdb");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = free_port();
        // The server goes when this test binary goes: a watchdog shell stops it and then
        // removes the cluster's directory (a static is never dropped, so `TempDir` cannot).
        let server = format!(
            "{postgres} -D {data} -k {socket} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=400 2>>{socket}/server.log & pg=$!; \
             while [ -d /proc/{parent} ]; do sleep 0.5; done; kill -INT $pg; wait $pg; rm -rf {socket}",
            postgres = bin.join("postgres").display(),
            data = data.display(),
            socket = dir.path().display(),
            parent = std::process::id(),
        );
        let server = as_postgres(Path::new("/bin/sh"))
            .args(["-c", &server])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "postgres did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Accepting connections is not yet accepting queries.
        std::thread::sleep(Duration::from_millis(300));
        Self {
            port,
            log: dir.path().join("server.log"),
            _server: server,
            _dir: dir,
        }
    }

    /// Makes the server log every statement run on the database at `url` (with its
    /// parameters), from the next session on.
    pub fn log_statements_of(&self, url: &str) {
        let name = url.rsplit('/').next().unwrap();
        self.run_sql(&format!("ALTER DATABASE {name} SET log_statement = 'all'"));
    }

    /// Runs `sql` as the superuser, in the cluster's own database.
    fn run_sql(&self, sql: &str) {
        let admin = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        let out = Command::new("psql")
            .args([admin.as_str(), "-q", "-c", sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Makes the database at `url` refuse new connections and ends its open ones, as a store
    /// that went away would.
    pub fn cut_off(&self, url: &str) {
        let name = url.rsplit('/').next().unwrap();
        self.run_sql(&format!(
            "ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false"
        ));
        self.run_sql(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ));
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// A database of its own for the test whose data directory is `data` (made on first use).
    pub fn database_for(&self, data: &Path) -> String {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut hasher);
        let name = format!("t{:016x}", hasher.finish());
        let create = format!("CREATE DATABASE {name}");
        let admin = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new("psql")
                .args([admin.as_str(), "-q", "-c", create.as_str()])
                .output()
                .expect("run psql");
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.success() || stderr.contains("already exists") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "CREATE DATABASE failed: {stderr}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}
