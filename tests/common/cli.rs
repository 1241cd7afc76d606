//! Running the built `peergate` binary as a command.

use super::store::store_args;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The built `peergate` binary.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_peergate")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the CLI; returns (status code, stdout, stderr).
pub fn cli(args: &[&str]) -> (i32, String, String) {
    cli_in(&repo_root(), args)
}

/// Runs the CLI in `cwd`.
pub fn cli_in(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    cli_with_env(cwd, args, &[])
}

/// A private key made by `peergate keys generate` in `dir` (`KID.pem`); its path.
pub fn generated_key(dir: &Path, alg: &str, kid: &str) -> String {
    let out = dir.join(format!("{kid}.pem"));
    let out = out.to_str().unwrap().to_owned();
    let (code, _, stderr) = cli(&[
        "keys", "generate", "--alg", alg, "--kid", kid, "--out", &out,
    ]);
    assert_eq!(code, 0, "{stderr}");
    out
}

/// `peergate receipt verify` of the `task` and `request` files against `card` and the key set
/// `jwks` (files or URLs), with `extra` arguments.
pub fn verify_receipt(
    (task, request): (&str, &str),
    (card, jwks): (&str, &str),
    extra: &[&str],
) -> (i32, String, String) {
    let mut args = vec![
        "receipt",
        "verify",
        "--task",
        task,
        "--request",
        request,
        "--card",
        card,
        "--jwks",
        jwks,
    ];
    args.extend_from_slice(extra);
    cli(&args)
}

/// `peergate receipt verify` of the receipt in `task` (as received) for `request` (as sent),
/// against the card and key set served at `base` over loopback HTTP.
pub fn verify_served_receipt(
    base: &str,
    (task, request): (&serde_json::Value, &serde_json::Value),
    extra: &[&str],
) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, value: &serde_json::Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, value.to_string()).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (task, request) = (write("task.json", task), write("request.json", request));
    let (card, jwks) = (
        format!("{base}/.well-known/agent-card.json"),
        format!("{base}/.well-known/jwks.json"),
    );
    let mut extra = extra.to_vec();
    extra.push("--dangerous-allow-http-loopback");
    verify_receipt((&task, &request), (&card, &jwks), &extra)
}

/// Runs the CLI in `cwd` with `env` in its environment.
pub fn cli_with_env(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    // Nothing kept by one run (a key set, a token) is read by another test's.
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(args)
        .current_dir(cwd)
        .env("XDG_CACHE_HOME", cache.path())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run peergate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the CLI on the store under `data` (the suite's engine).
pub fn cli_on(data: &Path, args: &[&str]) -> (i32, String, String) {
    let store = store_args(data);
    let mut args = args.to_vec();
    args.extend(store.iter().map(String::as_str));
    cli(&args)
}

/// Runs the CLI with `input` on standard input.
pub fn cli_with_stdin(args: &[&str], input: &str) -> (i32, String, String) {
    use std::io::Write;
    let cache = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .args(args)
        .env("XDG_CACHE_HOME", cache.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run peergate");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the CLI on the store under `data` with `input` on standard input.
pub fn cli_with_stdin_on(data: &Path, args: &[&str], input: &str) -> (i32, String, String) {
    let store = store_args(data);
    let mut args = args.to_vec();
    args.extend(store.iter().map(String::as_str));
    cli_with_stdin(&args, input)
}

/// Adds a peer through the real CLI to the store under `data` and returns its token.
pub fn add_peer(data: &Path, name: &str) -> String {
    let (code, stdout, stderr) = cli_on(data, &["peer", "add", name]);
    assert_eq!(code, 0, "peer add failed: {stderr}");
    stdout.trim_end_matches('\n').to_owned()
}
