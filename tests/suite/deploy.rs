//! The deployment artefacts in `deploy/`, checked by the tools that run them: the systemd unit
//! by `systemd-analyze` (syntax, the binary it starts, and its exposure score), the proxy
//! example by `nginx -t`. Without a tool the test says so in one loud line and skips, except
//! under `CI=true`, where `.ci/run` installs them.

use crate::common::*;
use std::process::Command;

/// Whether `tool` runs; under CI its absence fails the test.
fn available(tool: &str, package: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success() || !o.stderr.is_empty());
    if !found {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{tool} is not installed (Debian package {package}); CI must have it"
        );
        skipped(&format!(
            "{tool} is not installed (Debian package {package})"
        ));
    }
    found
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    if !available("systemd-analyze", "systemd") {
        return;
    }
    // The unit as shipped, with ExecStart pointing at the binary under test (verify checks
    // that the command it names exists and is executable).
    let dir = tempfile::tempdir().unwrap();
    let shipped = std::fs::read_to_string(repo_root().join("deploy/peergate.service")).unwrap();
    assert!(shipped.contains("ExecStart=/usr/local/bin/peergate serve"));
    let unit = dir.path().join("peergate.service");
    std::fs::write(&unit, shipped.replace("/usr/local/bin/peergate", bin())).unwrap();
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success(), "{complaints}");
    // Unknown keys are only warnings to verify: a misspelt hardening key would be ignored.
    assert!(complaints.trim().is_empty(), "{complaints}");
    for setting in [
        "DynamicUser=yes",
        "StateDirectory=peergate",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
    ] {
        assert!(shipped.contains(setting), "{setting} is missing");
    }
    // `systemctl reload` reloads the policy.
    assert!(shipped.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    // systemd's own measure of what the service could do if taken over: "OK" is below 2.0.
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = report
        .lines()
        .find_map(|line| {
            line.split("Overall exposure level for peergate.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in {report}"));
    assert!(exposure <= 2.0, "exposure {exposure}:\n{report}");
}

/// nginx in the foreground on a configuration of its own; stopped when dropped.
struct Nginx(std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, not SIGKILL: the master stops its workers, which would otherwise outlive it.
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_the_nginx_example_the_card_and_the_client_address_are_right() {
    if !available("nginx", "nginx-light") {
        return;
    }
    // nginx opens its compiled-in log and temporary paths before it reads a configuration.
    let uid = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI runs as root"
        );
        skipped("running nginx for the proxy example needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = repo_root();
    // peergate on the example's policy (its listen address moved to a free port), logging each
    // request so the address it counted is visible.
    let policy = std::fs::read_to_string(root.join("deploy/policy-behind-proxy.toml")).unwrap();
    let policy_path = dir.path().join("policy.toml");
    std::fs::write(&policy_path, format!("{policy}\n[log]\naccess = true\n")).unwrap();
    let data = dir.path().join("data");
    let server = ServeProcess::start_with(
        dir.path(),
        &data,
        &["--policy", policy_path.to_str().unwrap()],
        &[],
    );
    // nginx on the example's server block: its port, certificate and upstream moved to the
    // test's, nothing else changed.
    let port = crate::common::postgres::free_port();
    let tls = root.join("tests/data/tls");
    let site = std::fs::read_to_string(root.join("deploy/nginx.conf"))
        .unwrap()
        .replace("listen [::]:443 ssl http2;\n", "")
        .replace("listen 443 ssl", &format!("listen 127.0.0.1:{port} ssl"))
        .replace(
            "/etc/ssl/certs/gateway.example.com.pem",
            tls.join("server.pem").to_str().unwrap(),
        )
        .replace(
            "/etc/ssl/private/gateway.example.com.key",
            tls.join("server.key").to_str().unwrap(),
        )
        .replace("127.0.0.1:8080", &server.addr.to_string());
    let site_path = dir.path().join("site.conf");
    std::fs::write(&site_path, site).unwrap();
    let prefix = dir.path().display();
    let main = format!(
        "daemon off;\nuser root;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\n\
         events {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {prefix}/body;\n  \
         proxy_temp_path {prefix}/proxy;\n  include {};\n}}\n",
        site_path.display()
    );
    let main_path = dir.path().join("nginx.conf");
    std::fs::write(&main_path, main).unwrap();
    let check = Command::new("nginx")
        .args(["-t", "-p"])
        .arg(dir.path())
        .arg("-c")
        .arg(&main_path)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let _nginx = Nginx(
        Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&main_path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "nginx did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A client on 127.0.0.3, over TLS through nginx.
    let ca = reqwest::Certificate::from_pem(&std::fs::read(test_ca_path()).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(ca)
        .local_address(std::net::IpAddr::from([127, 0, 0, 3]))
        .build()
        .unwrap();
    let card: serde_json::Value = client
        .get(format!(
            "https://localhost:{port}/.well-known/agent-card.json"
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The card advertises the public address, not the one peergate listens on.
    let url = card["supportedInterfaces"][0]["url"].as_str().unwrap();
    assert!(url.starts_with("https://gateway.example.com/"), "{card}");
    // The address a client is counted as is the one nginx saw, whatever it claims itself.
    let forged = client
        .get(format!("https://localhost:{port}/.well-known/jwks.json"))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 200);
    let log = server.log_with("route=\"jwks\"");
    let access: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("peergate::access"))
        .collect();
    assert_eq!(access.len(), 2, "{log}");
    for line in access {
        assert!(line.contains("client=127.0.0.3"), "{line}");
    }
}

#[test]
fn the_images_health_check_passes_while_the_door_is_ready_and_fails_when_it_is_gone() {
    // The HEALTHCHECK's command, as Docker would run it (bash is in the image; curl is not),
    // pointed at a served instance's port instead of the image's 8080.
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let argv = dockerfile
        .split("HEALTHCHECK")
        .nth(1)
        .and_then(|rest| rest.split("CMD ").nth(1))
        .and_then(|rest| rest.lines().next())
        .expect("a HEALTHCHECK with a CMD");
    let argv: Vec<String> = serde_json::from_str(argv).expect("CMD in exec form");
    assert_eq!(argv[..2], ["bash", "-c"]);
    let dir = tempfile::tempdir().unwrap();
    let server = ServeProcess::start(dir.path(), &dir.path().join("data"));
    let script = argv[2].replace("/8080", &format!("/{}", server.addr.port()));
    let check = || Command::new("bash").args(["-c", &script]).status().unwrap();
    assert!(check().success(), "unhealthy while ready: {script}");
    server.kill();
    assert!(!check().success(), "healthy with nothing listening");
}

#[test]
fn the_compose_example_is_valid_and_its_policy_passes_the_cluster_check() {
    if !available("docker-compose", "docker-compose") {
        return;
    }
    // Checked where it is shipped, with the files it mounts (empty ones will do for `config`).
    let shipped = repo_root().join("deploy/docker-compose.yml");
    let dir = tempfile::tempdir().unwrap();
    let compose = dir.path().join("docker-compose.yml");
    std::fs::copy(&shipped, &compose).unwrap();
    let config = |env: &[(&str, &str)]| {
        Command::new("docker-compose")
            .args(["--file", compose.to_str().unwrap(), "config"])
            .env_remove("POSTGRES_PASSWORD")
            .env_remove("PEERGATE_METRICS_TOKEN")
            .env_remove("PEERGATE_PUBLIC_BASE_URL")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let env = [
        ("POSTGRES_PASSWORD", "a-test-password"),
        (
            "PEERGATE_METRICS_TOKEN",
            "a-scrape-token-of-at-least-32-bytes!!",
        ),
        ("PEERGATE_PUBLIC_BASE_URL", "https://agents.example.com"),
    ];
    let output = config(&env);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Two instances on the one store and the one Redis, started once both are healthy.
    for instance in ["peergate-1:", "peergate-2:"] {
        assert!(text.contains(instance), "{text}");
    }
    assert_eq!(
        text.matches(
            "PEERGATE_STORE_URL: postgres://peergate:a-test-password@postgres:5432/peergate"
        )
        .count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.matches("PEERGATE_REDIS_URL: redis://redis:6379/0")
            .count(),
        2
    );
    assert_eq!(text.matches("condition: service_healthy").count(), 4);
    // Only the instances publish ports, the door and the metrics listener each, and only on
    // the host's loopback.
    let published: Vec<&str> = text
        .lines()
        .filter(|line| line.trim_start().starts_with("- ") && line.ends_with("/tcp"))
        .collect();
    assert_eq!(published.len(), 4, "{text}");
    assert!(
        published.iter().all(|line| line.contains("127.0.0.1:")),
        "{published:?}"
    );
    // A missing secret stops it, by name.
    let output = config(&env[1..]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("POSTGRES_PASSWORD"));

    // The policy its comment gives, with the key it says to make, passes the cluster check.
    let shipped = std::fs::read_to_string(&shipped).unwrap();
    let policy: String = shipped
        .lines()
        .skip_while(|line| line.trim() != "#   [server]")
        .take_while(|line| line.starts_with("#   "))
        .map(|line| {
            let line = line.trim_start_matches("#   ");
            let line = line.split("   #").next().unwrap();
            format!("{line}\n")
        })
        .collect();
    assert!(policy.contains("[[signing.keys]]"), "{policy}");
    let key = dir.path().join("card-signing.pem");
    let (code, _, stderr) = cli(&[
        "keys",
        "generate",
        "--alg",
        "EdDSA",
        "--kid",
        "card-1",
        "--out",
        key.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let policy_file = dir.path().join("policy.toml");
    std::fs::write(
        &policy_file,
        policy.replace("/etc/peergate/card-signing.pem", key.to_str().unwrap()),
    )
    .unwrap();
    let output = Command::new(bin())
        .args(["policy", "check", "--cluster", "--policy"])
        .arg(&policy_file)
        .env("PEERGATE_PUBLIC_BASE_URL", "https://agents.example.com")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{policy}\n{stderr}");
    assert!(
        !stderr.contains("missing for several instances"),
        "{stderr}"
    );
}
