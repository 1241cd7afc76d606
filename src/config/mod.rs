//! The operator's policy file (TOML).
//!
//! Every key is documented in `policies/default.toml`, which is also embedded in the binary so
//! that `peergate serve` runs with no files at all. Unknown keys are refused, and every error
//! names the file and the key, so a typo never silently falls back to a default.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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
    /// A key holds a value outside its allowed range.
    #[error("invalid policy {source_name}: key `{key}`: {reason}")]
    Invalid {
        /// The file.
        source_name: PolicySource,
        /// The dotted key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The whole policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// `[server]`
    pub server: ServerPolicy,
    /// `[card]`
    pub card: CardPolicy,
    /// `[model]`
    pub model: ModelPolicy,
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
}

/// `[signing]`: the keys that sign the Agent Card.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningPolicy {
    /// Public URL of the JWKS, written into each signature's protected header as `jku`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// `[[signing.keys]]`; none means a key generated in the data directory.
    #[serde(default)]
    pub keys: Vec<SigningKeyPolicy>,
}

/// `[[signing.keys]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningKeyPolicy {
    /// Key id, 1–64 of letters, digits and `._-`.
    pub kid: String,
    /// `EdDSA`, `ES256` or `HS256`.
    pub alg: String,
    /// PKCS#8 PEM private key (EdDSA, ES256).
    #[serde(default)]
    pub private_key_file: Option<String>,
    /// Environment variable holding a base64url HS256 secret.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// File holding a base64url HS256 secret.
    #[serde(default)]
    pub secret_file: Option<String>,
    /// `YYYY-MM-DD`: the key no longer signs and stays in the JWKS until that day.
    #[serde(default)]
    pub retiring_until: Option<String>,
}

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerPolicy {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Public base URL the card advertises; the listen address when absent.
    #[serde(default)]
    pub public_base_url: Option<String>,
    /// Path of the JSON-RPC door.
    #[serde(default = "default_a2a_path")]
    pub a2a_path: String,
    /// Largest request body accepted, in bytes.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Proxies whose `X-Forwarded-For` is believed (CIDRs).
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// Address of the admin API's own listener (loopback).
    #[serde(default = "default_admin_listen")]
    pub admin_listen: SocketAddr,
    /// Seconds a client may take to send a request's head.
    #[serde(default = "default_header_read_timeout_seconds")]
    pub header_read_timeout_seconds: u64,
    /// Connections open at once, per listener.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Seconds one request may take, start to answer.
    #[serde(default = "default_request_timeout_seconds")]
    pub request_timeout_seconds: u64,
    /// Seconds requests in flight get to finish after SIGTERM.
    #[serde(default = "default_shutdown_grace_seconds")]
    pub shutdown_grace_seconds: u64,
}

fn default_header_read_timeout_seconds() -> u64 {
    10
}
fn default_max_connections() -> usize {
    1024
}
fn default_request_timeout_seconds() -> u64 {
    200
}
fn default_shutdown_grace_seconds() -> u64 {
    30
}

/// The admin API's address must be loopback and not the door's: it takes passwords and has no
/// TLS of its own. Checked on the policy and again on the addresses actually bound.
pub fn check_admin_listen(admin: SocketAddr, door: SocketAddr) -> Result<(), &'static str> {
    if !admin.ip().is_loopback() {
        return Err(
            "must be a loopback address: the admin API takes passwords and has no TLS of its own (put a TLS proxy on this host in front of it)",
        );
    }
    if admin.port() != 0
        && admin.port() == door.port()
        && (door.ip().is_unspecified() || door.ip() == admin.ip())
    {
        return Err("must not be the door's address: the admin API has its own port");
    }
    Ok(())
}

fn default_admin_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8081))
}

fn default_a2a_path() -> String {
    "/a2a/v1".to_owned()
}
fn default_max_body_bytes() -> usize {
    1024 * 1024
}

/// `[card]`: what the Agent Card says about this gateway.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardPolicy {
    /// Agent name.
    pub name: String,
    /// Agent description.
    pub description: String,
    /// The agent's own version.
    pub version: String,
    /// Documentation URL.
    #[serde(default)]
    pub documentation_url: Option<String>,
    /// Icon URL.
    #[serde(default)]
    pub icon_url: Option<String>,
    /// `[card.provider]`
    #[serde(default)]
    pub provider: Option<ProviderPolicy>,
    /// `[[card.skills]]`
    pub skills: Vec<SkillPolicy>,
    /// `[[card.extensions]]`
    #[serde(default)]
    pub extensions: Vec<ExtensionPolicy>,
}

/// `[[card.extensions]]`: an A2A extension this agent supports.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionPolicy {
    /// The extension's URI, matched exactly.
    pub uri: String,
    /// What it does.
    #[serde(default)]
    pub description: Option<String>,
    /// Whether every request must activate it (`A2A-Extensions`).
    #[serde(default)]
    pub required: bool,
}

/// `[gate]`: protocol checks at the door.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatePolicy {
    /// Refuse requests without an `A2A-Version` (the spec reads a missing one as 0.3).
    #[serde(default)]
    pub require_version_header: bool,
}

/// `[card.provider]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderPolicy {
    /// Organisation name.
    pub organization: String,
    /// Organisation URL.
    pub url: String,
}

/// `[[card.skills]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillPolicy {
    /// Skill id.
    pub id: String,
    /// Skill name.
    pub name: String,
    /// Skill description.
    pub description: String,
    /// Tags.
    pub tags: Vec<String>,
    /// Example prompts.
    #[serde(default)]
    pub examples: Vec<String>,
}

/// `[model]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPolicy {
    /// Which backend answers.
    pub backend: BackendKind,
    /// The operator's base instructions, sent first on every call.
    pub instructions: String,
    /// How long one backend call may take, in seconds.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u64,
    /// `[model.openai]`, required when `backend = "openai"`.
    #[serde(default)]
    pub openai: Option<OpenAiPolicy>,
}

fn default_timeout_seconds() -> u64 {
    60
}

/// The backends peergate can ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The deterministic demonstration backend.
    Echo,
    /// An OpenAI-compatible chat-completions server.
    Openai,
}

/// `[model.openai]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiPolicy {
    /// Base URL ending before `/chat/completions`, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// Model name sent in each request.
    pub model: String,
    /// Name of the environment variable holding the API key, if the server needs one.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Upper bound on the answer's tokens, if set.
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// `[peers]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeersPolicy {
    /// Requests per minute for a peer added without `--rate`.
    #[serde(default = "default_rate_per_minute")]
    pub default_rate_per_minute: u32,
    /// Owner of peers added on the command line without `--owner`.
    #[serde(default)]
    pub default_owner: Option<String>,
}

impl Default for PeersPolicy {
    fn default() -> Self {
        Self {
            default_rate_per_minute: default_rate_per_minute(),
            default_owner: None,
        }
    }
}

/// `[budgets]`: model budgets of administrators who have none of their own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsPolicy {
    /// Tokens per UTC day.
    #[serde(default = "default_tokens_per_day")]
    pub tokens_per_day: u64,
    /// Tokens per UTC month; months are not budgeted when absent.
    #[serde(default)]
    pub tokens_per_month: Option<u64>,
}

impl Default for BudgetsPolicy {
    fn default() -> Self {
        Self {
            tokens_per_day: default_tokens_per_day(),
            tokens_per_month: None,
        }
    }
}

fn default_tokens_per_day() -> u64 {
    1_000_000
}

fn default_rate_per_minute() -> u32 {
    30
}

/// `[tasks]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksPolicy {
    /// How long a task stays readable with `GetTask`.
    #[serde(default = "default_retention_hours")]
    pub retention_hours: u32,
    /// How many earlier messages of a context go to the model.
    #[serde(default = "default_context_messages")]
    pub context_messages: u32,
    /// Longest message text passed on; longer text is cut and marked.
    #[serde(default = "default_max_text_bytes")]
    pub max_text_bytes: usize,
}

impl Default for TasksPolicy {
    fn default() -> Self {
        Self {
            retention_hours: default_retention_hours(),
            context_messages: default_context_messages(),
            max_text_bytes: default_max_text_bytes(),
        }
    }
}

fn default_retention_hours() -> u32 {
    24
}
fn default_context_messages() -> u32 {
    20
}
fn default_max_text_bytes() -> usize {
    65_536
}

/// `[auth]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthPolicy {
    /// Enabled schemes: `bearer`, `basic`, `api_key`.
    #[serde(default = "default_schemes")]
    pub schemes: Vec<String>,
    /// Header carrying API keys.
    #[serde(default = "default_api_key_header")]
    pub api_key_header: String,
    /// How long a verified credential is trusted without asking the store again. A revocation
    /// made with the command line while the server runs takes effect within this time.
    #[serde(default = "default_credential_cache_seconds")]
    pub credential_cache_seconds: u64,
    /// Argon2 password verifications allowed at once.
    #[serde(default = "default_password_checks_at_once")]
    pub password_checks_at_once: usize,
}

impl Default for AuthPolicy {
    fn default() -> Self {
        Self {
            schemes: default_schemes(),
            api_key_header: default_api_key_header(),
            credential_cache_seconds: default_credential_cache_seconds(),
            password_checks_at_once: default_password_checks_at_once(),
        }
    }
}

fn default_schemes() -> Vec<String> {
    vec!["bearer".to_owned()]
}
fn default_api_key_header() -> String {
    "X-API-Key".to_owned()
}
fn default_credential_cache_seconds() -> u64 {
    2
}
fn default_password_checks_at_once() -> usize {
    2
}

/// `[limits]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsPolicy {
    /// Requests per minute per client address (IPv6 per /64), on the card and the door.
    #[serde(default = "default_per_ip_per_minute")]
    pub per_ip_per_minute: u32,
    /// Failed authentications per minute per client address.
    #[serde(default = "default_failed_auth_per_ip_per_minute")]
    pub failed_auth_per_ip_per_minute: u32,
    /// Client addresses each limiter tracks at most.
    #[serde(default = "default_tracked_addresses")]
    pub tracked_addresses: usize,
}

impl Default for LimitsPolicy {
    fn default() -> Self {
        Self {
            per_ip_per_minute: default_per_ip_per_minute(),
            failed_auth_per_ip_per_minute: default_failed_auth_per_ip_per_minute(),
            tracked_addresses: default_tracked_addresses(),
        }
    }
}

fn default_per_ip_per_minute() -> u32 {
    120
}
fn default_failed_auth_per_ip_per_minute() -> u32 {
    10
}
fn default_tracked_addresses() -> usize {
    100_000
}

/// The largest quota accepted anywhere, in requests per minute.
pub const MAX_RATE_PER_MINUTE: u32 = 1_000_000_000;

impl Policy {
    /// Reads `path`, or the default path, falling back to the embedded copy only when no path
    /// was given and the default file does not exist.
    pub fn load(path: Option<&Path>) -> Result<(Self, PolicySource), PolicyError> {
        let (text, source) = match path {
            Some(path) => (read(path)?, PolicySource::File(path.to_owned())),
            None => {
                let default = Path::new("policies/default.toml");
                if default.exists() {
                    (read(default)?, PolicySource::File(default.to_owned()))
                } else {
                    (EMBEDDED_DEFAULT.to_owned(), PolicySource::Embedded)
                }
            }
        };
        let policy = Self::parse(&text, &source)?;
        Ok((policy, source))
    }

    /// Parses and validates policy text.
    pub fn parse(text: &str, source: &PolicySource) -> Result<Self, PolicyError> {
        let policy: Policy = toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|span| describe_location(text, span.start))
                .unwrap_or_default();
            PolicyError::Syntax {
                source_name: source.clone(),
                location,
                reason: e.message().replace('\n', " ").trim().to_owned(),
            }
        })?;
        policy.validate(source)?;
        Ok(policy)
    }

    fn validate(&self, source: &PolicySource) -> Result<(), PolicyError> {
        let invalid = |key: &'static str, reason: &str| PolicyError::Invalid {
            source_name: source.clone(),
            key,
            reason: reason.to_owned(),
        };
        let path = &self.server.a2a_path;
        if !path.starts_with('/') || path.len() < 2 || path.ends_with('/') || path.contains("//") {
            return Err(invalid(
                "server.a2a_path",
                "must start with `/`, not end with `/`, and name a path such as /a2a/v1",
            ));
        }
        // Plain segments only: axum treats `{`, `}`, `:` and `*` as route syntax.
        if !path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'~' | b'-'))
        {
            return Err(invalid(
                "server.a2a_path",
                "may hold only letters, digits and /._~-",
            ));
        }
        if path.starts_with("/.well-known") || path == "/health" {
            return Err(invalid("server.a2a_path", "collides with a built-in route"));
        }
        if let Some(url) = &self.server.public_base_url
            && (!(url.starts_with("https://") || url.starts_with("http://")) || url.ends_with('/'))
        {
            return Err(invalid(
                "server.public_base_url",
                "must be an http(s) URL without a trailing `/`, e.g. https://gateway.example.com",
            ));
        }
        if !(1..=300).contains(&self.server.header_read_timeout_seconds) {
            return Err(invalid(
                "server.header_read_timeout_seconds",
                "must be between 1 and 300",
            ));
        }
        if !(1..=1_000_000).contains(&self.server.max_connections) {
            return Err(invalid(
                "server.max_connections",
                "must be between 1 and 1000000",
            ));
        }
        if self.server.shutdown_grace_seconds > 3600 {
            return Err(invalid(
                "server.shutdown_grace_seconds",
                "must be at most 3600",
            ));
        }
        // A message may wait for the one ahead in its context (1.5 × the model's timeout) and then
        // take the model's whole timeout itself: the request timeout must leave room for both.
        if self.server.request_timeout_seconds.saturating_mul(2)
            <= self.model.timeout_seconds.saturating_mul(5)
            || self.server.request_timeout_seconds > 3600
        {
            return Err(invalid(
                "server.request_timeout_seconds",
                "must be more than 2.5 × model.timeout_seconds (a message may wait for the one ahead of it, then for the model) and at most 3600",
            ));
        }
        if let Err(reason) = check_admin_listen(self.server.admin_listen, self.server.listen) {
            return Err(invalid("server.admin_listen", reason));
        }
        if let Some(owner) = &self.peers.default_owner
            && crate::admin::service::check_name("", owner).is_err()
        {
            return Err(invalid(
                "peers.default_owner",
                "must be 1 to 64 of letters, digits and ._-",
            ));
        }
        if self.budgets.tokens_per_day == 0 || self.budgets.tokens_per_month == Some(0) {
            return Err(invalid(
                "budgets",
                "a budget must be at least 1 token (forbid the model per administrator with `peergate admin budget NAME --model forbid`)",
            ));
        }
        if !(1024..=64 * 1024 * 1024).contains(&self.server.max_body_bytes) {
            return Err(invalid(
                "server.max_body_bytes",
                "must be between 1024 and 67108864",
            ));
        }
        for (key, value) in [
            ("card.name", &self.card.name),
            ("card.description", &self.card.description),
            ("card.version", &self.card.version),
        ] {
            if value.trim().is_empty() {
                return Err(invalid(key, "must not be empty"));
            }
        }
        if self.card.skills.is_empty() {
            return Err(invalid("card.skills", "at least one skill is required"));
        }
        if self.card.skills.iter().any(|s| {
            s.id.is_empty() || s.name.is_empty() || s.description.is_empty() || s.tags.is_empty()
        }) {
            return Err(invalid(
                "card.skills",
                "every skill needs a non-empty id, name, description and tags",
            ));
        }
        for (i, extension) in self.card.extensions.iter().enumerate() {
            let uri = extension.uri.as_str();
            if uri.is_empty() || uri.contains([',', ' ']) || !uri.is_ascii() {
                return Err(invalid(
                    "card.extensions",
                    "every extension needs a URI without commas or spaces",
                ));
            }
            if self.card.extensions[..i].iter().any(|e| e.uri == uri) {
                return Err(invalid(
                    "card.extensions",
                    "an extension URI is listed twice",
                ));
            }
        }
        for (i, key) in self.signing.keys.iter().enumerate() {
            if !crate::jose::keys::is_valid_kid(&key.kid) {
                return Err(invalid(
                    "signing.keys",
                    "every kid must be 1 to 64 of letters, digits and ._-",
                ));
            }
            if self.signing.keys[..i].iter().any(|k| k.kid == key.kid) {
                return Err(invalid("signing.keys", "a kid is listed twice"));
            }
            if let Some(until) = &key.retiring_until {
                let b = until.as_bytes();
                let date_ok = b.len() == 10
                    && b[4] == b'-'
                    && b[7] == b'-'
                    && b.iter()
                        .enumerate()
                        .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
                if !date_ok {
                    return Err(invalid(
                        "signing.keys",
                        "retiring_until must be a date such as 2027-01-31",
                    ));
                }
            }
        }
        if let Some(url) = &self.signing.jwks_url
            && !url.starts_with("https://")
        {
            return Err(invalid("signing.jwks_url", "must be an https URL"));
        }
        if !(1..=600).contains(&self.model.timeout_seconds) {
            return Err(invalid(
                "model.timeout_seconds",
                "must be between 1 and 600",
            ));
        }
        match (self.model.backend, &self.model.openai) {
            (BackendKind::Openai, None) => {
                return Err(invalid(
                    "model.openai",
                    "backend = \"openai\" needs a [model.openai] table with base_url and model",
                ));
            }
            (BackendKind::Openai, Some(openai)) => {
                if openai.base_url.starts_with("https://") {
                    return Err(invalid(
                        "model.openai.base_url",
                        "https to the model is not supported yet; reach the model over http on a private network or loopback",
                    ));
                }
                // Credentials belong in api_key_env, never in a URL that gets logged.
                let authority = openai.base_url.trim_start_matches("http://");
                let authority = authority.split('/').next().unwrap_or_default();
                if authority.contains('@') {
                    return Err(invalid(
                        "model.openai.base_url",
                        "must not carry credentials; name an environment variable in api_key_env",
                    ));
                }
                if !openai.base_url.starts_with("http://") || openai.base_url.ends_with('/') {
                    return Err(invalid(
                        "model.openai.base_url",
                        "must be an http URL without a trailing `/`, e.g. http://127.0.0.1:8000/v1",
                    ));
                }
                if openai.model.trim().is_empty() {
                    return Err(invalid("model.openai.model", "must not be empty"));
                }
            }
            (BackendKind::Echo, _) => {}
        }
        if !(1..=MAX_RATE_PER_MINUTE).contains(&self.peers.default_rate_per_minute) {
            return Err(invalid(
                "peers.default_rate_per_minute",
                "must be between 1 and 1000000000",
            ));
        }
        if self.trusted_proxies().is_err() {
            return Err(invalid(
                "server.trusted_proxies",
                "every entry must be a CIDR range such as 10.0.0.0/8 or 2001:db8::/32",
            ));
        }
        let schemes = self
            .auth_schemes()
            .map_err(|reason| invalid("auth.schemes", &reason))?;
        if schemes.is_empty() {
            return Err(invalid(
                "auth.schemes",
                "at least one of \"bearer\", \"basic\", \"api_key\" must be enabled",
            ));
        }
        match axum::http::HeaderName::from_bytes(self.auth.api_key_header.as_bytes()) {
            Ok(name) if name != axum::http::header::AUTHORIZATION => {}
            _ => {
                return Err(invalid(
                    "auth.api_key_header",
                    "must be a valid header name other than Authorization",
                ));
            }
        }
        if !(1..=64).contains(&self.auth.password_checks_at_once) {
            return Err(invalid(
                "auth.password_checks_at_once",
                "must be between 1 and 64",
            ));
        }
        for (key, value) in [
            ("limits.per_ip_per_minute", self.limits.per_ip_per_minute),
            (
                "limits.failed_auth_per_ip_per_minute",
                self.limits.failed_auth_per_ip_per_minute,
            ),
        ] {
            if !(1..=MAX_RATE_PER_MINUTE).contains(&value) {
                return Err(invalid(key, "must be between 1 and 1000000000"));
            }
        }
        if !(16..=10_000_000).contains(&self.limits.tracked_addresses) {
            return Err(invalid(
                "limits.tracked_addresses",
                "must be between 16 and 10000000",
            ));
        }
        if !(1..=24 * 365).contains(&self.tasks.retention_hours) {
            return Err(invalid(
                "tasks.retention_hours",
                "must be between 1 and 8760",
            ));
        }
        if self.tasks.context_messages > 200 {
            return Err(invalid("tasks.context_messages", "must be at most 200"));
        }
        if !(1024..=1024 * 1024).contains(&self.tasks.max_text_bytes) {
            return Err(invalid(
                "tasks.max_text_bytes",
                "must be between 1024 and 1048576",
            ));
        }
        if self.auth.credential_cache_seconds > 5 {
            return Err(invalid(
                "auth.credential_cache_seconds",
                "must be at most 5, so that a revocation takes effect within seconds",
            ));
        }
        Ok(())
    }
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
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("[[")
                .and_then(|l| l.strip_suffix("]]"))
                .or_else(|| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        })
        .last();
    match table {
        Some(table) => format!(" (line {line_number}, key `{}.{key}`)", table.trim()),
        None => format!(" (line {line_number}, key `{key}`)"),
    }
}

impl Policy {
    /// `server.trusted_proxies`, parsed.
    pub fn trusted_proxies(
        &self,
    ) -> Result<Vec<crate::layers::client_addr::Cidr>, crate::layers::client_addr::CidrError> {
        self.server
            .trusted_proxies
            .iter()
            .map(|s| s.parse())
            .collect()
    }

    /// `auth.schemes`, parsed, in order, each once.
    pub fn auth_schemes(&self) -> Result<Vec<crate::layers::auth::Scheme>, String> {
        let mut schemes = Vec::new();
        for name in &self.auth.schemes {
            let scheme = crate::layers::auth::Scheme::from_policy_name(name).ok_or_else(|| {
                format!("unknown scheme {name:?}; use \"bearer\", \"basic\" or \"api_key\"")
            })?;
            if schemes.contains(&scheme) {
                return Err(format!("{name:?} is listed twice"));
            }
            schemes.push(scheme);
        }
        Ok(schemes)
    }
}

fn read(path: &Path) -> Result<String, PolicyError> {
    std::fs::read_to_string(path).map_err(|e| PolicyError::Unreadable {
        source_name: PolicySource::File(path.to_owned()),
        reason: e.kind().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid() {
        let policy = Policy::parse(EMBEDDED_DEFAULT, &PolicySource::Embedded).unwrap();
        assert_eq!(policy.model.backend, BackendKind::Echo);
        assert_eq!(policy.server.a2a_path, "/a2a/v1");
        assert_eq!(policy.tasks.retention_hours, 24);
        assert_eq!(policy.tasks.context_messages, 20);
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
    }
}
