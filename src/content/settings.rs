//! `[content_guard]` as the policy writes it (docs/content-guard.md): the starting pack's
//! groups per direction, the operator's rule packs, and what happens when inspection fails.

use serde::Deserialize;

/// `[content_guard]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentGuardSettings {
    /// What a call gets when its content cannot be inspected (the outside inspector down,
    /// slow or answering garbage).
    #[serde(default)]
    pub failure_mode: FailureMode,
    /// A file part's bytes are read (as UTF-8 text) up to this size; a larger one, or one
    /// that is not text, is inspected by its name, media type and size alone.
    #[serde(default = "default_file_bytes")]
    pub inspect_file_bytes: u64,
    /// Keep a denied answer in the stored conversation, as evidence for the operator (the
    /// partner never sees it).
    #[serde(default)]
    pub keep_denied_answers: bool,
    /// `[content_guard.starter]`: the built-in pack's groups, per direction.
    #[serde(default)]
    pub starter: StarterSettings,
    /// `[[content_guard.packs]]`: the operator's rule packs.
    #[serde(default)]
    pub packs: Vec<PackSettings>,
    /// `[content_guard.inspector]`: an outside inspector, asked after the local rules.
    #[serde(default)]
    pub inspector: Option<InspectorSettings>,
}

/// `[content_guard.inspector]`: a webhook the operator runs (a classifier, a DLP service),
/// given the texts the local rules read (as they left them) and answering pass, mask with
/// replacements, or deny.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectorSettings {
    /// Where it is asked: `https://…`, or `http://` on a loopback address.
    pub url: String,
    /// The directions it inspects; both when empty.
    #[serde(default)]
    pub directions: Vec<Direction>,
    /// How long an answer is waited for, a slot included (milliseconds, 1 to 30,000).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Inspections in flight at once, at most (1 to 10,000).
    #[serde(default = "default_concurrency")]
    pub max_concurrent: u32,
    /// Consecutive failures that open the breaker: calls then fail at once, without asking.
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// How long the breaker stays open before one call tries again (seconds).
    #[serde(default = "default_breaker_seconds")]
    pub breaker_seconds: u64,
    /// The environment variable holding the bearer token it is sent, if it needs one.
    #[serde(default)]
    pub token_env: Option<String>,
    /// A PEM file of CA certificates trusted for it besides the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
}

fn default_timeout_ms() -> u64 {
    1000
}

fn default_concurrency() -> u32 {
    64
}

fn default_breaker_failures() -> u32 {
    5
}

fn default_breaker_seconds() -> u64 {
    30
}

impl InspectorSettings {
    /// Whether it inspects `direction`.
    pub fn inspects(&self, direction: Direction) -> bool {
        self.directions.is_empty() || self.directions.contains(&direction)
    }

    /// Its checks: `(key, why)` of the first setting that cannot be used.
    pub fn problem(&self) -> Option<(&'static str, &'static str)> {
        let url = reqwest::Url::parse(&self.url).ok();
        let fits = url.as_ref().is_some_and(|url| {
            let loopback = matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
            // Credentials in the URL would be logged with it, and hide its real host.
            let bare = url.username().is_empty() && url.password().is_none();
            bare && (url.scheme() == "https" || (url.scheme() == "http" && loopback))
        });
        if !fits {
            return Some((
                "content_guard.inspector.url",
                "must be an https:// URL, or http:// on a loopback address, without credentials (the texts it is sent are partners' content)",
            ));
        }
        if !(1..=30_000).contains(&self.timeout_ms) {
            return Some(("content_guard.inspector.timeout_ms", "must be 1 to 30000"));
        }
        if !(1..=10_000).contains(&self.max_concurrent) {
            return Some((
                "content_guard.inspector.max_concurrent",
                "must be 1 to 10000",
            ));
        }
        if self.breaker_failures == 0 {
            return Some((
                "content_guard.inspector.breaker_failures",
                "must be at least 1",
            ));
        }
        if !(1..=3600).contains(&self.breaker_seconds) {
            return Some((
                "content_guard.inspector.breaker_seconds",
                "must be 1 to 3600",
            ));
        }
        None
    }
}

fn default_file_bytes() -> u64 {
    64 * 1024
}

impl ContentGuardSettings {
    /// Whether any rule (or the outside inspector) applies in any direction: without one, no
    /// call is inspected.
    pub fn any_rule(&self) -> bool {
        !self.starter.inbound.is_empty()
            || !self.starter.outbound.is_empty()
            || self.packs.iter().any(|pack| !pack.rules.is_empty())
            || self.inspector.is_some()
    }
}

/// What a call gets when inspection fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// Refused (inbound) or failed (outbound): nothing passes uninspected.
    #[default]
    Closed,
    /// Let through as if inspected and found clean, and counted.
    Open,
}

/// `[content_guard.starter]`: which groups of the starting pack apply, in each direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StarterSettings {
    /// The groups that inspect what partners send.
    #[serde(default)]
    pub inbound: Vec<StarterGroup>,
    /// The groups that inspect what the agent answers.
    #[serde(default)]
    pub outbound: Vec<StarterGroup>,
    /// Peers (by name) the starting pack does not apply to.
    #[serde(default)]
    pub except_peers: Vec<String>,
    /// `[content_guard.starter.actions]`: a group's action instead of its own.
    #[serde(default)]
    pub actions: StarterActions,
}

/// A group of the starting pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StarterGroup {
    /// Credentials of common providers, private keys, JWTs and peergate's own tokens: mask.
    Secrets,
    /// Payment card numbers (with their check digit) and IBANs: mask; e-mail addresses:
    /// record.
    PersonalData,
    /// Phrasing that tries to override the agent's instructions: deny.
    InstructionOverride,
}

/// The starting pack's groups' actions, when not their own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StarterActions {
    /// Instead of mask.
    #[serde(default)]
    pub secrets: Option<Action>,
    /// Instead of mask (and record for e-mail addresses).
    #[serde(default)]
    pub personal_data: Option<Action>,
    /// Instead of deny.
    #[serde(default)]
    pub instruction_override: Option<Action>,
}

/// What a rule's match does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Let through unchanged; counted as matched.
    Pass,
    /// Let through, and recorded (metrics, access log, span).
    Record,
    /// The matched text replaced by `[masked:<rule>]`.
    Mask,
    /// Refused (inbound) or the task failed (outbound).
    Deny,
}

impl Action {
    /// Its name in the policy, the metrics and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Record => "record",
            Self::Mask => "mask",
            Self::Deny => "deny",
        }
    }
}

/// Which way content passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// What a partner sends.
    Inbound,
    /// What the agent answers.
    Outbound,
}

impl Direction {
    /// Its name in the policy, the metrics and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inbound => "inbound",
            Self::Outbound => "outbound",
        }
    }
}

/// `[[content_guard.packs]]`: named, versioned rules.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackSettings {
    /// The pack's name: its rules' ids start with it (`<name>/<rule>`).
    pub name: String,
    /// Its version, named with every verdict it gives.
    pub version: String,
    /// The peers (by name) it applies to; every peer when empty.
    #[serde(default)]
    pub peers: Vec<String>,
    /// Peers (by name) it does not apply to.
    #[serde(default)]
    pub except_peers: Vec<String>,
    /// `[[content_guard.packs.rules]]`
    #[serde(default)]
    pub rules: Vec<RuleSettings>,
}

/// A rule: one way to match, an action, and the directions it inspects.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSettings {
    /// Unique in its pack: letters, digits, `-`, `_` and `.`, at most 64.
    pub id: String,
    /// What a match does.
    pub action: Action,
    /// The directions it inspects; both when empty.
    #[serde(default)]
    pub directions: Vec<Direction>,
    /// A regular expression (the `regex` crate's syntax: linear time, no look-around or
    /// back-references), at most 4 KiB.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Literal strings, any of which matches: at most 10,000, each at most 256 bytes.
    #[serde(default)]
    pub literals: Vec<String>,
    /// `pattern` and `literals` ignore case.
    #[serde(default)]
    pub case_insensitive: bool,
    /// A checksummed detector.
    #[serde(default)]
    pub detector: Option<super::detectors::Detector>,
    /// Parts of these kinds match, whatever they hold.
    #[serde(default)]
    pub part_kinds: Vec<PartKind>,
    /// File parts of these media types match (`image/*` names a family).
    #[serde(default)]
    pub media_types: Vec<String>,
    /// Parts whose content is larger than this (bytes; a file's decoded size) match.
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

impl RuleSettings {
    /// A rule `id` doing `action`, matching by nothing yet (a way to match is set after).
    pub fn new(id: &str, action: Action) -> Self {
        Self {
            id: id.to_owned(),
            action,
            directions: Vec::new(),
            pattern: None,
            literals: Vec::new(),
            case_insensitive: false,
            detector: None,
            part_kinds: Vec::new(),
            media_types: Vec::new(),
            max_bytes: None,
        }
    }
}

/// A part's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKind {
    /// `text`
    Text,
    /// `data`
    Data,
    /// `raw` or `url` (a file).
    File,
}

impl PartKind {
    /// Its name in the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Data => "data",
            Self::File => "file",
        }
    }
}
