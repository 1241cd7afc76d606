//! The *authorize* stage with the operator's Cedar policies (docs/authorization.md): each call
//! is put to them once, after authentication and before the operation reads anything, as the
//! peer, the operation, the task or conversation it names and what it carries. A denial is the
//! guard's 403 (`permission_denied`; gRPC `PERMISSION_DENIED`), naming the operation and never
//! a policy; the decision and the policies that made it go to the access log, the metrics and,
//! for the first denial a minute of one peer's operation, the audit log.
//!
//! Cost (BENCHMARKS, "Authorization policies: A/B"): with fifty policies GetTask +4.4 % and
//! SendMessage +1.0 % in instructions, a decision remembered in some 450 ns and made afresh in
//! some 106 µs; a denial costs 86,224 instructions, of which the decision is 7 %.
//!
//! A denial counts toward nothing but the request rate every request counts toward: no failed
//! sign-in (the peer signed in), no budget (no turn ran), no breaker. The card URL asks the same
//! decision for an authenticated peer's extended card (`GetExtendedAgentCard`).

use crate::a2a::denial_audit::{DenialAudit, client_of};
use crate::a2a::operation::{A2aRequest, CallRefused};
use crate::a2a::stages::{CallStages, CallView};
use crate::authz::{Authorization, CallAsk, Decision, PeerFacts};
use crate::clock::Clock;
use crate::guard::refusal::Refusal;
use crate::layers::metrics::Metrics;
use crate::protocol::types::IncomingPart;
use crate::store::{AuditAction, AuditActor, AuditEntry, AuditOutcome, AuditTarget, Store};
use std::sync::Arc;

/// The authorize stage over the policies in force.
pub struct PolicyStage {
    authorization: Arc<Authorization>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    audit: DenialAudit,
}

impl PolicyStage {
    /// Decides with `authorization`'s policies in force, counts in `metrics`, audits denials
    /// in `store`.
    pub fn new(
        authorization: Arc<Authorization>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        store: Store,
    ) -> Self {
        Self {
            authorization,
            clock,
            metrics,
            audit: DenialAudit::new(store),
        }
    }

    /// The policies' decision about `call` asking `request`.
    fn decide(&self, call: &CallView, request: &A2aRequest) -> Decision {
        let peer = &call.peer;
        let scopes = peer.granted_scopes();
        let message = MessageFacts::of(request);
        let ask = CallAsk {
            peer: PeerFacts {
                id: peer.id().as_str(),
                name: peer.name(),
                owner_id: peer.owner_id(),
                scheme: peer.scheme().policy_name(),
                issuer: peer.issuer(),
                subject: peer.subject(),
                scopes: scopes.as_deref(),
                claims: peer.claims(),
            },
            operation: call.call.method.name(),
            binding: call.call.binding.protocol_name(),
            // An IPv4 client on a dual-stack listener is an IPv4 address to the policies.
            client: call.client.map(|ip| ip.to_canonical()),
            now: self.clock.now(),
            task: request.task_id(),
            context: request.context_id(),
            message_size: message.size,
            part_kinds: message.kinds,
            media_types: message.media_types,
            extensions: &call.extensions,
        };
        self.authorization.current().decide_call(&ask)
    }
}

#[async_trait::async_trait]
impl CallStages for PolicyStage {
    async fn authorize(&self, call: &CallView, request: &A2aRequest) -> Result<(), CallRefused> {
        self.decided(call, request)
    }
}

impl PolicyStage {
    /// The policies' decision about `call`, recorded (access log, metrics, audit) and as the
    /// guard's refusal when it denies: the stage's, and the card URL's for an authenticated
    /// peer (its extended card is `GetExtendedAgentCard`).
    pub fn decided(&self, call: &CallView, request: &A2aRequest) -> Result<(), CallRefused> {
        let decision = self.decide(call, request);
        let policies = decision.policy_list();
        if let Some(note) = &call.note {
            note.authz(decision.allowed, &policies);
        }
        self.metrics
            .decisions()
            .decided(false, decision.allowed, &decision.policies);
        if decision.allowed {
            return Ok(());
        }
        let method = call.call.method;
        let peer = &call.peer;
        let key = format!("policy\0{}\0{}", peer.id().as_str(), method.name());
        self.audit.first_a_minute(key, || AuditEntry {
            at: self.clock.now(),
            actor: AuditActor::Peer(peer.name().to_owned()),
            action: AuditAction::PeerDeniedByPolicy,
            target: AuditTarget::Peer(peer.name().to_owned()),
            outcome: AuditOutcome::Denied(method.name().to_owned()),
            client: client_of(call),
            detail: format!(
                "policies: {policies}; binding {}; later denials of this operation within a minute are counted in metrics only",
                call.call.binding.protocol_name()
            ),
            owner_id: Some(peer.owner_id().to_owned()),
        });
        Err(CallRefused::Guard(Refusal::PolicyDenied {
            method: method.name(),
        }))
    }
}

/// What the policies read of a request's message: its size, part kinds and media types.
struct MessageFacts<'a> {
    size: u64,
    kinds: Vec<&'static str>,
    media_types: Vec<&'a str>,
}

impl<'a> MessageFacts<'a> {
    fn of(request: &'a A2aRequest) -> Self {
        let mut facts = Self {
            size: 0,
            kinds: Vec::new(),
            media_types: Vec::new(),
        };
        let Some(sent) = request.message() else {
            return facts;
        };
        for part in &sent.message.parts {
            let (kind, size) = part_facts(part);
            facts.size = facts.size.saturating_add(size);
            if !facts.kinds.contains(&kind) {
                facts.kinds.push(kind);
            }
            let media_type = part.media_type.as_deref().or_else(|| {
                part.file
                    .as_ref()
                    .and_then(|file| file.mime_type.as_deref())
            });
            if kind == "file"
                && let Some(media_type) = media_type
                && !facts.media_types.contains(&media_type)
            {
                facts.media_types.push(media_type);
            }
        }
        facts
    }
}

/// A part's kind (`text`, `data`, `file`) and its content's size in bytes (a file's decoded
/// bytes, or its URL's length; data as compact JSON).
fn part_facts(part: &IncomingPart) -> (&'static str, u64) {
    let len = |text: &Option<String>| text.as_ref().map_or(0, |t| t.len() as u64);
    if let Some(text) = &part.text {
        return ("text", text.len() as u64);
    }
    if let Some(data) = &part.data {
        let mut counted = Counted(0);
        let _ = serde_json::to_writer(&mut counted, data);
        return ("data", counted.0);
    }
    let (raw, url) = match &part.file {
        Some(file) => (len(&file.bytes), len(&file.uri)),
        None => (len(&part.raw), len(&part.url)),
    };
    ("file", raw / 4 * 3 + url)
}

/// Counts the bytes written.
struct Counted(u64);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
