//! A throwaway Redis server for a test, from Debian's `redis-server` package, on a free
//! loopback port, keeping nothing on disk. It stops with the test (or the test binary).
//!
//! Without the package the test says so in one loud line and skips, except under `CI=true`,
//! where it fails (`.ci/run` installs the package).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Redis server of one test.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one; `None` (after one loud line) when Redis is not installed outside CI.
    pub fn start() -> Option<Self> {
        let installed = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("Redis is not installed (Debian package redis-server); CI must have it");
            }
            super::skipped(
                "Redis is not installed (apt-get install redis-server); the Redis engines are not tested",
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = Self { port, child: None };
        server.restart();
        Some(server)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server (its data goes with it).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the server keeps its connections and answers nothing (a hung Redis, not one
    /// that refuses).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`RedisServer::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Starts the server again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl RedisServer {
    /// Sends one inline command (`SCRIPT FLUSH`); the first line of the answer.
    pub fn command(&self, command: &str) -> String {
        use std::io::{BufRead, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .write_all(format!("{command}\r\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        std::io::BufReader::new(stream)
            .read_line(&mut answer)
            .unwrap();
        answer.trim().to_owned()
    }

    /// Starts watching every command the server runs (`MONITOR`), until [`Monitor::stop`].
    pub fn monitor(&self) -> Monitor {
        use std::io::{BufRead, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim(), "+OK", "MONITOR");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = lines.clone();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { break };
                seen.lock()
                    .unwrap()
                    .push(line.trim_start_matches('+').to_owned());
            }
        });
        Monitor { stream, lines }
    }
}

/// The commands a Redis server ran while watched, one line each as `MONITOR` prints them
/// (`<time> [<db> <client>] "COMMAND" "arg" ...`; a script's own commands show `lua` as the
/// client).
pub struct Monitor {
    stream: std::net::TcpStream,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Monitor {
    /// Stops watching; the lines seen.
    pub fn stop(self) -> Vec<String> {
        // What the server sent before this point is read before the socket closes.
        std::thread::sleep(Duration::from_millis(100));
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
