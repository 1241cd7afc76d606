//! `peergate peer …`: partner agents, their credentials and limits.

use super::{CACHE_NOTE, CliError, DataDir, on_store, parse_rate, read_password};
use crate::admin::service::PeerChanged;
use crate::admin::{Caller, NewPassword, NewPeer, PeerChange};
use crate::clock::{Clock as _, rfc3339_millis};
use crate::config::Policy;
use clap::Subcommand;
use std::path::PathBuf;

/// `peer add`'s arguments.
#[derive(Debug, clap::Args)]
pub(super) struct AddArgs {
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
    /// Also bind this identity to the new peer (see `peer bind`).
    #[command(flatten)]
    identity: OptionalIdentity,
    /// Issue no bearer token: the peer signs in another way (`peer password`, `peer key`, or
    /// an identity bound to it). The default when an identity is bound here.
    #[arg(long, conflicts_with = "token")]
    no_token: bool,
    /// Issue a bearer token even though an identity is bound here (the peer may sign in
    /// either way).
    #[arg(long)]
    token: bool,
    #[command(flatten)]
    data: DataDir,
}

/// One identity to bind or unbind: exactly one of its forms.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = true)]
pub(super) struct IdentityArgs {
    /// The identity provider, as `[[auth.issuers]]` names it (with --subject).
    #[arg(long, value_name = "NAME", requires = "subject", conflicts_with_all = ["certificate_san", "certificate_sha256"])]
    issuer: Option<String>,
    /// The token's client_id (else its sub) that names the peer (with --issuer).
    #[arg(long, value_name = "VALUE", requires = "issuer")]
    subject: Option<String>,
    /// A client certificate's URI or DNS subject alternative name, compared exactly.
    #[arg(long, value_name = "VALUE", conflicts_with = "certificate_sha256")]
    certificate_san: Option<String>,
    /// A client certificate's SHA-256 fingerprint (64 hex digits; colons allowed).
    #[arg(long, value_name = "HEX")]
    certificate_sha256: Option<String>,
}

impl IdentityArgs {
    fn identity(&self) -> Result<crate::store::PeerIdentity, CliError> {
        use crate::store::PeerIdentity;
        PeerIdentity::one_of(
            self.issuer.as_deref(),
            self.subject.as_deref(),
            self.certificate_san.as_deref(),
            self.certificate_sha256.as_deref(),
        )
        .unwrap_or_else(|| {
            Err(
                "give --issuer and --subject, or --certificate-san, or --certificate-sha256"
                    .to_owned(),
            )
        })
        .map_err(CliError::new)
    }
}

/// `peer add`'s optional identity.
#[derive(Debug, clap::Args)]
pub(super) struct OptionalIdentity {
    /// Bind this identity provider's subject to the new peer (with --subject).
    #[arg(long, value_name = "NAME", requires = "subject")]
    issuer: Option<String>,
    /// The token's client_id (else its sub) that names the new peer (with --issuer).
    #[arg(long, value_name = "VALUE", requires = "issuer")]
    subject: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(super) enum PeerCommand {
    /// Add a peer and print its token, alone, on stdout. The token is shown only this once.
    Add(AddArgs),
    /// Bind an identity to a peer: an identity provider's subject (`--issuer NAME --subject
    /// VALUE`, VALUE being the token's client_id, else its sub), or a client certificate
    /// (`--certificate-san VALUE`, a URI SAN such as a SPIFFE id or a DNS SAN, or
    /// `--certificate-sha256 HEX`). One identity opens the door for one peer only.
    Bind {
        /// The peer's name.
        name: String,
        #[command(flatten)]
        identity: IdentityArgs,
        /// The policy whose identity providers an `--issuer` must be one of [default: the one
        /// the gateway on this data directory serves with, else policies/default.toml, else
        /// the built-in defaults].
        #[arg(long = "policy", value_name = "FILE")]
        policy: Option<PathBuf>,
        #[command(flatten)]
        data: DataDir,
    },
    /// Unbind an identity from a peer (the same arguments as `peer bind`).
    Unbind {
        /// The peer's name.
        name: String,
        #[command(flatten)]
        identity: IdentityArgs,
        #[command(flatten)]
        data: DataDir,
    },
    /// List peers: name, owner, status, limit, created, last used, expiry. Never a secret.
    List {
        /// A JSON array, one object per peer.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataDir,
    },
    /// Set when a peer stops being let in (RFC 3339 with any offset, a date, or an age from
    /// now such as `30d`), or `never`.
    Expire {
        /// The peer's name.
        name: String,
        /// RFC 3339 with any offset (2027-01-31T00:00:00Z), a date (2027-01-31), an age from
        /// now (30m, 24h, 7d), or `never`.
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
    /// Set how many streams (SendStreamingMessage, SubscribeToTask) a peer may hold open at
    /// once, e.g. `peergate peer streams NAME 32`; `default` gives it the policy's
    /// `limits.streams_per_peer` again.
    Streams {
        /// The peer's name.
        name: String,
        /// Streams at once (1 to 10000), or `default`.
        #[arg(value_name = "N|default")]
        streams: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Whether a peer's own trace context is continued when traces are exported: `trusted`
    /// (its traceparent becomes the parent of its calls' spans) or `linked` (a trace of
    /// peergate's own, linked to the peer's: the default), e.g. `peergate peer trace NAME
    /// trusted`.
    Trace {
        /// The peer's name.
        name: String,
        /// `trusted` or `linked`.
        #[arg(value_name = "trusted|linked")]
        trust: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Limit the A2A operations a peer may call, on every binding: `read-only` (GetTask,
    /// ListTasks, SubscribeToTask, GetExtendedAgentCard), a list such as
    /// `GetTask,ListTasks`, or `all` again, e.g. `peergate peer operations NAME read-only`.
    Operations {
        /// The peer's name.
        name: String,
        /// `read-only`, `all`, or operations' names separated by commas.
        #[arg(value_name = "read-only|all|LIST")]
        operations: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Give a peer a daily token budget of its own, besides its owner's, e.g. `peergate peer
    /// budget NAME --tokens-per-day 50000`; `none` leaves it only its owner's.
    Budget {
        /// The peer's name.
        name: String,
        /// Tokens per UTC day (at least 1), or `none`.
        #[arg(long, value_name = "N|none")]
        tokens_per_day: String,
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
    /// Let a revoked peer in again under its name, with a new token printed alone on stdout
    /// (shown once); its old credentials stay revoked, its audit records and conversations
    /// stay its own. Peers are reinstated, never deleted, so a name is never reused by another
    /// partner.
    Reinstate {
        /// The peer's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
}

pub(super) async fn run(command: PeerCommand) -> Result<(), CliError> {
    match command {
        PeerCommand::Add(args) => add(args).await,
        PeerCommand::List { json, data } => list(&data, json).await,
        PeerCommand::Bind {
            name,
            identity,
            policy,
            data,
        } => {
            let (policy, _) = super::policy_for_defaults(policy.as_deref(), &data)?;
            bind(&name, &identity.identity()?, &data, Some(&policy)).await
        }
        PeerCommand::Unbind {
            name,
            identity,
            data,
        } => bind(&name, &identity.identity()?, &data, None).await,
        PeerCommand::Limit { name, rate, data } => {
            change(&name, &data, PeerChange::Limit(rate)).await?;
            eprintln!("peer {name} may now make {rate} requests a minute. {CACHE_NOTE}");
            Ok(())
        }
        PeerCommand::Streams {
            name,
            streams,
            data,
        } => set_streams(&name, &streams, &data).await,
        PeerCommand::Trace { name, trust, data } => set_trace_trust(&name, &trust, &data).await,
        PeerCommand::Operations {
            name,
            operations,
            data,
        } => set_operations(&name, &operations, &data).await,
        PeerCommand::Expire { name, when, data } => expire(&name, &when, &data).await,
        PeerCommand::Budget {
            name,
            tokens_per_day,
            data,
        } => set_budget(&name, &tokens_per_day, &data).await,
        PeerCommand::Password { name, data } => {
            let password = read_password(&format!("peer {name}"))?;
            change(&name, &data, PeerChange::Password(NewPassword(password))).await?;
            eprintln!("password set for peer {name} (stored as an Argon2id hash).");
            Ok(())
        }
        PeerCommand::Key { name, data } => issue_key(&name, &data).await,
        PeerCommand::Rotate { name, grace, data } => {
            let grace = std::time::Duration::from_secs(grace);
            let rotated = change(&name, &data, PeerChange::Rotate(grace)).await?;
            print_rotated(&name, &rotated);
            Ok(())
        }
        PeerCommand::Revoke { name, data } => {
            change(&name, &data, PeerChange::Revoke).await?;
            eprintln!("revoked peer {name}. {CACHE_NOTE}");
            Ok(())
        }
        PeerCommand::Reinstate { name, data } => reinstate(&name, &data).await,
    }
}

/// `peer list`: every peer with its bindings.
async fn list(data: &DataDir, json: bool) -> Result<(), CliError> {
    let (peers, identities, credentials) = on_store(data, None, async |accounts| {
        let caller = Caller::operator();
        Ok((
            accounts.list_peers(&caller).await?,
            accounts.identities(&caller).await?,
            accounts.credential_kinds(&caller).await?,
        ))
    })
    .await?;
    let holdings = (&identities, &credentials);
    match json {
        true => println!("{}", peers_json(&peers, holdings)),
        false => print_peers(peers, holdings),
    }
    Ok(())
}

/// What the peers hold, by peer id: the identities bound, and the kinds of credential issued.
type Holdings<'a> = (
    &'a std::collections::HashMap<String, Vec<crate::store::PeerIdentity>>,
    &'a std::collections::HashMap<String, Vec<String>>,
);

/// The peers as JSON: what the table shows, with each identity bound.
fn peers_json(
    peers: &[crate::store::PeerRecord],
    (identities, credentials): Holdings<'_>,
) -> serde_json::Value {
    let now = crate::clock::SystemClock.now();
    let when = |t: Option<crate::clock::Timestamp>| t.map(rfc3339_millis);
    let listed: Vec<serde_json::Value> = peers
        .iter()
        .map(|peer| {
            let bound: Vec<String> = identities
                .get(peer.id.as_str())
                .into_iter()
                .flatten()
                .map(crate::store::PeerIdentity::describe)
                .collect();
            serde_json::json!({
                "name": peer.name, "id": peer.id.as_str(), "status": peer.standing(now),
                "ratePerMinute": peer.rate_per_minute, "maxStreams": peer.max_streams,
                "tokensPerDay": peer.tokens_per_day, "owner": peer.owner_name,
                "createdAt": rfc3339_millis(peer.created_at), "lastUsedAt": when(peer.last_used_at),
                "expiresAt": when(peer.expires_at), "identities": bound,
                "credentials": credentials.get(peer.id.as_str()).cloned().unwrap_or_default(),
                "operations": peer.operations.map(|set| set.names()),
            })
        })
        .collect();
    serde_json::Value::Array(listed)
}

/// `peer bind` (`bind`) and `peer unbind`: one identity to or from the peer.
/// Binds `identity` to the peer `name`, its issuer checked against `policy`'s; without a
/// policy, unbinds it (an identity of an issuer since removed from the policy may still be).
async fn bind(
    name: &str,
    identity: &crate::store::PeerIdentity,
    data: &DataDir,
    policy: Option<&Policy>,
) -> Result<(), CliError> {
    let bind = policy.is_some();
    on_store(data, policy, async |accounts| {
        let change = match bind {
            true => PeerChange::BindIdentity(identity.clone()),
            false => PeerChange::UnbindIdentity(identity.clone()),
        };
        accounts
            .change_peer(&Caller::operator(), name, change)
            .await
    })
    .await?;
    match bind {
        true => eprintln!("bound {} to peer {name}.", identity.describe()),
        false => eprintln!(
            "unbound {} from peer {name}. {CACHE_NOTE}",
            identity.describe()
        ),
    }
    Ok(())
}

/// Applies one change to the peer `name`, as the operator; what it gave back.
async fn change(name: &str, data: &DataDir, change: PeerChange) -> Result<PeerChanged, CliError> {
    on_store(data, None, async |accounts| {
        accounts
            .change_peer(&Caller::operator(), name, change)
            .await
    })
    .await
}

/// `peer trace`: whether the peer's own trace context is continued.
/// `peer operations NAME read-only|all|LIST`.
async fn set_operations(name: &str, operations: &str, data: &DataDir) -> Result<(), CliError> {
    use crate::protocol::operations::OperationSet;
    let set = match operations.trim() {
        "all" => None,
        text => Some(
            OperationSet::parse(text)
                .map_err(|why| CliError::new(format!("cannot read {operations:?}: {why}")))?,
        ),
    };
    change(name, data, PeerChange::Operations(set)).await?;
    let shown = set.map_or_else(
        || "every operation the policy offers".to_owned(),
        |set| set.names().join(", "),
    );
    eprintln!("peer {name} may now call {shown}. {CACHE_NOTE}");
    Ok(())
}

async fn set_trace_trust(name: &str, trust: &str, data: &DataDir) -> Result<(), CliError> {
    let trusted = match trust {
        "trusted" => true,
        "linked" => false,
        _ => {
            return Err(CliError::new(format!(
                "cannot read {trust:?}: give trusted (continue the peer's trace) or linked (a trace of peergate's own, linked to the peer's)"
            )));
        }
    };
    change(name, data, PeerChange::TraceTrust(trusted)).await?;
    let shown = match trusted {
        true => "continue the trace its traceparent names",
        false => "start traces of their own, linked to the one its traceparent names",
    };
    eprintln!("peer {name}'s calls now {shown}. {CACHE_NOTE}");
    Ok(())
}

/// `peer streams`: the peer's own cap on open streams, or the policy's.
async fn set_streams(name: &str, streams: &str, data: &DataDir) -> Result<(), CliError> {
    let cap = stream_cap(streams)?;
    change(name, data, PeerChange::Streams(cap)).await?;
    let shown = cap.map_or_else(|| "the policy's number of".to_owned(), |n| n.to_string());
    eprintln!("peer {name} may now hold {shown} streams open at once. {CACHE_NOTE}");
    Ok(())
}

/// `peer expire`: when the peer's credentials stop working, or never.
async fn expire(name: &str, when: &str, data: &DataDir) -> Result<(), CliError> {
    let at = expiry(when)?;
    change(name, data, PeerChange::Expiry(at)).await?;
    match at {
        Some(at) => eprintln!(
            "peer {name} expires at {}. {CACHE_NOTE}",
            rfc3339_millis(at)
        ),
        None => eprintln!("peer {name} no longer expires."),
    }
    Ok(())
}

/// `peer key`: a new API key, printed once.
async fn issue_key(name: &str, data: &DataDir) -> Result<(), CliError> {
    let key = change(name, data, PeerChange::ApiKey).await?.secret;
    eprintln!(
        "issued an API key for peer {name}; any earlier key stopped working. It is on stdout and is not shown again."
    );
    println!("{}", key.unwrap_or_default());
    Ok(())
}

/// `peer reinstate`: a revoked peer back, with a new token printed once.
async fn reinstate(name: &str, data: &DataDir) -> Result<(), CliError> {
    let token = change(name, data, PeerChange::Reinstate).await?.secret;
    eprintln!(
        "reinstated peer {name}: its new token is on stdout and is not shown again; its old credentials stay revoked."
    );
    println!("{}", token.unwrap_or_default());
    Ok(())
}

/// `peer add`: creates the peer (and binds its identity, when one is given) and prints its
/// token.
async fn add(args: AddArgs) -> Result<(), CliError> {
    let AddArgs {
        name,
        owner,
        rate,
        policy,
        identity,
        no_token,
        token,
        data,
    } = args;
    let identity = match (&identity.issuer, &identity.subject) {
        (Some(issuer), Some(subject)) => {
            Some(crate::store::PeerIdentity::token(issuer, subject).map_err(CliError::new)?)
        }
        _ => None,
    };
    // A peer that signs in with its identity provider's tokens needs no token of ours: one
    // would be a second way in nobody asked for.
    let no_token = no_token || (identity.is_some() && !token);
    let (policy, source) = super::policy_for_defaults(policy.as_deref(), &data)?;
    let created = super::on_new_or_existing_store(&data, Some(&policy), async |accounts| {
        let created = accounts
            .create_peer(
                &Caller::operator(),
                NewPeer {
                    name: name.clone(),
                    owner,
                    rate_per_minute: rate,
                    expires_at: None,
                    without_token: no_token,
                },
            )
            .await?;
        if let Some(identity) = &identity {
            let change = PeerChange::BindIdentity(identity.clone());
            accounts
                .change_peer(&Caller::operator(), &name, change)
                .await?;
        }
        Ok(created)
    })
    .await?;
    if let Some(identity) = &identity {
        eprintln!("bound {} to peer {name}.", identity.describe());
    }
    let (id, owner, rate) = (
        &created.peer.id,
        &created.peer.owner_name,
        created.peer.rate_per_minute,
    );
    match &created.token {
        Some(token) => {
            eprintln!(
                "added peer {name} ({id}, owned by {owner}, {rate}/min; defaults from {source}). Its token is on stdout and is not shown again."
            );
            println!("{token}");
        }
        None if identity.is_some() => eprintln!(
            "added peer {name} ({id}, owned by {owner}, {rate}/min; defaults from {source}) with no token of peergate's: it signs in with its identity provider's tokens (add --token to issue one too)."
        ),
        None => eprintln!(
            "added peer {name} ({id}, owned by {owner}, {rate}/min; defaults from {source}) with no token: give it a password (peer password), an API key (peer key) or an identity (peer bind)."
        ),
    }
    Ok(())
}

/// `peer budget`: the peer's own daily budget, or none.
async fn set_budget(name: &str, tokens_per_day: &str, data: &DataDir) -> Result<(), CliError> {
    let budget = match tokens_per_day {
        "none" => None,
        n => Some(n.parse::<u64>().map_err(|_| {
            CliError::new(format!(
                "cannot read --tokens-per-day {n:?}: give a number of tokens, or none"
            ))
        })?),
    };
    change(name, data, PeerChange::Budget(budget)).await?;
    match budget {
        Some(n) => eprintln!(
            "peer {name} may now spend {n} tokens a day (and no more than its owner's budget allows). {CACHE_NOTE}"
        ),
        None => eprintln!("peer {name} now spends only from its owner's budget. {CACHE_NOTE}"),
    }
    Ok(())
}

/// `peer streams`' cap: a number, or `default` for the policy's.
fn stream_cap(streams: &str) -> Result<Option<u32>, CliError> {
    if streams == "default" {
        return Ok(None);
    }
    streams.parse::<u32>().map(Some).map_err(|_| {
        CliError::new(format!(
            "cannot read the stream cap {streams:?}: give a number from 1 to 10000, or default"
        ))
    })
}

/// `peer expire`'s time: `never`, or a time as `parse_when` reads it, from now.
fn expiry(when: &str) -> Result<Option<crate::clock::Timestamp>, CliError> {
    if when == "never" {
        return Ok(None);
    }
    super::parse_when(
        when,
        crate::clock::SystemClock.now(),
        crate::clock::Relative::FromNow,
    )
    .map(Some)
}

/// What `peer rotate` says, and the new token on stdout.
fn print_rotated(name: &str, rotated: &PeerChanged) {
    match rotated.previous_valid_until {
        Some(until) => eprintln!(
            "issued a new token for peer {name}; the old one works until {}. The new token is on stdout and is not shown again.",
            rfc3339_millis(until)
        ),
        None => eprintln!(
            "issued a new token for peer {name}; the old one stopped. {CACHE_NOTE} The new token is on stdout and is not shown again."
        ),
    }
    println!("{}", rotated.secret.as_deref().unwrap_or_default());
}

/// The peer table: never a secret. Each bound identity follows its peer on a line of its own.
fn print_peers(peers: Vec<crate::store::PeerRecord>, (identities, credentials): Holdings<'_>) {
    let now = crate::clock::SystemClock.now();
    println!(
        "{:<24} {:<37} {:<8} {:>10}  {:<24} {:<24} {:<16} {:<24}",
        "NAME", "ID", "STATUS", "LIMIT", "CREATED", "LAST USED", "OWNER", "EXPIRES"
    );
    for peer in peers {
        println!(
            "{:<24} {:<37} {:<8} {:>10}  {:<24} {:<24} {:<16} {:<24}",
            peer.name,
            peer.id,
            peer.standing(now),
            format!("{}/min", peer.rate_per_minute),
            rfc3339_millis(peer.created_at),
            peer.last_used_at
                .map_or_else(|| "never".to_owned(), rfc3339_millis),
            peer.owner_name,
            peer.expires_at
                .map_or_else(|| "never".to_owned(), rfc3339_millis),
        );
        if let Some(budget) = peer.tokens_per_day {
            println!("  budget: {budget} tokens a day");
        }
        if let Some(kinds) = credentials.get(peer.id.as_str()) {
            println!("  credentials: {}", kinds.join(", "));
        }
        if let Some(operations) = peer.operations {
            println!("  operations: {}", operations.names().join(", "));
        }
        for identity in identities.get(peer.id.as_str()).into_iter().flatten() {
            println!("  bound: {}", identity.describe());
        }
    }
}
