//! The command line: `serve`; `peer`, `admin` and `audit` acting on the same store through the
//! same account service as the admin API.

use crate::admin::{AccountDefaults, AccountService, BudgetChange, Caller, NewPeer};
use crate::clock::{Clock, SystemClock, parse_rfc3339, rfc3339_millis};
use crate::config::MAX_RATE_PER_MINUTE;
use crate::config::Policy;
use crate::http::server::{GatewayOptions, start};
use crate::store::Store;
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
        /// Address of the admin API [default: server.admin_listen from the policy].
        #[arg(long, value_name = "ADDR")]
        admin_listen: Option<SocketAddr>,
        #[command(flatten)]
        data: DataDir,
    },
    /// Manage partner agents and their tokens.
    #[command(subcommand)]
    Peer(PeerCommand),
    /// Manage administrators: the owners of peers, their budgets and their admin API access.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Print the audit log: who changed what, refused logins and quota refusals.
    Audit {
        /// Only records from this time on: RFC 3339 (2026-11-30T08:00:00Z), a date, or an age
        /// such as 30m, 24h or 7d.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        #[command(flatten)]
        data: DataDir,
    },
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
enum AdminCommand {
    /// Add an administrator. The password is read from standard input (one line), or asked for
    /// when standard input is a terminal; never taken from the command line.
    Add {
        /// Name (also the Basic login): 1 to 64 of letters, digits and ._-
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// List administrators, their status and budgets. Never a secret.
    List {
        #[command(flatten)]
        data: DataDir,
    },
    /// Disable an administrator: no more sign-ins, their tokens stop, their peers' messages are
    /// refused.
    Disable {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Enable a disabled administrator again (their old tokens stay revoked).
    Enable {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Revoke every admin API token of an administrator (after a leak); their password and
    /// peers stay.
    RevokeTokens {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Set an administrator's password (read like `admin add`).
    Password {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Issue an administrator token for the admin API and print it, alone, on stdout. It is
    /// shown only this once.
    Token {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Set an administrator's model switch and token budgets.
    Budget {
        /// The administrator's name.
        name: String,
        /// Allow or forbid the model for this administrator's peers.
        #[arg(long, value_parser = ["allow", "forbid"])]
        model: Option<String>,
        /// Tokens per UTC day.
        #[arg(long, value_name = "N")]
        tokens_per_day: Option<u64>,
        /// Tokens per UTC month, or `default` for the policy's.
        #[arg(long, value_name = "N|default")]
        tokens_per_month: Option<String>,
        #[command(flatten)]
        data: DataDir,
    },
    /// Print the admin API's OpenAPI document (the same the admin listener serves).
    Openapi,
}

#[derive(Debug, Subcommand)]
enum PeerCommand {
    /// Add a peer and print its token, alone, on stdout. The token is shown only this once.
    Add {
        /// Name: 1 to 64 of letters, digits and ._-
        name: String,
        /// The administrator the peer acts for [default: peers.default_owner from the policy].
        #[arg(long, value_name = "NAME")]
        owner: Option<String>,
        /// Request quota, as N/min [default: peers.default_rate_per_minute from the policy].
        #[arg(long, value_name = "N/min", value_parser = parse_rate)]
        rate: Option<u32>,
        /// Policy file, for the defaults.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        #[command(flatten)]
        data: DataDir,
    },
    /// List peers: name, owner, status, limit, created, last used, expiry. Never a secret.
    List {
        #[command(flatten)]
        data: DataDir,
    },
    /// Set when a peer stops being let in (RFC 3339 or a date), or `never`.
    Expire {
        /// The peer's name.
        name: String,
        /// RFC 3339 (2027-01-31T00:00:00Z), a date, or `never`.
        when: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Issue a new token for a peer and print it, alone, on stdout. The old token stops at
    /// once, or after the grace period.
    Rotate {
        /// The peer's name.
        name: String,
        /// Seconds the old token keeps working (at most 30 days).
        #[arg(long, value_name = "SECONDS", default_value_t = 0)]
        grace: u64,
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

/// Reads `N/min`; whether N is in range is the account service's rule.
fn parse_rate(value: &str) -> Result<u32, String> {
    value
        .strip_suffix("/min")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            format!(
                "expected N/min with N from 1 to {MAX_RATE_PER_MINUTE}, e.g. 30/min (got {value:?})"
            )
        })
}

/// Runs `work` on the account service over the store in `data`, and closes the store whatever
/// the outcome.
async fn on_store<T>(
    data: &DataDir,
    policy: Option<&Policy>,
    work: impl AsyncFnOnce(&AccountService) -> Result<T, crate::admin::ServiceError>,
) -> Result<T, CliError> {
    let accounts = accounts(data, policy).await?;
    let outcome = work(&accounts).await;
    accounts.store().close().await;
    Ok(outcome?)
}

/// The account service over the store in `data`, with the defaults of `policy`.
async fn accounts(data: &DataDir, policy: Option<&Policy>) -> Result<AccountService, CliError> {
    let store = Store::open(&data.dir).await?;
    let defaults = AccountDefaults {
        default_owner: policy.and_then(|p| p.peers.default_owner.clone()),
        rate_per_minute: policy.map_or_else(
            || crate::config::PeersPolicy::default().default_rate_per_minute,
            |p| p.peers.default_rate_per_minute,
        ),
    };
    Ok(AccountService::new(store, Arc::new(SystemClock), defaults))
}

/// A time given on the command line: RFC 3339, a date, or an age (`30m`, `24h`, `7d`).
fn parse_when(text: &str, now: i64) -> Result<i64, CliError> {
    if let Some(at) = parse_rfc3339(text) {
        return Ok(at);
    }
    let age = [("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)]
        .into_iter()
        .find_map(|(suffix, unit)| {
            let n: i64 = text.strip_suffix(suffix)?.parse().ok()?;
            (n >= 0).then(|| n.saturating_mul(unit))
        });
    match age {
        Some(age) => Ok(now.saturating_sub(age)),
        _ => Err(CliError(format!(
            "cannot read the time {text:?}: use RFC 3339 (2026-11-30T08:00:00Z), a date (2026-11-30) or an age (30m, 24h, 7d)"
        ))),
    }
}

/// Every administrator with the tokens their peers spent today (UTC).
async fn admins_with_usage(
    accounts: &AccountService,
) -> Result<Vec<(crate::store::AdminRecord, u64)>, crate::admin::ServiceError> {
    let (today, _) = crate::admin::budget::day_and_month(SystemClock.now_millis());
    let mut listed = Vec::new();
    for admin in accounts.list_admins().await? {
        let (spent, _) = accounts
            .usage(&Caller::operator(), &admin.id, &today)
            .await?;
        listed.push((admin, spent));
    }
    Ok(listed)
}

const CACHE_NOTE: &str =
    "A running server applies it within auth.credential_cache_seconds (2 s by default).";

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let clock = SystemClock;
    match cli.command {
        Command::Serve {
            policy,
            listen,
            admin_listen,
            data,
        } => {
            let (policy, policy_source) = Policy::load(policy.as_deref())?;
            let gateway = start(GatewayOptions {
                policy,
                policy_source,
                data_dir: data.dir,
                listen,
                admin_listen,
                clock: Arc::new(clock),
            })
            .await?;
            gateway.run_until(shutdown_signal()).await;
            tracing::info!("peergate stopped");
            Ok(())
        }
        Command::Peer(PeerCommand::Add {
            name,
            owner,
            rate,
            policy,
            data,
        }) => {
            let policy = Policy::load(policy.as_deref())?.0;
            let created = on_store(&data, Some(&policy), async |accounts| {
                accounts
                    .create_peer(
                        &Caller::operator(),
                        NewPeer {
                            name: name.clone(),
                            owner,
                            rate_per_minute: rate,
                            expires_at: None,
                        },
                    )
                    .await
            })
            .await?;
            eprintln!(
                "added peer {name} ({}, owned by {}, {}/min). Its token is on stdout and is not shown again.",
                created.peer.id, created.peer.owner_name, created.peer.rate_per_minute
            );
            println!("{}", created.token);
            Ok(())
        }
        Command::Peer(PeerCommand::List { data }) => {
            let peers = on_store(&data, None, async |accounts| {
                accounts.list_peers(&Caller::operator()).await
            })
            .await?;
            println!(
                "{:<24} {:<37} {:<8} {:>10}  {:<24} {:<24} {:<16} {:<24}",
                "NAME", "ID", "STATUS", "LIMIT", "CREATED", "LAST USED", "OWNER", "EXPIRES"
            );
            for peer in peers {
                println!(
                    "{:<24} {:<37} {:<8} {:>10}  {:<24} {:<24} {:<16} {:<24}",
                    peer.name,
                    peer.id,
                    peer.status,
                    format!("{}/min", peer.rate_per_minute),
                    rfc3339_millis(peer.created_at),
                    peer.last_used_at
                        .map_or_else(|| "never".to_owned(), rfc3339_millis),
                    peer.owner_name,
                    peer.expires_at
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
            let policy = crate::jose::fetch::FetchPolicy {
                dangerous_allow_http_loopback,
                ..Default::default()
            };
            let mut keys = crate::jose::verify::TrustedKeys::new();
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
            let verified = crate::jose::verify::verify_card(&card, &keys)
                .map_err(|e| CliError(format!("card not verified: {e}")))?;
            println!(
                "verified: signature by kid {} ({})",
                verified.kid, verified.alg
            );
            Ok(())
        }
        Command::Keys(KeysCommand::Generate { alg, kid, out }) => {
            if !crate::jose::keys::is_valid_kid(&kid) {
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
            crate::jose::keys::generate(&alg, &path).map_err(CliError)?;
            eprintln!(
                "wrote a {alg} key. Add to the policy:\n[[signing.keys]]\nkid = \"{kid}\"\nalg = \"{alg}\"\nprivate_key_file = \"{}\"",
                path.display()
            );
            println!("{}", path.display());
            Ok(())
        }
        Command::Peer(PeerCommand::Limit { name, rate, data }) => {
            on_store(&data, None, async |accounts| {
                accounts.set_limit(&Caller::operator(), &name, rate).await
            })
            .await?;
            eprintln!("peer {name} may now make {rate} requests a minute. {CACHE_NOTE}");
            Ok(())
        }
        Command::Peer(PeerCommand::Expire { name, when, data }) => {
            let at = if when == "never" {
                None
            } else {
                Some(parse_rfc3339(&when).ok_or_else(|| {
                    CliError(format!(
                        "cannot read {when:?}: use RFC 3339 (2027-01-31T00:00:00Z), a date, or never"
                    ))
                })?)
            };
            on_store(&data, None, async |accounts| {
                accounts.set_expiry(&Caller::operator(), &name, at).await
            })
            .await?;
            match at {
                Some(at) => eprintln!(
                    "peer {name} expires at {}. {CACHE_NOTE}",
                    rfc3339_millis(at)
                ),
                None => eprintln!("peer {name} no longer expires."),
            }
            Ok(())
        }
        Command::Peer(PeerCommand::Password { name, data }) => {
            let password = read_password(&format!("peer {name}"))?;
            on_store(&data, None, async |accounts| {
                accounts
                    .set_peer_password(&Caller::operator(), &name, password)
                    .await
            })
            .await?;
            eprintln!("password set for peer {name} (stored as an Argon2id hash).");
            Ok(())
        }
        Command::Peer(PeerCommand::Key { name, data }) => {
            let key = on_store(&data, None, async |accounts| {
                accounts.issue_api_key(&Caller::operator(), &name).await
            })
            .await?;
            eprintln!(
                "issued an API key for peer {name}; any earlier key stopped working. It is on stdout and is not shown again."
            );
            println!("{key}");
            Ok(())
        }
        Command::Peer(PeerCommand::Rotate { name, grace, data }) => {
            let rotated = on_store(&data, None, async |accounts| {
                accounts.rotate(&Caller::operator(), &name, grace).await
            })
            .await?;
            match rotated.previous_valid_until {
                Some(until) => eprintln!(
                    "issued a new token for peer {name}; the old one works until {}. The new token is on stdout and is not shown again.",
                    rfc3339_millis(until)
                ),
                None => eprintln!(
                    "issued a new token for peer {name}; the old one stopped. {CACHE_NOTE} The new token is on stdout and is not shown again."
                ),
            }
            println!("{}", rotated.token);
            Ok(())
        }
        Command::Peer(PeerCommand::Revoke { name, data }) => {
            on_store(&data, None, async |accounts| {
                accounts.revoke(&Caller::operator(), &name).await
            })
            .await?;
            eprintln!("revoked peer {name}. {CACHE_NOTE}");
            Ok(())
        }
        Command::Admin(command) => run_admin(command).await,
        Command::Audit { since, data } => {
            let since = since
                .map(|s| parse_when(&s, clock.now_millis()))
                .transpose()?
                .unwrap_or(i64::MIN);
            let records = on_store(&data, None, async |accounts| {
                accounts.audit(&Caller::operator(), since).await
            })
            .await?;
            for record in records {
                let e = record.entry;
                println!(
                    "{}  {:<20} {:<22} {:<24} {:<40} {:<16} {}",
                    rfc3339_millis(e.at),
                    e.actor,
                    e.action,
                    e.target,
                    e.outcome,
                    e.client,
                    e.detail
                );
            }
            Ok(())
        }
    }
}

async fn run_admin(command: AdminCommand) -> Result<(), CliError> {
    let operator = Caller::operator();
    match command {
        AdminCommand::Add { name, data } => {
            let password = read_password(&format!("administrator {name}"))?;
            let added = on_store(&data, None, async |accounts| {
                accounts.add_admin(&operator, &name, Some(password)).await
            })
            .await?;
            eprintln!(
                "added administrator {name} ({}); password stored as an Argon2id hash.",
                added.id
            );
            Ok(())
        }
        AdminCommand::List { data } => {
            let listed = on_store(&data, None, admins_with_usage).await?;
            println!(
                "{:<24} {:<9} {:<9} {:<9} {:>16} {:>16} {:>12}  {:<24}",
                "NAME",
                "STATUS",
                "PASSWORD",
                "MODEL",
                "TOKENS/DAY",
                "TOKENS/MONTH",
                "USED TODAY",
                "CREATED"
            );
            let show = |n: Option<u64>| n.map_or_else(|| "default".to_owned(), |n| n.to_string());
            for (admin, today) in listed {
                println!(
                    "{:<24} {:<9} {:<9} {:<9} {:>16} {:>16} {:>12}  {:<24}",
                    admin.name,
                    admin.status,
                    if admin.has_password { "set" } else { "none" },
                    if admin.model_allowed {
                        "allowed"
                    } else {
                        "forbidden"
                    },
                    show(admin.tokens_per_day),
                    show(admin.tokens_per_month),
                    today,
                    rfc3339_millis(admin.created_at),
                );
            }
            Ok(())
        }
        AdminCommand::Disable { name, data } => {
            on_store(&data, None, async |accounts| {
                accounts.disable_admin(&operator, &name).await
            })
            .await?;
            eprintln!(
                "disabled administrator {name}: no more sign-ins, their tokens stopped, their peers' messages are refused. {CACHE_NOTE}"
            );
            Ok(())
        }
        AdminCommand::Enable { name, data } => {
            on_store(&data, None, async |accounts| {
                accounts.enable_admin(&operator, &name).await
            })
            .await?;
            eprintln!("enabled administrator {name}. {CACHE_NOTE}");
            Ok(())
        }
        AdminCommand::RevokeTokens { name, data } => {
            on_store(&data, None, async |accounts| {
                accounts.revoke_admin_tokens(&operator, &name).await
            })
            .await?;
            eprintln!(
                "revoked every admin API token of {name}; the next request with one is refused."
            );
            Ok(())
        }
        AdminCommand::Password { name, data } => {
            let password = read_password(&format!("administrator {name}"))?;
            on_store(&data, None, async |accounts| {
                accounts
                    .set_admin_password(&operator, &name, password)
                    .await
            })
            .await?;
            eprintln!("password set for administrator {name} (stored as an Argon2id hash).");
            Ok(())
        }
        AdminCommand::Token { name, data } => {
            let token = on_store(&data, None, async |accounts| {
                accounts.issue_admin_token(&operator, &name).await
            })
            .await?;
            eprintln!(
                "issued an admin API token for {name}. It is on stdout and is not shown again."
            );
            println!("{token}");
            Ok(())
        }
        AdminCommand::Budget {
            name,
            model,
            tokens_per_day,
            tokens_per_month,
            data,
        } => {
            let tokens_per_month = match tokens_per_month.as_deref() {
                None => None,
                Some("default") => Some(None),
                Some(n) => Some(Some(n.parse::<u64>().map_err(|_| {
                    CliError(format!(
                        "--tokens-per-month: expected a number of tokens or `default` (got {n:?})"
                    ))
                })?)),
            };
            let change = BudgetChange {
                model_allowed: model.map(|m| m == "allow"),
                tokens_per_day,
                tokens_per_month,
            };
            let admin = on_store(&data, None, async |accounts| {
                accounts.set_budget(&operator, &name, change).await
            })
            .await?;
            eprintln!(
                "administrator {name}: {}. {CACHE_NOTE}",
                crate::admin::service::describe_budget(&admin)
            );
            Ok(())
        }
        AdminCommand::Openapi => {
            let document = crate::admin::api::openapi()
                .to_pretty_json()
                .map_err(|e| CliError(e.to_string()))?;
            println!("{document}");
            Ok(())
        }
    }
}

/// A document from a URL (fetched under `policy`) or a file.
async fn read_source(
    source: &str,
    policy: &crate::jose::fetch::FetchPolicy,
) -> Result<String, CliError> {
    if source.starts_with("https://") || source.starts_with("http://") {
        Ok(crate::jose::fetch::fetch_text(source, policy).await?)
    } else {
        std::fs::read_to_string(source)
            .map_err(|e| CliError(format!("cannot read {source}: {}", e.kind())))
    }
}

/// One line from standard input, or a prompt without echo when it is a terminal.
fn read_password(whose: &str) -> Result<String, CliError> {
    use std::io::{BufRead, IsTerminal};
    let line = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("Password for {whose}: "))?
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
