//! The command line: `serve`, and `peer add|list|revoke` acting on the same store.

use crate::auth::password::{MIN_PASSWORD_CHARS, hash_password};
use crate::clock::{Clock, SystemClock, rfc3339_millis};
use crate::policy::MAX_RATE_PER_MINUTE;
use crate::policy::Policy;
use crate::server::{GatewayOptions, start};
use crate::store::{PeerRecord, Store};
use crate::token::{self, CredentialKind};
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// peergate: a narrow, well-guarded A2A 1.0 door to your model.
#[derive(Debug, Parser)]
#[command(name = "peergate", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        /// Policy file [default: policies/default.toml, else the embedded copy].
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Address to listen on [default: server.listen from the policy].
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        #[command(flatten)]
        data: DataDir,
    },
    /// Manage partner agents and their tokens.
    #[command(subcommand)]
    Peer(PeerCommand),
    /// Manage the keys that sign the Agent Card.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Check Agent Cards.
    #[command(subcommand)]
    Card(CardCommand),
}

#[derive(Debug, Subcommand)]
enum CardCommand {
    /// Verify a card's signatures with keys you supply; exits 0 and names the kid that verified
    /// only when at least one signature verifies.
    Verify {
        /// The card: an https URL or a file.
        source: String,
        /// An HS256 key as KID=BASE64URL (at least 32 bytes).
        #[arg(long = "secret", value_name = "KID=BASE64URL")]
        secrets: Vec<String>,
        /// A JWKS: an https URL or a file.
        #[arg(long = "jwks", value_name = "FILE|URL")]
        jwks: Vec<String>,
        /// DANGEROUS, for tests and local development only: fetch http:// URLs on loopback.
        #[arg(long)]
        dangerous_allow_http_loopback: bool,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Write a new private key (PKCS#8 PEM, mode 0600) and print its path on stdout.
    Generate {
        /// EdDSA (Ed25519) or ES256 (P-256).
        #[arg(long)]
        alg: String,
        /// The key id to use in the policy: 1 to 64 of letters, digits and ._-
        #[arg(long)]
        kid: String,
        /// Where to write it [default: keys/<kid>.pem].
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum PeerCommand {
    /// Add a peer and print its token, alone, on stdout. The token is shown only this once.
    Add {
        /// Name: 1 to 64 of letters, digits and ._-
        name: String,
        /// Request quota, as N/min [default: peers.default_rate_per_minute from the policy].
        #[arg(long, value_name = "N/min", value_parser = parse_rate)]
        rate: Option<u32>,
        /// Policy file, for the default quota.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        #[command(flatten)]
        data: DataDir,
    },
    /// List peers: name, id, status, limit, created, last used. Never a secret.
    List {
        #[command(flatten)]
        data: DataDir,
    },
    /// Set a peer's request quota, e.g. `peergate peer limit NAME 100/min`.
    Limit {
        /// The peer's name.
        name: String,
        /// The new quota, as N/min.
        #[arg(value_name = "N/min", value_parser = parse_rate)]
        rate: u32,
        #[command(flatten)]
        data: DataDir,
    },
    /// Set the password a peer uses with Basic authentication. Read from standard input (one
    /// line), or asked for when standard input is a terminal; never taken from the command line.
    Password {
        /// The peer's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Issue a new API key for a peer and print it, alone, on stdout. Any earlier key of the
    /// peer stops working.
    Key {
        /// The peer's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Revoke a peer: every token it holds stops working.
    Revoke {
        /// The peer's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
}

#[derive(Debug, Args)]
struct DataDir {
    /// Data directory holding the SQLite store.
    #[arg(long = "data", value_name = "DIR", default_value = "data")]
    dir: PathBuf,
}

/// A failed command: one line for the operator.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        Self(e.to_string())
    }
}

fn parse_rate(value: &str) -> Result<u32, String> {
    let reason = || {
        format!(
            "expected N/min with N from 1 to {MAX_RATE_PER_MINUTE}, e.g. 30/min (got {value:?})"
        )
    };
    let n = value.strip_suffix("/min").ok_or_else(reason)?;
    let n: u32 = n.parse().map_err(|_| reason())?;
    if (1..=MAX_RATE_PER_MINUTE).contains(&n) {
        Ok(n)
    } else {
        Err(reason())
    }
}

fn check_peer_name(name: &str) -> Result<(), CliError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(CliError(format!(
            "invalid peer name {name:?}: use 1 to 64 of letters, digits and ._-"
        )))
    }
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let clock = SystemClock;
    match cli.command {
        Command::Serve {
            policy,
            listen,
            data,
        } => {
            let (policy, policy_source) = Policy::load(policy.as_deref())?;
            let gateway = start(GatewayOptions {
                policy,
                policy_source,
                data_dir: data.dir,
                listen,
                clock: Arc::new(clock),
            })
            .await?;
            gateway.run_until(shutdown_signal()).await;
            tracing::info!("peergate stopped");
            Ok(())
        }
        Command::Peer(PeerCommand::Add {
            name,
            rate,
            policy,
            data,
        }) => {
            check_peer_name(&name)?;
            let rate = match rate {
                Some(rate) => rate,
                None => {
                    Policy::load(policy.as_deref())?
                        .0
                        .peers
                        .default_rate_per_minute
                }
            };
            let store = Store::open(&data.dir).await?;
            let issued = token::issue(CredentialKind::PeerToken)
                .map_err(|e| CliError(format!("no randomness: {e}")))?;
            let peer = PeerRecord {
                id: format!("peer_{}", uuid::Uuid::new_v4().simple()),
                name: name.clone(),
                status: "active".to_owned(),
                rate_per_minute: rate,
                created_at: clock.now_millis(),
                last_used_at: None,
            };
            store
                .add_peer(&peer, &issued.token_id, &issued.secret_hash)
                .await?;
            store.close().await;
            eprintln!(
                "added peer {name} ({}, {rate}/min). Its token is on stdout and is not shown again.",
                peer.id
            );
            println!("{}", issued.token);
            Ok(())
        }
        Command::Peer(PeerCommand::List { data }) => {
            let store = Store::open(&data.dir).await?;
            let peers = store.list_peers().await?;
            store.close().await;
            println!(
                "{:<24} {:<37} {:<8} {:>10}  {:<24} {:<24}",
                "NAME", "ID", "STATUS", "LIMIT", "CREATED", "LAST USED"
            );
            for peer in peers {
                println!(
                    "{:<24} {:<37} {:<8} {:>10}  {:<24} {:<24}",
                    peer.name,
                    peer.id,
                    peer.status,
                    format!("{}/min", peer.rate_per_minute),
                    rfc3339_millis(peer.created_at),
                    peer.last_used_at
                        .map_or_else(|| "never".to_owned(), rfc3339_millis),
                );
            }
            Ok(())
        }
        Command::Card(CardCommand::Verify {
            source,
            secrets,
            jwks,
            dangerous_allow_http_loopback,
        }) => {
            let policy = crate::fetch::FetchPolicy {
                dangerous_allow_http_loopback,
                ..Default::default()
            };
            let mut keys = crate::verify::TrustedKeys::new();
            for secret in &secrets {
                keys.add_secret_arg(secret)?;
            }
            for source in &jwks {
                keys.add_jwks(&read_source(source, &policy).await?)?;
            }
            if keys.is_empty() {
                return Err(CliError(
                    "no keys: give --secret KID=BASE64URL or --jwks FILE|URL".to_owned(),
                ));
            }
            let card = read_source(&source, &policy).await?;
            let verified = crate::verify::verify_card(&card, &keys)
                .map_err(|e| CliError(format!("card not verified: {e}")))?;
            println!(
                "verified: signature by kid {} ({})",
                verified.kid, verified.alg
            );
            Ok(())
        }
        Command::Keys(KeysCommand::Generate { alg, kid, out }) => {
            if !crate::keys::is_valid_kid(&kid) {
                return Err(CliError(format!(
                    "invalid --kid {kid:?}: use 1 to 64 of letters, digits and ._-"
                )));
            }
            let path = out.unwrap_or_else(|| PathBuf::from("keys").join(format!("{kid}.pem")));
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    CliError(format!("cannot create {}: {}", parent.display(), e.kind()))
                })?;
            }
            crate::keys::generate(&alg, &path).map_err(CliError)?;
            eprintln!(
                "wrote a {alg} key. Add to the policy:\n[[signing.keys]]\nkid = \"{kid}\"\nalg = \"{alg}\"\nprivate_key_file = \"{}\"",
                path.display()
            );
            println!("{}", path.display());
            Ok(())
        }
        Command::Peer(PeerCommand::Limit { name, rate, data }) => {
            let store = Store::open(&data.dir).await?;
            store.set_peer_rate(&name, rate).await?;
            store.close().await;
            eprintln!(
                "peer {name} may now make {rate} requests a minute. A running server applies it within auth.credential_cache_seconds (2 s by default)."
            );
            Ok(())
        }
        Command::Peer(PeerCommand::Password { name, data }) => {
            let password = read_password(&name)?;
            if password.chars().count() < MIN_PASSWORD_CHARS {
                return Err(CliError(format!(
                    "the password is too short: use at least {MIN_PASSWORD_CHARS} characters"
                )));
            }
            let phc = tokio::task::spawn_blocking(move || hash_password(&password))
                .await
                .map_err(|e| CliError(e.to_string()))??;
            let store = Store::open(&data.dir).await?;
            store.set_peer_password(&name, &phc).await?;
            store.close().await;
            eprintln!("password set for peer {name} (stored as an Argon2id hash).");
            Ok(())
        }
        Command::Peer(PeerCommand::Key { name, data }) => {
            let store = Store::open(&data.dir).await?;
            let issued = token::issue(CredentialKind::ApiKey)
                .map_err(|e| CliError(format!("no randomness: {e}")))?;
            store
                .replace_api_key(
                    &name,
                    &issued.token_id,
                    &issued.secret_hash,
                    clock.now_millis(),
                )
                .await?;
            store.close().await;
            eprintln!(
                "issued an API key for peer {name}; any earlier key stopped working. It is on stdout and is not shown again."
            );
            println!("{}", issued.token);
            Ok(())
        }
        Command::Peer(PeerCommand::Revoke { name, data }) => {
            let store = Store::open(&data.dir).await?;
            store.revoke_peer(&name, clock.now_millis()).await?;
            store.close().await;
            eprintln!(
                "revoked peer {name}. A running server refuses its tokens within auth.credential_cache_seconds (2 s by default)."
            );
            Ok(())
        }
    }
}

/// A document from a URL (fetched under `policy`) or a file.
async fn read_source(source: &str, policy: &crate::fetch::FetchPolicy) -> Result<String, CliError> {
    if source.starts_with("https://") || source.starts_with("http://") {
        Ok(crate::fetch::fetch_text(source, policy).await?)
    } else {
        std::fs::read_to_string(source)
            .map_err(|e| CliError(format!("cannot read {source}: {}", e.kind())))
    }
}

/// One line from standard input, or a prompt without echo when it is a terminal.
fn read_password(name: &str) -> Result<String, CliError> {
    use std::io::{BufRead, IsTerminal};
    let line = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("Password for peer {name}: "))?
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        line
    };
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
