//! Decisions remembered: a Cedar decision is a pure function of what the policies read of a
//! call, so the same facts get the same decision without evaluating the policies again (a
//! decision costs some 100 µs with fifty policies, a remembered one a lookup). The key is the
//! facts themselves, byte for byte (never a hash that two calls could share): the peer as it
//! signed in, the operation, and each fact of the context and resource that some policy names.
//! A fact no policy names cannot change a decision and is left out, so GetTask calls on
//! different tasks share a decision when no policy reads the resource.
//!
//! What a policy names is read from its text, conservatively: a context member counts as read
//! when its name appears anywhere in a policy (a comment or an id too), the whole context when
//! `context` is used other than by `.`, `[` or `has` or when the policy holds an escape (a name
//! could hide in `"\u{68}our"`), the resource when a policy constrains it in its scope or names
//! it in a condition. A key longer than [`MAX_KEY_BYTES`] (the partner chooses task ids and media
//! types) is decided without being remembered, and the cache is bounded in bytes.

use super::Decision;
use super::ask::CallAsk;
use cedar_policy::{PolicySet, ResourceConstraint};

/// The most bytes of keys remembered per policy set.
const REMEMBERED_BYTES: u64 = 32 * 1024 * 1024;
/// The longest key remembered.
const MAX_KEY_BYTES: usize = 4096;

/// The context's members, as the schema names them.
const MEMBERS: [&str; 9] = [
    "now",
    "hour",
    "weekday",
    "client",
    "binding",
    "messageSize",
    "partKinds",
    "mediaTypes",
    "extensions",
];

/// Which facts of a call some policy reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    /// By [`MEMBERS`]' order.
    members: [bool; MEMBERS.len()],
    resource: bool,
}

impl Reads {
    /// What `policies` read, from their text.
    pub(crate) fn of(policies: &PolicySet) -> Self {
        let mut reads = Self::default();
        for policy in policies.policies() {
            let text = policy.to_string();
            let whole_context = text.contains('\\')
                || words(&text, "context").any(|after| {
                    !(after.starts_with('.') || after.starts_with('[') || after.starts_with("has"))
                });
            for (read, member) in reads.members.iter_mut().zip(MEMBERS) {
                *read |= whole_context || words(&text, member).next().is_some();
            }
            reads.resource |= !matches!(policy.resource_constraint(), ResourceConstraint::Any)
                || words(&text, "resource").count() > 1;
        }
        reads
    }

    /// Whether the context member `member` is read.
    #[cfg(test)]
    pub(crate) fn member(&self, member: &str) -> bool {
        MEMBERS
            .iter()
            .position(|m| *m == member)
            .is_none_or(|at| self.members[at])
    }

    /// Whether the resource (task and conversation ids) is read.
    #[cfg(test)]
    pub(crate) fn resource(&self) -> bool {
        self.resource
    }

    /// The key of `ask`'s decision: every fact read, each length-prefixed, each optional one
    /// behind a tag and each list behind its count, so two different calls never share a key;
    /// `None` when it would be longer than [`MAX_KEY_BYTES`].
    pub(crate) fn key(&self, ask: &CallAsk<'_>) -> Option<Vec<u8>> {
        let mut key = Key(Vec::with_capacity(256));
        let peer = &ask.peer;
        for text in [
            peer.id,
            peer.name,
            peer.owner_id,
            peer.scheme,
            ask.operation,
        ] {
            key.text(text);
        }
        for text in [peer.issuer, peer.subject] {
            key.optional(text);
        }
        match peer.scopes {
            Some(scopes) => key.list(1, scopes.iter().copied()),
            None => key.0.push(0),
        }
        key.count(peer.claims.len());
        for (claim, values) in peer.claims {
            key.text(claim);
            key.list(1, values.iter().map(|v| &**v));
        }
        if self.resource {
            key.optional(ask.task);
            key.optional(ask.context);
        }
        self.context_key(ask, &mut key);
        (key.0.len() <= MAX_KEY_BYTES).then_some(key.0)
    }

    fn context_key(&self, ask: &CallAsk<'_>, key: &mut Key) {
        let utc = jiff::tz::TimeZone::UTC.to_datetime(ask.now);
        let [
            now,
            hour,
            weekday,
            client,
            binding,
            size,
            kinds,
            media,
            extensions,
        ] = self.members;
        if now {
            key.0.extend(ask.now.as_millisecond().to_le_bytes());
        }
        if hour || weekday {
            key.0
                .extend([utc.hour() as u8, utc.weekday().to_monday_one_offset() as u8]);
        }
        if client {
            key.optional(ask.client.map(|ip| ip.to_string()).as_deref());
        }
        if binding {
            key.text(ask.binding);
        }
        if size {
            key.0.extend(ask.message_size.to_le_bytes());
        }
        if kinds {
            key.list(2, ask.part_kinds.iter().copied());
        }
        if media {
            key.list(3, ask.media_types.iter().copied());
        }
        if extensions {
            key.list(4, ask.extensions.iter().map(String::as_str));
        }
    }
}

/// A key being written.
struct Key(Vec<u8>);

impl Key {
    fn text(&mut self, text: &str) {
        self.count(text.len());
        self.0.extend(text.as_bytes());
    }

    fn count(&mut self, count: usize) {
        self.0.extend((count as u64).to_le_bytes());
    }

    /// A tag (0 absent, 1 present), then the text when present.
    fn optional(&mut self, text: Option<&str>) {
        match text {
            Some(text) => {
                self.0.push(1);
                self.text(text);
            }
            None => self.0.push(0),
        }
    }

    /// A tag naming which list, its count, then its items.
    fn list<'a>(&mut self, tag: u8, items: impl ExactSizeIterator<Item = &'a str>) {
        self.0.push(tag);
        self.count(items.len());
        for item in items {
            self.text(item);
        }
    }
}

/// What follows each occurrence of `word` in `text` as a whole identifier (trimmed).
fn words<'t>(text: &'t str, word: &'t str) -> impl Iterator<Item = &'t str> + 't {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).filter_map(move |(at, _)| {
        let before = text[..at].chars().next_back();
        let after = &text[at + word.len()..];
        let bounded = !before.is_some_and(is_ident) && !after.chars().next().is_some_and(is_ident);
        bounded.then(|| after.trim_start())
    })
}

/// The decisions remembered for one policy set.
#[derive(Debug)]
pub(crate) struct Remembered {
    decisions: moka::sync::Cache<Vec<u8>, Decision>,
}

impl Remembered {
    pub(crate) fn new() -> Self {
        Self {
            decisions: moka::sync::Cache::builder()
                .weigher(|key: &Vec<u8>, decision: &Decision| {
                    u32::try_from(key.len() + 64 * (1 + decision.policies.len()))
                        .unwrap_or(u32::MAX)
                })
                .max_capacity(REMEMBERED_BYTES)
                .build(),
        }
    }

    /// The decision remembered under `key`.
    pub(crate) fn get(&self, key: &Vec<u8>) -> Option<Decision> {
        self.decisions.get(key)
    }

    /// Remembers `decision` under `key`.
    pub(crate) fn keep(&self, key: Vec<u8>, decision: Decision) {
        self.decisions.insert(key, decision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn reads(text: &str) -> Reads {
        Reads::of(&PolicySet::from_str(text).unwrap())
    }

    #[test]
    fn only_the_facts_a_policy_names_are_read() {
        let none = reads("permit (principal, action, resource);");
        assert!(!none.member("hour") && !none.member("client") && !none.resource());
        let some = reads(
            "permit (principal, action, resource) when { context.hour < 9 && context has client };",
        );
        assert!(some.member("hour") && some.member("client"));
        assert!(!some.member("partKinds") && !some.resource());
        let indexed =
            reads(r#"permit (principal, action, resource) when { context["binding"] == "GRPC" };"#);
        assert!(indexed.member("binding") && !indexed.member("hour"));
        let scoped = reads(r#"permit (principal, action, resource in Peergate::Context::"c");"#);
        assert!(scoped.resource());
        let named =
            reads(r#"permit (principal, action, resource) when { resource is Peergate::Task };"#);
        assert!(named.resource());
        // `hourly` is not `hour`.
        let longer = reads(r#"@id("hourly") permit (principal, action, resource);"#);
        assert!(!longer.member("hour"));
    }

    #[test]
    fn an_escaped_name_reads_every_member() {
        let escaped =
            reads(r#"permit (principal, action, resource) when { context["\u{68}our"] < 9 };"#);
        assert!(MEMBERS.iter().all(|member| escaped.member(member)));
    }

    #[test]
    fn no_two_different_calls_share_a_key() {
        let read_all = reads(
            r#"permit (principal, action, resource in Peergate::Agent::"agent") when { context == {} };"#,
        );
        let peer = crate::authz::PeerFacts {
            id: "p",
            name: "n",
            owner_id: "o",
            scheme: "bearer",
            issuer: None,
            subject: None,
            scopes: None,
            claims: &[],
        };
        let ask = CallAsk {
            peer,
            operation: "SendMessage",
            binding: "JSONRPC",
            client: None,
            now: crate::clock::Timestamp::UNIX_EPOCH,
            task: None,
            context: None,
            message_size: 0,
            part_kinds: vec![],
            media_types: vec![],
            extensions: &[],
        };
        let mut nul_task = ask.clone();
        nul_task.task = Some("\u{0}");
        let mut kinds = ask.clone();
        kinds.part_kinds = vec!["text"];
        let mut media = ask.clone();
        media.media_types = vec!["text"];
        let keys = [&ask, &nul_task, &kinds, &media].map(|a| read_all.key(a).unwrap());
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        let long = "t".repeat(MAX_KEY_BYTES);
        let mut huge = ask.clone();
        huge.task = Some(&long);
        assert_eq!(read_all.key(&huge), None);
    }

    #[test]
    fn the_whole_context_used_as_a_value_reads_every_member() {
        let whole = reads(r#"permit (principal, action, resource) when { context == {"a": 1} };"#);
        assert!(MEMBERS.iter().all(|member| whole.member(member)));
    }
}
