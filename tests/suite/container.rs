//! The release image, built from the `Dockerfile` and run by a Docker daemon the test starts for
//! itself: its own socket, data root and exec root in a temporary directory, a configuration
//! file of its own, no iptables rules, no default bridge and no IP forwarding, so that nothing of
//! the host's changes and a daemon already running is not disturbed. No image registry is
//! needed: the base the Dockerfile's runtime stage names is made from Debian's packages with
//! debootstrap and `docker import`ed under that name; the runtime stage is built as it stands
//! (the classic builder, which builds the stages before its target and pulls nothing they do not
//! name), and run with the binary under test mounted where the image's last stage copies the
//! release one.
//!
//! Cost: the first run downloads a minimal Debian (`--variant=minbase`, about 35 MB from the
//! mirror) and unpacks it, about 30 s on two cores, then keeps it as a tarball under `target/`
//! (130 MB); later runs import that (a few seconds), build the stage (seconds: nothing to
//! install) and wait for the health check's first probe (10 s). About a minute cold and 20 s
//! warm in all.
//!
//! Without root, or without dockerd, docker or debootstrap, the test skips and says why; under
//! CI (`CI=true`) that is a failure, since CI runs as root and `.ci/run` installs docker.io and
//! debootstrap. A daemon that is installed but cannot start, or once started cannot unpack an
//! image, make a bridge or start a container, is another matter: an unprivileged container (the
//! Dockerfile's own build stage, which runs `.ci/run`, is one) lacks the capabilities, and no
//! package changes that. The test then says so in one loud line, under CI too, and passes:
//! failing would make the README's test command fail wherever it runs in such a container. So
//! does a binary under test linked against a newer glibc than the image's Debian release has
//! (built on a later Debian): it cannot run in the image, whatever the image is worth.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The mirror debootstrap downloads from: Debian's own redirector, its default and apt's.
const MIRROR: &str = "http://deb.debian.org/debian";
/// The tag the test gives the image it builds.
const IMAGE: &str = "peergate-under-test";
/// The network the container runs on, made by the probe of the daemon.
const NETWORK: &str = "peergate-test";
/// The URL the container's card advertises: a door on every address refuses to start without.
const PUBLIC_URL: &str = "https://agents.example.com";

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Writes a line that `cargo test` shows even for a passing test, as `skipped` does, but
/// without failing under CI: for what the machine cannot do rather than what it lacks.
fn cannot_run_here(why: &str) {
    use std::io::Write;
    let under_ci = if ci() { " (under CI too)" } else { "" };
    let _ = writeln!(std::io::stderr(), "SKIPPED{under_ci}: {why}");
}

/// Root, and the tools the test runs; a missing one skips (under CI, fails).
fn prerequisites() -> bool {
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        skipped("a Docker daemon of the test's own and debootstrap need root");
        return false;
    }
    for (tool, package) in [
        ("dockerd", "docker.io"),
        ("docker", "docker.io"),
        ("debootstrap", "debootstrap"),
    ] {
        let found = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            skipped(&format!(
                "{tool} is not installed (Debian package {package})"
            ));
            return false;
        }
    }
    true
}

/// A dockerd of the test's own; on drop its containers and networks are removed, it is
/// stopped, and whatever it left mounted under its directory is unmounted before the directory
/// goes.
struct Daemon {
    child: std::process::Child,
    host: String,
    dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts it and waits until it answers and passes the probe; the error says why not.
    fn start() -> Result<Daemon, String> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // The host's /etc/docker/daemon.json must not apply, and the daemon's key goes here
        // rather than to /etc/docker.
        let config = serde_json::json!({ "deprecated-key-path": root.join("key.json") });
        std::fs::write(root.join("daemon.json"), config.to_string()).unwrap();
        let log = std::fs::File::create(root.join("dockerd.log")).unwrap();
        let host = format!("unix://{}", root.join("docker.sock").display());
        let child = Command::new("dockerd")
            .arg("--config-file")
            .arg(root.join("daemon.json"))
            .arg("--data-root")
            .arg(root.join("data"))
            .arg("--exec-root")
            .arg(root.join("exec"))
            .arg("--pidfile")
            .arg(root.join("dockerd.pid"))
            .args(["-H", &host])
            // No docker0, no rules in the host's firewall, no change to its forwarding: the
            // test's own network is a bridge it removes, and a published port is served by
            // docker-proxy on loopback, which needs none of them.
            .args(["--bridge=none", "--iptables=false", "--ip-forward=false"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("dockerd cannot be run: {e}"))?;
        let mut daemon = Daemon { child, host, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!(
                    "dockerd cannot start here ({status}): {}",
                    daemon.log_tail()
                ));
            }
            if daemon.docker(&["version"]).status.success() {
                return daemon.probe().map(|()| daemon);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "dockerd did not answer within 60 s: {}",
                    daemon.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether this daemon can do what the test needs of it: a daemon that answers may still
    /// be unable to unpack an image, make a bridge or start a container (without the
    /// capabilities an unprivileged container lacks). Leaves the network the test runs on.
    fn probe(&self) -> Result<(), String> {
        let empty = self.dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let tarball = self.dir.path().join("empty.tar");
        let tar = Command::new("tar")
            .arg("-C")
            .arg(&empty)
            .arg("-cf")
            .arg(&tarball)
            .arg(".")
            .status()
            .unwrap();
        assert!(tar.success());
        let unable = |what: &str, output: Output| {
            Err(format!(
                "dockerd started but cannot {what} here: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        };
        let import = self.docker(&["import", tarball.to_str().unwrap(), "empty"]);
        if !import.status.success() {
            return unable("unpack an image", import);
        }
        let network = self.docker(&["network", "create", NETWORK]);
        if !network.status.success() {
            return unable("make a network", network);
        }
        // An image with nothing to run: the container is made, its namespaces, mounts and
        // cgroup too, and only then does the command fail, as not found (127: a daemon error
        // is 125).
        let run = self.docker(&["run", "--rm", "--network", NETWORK, "empty", "/none"]);
        if run.status.code() != Some(127) {
            return unable("start a container", run);
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// The client on this daemon only: not the host's DOCKER_HOST, context or client
    /// configuration. The classic builder, as the client here has no BuildKit plugin: the stage
    /// must build with it, and it is the one that builds every stage before the target.
    fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .args(["-H", &self.host])
            .args(args)
            .env_remove("DOCKER_HOST")
            .env_remove("DOCKER_CONTEXT")
            .env("DOCKER_CONFIG", self.dir.path().join("client"))
            .env("DOCKER_BUILDKIT", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs a docker command that must succeed; its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.docker(args);
        assert!(
            output.status.success(),
            "docker {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let containers = self.docker(&["ps", "--all", "--quiet"]);
        for id in String::from_utf8_lossy(&containers.stdout).split_whitespace() {
            self.docker(&["rm", "--force", "--volumes", id]);
        }
        // A network's bridge is an interface of the host's: removed with the network.
        self.docker(&["network", "prune", "--force"]);
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Deepest first; a daemon stopped in time leaves none.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut under: Vec<&str> = mounts
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| Path::new(point).starts_with(self.dir.path()))
            .collect();
        under.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in under {
            let _ = Command::new("umount").args(["--lazy", point]).status();
        }
    }
}

/// Prints the container's log if the test fails while it exists.
struct LogsOnFailure<'a>(&'a Daemon, &'a str);

impl Drop for LogsOnFailure<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.0.docker(&["logs", self.1]);
            eprintln!(
                "docker logs {}:\n{}{}",
                self.1,
                String::from_utf8_lossy(&logs.stdout),
                String::from_utf8_lossy(&logs.stderr)
            );
        }
    }
}

/// The image the runtime stage starts from, and the Debian release it names
/// (`debian:bookworm-slim` → `bookworm`).
fn runtime_base(dockerfile: &str) -> (String, String) {
    let base = dockerfile
        .lines()
        .find_map(|line| line.strip_prefix("FROM ")?.strip_suffix(" AS runtime"))
        .expect("a stage named runtime");
    let release = base
        .strip_prefix("debian:")
        .and_then(|tag| tag.split('-').next())
        .unwrap_or_else(|| panic!("the runtime stage is not on a Debian image: {base}"));
    (base.to_string(), release.to_string())
}

/// The image's last stage is the runtime stage and the release binary, nothing else: so the
/// runtime stage with the binary under test at the same path is the image.
fn assert_last_stage_adds_only_the_binary(dockerfile: &str) {
    let last = dockerfile.rsplit("\nFROM ").next().unwrap();
    let instructions: Vec<&str> = last
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .collect();
    assert_eq!(
        instructions,
        [
            "runtime",
            "COPY --from=build /src/target/release/peergate /usr/local/bin/peergate"
        ],
        "{last}"
    );
}

/// A minimal Debian `release` with the CA certificates (the runtime stage then installs
/// nothing), as a tarball for `docker import`: made once, kept under target/. bash, grep and
/// coreutils (the health check) and useradd are in minbase already.
fn debian_base(release: &str) -> PathBuf {
    let cached = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("debian-{release}-minbase-ca-certificates.tar"));
    if cached.exists() {
        return cached;
    }
    let work = tempfile::tempdir().unwrap();
    let rootfs = work.path().join("rootfs");
    let output = Command::new("debootstrap")
        .args(["--variant=minbase", "--include=ca-certificates", release])
        .arg(&rootfs)
        .arg(MIRROR)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "debootstrap {release} from {MIRROR}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // As Debian's own images are: no package lists or downloaded packages (80 MB here).
    for emptied in ["var/lib/apt/lists", "var/cache/apt"] {
        std::fs::remove_dir_all(rootfs.join(emptied)).unwrap();
        std::fs::create_dir(rootfs.join(emptied)).unwrap();
    }
    // Written aside and renamed, so that an interrupted run leaves no half a tarball.
    let partial = cached.with_extension("partial");
    let tar = Command::new("tar")
        .arg("--numeric-owner")
        .arg("-C")
        .arg(&rootfs)
        .arg("-cf")
        .arg(&partial)
        .arg(".")
        .status()
        .unwrap();
    assert!(tar.success());
    std::fs::rename(&partial, &cached).unwrap();
    cached
}

/// Builds the runtime stage from a context of the Dockerfile and the one file it copies.
fn build_runtime_stage(daemon: &Daemon) {
    let context = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo_root().join("Dockerfile"),
        context.path().join("Dockerfile"),
    )
    .unwrap();
    std::fs::create_dir(context.path().join("policies")).unwrap();
    std::fs::copy(
        repo_root().join("policies/default.toml"),
        context.path().join("policies/default.toml"),
    )
    .unwrap();
    let context = context.path().to_str().unwrap();
    daemon.ok(&[
        "build", "--quiet", "--target", "runtime", "-t", IMAGE, context,
    ]);
}

/// Whether the binary under test runs on the image's Debian: it is linked against the host's
/// glibc, and one newer than the image's lacks symbols it needs.
fn binary_runs_in_image(daemon: &Daemon, mount: &str) -> Result<(), String> {
    let output = daemon.docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        mount,
        IMAGE,
        "--version",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        Ok(())
    } else if stderr.contains("GLIBC") {
        Err(format!(
            "the binary under test was linked against a newer glibc than the image's Debian \
             has (build it on that release to test the image): {stderr}"
        ))
    } else {
        panic!("peergate --version in the image: {stderr}")
    }
}

/// Polls the health check's verdict until it is healthy; fails on unhealthy or an exit.
fn wait_until_healthy(daemon: &Daemon, container: &str) {
    let format = "{{.State.Status}} {{.State.Health.Status}}";
    // The first probe runs one interval (10 s) after the start; generous for a busy machine.
    for _ in 0..240 {
        let state = daemon.ok(&["inspect", "--format", format, container]);
        match state.trim() {
            "running healthy" => return,
            "running starting" => std::thread::sleep(Duration::from_millis(500)),
            other => panic!(
                "{container} is {other}: {}",
                daemon.ok(&["inspect", "--format", "{{json .State.Health}}", container])
            ),
        }
    }
    panic!("{container} was not healthy within two minutes");
}

/// GET over plain HTTP/1.0: the status line and the body.
fn http_get(port: u16, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// The binary under test, mounted read-only where the image's last stage copies the release one.
fn binary_mount() -> String {
    format!("{}:/usr/local/bin/peergate:ro", bin())
}

/// The runtime stage built on its base, made here; an error if the binary cannot run on it.
fn prepare_image(daemon: &Daemon) -> Result<(), String> {
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    assert_last_stage_adds_only_the_binary(&dockerfile);
    let (base, release) = runtime_base(&dockerfile);
    let tarball = debian_base(&release);
    daemon.ok(&["import", tarball.to_str().unwrap(), &base]);
    build_runtime_stage(daemon);
    binary_runs_in_image(daemon, &binary_mount())
}

/// Runs the image on its defaults (its command, user and health check) with a volume for its
/// data and the one setting start-up requires, on a read-only root with no tmpfs: it needs to
/// write nowhere else.
fn run_on_defaults(daemon: &Daemon, name: &str, port: u16) {
    let published = format!("127.0.0.1:{port}:8080");
    let public = format!("PEERGATE_PUBLIC_BASE_URL={PUBLIC_URL}");
    let binary = binary_mount();
    daemon.ok(&[
        "run",
        "--detach",
        "--name",
        name,
        "--read-only",
        "--network",
        NETWORK,
        "-p",
        &published,
        "-e",
        &public,
        "-v",
        "peergate-data:/var/lib/peergate",
        "-v",
        &binary,
        IMAGE,
    ]);
}

/// The serving process (pid 1) runs as the image's user, every one of its uids not root.
fn assert_runs_as_its_own_user(daemon: &Daemon, name: &str) {
    let user = daemon.ok(&["inspect", "--format", "{{.Config.User}}", name]);
    assert_eq!(user.trim(), "peergate");
    let status = daemon.ok(&["exec", name, "grep", "^Uid:", "/proc/1/status"]);
    let uids: Vec<&str> = status.split_whitespace().skip(1).collect();
    assert_eq!(uids.len(), 4, "{status}");
    assert!(uids.iter().all(|uid| *uid != "0"), "{status}");
}

/// Not even root inside can write to the root file system.
fn assert_root_is_read_only(daemon: &Daemon, name: &str) {
    let touch = daemon.docker(&["exec", "--user", "0", name, "touch", "/written"]);
    let refusal = String::from_utf8_lossy(&touch.stderr);
    assert!(!touch.status.success());
    assert!(refusal.contains("Read-only file system"), "{refusal}");
}

#[test]
fn the_image_serves_on_its_defaults_as_its_own_user_on_a_read_only_root() {
    if !prerequisites() {
        return;
    }
    let daemon = match Daemon::start() {
        Ok(daemon) => daemon,
        Err(why) => return cannot_run_here(&why),
    };
    if let Err(why) = prepare_image(&daemon) {
        return cannot_run_here(&why);
    }
    let port = crate::common::postgres::free_port();
    run_on_defaults(&daemon, "peergate", port);
    let _logs = LogsOnFailure(&daemon, "peergate");

    wait_until_healthy(&daemon, "peergate");
    let (status, body) = http_get(port, "/.well-known/agent-card.json");
    assert!(status.contains(" 200 "), "{status}\n{body}");
    let card: serde_json::Value = serde_json::from_str(&body).unwrap();
    let url = card["supportedInterfaces"][0]["url"].as_str().unwrap();
    assert!(url.starts_with(PUBLIC_URL), "{card}");
    assert_runs_as_its_own_user(&daemon, "peergate");
    assert_root_is_read_only(&daemon, "peergate");

    // The command line beside the server, on the volume, as the Dockerfile's usage says.
    let output = daemon.docker(&[
        "exec",
        "peergate",
        "peergate",
        "peer",
        "add",
        "alice",
        "--data",
        "/var/lib/peergate",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("added peer alice"), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).trim().is_empty());
}
