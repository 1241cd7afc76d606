//! haproxy on loopback in front of peergate instances, from the deployment example
//! `deploy/haproxy.cfg` (checking each one's `/ready`), with its statistics page to read what it
//! decided.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The proxy process; killed when dropped.
pub struct Haproxy {
    child: Child,
    /// Where partners reach the instances through it.
    pub port: u16,
    stats_port: u16,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    /// `deploy/haproxy.cfg` in front of `servers` (its bind and servers replaced, its checks
    /// every 300 ms instead of 2 s); `None` (after one loud line) when haproxy is not installed
    /// outside CI.
    pub fn start(servers: &[SocketAddr]) -> Option<Self> {
        let installed = Command::new("haproxy")
            .arg("-v")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("haproxy is not installed (Debian package haproxy); CI must have it");
            }
            super::skipped(
                "haproxy is not installed (apt-get install haproxy); the load-balancer check is not tested",
            );
            return None;
        }
        let (port, stats_port) = (super::postgres::free_port(), super::postgres::free_port());
        let dir = tempfile::tempdir().unwrap();
        // The deployment example as it is, on loopback: its bind, its servers, and checks every
        // 300 ms instead of 2 s so the test does not wait.
        let example =
            std::fs::read_to_string(super::cli::repo_root().join("deploy/haproxy.cfg")).unwrap();
        let mut config = String::new();
        for line in example.lines() {
            let kept = line.trim_start();
            if kept.starts_with("server ") {
                continue;
            }
            if kept.starts_with("bind ") {
                config.push_str(&format!("  bind 127.0.0.1:{port}\n"));
            } else if kept.starts_with("default-server ") {
                config.push_str("  default-server inter 300ms fall 2 rise 2\n");
            } else {
                config.push_str(line);
                config.push('\n');
            }
            if kept.starts_with("default-server ") {
                for (i, server) in servers.iter().enumerate() {
                    config.push_str(&format!("  server instance{i} {server} check\n"));
                }
            }
        }
        assert!(
            config.contains("option httpchk GET /ready"),
            "deploy/haproxy.cfg checks /ready"
        );
        config.push_str(&format!(
            "listen stats\n  bind 127.0.0.1:{stats_port}\n  stats enable\n  stats uri /stats\n"
        ));
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = Command::new("haproxy")
            .arg("-f")
            .arg(&path)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start haproxy");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", stats_port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Self {
            child,
            port,
            stats_port,
            _dir: dir,
        })
    }

    /// Each server's status as haproxy's checks decided it (`UP`, `DOWN`, …), in order.
    pub async fn states(&self) -> Vec<String> {
        let csv = reqwest::get(format!("http://127.0.0.1:{}/stats;csv", self.stats_port))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap()
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
        let (proxy, server, status) = (column("pxname"), column("svname"), column("status"));
        lines
            .map(|line| line.split(',').collect::<Vec<_>>())
            .filter(|row| row[proxy] == "peergate" && row[server].starts_with("instance"))
            .map(|row| row[status].to_owned())
            .collect()
    }

    /// The servers' statuses once they are `want` (within 15 s).
    pub async fn until(&self, want: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let states = self.states().await;
            if states == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "haproxy's servers stayed {states:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
