//! The *seal* of a finished task: its receipt ([`crate::jose::receipt`]), put in the task's
//! `metadata` under [`EXTENSION`] before the task's final state is written, so the receipt is
//! stored in the same transaction as the state it proves and leaves only with it. `GetTask`
//! answers the stored task, so a finished task's receipt is the same on every read.
//!
//! Why here and not in the pipeline's *seal* stage ([`crate::a2a::stages`]): that stage sees
//! the answer after it is stored, and a receipt must be written with the state it proves.
//! What it costs a sealed SendMessage: two digests (about 32 µs), one EdDSA signature (about
//! 26 µs), and the answer log's row in the exchange's transaction (with its integrator, about
//! 15 % of the echo backend's throughput); nothing when receipts are off (BENCHMARKS, "Answer
//! receipts", and decision 0015).

use crate::clock::Timestamp;
use crate::jose::receipt::{EventChain, ReceiptSigner, Statement, answer_digest, message_digest};
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::call::Binding;
use crate::protocol::error::A2aError;
use crate::protocol::types::{IncomingMessage, IncomingPart, Task};
use crate::store::IssuedReceipt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::Digest;
use std::borrow::Cow;
use std::sync::{Arc, RwLock};

pub use crate::jose::receipt::EXTENSION;

/// `receipts.mode`: which finished tasks get a receipt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptMode {
    /// None.
    #[default]
    Off,
    /// Those of calls that activate [`EXTENSION`] (`A2A-Extensions`).
    OnRequest,
    /// Every one; a task whose receipt cannot be made is still answered.
    Always,
    /// Every one, and no answer without its receipt: a task whose receipt cannot be made or
    /// stored is not answered.
    Required,
}

/// `[receipts]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptSettings {
    /// Which finished tasks get a receipt.
    #[serde(default)]
    pub mode: ReceiptMode,
    /// The Ed25519 key (PKCS#8 PEM) that signs the answer log's checkpoints: never a receipt
    /// key. Without it, one is generated in the data directory.
    #[serde(default)]
    pub log_key_file: Option<std::path::PathBuf>,
    /// Log keys that no longer sign (PKCS#8 PEM files, read for their public half): the
    /// checkpoints they signed stay the log's, and the card keeps naming them, for as long as
    /// receipts under those checkpoints are kept.
    #[serde(default)]
    pub retired_log_key_files: Vec<std::path::PathBuf>,
}

impl ReceiptSettings {
    /// The key that signs the log's checkpoints: the named file's, or the data directory's.
    pub fn load_log_key(
        &self,
        data_dir: &std::path::Path,
    ) -> Result<ed25519_dalek::SigningKey, String> {
        let read = match &self.log_key_file {
            Some(path) => crate::jose::keys::read_ed25519(path),
            None => crate::jose::keys::default_log_key(data_dir),
        };
        read.map_err(|e| format!("receipts.log_key_file: {e}"))
    }

    /// The public halves of the retired log keys.
    pub fn retired_log_keys(&self) -> Result<Vec<ed25519_dalek::VerifyingKey>, String> {
        (self.retired_log_key_files.iter())
            .map(|path| {
                crate::jose::keys::read_ed25519(path)
                    .map(|key| key.verifying_key())
                    .map_err(|e| format!("receipts.retired_log_key_files: {e}"))
            })
            .collect()
    }
}

/// The gateway's receipts: the signer, the mode, and the digest of the signed card in force.
#[derive(Debug)]
pub struct Receipts {
    signer: ReceiptSigner,
    mode: ReceiptMode,
    card: RwLock<Arc<str>>,
    /// Every key a kept receipt may be signed with (the signing one and the retiring ones),
    /// as (kid, alg): what the card names.
    published: Vec<(String, &'static str)>,
    /// The answer log the receipts are appended to.
    log: Option<crate::a2a::answer_log::AnswerLog>,
}

/// In front of an agent: its task's id (none for an answer given as a message), and what
/// peergate read of its answer (none when the answer was not in A2A 1.0's form).
pub type Upstream<'a> = Option<(
    Option<&'a str>,
    Option<&'a crate::backend::UpstreamEvidence>,
)>;

/// What a call's turn carries to seal its task once finished.
#[derive(Debug, Clone)]
pub struct Sealing {
    binding: Binding,
    method: &'static str,
    message: String,
    request: String,
    received: Timestamp,
    required: bool,
    /// The stream's events so far, when the task's events are streamed.
    events: Option<Arc<std::sync::Mutex<EventChain>>>,
}

impl Sealing {
    /// Digests the events `stream` sends from now on, so the receipt covers them.
    pub(crate) fn chain_events(&mut self, stream: &mut crate::a2a::events::Stream) {
        let chain = Arc::new(std::sync::Mutex::new(EventChain::default()));
        stream.chained(chain.clone());
        self.events = Some(chain);
    }
}

/// The `dig.evt` of a stream that ends with `task`: the events sent so far, then the final
/// events the stream sends for it (the receipt taken out of the last).
fn streamed(
    chain: &std::sync::Mutex<EventChain>,
    task: &Task,
) -> Result<Value, crate::jose::receipt::ReceiptError> {
    let mut chain = crate::locks::Locked::locked(chain).clone();
    for event in crate::a2a::events::final_events(task.clone()) {
        let event = serde_json::to_value(&event)
            .map_err(|e| crate::jose::receipt::ReceiptError::Canonical(e.to_string()))?;
        chain.add(&event)?;
    }
    chain.claim()
}

impl Receipts {
    /// Receipts signed by `signer` in `mode` (not [`ReceiptMode::Off`]), verifiable with the
    /// `published` keys (kid, alg), the signer's among them.
    pub fn new(
        signer: ReceiptSigner,
        mode: ReceiptMode,
        published: Vec<(String, &'static str)>,
    ) -> Self {
        Self {
            signer,
            mode,
            card: RwLock::new(Arc::from("")),
            published,
            log: None,
        }
    }

    /// Receipts appended to `log`: each promises its inclusion, and the card names the log.
    #[must_use]
    pub fn with_log(mut self, log: crate::a2a::answer_log::AnswerLog) -> Self {
        self.signer = self.signer.with_log(log.promise());
        self.log = Some(log);
        self
    }

    /// The answer log, when receipts are logged.
    pub fn log(&self) -> Option<&crate::a2a::answer_log::AnswerLog> {
        self.log.as_ref()
    }

    /// The card's declaration of the extension: optional for a partner, with what verifies
    /// its receipts (the key set, algorithms and key ids), which the card's signature covers.
    pub fn card_extension(&self, jwks_uri: &str) -> Value {
        let mut algs: Vec<&str> = self.published.iter().map(|(_, alg)| *alg).collect();
        algs.sort_unstable();
        algs.dedup();
        let kids: Vec<&str> = self.published.iter().map(|(kid, _)| kid.as_str()).collect();
        let mut params = json!({"jwksUri": jwks_uri, "algs": algs, "kids": kids, "typ": crate::jose::receipt::TYP});
        if let Some(log) = &self.log {
            params["log"] = log.card_params();
        }
        json!({
            "uri": EXTENSION,
            "description": "A signed receipt (a2a-receipt+jwt) in the metadata of every finished task: who asked, what was asked and answered (SHA-256 digests), when, under which card",
            "params": params,
        })
    }

    /// The mode.
    pub fn mode(&self) -> ReceiptMode {
        self.mode
    }

    /// The card now served, signed, as its bytes: receipts name its digest from now on.
    pub fn card_served(&self, signed_card: &[u8]) {
        let digest = crate::jose::receipt::sha256_b64url(signed_card);
        *crate::locks::ReadWriteLocked::write_locked(&self.card) = Arc::from(digest);
    }

    /// How a call of `method` over `binding` with `message`, received at `received`, is
    /// sealed once its task is finished; `None` when it gets no receipt. `as_received` is the
    /// message as sent when the gateway changed it (masked): the receipt digests that.
    pub fn for_call(
        &self,
        (binding, method): (Binding, &'static str),
        activated: &[String],
        (message, as_received): (&IncomingMessage, Option<&Value>),
        received: Timestamp,
    ) -> Result<Option<Sealing>, A2aError> {
        self.sealing(
            (binding, method, activated),
            message.message_id.to_string(),
            || match as_received {
                Some(form) => message_digest(form),
                None => message_digest(&message_form(message)),
            },
            received,
        )
    }

    /// How a `CancelTask` of `task` that ends the task (one waiting for input) is sealed: its
    /// `req` digests the `CancelTaskRequest` (`lf.a2a.v1.CancelTaskRequest`), and it names no
    /// message.
    pub fn for_cancel(
        &self,
        (binding, activated): (Binding, &[String]),
        task: &str,
        received: Timestamp,
    ) -> Result<Option<Sealing>, A2aError> {
        let request = || {
            let form = crate::jose::receipt::protojson(
                &json!({"id": task}),
                "lf.a2a.v1.CancelTaskRequest",
            )?;
            crate::jose::receipt::digest(&form)
        };
        self.sealing(
            (binding, "CancelTask", activated),
            String::new(),
            request,
            received,
        )
    }

    /// A call's sealing, when its mode gives it a receipt: `request` digests what it sent.
    fn sealing(
        &self,
        (binding, method, activated): (Binding, &'static str, &[String]),
        message: String,
        request: impl FnOnce() -> Result<String, crate::jose::receipt::ReceiptError>,
        received: Timestamp,
    ) -> Result<Option<Sealing>, A2aError> {
        let asked = activated.iter().any(|uri| uri == EXTENSION);
        if self.mode == ReceiptMode::Off || (self.mode == ReceiptMode::OnRequest && !asked) {
            return Ok(None);
        }
        let request = match request() {
            Ok(request) => request,
            Err(e) if self.mode == ReceiptMode::Required => return Err(internal(e)),
            // The call is answered without a receipt rather than refused.
            Err(e) => {
                tracing::error!(error = %e, "a request could not be digested for its receipt");
                return Ok(None);
            }
        };
        Ok(Some(Sealing {
            binding,
            method,
            message,
            request,
            received,
            required: self.mode == ReceiptMode::Required,
            events: None,
        }))
    }

    /// Puts the receipt of `task`, finished at `now` for `peer`, in its metadata. A receipt
    /// that cannot be made is an error under [`ReceiptMode::Required`], else logged.
    pub fn seal(
        &self,
        sealing: &Sealing,
        (peer, upstream): (&AuthenticatedPeer, Upstream<'_>),
        task: &mut Task,
        now: Timestamp,
    ) -> Result<Option<IssuedReceipt>, A2aError> {
        let made = (|| {
            let events = match &sealing.events {
                Some(chain) => Some(streamed(chain, task)?),
                None => None,
            };
            let up = upstream.map(|(task, evidence)| upstream_claim(task, evidence));
            let facts = self.facts(sealing, peer);
            self.sign(facts, peer.id().as_str(), task, now, (events, up))
        })();
        match made {
            Ok(signed) => Ok(Some(attach(task, signed))),
            Err(e) if sealing.required => Err(internal(e)),
            Err(e) => {
                tracing::error!(error = %e, task = %task.id, "a finished task went without its receipt");
                Ok(None)
            }
        }
    }

    /// What a call sealed by `sealing` states of itself, as JSON: kept with its task's working
    /// state, so a task failed without its turn (a crash, an instance gone, a turn dropped) is
    /// sealed too ([`Receipts::seal_kept`]).
    pub fn kept(&self, sealing: &Sealing, peer: &AuthenticatedPeer) -> Option<String> {
        serde_json::to_string(&self.facts(sealing, peer)).ok()
    }

    /// Puts in `task`'s metadata the receipt of a task failed without its turn (interrupted),
    /// at `now`, from what its working state kept ([`Receipts::kept`]): without `evt` (its
    /// stream, if it had one, never reached its end) and without `up` (no agent answered).
    /// A receipt that cannot be made is logged: the task is failed all the same, since a task
    /// left working would never end.
    pub fn seal_kept(
        &self,
        kept: &str,
        peer_id: &str,
        task: &mut Task,
        now: Timestamp,
    ) -> Option<IssuedReceipt> {
        let made = serde_json::from_str::<CallFacts>(kept)
            .map_err(|e| crate::jose::receipt::ReceiptError::Canonical(e.to_string()))
            .and_then(|facts| self.sign(facts, peer_id, task, now, (None, None)));
        match made {
            Ok(signed) => Some(attach(task, signed)),
            Err(e) => {
                tracing::error!(error = %e, task = %task.id, "an interrupted task went without its receipt");
                None
            }
        }
    }

    /// What the call states of itself, for `peer`, under the card in force now.
    fn facts(&self, sealing: &Sealing, peer: &AuthenticatedPeer) -> CallFacts {
        CallFacts {
            binding: Cow::Borrowed(binding_name(sealing.binding)),
            method: Cow::Borrowed(sealing.method),
            message: sealing.message.clone(),
            request: sealing.request.clone(),
            received: sealing.received.as_millisecond(),
            credential: peer.signed_in_with().claim(peer.scheme()),
            card: crate::locks::ReadWriteLocked::read_locked(&self.card).to_string(),
        }
    }

    /// Signs `task`'s receipt for `peer_id` at `now`: what the call stated, the task, and a
    /// stream's events and an agent's evidence, when there are.
    fn sign(
        &self,
        facts: CallFacts,
        peer_id: &str,
        task: &Task,
        now: Timestamp,
        (events, upstream): (Option<Value>, Option<Value>),
    ) -> Result<(String, String), crate::jose::receipt::ReceiptError> {
        let canonical = |e: &dyn std::fmt::Display| {
            crate::jose::receipt::ReceiptError::Canonical(e.to_string())
        };
        let answer = serde_json::to_value(task).map_err(|e| canonical(&e))?;
        let statement = Statement {
            binding: facts.binding,
            method: facts.method,
            task: task.id.to_string(),
            context: task.context_id.to_string(),
            message: facts.message,
            state: task.status.state.as_str(),
            received: Timestamp::from_millisecond(facts.received).map_err(|e| canonical(&e))?,
            answered: now,
            credential: facts.credential,
            card: facts.card,
            request: facts.request,
            answer: answer_digest(&answer)?,
            events,
            upstream,
        };
        Ok(self.signer.issue(peer_id, &statement, now))
    }
}

/// What a call states of itself in its receipt, besides the task: kept, as JSON, with the
/// task's working state. `card` is the digest of the card in force when the call came.
#[derive(Debug, Serialize, Deserialize)]
struct CallFacts {
    binding: Cow<'static, str>,
    method: Cow<'static, str>,
    message: String,
    request: String,
    /// When the request arrived, in milliseconds since the epoch.
    received: i64,
    credential: Value,
    card: String,
}

/// Puts `receipt` (its `jti` and JWS) in `task`'s metadata; what the store keeps of it.
fn attach(task: &mut Task, (jti, receipt): (String, String)) -> IssuedReceipt {
    let mut metadata = match task.metadata.take() {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let entry = sha2::Sha256::digest(receipt.as_bytes()).into();
    metadata.insert(EXTENSION.to_owned(), Value::String(receipt.clone()));
    task.metadata = Some(Value::Object(metadata));
    IssuedReceipt {
        jti,
        jws: receipt,
        entry,
    }
}

/// `up`: the agent's task, and digests of its answer and of its own receipt, when known.
fn upstream_claim(
    task: Option<&str>,
    evidence: Option<&crate::backend::UpstreamEvidence>,
) -> Value {
    let mut up = json!({});
    if let Some(task) = task {
        up["task"] = json!(task);
    }
    if let Some(evidence) = evidence {
        up["ans"] = json!(evidence.answer);
        if let Some(receipt) = &evidence.receipt {
            up["rcpt"] = json!(receipt);
        }
    }
    up
}

/// The card's name for a binding (`AgentInterface.protocolBinding`).
fn binding_name(binding: Binding) -> &'static str {
    match binding {
        Binding::JsonRpc => "JSONRPC",
        Binding::HttpJson => "HTTP+JSON",
        Binding::Grpc => "GRPC",
    }
}

/// The partner's message in A2A 1.0's ProtoJSON form, whichever binding and version of the
/// protocol it came in: what `dig.req` digests.
pub fn message_form(message: &IncomingMessage) -> Value {
    let mut form = json!({
        "messageId": message.message_id.as_str(),
        "role": message.role,
        "parts": message.parts.iter().map(part_form).collect::<Vec<_>>(),
    });
    if let Some(context) = &message.context_id {
        form["contextId"] = json!(context.as_str());
    }
    if let Some(task) = &message.task_id {
        form["taskId"] = json!(task.as_str());
    }
    if let Some(metadata) = &message.metadata {
        form["metadata"] = metadata.clone();
    }
    if !message.extensions.is_empty() {
        form["extensions"] = json!(message.extensions);
    }
    if !message.reference_task_ids.is_empty() {
        form["referenceTaskIds"] = json!(message.reference_task_ids);
    }
    form
}

/// A part in 1.0's form (0.3's file part as 1.0's `raw` or `url`).
fn part_form(part: &IncomingPart) -> Value {
    let legacy = part.file.as_ref();
    // A 1.0 member, else its 0.3 file part's counterpart.
    let either =
        |own: &Option<String>, old: fn(&crate::protocol::types::LegacyFile) -> &Option<String>| {
            own.clone()
                .or_else(|| legacy.and_then(|f| old(f).clone()))
                .map(Value::String)
        };
    let members = [
        ("text", part.text.clone().map(Value::String)),
        ("raw", either(&part.raw, |f| &f.bytes)),
        ("url", either(&part.url, |f| &f.uri)),
        ("data", part.data.clone()),
        ("filename", either(&part.filename, |f| &f.name)),
        ("mediaType", either(&part.media_type, |f| &f.mime_type)),
        ("metadata", part.metadata.clone()),
    ];
    let present = members
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), value?)));
    Value::Object(present.collect())
}

fn internal(e: impl std::fmt::Display) -> A2aError {
    A2aError::internal(&e, "the task's receipt could not be made")
}
