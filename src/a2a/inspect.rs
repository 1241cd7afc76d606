//! The *inspect* stages with the content guard (docs/content-guard.md): a partner's message
//! before its operation runs, and the agent's answer before it is sealed and stored (the
//! agent calls [`ContentGuard::outbound`], so what is masked is exactly what is delivered,
//! stored and digested). A denied message is refused with the rule's id and no task is run;
//! every verdict is counted by rule and action, noted in the access log and on the call's
//! span, and a denial is audited (the first of a peer's rule a minute) — never what matched.
//!
//! Cost (BENCHMARKS, "The content guard"; decision 0016): with the whole starting pack on both
//! directions, SendMessage +3.3 % instructions and GetTask, which is never read, +1.0 % (any
//! stage attached); 249 ns for a short message, 127–158 µs for 64 KiB, 2.1 µs a streamed
//! piece. Without `[content_guard]` rules nothing is attached, and nothing is paid.

use crate::a2a::denial_audit::{DenialAudit, client_of};
use crate::a2a::inspector::{Decision, Inspector};
use crate::a2a::operation::{A2aRequest, CallRefused};
use crate::a2a::stages::{CallStages, CallView};
use crate::clock::Clock;
use crate::content::{
    Action, Collected, ContentRules, Direction, FailureMode, Finding, Inspection, Replacements,
    Verdict,
};
use crate::layers::access_log::AccessNote;
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::metrics::Metrics;
use crate::protocol::error::A2aError;
use crate::protocol::types::{Artifact, Part, SendMessageRequest};
use crate::store::{AuditAction, AuditActor, AuditEntry, AuditOutcome, AuditTarget, Store};
use crate::telemetry::CallSpan;
use std::sync::Arc;

/// The content guard's settings besides its rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct GuardParams {
    /// Keep a denied answer in the stored conversation, as the operator's evidence.
    pub keep_denied_answers: bool,
    /// What a call gets when the outside inspector gives no decision.
    pub failure_mode: FailureMode,
}

/// The rules in force, the outside inspector, and where their verdicts go.
pub struct ContentGuard {
    rules: Arc<ContentRules>,
    params: GuardParams,
    inspector: Option<Inspector>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    audit: DenialAudit,
}

/// An answer's verdict: the rules' and the inspector's, and whether it is withheld (denied,
/// or not inspected under the closed failure mode).
#[derive(Debug, Default)]
pub struct Inspected {
    /// What matched.
    pub verdict: Verdict,
    /// Whether the answer may not be delivered.
    pub withheld: bool,
}

/// Where one call's verdicts are noted besides the metrics.
#[derive(Clone, Copy)]
pub struct Noted<'a> {
    /// The peer whose call it is.
    pub peer: &'a AuthenticatedPeer,
    /// Its access line, when the log is on.
    pub note: Option<&'a AccessNote>,
    /// Its span, when traced.
    pub trace: Option<&'a CallSpan>,
    /// Its client's address, for the audit log.
    pub client: &'a str,
}

impl ContentGuard {
    /// The guard over `rules` and `inspector`, counting in `metrics`, auditing denials in
    /// `store`.
    pub fn new(
        (rules, inspector): (Arc<ContentRules>, Option<Inspector>),
        params: GuardParams,
        (metrics, clock): (Arc<Metrics>, Arc<dyn Clock>),
        store: Store,
    ) -> Self {
        Self {
            rules,
            params,
            inspector,
            metrics,
            clock,
            audit: DenialAudit::new(store),
        }
    }

    /// Whether any rule, or the inspector, inspects `direction`.
    pub fn inspects(&self, direction: Direction) -> bool {
        self.rules.inspects(direction) || self.outside(direction).is_some()
    }

    /// The outside inspector, when it inspects `direction`.
    fn outside(&self, direction: Direction) -> Option<&Inspector> {
        self.inspector.as_ref().filter(|i| i.inspects(direction))
    }

    /// Whether a denied answer stays in the stored conversation.
    pub fn keeps_denied_answers(&self) -> bool {
        self.params.keep_denied_answers
    }

    /// A partner's message and its request's metadata, masked in place (the message as sent
    /// kept in [`SendMessageRequest::as_received`] for its receipt); refused when a rule or
    /// the inspector denies it, or the inspector gives no decision under the closed mode.
    pub async fn inbound(
        &self,
        noted: Noted<'_>,
        request: &mut SendMessageRequest,
    ) -> Result<(), A2aError> {
        let peer = noted.peer.name();
        let outside = self.outside(Direction::Inbound);
        // A first look changes nothing: most messages are clean, and one that is not keeps
        // its form as sent before anything is masked.
        let mut look = self.rules.look(Direction::Inbound, peer);
        look.message(&self.rules, &mut request.message, request.metadata.as_mut());
        let mut inspected = Inspected {
            verdict: look.verdict(),
            withheld: false,
        };
        if inspected.verdict.denied.is_none() && (inspected.verdict.masked() || outside.is_some()) {
            let sent = crate::a2a::receipts::message_form(&request.message);
            let mut inspection = self.rules.inspect_collecting(Direction::Inbound, peer);
            inspection.message(&self.rules, &mut request.message, request.metadata.as_mut());
            let collected = inspection.collected();
            inspected.verdict = inspection.verdict();
            if let Some(outside) = outside
                && let Some(mut pass) = self
                    .asked(
                        outside,
                        Direction::Inbound,
                        noted,
                        &collected,
                        &mut inspected,
                    )
                    .await
            {
                pass.message(&self.rules, &mut request.message, request.metadata.as_mut());
            }
            if inspected.verdict.masked() {
                request.as_received = Some(sent);
                request.masked_by = (inspected.verdict.findings.iter())
                    .filter(|f| f.action == Action::Mask)
                    .map(|f| f.rule.to_string())
                    .collect();
            }
        }
        self.recorded(Direction::Inbound, &inspected.verdict, noted);
        match (&inspected.verdict.denied, inspected.withheld) {
            (Some(rule), _) => Err(A2aError::ContentDenied {
                rule: rule.to_string(),
            }),
            (None, true) => Err(A2aError::ContentUninspected),
            (None, false) => Ok(()),
        }
    }

    /// An answer's text, parts and artifacts for `noted`'s peer, masked in place; whether
    /// the rules or the inspector withhold it.
    pub async fn outbound(
        &self,
        noted: Noted<'_>,
        (mut text, parts, artifacts): (Option<&mut String>, &mut [Part], &mut [Artifact]),
    ) -> Inspected {
        let outside = self.outside(Direction::Outbound);
        let peer = noted.peer.name();
        let mut inspection = match outside {
            Some(_) => self.rules.inspect_collecting(Direction::Outbound, peer),
            None => self.rules.inspect(Direction::Outbound, peer),
        };
        if let Some(text) = text.as_deref_mut() {
            inspection.text(text);
        }
        inspection.parts(&self.rules, parts);
        inspection.artifacts(&self.rules, artifacts);
        let collected = inspection.collected();
        let mut inspected = Inspected {
            verdict: inspection.verdict(),
            withheld: false,
        };
        if let Some(outside) = outside.filter(|_| inspected.verdict.denied.is_none())
            && let Some(mut pass) = self
                .asked(
                    outside,
                    Direction::Outbound,
                    noted,
                    &collected,
                    &mut inspected,
                )
                .await
        {
            if let Some(text) = text {
                pass.text(text);
            }
            pass.parts(&self.rules, parts);
            pass.artifacts(&self.rules, artifacts);
        }
        inspected.withheld |= inspected.verdict.denied.is_some();
        self.recorded(Direction::Outbound, &inspected.verdict, noted);
        inspected
    }

    /// The inspector's decision on the texts `collected` lists, added to `inspected`: when it
    /// masks, the pass that applies its replacements to what was read (run it over the same
    /// message or answer); a failure counted and decided by the failure mode.
    async fn asked(
        &self,
        outside: &Inspector,
        direction: Direction,
        noted: Noted<'_>,
        collected: &Collected,
        inspected: &mut Inspected,
    ) -> Option<Inspection<'_>> {
        let texts = &collected.texts;
        let finding = |rule: &Arc<str>, action, count| Finding {
            rule: rule.clone(),
            action,
            count,
        };
        match outside
            .ask(direction, noted.peer.id().as_str(), texts)
            .await
        {
            Ok(Decision::Pass) => None,
            Ok(Decision::Deny { rule }) => {
                inspected
                    .verdict
                    .findings
                    .push(finding(&rule, Action::Deny, 1));
                inspected.verdict.denied = Some(rule);
                None
            }
            Ok(Decision::Mask { rule, replacements }) => {
                let count = u32::try_from(replacements.len()).unwrap_or(u32::MAX);
                inspected
                    .verdict
                    .findings
                    .push(finding(&rule, Action::Mask, count));
                let replacements: Replacements = (replacements.into_iter())
                    .map(|(index, text)| (index, (texts[index].clone(), text)))
                    .collect();
                Some((self.rules).replace(direction, replacements, &collected.files))
            }
            Err(error) => {
                let mode = self.params.failure_mode;
                let closed = mode == FailureMode::Closed;
                tracing::warn!(direction = direction.as_str(), error = %error, closed, "the content inspector gave no decision");
                let label = if closed { "closed" } else { "open" };
                self.metrics.verdicts().failed(direction.as_str(), label);
                inspected.withheld |= closed;
                None
            }
        }
    }

    /// A stream's text under the outbound rules for `peer` (by name), piece by piece.
    pub fn streamed_text<'a>(&'a self, peer: &'a str) -> crate::content::stream::StreamedText<'a> {
        let inspection = self.rules.look(Direction::Outbound, peer);
        crate::content::stream::StreamedText::new(
            inspection,
            crate::content::stream::DEFAULT_OVERLAP,
        )
    }

    /// Counts, notes and (a denial) audits `verdict`.
    fn recorded(&self, direction: Direction, verdict: &Verdict, noted: Noted<'_>) {
        if verdict.findings.is_empty() {
            return;
        }
        let counted = self.metrics.verdicts();
        for finding in &verdict.findings {
            let action = finding.action.as_str();
            counted.matched(
                direction.as_str(),
                &finding.rule,
                action,
                finding.count.into(),
            );
        }
        let summary = verdict.summary();
        if let Some(note) = noted.note {
            note.content(direction == Direction::Outbound, &summary);
        }
        if let Some(trace) = noted.trace {
            let key = match direction {
                Direction::Inbound => crate::telemetry::conventions::CONTENT_INBOUND,
                Direction::Outbound => crate::telemetry::conventions::CONTENT_OUTBOUND,
            };
            trace.note([opentelemetry::KeyValue::new(key, summary.clone())]);
        }
        if let Some(rule) = &verdict.denied {
            self.audit_denial(direction, rule, noted);
        }
    }

    fn audit_denial(&self, direction: Direction, rule: &str, noted: Noted<'_>) {
        let peer = noted.peer;
        let key = format!(
            "content\0{}\0{rule}\0{}",
            peer.id().as_str(),
            direction.as_str()
        );
        self.audit.first_a_minute(key, || AuditEntry {
            at: self.clock.now(),
            actor: AuditActor::Peer(peer.name().to_owned()),
            action: AuditAction::PeerContentDenied,
            target: AuditTarget::Peer(peer.name().to_owned()),
            outcome: AuditOutcome::Denied(rule.to_owned()),
            client: noted.client.to_owned(),
            detail: format!(
                "{} content denied by rule {rule} ({}); later denials by this rule within a minute are counted in metrics only",
                direction.as_str(),
                self.rules.versions().join(", ")
            ),
            owner_id: Some(peer.owner_id().to_owned()),
        });
    }
}

/// The *inspect* stage over a [`ContentGuard`]: a partner's message, before its operation.
pub struct ContentStage {
    guard: Arc<ContentGuard>,
}

impl ContentStage {
    /// The stage over `guard`.
    pub fn new(guard: Arc<ContentGuard>) -> Self {
        Self { guard }
    }
}

#[async_trait::async_trait]
impl CallStages for ContentStage {
    async fn inspect_request(
        &self,
        call: &CallView,
        request: &mut A2aRequest,
    ) -> Result<(), CallRefused> {
        let (A2aRequest::SendMessage(message) | A2aRequest::SendStreamingMessage(message)) =
            request
        else {
            return Ok(());
        };
        if !self.guard.inspects(Direction::Inbound) {
            return Ok(());
        }
        let client = client_of(call);
        let noted = Noted {
            peer: &call.peer,
            note: call.note.as_deref(),
            trace: call.trace.as_deref(),
            client: &client,
        };
        self.guard
            .inbound(noted, message)
            .await
            .map_err(CallRefused::Protocol)
    }
}
