//! The operator's policy file (TOML).
//!
//! Every key is documented in `policies/default.toml`, which is also embedded in the binary so
//! that `peergate serve` runs with no files at all. Unknown keys are refused, and every error
//! names the file and the key, so a typo never silently falls back to a default.

mod accounts;
mod auth;
pub mod authorization;
mod capabilities;
mod card;
mod cluster;
mod gate;
pub mod grpc;
mod limits;
mod log;
mod model;
mod push;
mod server;
mod signing;
mod tasks;
mod telemetry;

pub use accounts::{BudgetsPolicy, PeersPolicy};
pub use auth::{AuthPolicy, IssuerPolicy};
pub use capabilities::CapabilitiesPolicy;
pub use cluster::ClusterPolicy;
pub use gate::GatePolicy;
pub use limits::LimitsPolicy;
pub use log::{LogFormat, LogPolicy};

pub use push::PushPolicy;
pub use server::{ServerPolicy, check_admin_listen};
pub use signing::{SigningKeyPolicy, SigningPolicy};
pub use tasks::{TasksPolicy, UnreadParts};
pub use telemetry::{PartnerContextPolicy, TelemetryPolicy};

use crate::guard::cidr::Cidr;
use crate::guard::scheme::Scheme;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A key whose value is outside what it allows, and why; the source is added by the caller.
pub(crate) struct Invalid {
    key: std::borrow::Cow<'static, str>,
    reason: String,
}

fn invalid(key: impl Into<std::borrow::Cow<'static, str>>, reason: impl Into<String>) -> Invalid {
    Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

/// The policy shipped in the repository and embedded in the binary.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../policies/default.toml");

/// Where a policy came from, for logs and error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// A file the operator named or the default path.
    File(PathBuf),
    /// The copy of `policies/default.toml` compiled into the binary.
    Embedded,
}

impl std::fmt::Display for PolicySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Embedded => f.write_str("<embedded policies/default.toml>"),
        }
    }
}

/// Why a policy could not be used. Each message is one line naming the source and the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy {source_name}: {reason}")]
    Unreadable {
        /// The file.
        source_name: PolicySource,
        /// The operating system's reason.
        reason: String,
    },
    /// The TOML is malformed or has an unknown key or a value of the wrong type.
    #[error("invalid policy {source_name}{location}: {reason}")]
    Syntax {
        /// The file.
        source_name: PolicySource,
        /// ` (line N)` when known.
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// A key's value fails a check made once the whole policy is read (one that spans keys
    /// or sections; a value out of its own range is refused while it is read, as `Syntax`).
    #[error("invalid policy {source_name}: key `{key}`: {reason}")]
    Invalid {
        /// The file.
        source_name: PolicySource,
        /// The dotted key.
        key: std::borrow::Cow<'static, str>,
        /// What is wrong.
        reason: String,
    },
}

impl PolicyError {
    /// What is wrong, without the file's path: for an answer that leaves the machine (the
    /// admin API's reload).
    pub fn without_source(&self) -> String {
        match self {
            Self::Unreadable { reason, .. } => format!("cannot read the policy file: {reason}"),
            Self::Syntax {
                location, reason, ..
            } => format!("invalid policy{location}: {reason}"),
            Self::Invalid { key, reason, .. } => format!("invalid policy: key `{key}`: {reason}"),
        }
    }
}

/// The whole policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// `[server]`
    pub server: ServerPolicy,
    /// `[card]`
    pub card: crate::a2a::card_settings::CardSection,
    /// `[model]`
    pub model: crate::backend::settings::ModelSettings,
    /// `[peers]`
    #[serde(default)]
    pub peers: PeersPolicy,
    /// `[tasks]`
    #[serde(default)]
    pub tasks: TasksPolicy,
    /// `[auth]`
    #[serde(default)]
    pub auth: AuthPolicy,
    /// `[limits]`
    #[serde(default)]
    pub limits: LimitsPolicy,
    /// `[gate]`
    #[serde(default)]
    pub gate: GatePolicy,
    /// `[signing]`
    #[serde(default)]
    pub signing: SigningPolicy,
    /// `[budgets]`
    #[serde(default)]
    pub budgets: BudgetsPolicy,
    /// `[cluster]`
    #[serde(default)]
    pub cluster: ClusterPolicy,
    /// `[capabilities]`
    #[serde(default)]
    pub capabilities: CapabilitiesPolicy,
    /// `[push]`
    #[serde(default)]
    pub push: PushPolicy,
    /// `[log]`
    #[serde(default)]
    pub log: LogPolicy,
    /// `[receipts]`: signed receipts of finished tasks.
    #[serde(default)]
    pub receipts: crate::a2a::receipts::ReceiptSettings,
    /// `[grpc]`: the gRPC binding, when present.
    #[serde(default)]
    pub grpc: Option<grpc::GrpcPolicy>,
    /// `[telemetry]`
    #[serde(default)]
    pub telemetry: TelemetryPolicy,
    /// `[admin]`
    #[serde(default)]
    pub admin: AdminPolicy,
    /// `[content_guard]`: what is inspected of what passes through the door.
    #[serde(default)]
    pub content_guard: crate::content::ContentGuardSettings,
    /// `[authorization]`: Cedar policies, when present.
    #[serde(default)]
    pub authorization: Option<authorization::AuthorizationPolicy>,
    /// The dotted keys the operator's file set to something other than the embedded default.
    #[serde(skip)]
    operator_set: std::collections::BTreeSet<String>,
    /// The policy in effect: the operator's file over the embedded defaults.
    #[serde(skip)]
    effective: toml::Table,
}

/// `[admin]`: how administrators sign in besides peergate's own passwords and tokens.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminPolicy {
    /// `[admin.issuer]`: the organisation's identity provider, whose access tokens (for the
    /// admin API's audience) sign in the administrator bound to their subject
    /// (`peergate admin bind NAME --subject VALUE`).
    #[serde(default)]
    pub issuer: Option<auth::IssuerPolicy>,
    /// Administrators who may reload the policy through the admin API
    /// (`POST /v1/policy/reload`); none by default: the file is the operator's, who reloads
    /// with `SIGHUP`.
    #[serde(default)]
    pub reloaders: Vec<String>,
}

impl Policy {
    /// Reads `path`, or the default path, falling back to the embedded copy only when no path
    /// was given and the default file does not exist.
    pub fn load(path: Option<&Path>) -> Result<(Self, PolicySource), PolicyError> {
        let (text, source) = match path {
            Some(path) => (read_policy_file(path)?, PolicySource::File(path.to_owned())),
            None => {
                let default = Path::new("policies/default.toml");
                if default.exists() {
                    (
                        read_policy_file(default)?,
                        PolicySource::File(default.to_owned()),
                    )
                } else {
                    (EMBEDDED_DEFAULT.to_owned(), PolicySource::Embedded)
                }
            }
        };
        let policy = Self::parse(&text, &source)?;
        Ok((policy, source))
    }

    /// Parses policy text over the embedded defaults, and validates the result. The text
    /// holds only what differs: its tables merge into the defaults key by key, and anything
    /// else it sets (a value, an array, an array of tables) replaces the default's. A full
    /// copy of `policies/default.toml` is such a text too.
    pub fn parse(text: &str, source: &PolicySource) -> Result<Self, PolicyError> {
        let syntax = |e: toml::de::Error| PolicyError::Syntax {
            source_name: source.clone(),
            location: e
                .span()
                .map(|span| describe_location(text, span.start))
                .unwrap_or_default(),
            reason: e.message().replace('\n', " ").trim().to_owned(),
        };
        let operator: toml::Table = toml::from_str(text).map_err(syntax)?;
        let defaults = embedded_defaults();
        let mut merged = defaults.clone();
        layer(&mut merged, operator.clone());
        let mut policy = Policy::deserialize(merged.clone()).map_err(|e| {
            let (reason, key) = split_error(&e);
            PolicyError::Syntax {
                source_name: source.clone(),
                location: key
                    .map(|key| match line_of(text, &key) {
                        Some(line) => format!(" (line {line}, key `{key}`)"),
                        None => format!(" (key `{key}`)"),
                    })
                    .unwrap_or_default(),
                reason,
            }
        })?;
        let mut set = std::collections::BTreeSet::new();
        changed_keys("", &operator, Some(&defaults), &mut set);
        policy.operator_set = set;
        policy.effective = merged;
        // `default_owner = ""` is how a layered policy says "none".
        policy.peers.default_owner = policy.peers.default_owner.filter(|o| !o.is_empty());
        policy.validate(source)?;
        Ok(policy)
    }

    /// The dotted keys whose values differ between this policy in effect and `other`'s (a
    /// key either lacks counts), in order; an array is one key.
    pub fn differing_keys(&self, other: &Policy) -> std::collections::BTreeSet<String> {
        let mut keys = std::collections::BTreeSet::new();
        changed_keys("", &self.effective, Some(&other.effective), &mut keys);
        changed_keys("", &other.effective, Some(&self.effective), &mut keys);
        keys
    }

    /// This policy with the values at the dotted `keys` taken from `other` (or removed where
    /// `other` has none), in effect and as the typed tables are read from it again, all at
    /// once (a table that appears or goes, such as `[card.provider]`, is several keys that
    /// only make sense together). For a reload, which applies some keys of a new file and
    /// keeps the rest. `other` was checked whole when it was read; the merge is not checked
    /// again as a file would be, since it joins values no one wrote together (a door started
    /// with `"jwt"` keeps it until a restart, even when the file's last provider is gone:
    /// then every provider's token is refused): the parts built from it are what must work.
    pub fn with_keys_of(&self, other: &Policy, keys: &[String]) -> Result<Policy, PolicyError> {
        let mut effective = self.effective.clone();
        for key in keys {
            take_key(&mut effective, &other.effective, key);
        }
        let source = PolicySource::Embedded;
        let mut policy =
            Policy::deserialize(effective.clone()).map_err(|e| PolicyError::Syntax {
                source_name: source.clone(),
                location: String::new(),
                reason: e.to_string(),
            })?;
        policy.operator_set = self.operator_set.clone();
        policy.effective = effective;
        policy.peers.default_owner = policy.peers.default_owner.filter(|o| !o.is_empty());
        // The command line's door URL is the struct's, not the file's: kept.
        policy.server.public_base_url = self.server.public_base_url.clone();
        Ok(policy)
    }

    /// The policy in effect as TOML: the operator's file over the embedded defaults. It holds
    /// no secret: the policy names the environment variables that hold them.
    pub fn effective_text(&self) -> String {
        toml::to_string_pretty(&self.effective).unwrap_or_default()
    }

    /// Whether the operator's policy sets `key` (dotted, e.g. `card.name`) to something other
    /// than the embedded default.
    pub fn sets(&self, key: &str) -> bool {
        self.operator_set.contains(key)
    }

    /// What several instances serving one store must share that this policy does not name:
    /// each as the setting and why. Start-up refuses a shared store with any of them missing
    /// (the push key only when push notifications are on).
    pub fn missing_for_several_instances(&self) -> Vec<(&'static str, &'static str)> {
        let mut missing = Vec::new();
        if self.server.public_base_url.is_none() {
            missing.push((
                "server.public_base_url",
                "the card names the door's URL, and every instance must name the load balancer's",
            ));
        }
        if self.signing.keys.is_empty() {
            missing.push((
                "[[signing.keys]]",
                "a key generated in each data directory would differ per instance; give every instance the same key files or secrets",
            ));
        }
        if self.capabilities.push_notifications
            && self.push.key_env.is_none()
            && self.push.key_file.is_none()
        {
            missing.push((
                "push.key_env or push.key_file",
                "the key that seals push configs in the shared store must be the same on every instance (`peergate keys push` writes one)",
            ));
        }
        if self.receipts.mode != crate::a2a::receipts::ReceiptMode::Off
            && self.signing.receipt_keys.is_empty()
        {
            missing.push((
                "signing.receipt_keys",
                "every instance must sign receipts with keys every instance's card names (a key generated by one instance would not verify against another's card)",
            ));
        }
        if self.receipts.mode != crate::a2a::receipts::ReceiptMode::Off
            && self.receipts.log_key_file.is_none()
        {
            missing.push((
                "receipts.log_key_file",
                "every instance must sign the answer log's checkpoints with the one key the cards name (a key generated by one instance would not verify another's checkpoints)",
            ));
        }
        missing
    }

    /// The log key is never a receipt key, nor one of the log's retired keys (by file).
    fn receipts_keys_apart(&self) -> Result<(), Invalid> {
        let Some(log) = &self.receipts.log_key_file else {
            return Ok(());
        };
        let receipt_key = (self.signing.receipt_keys.iter()).any(|key| {
            key.private_key_file.as_deref().map(std::path::Path::new) == Some(log.as_path())
        });
        if receipt_key {
            return Err(invalid(
                "receipts.log_key_file",
                "is also a receipt key's file (signing.receipt_keys): the log's checkpoints need a key of their own",
            ));
        }
        if self.receipts.retired_log_key_files.contains(log) {
            return Err(invalid(
                "receipts.log_key_file",
                "is also in receipts.retired_log_key_files",
            ));
        }
        Ok(())
    }

    /// Puts the command line's (or `PEERGATE_PUBLIC_BASE_URL`'s) door URL in place of the
    /// policy's, with the same checks as the policy's own value.
    pub fn override_public_base_url(
        &mut self,
        url: Option<String>,
        source: &PolicySource,
    ) -> Result<(), PolicyError> {
        let Some(url) = url else {
            return Ok(());
        };
        self.server.public_base_url = Some(url);
        self.validate(source)
    }

    fn validate(&self, source: &PolicySource) -> Result<(), PolicyError> {
        self.check()
            .map_err(|Invalid { key, reason }| PolicyError::Invalid {
                source_name: source.clone(),
                key,
                reason,
            })
    }

    /// Every section's own checks, then the ones that span sections.
    fn check(&self) -> Result<(), Invalid> {
        self.server.validate()?;
        // A message may wait for the one ahead in its context (1.5 × the model's timeout) and
        // then take the model's whole timeout itself: the request timeout must leave room for
        // both.
        if self.server.request_timeout_seconds.get().saturating_mul(2)
            <= self.model.timeout_seconds.get().saturating_mul(5)
        {
            return Err(invalid(
                "server.request_timeout_seconds",
                "must be more than 2.5 × model.timeout_seconds (a message may wait for the one ahead of it, then for the model)",
            ));
        }
        self.peers.validate()?;
        self.budgets.validate()?;
        self.capabilities.validate()?;
        if let Some(grpc) = &self.grpc {
            grpc.validate()?;
        }
        self.push.validate()?;
        self.telemetry.validate()?;
        self.log.validate()?;
        self.card.validate()?;
        self.signing.validate()?;
        self.receipts_keys_apart()?;
        // Compiled once here to refuse a rule by name; the door compiles it again to use.
        if let Err(e) = crate::content::ContentRules::compile(&self.content_guard) {
            return Err(invalid(e.key(), e.to_string()));
        }
        let inspector = self.content_guard.inspector.as_ref();
        if let Some((key, why)) = inspector.and_then(|i| i.problem()) {
            return Err(invalid(key, why));
        }
        self.model.validate()?;
        self.auth.validate()?;
        if let Some(issuer) = &self.admin.issuer {
            issuer.validate_as("admin.issuer")?;
        }
        // Client certificates need the door's own TLS and a CA to check them against, or a
        // trusted proxy that checked them.
        let forwarded = &self.auth.forwarded_client_certificate_header;
        if let Some(header) = forwarded {
            if axum::http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(invalid(
                    "auth.forwarded_client_certificate_header",
                    "is not a header name",
                ));
            }
            if self.server.trusted_proxies.is_empty() {
                return Err(invalid(
                    "auth.forwarded_client_certificate_header",
                    "is read from server.trusted_proxies only, and none is listed",
                ));
            }
        }
        if self.auth.schemes.contains(&Scheme::Mtls)
            && forwarded.is_none()
            && self
                .server
                .tls
                .as_ref()
                .is_none_or(|tls| tls.client_ca_file.is_none())
        {
            return Err(invalid(
                "auth.schemes",
                "\"mtls\" needs [server.tls] with client_ca_file, or a trusted proxy forwarding the certificate (auth.forwarded_client_certificate_header)",
            ));
        }
        Ok(())
    }
}

/// The embedded defaults as a table (they are checked to parse by the tests).
fn embedded_defaults() -> toml::Table {
    static DEFAULTS: std::sync::OnceLock<toml::Table> = std::sync::OnceLock::new();
    DEFAULTS
        .get_or_init(|| toml::from_str(EMBEDDED_DEFAULT).unwrap_or_default())
        .clone()
}

/// Lays `over` onto `base`: tables merge key by key; anything else replaces.
fn layer(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(base)), toml::Value::Table(over)) => layer(base, over),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The dotted keys `over` sets to something other than `base` does (a table's keys one by one).
/// Puts the value at dotted `key` of `from` into `into` (or removes it there when `from` has
/// none), creating the tables on the way.
fn take_key(into: &mut toml::Table, from: &toml::Table, key: &str) {
    let path: Vec<&str> = key.split('.').collect();
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut theirs = Some(from);
    let mut ours = into;
    for parent in parents {
        theirs = theirs
            .and_then(|t| t.get(*parent))
            .and_then(toml::Value::as_table);
        ours = match ours
            .entry((*parent).to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        {
            toml::Value::Table(table) => table,
            _ => return,
        };
    }
    match theirs.and_then(|t| t.get(*last)) {
        Some(value) => ours.insert((*last).to_owned(), value.clone()),
        None => ours.remove(*last),
    };
}

fn changed_keys(
    prefix: &str,
    over: &toml::Table,
    base: Option<&toml::Table>,
    out: &mut std::collections::BTreeSet<String>,
) {
    for (key, value) in over {
        let dotted = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let default = base.and_then(|base| base.get(key));
        match value {
            toml::Value::Table(table) => {
                let default = default.and_then(toml::Value::as_table);
                changed_keys(&dotted, table, default, out);
            }
            value if Some(value) != default => {
                out.insert(dotted);
            }
            _ => {}
        }
    }
}

/// A deserialization error's reason, and the dotted key it is about (an unknown key's own
/// name, or the key whose value was wrong).
fn split_error(error: &toml::de::Error) -> (String, Option<String>) {
    let text = error.to_string();
    let (reason, path) = match text.split_once("\nin `") {
        Some((reason, rest)) => (reason, rest.split('`').next()),
        None => (text.as_str(), None),
    };
    let unknown = reason
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next());
    let key = match (path, unknown) {
        (Some(path), Some(field)) => Some(format!("{path}.{field}")),
        (None, Some(field)) => Some(field.to_owned()),
        (Some(path), None) => Some(path.to_owned()),
        (None, None) => None,
    };
    (reason.replace('\n', " ").trim().to_owned(), key)
}

/// The line of `text` that sets the dotted `key` (or opens it as a table), if it does.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let mut table = String::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = table_header(line) {
            table = header.trim().to_owned();
            if table == key {
                return Some(number + 1);
            }
            continue;
        }
        let Some((name, _)) = line.split_once('=') else {
            continue;
        };
        let name = name.trim().trim_matches('"');
        if name.is_empty() || name.starts_with('#') {
            continue;
        }
        let dotted = if table.is_empty() {
            name.to_owned()
        } else {
            format!("{table}.{name}")
        };
        if dotted == key {
            return Some(number + 1);
        }
    }
    None
}

/// The table a `[table]` or `[[table]]` header line opens.
fn table_header(line: &str) -> Option<&str> {
    line.strip_prefix("[[")
        .and_then(|l| l.strip_suffix("]]"))
        .or_else(|| line.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
}

/// ` (line N, key `table.key`)` for the byte offset where a TOML error was found.
fn describe_location(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_number = text[..offset].matches('\n').count() + 1;
    let line = text.lines().nth(line_number - 1).unwrap_or("");
    let key = line
        .split_once('=')
        .map(|(key, _)| key.trim().trim_matches('"'))
        .filter(|key| !key.is_empty() && !key.starts_with('#') && !key.starts_with('['));
    let Some(key) = key else {
        return format!(" (line {line_number})");
    };
    // The nearest table header above names the table the key belongs to.
    let table = text
        .lines()
        .take(line_number - 1)
        .filter_map(|l| table_header(l.trim()))
        .last();
    match table {
        Some(table) => format!(" (line {line_number}, key `{}.{key}`)", table.trim()),
        None => format!(" (line {line_number}, key `{key}`)"),
    }
}

impl Policy {
    /// `server.trusted_proxies`.
    pub fn trusted_proxies(&self) -> &[Cidr] {
        &self.server.trusted_proxies
    }

    /// `auth.schemes`, in order, each once.
    pub fn auth_schemes(&self) -> &[Scheme] {
        &self.auth.schemes
    }
}

/// The largest policy file read: the full policy, every key commented, is 20 KB.
pub const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// The policy file's text, at most [`MAX_POLICY_BYTES`]: a file larger than that (or a device
/// such as `/dev/zero`, whose size says nothing) is refused after reading one byte past it.
/// The text of the policy file at `path`, at most [`MAX_POLICY_BYTES`].
pub fn read_policy_file(path: &Path) -> Result<String, PolicyError> {
    use std::io::Read;
    let unreadable = |reason: String| PolicyError::Unreadable {
        source_name: PolicySource::File(path.to_owned()),
        reason,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_POLICY_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| unreadable(e.kind().to_string()))?;
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        return Err(unreadable(format!(
            "larger than {MAX_POLICY_BYTES} bytes; a policy holds only what differs from the defaults"
        )));
    }
    String::from_utf8(bytes).map_err(|_| unreadable("not UTF-8".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_file_past_the_size_bound_is_refused_without_reading_it_all() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.toml");
        // Valid TOML: comment lines only.
        let line = "# a comment line of forty characters.....\n";
        let lines = (MAX_POLICY_BYTES as usize / line.len()) + 2;
        std::fs::write(&big, line.repeat(lines)).unwrap();
        let refused = Policy::load(Some(&big)).unwrap_err().to_string();
        assert!(refused.contains("larger than"), "{refused}");
        let endless = Policy::load(Some(Path::new("/dev/zero")))
            .unwrap_err()
            .to_string();
        assert!(endless.contains("larger than"), "{endless}");
    }

    #[test]
    fn settings_out_of_their_bounds_are_refused_naming_the_key() {
        let refused = |fragment: &str| {
            Policy::parse(fragment, &PolicySource::Embedded)
                .unwrap_err()
                .to_string()
        };
        let series = refused("[telemetry]\npeer_series = 1001\n");
        assert!(series.contains("telemetry.peer_series"), "{series}");
        let header = refused(
            "[model]\nbackend = \"a2a\"\n[model.a2a]\nurl = \"https://agent.example\"\ncaller_header = \"Authorization\"\n",
        );
        assert!(header.contains("model.a2a.caller_header"), "{header}");
        let level = refused("[log]\nlevel = \"info,[\"\n");
        assert!(level.contains("log.level"), "{level}");
    }

    #[test]
    fn a_reload_takes_one_key_of_a_new_policy_and_keeps_the_rest() {
        let running = Policy::parse(
            "[card]\nname = \"Before\"\n[limits]\nper_ip_per_minute = 100\n",
            &PolicySource::Embedded,
        )
        .unwrap();
        let file = Policy::parse(
            "[card]\nname = \"After\"\n[limits]\nper_ip_per_minute = 5\n",
            &PolicySource::Embedded,
        )
        .unwrap();
        let keys: Vec<String> = running.differing_keys(&file).into_iter().collect();
        assert_eq!(keys, ["card.name", "limits.per_ip_per_minute"]);
        let next = running
            .with_keys_of(&file, &["card.name".to_owned()])
            .unwrap();
        assert_eq!(next.card.name, "After");
        assert_eq!(next.limits.per_ip_per_minute.get(), 100);
        let left: Vec<String> = next.differing_keys(&file).into_iter().collect();
        assert_eq!(left, ["limits.per_ip_per_minute"]);
    }

    #[test]
    fn a_table_that_appears_is_taken_whole() {
        let running = Policy::parse("", &PolicySource::Embedded).unwrap();
        let file = Policy::parse(
            "[card.provider]\norganization = \"Example\"\nurl = \"https://example.com\"\n",
            &PolicySource::Embedded,
        )
        .unwrap();
        let keys: Vec<String> = running.differing_keys(&file).into_iter().collect();
        assert_eq!(keys, ["card.provider.organization", "card.provider.url"]);
        let next = running.with_keys_of(&file, &keys).unwrap();
        assert_eq!(next.card.provider.unwrap().organization, "Example");
    }

    #[test]
    fn embedded_default_is_valid() {
        let policy = Policy::parse(EMBEDDED_DEFAULT, &PolicySource::Embedded).unwrap();
        assert_eq!(
            policy.model.backend,
            crate::backend::settings::BackendKind::Echo
        );
        assert_eq!(policy.server.a2a_path, "/a2a/v1");
        assert_eq!(policy.tasks.retention_hours.get(), 24);
        assert_eq!(policy.tasks.context_messages.get(), 20);
    }

    #[test]
    fn a_fragment_layers_over_the_embedded_defaults() {
        let fragment = "[server]\nlisten = \"127.0.0.1:9000\"\n\n[[card.skills]]\nid = \"x\"\nname = \"X\"\ndescription = \"x\"\ntags = [\"t\"]\n";
        let policy = Policy::parse(fragment, &PolicySource::File("p.toml".into())).unwrap();
        assert_eq!(policy.server.listen.to_string(), "127.0.0.1:9000");
        // Everything else is the default's, and an array replaces the default's whole.
        assert_eq!(policy.server.max_body_bytes.get(), 1_048_576);
        assert_eq!(policy.tasks.retention_hours.get(), 24);
        assert_eq!(policy.card.name, "peergate");
        assert_eq!(policy.card.skills.len(), 1);
        assert_eq!(policy.card.skills[0].id, "x");
        assert!(policy.sets("server.listen") && policy.sets("card.skills"));
        assert!(!policy.sets("card.name") && !policy.sets("server.max_body_bytes"));
        // A full copy of the defaults sets nothing; an empty file is the defaults.
        let copy = Policy::parse(EMBEDDED_DEFAULT, &PolicySource::Embedded).unwrap();
        assert!(copy.operator_set.is_empty(), "{:?}", copy.operator_set);
        let empty = Policy::parse("", &PolicySource::File("p.toml".into())).unwrap();
        assert_eq!(empty.peers.default_owner.as_deref(), Some("operator"));
        let none = Policy::parse("[peers]\ndefault_owner = \"\"\n", &PolicySource::Embedded);
        assert_eq!(none.unwrap().peers.default_owner, None);
    }

    #[test]
    fn a_fragments_unknown_key_or_wrong_value_names_the_key_and_its_line() {
        for (text, key) in [
            (
                "\n[tasks]\nretention_hourz = 3\n",
                "line 3, key `tasks.retention_hourz`",
            ),
            (
                "[tasks]\nretention_hours = -1\n",
                "line 2, key `tasks.retention_hours`",
            ),
            ("[servr]\nlisten = \"x\"\n", "line 1, key `servr`"),
        ] {
            let err = Policy::parse(text, &PolicySource::File("p.toml".into()))
                .unwrap_err()
                .to_string();
            assert!(err.contains("p.toml") && err.contains(key), "{text}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let text = EMBEDDED_DEFAULT.replace("[tasks]", "[tasks]\nretention_hourz = 3");
        let err = Policy::parse(&text, &PolicySource::File("p.toml".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("p.toml"), "{err}");
        assert!(err.contains("retention_hourz"), "{err}");
        assert!(err.contains("line"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn refuses_route_syntax_in_the_door_path_and_credentials_in_urls() {
        for path in ["/:x", "/a/{id}", "/*rest", "/a b"] {
            let text = EMBEDDED_DEFAULT
                .replace("a2a_path = \"/a2a/v1\"", &format!("a2a_path = \"{path}\""));
            let err = Policy::parse(&text, &PolicySource::Embedded)
                .unwrap_err()
                .to_string();
            assert!(err.contains("server.a2a_path"), "{path}: {err}");
        }
        let text = EMBEDDED_DEFAULT.replace("backend = \"echo\"", "backend = \"openai\"")
            + "\n[model.openai]\nbase_url = \"http://user:secret@127.0.0.1:8000/v1\"\nmodel = \"m\"\n";
        let err = Policy::parse(&text, &PolicySource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.openai.base_url"), "{err}");
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        for (from, to, key) in [
            (
                "retention_hours = 24",
                "retention_hours = -1",
                "`tasks.retention_hours`",
            ),
            (
                "max_body_bytes = 1048576",
                "max_body_bytes = \"big\"",
                "`server.max_body_bytes`",
            ),
            (
                "listen = \"127.0.0.1:8080\"",
                "listen = \"x\"",
                "`server.listen`",
            ),
            (
                "backend = \"echo\"",
                "backend = \"llama\"",
                "`model.backend`",
            ),
        ] {
            let text = EMBEDDED_DEFAULT.replace(from, to);
            let err = Policy::parse(&text, &PolicySource::File("p.toml".into()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains("p.toml"), "{to}: {err}");
        }
    }

    #[test]
    fn out_of_range_value_names_key() {
        let text = EMBEDDED_DEFAULT.replace("timeout_seconds = 60", "timeout_seconds = 0");
        let err = Policy::parse(&text, &PolicySource::File("p.toml".into()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("model.timeout_seconds"), "{err}");
        // Read into its type: refused while the file is read, with the line it is on.
        let line = text
            .lines()
            .position(|l| l.starts_with("timeout_seconds = 0"))
            .map(|i| i + 1);
        assert!(err.contains(&format!("line {}", line.unwrap())), "{err}");
        assert!(err.contains("0 seconds: must be from 1 to 600"), "{err}");
        for (key, from, to) in [
            (
                "server.write_stall_seconds",
                "write_stall_seconds = 30",
                "write_stall_seconds = 601",
            ),
            (
                "auth.credential_cache_seconds",
                "credential_cache_seconds = 2",
                "credential_cache_seconds = 6",
            ),
            (
                "server.shutdown_grace_seconds",
                "shutdown_grace_seconds = 30",
                "shutdown_grace_seconds = 3601",
            ),
        ] {
            assert!(EMBEDDED_DEFAULT.contains(from), "{from}");
            let text = EMBEDDED_DEFAULT.replace(from, to);
            let err = Policy::parse(&text, &PolicySource::File("p.toml".into()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key) && err.contains("(line "), "{err}");
        }
    }

    /// Every bounded count is read into its type: a value past either end is refused while
    /// the file is read, naming the key, its line and the range; one within reads.
    #[test]
    fn every_bounded_count_is_refused_out_of_range_naming_its_key_and_line() {
        for (section, key, low, high, fine) in [
            ("limits", "per_ip_per_minute", 0, 1_000_000_001, 60),
            (
                "limits",
                "failed_auth_per_ip_per_minute",
                0,
                1_000_000_001,
                5,
            ),
            ("limits", "tracked_addresses", 15, 10_000_001, 16),
            ("limits", "streams_per_peer", 0, 10_001, 4),
            ("cluster", "redis_timeout_ms", 49, 10_001, 250),
            ("cluster", "redis_breaker_timeouts", 0, 101, 5),
            ("cluster", "lease_seconds", 1, 301, 2),
            ("server", "max_connections", 0, 1_000_001, 10),
            ("server", "max_connections_per_address", 0, 1_000_001, 10),
            ("server", "max_body_bytes", 1023, 67_108_865, 1024),
            ("auth", "password_checks_at_once", 0, 65, 64),
            ("tasks", "retention_hours", 0, 8761, 1),
            ("tasks", "context_messages", -1, 201, 0),
            ("tasks", "max_text_bytes", 1023, 1_048_577, 1024),
            ("push", "max_configs_per_task", 0, 101, 1),
            ("push", "max_attempts", 0, 51, 50),
            ("push", "deliveries_at_once", 0, 1025, 2),
            ("peers", "default_rate_per_minute", 0, 1_000_000_001, 1),
        ] {
            let parse = |value: i64| {
                let text = format!("# first\n[{section}]\n{key} = {value}\n");
                Policy::parse(&text, &PolicySource::File("p.toml".into()))
                    .map_err(|e| e.to_string())
            };
            for value in [low, high] {
                let err = parse(value).unwrap_err();
                assert!(
                    err.contains(&format!("{section}.{key}")) && err.contains("(line 3"),
                    "{section}.{key} = {value}: {err}"
                );
            }
            assert!(parse(fine).is_ok(), "{section}.{key} = {fine}");
        }
        let err = Policy::parse(
            "[grpc]\nmax_concurrent_streams = 1001\n",
            &PolicySource::Embedded,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("1001: must be between 1 and 1000"), "{err}");
        let policy = Policy::parse(
            "[cluster]\nredis_timeout_ms = 250\nredis_breaker_timeouts = 5\n",
            &PolicySource::File("p.toml".into()),
        )
        .unwrap();
        let cluster = &policy.cluster;
        assert_eq!(
            (
                cluster.redis_timeout_ms.get(),
                cluster.redis_breaker_timeouts.get()
            ),
            (250, 5)
        );
    }

    #[test]
    fn domain_words_are_parsed_when_the_policy_loads_and_bad_ones_name_their_key() {
        let policy = Policy::parse(
            &EMBEDDED_DEFAULT
                .replace(
                    "schemes = [\"bearer\"]",
                    "schemes = [\"bearer\", \"api_key\"]",
                )
                .replace("trusted_proxies = []", "trusted_proxies = [\"10.0.0.0/8\"]"),
            &PolicySource::Embedded,
        )
        .unwrap();
        assert_eq!(policy.auth_schemes(), [Scheme::Bearer, Scheme::ApiKey]);
        assert!(policy.trusted_proxies()[0].contains("10.1.2.3".parse().unwrap()));
        for (from, to, key) in [
            (
                "schemes = [\"bearer\"]",
                "schemes = [\"digest\"]",
                "auth.schemes",
            ),
            (
                "schemes = [\"bearer\"]",
                "schemes = [\"bearer\", \"bearer\"]",
                "auth.schemes",
            ),
            (
                "trusted_proxies = []",
                "trusted_proxies = [\"10.0.0.0/33\"]",
                "server.trusted_proxies",
            ),
        ] {
            let err = Policy::parse(&EMBEDDED_DEFAULT.replace(from, to), &PolicySource::Embedded)
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{to}: {err}");
        }
        let with_key = format!(
            "{EMBEDDED_DEFAULT}\n[[signing.keys]]\nkid = \"k\"\nalg = \"RS256\"\nsecret_env = \"X\"\n"
        );
        let err = Policy::parse(&with_key, &PolicySource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(err.contains("alg") && err.contains("RS256"), "{err}");
    }

    /// Receipts are signed with a public-key algorithm only, under a kid no other list has.
    #[test]
    fn a_receipt_key_is_asymmetric_and_its_kid_its_own() {
        let key = |kid: &str, alg: &str| {
            format!(
                "[[signing.receipt_keys]]\nkid = \"{kid}\"\nalg = \"{alg}\"\nsecret_env = \"S\"\n"
            )
        };
        let err = Policy::parse(&key("r1", "HS256"), &PolicySource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("signing.receipt_keys") && err.contains("EdDSA or ES256"),
            "{err}"
        );
        let card =
            "[[signing.keys]]\nkid = \"same\"\nalg = \"EdDSA\"\nprivate_key_file = \"k.pem\"\n";
        let twice = format!("{card}{}", key("same", "EdDSA"));
        let err = Policy::parse(&twice, &PolicySource::Embedded)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("signing.receipt_keys") && err.contains("also a card key"),
            "{err}"
        );
        let on =
            Policy::parse("[receipts]\nmode = \"required\"\n", &PolicySource::Embedded).unwrap();
        assert_eq!(
            on.receipts.mode,
            crate::a2a::receipts::ReceiptMode::Required
        );
        assert!(
            Policy::parse(
                "[receipts]\nmode = \"sometimes\"\n",
                &PolicySource::Embedded
            )
            .is_err()
        );
    }

    /// The log's key is its own: not a receipt key's file, not among its retired keys.
    #[test]
    fn the_log_key_is_never_a_receipt_key_nor_a_retired_one() {
        let receipt = "[[signing.receipt_keys]]\nkid = \"r1\"\nalg = \"EdDSA\"\nprivate_key_file = \"r.pem\"\n";
        for (policy, why) in [
            (
                format!("{receipt}[receipts]\nlog_key_file = \"r.pem\"\n"),
                "receipt key",
            ),
            (
                "[receipts]\nlog_key_file = \"l.pem\"\nretired_log_key_files = [\"l.pem\"]\n"
                    .to_owned(),
                "retired_log_key_files",
            ),
        ] {
            let err = Policy::parse(&policy, &PolicySource::Embedded)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("receipts.log_key_file") && err.contains(why),
                "{err}"
            );
        }
        let apart = format!(
            "{receipt}[receipts]\nlog_key_file = \"l.pem\"\nretired_log_key_files = [\"old.pem\"]\n"
        );
        assert!(Policy::parse(&apart, &PolicySource::Embedded).is_ok());
    }
}
