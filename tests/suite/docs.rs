//! What a newcomer reads, checked so it cannot drift: the README short and in the order of a
//! first day, a table of contents in every file under `docs/` that leads to its headings, and
//! a command table that names every command and every flag the binary has.

use crate::common::*;
use clap::CommandFactory as _;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap()
}

#[test]
fn the_readme_is_short_and_in_the_order_of_a_first_day() {
    let readme = read("README.md");
    assert!(readme.len() < 15 * 1024, "{} bytes", readme.len());
    let mut at = 0;
    for section in [
        "## Try it",
        "## Put it in front of your model or agent",
        "## Add partners",
        "## Run several instances",
        "## Operate it",
        "## Read on",
    ] {
        let found = readme[at..]
            .find(&format!("\n{section}\n"))
            .unwrap_or_else(|| panic!("{section} missing, or out of order"));
        at += found + 1;
    }
    // The second command is the one CI runs, after the formatting and clippy checks and
    // nothing else of cargo's.
    let ci = read(".ci/run");
    let test_command = ci.lines().last().unwrap();
    assert!(test_command.starts_with("cargo test"), "{test_command}");
    let checks: Vec<&str> = ci
        .lines()
        .filter(|line| line.starts_with("cargo "))
        .collect();
    let (last, before) = checks.split_last().unwrap();
    assert_eq!(*last, test_command);
    for check in before {
        assert!(
            check.starts_with("cargo fmt --check") || check.starts_with("cargo clippy "),
            ".ci/run runs {check:?} besides the README's command"
        );
    }
    let try_it = &readme[readme.find("## Try it").unwrap()..];
    let block: Vec<&str> = try_it.lines().skip(3).take(2).collect();
    assert_eq!(
        block[0].split('#').next().unwrap().trim(),
        "cargo run -- serve"
    );
    assert_eq!(block[1], test_command);
}

/// What `.ci/run` installs for the tests, the README tells a newcomer to install (a package
/// another one brings, as python3-venv brings python3, may go unnamed).
#[test]
fn the_readme_names_every_package_ci_installs_for_the_tests() {
    let readme = read("README.md");
    let named: Vec<&str> = readme
        .lines()
        .find(|line| line.starts_with("sudo apt-get install -y "))
        .expect("the README's package line")
        .split_whitespace()
        .skip(4)
        .collect();
    let ci = read(".ci/run");
    let installed = ci
        .lines()
        .filter_map(|line| line.trim().strip_prefix("apt-get install -y -qq "))
        .flat_map(|line| {
            line.split_whitespace()
                .take_while(|word| *word != ">/dev/null")
        })
        .collect::<Vec<_>>();
    assert!(!installed.is_empty(), "no apt-get line read in .ci/run");
    for package in installed {
        assert!(
            named.iter().any(|name| name.starts_with(package)),
            ".ci/run installs {package}, which the README does not name"
        );
    }
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped except `-` and
/// `_`, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_docs_file_has_contents_that_lead_to_its_headings() {
    let mut files: Vec<_> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let (before, after) = text
            .split_once("**Contents**\n\n")
            .unwrap_or_else(|| panic!("{name} has no table of contents"));
        assert!(
            !before
                .lines()
                .any(|line| line.trim_start().starts_with("- [")),
            "{name}: a list of links before its contents"
        );
        let listed: Vec<&str> = after
            .lines()
            .take_while(|line| line.trim_start().starts_with("- ["))
            .filter_map(|line| line.split_once("](#")?.1.strip_suffix(')'))
            .collect();
        let mut fenced = false;
        let headings: Vec<String> = text
            .lines()
            .filter(|line| {
                if line.starts_with("```") {
                    fenced = !fenced;
                }
                !fenced && line.starts_with("## ")
            })
            .map(|line| anchor(&line[3..]))
            .collect();
        assert!(
            headings.len() >= 2,
            "{name}: too few sections to need contents"
        );
        for heading in &headings {
            assert!(
                listed.contains(&heading.as_str()),
                "{name}: {heading} is not in its contents"
            );
        }
        let all: Vec<String> = text
            .lines()
            .filter(|line| line.starts_with("## ") || line.starts_with("### "))
            .map(|line| anchor(line.trim_start_matches('#')))
            .collect();
        for link in &listed {
            assert!(
                all.iter().any(|a| a == link),
                "{name}: #{link} leads nowhere"
            );
        }
    }
}

/// Every leaf command of `command`, with its path from `peergate`.
fn leaves(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
    let path = format!("{path} {}", command.get_name());
    let subcommands: Vec<_> = command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help")
        .collect();
    if subcommands.is_empty() {
        out.push((path.trim_start().to_owned(), command.clone()));
    }
    for sub in subcommands {
        leaves(sub, &path, out);
    }
}

#[test]
fn the_command_table_names_every_command_and_every_flag() {
    let docs = read("docs/administration.md");
    let section = &docs[docs.find("## Command line").unwrap()..];
    let rows: Vec<&str> = section
        .lines()
        .filter(|line| line.starts_with("| `peergate "))
        .collect();
    // Said once for every command, in the section's first paragraph.
    let everywhere = ["data", "store", "log-format", "help", "version"];
    for flag in ["--data", "--store", "--log-format"] {
        assert!(section.contains(flag), "{flag} is not explained");
    }
    let mut commands = Vec::new();
    leaves(&peergate::cli::Cli::command(), "", &mut commands);
    assert!(commands.len() > 30, "{}", commands.len());
    let mut missing = Vec::new();
    for (path, command) in &commands {
        let usage = path.replacen("peergate", "`peergate", 1);
        let mine: Vec<&&str> = rows
            .iter()
            .filter(|row| {
                row[2..].starts_with(&usage) && row[2 + usage.len()..].starts_with([' ', '`', '\\'])
            })
            .collect();
        if mine.is_empty() {
            missing.push(format!("{path}: no row"));
            continue;
        }
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if arg.is_hide_set() || everywhere.contains(&long) {
                continue;
            }
            if !mine.iter().any(|row| row.contains(&format!("--{long}"))) {
                missing.push(format!("{path}: --{long}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in the command table:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readmes_peergate_commands_are_ones_the_binary_takes() {
    use clap::Parser as _;
    let readme = read("README.md");
    let mut checked = 0;
    let mut in_shell = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_shell = line == "```sh";
            continue;
        }
        if !in_shell {
            continue;
        }
        let line = line.split(" #").next().unwrap();
        for command in line.split(" ; ").flat_map(|part| part.split(" && ")) {
            let command = command.trim();
            let command = match command
                .strip_prefix("cargo run -q -- ")
                .or_else(|| command.strip_prefix("cargo run -- "))
            {
                Some(rest) => format!("peergate {rest}"),
                None => command.to_owned(),
            };
            // Only plain words: what the shell would change is left to the shell.
            if !command.starts_with("peergate ")
                || command.contains(['$', '"', '\'', '\\', '(', ')', '<', '>', '|'])
            {
                continue;
            }
            let words: Vec<&str> = command.split_whitespace().collect();
            if let Err(e) = peergate::cli::Cli::try_parse_from(&words) {
                panic!("{command}: {e}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "{checked}");
}

/// The README's identity-provider path, copied as it is and run on this machine against a real
/// OpenID Provider (panva's `oidc-provider`) on loopback: the policy, `peer add`, `serve`, and
/// `call` with the client's own credentials. Only the ports change (the provider's and the
/// door's, free ones), and the admin API takes any free port.
#[test]
fn the_readme_identity_provider_path_runs_as_written_on_loopback() {
    let readme = read("README.md");
    let block = |after: &str, fence: &str| -> String {
        let from = readme
            .find(after)
            .unwrap_or_else(|| panic!("{after:?} missing"))
            + after.len();
        let start = readme[from..].find(fence).unwrap() + from + fence.len();
        let end = readme[start..].find("```").unwrap() + start;
        readme[start..end].to_owned()
    };
    let policy = block("in `idp.toml`:", "```toml\n");
    let commands = block("it calls with its own token:", "```sh\n");

    let door = format!("127.0.0.1:{}", crate::common::postgres::free_port());
    let key = TestKey::new("readme-1", 91);
    let clients = [("acme-agent", "acme-secret", "a2a:message a2a:tasks:read")];
    let audience = format!("http://{door}/a2a/v1");
    let Some(idp) = TestIdp::start(&audience, &clients, &[&key], 0) else {
        return;
    };
    let ports = |text: &str| {
        text.replace("http://127.0.0.1:9000", &idp.issuer)
            .replace("127.0.0.1:8080", &door)
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("idp.toml"), ports(&policy)).unwrap();
    // One command a line (continuations joined), comments dropped, the binary under test.
    let lines: Vec<String> = ports(&commands)
        .replace("\\\n", " ")
        .lines()
        .map(|line| line.split(" # ").next().unwrap().trim().to_owned())
        .map(|line| line.replace("cargo run -q --", bin()))
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let run = |line: &str| {
        std::process::Command::new("bash")
            .args(["-c", line])
            .current_dir(dir.path())
            .env("ACME_SECRET", "acme-secret")
            .env("XDG_CACHE_HOME", dir.path())
            .output()
            .unwrap()
    };
    let added = run(&lines[0]);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let serve: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(serve[..2], [bin(), "serve"], "{serve:?}");
    let _server = ServeProcess::start_listening_on(dir.path(), &door, &serve[2..], &[]);
    // The server is a process of its own: the test may wait on the call in its thread.
    let called = run(&lines[2]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&called.stdout),
        String::from_utf8_lossy(&called.stderr),
    );
    assert_eq!(called.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("Hello"), "{stdout}");
}
