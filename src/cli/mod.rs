//! The command line: `serve`; `peer`, `admin` and `audit` acting on the same store through the
//! same account service as the admin API.

mod admin;
pub mod call;
mod card;
mod client_credentials;
mod discovery;
pub mod exit_status;
mod fetching;
mod keys;
mod log;
mod peer;
mod policy;
mod receipt;
mod receipt_log;
mod records;
mod store;

use crate::admin::MAX_RATE_PER_MINUTE;
use crate::admin::{AccountDefaults, AccountService, Caller};
use crate::app::{GatewayOptions, start};
use crate::clock::{Clock, SystemClock, Timestamp, rfc3339_millis};
use crate::config::Policy;
use crate::store::Store;
use admin::AdminCommand;
use card::CardCommand;
use clap::{Args, Parser, Subcommand};
use keys::KeysCommand;
use peer::PeerCommand;
use receipt::ReceiptCommand;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use store::StoreCommand;

/// peergate: a narrow, well-guarded A2A 1.0 door to your model.
#[derive(Debug, Parser)]
#[command(name = "peergate", version, about)]
pub struct Cli {
    /// How log lines on stderr are written: `text`, or `json` (one object per line, for a log
    /// shipper) [default: log.format from the policy when serving, else text]. Which lines are
    /// written is `RUST_LOG`'s (default `info`).
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    log_format: Option<crate::config::LogFormat>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The log format: `--log-format`, else (when serving) the policy's `log.format`, else text.
    /// A policy that cannot be read is reported by `serve` itself, after logging starts.
    pub fn log_format(&self) -> crate::config::LogFormat {
        if let Some(format) = self.log_format {
            return format;
        }
        match &self.command {
            Command::Serve { policy, .. } => Policy::load(policy.as_deref())
                .map(|(policy, _)| policy.log.format)
                .unwrap_or_default(),
            _ => crate::config::LogFormat::Text,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        /// Policy file [default: policies/default.toml, else the embedded copy].
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Address to listen on [default: server.listen from the policy].
        #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
        listen: Option<SocketAddr>,
        /// Address of the admin API [default: server.admin_listen from the policy].
        #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
        admin_listen: Option<SocketAddr>,
        /// Address of the gRPC listener [default: grpc.listen from the policy; needs [grpc]].
        #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
        grpc_listen: Option<SocketAddr>,
        /// The URL partners reach the door at, as the card names it [default:
        /// server.public_base_url from the policy]; required when --listen is an unspecified
        /// address (0.0.0.0, [::]), as in a container.
        #[arg(long, value_name = "URL", env = "PEERGATE_PUBLIC_BASE_URL")]
        public_base_url: Option<String>,
        /// Redis, for what instances share (redis://host:port/db): the door's limits, and with a
        /// PostgreSQL store everything several instances serving it together share. Prefer the
        /// environment variable when it holds a password.
        #[arg(
            long,
            value_name = "URL",
            env = "PEERGATE_REDIS_URL",
            hide_env_values = true
        )]
        redis: Option<String>,
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
        /// Only records from this time on: RFC 3339 with any offset (2026-11-30T08:00:00Z), a
        /// date, or an age such as 30m, 24h or 7d.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// One JSON array, one object per record.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataDir,
    },
    /// Read conversations: every message, with every part it carried.
    #[command(subcommand)]
    Conversations(records::ConversationsCommand),
    /// Read the tasks of a peer.
    #[command(subcommand)]
    Task(records::TaskCommand),
    /// Tokens and answered requests per owner and peer, in a UTC day or month.
    Usage {
        /// Only this administrator [default: every one].
        #[arg(long, value_name = "NAME")]
        owner: Option<String>,
        /// A UTC day (YYYY-MM-DD) or month (YYYY-MM) [default: today].
        #[arg(long, value_name = "PERIOD")]
        period: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataDir,
    },
    /// Manage the keys that sign the Agent Card.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Check Agent Cards.
    #[command(subcommand)]
    Card(CardCommand),
    /// Check an agent's answer receipts.
    #[command(subcommand)]
    Receipt(ReceiptCommand),
    /// Audit the answer log this gateway keeps of its receipts.
    #[command(subcommand)]
    Log(log::LogCommand),
    /// Call an agent: verify its card, send one message, print the answer. Exits 0 when
    /// answered, 3 when the card is not verified, 4 when the credential is refused, 5 when rate
    /// limited, 6 when the task failed or was rejected, 1 otherwise.
    Call(Box<call::CallArgs>),
    /// Check a policy without serving, or write a starting one.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Move the store of record (the embedded SQLite store into PostgreSQL).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Write a consistent copy of the SQLite store to FILE, also while the gateway serves it.
    /// To restore: stop the gateway, put FILE at DIR/peergate.sqlite3 (removing any
    /// peergate.sqlite3-wal and -shm beside it), start the gateway. A PostgreSQL store is backed
    /// up with pg_dump.
    Backup {
        /// Where the copy goes (created with mode 0600); it must not exist yet.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Data directory holding the SQLite store.
        #[arg(long = "data", value_name = "DIR", default_value = "data")]
        data: PathBuf,
    },
}

#[derive(Debug, Args)]
struct DataDir {
    /// Data directory holding the SQLite store (and the default card-signing key).
    #[arg(long = "data", value_name = "DIR", default_value = "data")]
    dir: PathBuf,
    /// A PostgreSQL store shared by several instances instead of the SQLite one:
    /// postgres://user:password@host:port/database. Prefer the environment variable, so the
    /// password is in no file and no process listing.
    #[arg(
        long = "store",
        value_name = "URL",
        env = "PEERGATE_STORE_URL",
        hide_env_values = true
    )]
    store: Option<String>,
}

impl DataDir {
    /// Where the store is.
    fn location(&self) -> crate::store::StoreLocation {
        match &self.store {
            Some(url) => crate::store::StoreLocation::Postgres(url.clone()),
            None => crate::store::StoreLocation::Embedded(self.dir.clone()),
        }
    }
}

/// A failed command: one line for the operator, and the exit status.
#[derive(Debug)]
pub struct CliError {
    /// What went wrong.
    pub message: String,
    /// The process's exit status (1 unless a command documents others).
    pub exit_code: u8,
}

impl CliError {
    /// A failure that exits with status 1.
    pub fn new(message: String) -> Self {
        Self {
            message,
            exit_code: 1,
        }
    }
}

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        Self::new(e.to_string())
    }
}

/// Reads a listen address: an IP address and a port. A name (`localhost:8080`) is refused with
/// what to write instead: which addresses a name stands for is the resolver's choice, and a
/// listener must know which one it binds.
fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    value.parse().map_err(|_| {
        let example = if value.starts_with("localhost") {
            "127.0.0.1:8080 (or [::1]:8080)"
        } else {
            "127.0.0.1:8080, 0.0.0.0:8080 or [::]:8080"
        };
        format!("use an IP address and a port, e.g. {example}; a host name is not resolved")
    })
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

/// Where `serve` writes down, in its data directory, the policy file it serves with, so the
/// command line's defaults (`peer add` without `--policy`) are the server's.
const SERVING_POLICY_FILE: &str = "serving-policy.path";

/// Writes down the policy `serve` serves the SQLite store in `dir` with (or forgets it, when
/// that is the embedded copy). Failing to is only logged: it changes no behaviour of the server.
fn remember_serving_policy(dir: &Path, source: &crate::config::PolicySource) {
    let path = dir.join(SERVING_POLICY_FILE);
    let written = match source {
        crate::config::PolicySource::File(file) => std::fs::canonicalize(file)
            .and_then(|file| std::fs::write(&path, file.as_os_str().as_encoded_bytes())),
        crate::config::PolicySource::Embedded => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    };
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot note the policy in the data directory; `peer add` without --policy will not find it");
    }
}

/// The policy for the command line's defaults: `--policy` when given; else the one the gateway
/// serving this SQLite store last started with; else what `serve` would load.
fn policy_for_defaults(
    given: Option<&Path>,
    data: &DataDir,
) -> Result<(Policy, crate::config::PolicySource), CliError> {
    if given.is_none() && data.store.is_none() {
        let noted = std::fs::read(data.dir.join(SERVING_POLICY_FILE))
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .map(PathBuf::from)
            .filter(|path| path.is_file());
        if let Some(path) = noted {
            return Ok(Policy::load(Some(&path))?);
        }
    }
    Ok(Policy::load(given)?)
}

/// Runs `work` on the account service over the store in `data`, and closes the store whatever
/// the outcome.
async fn on_store<T>(
    data: &DataDir,
    policy: Option<&Policy>,
    work: impl AsyncFnOnce(&AccountService) -> Result<T, crate::admin::ServiceError>,
) -> Result<T, CliError> {
    with_store(data, policy, false, work).await
}

/// Like [`on_store`], for the commands that may create a new store (`peer add`, `admin add`):
/// a data directory that does not exist yet is created, and said so.
async fn on_new_or_existing_store<T>(
    data: &DataDir,
    policy: Option<&Policy>,
    work: impl AsyncFnOnce(&AccountService) -> Result<T, crate::admin::ServiceError>,
) -> Result<T, CliError> {
    with_store(data, policy, true, work).await
}

async fn with_store<T>(
    data: &DataDir,
    policy: Option<&Policy>,
    may_create: bool,
    work: impl AsyncFnOnce(&AccountService) -> Result<T, crate::admin::ServiceError>,
) -> Result<T, CliError> {
    let changes = Arc::new(crate::shared::changes::CollectedChanges::default());
    let accounts = accounts(data, policy, may_create)
        .await?
        .with_changes(changes.clone());
    let outcome = work(&accounts).await;
    // A running server hears of what changed at once (a new credential, a revocation); one
    // that misses it re-reads within seconds.
    let notes: Vec<String> = changes
        .take()
        .iter()
        .map(|change| change.to_wire(&format!("cli-{}", std::process::id())))
        .collect();
    accounts.store().announce(&notes).await;
    accounts.store().close().await;
    Ok(outcome?)
}

/// Checks the SQLite store in `dir` can be opened by this user, before SQLite is asked (whose
/// answer would be a bare "unable to open database file"). A directory that does not exist, or
/// holds no store, is refused unless `may_create`; then it is created, and said so.
fn check_data_dir(dir: &Path, may_create: bool) -> Result<(), CliError> {
    use std::io::ErrorKind;
    let database = dir.join(crate::store::sqlite::DATABASE_FILE);
    let shown = dir.display();
    let denied = |what: &str| {
        CliError::new(format!(
            "cannot open the store in {shown}: {what} is not readable and writable by this user; it likely belongs to another (run the command as the user the gateway runs as, e.g. `sudo -u peergate peergate …`)"
        ))
    };
    let missing = match std::fs::metadata(&database) {
        Ok(_) => None,
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            return Err(denied("the directory"));
        }
        Err(_) => match std::fs::metadata(dir) {
            Ok(_) => Some("holds no store"),
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                return Err(denied("the directory"));
            }
            Err(_) => Some("does not exist"),
        },
    };
    if let Some(what) = missing {
        if !may_create {
            return Err(CliError::new(format!(
                "the data directory {shown} {what}: give the one the gateway serves with --data DIR (it holds {}), or create a store with `peergate peer add` or `peergate admin add`",
                crate::store::sqlite::DATABASE_FILE
            )));
        }
        eprintln!("creating a new store in {shown}");
        return Ok(());
    }
    let everything =
        rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK;
    if rustix::fs::access(dir, everything).is_err() {
        return Err(denied("the directory"));
    }
    let read_write = rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK;
    if rustix::fs::access(&database, read_write).is_err() {
        return Err(denied(crate::store::sqlite::DATABASE_FILE));
    }
    // Root passes every access check, but files it creates beside the database (its lock,
    // the disk reserve, the WAL) would then be root's, and the gateway's own user could no
    // longer open its store: the owner must run the command line.
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(&database).map_err(|_| denied(crate::store::sqlite::DATABASE_FILE))?,
    );
    if owner != rustix::process::geteuid().as_raw() {
        return Err(denied(crate::store::sqlite::DATABASE_FILE));
    }
    Ok(())
}

/// The account service over the store in `data`, with the defaults of `policy`; says on
/// stderr which store it opened.
async fn accounts(
    data: &DataDir,
    policy: Option<&Policy>,
    may_create: bool,
) -> Result<AccountService, CliError> {
    if data.store.is_none() {
        check_data_dir(&data.dir, may_create)?;
    }
    let store = Store::open_at(&data.location()).await?;
    eprintln!("store: {}", store.describe());
    let defaults = AccountDefaults {
        default_owner: policy.and_then(|p| p.peers.default_owner.clone()),
        rate_per_minute: policy.map_or_else(
            || {
                crate::config::PeersPolicy::default()
                    .default_rate_per_minute
                    .u32()
            },
            |p| p.peers.default_rate_per_minute.u32(),
        ),
    };
    let service = AccountService::new(store, Arc::new(SystemClock), defaults);
    Ok(match policy {
        Some(policy) => service.knowing_issuers(&policy.auth.issuer_names()),
        None => service,
    })
}

/// A time given on the command line, in the admin API's syntax: RFC 3339 with any offset, a
/// date, or an age (`30m`, `24h`, `7d`) counted from now the way `relative` says.
fn parse_when(
    text: &str,
    now: Timestamp,
    relative: crate::clock::Relative,
) -> Result<Timestamp, CliError> {
    crate::clock::parse_time(text, now, relative).ok_or_else(|| {
        CliError::new(format!(
            "cannot read the time {text:?}: use {}",
            crate::clock::TIME_SYNTAX
        ))
    })
}

/// Every administrator with the tokens their peers spent today (UTC).
async fn admins_with_usage(
    accounts: &AccountService,
) -> Result<Vec<(crate::store::AdminRecord, u64)>, crate::admin::ServiceError> {
    let (today, _) = crate::admin::budget::day_and_month(SystemClock.now());
    let mut listed = Vec::new();
    for admin in accounts.list_admins().await? {
        let (spent, _) = accounts
            .usage(&Caller::operator(), &admin.id, today)
            .await?;
        listed.push((admin, spent));
    }
    Ok(listed)
}

const CACHE_NOTE: &str = "A running server is told and applies it at once (within auth.credential_cache_seconds, 2 s by default, if it missed the message).";

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let clock = SystemClock;
    match cli.command {
        Command::Serve {
            policy,
            listen,
            admin_listen,
            grpc_listen,
            public_base_url,
            redis,
            data,
        } => {
            let hangups = Hangups::listen();
            let (mut policy, policy_source) = Policy::load(policy.as_deref())?;
            policy.override_public_base_url(public_base_url, &policy_source)?;
            // Checked with the policy: cannot fail here.
            let _ = crate::telemetry::level::set(&policy.log.level);
            let serving_sqlite = data.store.is_none().then(|| data.dir.clone());
            let source_for_cli = policy_source.clone();
            let gateway = start(GatewayOptions {
                policy,
                policy_source,
                data_dir: data.dir,
                store_url: data.store,
                redis_url: redis,
                listen,
                admin_listen,
                grpc_listen,
                clock: Arc::new(clock),
                telemetry: crate::telemetry::settings::export_from_env(&|name| {
                    std::env::var(name).ok()
                })
                .map_err(|e| CliError::new(format!("cannot start: {e}")))?,
            })
            .await?;
            if let Some(dir) = serving_sqlite {
                remember_serving_policy(&dir, &source_for_cli);
            }
            let reloading = tokio::spawn(hangups.reload_each(gateway.policy_reload()));
            gateway.run_until(shutdown_signal()).await;
            reloading.abort();
            tracing::info!("peergate stopped");
            Ok(())
        }
        Command::Peer(command) => peer::run(command).await,
        Command::Admin(command) => admin::run(command).await,
        Command::Card(command) => card::run(command).await,
        Command::Receipt(command) => receipt::run(command).await,
        Command::Log(command) => log::run(command).await,
        Command::Call(args) => call::run(*args).await,
        Command::Keys(command) => keys::run(command).await,
        Command::Conversations(command) => records::conversations(command).await,
        Command::Task(records::TaskCommand::Show {
            peer,
            task_id,
            data,
        }) => records::show_task(&peer, &task_id, &data).await,
        Command::Usage {
            owner,
            period,
            json,
            data,
        } => records::usage(owner, period, json, &data).await,
        Command::Store(command) => store::run(command).await,
        Command::Policy(command) => policy::run(command).await,
        Command::Backup { file, data } => backup(file, data).await,
        Command::Audit { since, json, data } => {
            let since = since
                .map(|s| parse_when(&s, clock.now(), crate::clock::Relative::Ago))
                .transpose()?
                .unwrap_or(Timestamp::MIN);
            let records = on_store(&data, None, async |accounts| {
                accounts.audit(&Caller::operator(), since).await
            })
            .await?;
            print_audit(records, json);
            Ok(())
        }
    }
}

/// The audit records, a line each, or as one JSON array.
fn print_audit(records: Vec<crate::store::AuditRecord>, json: bool) {
    if json {
        let listed: Vec<serde_json::Value> = records
            .into_iter()
            .map(|record| {
                let e = record.entry;
                serde_json::json!({
                    "at": rfc3339_millis(e.at), "actor": e.actor.to_string(),
                    "action": e.action.as_str(), "target": e.target.to_string(),
                    "outcome": e.outcome.to_string(), "client": e.client,
                    "detail": e.detail,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(listed));
        return;
    }
    for record in records {
        let e = record.entry;
        println!(
            "{}  {:<20} {:<22} {:<24} {:<40} {:<16} {}",
            rfc3339_millis(e.at),
            e.actor.to_string(),
            e.action,
            e.target.to_string(),
            e.outcome.to_string(),
            e.client,
            e.detail
        );
    }
}

/// `peergate backup FILE`: a consistent copy of the SQLite store, and its push key beside it.
async fn backup(file: PathBuf, data: PathBuf) -> Result<(), CliError> {
    let bytes = tokio::task::spawn_blocking({
        let (file, data) = (file.clone(), data.clone());
        move || crate::store::sqlite::backup(&data, &file)
    })
    .await
    .map_err(|e| CliError::new(format!("the backup stopped: {e}")))?
    .map_err(CliError::new)?;
    eprintln!(
        "wrote a consistent copy of the store to {} ({bytes} bytes)",
        file.display()
    );
    copy_push_key(&data, &file)?;
    remind_of_signing_keys(&data);
    Ok(())
}

/// Says which signing keys of the data directory the backup does not hold: they are secrets
/// an operator keeps apart, and a restore without them signs with new keys, which partners
/// that pinned the old ones (the card's) or agents that hold the old key set (the callers')
/// refuse until they fetch the new JWKS.
fn remind_of_signing_keys(data: &Path) {
    for (file, what) in [
        (
            crate::jose::keys::DEFAULT_KEY_FILE,
            "the Agent Card's signing key",
        ),
        (
            crate::jose::keys::DEFAULT_CALLER_KEY_FILE,
            "the key of the callers' assertions",
        ),
    ] {
        if data.join(file).exists() {
            eprintln!(
                "not in the backup: {what}, {file} in the data directory; keep a copy apart and restore it with the store, or partners that pinned it refuse what a new key signs"
            );
        }
    }
}

/// Copies the push-notification key the store's sealed push configs need (generated in the
/// data directory), when there is one, beside the backup `file` (`FILE.push-notification.key`,
/// mode 0600, never overwriting): a store restored without it cannot open them.
fn copy_push_key(data: &Path, file: &Path) -> Result<(), CliError> {
    let key = data.join(crate::push::seal::GENERATED_KEY_FILE);
    let Ok(bytes) = std::fs::read(&key) else {
        return Ok(());
    };
    let mut beside = file.as_os_str().to_owned();
    beside.push(format!(".{}", crate::push::seal::GENERATED_KEY_FILE));
    let beside = PathBuf::from(beside);
    crate::jose::keys::write_private(&beside, &bytes).map_err(|e| {
        CliError::new(format!(
            "cannot write the push-notification key beside the backup, {}: {}",
            beside.display(),
            e.kind()
        ))
    })?;
    eprintln!(
        "copied the push-notification key to {} (mode 0600); restore it as {} with the store, or its push configs cannot be opened",
        beside.display(),
        crate::push::seal::GENERATED_KEY_FILE
    );
    Ok(())
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

/// `SIGHUP`, heard from the first thing `serve` does: one sent while the gateway starts
/// reloads its policy once it serves, instead of ending the process (the signal's default
/// action).
struct Hangups(#[cfg(unix)] Option<tokio::signal::unix::Signal>);

impl Hangups {
    fn listen() -> Self {
        #[cfg(unix)]
        return Self(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok());
        #[cfg(not(unix))]
        Self()
    }

    /// Reloads the policy on every `SIGHUP` (the reloader logs what it did, or why not).
    async fn reload_each(self, reload: Arc<dyn crate::admin::reload::PolicyReload>) {
        #[cfg(unix)]
        if let Some(mut hangups) = self.0 {
            while hangups.recv().await.is_some() {
                let _ = reload
                    .reload(crate::admin::reload::ReloadTrigger::Signal)
                    .await;
            }
        }
        #[cfg(not(unix))]
        let _ = (self, reload);
    }
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
